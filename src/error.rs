//! The crate's one error type, [`Error`], and its [`Result`] alias: what every public call
//! returns, with a variant a caller can match on for each way it can fail and the values
//! (sizes, limits, names) in fields. Every variant's message says what went wrong and what to
//! do. It is a module of its own because every other module returns it; the pure modules
//! (`arena`, `memplan`, `remat`) keep errors of their own, which convert into it.

pub use crate::app_work_refusal::AppWorkRefusal;
use crate::arena::{ArenaError, OutOfMemory, RegionRefusal};
pub use crate::argument_refusal::{ElementRefusal, IndexRefusal};
pub use crate::capture_refusal::{CaptureRefusal, RunRefusal, SlotKind};
pub use crate::collective_failure::{CollectiveFailure, PeerRefusal};
use crate::guard_levels::TransferDirection;
use crate::memory_kind::MemoryKind;
use crate::memplan::MemPlanError;
use crate::recorder::{overtakes_text, record_in_text, recorded_text};
pub use crate::recorder::{Access, ArrayDescription, Recorder, RecorderKind};
use crate::remat::RematError;

/// [`Error::ForeignArray`]'s `operation` when the kernel launched is another context's.
pub(crate) const FOREIGN_KERNEL: &str = "launch (the kernel)";

/// Everything that can go wrong in gpu-arena. The library never panics on user input: bad
/// shapes, out-of-memory, guard violations and missing adapters all arrive here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No GPU adapter at all (not even a software one).
    #[error("no GPU adapter found (backends tried: {tried}). {hint}")]
    NoAdapter {
        /// The wgpu backends that were asked, by name (`VULKAN | GL`).
        tried: String,
        /// What to install or set.
        hint: String,
    },
    /// `GPU_ARENA_ADAPTER` (or the config) named an adapter that does not exist.
    #[error("no adapter matches {selector}; available adapters: {available}. Set GPU_ARENA_ADAPTER (or ArenaConfig::adapter) to an index or a part of one of these names")]
    AdapterNotFound {
        /// What was asked for.
        selector: String,
        /// The adapters that exist, numbered.
        available: String,
    },
    /// The adapter refused to open a device.
    #[error("could not open a device on adapter {adapter}: {reason}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// wgpu's reason.
        reason: String,
    },
    /// The app's device (given to [`Context::from_wgpu`](crate::Context::from_wgpu)) lacks
    /// features, limits or capabilities the arena needs; nothing was opened. Each shortfall is
    /// in `missing` and in the message.
    #[error("the device given to Context::from_wgpu lacks what gpu-arena needs: {}; create the device with gpu_arena::DeviceRequirements::for_config(&config): its `features` in DeviceDescriptor::required_features and `limits` (or the adapter's own limits) in required_limits", missing.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    DeviceRequirements {
        /// Every feature, limit and capability the device falls short in.
        missing: Vec<crate::shortfall::DeviceShortfall>,
    },
    /// An array was handed to an app's pass as something the arena's buffers are not made for
    /// (their usages are [`ArenaConfig::array_usages`](crate::ArenaConfig::array_usages)).
    #[error("{operation} binds an array as {}, which arena buffers do not allow (ArenaConfig::array_usages is {}); add {} to ArenaConfig::array_usages when opening the context", flag_names(.missing.iter_names()), flag_names(.allowed.iter_names()), flag_names(.missing.iter_names()))]
    ArrayUsage {
        /// The call that was refused.
        operation: &'static str,
        /// The usage flag the arena's buffers lack.
        missing: wgpu::BufferUsages,
        /// The usages they have.
        allowed: wgpu::BufferUsages,
    },
    /// A configuration value (usually from the environment) is not valid.
    #[error("{variable}={value:?} is not valid: expected {expected}")]
    Config {
        /// What holds the value: the variable (`GPU_ARENA_STAGING_MB`) for a value
        /// [`ArenaConfig::from_env`](crate::ArenaConfig::from_env) read, else the field
        /// (`ArenaConfig::staging_bytes`), as [`ArenaConfig::validate`](crate::ArenaConfig::validate)
        /// and the checks a context makes against its device name it.
        variable: String,
        /// The value given.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// Two JAX alias variables disagree (as in JAX, this is an error rather than a silent pick).
    #[error("{first} and {second} disagree; unset one of them or set the GPU_ARENA_* variable, which wins")]
    ConflictingEnv {
        /// The first setting, `NAME=value`.
        first: String,
        /// The conflicting setting, `NAME=value`.
        second: String,
    },
    /// The arena could not satisfy an allocation; the report says why and what to change.
    #[error("{report}{dump}")]
    OutOfMemory {
        /// Requested size, usage, limit, largest free block, fragmentation and the remedy.
        report: Box<OutOfMemory>,
        /// Where `GPU_ARENA_DUMP_ON_OOM` wrote the snapshot and report, if it did.
        dump: String,
    },
    /// The device has no memory of this kind: a discrete GPU whose memory table has no
    /// host-visible type outside its device-local heaps has no pinned-host memory
    /// ([`MemoryPlan::pinned_host`](crate::MemoryPlan) is `None`; `device_report` shows the
    /// table). Nothing was allocated; keep such arrays in [`MemoryKind::Device`].
    #[error(
        "{device} has no {kind} memory: its memory table has no host-visible type outside the \
         device-local heaps (MemoryPlan::pinned_host is None; device_report prints the table); \
         keep the array in device memory (MemoryKind::Device)"
    )]
    MemoryKindUnavailable {
        /// The kind asked for.
        kind: MemoryKind,
        /// The device's name.
        device: String,
    },
    /// Misuse of the arena's API (unknown allocation, bad alignment) or a region the device refused.
    #[error(transparent)]
    Arena(ArenaError),
    /// The memory-type policy could not make a plan for this device.
    #[error(transparent)]
    MemPlan(#[from] MemPlanError),
    /// A checkpointing chain or plan was refused (see [`RematError`]).
    #[error(transparent)]
    Remat(#[from] RematError),
    /// The device refused a buffer outside the arena (the staging memory transfers go
    /// through): `refusal` tells memory that is short now
    /// ([`RegionRefusal::OutOfMemory`]: free device memory or lower the staging) from a size
    /// beyond a device limit ([`RegionRefusal::TooLarge`], with the size, the limit and its
    /// name). A lost device is [`Error::DeviceLost`] instead. Nothing was changed.
    #[error(
        "GPU memory backend failed during {during}: {refusal}{}",
        buffer_refusal_hint(refusal)
    )]
    BufferRefused {
        /// What was being done, with the buffer's label and size.
        during: String,
        /// How the device refused it (in the message, so not also its `source()`: a chain
        /// printer states the cause once).
        refusal: RegionRefusal,
    },
    /// The Vulkan driver or gpu-allocator failed.
    #[error("GPU memory backend failed during {during}: {reason}")]
    Backend {
        /// What was being done.
        during: String,
        /// The driver's or allocator's reason.
        reason: String,
    },
    /// The device failed while waiting for GPU work (lost, timed out).
    #[error("GPU device error while {during}: {reason}")]
    Device {
        /// What was being waited for.
        during: String,
        /// wgpu's reason.
        reason: String,
    },
    /// The context's device is lost (driver reset, GPU removed) or was destroyed with
    /// `wgpu::Device::destroy`: no later call can reach the device, so each one refuses with
    /// this error once the context knows of the loss. It learns of it from wgpu's device-lost
    /// callback or at its next wait for the GPU: a submission made just after
    /// `Device::destroy` may still return `Ok` (its work never runs, and reading what it would
    /// have written refuses with this error), and reading a zero-copy array that no GPU work
    /// uses needs no device. The memory of the context's arrays stays allocated until they are
    /// dropped.
    #[error("the GPU device of this context is lost or was destroyed ({reason}), so {during} failed; drop this context and its arrays and open a new Context")]
    DeviceLost {
        /// What was being done.
        during: String,
        /// wgpu's reason for the loss in words (`destroyed by wgpu::Device::destroy`, or `lost
        /// for a reason wgpu does not know`), then its message, where it gave one.
        reason: String,
    },
    /// A shape does not match the data or the operation.
    #[error("shape error in {operation}: {reason}")]
    Shape {
        /// The operation that was called.
        operation: &'static str,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// An argument other than a shape is not valid.
    #[error("invalid argument to {operation}: {reason}")]
    InvalidArgument {
        /// The operation that was called.
        operation: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// An index the call cannot take: start indices not one per dimension, a view's index
    /// past its dimension, a start outside the operand under
    /// [`ArenaConfig::strict_starts`](crate::ArenaConfig::strict_starts), a rank not in the MPI
    /// group. `refusal` says which, with the values; nothing was read, written or sent, and a
    /// donated operand comes back intact.
    #[error("invalid argument to {operation}: {refusal}")]
    Index {
        /// The call that was refused.
        operation: &'static str,
        /// What was refused, with its values.
        refusal: IndexRefusal,
    },
    /// An element type whose size the call cannot take: a fill's element that does not divide
    /// 16 bytes, a bitcast to a type of another size. `refusal` says which, with the types and
    /// sizes; nothing was changed, and a donated array comes back intact.
    #[error("invalid argument to {operation}: {refusal}")]
    Element {
        /// The call that was refused.
        operation: &'static str,
        /// What was refused, with its values.
        refusal: ElementRefusal,
    },
    /// A check inside gpu-arena failed: a plan it made does not hold (a value its kernels
    /// cannot take, a buffer its schedule reads before making it). This is a bug in
    /// gpu-arena, not in the caller's arguments; nothing ran, and the message (with the
    /// shapes involved) is what to report.
    #[error("internal error in {operation}: {reason}; this is a gpu-arena bug, please report it with the shapes involved")]
    Internal {
        /// The call that found it.
        operation: &'static str,
        /// What does not hold.
        reason: String,
    },
    /// A single op would overtake work that an unsubmitted user recorder (a
    /// [`Sequence`](crate::Sequence), a [`Capture`](crate::Capture), an
    /// [`AppWork`](crate::AppWork)) recorded on an array: any use of an array it writes, a
    /// write of an array it reads. Nothing was recorded or submitted; end the recorder first,
    /// or record the op in it (a `Sequence` or a `Capture`, for the ops they record by the same
    /// name: `launch`, `copy`, `fill`, `fill_in_place`, `dynamic_slice`,
    /// `dynamic_update_slice`, `dynamic_update_slice_copy`, `offload`, `prefetch`; not a host
    /// read, a copy to another context, a captured run or an `AppWork` hand-out, and nothing in
    /// an `AppWork`, which records none: the message offers only what can be done).
    #[error("invalid argument to {operation}: {argument}, {array}, is pending in {recorder} (made by {}), which has recorded {} and not been {}; {operation} {}: call {} on that {} first (when another thread records it, order this call after that thread's {}, e.g. with a channel or a join){}", .recorder.kind.made_by(), recorded_text(.recorded), .recorder.kind.ended(), overtakes_text(.recorded, .access), .recorder.kind.ends(), .recorder.kind, .recorder.kind.ends(), record_in_text(&.recorder.kind, .operation))]
    PendingInRecorder {
        /// The operation that was called.
        operation: &'static str,
        /// The argument (binding name, or what the op calls it) that names the array.
        argument: String,
        /// The array: element type, shape, label (boxed to keep `Error` small).
        array: Box<ArrayDescription>,
        /// The recorder holding the work.
        recorder: Recorder,
        /// What the recorder recorded on the array.
        recorded: Access,
        /// What the refused op would do to it.
        access: Access,
    },
    /// A run of a captured step was given what it cannot take (a slot of another capture, a
    /// slice of another length than captured, start indices of another rank, parameters of
    /// another size, an array for a slot of another shape or memory kind or one the step uses
    /// otherwise): `refusal` ([`RunRefusal`]) says which, with the values. Nothing ran and
    /// nothing the run set was kept.
    #[error("invalid argument to CapturedStep::run: {refusal}")]
    CapturedRun {
        /// What was refused, with its values.
        refusal: RunRefusal,
    },
    /// An [`AppWork`](crate::AppWork) refused to hand out an array for the app's pass: an
    /// empty array, index elements of another size than 2 or 4 bytes, or a binding above a
    /// device limit. `refusal` says which, with the values; nothing was recorded.
    #[error("invalid argument to {operation}: {refusal}")]
    AppWork {
        /// The call that was refused (`AppWork::uniform`, ...).
        operation: &'static str,
        /// What was refused, with its values.
        refusal: AppWorkRefusal,
    },
    /// An op of a [`Capture`](crate::Capture) (or a launch given a capture's parameter slot)
    /// was refused before anything was recorded: a slot of another capture, an index slot of
    /// another rank, a capture whose recorder was moved out of it, or a moving box too large
    /// for one dispatch or over arrays too large to bind whole. `refusal` says which, with the
    /// values; a donated operand comes back intact.
    #[error("invalid argument to {operation}: {refusal}")]
    Capture {
        /// The op that was refused.
        operation: &'static str,
        /// What was refused, with its values.
        refusal: CaptureRefusal,
    },
    /// A single op or launch was called on the context (not on the capture) from the thread
    /// that holds a [`Capture`](crate::Capture) of it open, in the default
    /// [`CaptureMode::ThreadLocal`](crate::CaptureMode::ThreadLocal): it would run at once and
    /// not be part of the step. Nothing ran.
    #[error("{operation} was called on the context while this thread holds Capture #{capture} of it open: it would run now and not be part of the captured step. {}", eager_remedy(.operation))]
    EagerDuringCapture {
        /// The op that was called.
        operation: &'static str,
        /// The open capture's number.
        capture: u64,
    },
    /// The transfer guard refused a transfer; nothing was transferred. The message begins as
    /// JAX's does (`Disallowed host-to-device transfer`), so a search for JAX's words finds it.
    #[error("Disallowed {direction} transfer: {} by {operation} ({explicitness}). {}", crate::count::count(*.bytes, "byte"), guard_remedy(.explicitness, *.direction))]
    TransferGuard {
        /// Which way the data would have moved.
        direction: TransferDirection,
        /// How many bytes.
        bytes: u64,
        /// The operation that asked for it.
        operation: &'static str,
        /// "implicit" or "explicit".
        explicitness: &'static str,
    },
    /// Host memory for something whose size the caller chose (a readback's output, a timeline's
    /// ring) could not be allocated; nothing was changed.
    #[error("could not allocate {} of host memory for {purpose}; ask for less (fewer or smaller arrays, a smaller capacity) or free host memory", host_bytes(*.bytes))]
    HostAllocation {
        /// What the memory was for.
        purpose: String,
        /// How many bytes were asked for (`u64::MAX` when the size itself overflows).
        bytes: u64,
    },
    /// Arrays (or a kernel) from two different contexts were mixed in one operation.
    #[error("{operation} got {} of {array_device}, but runs on {context_device}; arrays and kernels can only be used with the context that made them (move data between devices with an explicit transfer)", if *.operation == FOREIGN_KERNEL { "a kernel" } else { "an array" })]
    ForeignArray {
        /// The operation that was called: `launch (the kernel)` when the kernel is the other
        /// context's.
        operation: &'static str,
        /// The context the array (or kernel) belongs to: its number and adapter.
        array_device: String,
        /// The context the operation runs on.
        context_device: String,
    },
    /// A kernel's source did not compile: it does not parse or validate, has no such entry
    /// point, binds what gpu-arena cannot fill, or the device refused it.
    #[error("kernel {kernel} did not compile: {message}")]
    KernelCompile {
        /// The kernel's name (label or entry point).
        kernel: String,
        /// The compiler's message, pointing at the source line where it can.
        message: String,
    },
    /// A launch's arguments do not match what the kernel binds; nothing was submitted.
    #[error("launch of kernel {kernel}: {binding}: {reason}")]
    KernelArgument {
        /// The kernel's name.
        kernel: String,
        /// The binding (or the parameter block, or the grid) at fault.
        binding: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A collective over MPI ranks (`distributed`, cargo feature `mpi`) did not run: the
    /// ranks disagreed on what to do (operation, element type, shape, root), another rank
    /// refused its part, or MPI could not be started. No rank moved any data, and a donated
    /// array comes back intact.
    #[error("{operation} across MPI ranks did not run: {reason}")]
    Collective {
        /// The collective that was called (`all_reduce`, `broadcast`, ...).
        operation: &'static str,
        /// Which: a mismatch, another rank's refusal (naming the rank), or how MPI was
        /// started.
        failure: CollectiveFailure,
        /// What each side asked for, which rank differs, or what failed, and what to do.
        reason: String,
    },
}

impl From<ArenaError> for Error {
    fn from(error: ArenaError) -> Self {
        match error {
            ArenaError::OutOfMemory(report) => Error::OutOfMemory {
                report,
                dump: String::new(),
            },
            ArenaError::DeviceLost { reason } => Error::DeviceLost {
                during: "allocating device memory".to_string(),
                reason,
            },
            other => Error::Arena(other),
        }
    }
}

/// What to do about eager `operation` on a capturing thread: record it with the capture's
/// method of the same name (copies between contexts, on one context, are a `copy`), unless
/// nothing records it (a measurement); finish the capture first; or run beside it on purpose.
fn eager_remedy(operation: &str) -> String {
    let record = match operation {
        "tune_kernels" | "tune_kernel" | "host_link_bandwidth" => String::new(),
        "device_put_from" => "Record it in the capture instead (cap.copy(..)), ".into(),
        other => format!("Record it in the capture instead (cap.{other}(..)), "),
    };
    format!(
        "{record}{} the capture first, or call cap.set_mode(CaptureMode::Relaxed) to run eager \
         work beside an open capture on purpose",
        if record.is_empty() {
            "Finish"
        } else {
            "finish"
        }
    )
}

/// What to do about a transfer the guard refused: an implicit one can also be made explicit;
/// an explicit one is refused only by the `*_explicit` levels. The ways to set the level name
/// the direction's own variable first: it overrides the all-directions one.
fn guard_remedy(explicitness: &str, direction: TransferDirection) -> String {
    let suffix = direction.env_suffix();
    let ways = format!(
        "TransferGuard::scoped_direction or TransferGuard::scoped; \
         GPU_ARENA_TRANSFER_GUARD_{suffix} / JAX_TRANSFER_GUARD_{suffix}, or where neither is set \
         GPU_ARENA_TRANSFER_GUARD / JAX_TRANSFER_GUARD; ArenaConfig::transfer_guard in code"
    );
    match explicitness {
        "explicit" => format!(
            "Set the transfer guard to \"allow\", \"log\", \"disallow\" or \"log_explicit\" \
             for this direction ({ways}): only \"disallow_explicit\" refuses explicit transfers"
        ),
        _ => format!(
            "Set the transfer guard to \"allow\" or \"log\" for this direction ({ways}) or, \
             where it is \"disallow\" rather than \"disallow_explicit\", make the transfer \
             explicit (device_put, device_get)"
        ),
    }
}

/// A host allocation's size as its message says it: `u64::MAX` stands for one that overflows.
fn host_bytes(bytes: u64) -> String {
    match bytes {
        u64::MAX => "more bytes than an address can count (the size overflows)".into(),
        bytes => format!("{bytes} bytes"),
    }
}

/// What to do about a refused buffer, by the kind of refusal.
fn buffer_refusal_hint(refusal: &RegionRefusal) -> &'static str {
    match refusal {
        RegionRefusal::OutOfMemory { .. } => {
            "; free device memory (drop arrays, lower GPU_ARENA_MEM_FRACTION) or lower \
             GPU_ARENA_STAGING_MB"
        }
        RegionRefusal::TooLarge { .. } => "; lower GPU_ARENA_STAGING_MB below the limit",
        _ => "",
    }
}

/// Set flags by name, `VERTEX | INDEX`, from bitflags' `iter_names()` (their `Debug` wraps
/// them in the type's name).
pub(crate) fn flag_names<'a, F>(flags: impl Iterator<Item = (&'a str, F)>) -> String {
    let names: Vec<&str> = flags.map(|(name, _)| name).collect();
    match names.is_empty() {
        true => "nothing".to_string(),
        false => names.join(" | "),
    }
}

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_allocation_of_an_overflowing_size_says_so() {
        let overflow = Error::HostAllocation {
            purpose: "the result of device_get".into(),
            bytes: u64::MAX,
        };
        assert!(
            overflow.to_string().contains("(the size overflows)"),
            "{overflow}"
        );
        let plain = Error::HostAllocation {
            purpose: "x".into(),
            bytes: 4096,
        };
        assert!(
            plain.to_string().contains("4096 bytes of host memory"),
            "{plain}"
        );
    }
}
