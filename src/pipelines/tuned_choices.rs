//! The shapes kernel tuning chose, per device: kept for the whole process (every context on the
//! same device and driver reuses them) and, with `GPU_ARENA_CACHE_DIR` set, in a file beside the
//! pipeline cache that later processes read. [`SizeClass`], [`TunedKernel`] and
//! [`KernelTuningReport`] are what a program sees of them. The measuring is `ops/tuner.rs`.
//!
//! The file is hardened as the pipeline cache is (`disk_cache.rs`): a private directory, no
//! link followed, a checksum trailer, and contents checked line by line. It names the device
//! and a checksum of every kernel source in every shape; a file for another device or kernel
//! set, a damaged file, or a line naming a shape tuning never measures is ignored with a
//! warning and rewritten after the next tuning. A planted file can at worst pick a slower
//! shape: every shape writes the same bytes, so no file can make a kernel wrong.

use super::cache_stats::DiskCacheLoad;
use super::disk_cache::{checksum, read_cache_file, write_cache_file, CacheFileRefusal};
use super::library_kernels::Builtin;
use crate::backend::private_dir;
use crate::kernel_tuning::{KernelShape, TuningClock};
use crate::lock::{rank, Mutex};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The first line of a tuning file (changes with its layout).
const FILE_HEADER: &str = "gpu-arena kernel tuning 1";

/// How many bytes one dispatch of a library kernel moves, in three classes that are tuned
/// apart: few workgroups favour small shapes, many favour more items per invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SizeClass {
    /// Under 256 KiB (tuned on 64 KiB).
    Small,
    /// 256 KiB up to 4 MiB (tuned on 1 MiB).
    Medium,
    /// 4 MiB and more (tuned on 4 MiB).
    Large,
}

impl SizeClass {
    /// Every class, smallest first.
    pub const ALL: [SizeClass; 3] = [SizeClass::Small, SizeClass::Medium, SizeClass::Large];

    /// The class of a dispatch that moves `bytes`.
    pub fn of(bytes: u64) -> SizeClass {
        match bytes {
            0..0x40000 => SizeClass::Small,
            0x40000..0x40_0000 => SizeClass::Medium,
            _ => SizeClass::Large,
        }
    }

    /// The bytes tuning moves per kernel run for this class: near the middle of the class, and
    /// small enough that tuning every shape stays well under a second on a CPU adapter. On a
    /// GPU the large class moves 64 MiB instead, more than its L2 cache holds (50 MB on an
    /// H100), so that its shapes are timed against device memory as large copies run; a
    /// kernel too slow for its bytes is timed on fewer, halved down to 256 KiB.
    pub fn tuning_bytes(self) -> u64 {
        match self {
            SizeClass::Small => 64 << 10,
            SizeClass::Medium => 1 << 20,
            SizeClass::Large => 4 << 20,
        }
    }

    /// The class's name in reports and the tuning file.
    pub fn name(self) -> &'static str {
        match self {
            SizeClass::Small => "small",
            SizeClass::Medium => "medium",
            SizeClass::Large => "large",
        }
    }
}

/// Where a tuned choice came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuningOrigin {
    /// Measured by this process.
    Measured,
    /// Read from the tuning file of an earlier process.
    File,
    /// Measuring failed (the reason was logged): the kernel keeps its fixed shape in this
    /// process, and nothing is written to the file.
    Failed,
}

impl TuningOrigin {
    /// The origin in a word: `measured`, `file`, `failed`.
    pub fn name(self) -> &'static str {
        match self {
            TuningOrigin::Measured => "measured",
            TuningOrigin::File => "file",
            TuningOrigin::Failed => "failed",
        }
    }
}

/// One kernel and size class as tuning left it: the shape its ops now run in, and the
/// bandwidths measured on the tuning workload ([`SizeClass::tuning_bytes`], fewer for a kernel
/// too slow to time on that many; the fastest of the rounds; bytes moved, read and written
/// counted once, per second).
#[derive(Clone, Debug, PartialEq)]
pub struct TunedKernel {
    /// The kernel's name, as in [`KernelCacheStats::compiles`](crate::KernelCacheStats) and
    /// the timeline (`copy_rows<vec4<u32>>(contiguous)`, `copy_rows<u32>`, `copy_bytes`,
    /// `fill`, ...).
    pub kernel: &'static str,
    /// The size class the choice is for.
    pub size_class: SizeClass,
    /// The shape chosen.
    pub shape: KernelShape,
    /// The shape without tuning.
    pub fixed_shape: KernelShape,
    /// Bytes per second of the chosen shape.
    pub bytes_per_second: f64,
    /// Bytes per second of the fixed shape, measured in the same rounds.
    pub fixed_bytes_per_second: f64,
    /// Bytes per second of the device's own copy of the same bytes (`copy_buffer_to_buffer`;
    /// `clear_buffer` for `fill`), measured in the same rounds: the reference a kernel that
    /// moves bytes is held to.
    pub device_copy_bytes_per_second: f64,
    /// Measured now, read from the file, or failed.
    pub origin: TuningOrigin,
}

