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

/// A wgpu error with its chain of causes.
pub(crate) fn describe_wgpu_error(error: &wgpu::Error) -> String {
    format!("{error}{}", wgpu_error_causes(error))
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
