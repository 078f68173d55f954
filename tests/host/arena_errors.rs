//! Every error path of the arena, and what its message says.

use gpu_arena::arena::{
    AllocationId, Arena, ArenaError, ArenaMode, ArenaOptions, OomCause, RegionId, RegionRefusal,
    RegionSource, MAX_RESERVED_REGIONS,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// A device with `cap` bytes; refuses beyond that as out of memory with `reason`, a region
/// above `max_region` as too large, everything as lost once `lost`, and everything with
/// `other` as another failure when that is set. It remembers every size it was asked for.
struct Device {
    next: u64,
    used: u64,
    cap: u64,
    reason: &'static str,
    max_region: u64,
    lost: bool,
    other: Option<&'static str>,
    asked: Vec<u64>,
    live: Vec<(RegionId, u64)>,
}

impl Device {
    fn with_cap(cap: u64) -> Device {
        Device {
            next: 0,
            used: 0,
            cap,
            reason: "out of device memory",
            max_region: u64::MAX,
            lost: false,
            other: None,
            asked: Vec::new(),
            live: Vec::new(),
        }
    }

    fn unlimited() -> Device {
        Device::with_cap(u64::MAX)
    }
}

impl RegionSource for Device {
    fn create_region(&mut self, size: u64) -> Result<RegionId, RegionRefusal> {
        self.asked.push(size);
        if self.lost {
            return Err(RegionRefusal::DeviceLost {
                reason: "vkAllocateMemory: VK_ERROR_DEVICE_LOST".into(),
            });
        }
        if let Some(reason) = self.other {
            return Err(RegionRefusal::other(reason));
        }
        if size > self.max_region {
            return Err(RegionRefusal::TooLarge {
                size,
                limit: self.max_region,
                limit_name: "maxBufferSize",
            });
        }
        if self.used + size > self.cap {
            return Err(RegionRefusal::out_of_memory(self.reason));
        }
        self.used += size;
        self.next += 1;
        self.live.push((RegionId(self.next), size));
        Ok(RegionId(self.next))
    }

    fn release_region(&mut self, region: RegionId) {
        let index = self
            .live
            .iter()
            .position(|(id, _)| *id == region)
            .expect("known region");
        self.used -= self.live.swap_remove(index).1;
    }
}

fn oom(error: ArenaError) -> Box<gpu_arena::arena::OutOfMemory> {
    match error {
        ArenaError::OutOfMemory(oom) => oom,
        other => panic!("expected out of memory, got {other:?}"),
    }
}

#[test]
fn an_alignment_that_is_not_a_power_of_two_is_refused_by_value() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let error = arena.allocate(100, 3 * 256, None, &mut device).unwrap_err();
    assert_eq!(error, ArenaError::InvalidAlignment(768));
    assert!(error.to_string().contains("power of two"), "{error}");
}

#[test]
fn freeing_twice_reports_an_unknown_allocation() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let a = arena.allocate(1000, 0, None, &mut device).unwrap();
    arena.free(a.id, None, &mut device).unwrap();
    let error = arena.free(a.id, None, &mut device).unwrap_err();
    assert_eq!(error, ArenaError::UnknownAllocation(a.id));
    let message = error.to_string();
    assert!(message.contains("double free"), "{message}");
    // The id as snapshots show it, not its Rust debug form.
    assert!(
        message.contains(&format!("allocation {} ", a.id.0)),
        "{message}"
    );
    assert!(!message.contains("AllocationId("), "{message}");
}

#[test]
fn an_id_from_nowhere_is_an_unknown_allocation() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    for id in [
        AllocationId(0),
        AllocationId(u64::MAX),
        AllocationId(12345 << 32 | 7),
    ] {
        assert_eq!(
            arena.free(id, None, &mut device),
            Err(ArenaError::UnknownAllocation(id))
        );
        assert_eq!(arena.allocation(id), None);
    }
}

