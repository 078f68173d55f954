//! The copy engine that moves many arrays through the context's staging pool
//! (`staging.rs`) with few, merged copy commands: uploads pack arrays into a staging buffer at
//! the spacing they have in the arena, so neighbours in the arena become one copy command;
//! transfers larger than a staging buffer go through it in pieces, pipelined so that the CPU
//! fills (or drains) one buffer while the GPU copies another.

use super::port::HostPort;
use super::staging::{StagingBuffer, StagingKind, COPY_ALIGNMENT, STAGING_BUFFERS};
use crate::backend::{copy_threads, MappedRange};
use crate::error::Result;
use crate::submission::SubmissionId;

/// One array's part in an upload: its bytes and where they go.
pub(crate) struct UploadItem<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) buffer: &'a wgpu::Buffer,
    pub(crate) offset: u64,
    /// The allocation's size (rounded to 256): the spacing arrays have in the arena.
    pub(crate) span: u64,
}

/// One array's part in a readback.
pub(crate) struct ReadbackItem<'a> {
    pub(crate) out: &'a mut [u8],
    pub(crate) buffer: &'a wgpu::Buffer,
    pub(crate) offset: u64,
    pub(crate) span: u64,
}

/// A copy between a staging buffer and an arena buffer, being built: merged with the next
/// when both sides continue it.
struct StagedCopy<'a> {
    buffer: &'a wgpu::Buffer,
    staging_offset: u64,
    offset: u64,
    len: u64,
}

fn push_copy<'a>(copies: &mut Vec<StagedCopy<'a>>, next: StagedCopy<'a>) {
    if let Some(last) = copies.last_mut() {
        if last.buffer == next.buffer
            && last.offset + last.len == next.offset
            && last.staging_offset + last.len == next.staging_offset
        {
            last.len += next.len;
            return;
        }
    }
    copies.push(next);
}

/// How one item is cut into staging pieces: (item byte offset, bytes of data, bytes to copy,
/// bytes of staging taken). An item that fits whole takes its arena span, so neighbours merge.
fn next_piece(data_len: u64, span: u64, done: u64, room: u64) -> Option<(u64, u64, u64)> {
    let remaining = data_len - done;
    if done == 0 && span <= room && span >= remaining.next_multiple_of(COPY_ALIGNMENT) {
        return Some((remaining, span, span));
    }
    let fits = room - room % COPY_ALIGNMENT;
    if fits == 0 {
        return None;
    }
    let data = remaining.min(fits);
    let copy = data.next_multiple_of(COPY_ALIGNMENT);
    Some((data, copy, copy))
}

/// Bytes to place in a staging buffer: `src` at `offset`, zero-padded to a whole word.
struct Fill<'a> {
    offset: u64,
    src: &'a [u8],
}

/// Writes every fill into the mapped staging buffer, spreading big batches over threads
/// (each thread takes a run of fills of about equal bytes; a huge fill is split itself).
fn fill_staging(mapped: &MappedRange, fills: &[Fill<'_>]) {
    let write = |fill: &Fill<'_>| {
        // Fills lie inside the staging buffer (planned against its size) and do not overlap;
        // no GPU work uses the buffer (acquired after its last use).
        let len = fill.src.len() as u64;
        let padded = len.next_multiple_of(COPY_ALIGNMENT);
        let dst = mapped.sub(fill.offset, padded);
        dst.write(fill.src);
        // Zero the word padding so no stale staging bytes land in the array's tail word.
        dst.sub(len, padded - len).zero();
    };
    let total: usize = fills.iter().map(|f| f.src.len()).sum();
    let threads = copy_threads(total);
    if threads <= 1 || fills.len() < 2 {
        fills.iter().for_each(write);
        return;
    }
    let share = total.div_ceil(threads);
    std::thread::scope(|scope| {
        let mut rest = fills;
        while !rest.is_empty() {
            let mut bytes = 0;
            let take = rest
                .iter()
                .position(|f| {
                    bytes += f.src.len();
                    bytes >= share
                })
                .map_or(rest.len(), |i| i + 1);
            let (group, tail) = rest.split_at(take);
            rest = tail;
            scope.spawn(move || group.iter().for_each(write));
        }
    });
}

