// Fills `items` vec4<u32>s from `base` with a 16-byte pattern (the value repeated). The host
// rounds the array's length up to 16 bytes; the arena rounds allocations to 256, so the bytes
// past the array's end are its own padding. The host prepends grid.wgsl.

struct Params {
    pattern: vec4<u32>,
    base: u32,
    items: u32,
    // The first item of this dispatch.
    first_item: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let base = p.first_item + linear_workgroup(group, groups) * WORKGROUP * PER_INVOCATION + lane;
    for (var k = 0u; k < PER_INVOCATION; k++) {
        let item = base + k * WORKGROUP;
        if (item < p.items) {
            dst[p.base + item] = p.pattern;
        }
    }
}
