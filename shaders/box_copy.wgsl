// Shared by the two box-copy kernels (the host prepends it after `alias Unit = ...;`): the
// parameters of a box, the bindings, and where a row of the box starts.
//
// Both storage bindings are read_write even though `src` is only read: arrays share region
// buffers and wgpu tracks usage per buffer, so a read-only binding beside a read_write binding
// of the same buffer would be a usage conflict.

struct Params {
    // Outer dimension counts and strides (in units), innermost first (unused: 1 and 0), four
    // per vector.
    counts: array<vec4<u32>, 2>,
    src_strides: array<vec4<u32>, 2>,
    dst_strides: array<vec4<u32>, 2>,
    // Offsets of the box in the bindings, in units.
    src_base: u32,
    dst_base: u32,
    // Units per row.
    row_len: u32,
    // Items per (dense) row: units for the row kernel, destination words for the byte kernel.
    row_items: u32,
    items: u32,
    outer_rank: u32,
    // The innermost outer dimensions that form one dense row (the byte kernel; 0 otherwise).
    dense_rank: u32,
    // The first item of this dispatch.
    first_item: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> src: array<Unit>;
@group(0) @binding(2) var<storage, read_write> dst: array<Unit>;

fn count(k: u32) -> u32 {
    return p.counts[k / 4u][k % 4u];
}

fn src_stride(k: u32) -> u32 {
    return p.src_strides[k / 4u][k % 4u];
}

fn dst_stride(k: u32) -> u32 {
    return p.dst_strides[k / 4u][k % 4u];
}

// Source and destination unit of the first unit of (dense) row `row`.
fn row_start(row: u32) -> vec2<u32> {
    var rest = row;
    var at = vec2<u32>(p.src_base, p.dst_base);
    for (var k = p.dense_rank; k < p.outer_rank; k++) {
        let index = rest % count(k);
        rest = rest / count(k);
        at += index * vec2<u32>(src_stride(k), dst_stride(k));
    }
    return at;
}
