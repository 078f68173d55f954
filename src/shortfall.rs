//! [`DeviceShortfall`]: one feature, limit or capability an app's device lacks. The context on
//! an app's device finds them and the error that refuses the device carries them, so the value
//! lives below both.

/// One thing a device falls short in ([`Error::DeviceRequirements`](crate::error::Error::DeviceRequirements)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceShortfall {
    /// `limit max_storage_buffers_per_shader_stage`, `features ...`, `downlevel capability ...`.
    pub name: String,
    /// What the device has.
    pub has: String,
    /// What the arena needs.
    pub needs: String,
}

impl std::fmt::Display for DeviceShortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is {}, needs {}", self.name, self.has, self.needs)
    }
}
