// Shared by every kernel (the host prepends it): the linear number of a workgroup in a 1-D, 2-D
// or 3-D grid. Grids spill into y and z past 65535 workgroups per dimension, so each kernel
// numbers its workgroups linearly.
//
// The host prepends the variant's shape before it: `const WORKGROUP: u32` (invocations per
// workgroup) and `const PER_INVOCATION: u32` (items each invocation takes, a workgroup apart so
// that a workgroup's accesses stay contiguous). Every shape gives the same bytes.

fn linear_workgroup(group: vec3<u32>, groups: vec3<u32>) -> u32 {
    return group.x + groups.x * (group.y + groups.y * group.z);
}
