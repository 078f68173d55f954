//! Copies and fills on the host for CPU adapters (lavapipe, SwiftShader, WARP).
//!
//! There the device's memory is host memory (the arena maps it, zero-copy) and "kernels" run on
//! the host's own cores through a shader compiler that vectorises for the CPU: on lavapipe a copy
//! kernel moves 2 to 5 GB/s where `memcpy` moves 10 to 15. So on a CPU adapter, when every
//! array is mapped, the ops wait for the GPU work that uses their arrays and copy with `memcpy`,
//! threaded like the transfers: what JAX's CPU backend does for these ops. GPUs, and CPU
//! adapters without zero-copy, run the WGSL kernels.
#![allow(unsafe_code)]

use super::geometry::BoxCopy;
use super::pipelines::KernelState;
use crate::array::DeviceArray;
use crate::context::ContextInner;
use crate::error::Result;

/// The host addresses of the arrays of one op, when it should run on the host.
pub(crate) struct HostArrays(Vec<*mut u8>);

impl ContextInner {
    /// The arrays' mapped addresses when this op should copy on the host (a CPU adapter, every
    /// array mapped, device kernels not forced), after waiting for the GPU work that uses them.
    pub(crate) fn host_path<T: bytemuck::Pod>(
        &self,
        kernels: &KernelState,
        arrays: &[&DeviceArray<T>],
    ) -> Result<Option<HostArrays>> {
        if kernels.force_device_kernels || self.adapter_info.device_type != wgpu::DeviceType::Cpu {
            return Ok(None);
        }
        let Some(pointers) = arrays
            .iter()
            .map(|a| a.storage.host_ptr())
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        for array in arrays {
            self.wait_for(array.last_use())?;
        }
        Ok(Some(HostArrays(pointers)))
    }
}

impl HostArrays {
    /// Copies `copy` from array `src` to array `dst` (indices into the arrays given to
    /// [`ContextInner::host_path`]).
    pub(crate) fn copy(&self, src: usize, dst: usize, copy: &BoxCopy) {
        if copy.is_empty() {
            return;
        }
        let copy = copy.normalized();
        let (src, dst) = (self.0[src] as *const u8, self.0[dst]);
        let rows: u64 = copy.outer.iter().map(|d| d.count).product();
        for row in 0..rows {
            let (mut s, mut d) = (copy.src_offset, copy.dst_offset);
            let mut rest = row;
            for dim in copy.outer.iter().rev() {
                let index = rest % dim.count;
                rest /= dim.count;
                s += index * dim.src_stride;
                d += index * dim.dst_stride;
            }
            // SAFETY: `host_path` gave mapped addresses of live arrays whose GPU work has
            // completed; the box lies inside both arrays (checked by the op), and two distinct
            // arrays never overlap.
            unsafe {
                // One long row (a contiguous update) is split over threads like a transfer.
                crate::transfer::staging::parallel_copy_to(
                    dst.add(d as usize),
                    std::slice::from_raw_parts(src.add(s as usize), copy.row_bytes as usize),
                )
            };
        }
    }

    /// Fills the first `bytes` of array `dst`, rounded up to 16, with `pattern` (the arena
    /// rounds allocations to 256 bytes, so the rounding stays in the array's own padding).
    pub(crate) fn fill(&self, dst: usize, bytes: u64, pattern: [u32; 4]) {
        let pattern: [u8; 16] = bytemuck::cast(pattern);
        // SAFETY: the array is mapped, idle on the GPU, and its allocation holds at least this
        // many bytes (rounded to 256).
        let out = unsafe {
            std::slice::from_raw_parts_mut(self.0[dst], bytes.next_multiple_of(16) as usize)
        };
        for chunk in out.chunks_exact_mut(16) {
            chunk.copy_from_slice(&pattern);
        }
    }
}