#[test]
fn an_id_of_another_arena_is_an_unknown_allocation_and_frees_nothing_there() {
    // Every arena hands out the same slots with the same stamps in the same order: only the
    // arena's own number in the id tells their ids apart.
    let arenas: Vec<(Arena, Device)> = (0..8)
        .map(|_| {
            let mut device = Device::unlimited();
            let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
            arena.allocate(4096, 0, None, &mut device).unwrap();
            (arena, device)
        })
        .collect();
    let mut ids = Vec::new();
    for (mut arena, mut device) in arenas {
        let own = arena.allocate(256, 0, None, &mut device).unwrap();
        for &foreign in &ids {
            assert_eq!(
                arena.free(foreign, None, &mut device),
                Err(ArenaError::UnknownAllocation(foreign))
            );
            assert_eq!(arena.allocation(foreign), None);
        }
        assert_eq!(arena.stats().bytes_in_use, 4096 + 256, "nothing was freed");
        assert_eq!(arena.allocation(own.id).map(|a| a.offset), Some(own.offset));
        arena.free(own.id, None, &mut device).unwrap();
        ids.push(own.id);
    }
}

#[test]
fn an_id_stays_unknown_after_its_slot_is_reused() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let first = arena.allocate(256, 0, None, &mut device).unwrap();
    arena.free(first.id, None, &mut device).unwrap();
    let second = arena.allocate(256, 0, None, &mut device).unwrap();
    assert_eq!(second.offset, first.offset, "the same chunk comes back");
    assert_ne!(second.id, first.id);
    assert_eq!(
        arena.free(first.id, None, &mut device),
        Err(ArenaError::UnknownAllocation(first.id))
    );
    assert!(arena.allocation(second.id).is_some());
}

#[test]
fn freeing_a_pending_free_again_is_a_double_free() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let a = arena.allocate(1000, 0, None, &mut device).unwrap();
    arena.free(a.id, Some(7), &mut device).unwrap();
    assert_eq!(
        arena.free(a.id, Some(7), &mut device),
        Err(ArenaError::UnknownAllocation(a.id))
    );
}

#[test]
fn fragmentation_is_named_when_free_memory_would_fit_but_no_block_does() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let quarters: Vec<_> = (0..4)
        .map(|_| arena.allocate(256 * KIB, 0, None, &mut device).unwrap())
        .collect();
    arena.free(quarters[0].id, None, &mut device).unwrap();
    arena.free(quarters[2].id, None, &mut device).unwrap();

    let error = arena
        .allocate(512 * KIB, 0, Some("activations"), &mut device)
        .unwrap_err();
    let report = oom(error.clone());
    assert_eq!(report.cause, OomCause::Fragmentation);
    assert_eq!(
        (report.total_free, report.largest_free_block),
        (512 * KIB, 256 * KIB)
    );
    assert_eq!(report.fragmentation, 0.5);
    let message = error.to_string();
    for expected in [
        "out of memory",
        "512.00 KiB",
        "\"activations\"",
        "memory is fragmented",
        "largest free block is only 256.00 KiB",
        "fragmentation 0.50",
        "it is preallocated",
        "GPU_ARENA_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "GPU_ARENA_PREALLOCATE=false",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in:\n{message}"
        );
    }
}

#[test]
fn reaching_the_limit_says_so_and_suggests_a_larger_memory_fraction() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::growing(4 * MIB));
    arena.allocate(3 * MIB, 0, None, &mut device).unwrap();
    let error = arena.allocate(2 * MIB, 0, None, &mut device).unwrap_err();
    let report = oom(error.clone());
    assert_eq!(report.cause, OomCause::LimitReached);
    assert_eq!(report.mode, ArenaMode::Bfc);
    let message = error.to_string();
    for expected in [
        "limit is reached",
        "a limit of 4.00 MiB",
        "3.00 MiB in use",
        "raise the memory fraction GPU_ARENA_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in:\n{message}"
        );
    }
}