/// A user's kernel tuned over the values of one of its override constants.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedUserKernel {
    /// The kernel's name, as [`Kernel::name`](crate::Kernel::name) gives it: its label, else its
    /// entry point and a short hash of its source (`main#1a2b3c4d`).
    pub kernel: String,
    /// The override constant tuned.
    pub constant: String,
    /// The value chosen.
    pub value: f64,
    /// Seconds of the fastest round of each value measured, a value given twice once (none
    /// when read from the file).
    pub seconds: Vec<(f64, f64)>,
    /// Measured now or read from the file.
    pub origin: TuningOrigin,
}

/// What kernel tuning did on a context's device: [`Context::kernel_tuning`](crate::Context::kernel_tuning).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTuningReport {
    /// The choices known for the device (this process's and the file's), by kernel and class.
    pub kernels: Vec<TunedKernel>,
    /// Users' kernels tuned over an override constant
    /// ([`Context::tune_kernel`](crate::Context::tune_kernel)), this process's and the file's.
    pub user_kernels: Vec<TunedUserKernel>,
    /// The host link's bandwidth, offload and prefetch together, in bytes per second, once
    /// [`Context::host_link_bandwidth`](crate::Context::host_link_bandwidth) has measured it
    /// (in this process or an earlier one).
    pub host_link_bytes_per_second: Option<f64>,
    /// Tuning jobs this process ran on the device: one per library kernel and size class
    /// measured, and one per user's kernel tuned ([`crate::Context::tune_kernel`]).
    pub jobs: u64,
    /// Wall time of those jobs together (compiling the shapes and timing them).
    pub tuning_time: Duration,
    /// The tuning file, when `GPU_ARENA_CACHE_DIR` is set.
    pub file: Option<PathBuf>,
    /// What became of the file when the device's choices were first looked up.
    pub file_load: DiskCacheLoad,
    /// Why the last write of the file failed; `None` once one succeeds.
    pub file_write_error: Option<String>,
    /// How this context's device times tuning jobs: by its timestamps where it has them
    /// (choices read from the file were timed however the process that wrote them timed).
    pub clock: TuningClock,
}

