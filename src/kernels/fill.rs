//! `fill` and `fill_in_place`: every element set to one value.

use super::geometry::{plan_fill, PER_INVOCATION, WORKGROUP};
use super::launch::{Binding, Dispatch, Params};
use super::pipelines::Kernel;
use crate::array::DeviceArray;
use crate::context::Context;
use crate::error::{Error, Result};

/// The fill kernel writes 16-byte patterns, so the element size must divide 16.
const PATTERN_BYTES: usize = 16;

impl Context {
    /// A new array of `shape` with every element `value` (`jnp.full`).
    ///
    /// Errors: [`Error::InvalidArgument`] when the element size does not divide 16 bytes (1, 2,
    /// 4, 8 and 16 do), shape errors and out-of-memory as [`Context::alloc`].
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let ones = ctx.fill(&[2, 3], 1.0f32)?;
    /// assert_eq!(ctx.device_get(&ones)?, [1.0; 6]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    pub fn fill<T: bytemuck::Pod>(&self, shape: &[usize], value: T) -> Result<DeviceArray<T>> {
        let pattern = pattern_of(value, "fill")?;
        let array = self.alloc::<T>(shape)?;
        self.fill_pattern(array, pattern)
    }

    /// Sets every element of the donated `array` to `value`, in place (no allocation), and
    /// returns it.
    ///
    /// Errors: as [`Context::fill`]; on error the donated array is dropped.
    pub fn fill_in_place<T: bytemuck::Pod>(
        &self,
        array: DeviceArray<T>,
        value: T,
    ) -> Result<DeviceArray<T>> {
        array.check_same_context(&self.inner, "fill_in_place")?;
        let pattern = pattern_of(value, "fill_in_place")?;
        self.fill_pattern(array, pattern)
    }

    fn fill_pattern<T: bytemuck::Pod>(
        &self,
        array: DeviceArray<T>,
        pattern: [u32; 4],
    ) -> Result<DeviceArray<T>> {
        let mut kernels = self.inner.kernels.lock();
        if let Some(host) = self.inner.host_path(&kernels, &[&array])? {
            drop(kernels);
            host.fill(0, array.size_in_bytes(), pattern);
            return Ok(array);
        }
        let limits = self.inner.plan_limits(&kernels);
        let dispatches: Vec<Dispatch<'_>> = plan_fill(array.size_in_bytes(), pattern, &limits)
            .into_iter()
            .map(|d| Dispatch {
                kernel: Kernel::Fill,
                bindings: vec![Binding::of(&array, d.dst)],
                params: Params::Fill(d.params),
                per_group: WORKGROUP * PER_INVOCATION,
            })
            .collect();
        self.inner.launch(&mut kernels, &dispatches, &[&array])?;
        drop(dispatches);
        Ok(array)
    }
}

/// `value` repeated over 16 bytes, as four words.
fn pattern_of<T: bytemuck::Pod>(value: T, operation: &'static str) -> Result<[u32; 4]> {
    let bytes = bytemuck::bytes_of(&value);
    if bytes.is_empty() {
        return Ok([0; 4]);
    }
    if !PATTERN_BYTES.is_multiple_of(bytes.len()) {
        return Err(Error::InvalidArgument {
            operation,
            reason: format!(
                "elements of {} bytes ({}) cannot be filled: the element size must divide 16 (1, 2, 4, 8 or 16 bytes)",
                bytes.len(),
                std::any::type_name::<T>()
            ),
        });
    }
    let mut pattern = [0u8; PATTERN_BYTES];
    for chunk in pattern.chunks_mut(bytes.len()) {
        chunk.copy_from_slice(bytes);
    }
    Ok(bytemuck::cast(pattern))
}