#[test]
fn a_request_larger_than_any_region_names_the_largest_region() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: 64 * MIB,
        ..ArenaOptions::growing(1 << 40)
    });
    let error = arena.allocate(100 * MIB, 0, None, &mut device).unwrap_err();
    assert_eq!(oom(error.clone()).cause, OomCause::LargerThanAnyRegion);
    let message = error.to_string();
    assert!(message.contains("larger than any region"), "{message}");
    assert!(message.contains("64.00 MiB"), "{message}");
    assert!(message.contains("split the data"), "{message}");
    // The cap may be the user's own: the remedy names the knob that sets it.
    assert!(message.contains("GPU_ARENA_MAX_REGION_MB"), "{message}");
}

#[test]
fn a_first_request_no_region_or_limit_could_hold_reserves_nothing() {
    for (options, size, cause) in [
        (
            ArenaOptions {
                max_region_bytes: 64 * MIB,
                ..ArenaOptions::preallocated(256 * MIB)
            },
            100 * MIB,
            OomCause::LargerThanAnyRegion,
        ),
        (
            ArenaOptions::preallocated(8 * MIB),
            9 * MIB,
            OomCause::LimitReached,
        ),
        (
            ArenaOptions::preallocated(8 * MIB),
            u64::MAX,
            OomCause::LargerThanAnyRegion,
        ),
    ] {
        let mut device = Device::unlimited();
        let mut arena = Arena::new(options);
        let error = arena.allocate(size, 0, None, &mut device).unwrap_err();
        assert_eq!(oom(error).cause, cause);
        assert!(device.asked.is_empty(), "asked for {:?}", device.asked);
        assert!(!arena.is_reserved());
        assert_eq!(arena.stats().bytes_reserved, 0);
        // The next request that fits reserves the base as a first one does.
        arena.allocate(MIB, 0, None, &mut device).unwrap();
        assert!(arena.is_reserved());
    }
}

#[test]
fn free_growth_regions_stay_when_releasing_them_would_not_make_room() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::growing(7 * MIB));
    let a = arena.allocate(2 * MIB, 0, None, &mut device).unwrap();
    arena.allocate(4 * MIB, 0, None, &mut device).unwrap();
    arena.free(a.id, None, &mut device).unwrap();
    // 2 MiB free in its own region and 1 MiB left under the limit: 4 MiB does not fit even
    // with that region given back, and 8 MiB is over the limit.
    for size in [4 * MIB, 8 * MIB] {
        let before = (arena.stats(), device.live.len(), device.asked.len());
        let error = arena.allocate(size, 0, None, &mut device).unwrap_err();
        assert_eq!(oom(error).cause, OomCause::LimitReached);
        assert_eq!(
            (arena.stats(), device.live.len(), device.asked.len()),
            before
        );
    }
    // 3 MiB fits once the free region goes back, as before.
    arena.allocate(3 * MIB, 0, None, &mut device).unwrap();
}

#[test]
fn a_refusing_device_is_reported_with_its_reason_and_the_other_processes_remedy() {
    let mut device = Device::with_cap(3 * MIB);
    device.reason = "vkAllocateMemory: VK_ERROR_OUT_OF_DEVICE_MEMORY";
    let mut arena = Arena::new(ArenaOptions::growing(64 * MIB));
    arena.allocate(2 * MIB, 0, None, &mut device).unwrap();
    let error = arena.allocate(2 * MIB, 0, None, &mut device).unwrap_err();
    let report = oom(error.clone());
    assert!(matches!(
        &report.cause,
        OomCause::SourceExhausted(RegionRefusal::OutOfMemory { reason }) if reason.contains("VK_ERROR")
    ));
    let message = error.to_string();
    assert!(message.contains("the device refused"), "{message}");
    assert!(
        message.contains("VK_ERROR_OUT_OF_DEVICE_MEMORY"),
        "{message}"
    );
    // This arena reserved nothing up front, so its own preallocation is not what to turn off.
    assert!(
        message.contains(
            "Free arrays that are no longer needed, or lower GPU_ARENA_MEM_FRACTION in the other \
             processes (or turn their preallocation off with GPU_ARENA_PREALLOCATE=false)"
        ),
        "{message}"
    );
    assert!(!message.contains("Turn preallocation off"), "{message}");
}

