//! Data parallelism across devices, at its simplest: a host array split along its leading
//! axis, one shard per context ([`shard`]), and shards gathered back in order ([`gather`]).
//! The split follows [`shard_rows`] (`numpy.array_split`'s rule). A module of its own
//! because it works over several contexts at once, above any one of them.

use crate::array::{Access, DeviceArray};
use crate::context::Context;
use crate::count::count;
use crate::error::{Error, Result};
use crate::guard_levels::TransferDirection::{DeviceToHost, HostToDevice};
use crate::shape::check_shape;
use crate::transfer::check_guard_ahead;
use std::ops::Range;
use std::sync::Arc;

/// The rows of a leading axis of `rows` that each of `shards` shards takes, in order: as even
/// as can be, the first `rows % shards` shards one row longer (`numpy.array_split`). Shards get
/// no rows when there are fewer rows than shards. No shards for `shards == 0`.
///
/// Lazy: the ranges are computed as they are read ([`ShardRows`] is an iterator with random
/// access), so any count of shards is answered without allocating (`shard_rows(3, usize::MAX)`
/// describes `usize::MAX` shards, all but three empty). Collect it for a `Vec`. Panics: none.
///
/// ```
/// use gpu_arena::shard_rows;
/// assert_eq!(shard_rows(10, 3), [0..4, 4..7, 7..10]);
/// assert_eq!(shard_rows(1, 2).collect::<Vec<_>>(), [0..1, 1..1]);
/// assert_eq!(shard_rows(3, usize::MAX).get(usize::MAX - 1), Some(3..3));
/// assert_eq!(shard_rows(3, usize::MAX).count(), usize::MAX);
/// ```
pub fn shard_rows(rows: usize, shards: usize) -> ShardRows {
    ShardRows {
        rows,
        shards,
        next: 0,
        end: shards,
    }
}

/// The ranges of rows [`shard_rows`] gives, computed on demand: an exact-size, double-ended
/// iterator, with [`get`](ShardRows::get) for any shard and comparisons with arrays, slices
/// and `Vec`s of ranges (over the shards not yet iterated).
#[derive(Clone, Debug)]
pub struct ShardRows {
    rows: usize,
    shards: usize,
    /// The next shard the front of the iterator gives.
    next: usize,
    /// One past the last shard the back of the iterator gives.
    end: usize,
}

impl ShardRows {
    /// The rows of shard `index` (from 0, whatever has been iterated), or `None` for an index
    /// at or past the number of shards.
    pub fn get(&self, index: usize) -> Option<Range<usize>> {
        if index >= self.shards {
            return None;
        }
        let (base, longer) = (self.rows / self.shards, self.rows % self.shards);
        // No overflow: `index * base + min(index, longer)` is at most `rows`.
        let start = index * base + index.min(longer);
        Some(start..start + base + usize::from(index < longer))
    }

    /// Whether no shards are left to iterate (what `ExactSizeIterator::is_empty`, unstable,
    /// would say).
    pub fn is_empty(&self) -> bool {
        self.next == self.end
    }
}

impl Iterator for ShardRows {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        if self.next == self.end {
            return None;
        }
        let range = self.get(self.next);
        self.next += 1;
        range
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.next;
        (left, Some(left))
    }

    fn nth(&mut self, n: usize) -> Option<Range<usize>> {
        self.next = self.next.saturating_add(n).min(self.end);
        self.next()
    }

    fn last(mut self) -> Option<Range<usize>> {
        self.next_back()
    }

    fn count(self) -> usize {
        self.len()
    }
}

impl DoubleEndedIterator for ShardRows {
    fn next_back(&mut self) -> Option<Range<usize>> {
        if self.next == self.end {
            return None;
        }
        self.end -= 1;
        self.get(self.end)
    }

    fn nth_back(&mut self, n: usize) -> Option<Range<usize>> {
        self.end = self.end.saturating_sub(n).max(self.next);
        self.next_back()
    }
}

impl ExactSizeIterator for ShardRows {}

impl std::iter::FusedIterator for ShardRows {}

impl PartialEq<[Range<usize>]> for ShardRows {
    fn eq(&self, other: &[Range<usize>]) -> bool {
        self.len() == other.len() && self.clone().zip(other).all(|(a, b)| a == *b)
    }
}

impl<const N: usize> PartialEq<[Range<usize>; N]> for ShardRows {
    fn eq(&self, other: &[Range<usize>; N]) -> bool {
        *self == other[..]
    }
}

impl PartialEq<&[Range<usize>]> for ShardRows {
    fn eq(&self, other: &&[Range<usize>]) -> bool {
        *self == **other
    }
}

