//! wgpu errors as `Result`s: validation, out-of-memory and internal errors raised while a
//! pipeline is made or commands are encoded are caught in error scopes and returned to the
//! caller, instead of reaching the device's uncaptured-error handler (which only logs).

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

    /// Closes the scopes; the first error caught, with its causes, as text.
    pub(crate) fn pop(self) -> Result<(), String> {
        self.pop_error()
            .map_or(Ok(()), |error| Err(describe_wgpu_error(&error)))
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
    use super::describe_wgpu_error;

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