#[test]
fn pending_frees_are_counted_and_the_report_says_to_wait_for_the_queue() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let a = arena.allocate(MIB, 0, None, &mut device).unwrap();
    arena.free(a.id, Some(3), &mut device).unwrap();
    let error = arena.allocate(512 * KIB, 0, None, &mut device).unwrap_err();
    let report = oom(error.clone());
    assert_eq!(report.pending_free_bytes, MIB);
    assert_eq!(report.cause, OomCause::LimitReached);
    let message = error.to_string();
    assert!(message.contains("1.00 MiB pending free"), "{message}");
    assert!(message.contains("waiting for the queue"), "{message}");
}

#[test]
fn sizes_too_large_to_round_are_out_of_memory_not_a_panic() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let error = arena.allocate(u64::MAX, 0, None, &mut device).unwrap_err();
    let report = oom(error.clone());
    assert_eq!(report.cause, OomCause::LargerThanAnyRegion);
    assert_eq!((report.requested, report.rounded), (u64::MAX, u64::MAX));
    // The message does not call u64::MAX a size rounded to 256 bytes.
    let message = error.to_string();
    assert!(
        message.contains("more than any size rounds to 256 bytes in 64 bits"),
        "{message}"
    );
    assert!(!message.contains("after rounding"), "{message}");
    let mut growing = Arena::new(ArenaOptions::growing(u64::MAX));
    assert!(growing
        .allocate(u64::MAX - 10, 0, None, &mut device)
        .is_err());
}

#[test]
fn extreme_alignments_are_served_or_refused_without_panicking() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::growing(1 << 30));
    arena.allocate(300, 0, None, &mut device).unwrap();
    for log2 in [9, 20, 40, 63] {
        match arena.allocate(1000, 1 << log2, None, &mut device) {
            Ok(a) => assert_eq!(a.offset % (1 << log2), 0),
            Err(ArenaError::OutOfMemory(_)) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_refused_reservation_is_a_region_source_error_and_rolls_back() {
    let mut device = Device::with_cap(3 * MIB);
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: MIB,
        ..ArenaOptions::preallocated(8 * MIB)
    });
    let error = arena.reserve(&mut device).unwrap_err();
    assert!(matches!(
        &error,
        ArenaError::ReserveRefused {
            reserve_bytes,
            region_bytes,
            refusal: RegionRefusal::OutOfMemory { reason },
        } if *reserve_bytes == 8 * MIB && *region_bytes == MIB && reason == "out of device memory"
    ));
    let message = error.to_string();
    assert!(message.contains("could not reserve 8.00 MiB"), "{message}");
    assert!(message.contains("GPU_ARENA_PREALLOCATE=false"), "{message}");
    // The cause is in the message once, so it is no `source()` as well.
    assert_eq!(
        message.matches("out of device memory").count(),
        1,
        "{message}"
    );
    assert!(std::error::Error::source(&error).is_none());
    assert!(!arena.is_reserved());
    assert!(
        device.live.is_empty(),
        "regions created before the refusal are given back"
    );
    assert_eq!(arena.stats().bytes_reserved, 0);
    // The regions it held for a moment leave no peak either.
    assert_eq!(arena.stats().peak_bytes_reserved, 0);
    // The first allocation tries the reservation again and reports the same error.
    assert!(matches!(
        arena.allocate(1, 0, None, &mut device),
        Err(ArenaError::ReserveRefused { .. })
    ));
    assert_eq!(arena.stats().peak_bytes_reserved, 0);
    // Nor does a reserve that finds the device lost after its first region.
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: MIB,
        ..ArenaOptions::preallocated(2 * MIB)
    });
    struct LostAfterOne(Vec<RegionId>);
    impl RegionSource for LostAfterOne {
        fn create_region(&mut self, _: u64) -> Result<RegionId, RegionRefusal> {
            if !self.0.is_empty() {
                return Err(RegionRefusal::DeviceLost {
                    reason: "VK_ERROR_DEVICE_LOST".into(),
                });
            }
            self.0.push(RegionId(1));
            Ok(RegionId(1))
        }
        fn release_region(&mut self, region: RegionId) {
            self.0.retain(|r| *r != region);
        }
    }
    let mut device = LostAfterOne(Vec::new());
    assert!(matches!(
        arena.reserve(&mut device),
        Err(ArenaError::DeviceLost { .. })
    ));
    assert!(device.0.is_empty());
    assert_eq!(arena.stats().peak_bytes_reserved, 0);
}