/// Uploads every item through the staging pool: one command buffer and one submission per
/// staging buffer filled (one in all for batches that fit). Returns the last submission.
pub(crate) fn upload(ctx: &impl HostPort, items: &[UploadItem<'_>]) -> Result<SubmissionId> {
    let pool = ctx.staging();
    let mut last = SubmissionId(0);
    // The staging buffer being planned: its fills and the copies out of it.
    let mut current: Option<(StagingBuffer, u64, Vec<Fill<'_>>, Vec<StagedCopy<'_>>)> = None;
    let flush = |current: &mut Option<(StagingBuffer, u64, Vec<Fill<'_>>, Vec<StagedCopy<'_>>)>,
                 last: &mut SubmissionId|
     -> Result<()> {
        if let Some((mut staging, _, fills, copies)) = current.take() {
            if !copies.is_empty() {
                fill_staging(&staging.mapped, &fills);
                let mut encoder = ctx.device().create_command_encoder(&Default::default());
                for c in &copies {
                    encoder.copy_buffer_to_buffer(
                        &staging.buffer,
                        c.staging_offset,
                        c.buffer,
                        c.offset,
                        c.len,
                    );
                }
                let submitted = ctx.submit_copies(encoder, "copying uploads out of staging", false);
                if let Ok(id) = submitted {
                    *last = id;
                    staging.busy_until = id;
                }
                pool.release(StagingKind::Upload, staging);
                return submitted.map(drop);
            }
            pool.release(StagingKind::Upload, staging);
        }
        Ok(())
    };
    for item in items {
        let data_len = item.data.len() as u64;
        let mut done = 0;
        while done < data_len {
            let piece = match current.as_ref() {
                Some((staging, cursor, _, _)) => {
                    next_piece(data_len, item.span, done, staging.size - cursor)
                }
                None => None,
            };
            let Some((data, copy, taken)) = piece else {
                flush(&mut current, &mut last)?;
                current = Some((
                    pool.acquire(ctx, StagingKind::Upload)?,
                    0,
                    Vec::new(),
                    Vec::new(),
                ));
                continue;
            };
            let (_, cursor, fills, copies) = current.as_mut().expect("acquired above");
            fills.push(Fill {
                offset: *cursor,
                src: &item.data[done as usize..(done + data) as usize],
            });
            push_copy(
                copies,
                StagedCopy {
                    buffer: item.buffer,
                    staging_offset: *cursor,
                    offset: item.offset + done,
                    len: copy,
                },
            );
            *cursor += taken;
            done += data;
        }
    }
    flush(&mut current, &mut last)?;
    Ok(last)
}

/// A staging buffer whose copies were submitted, waiting to be drained to the host.
struct InFlight {
    staging: StagingBuffer,
    /// (item index, item byte offset, staging offset, bytes)
    pieces: Vec<(usize, u64, u64, u64)>,
}

/// Reads every item back through the staging pool, pipelined: the GPU copies the next staging
/// buffer's worth while the CPU drains the previous one.
pub(crate) fn readback(ctx: &impl HostPort, items: &mut [ReadbackItem<'_>]) -> Result<()> {
    // A host read reports a refusal of the gathered ops first (small uploads among them): were
    // the copies below refused too, their own error would leave it for a later call.
    ctx.flush_gathered()?;
    let pool = ctx.staging();
    let mut in_flight: std::collections::VecDeque<InFlight> = Default::default();
    let (mut next_item, mut next_done) = (0usize, 0u64);
    loop {
        // Keep up to two staging buffers' worth of copies in flight.
        while next_item < items.len() && in_flight.len() < STAGING_BUFFERS - 1 {
            let mut staging = pool.acquire(ctx, StagingKind::Readback)?;
            let mut cursor = 0;
            let mut copies = Vec::new();
            let mut pieces = Vec::new();
            while next_item < items.len() {
                let item = &items[next_item];
                let data_len = item.out.len() as u64;
                if next_done >= data_len {
                    next_item += 1;
                    next_done = 0;
                    continue;
                }
                let Some((data, copy, taken)) =
                    next_piece(data_len, item.span, next_done, staging.size - cursor)
                else {
                    break;
                };
                push_copy(
                    &mut copies,
                    StagedCopy {
                        buffer: item.buffer,
                        staging_offset: cursor,
                        offset: item.offset + next_done,
                        len: copy,
                    },
                );
                pieces.push((next_item, next_done, cursor, data));
                cursor += taken;
                next_done += data;
            }
            let mut encoder = ctx.device().create_command_encoder(&Default::default());
            for c in &copies {
                encoder.copy_buffer_to_buffer(
                    c.buffer,
                    c.offset,
                    &staging.buffer,
                    c.staging_offset,
                    c.len,
                );
            }
            staging.busy_until =
                ctx.submit_copies(encoder, "copying arrays to readback staging", true)?;
            in_flight.push_back(InFlight { staging, pieces });
        }
        let Some(done) = in_flight.pop_front() else {
            return Ok(());
        };
        ctx.wait_for_copies(done.staging.busy_until)?;
        for &(item, item_offset, staging_offset, bytes) in &done.pieces {
            let out = &mut items[item].out[item_offset as usize..(item_offset + bytes) as usize];
            // The copy into [staging_offset, +bytes) has completed (waited above) and no other
            // work uses this staging buffer until it is released below.
            done.staging.mapped.sub(staging_offset, bytes).read(out);
        }
        pool.release(StagingKind::Readback, done.staging);
    }
}
