// Shared by every kernel (the host prepends it): the workgroup size and the linear number of a
// workgroup in a 1-D, 2-D or 3-D grid. Grids spill into y and z past 65535 workgroups per
// dimension, so each kernel numbers its workgroups linearly.

const WORKGROUP: u32 = 256u;

fn linear_workgroup(group: vec3<u32>, groups: vec3<u32>) -> u32 {
    return group.x + groups.x * (group.y + groups.y * group.z);
}