/// A base region refused as too large with a limit under the 256-byte granule allows no
/// region at all: the reserve is refused with that refusal, not blamed on the options.
#[test]
fn a_reserve_refused_with_a_limit_under_a_granule_names_the_device_limit() {
    let mut device = Device::unlimited();
    device.max_region = 100;
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let error = arena.reserve(&mut device).unwrap_err();
    assert!(
        matches!(
            &error,
            ArenaError::ReserveRefused {
                region_bytes,
                refusal: RegionRefusal::TooLarge { limit: 100, .. },
                ..
            } if *region_bytes == MIB
        ),
        "{error:?}"
    );
    assert_eq!(device.asked, [MIB]);
    assert!(device.live.is_empty());
}

#[test]
fn an_out_of_memory_report_counts_one_byte_as_one() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::growing(256));
    let _full = arena.allocate(256, 0, None, &mut device).unwrap();
    let error = arena.allocate(1, 0, None, &mut device).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("(1 byte requested, 256 after rounding to 256 bytes)"),
        "{message}"
    );
}

#[test]
fn options_that_allow_no_region_are_refused_when_reserving() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: 0,
        ..ArenaOptions::preallocated(MIB)
    });
    let error = arena.reserve(&mut device).unwrap_err();
    assert_eq!(
        error,
        ArenaError::NoRegionAllowed {
            max_region_bytes: 0
        }
    );
    // The source was never asked: the message does not blame it.
    assert!(
        error
            .to_string()
            .starts_with("max_region_bytes is 0, below"),
        "{error}"
    );
    // An arena that grows (or allocates per array) is refused the same way at its first
    // allocation, not with an out-of-memory report that advises pieces of 0 B.
    for options in [ArenaOptions::growing(MIB), ArenaOptions::platform(MIB)] {
        let mut arena = Arena::new(ArenaOptions {
            max_region_bytes: 100,
            ..options
        });
        assert_eq!(
            arena.allocate(10, 0, None, &mut device).unwrap_err(),
            ArenaError::NoRegionAllowed {
                max_region_bytes: 100
            }
        );
        assert!(device.live.is_empty());
    }
}

#[test]
fn a_reserve_split_into_more_regions_than_the_bound_is_refused_not_looped_over() {
    // 2^62 bytes in 256-byte regions: 2^54 regions, which made `reserve` allocate host memory
    // until the process aborted.
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: 256,
        ..ArenaOptions::preallocated(1 << 62)
    });
    let error = arena.reserve(&mut device).unwrap_err();
    let msg = error.to_string();
    assert!(
        matches!(
            error,
            ArenaError::TooManyReservedRegions {
                reserve_bytes: 0x4000_0000_0000_0000,
                max_region_bytes: 256,
                regions: 0x0040_0000_0000_0000,
            }
        ),
        "{msg}"
    );
    assert!(
        msg.starts_with("reserving 4.00 EiB in regions of at most 256 B would take"),
        "{msg}"
    );
    assert!(msg.contains(&MAX_RESERVED_REGIONS.to_string()), "{msg}");
    assert!(msg.contains("max_region_bytes"), "{msg}");
    assert!(device.live.is_empty(), "nothing was created");
    // Exactly the bound is fine.
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: 256,
        ..ArenaOptions::preallocated(256 * MAX_RESERVED_REGIONS)
    });
    arena.reserve(&mut device).unwrap();
    assert_eq!(device.live.len() as u64, MAX_RESERVED_REGIONS);
}

