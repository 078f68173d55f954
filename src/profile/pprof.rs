//! A memory snapshot as a pprof profile (gzipped `profile.proto`), the format JAX's
//! `jax.profiler.save_device_memory_profile` writes: live arrays and bytes by allocation site,
//! read by `go tool pprof`, Speedscope and every other pprof reader.
//!
//! Written here in full (a protobuf encoder of the few messages pprof needs, and gzip with
//! stored deflate blocks): the profile is small, and neither a protobuf crate nor a deflate
//! crate is in the dependency tree.

use super::snapshot::MemorySnapshot;
use crate::arena::ChunkState;
use crate::memory_kind::MemoryKind;
use std::collections::HashMap;
use std::path::Path;

/// The function name of arrays whose site is not recorded (a bare arena's allocations).
pub const UNKNOWN_SITE: &str = "(unknown site)";

/// Field numbers of `perftools.profiles.Profile` (profile.proto).
mod field {
    pub const SAMPLE_TYPE: u32 = 1;
    pub const SAMPLE: u32 = 2;
    pub const LOCATION: u32 = 4;
    pub const FUNCTION: u32 = 5;
    pub const STRING_TABLE: u32 = 6;
    pub const TIME_NANOS: u32 = 9;
    pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
}

/// Protobuf wire types.
const VARINT: u32 = 0;
const LEN: u32 = 2;

/// A protobuf message being written.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field << 3 | wire));
    }

    /// An integer field (int64 and uint64 share the varint encoding for values ≥ 0).
    fn int(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        self.varint(v);
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, LEN);
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn message(&mut self, field: u32, message: Message) {
        self.bytes(field, &message.0);
    }

    /// A packed repeated integer field.
    fn packed(&mut self, field: u32, values: &[u64]) {
        let mut inner = Message::default();
        for &v in values {
            inner.varint(v);
        }
        self.bytes(field, &inner.0);
    }
}

/// The string table: index 0 is the empty string, as pprof requires.
struct Strings {
    list: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            list: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// `file` and `line` of a site written as `file:line:column`.
fn file_and_line(site: &str) -> (&str, u64) {
    let mut parts = site.rsplitn(3, ':');
    let (_column, line, file) = (parts.next(), parts.next(), parts.next());
    match (file, line.and_then(|l| l.parse().ok())) {
        (Some(file), Some(line)) => (file, line),
        _ => (site, 0),
    }
}

impl MemorySnapshot {
    /// The live arrays as an uncompressed `profile.proto`: two sample types,
    /// `allocations/count` and `space/bytes` (the default), one sample per allocation site,
    /// label, element type, shape and memory kind, whose one frame is the site (function name
    /// `file:line:column`, with the file and line), and pprof labels `label`, `dtype`,
    /// `shape` and, for arrays of pinned host memory, `memory_kind` (`pinned_host`).
    fn pprof_proto(&self) -> Vec<u8> {
        type Key<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            Option<String>,
            Option<&'static str>,
        );
        let mut groups: HashMap<Key<'_>, (u64, u64)> = HashMap::new();
        let chunks = self.kinds().flat_map(|(kind, snapshot)| {
            let kind = (kind != MemoryKind::Device).then_some(kind.name());
            snapshot.chunks().map(move |(_, chunk)| (kind, chunk))
        });
        for (kind, chunk) in chunks {
            if chunk.state != ChunkState::InUse {
                continue;
            }
            let key = (
                chunk.site.as_deref().unwrap_or(UNKNOWN_SITE),
                chunk.label.as_deref(),
                chunk.dtype.as_deref(),
                chunk.shape.as_ref().map(|s| format!("{s:?}")),
                kind,
            );
            let entry = groups.entry(key).or_default();
            entry.0 += 1;
            entry.1 = entry.1.saturating_add(chunk.size);
        }
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(&b.0)));

        let mut strings = Strings::new();
        let mut profile = Message::default();
        for (kind, unit) in [("allocations", "count"), ("space", "bytes")] {
            let mut value_type = Message::default();
            value_type.int(1, strings.id(kind));
            value_type.int(2, strings.id(unit));
            profile.message(field::SAMPLE_TYPE, value_type);
        }
        // One function and one location per site; ids from 1.
        let mut sites: HashMap<&str, u64> = HashMap::new();
        for ((site, label, dtype, shape, kind), (count, bytes)) in &groups {
            let next = sites.len() as u64 + 1;
            let location = *sites.entry(site).or_insert(next);
            let mut sample = Message::default();
            sample.packed(1, &[location]);
            sample.packed(2, &[*count, (*bytes).min(i64::MAX as u64)]);
            for (key, value) in [
                ("label", *label),
                ("dtype", *dtype),
                ("shape", shape.as_deref()),
                ("memory_kind", *kind),
            ] {
                if let Some(value) = value {
                    let mut tag = Message::default();
                    tag.int(1, strings.id(key));
                    tag.int(2, strings.id(value));
                    sample.message(3, tag);
                }
            }
            profile.message(field::SAMPLE, sample);
        }
        let mut sites: Vec<(&str, u64)> = sites.into_iter().collect();
        sites.sort_by_key(|&(_, id)| id);
        for &(site, id) in &sites {
            let (_, line) = file_and_line(site);
            let mut frame = Message::default();
            frame.int(1, id); // function_id
            frame.int(2, line);
            let mut location = Message::default();
            location.int(1, id);
            location.message(4, frame);
            profile.message(field::LOCATION, location);
        }
        for &(site, id) in &sites {
            let (file, line) = file_and_line(site);
            let mut function = Message::default();
            function.int(1, id);
            function.int(2, strings.id(site));
            function.int(3, strings.id(site));
            function.int(4, strings.id(file));
            function.int(5, line);
            profile.message(field::FUNCTION, function);
        }
        if let Some(t) = self.time_ns {
            profile.int(field::TIME_NANOS, t);
        }
        profile.int(field::DEFAULT_SAMPLE_TYPE, strings.id("space"));
        // The string table last: every index above is assigned by now.
        for s in &strings.list {
            profile.bytes(field::STRING_TABLE, s.as_bytes());
        }
        profile.0
    }

    /// The live arrays as a gzipped pprof profile (what `go tool pprof`, Speedscope and
    /// JAX's memory-profile readers open): arrays and bytes by allocation site (the user's
    /// line), with the label, element type and shape as pprof labels. `go tool pprof -top
    /// memory.pb.gz` lists the sites holding the most bytes.
    ///
    /// ```no_run
    /// # let ctx = gpu_arena::Context::new(Default::default())?;
    /// std::fs::write("memory.pb.gz", ctx.memory_snapshot().to_pprof())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_pprof(&self) -> Vec<u8> {
        gzip_stored(&self.pprof_proto())
    }

    /// Writes [`MemorySnapshot::to_pprof`] to `path`, as the other profile writers do: a
    /// regular file there is replaced, a new one is created readable by the user alone, and a
    /// link at `path` is refused rather than followed.
    ///
    /// # Errors
    /// The file system's error; [`std::io::ErrorKind::InvalidInput`] for a link, a directory
    /// or a file that is not regular at `path`.
    pub fn write_pprof(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        crate::backend::write_named_file(path.as_ref(), &self.to_pprof())
    }
}

