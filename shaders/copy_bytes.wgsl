// Copies a box of bytes from `src` to `dst` when offsets, strides or the row length are not
// multiples of 4 bytes (1- and 2-byte elements at unaligned starts). WGSL has only 32-bit words,
// so each invocation owns one destination word: it gathers the box's bytes that fall in that word
// and keeps the word's other bytes as they were (read, merge, write).
//
// Rows closer than 3 bytes apart in the destination can meet in one word (a column of a narrow
// byte matrix), so the innermost `dense_rank` outer dimensions form one "dense row" whose words
// are walked together: for each byte of a word the invocation works out which row and column of
// the box it is, if any. Dense rows are at least 3 bytes apart, so they never share a word, and
// every destination word that holds bytes of the box has exactly one owner in the dispatch.
//
// The host prepends grid.wgsl and box_copy.wgsl (with `alias Unit = u32;`): the parameters,
// the bindings and `row_start` come from there.

fn src_byte(at: u32) -> u32 {
    return (src[at / 4u] >> ((at % 4u) * 8u)) & 0xffu;
}

fn copy_word(item: u32) {
    let row = item / p.row_items;
    let at = row_start(row);
    let word = at.y / 4u + (item - row * p.row_items);
    var value = 0u;
    var mask = 0u;
    for (var b = max(word * 4u, at.y); b < word * 4u + 4u; b++) {
        // Which row and column of the dense row this destination byte is, if any.
        var rel = b - at.y;
        var source_at = at.x;
        var inside = true;
        for (var k = p.dense_rank; k > 0u; k--) {
            let index = rel / dst_stride(k - 1u);
            if (index >= count(k - 1u)) {
                inside = false;
                break;
            }
            rel -= index * dst_stride(k - 1u);
            source_at += index * src_stride(k - 1u);
        }
        if (inside && rel < p.row_len) {
            let shift = (b % 4u) * 8u;
            value |= src_byte(source_at + rel) << shift;
            mask |= 0xffu << shift;
        }
    }
    if (mask == 0u) {
        return;
    }
    if (mask != 0xffffffffu) {
        // A boundary word: keep the bytes outside the box.
        value |= dst[word] & ~mask;
    }
    dst[word] = value;
}

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
            copy_word(item);
        }
    }
}