/// Why a tuning file is not used; each variant's text says what is wrong.
#[derive(Debug, thiserror::Error)]
enum TuningFileRefusal {
    /// Refused as a cache file (a link, another user's, damaged, truncated, ...).
    #[error(transparent)]
    File(#[from] CacheFileRefusal),
    #[error("it is not UTF-8 text")]
    NotText,
    #[error("it does not start with \"{FILE_HEADER}\"")]
    Header,
    #[error("it was written for another device or driver")]
    AnotherDevice,
    #[error("it was measured on another set of kernel shapes")]
    AnotherKernelSet,
    /// A line that is not one tuning writes (a shape it never measures, a bad number, ...).
    #[error("choice {number} is not one tuning makes: {line:?}")]
    Line { number: usize, line: String },
}

/// The library's and users' choices and the host link's bandwidth, as a file holds them.
type Choices = (
    BTreeMap<(Builtin, SizeClass), TunedKernel>,
    BTreeMap<u64, TunedUserKernel>,
    Option<f64>,
);

/// One user line after `user\t`: key, kernel name, constant, value.
fn parse_user_line(fields: &str) -> Option<(u64, TunedUserKernel)> {
    let [key, kernel, constant, value] = fields.split('\t').collect::<Vec<_>>()[..] else {
        return None;
    };
    let value = as_written(value).filter(|v| v.is_finite())?;
    let tuned = TunedUserKernel {
        kernel: kernel.to_string(),
        constant: constant.to_string(),
        value,
        seconds: Vec::new(),
        origin: TuningOrigin::File,
    };
    Some((u64::from_str_radix(key, 16).ok()?, tuned))
}

/// The choices of one device (backend, adapter, driver).
struct DeviceChoices {
    /// [`device_key`].
    key: String,
    /// Checksum of the kernel set: a file for another one is not used.
    variants: u64,
    /// The device's shapes to choose from (the subgroup size adds one workgroup).
    candidates: Vec<KernelShape>,
    choices: BTreeMap<(Builtin, SizeClass), TunedKernel>,
    /// Users' kernels by [`user_key`].
    user: BTreeMap<u64, TunedUserKernel>,
    host_link: Option<f64>,
    jobs: u64,
    tuning_time: Duration,
    file: Option<PathBuf>,
    file_load: DiskCacheLoad,
    file_write_error: Option<String>,
}

/// Every device's choices in this process, by [`device_key`].
static CHOICES: Mutex<Option<HashMap<String, DeviceChoices>>> =
    Mutex::new(rank::TUNED_CHOICES, None);

/// Held while a tuning job measures: one job at a time in the process, so that two jobs
/// never time each other's work, and a thread that needs a kernel being tuned waits for that
/// job and then finds its choice.
pub(crate) static TUNING_JOB: Mutex<()> = Mutex::new(rank::TUNING_JOB, ());

/// Names one device and driver: choices made on it hold for it alone.
fn device_key(adapter: &wgpu::AdapterInfo) -> String {
    format!(
        "{:?} {:04x}:{:04x} {} | {} | {} | subgroup {}",
        adapter.backend,
        adapter.vendor,
        adapter.device,
        adapter.name,
        adapter.driver,
        adapter.driver_info,
        adapter.subgroup_max_size
    )
    .replace(['\n', '\r', '\t'], " ")
}

/// Runs `f` on the device's choices, loading the tuning file from `dir` the first time the
/// device is met in this process.
fn with_device<R>(
    adapter: &wgpu::AdapterInfo,
    dir: Option<&Path>,
    f: impl FnOnce(&mut DeviceChoices) -> R,
) -> R {
    let key = device_key(adapter);
    let mut all = CHOICES.lock().unwrap_or_else(|p| p.into_inner());
    let device = all
        .get_or_insert_with(HashMap::new)
        .entry(key)
        .or_insert_with_key(|key| DeviceChoices::load(key, adapter, dir));
    f(device)
}

/// The shape chosen for `kernel` in `class` on the device, if any (from this process or the
/// file).
pub(crate) fn chosen(
    adapter: &wgpu::AdapterInfo,
    dir: Option<&Path>,
    kernel: Builtin,
    class: SizeClass,
) -> Option<KernelShape> {
    with_device(adapter, dir, |device| {
        device.choices.get(&(kernel, class)).map(|c| c.shape)
    })
}

/// Names a user's kernel tuning: its source, entry point, other constants, and the constant
/// tuned with the values it is tuned over (another set of values is another tuning).
pub(crate) fn user_key(parts: &[&[u8]]) -> u64 {
    let mut bytes = Vec::new();
    for part in parts {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
        bytes.extend_from_slice(part);
    }
    checksum(&bytes)
}

/// The value chosen for the user's kernel tuning `key` on the device, if any.
pub(crate) fn chosen_user(
    adapter: &wgpu::AdapterInfo,
    dir: Option<&Path>,
    key: u64,
) -> Option<f64> {
    with_device(adapter, dir, |device| {
        device.user.get(&key).map(|t| t.value)
    })
}

/// Keeps a user's kernel tuning for the process and in the file.
pub(crate) fn record_user(
    adapter: &wgpu::AdapterInfo,
    dir: Option<&Path>,
    key: u64,
    tuned: TunedUserKernel,
    took: Duration,
) {
    record_job(adapter, dir, took, |device| {
        device.user.insert(key, tuned);
        true
    });
}

/// Counts a tuning job that took `took` and keeps its outcome with `keep`, which says whether
/// the file is to be written.
fn record_job(
    adapter: &wgpu::AdapterInfo,
    dir: Option<&Path>,
    took: Duration,
    keep: impl FnOnce(&mut DeviceChoices) -> bool,
) {
    with_device(adapter, dir, |device| {
        device.jobs += 1;
        device.tuning_time += took;
        if keep(device) {
            device.write();
        }
    });
}

/// The host link's bandwidth measured on the device, if it was.
pub(crate) fn host_link(adapter: &wgpu::AdapterInfo, dir: Option<&Path>) -> Option<f64> {
    with_device(adapter, dir, |device| device.host_link)
}

/// Keeps the host link's measured bandwidth for the process and in the file.
pub(crate) fn record_host_link(adapter: &wgpu::AdapterInfo, dir: Option<&Path>, rate: f64) {
    with_device(adapter, dir, |device| {
        device.host_link = Some(rate);
        device.write();
    });
}

/// The shapes tuning measures on the device.
pub(crate) fn candidates(adapter: &wgpu::AdapterInfo) -> Vec<KernelShape> {
    KernelShape::candidates(adapter.subgroup_max_size)
}

/// Keeps a tuning job's outcome for the process and, when it was measured, in the file.
pub(crate) fn record(
    adapter: &wgpu::AdapterInfo,
    dir: Option<&Path>,
    kernel: Builtin,
    tuned: TunedKernel,
    took: Duration,
) {
    record_job(adapter, dir, took, |device| {
        let measured = tuned.origin == TuningOrigin::Measured;
        device.choices.insert((kernel, tuned.size_class), tuned);
        measured
    });
}

/// How tuning times its work on `device`: by its timestamps where it has `TIMESTAMP_QUERY`.
pub(crate) fn tuning_clock(device: &wgpu::Device) -> TuningClock {
    match device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
        true => TuningClock::Timestamps,
        false => TuningClock::WallClock,
    }
}

