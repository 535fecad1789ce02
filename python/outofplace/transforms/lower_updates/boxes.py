"""`tensor.insert_slice` (a box of a root, written by inplace-to-outofplace) as
StableHLO: `dynamic_update_slice` at unit strides; strided, a `scatter` at iota positions
or pad+select, whichever touches fewer bytes (the pass's `strided` option)."""

from __future__ import annotations

from torch_mlir import ir, rewrite

from ...indexing import clamp_slice, constant_bound
from ...ir_utils import constant_int, from_builtin, to_builtin, unnamed
from .common import (_scalar_constant, _static, _dynamic_update_slice, _pad,
                     _indexed_windows, _scatter_numbers, _iota_column, _index_vectors,
                     _scatter, _count, _ranked_tensor)


def _strided_select(dest: ir.Value, source: ir.Value, offsets: list[int],
                    strides: list[int], loc: ir.Location) -> ir.Operation:
    dest_type = ir.RankedTensorType(dest.type)
    sizes = ir.RankedTensorType(source.type).shape
    high = [d - (o + (n - 1) * s + 1) for d, o, n, s in
            zip(dest_type.shape, offsets, sizes, strides)]
    interior = [s - 1 for s in strides]
    element = dest_type.element_type
    named, loc = loc, unnamed(loc)
    padded = _pad(source, _scalar_constant(element, 0, loc), offsets, high, interior,
                  dest.type, loc)
    i1 = ir.IntegerType.get_signless(1)
    ones = ir.Operation.create(
        "stablehlo.broadcast_in_dim", results=[ir.RankedTensorType.get(sizes, i1, loc=loc)],
        operands=[_scalar_constant(i1, 1, loc)],
        attributes={"broadcast_dimensions": ir.DenseI64ArrayAttr.get([])}, loc=loc).result
    mask = _pad(ones, _scalar_constant(i1, 0, loc), offsets, high, interior,
                ir.RankedTensorType.get(dest_type.shape, i1, loc=loc), loc)
    return ir.Operation.create("stablehlo.select", results=[dest.type],
                               operands=[mask, padded, dest], loc=named)


def _strided_form(dest_shape: list[int], offsets: list[int], sizes: list[int],
                  strides: list[int]) -> list[int]:
    """The dimensions a strided box's scatter indexes: the strided ones when the others
    are whole and `_indexed_windows` allows it, else all (one index per element)."""
    strided = [d for d in range(len(sizes)) if strides[d] != 1]
    whole = all(offsets[d] == 0 and sizes[d] == dest_shape[d]
                for d in range(len(sizes)) if d not in strided)
    return strided if whole and _indexed_windows(strided, len(sizes)) \
        else list(range(len(sizes)))


def _strided_scatter(dest: ir.Value, source: ir.Value, offsets: list[int],
                     strides: list[int], loc: ir.Location) -> ir.Operation:
    """A strided box as one scatter at iota-computed positions (offset + iota * stride),
    indexing only the strided dimensions when the others are whole windows."""
    sizes = ir.RankedTensorType(source.type).shape
    indexed = _strided_form(ir.RankedTensorType(dest.type).shape, offsets, sizes, strides)
    batch = [sizes[d] for d in indexed]
    with unnamed(loc):
        columns = [_iota_column(batch, i, offsets[d], strides[d])
                   for i, d in enumerate(indexed)]
        indices = _index_vectors(columns, batch)
    windows = [d for d in range(len(sizes)) if d not in indexed]
    return _scatter(dest, indices, source, _scatter_numbers(windows, indexed, len(batch)),
                    combine=None, unique=True, loc=loc)


