//! The geometry of a box copy: which bytes move where, reduced to the fewest dimensions, split
//! into pieces that fit one binding and one dispatch, and turned into kernel parameters.
//!
//! Pure arithmetic on offsets and strides (no GPU types), so it is tested on the host against a
//! model of the kernels. One box copy serves every op of this module: `dynamic_update_slice`
//! (the whole update into a box of the operand), `dynamic_slice` (a box of the operand into a
//! whole result) and `copy` (one contiguous row).

/// Most work items one dispatch may have. Shaders index with `u32`, and grid rounding can launch
/// up to twice the workgroups needed, so 2^30 keeps every index below 2^32.
pub(crate) const MAX_ITEMS: u64 = 1 << 30;

/// The most outer dimensions kernel parameters hold (`array<vec4<u32>, 2>` in the shaders).
/// Arrays have at most [`crate::MAX_RANK`] dimensions, so a box never has more outer ones.
pub(crate) const MAX_OUTER_DIMS: usize = 8;

/// Piece size when a single row is cut because it is longer than one binding: a multiple of
/// every unit and of the largest binding-offset alignment WebGPU allows (256 bytes).
const ROW_PIECE_ALIGNMENT: u64 = 256;

/// Bytes one `vec4<u32>` moves.
const VEC4_BYTES: u64 = 16;

/// Bytes of one WGSL word (`u32`); storage buffers are arrays of words at the finest.
const WORD_BYTES: u64 = 4;

/// The most bytes one binding of a copy or fill kernel spans, whatever the device allows. The
/// kernels take offsets, strides and row lengths as `u32` (in bytes for the byte kernel), so a
/// binding past 4 GiB would need values a `u32` cannot hold: cut to 32 bits, a stride of
/// 5,000,000,000 bytes became 705,032,704 and a copy moved the wrong bytes. Most drivers stop
/// bindings at 2 GiB anyway; some backends report far more (wgpu's Metal backend gives
/// `max_buffer_size` as the binding limit), and there the planner cuts pieces to this.
pub(crate) const MAX_ADDRESSABLE_BINDING_BYTES: u64 = u32::MAX as u64;

/// One outer dimension of a box: how many rows along it and how far apart they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OuterDim {
    /// Indices along this dimension (at least 1).
    pub count: u64,
    /// Bytes between consecutive indices in the source.
    pub src_stride: u64,
    /// Bytes between consecutive indices in the destination.
    pub dst_stride: u64,
}

/// A box of bytes copied from a source array to a destination array: rows of `row_bytes`
/// contiguous bytes on both sides, repeated along outer dimensions. Offsets are bytes from the
/// arrays' first bytes (which are 256-aligned in their buffers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BoxCopy {
    /// Outer dimensions, outermost first.
    pub outer: Vec<OuterDim>,
    /// Contiguous bytes per row.
    pub row_bytes: u64,
    /// Offset of the box's first byte in the source.
    pub src_offset: u64,
    /// Offset of the box's first byte in the destination.
    pub dst_offset: u64,
}

/// How a kernel moves data, chosen from the box's alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CopyUnit {
    /// Rows of `vec4<u32>`: every offset, stride and row length is a multiple of 16 bytes.
    Vec4,
    /// Rows of `u32` words: multiples of 4 bytes.
    Word,
    /// Anything else: each invocation owns one destination word and merges the bytes of the box
    /// into it (1- and 2-byte elements at unaligned starts or odd lengths).
    Byte,
}

impl CopyUnit {
    /// Bytes per unit of kernel indexing (the byte kernel indexes bytes).
    pub(crate) fn bytes(self) -> u64 {
        match self {
            CopyUnit::Vec4 => VEC4_BYTES,
            CopyUnit::Word => WORD_BYTES,
            CopyUnit::Byte => 1,
        }
    }
}

/// What one binding and one dispatch can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlanLimits {
    /// `max_storage_buffer_binding_size`; the planner uses at most
    /// [`MAX_ADDRESSABLE_BINDING_BYTES`] of it.
    pub max_binding_bytes: u64,
    /// Binding offsets are rounded down to this (`min_storage_buffer_offset_alignment`, at least
    /// 16 so that `vec4` indexing of a binding is exact; at most 256, the arena's alignment).
    pub binding_alignment: u64,
    /// Work items per dispatch.
    pub max_items: u64,
}

impl PlanLimits {
    /// The longest byte range a binding may need to cover after its start is rounded down to
    /// the binding alignment and its end up to 16 bytes. Never more than a `u32` addresses, so
    /// that every offset and stride of a piece fits the kernels' parameters.
    fn span_budget(&self) -> u64 {
        let max = self.max_binding_bytes.min(MAX_ADDRESSABLE_BINDING_BYTES);
        let whole = max - max % VEC4_BYTES;
        whole.saturating_sub(self.binding_alignment + VEC4_BYTES)
    }
}

/// Row-major strides in elements of a shape.
pub(crate) fn row_major_strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