/// The device's choices, jobs and file, as
/// [`Context::kernel_tuning`](crate::Context::kernel_tuning) reports them.
pub(crate) fn report(
    adapter: &wgpu::AdapterInfo,
    dir: Option<&Path>,
    clock: TuningClock,
) -> KernelTuningReport {
    with_device(adapter, dir, |device| KernelTuningReport {
        kernels: device.choices.values().cloned().collect(),
        user_kernels: device.user.values().cloned().collect(),
        host_link_bytes_per_second: device.host_link,
        jobs: device.jobs,
        tuning_time: device.tuning_time,
        file: device.file.clone(),
        file_load: device.file_load.clone(),
        file_write_error: device.file_write_error.clone(),
        clock,
    })
}

impl DeviceChoices {
    /// The device's choices as the file in `dir` holds them (none without a directory or a
    /// usable file; a refused file is logged and recorded in `file_load`).
    fn load(key: &str, adapter: &wgpu::AdapterInfo, dir: Option<&Path>) -> Self {
        let candidates = candidates(adapter);
        let mut device = DeviceChoices {
            key: key.to_string(),
            variants: Builtin::variants_checksum(adapter.subgroup_max_size),
            candidates,
            choices: BTreeMap::new(),
            user: BTreeMap::new(),
            host_link: None,
            jobs: 0,
            tuning_time: Duration::ZERO,
            file: None,
            file_load: DiskCacheLoad::Off,
            file_write_error: None,
        };
        let Some(dir) = dir else {
            return device;
        };
        if let Err(reason) = private_dir(dir) {
            log::warn!(
                "gpu-arena: not keeping kernel tuning in {} (GPU_ARENA_CACHE_DIR): {reason} \
                 (kernels are tuned again in each process)",
                dir.display()
            );
            device.file_load = DiskCacheLoad::DirectoryRefused {
                reason: reason.to_string(),
            };
            return device;
        }
        let file = dir.join(format!(
            "kernel-tuning-{:016x}.txt",
            checksum(key.as_bytes())
        ));
        device.file = Some(file.clone());
        let parsed = match read_cache_file(&file) {
            Ok(None) => {
                device.file_load = DiskCacheLoad::NoFile;
                return device;
            }
            Ok(Some(data)) => device.parse(data.driver_data()),
            Err(refused) => Err(TuningFileRefusal::File(refused)),
        };
        match parsed {
            Ok((choices, user, host_link)) => {
                device.choices = choices;
                device.user = user;
                device.host_link = host_link;
                device.file_load = DiskCacheLoad::Used;
            }
            Err(refused) => {
                log::warn!(
                    "gpu-arena: ignoring the kernel tuning file {}: {refused} (kernels are \
                     tuned again; the file is rewritten after the next tuning)",
                    file.display()
                );
                device.file_load = DiskCacheLoad::Discarded {
                    reason: refused.to_string(),
                };
            }
        }
        device
    }

