//! Every path through mapped memory with flushes and invalidates, on lavapipe.
//!
//! `force_non_coherent` makes the backend treat its coherent memory as the non-coherent memory
//! of Intel non-LLC, ARM and Apple GPUs: each host write is flushed and each host read
//! invalidated (legal on coherent memory), with ranges rounded to lavapipe's
//! `nonCoherentAtomSize` of 64 under the validation layer. Sizes and offsets are odd on purpose,
//! so that ranges start and end inside atoms.

use crate::harness::{context_with, test_config, Rng};
use gpu_arena::{ArenaConfig, Context, HostSyncCounts};

/// Byte lengths that start and end inside atoms of 64 and 256, and span several.
const ODD_LENGTHS: [usize; 8] = [1, 3, 63, 65, 255, 257, 4099, 70_001];

fn forced(zero_copy: bool) -> Context {
    context_with(forced_config(zero_copy))
}

/// The configuration of [`forced`].
fn forced_config(zero_copy: bool) -> ArenaConfig {
    ArenaConfig {
        force_non_coherent: true,
        zero_copy,
        // Staging of 64 KiB + 4 bytes: large arrays go through it in pieces that start and end
        // inside atoms.
        staging_bytes: (64 << 10) + 4,
        ..test_config()
    }
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    Rng(seed).bytes(len)
}

/// What happened between two counts.
fn since(before: HostSyncCounts, after: HostSyncCounts) -> (u64, u64) {
    (
        after.flushes - before.flushes,
        after.invalidates - before.invalidates,
    )
}

#[gpu_test(needs = Vulkan)]
fn zero_copy_puts_flush_and_gets_invalidate_with_data_intact_at_odd_sizes() {
    let ctx = forced(true);
    assert!(
        ctx.memory_plan().arena_host_visible,
        "lavapipe maps its arena"
    );
    // Arrays side by side in the arena, each at its own (256-aligned) offset.
    let data: Vec<Vec<u8>> = ODD_LENGTHS
        .iter()
        .enumerate()
        .map(|(i, &len)| bytes(len, i as u64))
        .collect();
    let before = ctx.host_sync_counts();
    let arrays: Vec<_> = data
        .iter()
        .map(|d| ctx.device_put(d, &[d.len()]).unwrap())
        .collect();
    let after_puts = ctx.host_sync_counts();
    let (flushes, invalidates) = since(before, after_puts);
    assert!(
        flushes >= data.len() as u64,
        "{flushes} flushes for {} puts",
        data.len()
    );
    assert_eq!(invalidates, 0, "puts read nothing");
    for (array, want) in arrays.iter().zip(&data) {
        assert_eq!(&ctx.device_get(array).unwrap(), want);
    }
    let (flushes, invalidates) = since(after_puts, ctx.host_sync_counts());
    assert_eq!(flushes, 0, "gets write nothing");
    assert!(
        invalidates >= data.len() as u64,
        "{invalidates} invalidates"
    );
}

#[gpu_test(needs = Vulkan)]
fn staging_uploads_flush_and_readbacks_invalidate_with_data_intact_in_pieces() {
    let ctx = forced(false);
    let data: Vec<Vec<u8>> = ODD_LENGTHS
        .iter()
        .chain(&[200_003usize]) // three staging buffers' worth
        .enumerate()
        .map(|(i, &len)| bytes(len, 100 + i as u64))
        .collect();
    let before = ctx.host_sync_counts();
    // One at a time, then a batch, then many at once on the way back.
    let mut arrays: Vec<_> = data
        .iter()
        .map(|d| ctx.device_put(d, &[d.len()]).unwrap())
        .collect();
    let mut batch = ctx.upload_batch();
    let pending: Vec<_> = data
        .iter()
        .map(|d| batch.put(d, &[d.len()]).unwrap())
        .collect();
    arrays.extend(batch.finish().unwrap().take_all(pending).unwrap());
    let after_puts = ctx.host_sync_counts();
    let (flushes, invalidates) = since(before, after_puts);
    assert!(flushes >= 2 * data.len() as u64, "{flushes} flushes");
    assert_eq!(invalidates, 0);
    let refs: Vec<_> = arrays.iter().collect();
    let back = ctx.device_get_many(&refs).unwrap();
    for (i, got) in back.iter().enumerate() {
        assert_eq!(got, &data[i % data.len()], "array {i}");
    }
    let (_, invalidates) = since(after_puts, ctx.host_sync_counts());
    assert!(
        invalidates >= data.len() as u64,
        "{invalidates} invalidates"
    );
}