impl PartialEq<Vec<Range<usize>>> for ShardRows {
    fn eq(&self, other: &Vec<Range<usize>>) -> bool {
        *self == other[..]
    }
}

/// Splits `data` of `shape` along its leading axis across `contexts` (rows as
/// [`shard_rows`]): shard `i` is a new array on `contexts[i]`, of shape `[rows_i, shape[1..]]`,
/// uploaded with one [`crate::UploadBatch`] per device (explicit host-to-device transfers).
/// Uploads to one device do not wait for the others'. A context may appear more than once (one
/// device holding several shards).
///
/// Errors: a lost device ([`Error::DeviceLost`], whichever it is, before anything else is
/// looked at), no contexts (refused as by [`gather`]), a shape that does not hold `data` or
/// has rank 0 ([`Error::Shape`]), the guard's refusal on any device (every device is asked
/// before anything moves: nothing is uploaded then), or
/// out-of-memory on any device (every shard takes its memory before any batch is finished:
/// no transfer is counted then, and the memory taken on other devices is freed; their
/// allocations stay counted in `num_allocs`, the peak and the timeline, as XLA's counters
/// count allocations made).
///
/// ```no_run
/// # use gpu_arena::{ArenaConfig, Context};
/// let devices = Context::open_all(ArenaConfig::from_env()?)?;
/// let x: Vec<f32> = (0..4096).map(|i| i as f32).collect();
/// let shards = gpu_arena::shard(&devices, &x, &[1024, 4])?;
/// let (back, shape) = gpu_arena::gather(&devices, &shards)?;
/// assert_eq!((back, shape), (x, vec![1024, 4]));
/// # Ok::<(), gpu_arena::Error>(())
/// ```
#[track_caller]
pub fn shard<T: bytemuck::Pod>(
    contexts: &[Context],
    data: &[T],
    shape: &[usize],
) -> Result<Vec<DeviceArray<T>>> {
    const OPERATION: &str = "shard";
    check_devices(contexts, OPERATION)?;
    check_shape(shape, Some(data.len()), std::mem::size_of::<T>(), OPERATION)?;
    let Some((&rows, row_shape)) = shape.split_first() else {
        return Err(Error::Shape {
            operation: OPERATION,
            reason: "a rank-0 array has no leading axis to split; give it shape [1]".into(),
        });
    };
    if contexts.is_empty() {
        return Err(no_contexts(OPERATION));
    }
    // `check_shape` proved the element count fits, so the row length does too.
    let row_len: usize = row_shape.iter().product();
    let ranges: Vec<Range<usize>> = shard_rows(rows, contexts.len()).collect();
    let row_bytes = (row_len * std::mem::size_of::<T>()) as u64;
    let devices = by_device(contexts);
    // Every device's guard is asked first: a refusal on a later one uploads nothing to an
    // earlier one.
    for (ctx, mine) in &devices {
        let rows: usize = mine.iter().map(|&i| ranges[i].len()).sum();
        let bytes = rows as u64 * row_bytes;
        check_guard_ahead(
            &ctx.inner.guard_defaults(),
            HostToDevice,
            bytes,
            OPERATION,
            true,
        )?;
    }
    // One batch per device, and every shard's memory taken before any batch goes out: a
    // device that cannot hold its shards refuses before anything is uploaded anywhere. Loops,
    // not closures: each shard's allocation site is the caller's line.
    let mut batches = Vec::with_capacity(devices.len());
    for (ctx, mine) in &devices {
        let mut batch = ctx.upload_batch();
        let mut tickets = Vec::with_capacity(mine.len());
        for &i in mine {
            let mut shard_shape = shape.to_vec();
            shard_shape[0] = ranges[i].len();
            let rows = &data[ranges[i].start * row_len..ranges[i].end * row_len];
            tickets.push(batch.put(rows, &shard_shape)?);
        }
        batches.push((batch, tickets));
    }
    let mut shards: Vec<Option<DeviceArray<T>>> = (0..contexts.len()).map(|_| None).collect();
    for ((_, mine), (batch, tickets)) in devices.iter().zip(batches) {
        let mut finished = batch.finish()?;
        for (&i, ticket) in mine.iter().zip(tickets) {
            shards[i] = Some(finished.take(ticket)?);
        }
    }
    Ok(shards.into_iter().flatten().collect())
}