    /// The choices a file's body holds, or why none of them is used.
    fn parse(&self, body: &[u8]) -> Result<Choices, TuningFileRefusal> {
        let text = std::str::from_utf8(body).map_err(|_| TuningFileRefusal::NotText)?;
        // Lines as tuning writes them: each ends in `\n` alone (a `\r` stays in its line).
        let mut lines = text.split_terminator('\n');
        if lines.next() != Some(FILE_HEADER) {
            return Err(TuningFileRefusal::Header);
        }
        if lines.next() != Some(&format!("device {}", self.key)) {
            return Err(TuningFileRefusal::AnotherDevice);
        }
        if lines.next() != Some(&format!("variants {:016x}", self.variants)) {
            return Err(TuningFileRefusal::AnotherKernelSet);
        }
        let mut choices = BTreeMap::new();
        let mut user = BTreeMap::new();
        let mut host_link = None;
        for (number, line) in lines.enumerate() {
            let refused = || TuningFileRefusal::Line {
                number: number + 1,
                line: line.to_string(),
            };
            // Tuning writes each choice once: a second line for one is not its.
            let repeated = if let Some(fields) = line.strip_prefix("user\t") {
                let (key, tuned) = parse_user_line(fields).ok_or_else(refused)?;
                user.insert(key, tuned).is_some()
            } else if let Some(rate) = line.strip_prefix("host_link\t") {
                host_link
                    .replace(positive_rate(rate).ok_or_else(refused)?)
                    .is_some()
            } else {
                let (kernel, tuned) = self.parse_line(line).ok_or_else(refused)?;
                choices.insert((kernel, tuned.size_class), tuned).is_some()
            };
            if repeated {
                return Err(refused());
            }
        }
        Ok((choices, user, host_link))
    }

    /// Takes the choices of the file as it is now (a file this process would not use is left
    /// to be overwritten) wherever this process has none, or only a failed one.
    fn merge_file(&mut self, file: &Path) {
        let Ok(Some(data)) = read_cache_file(file) else {
            return;
        };
        let Ok((choices, user, host_link)) = self.parse(data.driver_data()) else {
            return;
        };
        for (pair, tuned) in choices {
            if self
                .choices
                .get(&pair)
                .is_none_or(|ours| ours.origin == TuningOrigin::Failed)
            {
                self.choices.insert(pair, tuned);
            }
        }
        for (key, tuned) in user {
            self.user.entry(key).or_insert(tuned);
        }
        self.host_link = self.host_link.or(host_link);
    }

    /// One line: kernel, class, shape, then the three bandwidths (each measured, so above 0);
    /// `None` if any field is not one tuning writes.
    fn parse_line(&self, line: &str) -> Option<(Builtin, TunedKernel)> {
        let fields: Vec<&str> = line.split('\t').collect();
        let [kernel, class, shape, chosen, fixed, device_copy] = fields[..] else {
            return None;
        };
        let kernel = Builtin::ALL.into_iter().find(|k| k.name() == kernel)?;
        let size_class = SizeClass::ALL.into_iter().find(|c| c.name() == class)?;
        let shape = shape
            .parse::<KernelShape>()
            .ok()
            .filter(|parsed| parsed.to_string() == shape)?;
        if !self.candidates.contains(&shape) {
            return None;
        }
        let rate = positive_rate;
        let tuned = TunedKernel {
            kernel: kernel.name(),
            size_class,
            shape,
            fixed_shape: kernel.fixed_shape(),
            bytes_per_second: rate(chosen)?,
            fixed_bytes_per_second: rate(fixed)?,
            device_copy_bytes_per_second: rate(device_copy)?,
            origin: TuningOrigin::File,
        };
        Some((kernel, tuned))
    }