#[gpu_test(needs = Vulkan)]
fn host_path_kernels_invalidate_their_sources_and_flush_their_results() {
    let ctx = forced(true);
    assert_eq!(
        ctx.adapter_info().device_type,
        wgpu::DeviceType::Cpu,
        "lavapipe runs these ops on the host"
    );
    // A 37 x 13 operand of u8 (rows of 13 bytes: every row starts inside an atom).
    let (rows, cols) = (37usize, 13usize);
    let values = bytes(rows * cols, 7);
    let operand = ctx.device_put(&values, &[rows, cols]).unwrap();

    let before = ctx.host_sync_counts();
    let slice = ctx.dynamic_slice(&operand, &[5, 3], &[19, 7]).unwrap();
    let (flushes, invalidates) = since(before, ctx.host_sync_counts());
    assert!(
        flushes > 0 && invalidates > 0,
        "{flushes} flushes, {invalidates} invalidates"
    );
    let want: Vec<u8> = (5..24)
        .flat_map(|r| values[r * cols + 3..r * cols + 10].to_vec())
        .collect();
    assert_eq!(ctx.device_get(&slice).unwrap(), want);

    // An update of 11 x 5 at (9, 4), in place.
    let update = bytes(11 * 5, 8);
    let update_array = ctx.device_put(&update, &[11, 5]).unwrap();
    let updated = ctx
        .dynamic_update_slice(operand, &update_array, &[9, 4])
        .unwrap();
    let mut model = values.clone();
    for r in 0..11 {
        model[(9 + r) * cols + 4..(9 + r) * cols + 9].copy_from_slice(&update[r * 5..r * 5 + 5]);
    }
    assert_eq!(ctx.device_get(&updated).unwrap(), model);

    let copy = ctx.copy(&updated).unwrap();
    assert_eq!(ctx.device_get(&copy).unwrap(), model);
    let filled = ctx.fill(&[3, 333], 0xdead_beef_u32).unwrap();
    assert_eq!(ctx.device_get(&filled).unwrap(), vec![0xdead_beef_u32; 999]);
    let zeros = ctx.zeros::<u16>(&[517]).unwrap();
    assert_eq!(ctx.device_get(&zeros).unwrap(), vec![0u16; 517]);
}

#[gpu_test]
fn random_puts_updates_and_gets_agree_with_a_host_model() {
    let ctx = forced(true);
    let mut rng = Rng(0x5eed);
    for round in 0..20 {
        let rows = 1 + rng.below(40) as usize;
        let cols = 1 + rng.below(70) as usize;
        let values = bytes(rows * cols, round);
        let operand = ctx.device_put(&values, &[rows, cols]).unwrap();
        let (ur, uc) = (
            1 + rng.below(rows as u64) as usize,
            1 + rng.below(cols as u64) as usize,
        );
        let (r0, c0) = (
            rng.below((rows - ur + 1) as u64) as usize,
            rng.below((cols - uc + 1) as u64) as usize,
        );
        let update = bytes(ur * uc, 1000 + round);
        let update_array = ctx.device_put(&update, &[ur, uc]).unwrap();
        let updated = ctx
            .dynamic_update_slice(operand, &update_array, &[r0 as i64, c0 as i64])
            .unwrap();
        let mut model = values;
        for r in 0..ur {
            let at = (r0 + r) * cols + c0;
            model[at..at + uc].copy_from_slice(&update[r * uc..(r + 1) * uc]);
        }
        assert_eq!(ctx.device_get(&updated).unwrap(), model, "round {round}");
    }
}

#[gpu_test]
fn coherent_memory_needs_no_flush_or_invalidate_without_the_switch() {
    let ctx = context_with(test_config());
    let data = bytes(4099, 3);
    let array = ctx.device_put(&data, &[data.len()]).unwrap();
    assert_eq!(ctx.device_get(&array).unwrap(), data);
    let copy = ctx.copy(&array).unwrap();
    assert_eq!(ctx.device_get(&copy).unwrap(), data);
    assert_eq!(ctx.host_sync_counts(), HostSyncCounts::default());
}

#[gpu_test(needs = Vulkan)]
fn a_sequence_of_recorded_puts_and_device_kernels_reads_back_intact_through_invalidates() {
    // The WGSL kernels, not the host path: the GPU writes the arena, the host reads it after.
    let ctx = context_with(ArenaConfig {
        force_device_kernels: true,
        ..forced_config(true)
    });
    let base: Vec<u32> = (0..1111).collect();
    let update: Vec<u32> = (0..333).map(|v| v * 7 + 1).collect();
    let mut s = ctx.sequence();
    let a = s.put(&base, &[1111]).unwrap();
    let u = s.put(&update, &[333]).unwrap();
    let a = s.dynamic_update_slice(a, &u, &[101]).unwrap();
    s.submit().unwrap();
    let before = ctx.host_sync_counts();
    let back = ctx.device_get(&a).unwrap();
    let mut want = base;
    want[101..434].copy_from_slice(&update);
    assert_eq!(back, want);
    let (_, invalidates) = since(before, ctx.host_sync_counts());
    assert!(
        invalidates >= 1,
        "the GPU's writes are invalidated before the read"
    );
}
