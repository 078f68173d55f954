//! Who holds recorded work on an array and how that work uses it: [`Access`] (read or write),
//! the [`Recorder`] and its [`RecorderKind`], and [`ArrayDescription`], an array as a refusal
//! names it. Arrays keep marks in these words and errors report them, so they live below both:
//! the error type names them here without naming the arrays they describe.

/// The high bit of a user recorder's number marks a capture ([`crate::Capture`]): refusals name
/// it as `Capture #N`, not `Sequence #N`.
pub(crate) const CAPTURE_RECORDER_BIT: u64 = 1 << 63;

/// The next bit marks an app's work ([`crate::AppWork`]): refusals name it as `AppWork #N`.
pub(crate) const APP_WORK_RECORDER_BIT: u64 = 1 << 62;

/// How recorded work uses an array: the two kinds of use the recording model tells apart,
/// since two reads commute and a write does not commute with anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    /// The work only reads the array.
    Read,
    /// The work writes the array (and may read it).
    Write,
}

/// The kinds of user recorder that hold recorded work until it is submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecorderKind {
    /// A [`crate::Sequence`] (from `Context::sequence`), ended by `submit()`.
    Sequence,
    /// A step being captured ([`crate::Capture`], from `Context::capture`), ended by
    /// `finish()`.
    Capture,
    /// An app's own work ([`crate::AppWork`], from `Context::app_work`), ended by `submit()`.
    AppWork,
}

impl RecorderKind {
    /// The call that makes a recorder of this kind.
    pub fn made_by(self) -> &'static str {
        match self {
            RecorderKind::Sequence => "Context::sequence",
            RecorderKind::Capture => "Context::capture",
            RecorderKind::AppWork => "Context::app_work",
        }
    }

    /// The call that ends its recording (`submit()` or `finish()`).
    pub fn ends(self) -> &'static str {
        match self {
            RecorderKind::Capture => "finish()",
            RecorderKind::Sequence | RecorderKind::AppWork => "submit()",
        }
    }

    /// The state that call leaves it in (`submitted` or `finished`).
    pub(crate) fn ended(self) -> &'static str {
        match self {
            RecorderKind::Capture => "finished",
            RecorderKind::Sequence | RecorderKind::AppWork => "submitted",
        }
    }
}

impl std::fmt::Display for RecorderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecorderKind::Sequence => "Sequence",
            RecorderKind::Capture => "Capture",
            RecorderKind::AppWork => "AppWork",
        })
    }
}

/// One user recorder: its kind and its number (numbers count up per kind family from 1).
/// Displays as `Sequence #3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Recorder {
    /// What kind of recorder it is.
    pub kind: RecorderKind,
    /// Its number, as in `Sequence #3`.
    pub number: u64,
}

impl Recorder {
    /// The recorder a pending mark's number stands for (the high bits give the kind).
    pub(crate) fn from_mark(mark: u64) -> Recorder {
        let kind = if mark & CAPTURE_RECORDER_BIT != 0 {
            RecorderKind::Capture
        } else if mark & APP_WORK_RECORDER_BIT != 0 {
            RecorderKind::AppWork
        } else {
            RecorderKind::Sequence
        };
        Recorder {
            kind,
            number: mark & !(CAPTURE_RECORDER_BIT | APP_WORK_RECORDER_BIT),
        }
    }
}

impl std::fmt::Display for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} #{}", self.kind, self.number)
    }
}

/// An array as an error names it: element type, shape and label, where known. Displays as
/// `the f32 [4, 8] array "weights"`, the label quoted with its own quotes, backslashes and
/// line breaks escaped (`"say \"hi\""`), so a message stays one line that shows where the
/// label ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayDescription {
    /// `std::any::type_name` of the element type; `None` when the array is no longer known.
    pub dtype: Option<&'static str>,
    /// The array's shape; `None` when the array is no longer known.
    pub shape: Option<Vec<usize>>,
    /// The array's label (`DeviceArray::with_label`), if it has one.
    pub label: Option<String>,
}

impl std::fmt::Display for ArrayDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.dtype, &self.shape) {
            (Some(dtype), Some(shape)) => write!(f, "the {dtype} {shape:?} array")?,
            _ => f.write_str("the array")?,
        }
        match &self.label {
            Some(label) => write!(f, " {label:?}"),
            None => f.write_str(" (no label: DeviceArray::with_label gives one)"),
        }
    }
}

/// What a recorder recorded on an array, in the refusal's words.
pub(crate) fn recorded_text(recorded: &Access) -> &'static str {
    match recorded {
        Access::Write => "a write to it",
        Access::Read => "a read of it",
    }
}

/// The refusal's other way out, where there is one: recording `operation` in the recorder,
/// for the operations a [`crate::Sequence`] and a capture record under the same name. An
/// [`RecorderKind::AppWork`] records no ops; host reads, copies to another context, captured
/// runs, collectives and hand-outs are no op of a recorder.
pub(crate) fn record_in_text(kind: &RecorderKind, operation: &str) -> String {
    const RECORDED: [&str; 9] = [
        "launch",
        "copy",
        "fill",
        "fill_in_place",
        "dynamic_slice",
        "dynamic_update_slice",
        "dynamic_update_slice_copy",
        "offload",
        "prefetch",
    ];
    match *kind != RecorderKind::AppWork && RECORDED.contains(&operation) {
        true => format!(", or record {operation} in it"),
        false => String::new(),
    }
}

/// What a single op's `access` would do to work that `recorded` the array, in the refusal's
/// words.
pub(crate) fn overtakes_text(recorded: &Access, access: &Access) -> &'static str {
    match (recorded, access) {
        (Access::Write, Access::Read) => {
            "would read it before that write (and see the values from before it)"
        }
        (Access::Write, Access::Write) => "would write it before that write",
        (Access::Read, _) => {
            "writes it and would run before that read (which would see the new values)"
        }
    }
}
