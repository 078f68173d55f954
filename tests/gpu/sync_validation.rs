//! Khronos synchronization validation (`VK_LAYER_ENABLES=
//! VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT`, which CI's second pass turns
//! on) is really active: a deliberately broken raw command buffer, two copies through the same
//! range with no barrier between them, is reported as a hazard. wgpu's safe API always puts the
//! barrier in, so the broken buffer is recorded through wgpu-hal, in a child process whose
//! output this test reads (the hazard must not reach the suite's log, where every validation
//! error fails CI).

use crate::harness::{self, context};

/// Set in the child: record the hazard instead of checking for it.
const CHILD: &str = "GPU_ARENA_SYNC_HAZARD_CHILD";
const SYNC_VALIDATION: &str = "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT";

type Vulkan = wgpu::hal::api::Vulkan;

/// Copies `src` into `dst`, then `dst` into `out`, with no barrier: a read-after-write hazard.
fn submit_copies_without_a_barrier() {
    let ctx = context();
    let src = ctx.device_put(&[7u32; 64], &[64]).unwrap();
    let dst = ctx.zeros::<u32>(&[64]).unwrap();
    let out = ctx.zeros::<u32>(&[64]).unwrap();
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    let handle = |array: &gpu_arena::DeviceArray<u32>| {
        // SAFETY: the handle is only used while `array` (and so its buffer) is alive, and is
        // not destroyed.
        unsafe { array.buffer().as_hal::<Vulkan>() }.map(|b| unsafe { b.raw_handle() })
    };
    let (Some(vk_src), Some(vk_dst), Some(vk_out)) = (handle(&src), handle(&dst), handle(&out))
    else {
        println!("not Vulkan");
        return;
    };
    // SAFETY: read-only use of the hal device's function table.
    let device = unsafe { ctx.device().as_hal::<Vulkan>() }
        .unwrap()
        .raw_device()
        .clone();
    let region = |from: &gpu_arena::DeviceArray<u32>, to: &gpu_arena::DeviceArray<u32>| {
        ash::vk::BufferCopy {
            src_offset: from.byte_offset(),
            dst_offset: to.byte_offset(),
            size: 256,
        }
    };
    // SAFETY: two valid copies between live buffers inside their arrays' ranges, recorded into
    // the encoder's open command buffer; the missing barrier between them is the point (a
    // data race on the GPU, which is what the layer must report), and the test reads no result.
    unsafe {
        encoder.as_hal_mut::<Vulkan, _, _>(|hal| {
            let command_buffer = hal.unwrap().raw_handle();
            device.cmd_copy_buffer(command_buffer, vk_src, vk_dst, &[region(&src, &dst)]);
            device.cmd_copy_buffer(command_buffer, vk_dst, vk_out, &[region(&dst, &out)]);
        });
    }
    ctx.raw_submit([encoder.finish()], &[&src, &dst, &out])
        .unwrap();
    ctx.synchronize().unwrap();
    println!("submitted");
    // The layer writes its reports to a file of the harness's (see `harness/layer_log.rs`):
    // printed for the parent, which reads this child's output.
    for report in harness::validation_reports() {
        println!("{report}");
    }
}

#[gpu_test]
fn synchronization_validation_reports_a_deliberately_missing_barrier() {
    if std::env::var_os(CHILD).is_some() {
        submit_copies_without_a_barrier();
        return;
    }
    let text = harness::run_test_in_child(
        module_path!(),
        "synchronization_validation_reports_a_deliberately_missing_barrier",
        &[
            (CHILD, "1"),
            ("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation"),
            ("VK_LAYER_ENABLES", SYNC_VALIDATION),
        ],
    )
    .text;
    if text.contains("not Vulkan") {
        harness::skip(harness::Need::Vulkan);
        return;
    }
    if !text.contains("submitted") || text.contains("Cannot find layer") {
        eprintln!("the Khronos validation layer did not load:\n{text}");
        harness::skip(harness::Need::ValidationLayer);
        return;
    }
    assert!(
        text.contains("SYNC-HAZARD-READ-AFTER-WRITE"),
        "the layer did not report the hazard:\n{text}"
    );
    // Printed (not a validation error of this process) so CI's log shows the layer is active.
    println!("synchronization validation is active: it reported SYNC-HAZARD-READ-AFTER-WRITE");
}