#[test]
fn an_out_of_memory_refusal_is_retried_at_the_request_size_and_after_releasing_free_regions() {
    let mut device = Device::with_cap(4 * MIB);
    let mut arena = Arena::new(ArenaOptions::growing(64 * MIB));
    let a = arena.allocate(2 * MIB, 0, None, &mut device).unwrap();
    arena.free(a.id, None, &mut device).unwrap();
    // The 4 MiB growth region and then one of the request's 3 MiB do not fit beside the free
    // 2 MiB region; giving that back makes room for the growth region.
    let b = arena.allocate(3 * MIB, 0, None, &mut device).unwrap();
    assert_eq!(device.asked, [2 * MIB, 4 * MIB, 3 * MIB, 4 * MIB]);
    assert_eq!(device.live, [(b.region, 4 * MIB)]);
    // When nothing helps, the user gets the out-of-memory report with the device's refusal.
    let error = arena.allocate(3 * MIB, 0, None, &mut device).unwrap_err();
    assert!(matches!(
        &oom(error.clone()).cause,
        OomCause::SourceExhausted(RegionRefusal::OutOfMemory { .. })
    ));
    assert!(matches!(
        gpu_arena::Error::from(error),
        gpu_arena::Error::OutOfMemory { .. }
    ));
}

#[test]
fn a_too_large_refusal_caps_later_regions_at_the_device_limit_without_retrying_the_size() {
    let mut device = Device::unlimited();
    device.max_region = 3 * MIB;
    let mut arena = Arena::new(ArenaOptions::growing(64 * MIB));
    arena.allocate(MIB, 0, None, &mut device).unwrap();
    // The 4 MiB growth region is refused as too large; growth asks for the limit instead.
    arena.allocate(2 * MIB, 0, None, &mut device).unwrap();
    assert_eq!(device.asked, [2 * MIB, 4 * MIB, 3 * MIB]);
    // A request above the limit is refused without asking the device again.
    let report = oom(arena.allocate(5 * MIB, 0, None, &mut device).unwrap_err());
    assert_eq!(device.asked.len(), 3);
    assert_eq!(report.cause, OomCause::LargerThanAnyRegion);
    assert_eq!(report.max_region_bytes, 3 * MIB);

    // Refused on the first ask: the report carries the limit and names it.
    let mut device = Device::unlimited();
    device.max_region = 3 * MIB;
    let mut arena = Arena::new(ArenaOptions::growing(64 * MIB));
    let error = arena.allocate(4 * MIB, 0, None, &mut device).unwrap_err();
    assert_eq!(
        device.asked,
        [4 * MIB],
        "the same size is not asked for again"
    );
    let report = oom(error.clone());
    assert_eq!(
        report.cause,
        OomCause::SourceExhausted(RegionRefusal::TooLarge {
            size: 4 * MIB,
            limit: 3 * MIB,
            limit_name: "maxBufferSize",
        })
    );
    let message = error.to_string();
    assert!(message.contains("maxBufferSize is 3.00 MiB"), "{message}");
    assert!(
        message.contains("split the data into pieces of at most 3.00 MiB"),
        "{message}"
    );
}

#[test]
fn a_device_lost_refusal_stops_growth_at_once_and_is_the_device_lost_error() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::growing(64 * MIB));
    let a = arena.allocate(2 * MIB, 0, None, &mut device).unwrap();
    arena.free(a.id, None, &mut device).unwrap();
    device.lost = true;
    let error = arena.allocate(3 * MIB, 0, None, &mut device).unwrap_err();
    assert_eq!(
        error,
        ArenaError::DeviceLost {
            reason: "vkAllocateMemory: VK_ERROR_DEVICE_LOST".into()
        }
    );
    assert_eq!(
        device.asked,
        [2 * MIB, 4 * MIB],
        "no smaller region was asked for"
    );
    assert_eq!(device.live.len(), 1, "no free region was given back");
    match gpu_arena::Error::from(error) {
        gpu_arena::Error::DeviceLost { reason, .. } => {
            assert!(reason.contains("VK_ERROR_DEVICE_LOST"), "{reason}")
        }
        other => panic!("expected DeviceLost, got {other:?}"),
    }
    // Reserving on a lost device gives back what it made and reports the loss too.
    let mut device = Device::unlimited();
    device.lost = true;
    let mut arena = Arena::new(ArenaOptions::preallocated(8 * MIB));
    let error = arena.reserve(&mut device).unwrap_err();
    assert!(matches!(error, ArenaError::DeviceLost { .. }), "{error}");
    assert!(device.live.is_empty());
}