impl BoxCopy {
    /// The box of `sizes` elements (`elem_bytes` each) at element index `src_start` of a
    /// row-major source of shape `src_shape`, to `dst_start` of a destination of `dst_shape`.
    /// All slices have the same length (the rank, 0 to 6); the box lies inside both arrays.
    pub(crate) fn between(
        elem_bytes: u64,
        sizes: &[u64],
        (src_shape, src_start): (&[u64], &[u64]),
        (dst_shape, dst_start): (&[u64], &[u64]),
    ) -> Self {
        let src_strides = row_major_strides(src_shape);
        let dst_strides = row_major_strides(dst_shape);
        let offset = |strides: &[u64], start: &[u64]| {
            strides.iter().zip(start).map(|(s, i)| s * i).sum::<u64>() * elem_bytes
        };
        let rank = sizes.len();
        let outer = (0..rank.saturating_sub(1))
            .map(|d| OuterDim {
                count: sizes[d],
                src_stride: src_strides[d] * elem_bytes,
                dst_stride: dst_strides[d] * elem_bytes,
            })
            .collect();
        BoxCopy {
            outer,
            row_bytes: sizes.last().copied().unwrap_or(1) * elem_bytes,
            src_offset: offset(&src_strides, src_start),
            dst_offset: offset(&dst_strides, dst_start),
        }
    }

    /// One contiguous run of `bytes` bytes.
    pub(crate) fn contiguous(bytes: u64, src_offset: u64, dst_offset: u64) -> Self {
        BoxCopy {
            outer: Vec::new(),
            row_bytes: bytes,
            src_offset,
            dst_offset,
        }
    }

    /// The bytes the box covers, from its first to past its last, in the source and in the
    /// destination: `(offset, len)` each (`len` 0 for an empty box).
    pub(crate) fn spans(&self) -> [(u64, u64); 2] {
        let extent = |stride: fn(&OuterDim) -> u64| match self.is_empty() {
            true => 0,
            false => {
                self.row_bytes
                    + self
                        .outer
                        .iter()
                        .map(|d| (d.count - 1) * stride(d))
                        .sum::<u64>()
            }
        };
        [
            (self.src_offset, extent(|d| d.src_stride)),
            (self.dst_offset, extent(|d| d.dst_stride)),
        ]
    }

    /// True when the box holds no bytes.
    pub(crate) fn is_empty(&self) -> bool {
        self.row_bytes == 0 || self.outer.iter().any(|d| d.count == 0)
    }

    /// Rows in the box (the product of the outer counts).
    fn rows(&self) -> u64 {
        self.outer.iter().map(|d| d.count).product()
    }

    /// The same bytes in the fewest dimensions: dimensions of one index vanish, and a dimension
    /// whose rows sit back to back on both sides folds into the one inside it. A DUS of whole
    /// rows of a matrix becomes a single contiguous row, which the fast path copies with `vec4`s.
    pub(crate) fn normalized(&self) -> Self {
        let mut outer: Vec<OuterDim> = self
            .outer
            .iter()
            .copied()
            .filter(|d| d.count != 1)
            .collect();
        let mut row_bytes = self.row_bytes;
        // Fold the innermost outer dimension into the row while rows are adjacent on both sides.
        while let Some(d) = outer.last() {
            if d.src_stride == row_bytes && d.dst_stride == row_bytes {
                row_bytes *= d.count;
                outer.pop();
            } else {
                break;
            }
        }
        // Fold outer dimensions into each other the same way (inner to outer).
        let mut merged: Vec<OuterDim> = Vec::with_capacity(outer.len());
        for d in outer.into_iter().rev() {
            match merged.last_mut() {
                Some(inner)
                    if d.src_stride == inner.count * inner.src_stride
                        && d.dst_stride == inner.count * inner.dst_stride =>
                {
                    inner.count *= d.count;
                }
                _ => merged.push(d),
            }
        }
        merged.reverse();
        BoxCopy {
            outer: merged,
            row_bytes,
            src_offset: self.src_offset,
            dst_offset: self.dst_offset,
        }
    }

    /// The widest unit that every offset, stride and the row length are multiples of.
    pub(crate) fn unit(&self) -> CopyUnit {
        unit_of(self.unit_bits())
    }

    /// Every offset, stride and the row length OR-ed together: their common alignment.
    fn unit_bits(&self) -> u64 {
        let mut all = self.src_offset | self.dst_offset | self.row_bytes;
        for d in &self.outer {
            all |= d.src_stride | d.dst_stride;
        }
        all
    }

    /// Work items of one dispatch of this box: units for the row kernels, destination words
    /// (at most) for the byte kernel.
    fn items(&self, unit: CopyUnit) -> u64 {
        match unit {
            CopyUnit::Byte => {
                let (dense, extent) = self.dense_rows();
                let rows: u64 = self.outer[..self.outer.len() - dense]
                    .iter()
                    .map(|d| d.count)
                    .product();
                rows * byte_row_words(extent)
            }
            unit => self.rows() * (self.row_bytes / unit.bytes()),
        }
    }

