//! A bounded ring of fixed-size records for one writer at a time and any number of readers,
//! without locks: the writer publishes each record with a release store of the record count;
//! readers copy and then discard what the writer may have overwritten meanwhile (a seqlock
//! over a ring). Everything is an atomic word, so there is no `unsafe` and a torn read is
//! impossible to miss.
//!
//! The timeline keeps arena events here because the arena calls its event sink on every
//! allocation and free: a lock there would cost as much as the allocation itself.

use std::collections::TryReserveError;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Records of `W` words. Writers must not overlap (the arena calls its sink under `&mut`);
/// readers may run at any time.
pub(crate) struct WordRing<const W: usize> {
    records: Box<[Record<W>]>,
    /// Records the ring holds: a power of two, so a record's slot is its index masked.
    slots: u64,
    /// Records written so far (the index of the next one).
    head: AtomicU64,
}

/// One record's words, aligned to a cache line so that a record of eight words never
/// straddles two lines (the writer then touches one line per record).
#[repr(C, align(64))]
struct Record<const W: usize>([AtomicU64; W]);

impl<const W: usize> WordRing<W> {
    /// A ring holding at least the newest `capacity` records (0 holds nothing). It has
    /// `capacity + 1` slots rounded up to a power of two: the slot the writer may be filling
    /// is never read.
    ///
    /// Errors (rather than aborting) when the slots' memory cannot be had: `None` when their
    /// count does not fit in `usize`, else the allocator's refusal; the caller bounds
    /// `capacity` and names it.
    pub fn new(capacity: usize) -> Result<Self, Option<TryReserveError>> {
        let slots = if capacity == 0 {
            0
        } else {
            capacity
                .checked_add(1)
                .and_then(usize::checked_next_power_of_two)
                .ok_or(None)?
        };
        let mut records = Vec::new();
        records.try_reserve_exact(slots).map_err(Some)?;
        records.extend((0..slots).map(|_| Record(std::array::from_fn(|_| AtomicU64::new(0)))));
        Ok(WordRing {
            records: records.into_boxed_slice(),
            slots: slots as u64,
            head: AtomicU64::new(0),
        })
    }

    /// Bytes of the slots of a ring of `capacity` records (for error messages), saturating.
    pub fn bytes_for(capacity: usize) -> u64 {
        let slots = capacity
            .checked_add(1)
            .and_then(usize::checked_next_power_of_two)
            .map_or(u64::MAX, |s| s as u64);
        slots.saturating_mul(std::mem::size_of::<Record<W>>() as u64)
    }

    /// Records written since the ring was made.
    pub fn written(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Appends a record, overwriting the oldest when full. Only one writer at a time.
    #[inline]
    pub fn push(&self, record: [u64; W]) {
        let index = self.head.load(Ordering::Relaxed);
        if self.slots == 0 {
            self.head.store(index + 1, Ordering::Release);
            return;
        }
        // Readers that see any word of this record must also see `head` at `index` or later,
        // so they know the slot is being overwritten.
        fence(Ordering::Release);
        let slot = &self.records[(index & (self.slots - 1)) as usize];
        for (cell, word) in slot.0.iter().zip(record) {
            cell.store(word, Ordering::Relaxed);
        }
        self.head.store(index + 1, Ordering::Release);
    }

    /// The records with index `from` or later that are still intact, oldest first, with their
    /// indices, and `end`: the count of records written when the read began. Every record
    /// returned has an index in `from..end`, so `end - from` (when `end >= from`) minus the
    /// records returned is exactly the number of records of `from..end` that were overwritten,
    /// whatever the writer does meanwhile.
    pub fn read_from(&self, from: u64) -> RingRead<W> {
        let end = self.head.load(Ordering::Acquire);
        let start = from.max(end.saturating_sub(self.slots));
        let mut records = Vec::with_capacity(end.saturating_sub(start) as usize);
        for index in start..end {
            let slot = &self.records[(index & (self.slots - 1)) as usize];
            let mut record = [0u64; W];
            for (word, cell) in record.iter_mut().zip(&slot.0) {
                *word = cell.load(Ordering::Relaxed);
            }
            records.push((index, record));
        }
        fence(Ordering::Acquire);
        // The writer may have moved on while we copied: record `index` shares its slot with
        // `index + slots`, which is written (or being written) once `head` reaches it.
        let now = self.head.load(Ordering::Relaxed);
        // `index + slots > now` without the sum (indices count records; they cannot near
        // 2^64, but the comparison need not rely on that).
        records.retain(|(index, _)| now - index < self.slots);
        RingRead { records, end }
    }
}

/// What [`WordRing::read_from`] saw.
pub(crate) struct RingRead<const W: usize> {
    /// The intact records, oldest first, with their indices.
    pub records: Vec<(u64, [u64; W])>,
    /// Records written when the read began: every index returned is below it.
    pub end: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_ring_keeps_the_newest_records() {
        let ring = WordRing::<2>::new(3).unwrap(); // 4 slots, one of them the writer's
        for i in 0..10 {
            ring.push([i, i * 10]);
        }
        let records = ring.read_from(0).records;
        let indices: Vec<u64> = records.iter().map(|r| r.0).collect();
        assert_eq!(indices, [7, 8, 9]);
        assert_eq!(records[0].1, [7, 70]);
        assert_eq!(ring.read_from(8).records.len(), 2);
        assert_eq!(ring.written(), 10);
    }

