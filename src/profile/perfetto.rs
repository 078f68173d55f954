//! Export of the timeline as a Chrome trace (the JSON "Trace Event Format"), which both
//! ui.perfetto.dev and chrome://tracing open: counters for bytes in use and reserved, slices
//! for transfers and for kernels as the GPU ran them (the `GPU` track, from timestamps), instants
//! for allocations, frees, region changes and dispatches, and one async
//! slice per array from its allocation to its free (named by its label, or its type and shape,
//! with its allocation site), as Perfetto users read an allocator's track.

use super::report::format::Bytes;
use crate::arena::AllocationId;
use crate::trace::timeline::{MemoryTimeline, TimelineEvent, TimelineEventKind};
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
    /// The event's arguments; left out where it has none (the format's `args` is an object).
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
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
    /// chrome://tracing. `process` names the process row, after `gpu-arena: ` (the device
    /// name is a good choice).
    ///
    /// Counters `bytes_in_use` and `bytes_reserved` get a sample at each allocation, free and
    /// region event that changes them (other events carry the counters and draw none, so the
    /// counters never show memory before it is taken);
    /// transfers are slices on the `transfers` track (their host-side duration);
    /// allocations, frees and dispatches are instants on the `arena` and `dispatches` tracks;
    /// kernels that the GPU timed are slices on the `GPU` track, named by the kernel, from
    /// their GPU begin for their GPU duration;
    /// region reserves and releases are process-wide instants. Each array whose allocation the
    /// timeline holds is also an async slice (category `array`) from its allocation to its
    /// free, named by its latest label (or its element type and shape), with its size and
    /// allocation site in the arguments; an array still alive at the end has no end.
    pub fn to_chrome_trace(&self, process: &str) -> String {
        let mut trace = TraceWriter::new(process, &self.events);
        for event in &self.events {
            trace.push(event);
        }
        let document = json!({
            "traceEvents": trace.out,
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
    /// The file system's error; [`std::io::ErrorKind::InvalidInput`] for a link, a directory
    /// or a file that is not regular at `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<Path>, process: &str) -> std::io::Result<()> {
        crate::backend::write_named_file(path.as_ref(), self.to_chrome_trace(process).as_bytes())
    }
}

/// The trace's events as they are made from the timeline's, in order. It holds what one event
/// needs from those before it: each array's latest label, the array slices begun and not yet
/// ended (so an end carries its begin's name and id), and the counters last sampled.
struct TraceWriter<'a> {
    /// The trace so far.
    out: Vec<TraceEvent>,
    /// Each allocation's latest label, from the whole timeline.
    renamed: HashMap<AllocationId, &'a str>,
    /// Arrays whose slice has begun, with the slice's name.
    open: HashMap<AllocationId, String>,
    /// Bytes in use and reserved as last sampled.
    last_counters: Option<(u64, u64)>,
}

impl<'a> TraceWriter<'a> {
    /// A trace holding the metadata (process and track names, track order) for `events`.
    fn new(process: &str, events: &'a [TimelineEvent]) -> TraceWriter<'a> {
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
        for event in events {
            if let TimelineEventKind::Label { allocation, label } = &event.kind {
                renamed.insert(*allocation, label);
            }
        }
        TraceWriter {
            out,
            renamed,
            open: HashMap::new(),
            last_counters: None,
        }
    }

    /// Adds `event`: its trace event (after the array slice's begin or end it makes), then,
    /// for the arena's own events, a counter sample where the bytes in use or reserved changed.
    fn push(&mut self, event: &TimelineEvent) {
        let mut trace = self.trace_of(event);
        trace.cat = category(&event.kind);
        self.out.push(trace);
        let counters = (event.bytes_in_use, event.bytes_reserved);
        if event.kind.changes_counters() && self.last_counters != Some(counters) {
            for (name, value) in [("bytes_in_use", counters.0), ("bytes_reserved", counters.1)] {
                let mut c = TraceEvent::new(name.to_string(), "C", event.time_ns, 0);
                c.args = json!({ "bytes": value });
                self.out.push(c);
            }
            self.last_counters = Some(counters);
        }
    }

    /// The trace event that stands for `event`; an allocation or a free also begins or ends
    /// its array's slice.
    fn trace_of(&mut self, event: &TimelineEvent) -> TraceEvent {
        let t = event.time_ns;
        match &event.kind {
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
                let label = self.renamed.get(allocation).copied().or(label.as_deref());
                let name = array_name(label, dtype.as_deref(), shape.as_deref());
                let args = json!({ "allocation": allocation.0, "region": region.0,
                    "offset": offset, "size": size, "requested": requested, "label": label,
                    "site": site, "dtype": dtype, "shape": shape });
                self.begin_array_slice(*allocation, &name, t, args.clone());
                let alloc = format!("alloc {name} {}", Bytes(*size));
                instant(alloc, t, ARENA_TRACK, "t", args)
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
                let name = self.end_array_slice(*allocation, t).unwrap_or_else(|| {
                    array_name(label.as_deref(), dtype.as_deref(), shape.as_deref())
                });
                instant(
                    format!("free {name} {}", Bytes(*size)),
                    t,
                    ARENA_TRACK,
                    "t",
                    args,
                )
            }
            TimelineEventKind::RegionReserve { region, size } => {
                region_instant("reserve", region.0, *size, t)
            }
            TimelineEventKind::RegionRelease { region, size } => {
                region_instant("release", region.0, *size, t)
            }
            TimelineEventKind::Transfer {
                direction,
                bytes,
                arrays,
                explicit,
                duration_ns,
            } => {
                let how = if *explicit { "explicit" } else { "implicit" };
                let name = format!("{direction} {} ({how})", Bytes(*bytes));
                let args = json!({ "direction": direction, "bytes": bytes,
                    "arrays": arrays, "explicit": explicit });
                complete_slice(name, t, *duration_ns, TRANSFER_TRACK, args)
            }
            TimelineEventKind::Label { allocation, label } => {
                let args = json!({ "allocation": allocation.0, "label": label });
                instant(format!("label {label}"), t, ARENA_TRACK, "t", args)
            }
            TimelineEventKind::Dispatch { name, submission } => {
                let args = json!({ "submission": submission });
                instant(name.clone(), t, DISPATCH_TRACK, "t", args)
            }
            TimelineEventKind::Kernel {
                name,
                submission,
                duration_ns,
            } => {
                let args = json!({ "submission": submission, "gpu_ns": duration_ns });
                complete_slice(name.clone(), t, *duration_ns, GPU_TRACK, args)
            }
        }
    }

