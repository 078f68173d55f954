// Copies a box of whole units from `src` to `dst`: rows of `row_len` units, repeated along up to
// eight outer dimensions. The host prepends `alias Unit = vec4<u32>;` (every offset, stride and
// row length a multiple of 16 bytes) or `alias Unit = u32;` (multiples of 4): one kernel, two
// pipelines. Units are whole words, so no two invocations ever write the same word.
//
// Each invocation moves PER_INVOCATION units, a workgroup apart, with all loads issued before
// the stores (several loads in flight per invocation is what a copy needs to reach the bandwidth
// of the memory). Workgroups are numbered linearly over a 1-D, 2-D or 3-D grid (past 65535
// workgroups per dimension) from `first_item`, so the host can also split a copy into several
// dispatches.
//
// The host prepends grid.wgsl and box_copy.wgsl: the parameters, the bindings and
// `row_start` come from there; and `fn copy_all(base: u32)`, the loads and then the stores of
// PER_INVOCATION items written out one by one (no loop and no local array, which software
// rasterisers such as lavapipe run several times slower).

// True for the pipeline of boxes that are one contiguous row (after merging dimensions): the
// compiler then drops the row arithmetic altogether.
override CONTIGUOUS: bool = false;

fn unit_at(item: u32) -> vec2<u32> {
    if (CONTIGUOUS) {
        return vec2<u32>(p.src_base, p.dst_base) + item;
    }
    let row = item / p.row_len;
    return row_start(row) + (item - row * p.row_len);
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let base = p.first_item + linear_workgroup(group, groups) * WORKGROUP * PER_INVOCATION + lane;
    if (base + (PER_INVOCATION - 1u) * WORKGROUP < p.items) {
        // Every item of this invocation is in range: all loads, then all stores.
        copy_all(base);
    } else {
        for (var k = 0u; k < PER_INVOCATION; k++) {
            let item = base + k * WORKGROUP;
            if (item < p.items) {
                let at = unit_at(item);
                dst[at.y] = src[at.x];
            }
        }
    }
}
