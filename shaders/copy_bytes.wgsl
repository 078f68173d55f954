// Copies a box of bytes from `src` to `dst` when offsets, strides or the row length are not
// multiples of 4 bytes (1- and 2-byte elements at unaligned starts). WGSL has only 32-bit words,
// so each invocation owns one destination word: it copies the box's bytes that fall in that word
// and keeps the word's other bytes as they were (read, merge, write). Words are numbered per row
// and every row's words are distinct from every other row's (rows do not overlap), so no two
// invocations write the same word and bytes outside the box are written back unchanged by the
// one invocation that owns their word.
//
// Both bindings are read_write: see copy_rows.wgsl.

struct Params {
    counts: array<vec4<u32>, 2>,
    src_strides: array<vec4<u32>, 2>,
    dst_strides: array<vec4<u32>, 2>,
    // Byte offsets of the box in the bindings.
    src_base: u32,
    dst_base: u32,
    // Bytes per row.
    row_len: u32,
    // Destination words per row, at most (row_len + 6) / 4.
    row_items: u32,
    items: u32,
    outer_rank: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

const WORKGROUP: u32 = 256u;

fn row_start(row: u32) -> vec2<u32> {
    var rest = row;
    var at = vec2<u32>(p.src_base, p.dst_base);
    for (var k = 0u; k < p.outer_rank; k++) {
        let count = p.counts[k / 4u][k % 4u];
        let index = rest % count;
        rest = rest / count;
        at += index * vec2<u32>(p.src_strides[k / 4u][k % 4u], p.dst_strides[k / 4u][k % 4u]);
    }
    return at;
}

fn src_byte(at: u32) -> u32 {
    return (src[at / 4u] >> ((at % 4u) * 8u)) & 0xffu;
}

fn copy_word(item: u32) {
    let row = item / p.row_items;
    let at = row_start(row);
    let first = at.y;
    let end = first + p.row_len;
    let word = first / 4u + (item - row * p.row_items);
    let lo = max(word * 4u, first);
    let hi = min(word * 4u + 4u, end);
    if (lo >= hi) {
        return;
    }
    var value = 0u;
    if (lo != word * 4u || hi != word * 4u + 4u) {
        // A boundary word: keep the bytes outside the box.
        value = dst[word];
    }
    for (var b = lo; b < hi; b++) {
        let shift = (b % 4u) * 8u;
        value = (value & ~(0xffu << shift)) | (src_byte(at.x + (b - first)) << shift);
    }
    dst[word] = value;
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let linear = group.x + groups.x * (group.y + groups.y * group.z);
    let step = groups.x * groups.y * groups.z * WORKGROUP;
    for (var item = linear * WORKGROUP + lane; item < p.items; item += step) {
        copy_word(item);
    }
}