    /// Begins the async slice of `allocation`'s array, named `name`, at `time_ns`.
    fn begin_array_slice(
        &mut self,
        allocation: AllocationId,
        name: &str,
        time_ns: u64,
        args: serde_json::Value,
    ) {
        let mut slice = array_slice_edge(name.to_string(), "b", allocation, time_ns);
        slice.args = args;
        self.out.push(slice);
        self.open.insert(allocation, name.to_string());
    }

    /// Ends the slice of `allocation`'s array at `time_ns` and returns its name, or `None`
    /// when the trace holds no begin for it (its allocation is older than the timeline).
    fn end_array_slice(&mut self, allocation: AllocationId, time_ns: u64) -> Option<String> {
        let name = self.open.remove(&allocation)?;
        let end = array_slice_edge(name.clone(), "e", allocation, time_ns);
        self.out.push(end);
        Some(name)
    }
}

/// The begin (`b`) or end (`e`) of an array's async slice: both carry the array category and
/// the allocation as the id that pairs them.
fn array_slice_edge(
    name: String,
    ph: &'static str,
    allocation: AllocationId,
    time_ns: u64,
) -> TraceEvent {
    let mut edge = TraceEvent::new(name, ph, time_ns, ARENA_TRACK);
    edge.cat = "array";
    edge.id = Some(format!("{:#x}", allocation.0));
    edge
}

/// An instant event on track `tid`, scoped to the track (`t`) or the whole process (`p`).
fn instant(
    name: String,
    time_ns: u64,
    tid: u32,
    scope: &'static str,
    args: serde_json::Value,
) -> TraceEvent {
    let mut e = TraceEvent::new(name, "i", time_ns, tid);
    e.s = Some(scope);
    e.args = args;
    e
}

/// A process-wide instant for a region reserved or released (`verb`).
fn region_instant(verb: &str, region: u64, size: u64, time_ns: u64) -> TraceEvent {
    let name = format!("{verb} region {region} ({})", Bytes(size));
    let args = json!({ "region": region, "size": size });
    instant(name, time_ns, ARENA_TRACK, "p", args)
}

/// A complete slice (`X`): from `time_ns` for `duration_ns`, on track `tid`.
fn complete_slice(
    name: String,
    time_ns: u64,
    duration_ns: u64,
    tid: u32,
    args: serde_json::Value,
) -> TraceEvent {
    let mut e = TraceEvent::new(name, "X", time_ns, tid);
    e.dur = Some(duration_ns as f64 / NS_PER_US);
    e.args = args;
    e
}

/// The category a viewer filters an event's trace by.
fn category(kind: &TimelineEventKind) -> &'static str {
    match kind {
        TimelineEventKind::Transfer { .. } => "transfer",
        TimelineEventKind::Dispatch { .. } => "dispatch",
        TimelineEventKind::Kernel { .. } => "kernel",
        _ => "memory",
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
    use super::*;
    use crate::arena::RegionId;
    use crate::trace::timeline::TimelineEvent;
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
    fn counters_are_sampled_at_the_arenas_events_only_when_they_change() {
        let event = |time_ns, bytes_in_use, kind| TimelineEvent {
            time_ns,
            bytes_in_use,
            bytes_reserved: 4096,
            kind,
        };
        // As a `device_put` records them: its transfer dated at the call's start with the
        // counters after the call, before the region and the allocation the call made.
        let timeline = MemoryTimeline {
            events: vec![
                event(
                    0,
                    256,
                    TimelineEventKind::Transfer {
                        direction: TransferDirection::HostToDevice,
                        bytes: 200,
                        arrays: 1,
                        explicit: true,
                        duration_ns: 5000,
                    },
                ),
                event(
                    5,
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
            ],
            dropped: 0,
            capacity: 16,
        };
        let trace: serde_json::Value =
            serde_json::from_str(&timeline.to_chrome_trace("test")).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let in_use: Vec<(f64, u64)> = events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == "bytes_in_use")
            .map(|e| {
                (
                    e["ts"].as_f64().unwrap(),
                    e["args"]["bytes"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            in_use,
            [(0.005, 0), (0.01, 256)],
            "no memory before it is taken"
        );
        let counters = events.iter().filter(|e| e["ph"] == "C").count();
        assert_eq!(counters, 4, "two samples of two counters");
        let slice = events.iter().find(|e| e["ph"] == "X").unwrap();
        assert_eq!(slice["dur"], 5.0);
        assert_eq!(slice["args"]["direction"], "host_to_device");
    }
}
