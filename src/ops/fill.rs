//! `fill` and `fill_in_place`: every element set to one value.

use super::builtin::{planning_error, Binding, Dispatch, Params};
use super::geometry::plan_fill;
use crate::array::{Access, DeviceArray};
use crate::compute::Sequence;
use crate::context::Context;
use crate::donated::{give_back, Donated, DonatedResult};
use crate::error::{ElementRefusal, Error, Result};
use crate::pipelines::Builtin;

/// The fill kernel writes 16-byte patterns, so the element size must divide 16.
const PATTERN_BYTES: usize = 16;

impl Context {
    /// A new array of `shape` with every element `value` (`jnp.full`).
    ///
    /// Errors: [`Error::Element`] ([`ElementRefusal::FillSize`]) when the element size does not
    /// divide 16 bytes (1, 2, 4, 8 and 16 do; a zero-sized type has nothing to write and is
    /// accepted), shape errors and out-of-memory as [`Context::alloc`].
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(gpu_arena::ArenaConfig::default())?;
    /// let ones = ctx.fill(&[2, 3], 1.0f32)?;
    /// assert_eq!(ctx.device_get(&ones)?, [1.0; 6]);
    /// # Ok::<(), gpu_arena::Error>(())
    /// ```
    #[track_caller]
    pub fn fill<T: bytemuck::Pod>(&self, shape: &[usize], value: T) -> Result<DeviceArray<T>> {
        self.check_eager_op("fill")?;
        let pattern = pattern_of(value, "fill")?;
        let array = self.alloc_as::<T>(crate::memory_kind::MemoryKind::Device, shape, "fill")?;
        self.fill_pattern(array, pattern).map_err(Error::from)
    }

    /// Sets every element of the donated `array` to `value`, in place (no allocation), and
    /// returns it.
    ///
    /// Errors: as [`Context::fill`], and [`Error::ForeignArray`]; **on error the donated array
    /// comes back intact** in [`Donated::array`].
    pub fn fill_in_place<T: bytemuck::Pod>(
        &self,
        array: DeviceArray<T>,
        value: T,
    ) -> DonatedResult<T> {
        let checked = self
            .check_eager_array(&array.storage, Access::Write, "fill_in_place", "the array")
            .and_then(|()| pattern_of(value, "fill_in_place"));
        match checked {
            Ok(pattern) => self.fill_pattern(array, pattern),
            Err(error) => Err(Donated { error, array }),
        }
    }

    fn fill_pattern<T: bytemuck::Pod>(
        &self,
        array: DeviceArray<T>,
        pattern: [u32; 4],
    ) -> DonatedResult<T> {
        let mut sequence = self.single_op();
        let array = sequence.fill_pattern(array, pattern, "fill")?;
        give_back(array, sequence.submit().map(drop))
    }
}

impl Sequence {
    /// [`Context::fill`], recorded.
    #[track_caller]
    pub fn fill<T: bytemuck::Pod>(&mut self, shape: &[usize], value: T) -> Result<DeviceArray<T>> {
        self.ctx.inner.check_device("fill")?;
        let pattern = pattern_of(value, "fill")?;
        let array = self.new_array::<T>(shape, None, "fill")?;
        self.fill_pattern(array, pattern, "fill")
            .map_err(Error::from)
    }

    /// [`Context::fill_in_place`], recorded (the array comes back in the error on failure).
    pub fn fill_in_place<T: bytemuck::Pod>(
        &mut self,
        array: DeviceArray<T>,
        value: T,
    ) -> DonatedResult<T> {
        let pattern = (self.ctx.inner.check_device("fill_in_place"))
            .and_then(|()| pattern_of(value, "fill_in_place"));
        match pattern {
            Ok(pattern) => self.fill_pattern(array, pattern, "fill_in_place"),
            Err(error) => Err(Donated { error, array }),
        }
    }

    fn fill_pattern<T: bytemuck::Pod>(
        &mut self,
        array: DeviceArray<T>,
        pattern: [u32; 4],
        operation: &'static str,
    ) -> DonatedResult<T> {
        match self.host_path_now(&[(&array, Access::Write, "the array")], operation) {
            Ok(Some(host)) => {
                host.fill(0, array.size_in_bytes(), pattern);
                return Ok(array);
            }
            Ok(None) => {}
            Err(error) => return Err(Donated { error, array }),
        }
        let inner = std::sync::Arc::clone(&self.ctx.inner);
        let mut kernels = inner.kernels().lock();
        let limits = inner.plan_limits();
        let planned = match plan_fill(array.size_in_bytes(), pattern, &limits) {
            Ok(planned) => planned,
            Err(reason) => {
                let error = planning_error(operation, reason);
                return Err(Donated { error, array });
            }
        };
        let dispatches: Vec<Dispatch<'_>> = planned
            .into_iter()
            .map(|d| Dispatch {
                kernel: Builtin::Fill,
                shape: self.kernel_shape(&mut kernels, Builtin::Fill, u64::from(d.params.items)),
                bindings: vec![Binding::of(&array, d.dst)],
                params: Params::Fill(d.params),
            })
            .collect();
        let written = [(&array.storage, Access::Write, "the array")];
        let recorded = self.record_builtin(&mut kernels, &dispatches, &written, operation);
        drop(dispatches);
        give_back(array, recorded)
    }
}

/// `value` repeated over 16 bytes, as four words.
fn pattern_of<T: bytemuck::Pod>(value: T, operation: &'static str) -> Result<[u32; 4]> {
    let bytes = bytemuck::bytes_of(&value);
    if bytes.is_empty() {
        return Ok([0; 4]);
    }
    if !PATTERN_BYTES.is_multiple_of(bytes.len()) {
        return Err(Error::Element {
            operation,
            refusal: ElementRefusal::FillSize {
                element: std::any::type_name::<T>(),
                bytes: bytes.len(),
            },
        });
    }
    let mut pattern = [0u8; PATTERN_BYTES];
    for chunk in pattern.chunks_mut(bytes.len()) {
        chunk.copy_from_slice(bytes);
    }
    Ok(bytemuck::cast(pattern))
}