#[test]
fn another_refusal_is_retried_like_out_of_memory_and_reported_in_the_backends_words() {
    let mut device = Device::unlimited();
    device.other = Some("vkCreateBuffer: VK_ERROR_UNKNOWN");
    let mut arena = Arena::new(ArenaOptions::growing(64 * MIB));
    let error = arena.allocate(MIB, 0, None, &mut device).unwrap_err();
    assert_eq!(device.asked, [2 * MIB, MIB]);
    assert_eq!(
        oom(error.clone()).cause,
        OomCause::SourceExhausted(RegionRefusal::Other {
            reason: "vkCreateBuffer: VK_ERROR_UNKNOWN".into()
        })
    );
    let message = error.to_string();
    assert!(
        message.contains(
            "the device refused to create a new region: vkCreateBuffer: VK_ERROR_UNKNOWN"
        ),
        "{message}"
    );
}

#[test]
fn platform_mode_reports_the_limit_and_oversized_requests() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: 4 * MIB,
        ..ArenaOptions::platform(6 * MIB)
    });
    arena.allocate(3 * MIB, 0, None, &mut device).unwrap();
    let full = oom(arena.allocate(4 * MIB, 0, None, &mut device).unwrap_err());
    assert_eq!(
        (&full.cause, full.mode),
        (&OomCause::LimitReached, ArenaMode::Platform)
    );
    assert!(full.to_string().contains("platform"), "{full}");
    let huge = oom(arena.allocate(5 * MIB, 0, None, &mut device).unwrap_err());
    assert_eq!(huge.cause, OomCause::LargerThanAnyRegion);
}

#[test]
fn release_all_forgets_live_allocations() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let a = arena.allocate(1000, 0, None, &mut device).unwrap();
    arena.release_all(&mut device);
    assert!(device.live.is_empty());
    assert_eq!(
        arena.free(a.id, None, &mut device),
        Err(ArenaError::UnknownAllocation(a.id))
    );
    assert!(arena.allocation(a.id).is_none());
    // And the arena works again afterwards.
    let b = arena.allocate(1000, 0, None, &mut device).unwrap();
    assert_ne!(a.id, b.id);
}

/// A limit or a largest region just under a unit prints as that unit: the message adds the
/// exact count, so a request refused against it never reads as equal to it.
#[test]
fn a_limit_that_rounds_to_the_request_is_given_in_bytes_too() {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::growing((1 << 30) - 256));
    let message = arena
        .allocate(1 << 30, 0, None, &mut device)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("of the 1.00 GiB (1073741568 bytes) limit held")
            && message.contains("above the current limit of 1.00 GiB (1073741568 bytes)"),
        "{message}"
    );
    let mut arena = Arena::new(ArenaOptions {
        max_region_bytes: (2 << 30) - 256,
        ..ArenaOptions::growing(8 << 30)
    });
    let message = arena
        .allocate(2 << 30, 0, None, &mut device)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("split the data into pieces of at most 2.00 GiB (2147483392 bytes)"),
        "{message}"
    );
    // A piece of that size is served.
    arena
        .allocate((2 << 30) - 256, 0, None, &mut device)
        .unwrap();
}

/// The report of a 4 MiB request to an arena with a limit of 8 MiB, 6 MiB of it in use.
fn limit_reached_report() -> gpu_arena::arena::OutOfMemory {
    let mut device = Device::unlimited();
    let mut arena = Arena::new(ArenaOptions::growing(8 * MIB));
    let _held = arena.allocate(6 * MIB, 0, None, &mut device).unwrap();
    *oom(arena.allocate(4 * MIB, 0, None, &mut device).unwrap_err())
}

