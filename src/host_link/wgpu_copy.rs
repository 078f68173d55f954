//! The host link where staging is wgpu's own (GL, Metal, DX12): `queue.write_buffer` on the
//! way in, one mappable buffer per readback on the way out.

use super::port::HostPort;
use super::staged_copy::{ReadbackItem, UploadItem};
use super::staging::COPY_ALIGNMENT;
use crate::error::Result;

/// `queue.write_buffer` for each item: the bytes land at the start of the queue's next
/// submission, before its command buffers. [`super::HostLink::upload`] submits at once; a
/// sequence lets its own submission carry them.
pub(crate) fn queue_writes(port: &impl HostPort, items: &[UploadItem<'_>]) {
    // Arrays that are neighbours in the arena go out as one write (one wgpu staging copy).
    let mut run: Vec<u8> = Vec::new();
    let mut run_start: Option<(&wgpu::Buffer, u64)> = None;
    let flush = |run: &mut Vec<u8>, start: Option<(&wgpu::Buffer, u64)>| {
        if let Some((buffer, offset)) = start {
            run.resize(run.len().next_multiple_of(COPY_ALIGNMENT as usize), 0);
            port.write_buffer(buffer, offset, run);
        }
        run.clear();
    };
    for item in items.iter().filter(|i| !i.data.is_empty()) {
        let continues = run_start.is_some_and(|(buffer, offset)| {
            buffer == item.buffer && offset + run.len() as u64 == item.offset
        });
        if !continues {
            flush(&mut run, run_start.take());
            run_start = Some((item.buffer, item.offset));
        }
        run.extend_from_slice(item.data);
        // Pad to the array's span so the next neighbour lands at its own offset.
        run.resize(run.len() + (item.span as usize - item.data.len()), 0);
    }
    flush(&mut run, run_start);
}

/// Reads every item back with one copy each, in one submission, into one mappable buffer
/// made for it: the readback where staging is wgpu's own, and on Vulkan the one that sees the
/// arrays between two submissions whatever their size (the staging pool takes a submission
/// per staging buffer).
pub(crate) fn readback_at_once(port: &impl HostPort, items: &mut [ReadbackItem<'_>]) -> Result<()> {
    let sizes: Vec<u64> = items
        .iter()
        .map(|i| (i.out.len() as u64).next_multiple_of(COPY_ALIGNMENT))
        .collect();
    let total: u64 = sizes.iter().sum();
    let target = port.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("gpu-arena readback"),
        size: total,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = port.device().create_command_encoder(&Default::default());
    let mut at = 0;
    for (item, &size) in items.iter().zip(&sizes) {
        encoder.copy_buffer_to_buffer(item.buffer, item.offset, &target, at, size);
        at += size;
    }
    port.submit_copies(encoder, "copying arrays for readback", false)?;
    port.read_mapped(&target, "mapping the readback buffer", |view| {
        let mut at = 0usize;
        for (item, &size) in items.iter_mut().zip(&sizes) {
            let len = item.out.len();
            item.out.copy_from_slice(&view[at..at + len]);
            at += size as usize;
        }
    })
}