    /// Writes every measured or loaded choice to the file (a failure is logged once and kept
    /// in the report: it costs the next process a tuning, nothing else). Choices another
    /// process wrote there since this one read it are kept, and this process takes them too
    /// (its own win where both have one), so processes that tune side by side share the file
    /// rather than the last writer's choices alone.
    fn write(&mut self) {
        let Some(file) = self.file.clone() else {
            return;
        };
        self.merge_file(&file);
        let mut text = format!(
            "{FILE_HEADER}\ndevice {}\nvariants {:016x}\n",
            self.key, self.variants
        );
        for ((kernel, class), tuned) in &self.choices {
            if tuned.origin == TuningOrigin::Failed {
                continue;
            }
            text.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\n",
                kernel.name(),
                class.name(),
                tuned.shape,
                tuned.bytes_per_second,
                tuned.fixed_bytes_per_second,
                tuned.device_copy_bytes_per_second
            ));
        }
        // Names are the user's: kept to one field of one line.
        let field = |text: &str| text.replace(['\t', '\n', '\r'], " ");
        for (key, tuned) in &self.user {
            text.push_str(&format!(
                "user\t{key:016x}\t{}\t{}\t{}\n",
                field(&tuned.kernel),
                field(&tuned.constant),
                tuned.value
            ));
        }
        if let Some(rate) = self.host_link {
            text.push_str(&format!("host_link\t{rate}\n"));
        }
        match write_cache_file(&file, text.as_bytes()) {
            Ok(_) => self.file_write_error = None,
            Err(reason) => {
                if self.file_write_error.is_none() {
                    log::warn!(
                        "gpu-arena: could not write the kernel tuning file {}: {reason} \
                         (kernels are tuned again in the next process)",
                        file.display()
                    );
                }
                self.file_write_error = Some(reason.to_string());
            }
        }
    }
}

/// A bandwidth as tuning writes it: a finite number above 0 (a measurement moved bytes in some
/// time), `None` otherwise.
fn positive_rate(text: &str) -> Option<f64> {
    as_written(text).filter(|r| r.is_finite() && *r > 0.0)
}