    /// For the byte kernel: how many of the innermost outer dimensions lie so close together in
    /// the destination that rows along them may share a word, and the destination extent of one
    /// such group of rows ("a dense row").
    ///
    /// Rows closer than [`MIN_WORD_GAP`] bytes can meet in one 32-bit word (a column of bytes
    /// of a narrow matrix, every other `u8`): one invocation must own that word, so it takes the
    /// bytes of every row in it, and the kernel walks the words of the whole group. Dense
    /// groups further apart than that never share a word, so each owns its words.
    fn dense_rows(&self) -> (usize, u64) {
        let mut dense = 0;
        let mut extent = self.row_bytes;
        // The destination extent of one index of the dimension being looked at.
        let mut inner = self.row_bytes;
        for (k, d) in self.outer.iter().rev().enumerate() {
            let gap = d.dst_stride.saturating_sub(inner);
            inner += (d.count - 1) * d.dst_stride;
            if d.count > 1 && gap < MIN_WORD_GAP {
                dense = k + 1;
                extent = inner;
            }
        }
        (dense, extent)
    }

    fn fits(&self, unit: CopyUnit, limits: &PlanLimits) -> bool {
        let budget = limits.span_budget();
        let [(_, src_len), (_, dst_len)] = self.spans();
        src_len <= budget && dst_len <= budget && self.items(unit) <= limits.max_items
    }

    /// The box with its outermost dimension restricted to `count` indices from `first`.
    fn outer_slice(&self, first: u64, count: u64) -> Self {
        let d = self.outer[0];
        let mut piece = self.clone();
        piece.outer[0].count = count;
        piece.src_offset += first * d.src_stride;
        piece.dst_offset += first * d.dst_stride;
        piece
    }

    /// Splits the box into pieces that each fit one binding per side and one dispatch, in
    /// order. Whole groups of the outermost dimension first; a dimension of which not even one
    /// index fits is taken index by index; a single row too long is cut into aligned pieces.
    pub(crate) fn split(&self, unit: CopyUnit, limits: &PlanLimits, out: &mut Vec<BoxCopy>) {
        if self.fits(unit, limits) {
            out.push(self.clone());
            return;
        }
        if self.outer.is_empty() {
            let limit = limits.span_budget().min(limits.max_items);
            out.extend(aligned_pieces(self.row_bytes, limit).map(|(at, len)| {
                BoxCopy::contiguous(len, self.src_offset + at, self.dst_offset + at)
            }));
            return;
        }
        let count = self.outer[0].count;
        let mut one = self.outer_slice(0, 1);
        one.outer.remove(0);
        if !one.fits(unit, limits) {
            for i in 0..count {
                let mut index = self.outer_slice(i, 1);
                index.outer.remove(0);
                index.split(unit, limits, out);
            }
            return;
        }
        // The largest group of outer indices that fits (fitting is monotonic in the count).
        let (mut lo, mut hi) = (1, count);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.outer_slice(0, mid).fits(unit, limits) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let mut first = 0;
        while first < count {
            let n = lo.min(count - first);
            out.push(self.outer_slice(first, n));
            first += n;
        }
    }
}

/// Bytes between the last byte of one row (or dense group of rows) and the first of the next
/// from which on the two can never share a 32-bit word: 3 bytes in between put them 4 apart.
const MIN_WORD_GAP: u64 = 3;

/// The most destination words a run of `extent` bytes can touch (one starting at byte 3 of a
/// word reaches 3 bytes further than its length).
fn byte_row_words(extent: u64) -> u64 {
    (extent + 6) / WORD_BYTES
}

/// Parameters of the copy kernels (`struct Params` in `copy_rows.wgsl` and `copy_bytes.wgsl`).
/// Offsets and strides are in units of the kernel (16, 4 or 1 bytes) relative to the bindings.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct CopyParams {
    /// Outer dimension counts, innermost first; unused entries are 1.
    pub counts: [u32; MAX_OUTER_DIMS],
    /// Source strides matching `counts`.
    pub src_strides: [u32; MAX_OUTER_DIMS],
    /// Destination strides matching `counts`.
    pub dst_strides: [u32; MAX_OUTER_DIMS],
    /// The box's first unit in the source binding.
    pub src_base: u32,
    /// The box's first unit in the destination binding.
    pub dst_base: u32,
    /// Units per row.
    pub row_len: u32,
    /// Work items per row.
    pub row_items: u32,
    /// Work items in all.
    pub items: u32,
    /// Outer dimensions in use.
    pub outer_rank: u32,
    /// Byte kernel: how many of the innermost outer dimensions form one dense row (their words
    /// walked together); the row kernels use 0.
    pub dense_rank: u32,
    /// The first item of the dispatch (set by the launcher when it splits a grid).
    pub first_item: u32,
}

/// A byte range of an array to bind: offset from the array's first byte, and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BindRange {
    /// Bytes from the array's first byte (a multiple of the binding alignment).
    pub offset: u64,
    /// Bytes bound (a multiple of 16, within the array's allocation, which is rounded to 256).
    pub size: u64,
}

/// One dispatch of a copy kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CopyDispatch {
    /// Which kernel: row copies by unit, or the byte kernel.
    pub unit: CopyUnit,
    /// The source range to bind.
    pub src: BindRange,
    /// The destination range to bind.
    pub dst: BindRange,
    /// The kernel's parameters.
    pub params: CopyParams,
}