def _scatter_is_cheaper(dest: ir.Value, source: ir.Value, offsets: list[int],
                        strides: list[int]) -> bool:
    """Bytes a strided update touches: a scatter reads its update and its indices and
    writes the update; pad+select reads and writes the whole destination."""
    dest_t, source_t = ir.RankedTensorType(dest.type), ir.RankedTensorType(source.type)
    element = max(1, dest_t.element_type.width // 8) if hasattr(
        dest_t.element_type, "width") else 4
    indexed = _strided_form(dest_t.shape, offsets, source_t.shape, strides)
    rows = _count([source_t.shape[d] for d in indexed])
    update = element * _count(source_t.shape)
    return 2 * update + 8 * rows * len(indexed) < 2 * element * _count(dest_t.shape)


def _insert_slice(op: ir.Operation, rewriter: rewrite.PatternRewriter,
                  strided: str = "cheaper") -> bool:
    """tensor.insert_slice with static offsets, sizes and strides -> StableHLO; a strided
    box as a scatter or pad+select, by `strided` ("cheaper" chooses by bytes touched)."""
    if len(op.operands) != 2:
        return True  # runtime offsets: not matched
    source, dest = op.operands[0], op.operands[1]
    if ir.RankedTensorType(source.type).rank != ir.RankedTensorType(dest.type).rank:
        return True
    offsets, strides = _static(op, "static_offsets"), _static(op, "static_strides")
    if source.type == dest.type:  # the whole of dest: offsets 0, sizes its shape
        rewriter.replace_op(op, [source])
        return False
    with rewriter.ip, op.location:
        new = _box(dest, source, offsets, strides, strided, op.location)
    rewriter.replace_op(op, new)
    return False


def _box(dest: ir.Value, source: ir.Value, offsets: list[int], strides: list[int],
         strided: str, loc: ir.Location) -> ir.Operation:
    """`source` written into `dest` at static offsets and strides, by `strided` where
    a stride is not 1."""
    if all(s == 1 for s in strides):
        return _dynamic_update_slice(dest, source, offsets, loc)
    if strided == "scatter" or strided == "cheaper" and \
            _scatter_is_cheaper(dest, source, offsets, strides):
        return _strided_scatter(dest, source, offsets, strides, loc)
    return _strided_select(dest, source, offsets, strides, loc)


def _slice_scatter(op: ir.Operation, rewriter: rewrite.PatternRewriter,
                   strided: str = "cheaper") -> bool:
    """`slice_scatter` of constant bounds between static shapes as the box it writes:
    autograd's backward of a slice (`x[..., :32]`, a rotary embedding's halves) writes
    the slice's gradient into zeros so, which torch-mlir lowers to a scatter of one
    window per position of the dimension (XLA:CPU's loop of 32 strided windows, 1 ms
    for a [4, 8, 64, 32] gradient where `dynamic_update_slice` writes it at memory speed).
    Other bounds are left to outofplace's scatter (`_scatter_into_dimension`) or
    torch-mlir's."""
    self, src, dim_value, start_value, end_value, step_value = op.operands
    self_t, src_t = _ranked_tensor(self), _ranked_tensor(src)
    if self_t is None or src_t is None or self_t.dtype != src_t.dtype or \
            -1 in self_t.sizes or -1 in src_t.sizes or len(self_t.sizes) != len(src_t.sizes):
        return True
    dim, step = constant_int(dim_value), constant_int(step_value)
    if dim is None or step is None or step < 1:
        return True
    dim %= len(self_t.sizes)
    size = self_t.sizes[dim]
    start, end = constant_bound(start_value, 0), constant_bound(end_value, size)
    if start is None or end is None:
        return True
    start, end = clamp_slice(start, end, size)
    expected = list(self_t.sizes)
    expected[dim] = -(-(end - start) // step)
    if list(src_t.sizes) != expected or expected[dim] == 0:
        return True
    offsets, strides = [0] * len(expected), [1] * len(expected)
    offsets[dim], strides[dim] = start, step
    with rewriter.ip, op.location:
        dest, source = to_builtin(self), to_builtin(src)
        new = source if src_t.sizes == self_t.sizes else \
            _box(dest, source, offsets, strides, strided, op.location).result
        result = from_builtin(new, op.result.type)
    rewriter.replace_op(op, [result])
    return False