/// The number in `text` when `text` is how tuning writes it (Rust's shortest form, which reads
/// back exactly): no sign, blank, exponent or trailing zero it would not write.
fn as_written(text: &str) -> Option<f64> {
    text.parse::<f64>().ok().filter(|v| v.to_string() == text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_cache_loads_read_as_words() {
        let origins = [
            TuningOrigin::Measured,
            TuningOrigin::File,
            TuningOrigin::Failed,
        ];
        assert_eq!(
            origins.map(TuningOrigin::name),
            ["measured", "file", "failed"]
        );
        use super::super::cache_stats::DiskCacheLoad;
        assert_eq!(DiskCacheLoad::Used.to_string(), "used");
        assert_eq!(DiskCacheLoad::NoFile.to_string(), "no file");
        let discarded = DiskCacheLoad::Discarded {
            reason: "a checksum that does not match".into(),
        };
        assert_eq!(discarded.name(), "discarded");
        assert_eq!(
            discarded.to_string(),
            "discarded: a checksum that does not match"
        );
    }

    fn adapter(name: &str) -> wgpu::AdapterInfo {
        let mut adapter = wgpu::AdapterInfo::new(wgpu::DeviceType::Cpu, wgpu::Backend::Vulkan);
        adapter.name = name.into();
        adapter.driver = "test driver 1.0".into();
        adapter
    }

    fn temporary_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "gpu-arena-tuned-choices-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn measured(shape: KernelShape) -> TunedKernel {
        TunedKernel {
            kernel: Builtin::Fill.name(),
            size_class: SizeClass::Medium,
            shape,
            fixed_shape: KernelShape::FIXED,
            bytes_per_second: 2.5e9,
            fixed_bytes_per_second: 2e9,
            device_copy_bytes_per_second: 1e10,
            origin: TuningOrigin::Measured,
        }
    }

    /// A device's choices as loaded from `dir`, with one measured choice written back.
    fn written(dir: &Path, adapter: &wgpu::AdapterInfo) -> DeviceChoices {
        let mut device = DeviceChoices::load(&device_key(adapter), adapter, Some(dir));
        let shape = KernelShape {
            workgroup: 128,
            per_invocation: 8,
        };
        let failed = TunedKernel {
            size_class: SizeClass::Small,
            origin: TuningOrigin::Failed,
            ..measured(KernelShape::FIXED)
        };
        device
            .choices
            .insert((Builtin::Fill, SizeClass::Medium), measured(shape));
        device
            .choices
            .insert((Builtin::Fill, SizeClass::Small), failed);
        device.user.insert(0xabc, user_choice());
        device.host_link = Some(1.5e10);
        device.write();
        device
    }

    fn user_choice() -> TunedUserKernel {
        TunedUserKernel {
            // Tabs and line ends in a user's name stay inside its field.
            kernel: "scale\tby\ntwo".into(),
            constant: "WG".into(),
            value: 128.0,
            seconds: vec![(64.0, 2e-3), (128.0, 1e-3)],
            origin: TuningOrigin::Measured,
        }
    }

    #[test]
    fn size_classes_split_at_256_kib_and_4_mib() {
        assert_eq!(SizeClass::of(0), SizeClass::Small);
        assert_eq!(SizeClass::of((256 << 10) - 1), SizeClass::Small);
        assert_eq!(SizeClass::of(256 << 10), SizeClass::Medium);
        assert_eq!(SizeClass::of((4 << 20) - 1), SizeClass::Medium);
        assert_eq!(SizeClass::of(4 << 20), SizeClass::Large);
        assert_eq!(SizeClass::of(u64::MAX), SizeClass::Large);
        for class in SizeClass::ALL {
            assert_eq!(SizeClass::of(class.tuning_bytes()), class);
        }
    }

    #[test]
    fn a_written_file_gives_the_next_process_its_measured_choices_only() {
        let dir = temporary_dir("round-trip");
        let adapter = adapter("round trip");
        let first = written(&dir, &adapter);
        assert_eq!(first.file_load, DiskCacheLoad::NoFile);
        assert_eq!(first.file_write_error, None);
        let next = DeviceChoices::load(&device_key(&adapter), &adapter, Some(&dir));
        assert_eq!(next.file_load, DiskCacheLoad::Used);
        let mut expected = measured(KernelShape {
            workgroup: 128,
            per_invocation: 8,
        });
        expected.origin = TuningOrigin::File;
        assert_eq!(
            next.choices.into_iter().collect::<Vec<_>>(),
            [((Builtin::Fill, SizeClass::Medium), expected)]
        );
        let user = TunedUserKernel {
            kernel: "scale by two".into(),
            seconds: Vec::new(),
            origin: TuningOrigin::File,
            ..user_choice()
        };
        assert_eq!(next.user.into_iter().collect::<Vec<_>>(), [(0xabc, user)]);
        assert_eq!(next.host_link, Some(1.5e10));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn two_processes_tuning_side_by_side_keep_both_their_choices_in_the_file() {
        let dir = temporary_dir("side-by-side");
        let adapter = adapter("side by side");
        let key = device_key(&adapter);
        // Both read the file before either wrote.
        let mut first = DeviceChoices::load(&key, &adapter, Some(&dir));
        let mut second = DeviceChoices::load(&key, &adapter, Some(&dir));
        let shape = KernelShape {
            workgroup: 64,
            per_invocation: 2,
        };
        first
            .choices
            .insert((Builtin::Fill, SizeClass::Medium), measured(shape));
        first.host_link = Some(2e10);
        first.write();
        let small = TunedKernel {
            size_class: SizeClass::Small,
            ..measured(KernelShape::FIXED)
        };
        let failed = TunedKernel {
            origin: TuningOrigin::Failed,
            ..measured(KernelShape::FIXED)
        };
        second
            .choices
            .insert((Builtin::Fill, SizeClass::Small), small);
        // Its own failed job yields to the other process's measured choice.
        second
            .choices
            .insert((Builtin::Fill, SizeClass::Medium), failed);
        second.user.insert(0xdef, user_choice());
        second.write();
        assert_eq!(
            second.choices[&(Builtin::Fill, SizeClass::Medium)].shape,
            shape
        );
        let next = DeviceChoices::load(&key, &adapter, Some(&dir));
        assert_eq!(next.file_load, DiskCacheLoad::Used);
        let shapes: Vec<_> = next
            .choices
            .iter()
            .map(|(pair, tuned)| (*pair, tuned.shape))
            .collect();
        assert_eq!(
            shapes,
            [
                ((Builtin::Fill, SizeClass::Small), KernelShape::FIXED),
                ((Builtin::Fill, SizeClass::Medium), shape)
            ]
        );
        assert_eq!(next.user.keys().collect::<Vec<_>>(), [&0xdef]);
        assert_eq!(next.host_link, Some(2e10));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_for_another_device_or_kernel_set_or_with_any_bad_line_is_not_used() {
        let dir = temporary_dir("refusals");
        let adapter = adapter("refusals");
        let key = device_key(&adapter);
        let device = written(&dir, &adapter);
        let file = device.file.clone().expect("a file in the directory");
        let good = read_cache_file(&file)
            .unwrap()
            .unwrap()
            .driver_data()
            .to_vec();
        let good = String::from_utf8(good).unwrap();
        let header = format!(
            "{FILE_HEADER}\ndevice {key}\nvariants {:016x}\n",
            device.variants
        );
        let line = |fields: &str| format!("{header}{fields}\n");
        let cases = [
            (
                "header",
                good.replacen(FILE_HEADER, "gpu-arena kernel tuning 0", 1),
            ),
            ("device", good.replacen(&key, "another GPU", 1)),
            ("variants", good.replacen("variants ", "variants 1", 1)),
            ("shape", line("fill\tmedium\t1024x8\t1\t1\t1")),
            ("candidate", line("fill\tmedium\t32x4\t1\t1\t1")),
            ("kernel", line("scatter\tmedium\t256x4\t1\t1\t1")),
            ("class", line("fill\thuge\t256x4\t1\t1\t1")),
            ("rate", line("fill\tmedium\t256x4\tNaN\t1\t1")),
            ("negative", line("fill\tmedium\t256x4\t1\t-1\t1")),
            ("zero rate", line("fill\tmedium\t256x4\t1\t0\t1")),
            ("spaced shape", line("fill\tmedium\t 64 x 8 \t1\t1\t1")),
            ("shape in capitals", line("fill\tmedium\t256X4\t1\t1\t1")),
            ("blank after shape", line("fill\tmedium\t256x4 \t1\t1\t1")),
            ("signed rate", line("fill\tmedium\t256x4\t+5\t1\t1")),
            ("exponent rate", line("fill\tmedium\t256x4\t1\t5e8\t1")),
            ("user value spelled", line("user\t0abc\tk\tWG\t64.0")),
            ("host link spelled", line("host_link\t 5")),
            (
                "repeated choice",
                line("fill\tmedium\t256x4\t1\t1\t1\nfill\tmedium\t64x8\t1\t1\t1"),
            ),
            (
                "repeated user",
                line("user\t0abc\tk\tWG\t64\nuser\t0abc\tk\tWG\t128"),
            ),
            ("repeated host link", line("host_link\t5\nhost_link\t6")),
            ("fields", line("fill\tmedium\t256x4\t1\t1")),
            ("user value", line("user\t0abc\tk\tWG\tinf")),
            ("user key", line("user\tnot-hex\tk\tWG\t64")),
            ("user fields", line("user\t0abc\tk\t64")),
            ("host link", line("host_link\t-5")),
            ("line ends of two bytes", good.replace('\n', "\r\n")),
            (
                "a choice line ending in \\r",
                line("fill\tmedium\t256x4\t1\t1\t1\r"),
            ),
        ]
        .map(|(what, text)| (what, text.into_bytes()));
        for (what, bytes) in cases.into_iter().chain([("utf8", vec![0xff, 0xfe, 0xfd])]) {
            write_cache_file(&file, &bytes).unwrap();
            let loaded = DeviceChoices::load(&key, &adapter, Some(&dir));
            assert!(
                matches!(&loaded.file_load, DiskCacheLoad::Discarded { .. }),
                "{what}: {:?}",
                loaded.file_load
            );
            assert!(loaded.choices.is_empty(), "{what}");
        }
        // A damaged body, a truncated file.
        write_cache_file(&file, good.as_bytes()).unwrap();
        let mut damaged = std::fs::read(&file).unwrap();
        let last = damaged.len() - 20;
        damaged[last] ^= 1;
        std::fs::write(&file, &damaged).unwrap();
        let loaded = DeviceChoices::load(&key, &adapter, Some(&dir));
        assert!(
            matches!(&loaded.file_load, DiskCacheLoad::Discarded { reason } if reason.contains("checksum"))
        );
        std::fs::write(&file, &damaged[..7]).unwrap();
        let loaded = DeviceChoices::load(&key, &adapter, Some(&dir));
        assert!(
            matches!(&loaded.file_load, DiskCacheLoad::Discarded { reason } if reason.contains("truncated"))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_that_cannot_be_one_keeps_choices_in_the_process_only() {
        let dir = temporary_dir("not-a-directory");
        std::fs::write(&dir, b"a file").unwrap();
        let adapter = adapter("refused directory");
        let mut device = DeviceChoices::load(&device_key(&adapter), &adapter, Some(&dir));
        assert!(matches!(
            device.file_load,
            DiskCacheLoad::DirectoryRefused { .. }
        ));
        assert_eq!(device.file, None);
        device.write();
        assert_eq!(std::fs::read(&dir).unwrap(), b"a file");
        let _ = std::fs::remove_file(&dir);
    }
}
