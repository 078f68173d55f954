//! Export of the timeline as a Chrome trace (the JSON "Trace Event Format"), which both
//! ui.perfetto.dev and chrome://tracing open: counters for bytes in use and reserved, slices
//! for transfers and for kernels as the GPU ran them (the `GPU` track, from timestamps), instants
//! for allocations, frees, region changes and dispatches, and one async
//! slice per array from its allocation to its free (named by its label, or its type and shape,
//! with its allocation site), as Perfetto users read an allocator's track.

use super::report::format::Bytes;
use super::timeline::{MemoryTimeline, TimelineEventKind};
use crate::arena::AllocationId;
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

/// The one "process" of the trace.
const PID: u32 = 1;
/// Track (thread) of allocations, frees and region changes.
const ARENA_TRACK: u32 = 1;
/// Track of transfer slices.
const TRANSFER_TRACK: u32 = 2;
/// Track of GPU submissions.
const DISPATCH_TRACK: u32 = 3;
/// Track of kernels as they ran on the GPU (from its timestamps).
const GPU_TRACK: u32 = 4;
/// Track names, in the order the viewers should list them (`thread_sort_index`).
const TRACKS: [(u32, &str); 4] = [
    (ARENA_TRACK, "arena"),
    (TRANSFER_TRACK, "transfers"),
    (DISPATCH_TRACK, "dispatches"),
    (GPU_TRACK, "GPU"),
];
/// Nanoseconds per microsecond: the format's timestamps are microseconds (fractions allowed).
const NS_PER_US: f64 = 1000.0;

/// One entry of `traceEvents`, as the format defines it.
#[derive(Serialize)]
struct TraceEvent {
    name: String,
    cat: &'static str,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    /// Scope of an instant: `t` (its track) or `p` (the whole process).
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    /// The id pairing an async slice's begin (`b`) with its end (`e`).
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    args: serde_json::Value,
}

impl TraceEvent {
    fn new(name: String, ph: &'static str, time_ns: u64, tid: u32) -> TraceEvent {
        TraceEvent {
            name,
            cat: "gpu-arena",
            ph,
            ts: time_ns as f64 / NS_PER_US,
            dur: None,
            pid: PID,
            tid,
            s: None,
            id: None,
            args: serde_json::Value::Null,
        }
    }

    fn metadata(name: &str, tid: u32, args: serde_json::Value) -> TraceEvent {
        TraceEvent {
            args,
            ..TraceEvent::new(name.to_string(), "M", 0, tid)
        }
    }
}

