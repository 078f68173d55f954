//! wgpu errors as `Result`s: validation, out-of-memory and internal errors raised while a
//! pipeline is made or commands are encoded are caught in error scopes and returned to the
//! caller, instead of reaching the device's uncaptured-error handler (which only logs).

/// What the device (or the encoder) refused while work was made, encoded or submitted: its
/// kind, which a caller may act on, and the text for the user's error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct DeviceRefusal {
    /// Which error scope caught it, or an encoding the crate refused itself.
    pub(crate) kind: RefusalKind,
    /// wgpu's text on one line, each cause once ([`describe_wgpu_error`]), or the crate's.
    pub(crate) message: String,
}

/// The kinds of [`DeviceRefusal`]: wgpu's three error filters, and the crate's own refusal to
/// encode a step that cannot be encoded (a bug in the crate, reported rather than recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefusalKind {
    /// A validation error (a bad binding, a buffer destroyed through the escape hatch).
    Validation,
    /// The device ran out of memory.
    OutOfMemory,
    /// An internal error of wgpu or the driver.
    Internal,
    /// A step the encoder cannot encode.
    Encoding,
    /// A wait for the device, or a mapping of a buffer, that failed.
    Wait,
}

impl DeviceRefusal {
    /// The refusal `error` stands for.
    pub(crate) fn from_wgpu(error: &wgpu::Error) -> Self {
        let kind = match error {
            wgpu::Error::OutOfMemory { .. } => RefusalKind::OutOfMemory,
            wgpu::Error::Validation { .. } => RefusalKind::Validation,
            _ => RefusalKind::Internal,
        };
        Self {
            kind,
            message: describe_wgpu_error(error),
        }
    }

    /// The encoder's own refusal of a step, in the crate's words.
    pub(crate) fn encoding(message: impl Into<String>) -> Self {
        Self {
            kind: RefusalKind::Encoding,
            message: message.into(),
        }
    }

    /// A failed wait or mapping, in wgpu's words.
    pub(crate) fn wait(error: impl std::fmt::Display) -> Self {
        Self {
            kind: RefusalKind::Wait,
            message: error.to_string(),
        }
    }
}

/// The three error scopes of one piece of work, innermost last.
pub(crate) struct ErrorScopes {
    scopes: [wgpu::ErrorScopeGuard; 3],
}

impl ErrorScopes {
    /// Opens the scopes on this thread (wgpu's error scopes are per thread).
    pub(crate) fn push(device: &wgpu::Device) -> Self {
        Self {
            scopes: [
                device.push_error_scope(wgpu::ErrorFilter::Internal),
                device.push_error_scope(wgpu::ErrorFilter::OutOfMemory),
                device.push_error_scope(wgpu::ErrorFilter::Validation),
            ],
        }
    }

    /// Closes the scopes; the first error caught, with its kind and causes.
    pub(crate) fn pop(self) -> Result<(), DeviceRefusal> {
        self.pop_error()
            .map_or(Ok(()), |error| Err(DeviceRefusal::from_wgpu(&error)))
    }

    /// Closes the scopes; the first error caught, for callers that word it themselves.
    pub(crate) fn pop_error(self) -> Option<wgpu::Error> {
        let mut first = None;
        // Innermost first, as wgpu requires.
        for scope in self.scopes.into_iter().rev() {
            if let Some(error) = pollster::block_on(scope.pop()) {
                first.get_or_insert(error);
            }
        }
        first
    }
}

/// A wgpu error on one line, each cause once: wgpu's own text already spells out its chain of
/// causes over several lines ("Validation Error\n\nCaused by:\n  ..."), and the same causes
/// come again through `source()`, so this keeps the heading (its first line) and then each
/// cause of the chain, skipping one whose text is already there.
pub(crate) fn describe_wgpu_error(error: &wgpu::Error) -> String {
    let full = error.to_string();
    let mut text = full
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or_default()
        .to_string();
    let mut source = std::error::Error::source(error);
    if source.is_none() {
        // No chain to rebuild: wgpu's text is all there is, folded onto one line.
        return one_line(&full);
    }
    while let Some(cause) = source {
        let cause_text = one_line(&cause.to_string());
        if !cause_text.is_empty() && !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// `text` with its lines trimmed and joined by spaces.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The causes of a wgpu error on one line, each after ": " (empty without any): for a warning
/// that says what went wrong without wgpu's multi-line "Validation Error" heading.
pub(crate) fn wgpu_error_causes(error: &wgpu::Error) -> String {
    let mut text = String::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{describe_wgpu_error, DeviceRefusal, RefusalKind};

    #[test]
    fn a_refusal_keeps_the_kind_of_the_scope_that_caught_it_and_its_text() {
        let out_of_memory = wgpu::Error::OutOfMemory {
            source: Box::new(Chained("Not enough memory left.", None)),
        };
        let refusal = DeviceRefusal::from_wgpu(&out_of_memory);
        assert_eq!(refusal.kind, RefusalKind::OutOfMemory);
        assert_eq!(refusal.to_string(), describe_wgpu_error(&out_of_memory));
        let validation = wgpu::Error::Validation {
            source: Box::new(Chained("Buffer is destroyed", None)),
            description: "Validation Error".into(),
        };
        assert_eq!(
            DeviceRefusal::from_wgpu(&validation).kind,
            RefusalKind::Validation
        );
        let internal = wgpu::Error::Internal {
            source: Box::new(Chained("driver", None)),
            description: "Internal Error".into(),
        };
        assert_eq!(
            DeviceRefusal::from_wgpu(&internal).kind,
            RefusalKind::Internal
        );
        assert_eq!(DeviceRefusal::wait("timed out").kind, RefusalKind::Wait);
        assert_eq!(DeviceRefusal::encoding("unstaged").to_string(), "unstaged");
    }

    /// An error with a source, as wgpu-core's are chained.
    #[derive(Debug)]
    struct Chained(&'static str, Option<Box<Chained>>);

    impl std::fmt::Display for Chained {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Chained {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|c| c as _)
        }
    }

    #[test]
    fn a_wgpu_error_is_described_on_one_line_with_each_cause_once() {
        // wgpu's own text spells the chain out over several lines, and `source()` gives it again.
        let error = wgpu::Error::Validation {
            source: Box::new(Chained(
                "In Device::create_compute_pipeline, label = 'main'",
                Some(Box::new(Chained(
                    "Error matching shader requirements against the pipeline",
                    Some(Box::new(Chained("Workgroup size is too large", None))),
                ))),
            )),
            description: "Validation Error\n\nCaused by:\n  In Device::create_compute_pipeline, label = 'main'\n    Error matching shader requirements against the pipeline\n      Workgroup size is too large\n".into(),
        };
        assert_eq!(
            describe_wgpu_error(&error),
            "Validation Error: In Device::create_compute_pipeline, label = 'main': Error matching shader requirements against the pipeline: Workgroup size is too large"
        );
    }

    #[test]
    fn a_cause_already_in_wgpus_heading_is_not_repeated() {
        let error = wgpu::Error::Internal {
            source: Box::new(Chained("lost", None)),
            description: "Internal error\n  lost".into(),
        };
        // `source()` of wgpu's error is its `source` field: "lost", already in the text.
        assert_eq!(describe_wgpu_error(&error), "Internal error: lost");
    }
}