fn bind_range(first: u64, end: u64, alignment: u64) -> BindRange {
    let offset = first - first % alignment;
    BindRange {
        offset,
        size: end.next_multiple_of(VEC4_BYTES) - offset,
    }
}

/// Why a box copy or a fill cannot be planned as kernel dispatches; the op that asked turns it
/// into an [`Error`](crate::Error) with `builtin::planning_error`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlanError {
    /// A planned value does not fit the kernels' 32-bit parameter: a planning bug, refused
    /// rather than truncated into a copy of the wrong bytes.
    #[error("the planned {what} ({value}) does not fit a kernel's 32-bit parameter")]
    ParameterOverflow { what: &'static str, value: u64 },
    /// A copy whose start moves between runs binds both arrays whole, and one is larger than
    /// a binding may be on this device.
    #[error("a moving copy's binding of {bytes} bytes exceeds the limit ({limit})")]
    MovingBindingTooLarge { bytes: u64, limit: u64 },
    /// A copy whose start moves between runs is one dispatch, and its box has more items than
    /// one dispatch takes.
    #[error("a moving copy's {items} items exceed one dispatch's {limit}")]
    MovingBoxTooManyItems { items: u64, limit: u64 },
}

/// A planned value as one of the kernels' `u32` parameters. The planner keeps every binding
/// within [`MAX_ADDRESSABLE_BINDING_BYTES`] and every dispatch within [`MAX_ITEMS`], so each
/// value fits; one that did not would be a planning bug, refused here rather than truncated
/// into a copy of the wrong bytes.
fn kernel_u32(value: u64, what: &'static str) -> Result<u32, PlanError> {
    u32::try_from(value).map_err(|_| PlanError::ParameterOverflow { what, value })
}

/// Plans the dispatches of a box copy (empty when the box is).
///
/// Errors: why a piece's parameters do not fit the kernels (a planning bug, never truncated).
pub(crate) fn plan_copy(
    copy: &BoxCopy,
    limits: &PlanLimits,
) -> Result<Vec<CopyDispatch>, PlanError> {
    if copy.is_empty() {
        return Ok(Vec::new());
    }
    let copy = copy.normalized();
    let unit = copy.unit();
    let mut pieces = Vec::new();
    copy.split(unit, limits, &mut pieces);
    pieces
        .iter()
        .map(|piece| dispatch_for(&piece.normalized(), unit, limits))
        .collect()
}

fn dispatch_for(
    piece: &BoxCopy,
    unit: CopyUnit,
    limits: &PlanLimits,
) -> Result<CopyDispatch, PlanError> {
    let [(s0, src_len), (d0, dst_len)] = piece.spans();
    let src = bind_range(s0, s0 + src_len, limits.binding_alignment);
    let dst = bind_range(d0, d0 + dst_len, limits.binding_alignment);
    dispatch_in(piece, unit, src, dst)
}

/// The dispatch of `piece` over the bound ranges `src` and `dst` (which hold its extents).
fn dispatch_in(
    piece: &BoxCopy,
    unit: CopyUnit,
    src: BindRange,
    dst: BindRange,
) -> Result<CopyDispatch, PlanError> {
    let (s0, d0) = (piece.src_offset, piece.dst_offset);
    let u = unit.bytes();
    let (dense_rank, row_items) = match unit {
        CopyUnit::Byte => {
            let (dense, extent) = piece.dense_rows();
            (dense, byte_row_words(extent))
        }
        _ => (0, piece.row_bytes / u),
    };
    let mut params = CopyParams {
        counts: [1; MAX_OUTER_DIMS],
        src_base: kernel_u32((s0 - src.offset) / u, "source base")?,
        dst_base: kernel_u32((d0 - dst.offset) / u, "destination base")?,
        row_len: kernel_u32(piece.row_bytes / u, "row length")?,
        row_items: kernel_u32(row_items, "items per row")?,
        items: kernel_u32(piece.items(unit), "item count")?,
        outer_rank: kernel_u32(piece.outer.len() as u64, "outer rank")?,
        dense_rank: kernel_u32(dense_rank as u64, "dense rank")?,
        ..CopyParams::default()
    };
    for (k, d) in piece.outer.iter().rev().enumerate() {
        params.counts[k] = kernel_u32(d.count, "outer count")?;
        // A dimension of one index never moves; its stride may exceed a binding.
        if d.count > 1 {
            params.src_strides[k] = kernel_u32(d.src_stride / u, "source stride")?;
            params.dst_strides[k] = kernel_u32(d.dst_stride / u, "destination stride")?;
        }
    }
    Ok(CopyDispatch {
        unit,
        src,
        dst,
        params,
    })
}