impl MemoryTimeline {
    /// The timeline as Chrome-trace JSON: open it in <https://ui.perfetto.dev> or
    /// chrome://tracing. `process` names the process row (the device name is a good choice).
    ///
    /// Counters `bytes_in_use` and `bytes_reserved` get a sample whenever they change;
    /// transfers are slices on the `transfers` track (their host-side duration);
    /// allocations, frees and dispatches are instants on the `arena` and `dispatches` tracks;
    /// kernels that the GPU timed are slices on the `GPU` track, named by the kernel, from
    /// their GPU begin for their GPU duration;
    /// region reserves and releases are process-wide instants. Each array whose allocation the
    /// timeline holds is also an async slice (category `array`) from its allocation to its
    /// free, named by its latest label (or its element type and shape), with its size and
    /// allocation site in the arguments; an array still alive at the end has no end.
    pub fn to_chrome_trace(&self, process: &str) -> String {
        let mut out = vec![TraceEvent::metadata(
            "process_name",
            0,
            json!({ "name": format!("gpu-arena: {process}") }),
        )];
        for (tid, name) in TRACKS {
            out.push(TraceEvent::metadata(
                "thread_name",
                tid,
                json!({ "name": name }),
            ));
            out.push(TraceEvent::metadata(
                "thread_sort_index",
                tid,
                json!({ "sort_index": tid }),
            ));
        }
        // Arrays are often named just after they are made (`device_put(..)?.with_label(..)`):
        // name each allocation by its latest label.
        let mut renamed: HashMap<AllocationId, &str> = HashMap::new();
        for event in &self.events {
            if let TimelineEventKind::Label { allocation, label } = &event.kind {
                renamed.insert(*allocation, label);
            }
        }
        let mut last_counters: Option<(u64, u64)> = None;
        // Arrays whose slice has begun, with the slice's name.
        let mut open: HashMap<AllocationId, String> = HashMap::new();
        for event in &self.events {
            let t = event.time_ns;
            let mut trace = match &event.kind {
                TimelineEventKind::Alloc {
                    allocation,
                    region,
                    offset,
                    size,
                    requested,
                    label,
                    site,
                    dtype,
                    shape,
                } => {
                    let label = renamed.get(allocation).copied().or(label.as_deref());
                    let name = array_name(label, dtype.as_deref(), shape.as_deref());
                    let args = json!({ "allocation": allocation.0, "region": region.0,
                        "offset": offset, "size": size, "requested": requested, "label": label,
                        "site": site, "dtype": dtype, "shape": shape });
                    let mut slice = TraceEvent::new(name.clone(), "b", t, ARENA_TRACK);
                    slice.cat = "array";
                    slice.id = Some(format!("{:#x}", allocation.0));
                    slice.args = args.clone();
                    out.push(slice);
                    let mut e = TraceEvent::new(
                        format!("alloc {name} {}", Bytes(*size)),
                        "i",
                        t,
                        ARENA_TRACK,
                    );
                    open.insert(*allocation, name);
                    e.s = Some("t");
                    e.args = args;
                    e
                }
                TimelineEventKind::Free {
                    allocation,
                    region,
                    offset,
                    size,
                    pending,
                    label,
                    site,
                    dtype,
                    shape,
                } => {
                    let args = json!({ "allocation": allocation.0, "region": region.0,
                        "offset": offset, "size": size, "pending": pending, "label": label,
                        "site": site, "dtype": dtype, "shape": shape });
                    let name = match open.remove(allocation) {
                        Some(name) => {
                            let mut end = TraceEvent::new(name.clone(), "e", t, ARENA_TRACK);
                            end.cat = "array";
                            end.id = Some(format!("{:#x}", allocation.0));
                            out.push(end);
                            name
                        }
                        None => array_name(label.as_deref(), dtype.as_deref(), shape.as_deref()),
                    };
                    let mut e = TraceEvent::new(
                        format!("free {name} {}", Bytes(*size)),
                        "i",
                        t,
                        ARENA_TRACK,
                    );
                    e.s = Some("t");
                    e.args = args;
                    e
                }
                TimelineEventKind::RegionReserve { region, size } => {
                    let mut e = TraceEvent::new(
                        format!("reserve region {} ({})", region.0, Bytes(*size)),
                        "i",
                        t,
                        ARENA_TRACK,
                    );
                    e.s = Some("p");
                    e.args = json!({ "region": region.0, "size": size });
                    e
                }
                TimelineEventKind::RegionRelease { region, size } => {
                    let mut e = TraceEvent::new(
                        format!("release region {} ({})", region.0, Bytes(*size)),
                        "i",
                        t,
                        ARENA_TRACK,
                    );
                    e.s = Some("p");
                    e.args = json!({ "region": region.0, "size": size });
                    e
                }
                TimelineEventKind::Transfer {
                    direction,
                    bytes,
                    arrays,
                    explicit,
                    duration_ns,
                } => {
                    let mut e = TraceEvent::new(
                        format!(
                            "{direction} {} ({})",
                            Bytes(*bytes),
                            if *explicit { "explicit" } else { "implicit" }
                        ),
                        "X",
                        t,
                        TRANSFER_TRACK,
                    );
                    e.dur = Some(*duration_ns as f64 / NS_PER_US);
                    e.args = json!({ "direction": direction, "bytes": bytes,
                        "arrays": arrays, "explicit": explicit });
                    e
                }
                TimelineEventKind::Label { allocation, label } => {
                    let mut e = TraceEvent::new(format!("label {label}"), "i", t, ARENA_TRACK);
                    e.s = Some("t");
                    e.args = json!({ "allocation": allocation.0, "label": label });
                    e
                }
                TimelineEventKind::Dispatch { name, submission } => {
                    let mut e = TraceEvent::new(name.clone(), "i", t, DISPATCH_TRACK);
                    e.s = Some("t");
                    e.args = json!({ "submission": submission });
                    e
                }
                TimelineEventKind::Kernel {
                    name,
                    submission,
                    duration_ns,
                } => {
                    let mut e = TraceEvent::new(name.clone(), "X", t, GPU_TRACK);
                    e.dur = Some(*duration_ns as f64 / NS_PER_US);
                    e.args = json!({ "submission": submission, "gpu_ns": duration_ns });
                    e
                }
            };
            trace.cat = match event.kind {
                TimelineEventKind::Transfer { .. } => "transfer",
                TimelineEventKind::Dispatch { .. } => "dispatch",
                TimelineEventKind::Kernel { .. } => "kernel",
                _ => "memory",
            };
            out.push(trace);
            let counters = (event.bytes_in_use, event.bytes_reserved);
            if last_counters != Some(counters) {
                for (name, value) in [("bytes_in_use", counters.0), ("bytes_reserved", counters.1)]
                {
                    let mut c = TraceEvent::new(name.to_string(), "C", t, 0);
                    c.args = json!({ "bytes": value });
                    out.push(c);
                }
                last_counters = Some(counters);
            }
        }
        let document = json!({
            "traceEvents": out,
            "displayTimeUnit": "ms",
            "otherData": {
                "producer": "gpu-arena",
                "dropped_events": self.dropped,
                "capacity": self.capacity,
            },
        });
        document.to_string()
    }

