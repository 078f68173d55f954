//! The one place the examples' raw wgpu peers get a write target in arena memory
//! (`bench_update`, `device_report`): shared so that no example computes an offset by hand.

use gpu_arena::{wgpu, DeviceArray};

/// Where raw GPU work may write bytes `[start, start + len)` of `array`: its region buffer and
/// the byte offset there, derived from [`DeviceArray::raw_binding`] and checked against the
/// array's own range, never computed by hand (arrays share region buffers, so an offset off by
/// one row writes into a neighbour, silently). The array is borrowed mutably, as a write
/// needs; submit the work with `Context::raw_submit` naming the array in `uses`.
pub fn raw_write_range<T: gpu_arena::bytemuck::Pod>(
    array: &mut DeviceArray<T>,
    start: u64,
    len: u64,
) -> anyhow::Result<(wgpu::Buffer, u64)> {
    let binding = array.raw_binding();
    let size = binding.size.map_or(0, |s| s.get());
    anyhow::ensure!(
        start.checked_add(len).is_some_and(|end| end <= size),
        "bytes {start}+{len} lie outside the array's {size} bytes"
    );
    Ok((binding.buffer.clone(), binding.offset + start))
}