/// Where a context knows the limit a memory fraction of 1 gives (`max_limit_bytes`), the
/// remedy advises raising the fraction only where that would make room: not when the limit
/// is already that, and not when the request is larger than it (then no freed array helps
/// either, and the data must be split, or on a backend that does not report its memory, the
/// real size given).
#[test]
fn the_remedy_advises_a_higher_fraction_only_where_one_would_hold_the_request() {
    let mut report = limit_reached_report();
    assert_eq!(report.cause, OomCause::LimitReached);
    // Waiting for queued work helps a request that some limit holds, only.
    report.pending_free_bytes = MIB;
    let with_max = |max: u64, assumed: Option<u64>| {
        let mut report = report.clone();
        report.max_limit_bytes = Some(max);
        report.assumed_device_memory = assumed;
        report.remedy()
    };
    // A fraction of 1 gives 16 MiB: raising it holds the request.
    let remedy = with_max(16 * MIB, None);
    assert!(remedy.starts_with("raise the memory fraction"), "{remedy}");
    assert!(remedy.contains("still used by queued GPU work"), "{remedy}");
    // The limit is already the most: free arrays.
    assert!(with_max(8 * MIB, None).starts_with("free arrays that are no longer needed: the limit"));
    // The most any fraction gives is under the request.
    let remedy = with_max(3 * MIB, None);
    assert_eq!(
        remedy,
        "split the data into smaller arrays: the request is larger than the 3.00 MiB that the \
         arena may hold on this device at any memory fraction"
    );
    let remedy = with_max(3 * MIB, Some(4 * MIB));
    assert!(
        remedy.starts_with(
            "set GPU_ARENA_DEVICE_MEMORY_MB (ArenaConfig::fallback_device_memory_bytes) to the \
             device's real memory size: this backend does not report it, and the most any \
             memory fraction gives of the 4.00 MiB assumed is 3.00 MiB, less than the request"
        ),
        "{remedy}"
    );
    assert!(!remedy.contains("raise the memory fraction"), "{remedy}");
}

/// The report's arena line compares counts with the request: a limit or largest region just
/// under a unit gives its exact count too, and a fragmentation that is neither none nor total
/// does not read as 0 or 1.
#[test]
fn the_arena_line_gives_exact_counts_and_fragmentation_that_does_not_round_to_an_end() {
    let mut report = limit_reached_report();
    report.bytes_limit = 1024 * MIB - 256;
    report.max_region_bytes = 2048 * MIB - 256;
    for (fragmentation, text) in [
        (0.9995, "fragmentation 0.9995)"),
        (0.001, "fragmentation 0.001)"),
        (0.5, "fragmentation 0.50)"),
        (0.0, "fragmentation 0.00)"),
        (1.0, "fragmentation 1.00)"),
    ] {
        report.fragmentation = fragmentation;
        let message = report.to_string();
        assert!(message.contains(text), "{message}");
        assert!(
            message.contains("of a limit of 1.00 GiB (1073741568 bytes)")
                && message.contains("largest region 2.00 GiB (2147483392 bytes)."),
            "{message}"
        );
    }
}

/// A base region refused as too large for the device lowers the largest region, and the
/// reserve is made again in regions under that limit: what `RegionRefusal::TooLarge`
/// promises, for the reserve as for growth.
#[test]
fn a_reserve_region_refused_as_too_large_is_made_again_under_the_device_limit() {
    let mut device = Device::unlimited();
    device.max_region = 256 * KIB;
    let mut arena = Arena::new(ArenaOptions::preallocated(MIB));
    let a = arena.allocate(200 * KIB, 0, None, &mut device).unwrap();
    assert_eq!(
        device.asked,
        [MIB, 256 * KIB, 256 * KIB, 256 * KIB, 256 * KIB]
    );
    assert!(arena.is_reserved());
    assert_eq!(arena.stats().bytes_reserved, MIB);
    assert_eq!(a.size, 200 * KIB);
    // A request above the learned limit is refused without asking the device again.
    let report = oom(arena.allocate(300 * KIB, 0, None, &mut device).unwrap_err());
    assert_eq!(report.cause, OomCause::LargerThanAnyRegion);
    assert_eq!(report.max_region_bytes, 256 * KIB);
    assert_eq!(device.asked.len(), 5);
}