    #[test]
    fn an_empty_ring_counts_but_keeps_nothing() {
        let ring = WordRing::<1>::new(0).unwrap();
        ring.push([1]);
        assert!(ring.read_from(0).records.is_empty());
        assert_eq!(ring.written(), 1);
    }

    #[test]
    fn readers_racing_the_writer_never_see_a_torn_record() {
        let ring = Arc::new(WordRing::<4>::new(64).unwrap());
        let writer = {
            let ring = Arc::clone(&ring);
            std::thread::spawn(move || {
                for i in 0..200_000u64 {
                    ring.push([i, i, i, i]);
                }
            })
        };
        let mut checked = 0;
        while !writer.is_finished() || checked == 0 {
            for (index, record) in ring.read_from(0).records {
                assert_eq!(record, [index; 4], "torn record at {index}");
                checked += 1;
            }
        }
        writer.join().unwrap();
    }

    #[test]
    fn reads_racing_the_writer_account_for_every_record_below_their_end() {
        // Several readers at once, each read checked against what it must contain: records in
        // `from..end`, in order, intact, and `end` at least what was written before the read.
        let ring = Arc::new(WordRing::<2>::new(15).unwrap());
        let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let readers: Vec<_> = (0..3u64)
            .map(|r| {
                let (ring, writing) = (Arc::clone(&ring), Arc::clone(&writing));
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while writing.load(Ordering::Acquire) || reads == 0 {
                        let before = ring.written();
                        let from = before.saturating_sub(r * 7);
                        let read = ring.read_from(from);
                        assert!(read.end >= before, "end {} < {before}", read.end);
                        assert!(read.records.len() as u64 <= read.end.saturating_sub(from));
                        let mut last = None;
                        for (index, record) in &read.records {
                            assert!((from..read.end).contains(index), "{index} outside");
                            assert!(last < Some(*index), "out of order at {index}");
                            assert_eq!(*record, [*index, !*index], "torn record");
                            last = Some(*index);
                        }
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for i in 0..300_000u64 {
            ring.push([i, !i]);
        }
        writing.store(false, Ordering::Release);
        for reader in readers {
            assert!(reader.join().unwrap() > 0);
        }
    }

    #[test]
    fn a_ring_too_large_to_address_is_an_error_not_an_abort() {
        assert!(matches!(WordRing::<8>::new(usize::MAX), Err(None)));
        assert!(WordRing::<8>::new(usize::MAX / 2).is_err());
        assert_eq!(WordRing::<8>::bytes_for(3), 4 * 64);
        assert_eq!(WordRing::<8>::bytes_for(usize::MAX), u64::MAX);
    }
}