/// The one dispatch of a box copy whose start moves between runs of a captured step, so that
/// its bind group can be made once: both arrays bound whole (from their first byte, `src_bytes`
/// and `dst_bytes` rounded up to 16, inside their 256-byte-rounded allocations), in the unit
/// that every start allows (`moving_strides`: the bytes between consecutive start indices of
/// the side that moves). A run then only rewrites the parameters' bases.
///
/// Errors: why no single dispatch over whole bindings can copy this box on this device (an
/// array above the binding limit, more items than a dispatch takes).
pub(crate) fn plan_movable_copy(
    copy: &BoxCopy,
    moving_strides: &[u64],
    src_bytes: u64,
    dst_bytes: u64,
    limits: &PlanLimits,
) -> Result<Option<CopyDispatch>, PlanError> {
    if copy.is_empty() {
        return Ok(None);
    }
    let piece = copy.normalized();
    let moving = moving_strides.iter().fold(0, |all, s| all | s);
    let unit = unit_of(piece.unit_bits() | moving);
    let whole = |bytes: u64| BindRange {
        offset: 0,
        size: bytes.next_multiple_of(VEC4_BYTES).max(VEC4_BYTES),
    };
    let (src, dst) = (whole(src_bytes), whole(dst_bytes));
    let max = limits.max_binding_bytes.min(MAX_ADDRESSABLE_BINDING_BYTES);
    if src.size.max(dst.size) > max {
        return Err(PlanError::MovingBindingTooLarge {
            bytes: src.size.max(dst.size),
            limit: max,
        });
    }
    if piece.items(unit) > limits.max_items {
        return Err(PlanError::MovingBoxTooManyItems {
            items: piece.items(unit),
            limit: limits.max_items,
        });
    }
    dispatch_in(&piece, unit, src, dst).map(Some)
}

/// The copy unit that every value OR-ed into `bits` allows.
fn unit_of(bits: u64) -> CopyUnit {
    if bits.is_multiple_of(VEC4_BYTES) {
        CopyUnit::Vec4
    } else if bits.is_multiple_of(WORD_BYTES) {
        CopyUnit::Word
    } else {
        CopyUnit::Byte
    }
}

/// Parameters of the fill kernel (`struct Params` in `fill.wgsl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct FillParams {
    /// 16 bytes of the value repeated.
    pub pattern: [u32; 4],
    /// First `vec4` to write in the binding.
    pub base: u32,
    /// `vec4`s to write.
    pub items: u32,
    /// The first item of the dispatch (set by the launcher when it splits a grid).
    pub first_item: u32,
    /// Padding to the uniform struct's 16-byte size multiple.
    pub _pad: u32,
}

/// One dispatch of the fill kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FillDispatch {
    /// The range to bind.
    pub dst: BindRange,
    /// The kernel's parameters.
    pub params: FillParams,
}

/// Plans filling the first `bytes` bytes of an array (rounded up to 16: the arena rounds
/// allocations to 256, so the padding is the array's own) with a 16-byte pattern.
///
/// Errors: why a piece's parameters do not fit the kernels (a planning bug, never truncated).
pub(crate) fn plan_fill(
    bytes: u64,
    pattern: [u32; 4],
    limits: &PlanLimits,
) -> Result<Vec<FillDispatch>, PlanError> {
    let total = bytes.next_multiple_of(VEC4_BYTES);
    let limit = limits.span_budget().min(limits.max_items * VEC4_BYTES);
    aligned_pieces(total, limit)
        .map(|(offset, size)| {
            Ok(FillDispatch {
                dst: BindRange { offset, size },
                params: FillParams {
                    pattern,
                    base: 0,
                    items: kernel_u32(size / VEC4_BYTES, "fill item count")?,
                    first_item: 0,
                    _pad: 0,
                },
            })
        })
        .collect()
}

/// `total` bytes cut into pieces of at most `limit` bytes, rounded down to
/// [`ROW_PIECE_ALIGNMENT`] (one alignment at least): `(offset, len)` each, in order.
fn aligned_pieces(total: u64, limit: u64) -> impl Iterator<Item = (u64, u64)> {
    let piece = (limit / ROW_PIECE_ALIGNMENT * ROW_PIECE_ALIGNMENT).max(ROW_PIECE_ALIGNMENT);
    (0..total.div_ceil(piece)).map(move |i| (i * piece, piece.min(total - i * piece)))
}