/// The largest stored deflate block (its length is a 16-bit field; RFC 1951, 3.2.4).
const STORED_BLOCK_BYTES: usize = 0xffff;

/// `data` as a gzip member (RFC 1952) of stored (uncompressed) deflate blocks: what every
/// gzip reader reads, at the cost of no compression, which a profile of a few KiB does not
/// need.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let blocks = data.len().div_ceil(STORED_BLOCK_BYTES).max(1);
    let mut out = Vec::with_capacity(data.len() + 5 * blocks + 18);
    // Magic, deflate, no flags, no time, no extra flags, unknown OS.
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    let mut chunks = data.chunks(STORED_BLOCK_BYTES).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let len = chunk.len() as u16;
        out.push(u8::from(last));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

/// The CRC-32 of gzip (IEEE 802.3, reflected polynomial 0xEDB88320), bit by bit: fast enough
/// for a profile.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn gzip_of_stored_blocks_frames_the_data_and_its_checksum() {
        let data: Vec<u8> = (0..70_000u32).map(|i| i as u8).collect();
        let gz = gzip_stored(&data);
        assert_eq!(&gz[..3], &[0x1f, 0x8b, 8]);
        // Two blocks: 65 535 bytes, not final, then the rest, final.
        assert_eq!(gz[10], 0);
        assert_eq!(u16::from_le_bytes([gz[11], gz[12]]), 0xffff);
        let second = 10 + 5 + 0xffff;
        assert_eq!(gz[second], 1);
        assert_eq!(
            u16::from_le_bytes([gz[second + 1], gz[second + 2]]) as usize,
            70_000 - 0xffff
        );
        let n = gz.len();
        assert_eq!(&gz[n - 4..], &70_000u32.to_le_bytes());
        assert_eq!(&gz[n - 8..n - 4], &crc32(&data).to_le_bytes());
        assert_eq!(gzip_stored(&[]).len(), 10 + 5 + 8);
    }

    #[test]
    fn a_site_splits_into_file_and_line() {
        assert_eq!(file_and_line("src/main.rs:12:5"), ("src/main.rs", 12));
        assert_eq!(file_and_line("C:\\x\\a.rs:3:1"), ("C:\\x\\a.rs", 3));
        assert_eq!(file_and_line(UNKNOWN_SITE), (UNKNOWN_SITE, 0));
    }
}