/// Copies `shards` back to the host as one array along the leading axis, in order: shard `i`
/// must belong to `contexts[i]`. One [`Context::device_get_many`] per distinct device (each an
/// explicit device-to-host transfer per shard). Returns the data and its shape
/// (`[sum of rows, shape[1..]]`).
///
/// Errors: a lost device ([`Error::DeviceLost`], whichever it is, before anything else is
/// looked at); as many contexts as shards are needed, and at least one
/// ([`Error::InvalidArgument`]); [`Error::ForeignArray`] naming both devices for a shard of
/// another context than its place says; [`Error::Shape`] for a rank-0 shard or shards whose
/// trailing dimensions differ; the guard's refusal on any device (every device is asked before
/// anything is read: nothing is read or counted then), a device's failure.
pub fn gather<T: bytemuck::Pod>(
    contexts: &[Context],
    shards: &[DeviceArray<T>],
) -> Result<(Vec<T>, Vec<usize>)> {
    const OPERATION: &str = "gather";
    check_devices(contexts, OPERATION)?;
    if contexts.len() != shards.len() {
        return Err(Error::InvalidArgument {
            operation: OPERATION,
            reason: format!(
                "{} for {}: give the context of each shard, in the shards' order",
                count(contexts.len(), "context"),
                count(shards.len(), "shard")
            ),
        });
    }
    let Some(first) = shards.first() else {
        return Err(no_contexts(OPERATION));
    };
    let row_shape = first.shape().get(1..).unwrap_or_default();
    let mut rows = 0usize;
    for (i, (ctx, shard)) in contexts.iter().zip(shards).enumerate() {
        shard
            .storage
            .check_ready_for(&ctx.inner, Access::Read, OPERATION, "a shard")?;
        match shard.shape().split_first() {
            Some((&shard_rows, rest)) if rest == row_shape => {
                // Zero-size shards can each claim up to 2^63 rows: the sum is checked.
                rows = rows.checked_add(shard_rows).ok_or_else(|| Error::Shape {
                    operation: OPERATION,
                    reason: "the shards' leading dimensions add up to more than usize::MAX rows"
                        .into(),
                })?;
            }
            None => {
                return Err(Error::Shape {
                    operation: OPERATION,
                    reason: format!(
                        "shard {i} has shape []: shards must have rank 1 or more (a leading \
                         axis to gather along)"
                    ),
                })
            }
            Some(_) => {
                return Err(Error::Shape {
                    operation: OPERATION,
                    reason: format!(
                        "shard {i} has shape {:?} but shard 0 has {:?}: shards must have the \
                         same dimensions after the leading one",
                        shard.shape(),
                        first.shape()
                    ),
                })
            }
        }
    }
    // One readback per device, each device's guard asked first (a refusal on a later device
    // reads nothing on an earlier one), then the pieces in the shards' order.
    let devices = by_device(contexts);
    for (ctx, mine) in &devices {
        // `check_ready_for` above bounds each shard's bytes, so their sum fits a u64.
        let bytes = mine.iter().map(|&j| shards[j].size_in_bytes()).sum();
        check_guard_ahead(
            &ctx.inner.guard_defaults(),
            DeviceToHost,
            bytes,
            OPERATION,
            true,
        )?;
    }
    let mut pieces: Vec<Option<Vec<T>>> = (0..shards.len()).map(|_| None).collect();
    for (ctx, mine) in devices {
        let arrays: Vec<&DeviceArray<T>> = mine.iter().map(|&j| &shards[j]).collect();
        for (j, values) in mine.into_iter().zip(ctx.device_get_many(&arrays)?) {
            pieces[j] = Some(values);
        }
    }
    let mut shape = first.shape().to_vec();
    shape[0] = rows;
    Ok((pieces.into_iter().flatten().flatten().collect(), shape))
}

/// The distinct devices of `contexts`, in order of first appearance, each with the places in
/// `contexts` that name it.
fn by_device(contexts: &[Context]) -> Vec<(&Context, Vec<usize>)> {
    let mut devices: Vec<(&Context, Vec<usize>)> = Vec::new();
    for (i, ctx) in contexts.iter().enumerate() {
        match (devices.iter_mut()).find(|(c, _)| Arc::ptr_eq(&c.inner, &ctx.inner)) {
            Some((_, places)) => places.push(i),
            None => devices.push((ctx, vec![i])),
        }
    }
    devices
}

/// Refuses with [`Error::DeviceLost`] when any of `contexts` knows its device is lost: the first
/// check of a call over several devices, before its arguments or any guard.
fn check_devices(contexts: &[Context], operation: &'static str) -> Result<()> {
    contexts
        .iter()
        .try_for_each(|ctx| ctx.inner.check_device(operation))
}

fn no_contexts(operation: &'static str) -> Error {
    Error::InvalidArgument {
        operation,
        reason:
            "no contexts given: pass at least one (see gpu_arena::devices and Context::open_all)"
                .into(),
    }
}
