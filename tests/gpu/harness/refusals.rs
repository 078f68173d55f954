//! Checks of the refusals many modules provoke, written once.

use gpu_arena::error::{Access, Recorder, RecorderKind};
use gpu_arena::Error;

/// Asserts that `error` refuses `operation` because its `argument` is pending in an
/// unsubmitted `Sequence` that `recorded` it, the op wanting `access`; and that the message
/// says to submit that sequence first.
#[track_caller]
pub fn assert_pending_in_sequence(
    error: &Error,
    operation: &str,
    argument: &str,
    recorded: Access,
    access: Access,
) {
    assert!(
        matches!(
            error,
            Error::PendingInRecorder {
                operation: refused,
                argument: named,
                recorder: Recorder { kind: RecorderKind::Sequence, .. },
                recorded: what_was_recorded,
                access: what_is_asked,
                ..
            } if *refused == operation
                && named == argument
                && *what_was_recorded == recorded
                && *what_is_asked == access
        ),
        "{error}"
    );
    assert!(error.to_string().contains("call submit()"), "{error}");
}
