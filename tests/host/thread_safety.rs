//! What the crate docs promise about threads, checked by the compiler: a context, its arrays,
//! kernels, recorders, captured steps and their slots may be sent to and shared between
//! threads (`Send + Sync`); a `TransferGuard` is a scope of its own thread.

fn send_and_sync<T: Send + Sync>() {}

#[test]
fn contexts_arrays_kernels_recorders_steps_and_slots_are_send_and_sync() {
    send_and_sync::<gpu_arena::Context>();
    send_and_sync::<gpu_arena::DeviceArray<f32>>();
    send_and_sync::<gpu_arena::ArrayView<'static, f32>>();
    send_and_sync::<gpu_arena::Kernel>();
    send_and_sync::<gpu_arena::Sequence>();
    send_and_sync::<gpu_arena::Capture>();
    send_and_sync::<gpu_arena::CapturedStep>();
    send_and_sync::<gpu_arena::InputSlot<f32>>();
    send_and_sync::<gpu_arena::ParamsSlot<u32>>();
    send_and_sync::<gpu_arena::IndexSlot>();
    send_and_sync::<gpu_arena::ReadSlot<f32>>();
    send_and_sync::<gpu_arena::AppWork>();
    send_and_sync::<gpu_arena::UploadBatch<'static>>();
    send_and_sync::<gpu_arena::Error>();
    send_and_sync::<gpu_arena::Donated<f32>>();
}