    /// Writes [`MemoryTimeline::to_chrome_trace`] to `path`: a regular file there is replaced,
    /// a new one is created readable by the user alone (mode 0600 on Unix). A symbolic link at
    /// `path` is refused rather than followed, and a FIFO without waiting for a reader.
    ///
    /// # Errors
    /// The file system's error; [`std::io::ErrorKind::InvalidInput`] for a link or a file that
    /// is not regular at `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<Path>, process: &str) -> std::io::Result<()> {
        crate::backend::write_named_file(path.as_ref(), self.to_chrome_trace(process).as_bytes())
    }
}

/// How the trace names an array: its label, else its element type and shape (`f32[32]`), else
/// "(unlabelled)".
fn array_name(label: Option<&str>, dtype: Option<&str>, shape: Option<&[usize]>) -> String {
    match (label, dtype, shape) {
        (Some(label), _, _) => label.to_string(),
        (None, Some(dtype), Some(shape)) => format!("{dtype}{shape:?}"),
        _ => "(unlabelled)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::timeline::TimelineEvent;
    use super::*;
    use crate::arena::RegionId;
    use crate::transfer::TransferDirection;

    #[test]
    fn kernel_times_are_complete_slices_on_the_gpu_track() {
        let timeline = MemoryTimeline {
            events: vec![TimelineEvent {
                time_ns: 5_000,
                bytes_in_use: 0,
                bytes_reserved: 0,
                kind: TimelineEventKind::Kernel {
                    name: "matmul".into(),
                    submission: 3,
                    duration_ns: 2_500,
                },
            }],
            dropped: 0,
            capacity: 8,
        };
        let trace: serde_json::Value =
            serde_json::from_str(&timeline.to_chrome_trace("test")).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        assert!(events.iter().any(|e| e["name"] == "thread_name"
            && e["tid"] == GPU_TRACK
            && e["args"]["name"] == "GPU"));
        let slice = events.iter().find(|e| e["name"] == "matmul").unwrap();
        assert_eq!(slice["ph"], "X");
        assert_eq!(slice["tid"], GPU_TRACK);
        assert_eq!(slice["cat"], "kernel");
        assert_eq!(slice["ts"], 5.0);
        assert_eq!(slice["dur"], 2.5);
        assert_eq!(slice["args"]["submission"], 3);
    }

    #[test]
    fn counters_are_sampled_only_when_they_change() {
        let event = |time_ns, bytes_in_use, kind| TimelineEvent {
            time_ns,
            bytes_in_use,
            bytes_reserved: 4096,
            kind,
        };
        let timeline = MemoryTimeline {
            events: vec![
                event(
                    0,
                    0,
                    TimelineEventKind::RegionReserve {
                        region: RegionId(1),
                        size: 4096,
                    },
                ),
                event(
                    10,
                    256,
                    TimelineEventKind::Alloc {
                        allocation: AllocationId(1),
                        region: RegionId(1),
                        offset: 0,
                        size: 256,
                        requested: 200,
                        label: Some("kv".into()),
                        site: None,
                        dtype: None,
                        shape: None,
                    },
                ),
                event(
                    20,
                    256,
                    TimelineEventKind::Transfer {
                        direction: TransferDirection::HostToDevice,
                        bytes: 200,
                        arrays: 1,
                        explicit: true,
                        duration_ns: 5000,
                    },
                ),
            ],
            dropped: 0,
            capacity: 16,
        };
        let trace: serde_json::Value =
            serde_json::from_str(&timeline.to_chrome_trace("test")).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let counters = events.iter().filter(|e| e["ph"] == "C").count();
        assert_eq!(counters, 4, "two samples of two counters");
        let slice = events.iter().find(|e| e["ph"] == "X").unwrap();
        assert_eq!(slice["dur"], 5.0);
        assert_eq!(slice["args"]["direction"], "host_to_device");
    }
}
