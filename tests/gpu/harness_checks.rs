//! The harness itself: a test whose GPU work the Vulkan validation layer refuses fails, though
//! its own body ends normally, and without a check written in it. Shown in a child process,
//! because one validation error fails every test of the binary that ends after it.

use crate::harness::{self, context};

/// Set in the child: record the refused work instead of checking the outcome.
const CHILD: &str = "GPU_ARENA_HARNESS_REFUSED_WORK_CHILD";

type Vulkan = wgpu::hal::api::Vulkan;

/// Records a copy of zero bytes through wgpu-hal (wgpu's safe API would refuse it first).
/// Vulkan forbids it (`VkBufferCopy::size` must be greater than 0), so the layer reports
/// `VUID-VkBufferCopy-size-01988` while it is recorded; nothing else goes wrong. Returns
/// whether the context is on Vulkan at all.
fn record_a_copy_the_layer_refuses() -> bool {
    let ctx = context();
    let a = ctx.zeros::<u32>(&[64]).unwrap();
    let b = ctx.zeros::<u32>(&[64]).unwrap();
    // SAFETY: the handles are used only while `a` and `b` (and so their buffers) are alive,
    // and are not destroyed.
    let handle = |array: &gpu_arena::DeviceArray<u32>| {
        unsafe { array.buffer().as_hal::<Vulkan>() }.map(|b| unsafe { b.raw_handle() })
    };
    let (Some(vk_a), Some(vk_b)) = (handle(&a), handle(&b)) else {
        return false;
    };
    // SAFETY: read-only use of the hal device's function table.
    let device = unsafe { ctx.device().as_hal::<Vulkan>() }
        .unwrap()
        .raw_device()
        .clone();
    let region = ash::vk::BufferCopy {
        src_offset: a.byte_offset(),
        dst_offset: b.byte_offset(),
        size: 0,
    };
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    // SAFETY: a copy between two live buffers, recorded into the encoder's open command
    // buffer; its size of zero is the point (the layer must report it), and it moves no byte.
    // The command buffer is dropped unsubmitted.
    unsafe {
        encoder.as_hal_mut::<Vulkan, _, _>(|hal| {
            device.cmd_copy_buffer(hal.unwrap().raw_handle(), vk_a, vk_b, &[region]);
        });
    }
    drop(encoder.finish());
    true
}

/// Whether the Khronos validation layer is installed: without it nothing reports the copy.
fn validation_layer_installed() -> bool {
    // SAFETY: loads the system's Vulkan loader, as wgpu does, and only lists its layers.
    let Ok(entry) = (unsafe { ash::Entry::load() }) else {
        return false;
    };
    unsafe { entry.enumerate_instance_layer_properties() }.is_ok_and(|layers| {
        layers
            .iter()
            .any(|layer| layer.layer_name_as_c_str() == Ok(c"VK_LAYER_KHRONOS_validation"))
    })
}

#[gpu_test]
fn a_test_whose_work_the_validation_layer_refuses_fails_without_a_check_of_its_own() {
    if std::env::var_os(CHILD).is_some() {
        let on_vulkan = record_a_copy_the_layer_refuses();
        println!("{}", if on_vulkan { "recorded" } else { "not Vulkan" });
        return;
    }
    if !validation_layer_installed() {
        harness::skip(harness::Need::ValidationLayer);
        return;
    }
    let child = harness::run_test_in_child(
        module_path!(),
        "a_test_whose_work_the_validation_layer_refuses_fails_without_a_check_of_its_own",
        &[(CHILD, "1")],
    );
    let text = &child.text;
    if text.contains("not Vulkan") {
        harness::skip(harness::Need::Vulkan);
        return;
    }
    assert!(text.contains("recorded"), "the child did not run:\n{text}");
    assert!(
        !child.status.success(),
        "the harness let a refused test pass:\n{text}"
    );
    assert!(
        text.contains("Vulkan validation error(s) were logged")
            && text.contains("VUID-VkBufferCopy-size-01988"),
        "the child failed, but not on the harness's check of the layer's report:\n{text}"
    );
}