/// An (x, y, z) grid of at least `groups` workgroups within `max_per_dimension` (spilling into
/// y and z past 65535), or `None` when even `max_per_dimension`³ workgroups are too few (the
/// launcher then splits the dispatch). Kernels number workgroups linearly over the grid and skip
/// items past the end, so a grid somewhat larger than needed is fine.
pub(crate) fn grid(groups: u64, max_per_dimension: u64) -> Option<[u32; 3]> {
    let groups = groups.max(1);
    let max = max_per_dimension.max(1);
    let x = groups.min(max);
    let y = groups.div_ceil(x).min(max);
    let z = groups.div_ceil(x * y);
    if z > max {
        return None;
    }
    // Each is at most `max_per_dimension`, a device limit the caller read from a `u32`.
    Some([
        u32::try_from(x).ok()?,
        u32::try_from(y).ok()?,
        u32::try_from(z).ok()?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the GPU allows on most desktop drivers (the H200 and lavapipe among them).
    const DESKTOP: PlanLimits = PlanLimits {
        max_binding_bytes: 2_147_483_644,
        binding_alignment: 256,
        max_items: MAX_ITEMS,
    };

    /// Runs planned dispatches the way the shaders do, on host byte arrays.
    fn emulate(dispatches: &[CopyDispatch], src: &[u8], dst: &mut [u8]) {
        for d in dispatches {
            let p = &d.params;
            let s = &src[d.src.offset as usize..(d.src.offset + d.src.size) as usize];
            let t0 = d.dst.offset as usize;
            let t1 = (d.dst.offset + d.dst.size) as usize;
            assert_eq!(d.src.size % 16, 0);
            assert_eq!(d.dst.size % 16, 0);
            let mut written = std::collections::HashSet::new();
            for item in 0..p.items {
                let row = item / p.row_items;
                let col = item % p.row_items;
                let (mut so, mut doff) = (p.src_base, p.dst_base);
                let mut rest = row;
                for k in p.dense_rank as usize..p.outer_rank as usize {
                    let index = rest % p.counts[k];
                    rest /= p.counts[k];
                    so += index * p.src_strides[k];
                    doff += index * p.dst_strides[k];
                }
                let t = &mut dst[t0..t1];
                match d.unit {
                    CopyUnit::Vec4 | CopyUnit::Word => {
                        let u = d.unit.bytes() as usize;
                        let (a, b) = ((so + col) as usize * u, (doff + col) as usize * u);
                        assert!(written.insert(b), "two items write unit at {b}");
                        t[b..b + u].copy_from_slice(&s[a..a + u]);
                    }
                    CopyUnit::Byte => {
                        let a = doff;
                        let w = a / 4 + col;
                        let mut any = false;
                        for b in w * 4..w * 4 + 4 {
                            if b < a {
                                continue;
                            }
                            let mut rel = b - a;
                            let mut from = so;
                            let mut inside = true;
                            for k in (0..p.dense_rank as usize).rev() {
                                let index = rel / p.dst_strides[k];
                                if index >= p.counts[k] {
                                    inside = false;
                                    break;
                                }
                                rel -= index * p.dst_strides[k];
                                from += index * p.src_strides[k];
                            }
                            if inside && rel < p.row_len {
                                t[b as usize] = s[(from + rel) as usize];
                                any = true;
                            }
                        }
                        if any {
                            assert!(written.insert(w as usize), "two items own word {w}");
                        }
                    }
                }
            }
        }
    }

    fn reference_dus(
        e: usize,
        operand: &[u64],
        update: &[u64],
        start: &[u64],
        op: &mut [u8],
        up: &[u8],
    ) {
        let n: u64 = update.iter().product();
        let so = row_major_strides(operand);
        let su = row_major_strides(update);
        for i in 0..n {
            let mut rest = i;
            let (mut a, mut b) = (0, 0);
            for d in (0..update.len()).rev() {
                let idx = rest % update[d];
                rest /= update[d];
                a += idx * su[d];
                b += (idx + start[d]) * so[d];
            }
            let (a, b) = (a as usize * e, b as usize * e);
            op[b..b + e].copy_from_slice(&up[a..a + e]);
        }
    }

    fn check_dus(e: u64, operand: &[u64], update: &[u64], start: &[u64], limits: &PlanLimits) {
        let op_bytes = operand.iter().product::<u64>() * e;
        let up_bytes = update.iter().product::<u64>() * e;
        let padded = |b: u64| b.next_multiple_of(256).max(256) as usize;
        let mut op: Vec<u8> = (0..padded(op_bytes)).map(|i| (i * 7 + 3) as u8).collect();
        let up: Vec<u8> = (0..padded(up_bytes)).map(|i| (i * 13 + 1) as u8).collect();
        let mut expected = op.clone();
        reference_dus(e as usize, operand, update, start, &mut expected, &up);
        let zero = vec![0; update.len()];
        let plan = plan_copy(
            &BoxCopy::between(e, update, (update, &zero), (operand, start)),
            limits,
        )
        .unwrap();
        for d in &plan {
            assert!(d.src.size <= limits.max_binding_bytes, "{d:?}");
            assert!(d.dst.size <= limits.max_binding_bytes, "{d:?}");
            assert_eq!(d.src.offset % limits.binding_alignment, 0);
            assert!(u64::from(d.params.items) <= limits.max_items);
        }
        emulate(&plan, &up, &mut op);
        assert_eq!(
            op, expected,
            "e={e} operand={operand:?} update={update:?} start={start:?}"
        );
    }

    #[test]
    fn whole_rows_of_a_matrix_become_one_contiguous_vec4_row() {
        let b =
            BoxCopy::between(4, &[3, 64], (&[3, 64], &[0, 0]), (&[10, 64], &[2, 0])).normalized();
        assert!(b.outer.is_empty());
        assert_eq!(b.row_bytes, 3 * 64 * 4);
        assert_eq!(b.dst_offset, 2 * 64 * 4);
        assert_eq!(b.unit(), CopyUnit::Vec4);
    }

    #[test]
    fn unaligned_bytes_fall_back_to_the_byte_kernel_and_floats_to_words() {
        let bytes = BoxCopy::between(1, &[2, 3], (&[2, 3], &[0, 0]), (&[4, 5], &[1, 1]));
        assert_eq!(bytes.normalized().unit(), CopyUnit::Byte);
        let words = BoxCopy::between(4, &[2, 3], (&[2, 3], &[0, 0]), (&[4, 5], &[1, 1]));
        assert_eq!(words.normalized().unit(), CopyUnit::Word);
    }

    #[test]
    fn planned_copies_match_the_reference_for_every_element_size_and_rank() {
        let cases: &[(&[u64], &[u64], &[u64])] = &[
            (&[17], &[5], &[3]),
            (&[17], &[17], &[0]),
            (&[4, 9], &[2, 3], &[1, 5]),
            (&[4, 9], &[4, 9], &[0, 0]),
            (&[3, 4, 5], &[1, 2, 3], &[2, 1, 2]),
            (&[3, 4, 5, 2], &[2, 1, 5, 2], &[1, 3, 0, 0]),
            (&[2, 3, 2, 3, 2], &[1, 2, 2, 1, 1], &[1, 1, 0, 2, 1]),
            (
                &[2, 3, 2, 3, 2, 5],
                &[2, 2, 1, 3, 2, 3],
                &[0, 1, 1, 0, 0, 1],
            ),
            (&[], &[], &[]),
            // Rows closer than a word: columns of narrow matrices.
            (&[9, 2], &[9, 1], &[0, 1]),
            (&[5, 3, 2], &[5, 3, 1], &[0, 0, 1]),
            (&[6, 5], &[6, 3], &[0, 1]),
            (&[7, 3, 3], &[6, 2, 2], &[1, 1, 0]),
        ];
        for e in [1, 2, 3, 4, 8, 16] {
            for (operand, update, start) in cases {
                check_dus(e, operand, update, start, &DESKTOP);
            }
        }
    }

    #[test]
    fn small_bindings_split_boxes_and_rows_into_pieces_that_fit() {
        let tiny = PlanLimits {
            max_binding_bytes: 1024,
            binding_alignment: 256,
            max_items: 128,
        };
        let cases: &[(&[u64], &[u64], &[u64])] = &[
            (&[5000], &[3000], &[7]),
            (&[40, 100], &[30, 60], &[3, 21]),
            (&[6, 7, 300], &[5, 6, 250], &[1, 1, 13]),
            (&[3, 2000], &[3, 1999], &[0, 1]),
        ];
        for e in [1, 2, 4, 8] {
            for (operand, update, start) in cases {
                check_dus(e, operand, update, start, &tiny);
            }
        }
    }

    #[test]
    fn fill_pieces_cover_the_array_once() {
        let tiny = PlanLimits {
            max_binding_bytes: 1024,
            binding_alignment: 256,
            max_items: 16,
        };
        let plan = plan_fill(1000, [0; 4], &tiny).unwrap();
        let covered: u64 = plan.iter().map(|d| u64::from(d.params.items) * 16).sum();
        assert_eq!(covered, 1008);
        assert!(plan.iter().all(|d| d.dst.offset % 256 == 0));
        assert!(plan
            .windows(2)
            .all(|w| w[0].dst.offset + w[0].dst.size == w[1].dst.offset));
    }

    /// A backend whose bindings reach past 4 GiB (wgpu's Metal backend reports
    /// `max_buffer_size`, tens of GiB, as the binding limit).
    const HUGE_BINDINGS: PlanLimits = PlanLimits {
        max_binding_bytes: 64 << 30,
        binding_alignment: 256,
        max_items: MAX_ITEMS,
    };

    /// Every row a plan copies, as (absolute source byte, absolute destination byte, bytes),
    /// read back from the kernels' parameters the way the shaders read them (without running
    /// them: the arrays of these tests are too large to hold on the host).
    fn planned_rows(plan: &[CopyDispatch]) -> Vec<(u64, u64, u64)> {
        let mut rows = Vec::new();
        for d in plan {
            let p = &d.params;
            let u = d.unit.bytes();
            let rank = p.outer_rank as usize;
            let total: u64 = p.counts[..rank].iter().map(|&c| u64::from(c)).product();
            for row in 0..total {
                let (mut src, mut dst) = (u64::from(p.src_base), u64::from(p.dst_base));
                let mut rest = row;
                for k in 0..rank {
                    let count = u64::from(p.counts[k]);
                    src += rest % count * u64::from(p.src_strides[k]);
                    dst += rest % count * u64::from(p.dst_strides[k]);
                    rest /= count;
                }
                rows.push((
                    d.src.offset + src * u,
                    d.dst.offset + dst * u,
                    u64::from(p.row_len) * u,
                ));
            }
        }
        rows.sort_unstable();
        rows
    }

    /// Every row of a box, from its own offsets and strides.
    fn box_rows(b: &BoxCopy) -> Vec<(u64, u64, u64)> {
        let total: u64 = b.outer.iter().map(|d| d.count).product();
        let mut rows = Vec::new();
        for row in 0..total {
            let (mut src, mut dst) = (b.src_offset, b.dst_offset);
            let mut rest = row;
            for d in b.outer.iter().rev() {
                src += rest % d.count * d.src_stride;
                dst += rest % d.count * d.dst_stride;
                rest /= d.count;
            }
            rows.push((src, dst, b.row_bytes));
        }
        rows.sort_unstable();
        rows
    }

    #[test]
    fn a_stride_past_4_gib_is_never_truncated_where_bindings_allow_it() {
        // dynamic_slice of a [2, 5e9] u8 array: rows 5,000,000,000 bytes apart, which a u32
        // once cut to 705,032,704.
        let row = 5_000_000_000u64;
        let b = BoxCopy::between(1, &[2, 3], (&[2, row], &[0, 10]), (&[2, 3], &[0, 0]));
        let plan = plan_copy(&b, &HUGE_BINDINGS).unwrap();
        assert_eq!(planned_rows(&plan), [(10, 0, 3), (row + 10, 3, 3)]);
        for d in &plan {
            assert!(d.src.size <= MAX_ADDRESSABLE_BINDING_BYTES, "{d:?}");
            assert!(d.dst.size <= MAX_ADDRESSABLE_BINDING_BYTES, "{d:?}");
        }
        // The same in every unit, and over more rows and dimensions.
        // (element bytes, source shape, box sizes, box start).
        type Case<'a> = (u64, &'a [u64], &'a [u64], &'a [u64]);
        let cases: &[Case] = &[
            (4, &[3, 1_250_000_000], &[3, 4], &[0, 8]),
            (16, &[2, 2, 312_500_000], &[2, 2, 1], &[0, 0, 5]),
            (2, &[4, 3, 1_000_000_000], &[3, 2, 5], &[1, 1, 7]),
            (1, &[3, 2_000_000_000], &[3, 2_000_000_000], &[0, 0]),
        ];
        for &(e, shape, sizes, start) in cases {
            let zero = vec![0; sizes.len()];
            let b = BoxCopy::between(e, sizes, (shape, start), (sizes, &zero));
            let plan = plan_copy(&b, &HUGE_BINDINGS).unwrap();
            assert_eq!(
                planned_rows(&plan).iter().map(|r| r.2).sum::<u64>(),
                box_rows(&b).iter().map(|r| r.2).sum::<u64>(),
                "{shape:?} {sizes:?}: bytes moved"
            );
            for d in &plan {
                assert!(d.src.size <= MAX_ADDRESSABLE_BINDING_BYTES, "{d:?}");
                assert!(d.dst.size <= MAX_ADDRESSABLE_BINDING_BYTES, "{d:?}");
            }
            if b.normalized().row_bytes <= MAX_ADDRESSABLE_BINDING_BYTES / 2 {
                // Rows are not cut: the planned rows are the box's rows exactly.
                assert_eq!(planned_rows(&plan), box_rows(&b), "{shape:?} {sizes:?}");
            }
        }
    }

    #[test]
    fn a_binding_limit_past_4_gib_plans_like_one_of_4_gib() {
        let four_gib = PlanLimits {
            max_binding_bytes: MAX_ADDRESSABLE_BINDING_BYTES,
            ..HUGE_BINDINGS
        };
        let row = 5_000_000_000u64;
        let b = BoxCopy::between(1, &[2, 3], (&[2, row], &[0, 10]), (&[2, 3], &[0, 0]));
        assert_eq!(
            plan_copy(&b, &HUGE_BINDINGS).unwrap(),
            plan_copy(&b, &four_gib).unwrap()
        );
        let long = BoxCopy::contiguous(9 << 30, 0, 0);
        let plan = plan_copy(&long, &HUGE_BINDINGS).unwrap();
        assert_eq!(plan, plan_copy(&long, &four_gib).unwrap());
        assert!(plan.len() >= 3, "{}", plan.len());
        assert!(plan
            .iter()
            .all(|d| d.src.size <= MAX_ADDRESSABLE_BINDING_BYTES));
        let fill = plan_fill(9 << 30, [0; 4], &HUGE_BINDINGS).unwrap();
        assert_eq!(fill, plan_fill(9 << 30, [0; 4], &four_gib).unwrap());
        let covered: u64 = fill.iter().map(|d| u64::from(d.params.items) * 16).sum();
        assert_eq!(covered, 9 << 30);
    }

    #[test]
    fn a_value_past_32_bits_is_refused_not_truncated() {
        let refused = kernel_u32(5_000_000_000, "source stride").unwrap_err();
        assert_eq!(
            refused,
            PlanError::ParameterOverflow {
                what: "source stride",
                value: 5_000_000_000
            }
        );
        let reason = refused.to_string();
        assert!(reason.contains("source stride (5000000000)"), "{reason}");
        assert_eq!(kernel_u32(u64::from(u32::MAX), "x"), Ok(u32::MAX));
    }

    #[test]
    fn grids_spill_into_y_and_z_past_the_dimension_limit() {
        assert_eq!(grid(3, 65535), Some([3, 1, 1]));
        assert_eq!(grid(0, 65535), Some([1, 1, 1]));
        assert_eq!(grid(100_000, 65535), Some([65535, 2, 1]));
        assert_eq!(grid(300, 7), Some([7, 7, 7]));
        assert_eq!(grid(344, 7), None, "more than 7³: the launcher splits");
    }
}
