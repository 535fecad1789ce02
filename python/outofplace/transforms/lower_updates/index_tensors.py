"""`index_put` with integer index tensors on any dimensions, and `index_copy`,
`index_fill`, `index_add` (torch.operator twins: op_registry.OPERATOR_TWINS), as one
`scatter` of whole slices of the other dimensions; negative indices wrapped inside the
scatter builder."""

from __future__ import annotations

import torch
from torch_mlir import ir, rewrite

from ... import torch_types
from ...op_registry import OPERATOR_TWINS, aten_name
from ...errors import UnsupportedMutationError
from ...ir_utils import (constant_bool, constant_int, from_builtin, to_builtin,
                         torch_constant, unnamed)
from .common import (_i64, _scalar_constant, _indexed_windows, _scatter_numbers,
                     _iota_column, _index_vectors, _scatter, _stablehlo, _static_tensor,
                     _ranked_tensor, _dynamic, _constant_number)
from .positions import _integer_entries, _positions


def _index_tensors(indices: ir.Value, rank: int) -> list[ir.Value | None] | None:
    """The entries of an index list, one per dimension of self: None or a static integer
    tensor; None if the list is anything else or has no tensor."""
    entries = _integer_entries(indices)
    if entries is None or len(entries) > rank or all(e is None for e in entries):
        return None
    return entries + [None] * (rank - len(entries))


def _index_put_with_tensors(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`b[:, idx] = v`, `b[i, j] = v`, `b.index_put_((i,), v, accumulate=True)`:

        %r = torch.aten.index_put %b, [%none, %i, %j], %v, %accumulate
        =>  one scatter (`_scatter_at_indices`)
    """
    self, indices, values, accumulate = op.operands
    self_t = _ranked_tensor(self)
    entries = _index_tensors(indices, len(self_t.sizes)) if self_t is not None else None
    accumulating = constant_bool(accumulate)
    if entries is None or accumulating is None:
        return True
    return _scatter_at_indices(op, rewriter, entries, values, accumulating)


def _index_op(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`index_copy`, `index_fill`, `index_add` (torch-mlir has no op for them: they are
    `torch.operator`s, op_registry.OPERATOR_TWINS) as the index_put they are, indices on
    one dimension, then one scatter (`_scatter_at_indices`):

        torch.operator "torch.aten.index_copy"(%x, %int1, %i, %src)
        =>  index_put %x, [%none, %i], %src             (index_fill: the value, broadcast;
                                                          index_add: %src * alpha, adding)
    """
    name = aten_name(op)
    if name not in OPERATOR_TWINS:
        return True
    self, dim_value, index = op.operands[:3]
    self_t, index_t, dim = _ranked_tensor(self), _ranked_tensor(index), \
        constant_int(dim_value)
    if self_t is not None and not self_t.sizes:  # eager: one element; index_put: none
        raise UnsupportedMutationError.at(
            op, "it indexes a 0-d tensor along a dimension (eager takes it as one "
            "element); view it as x.view(1) first")
    if self_t is None or index_t is None or dim is None or len(index_t.sizes) > 1:
        return True
    entries: list[ir.Value | None] = [None] * len(self_t.sizes)
    entries[dim % len(self_t.sizes)] = index
    value: ir.Value | int | float = op.operands[3]
    if name == "torch.aten.index_fill.int_Scalar":
        value = _constant_number(value)
        if value is None:
            return True
    alpha = _constant_number(op.operands[4]) if name == "torch.aten.index_add" else 1
    if alpha is None:
        return True
    return _scatter_at_indices(op, rewriter, entries, value,
                               accumulating=name == "torch.aten.index_add", alpha=alpha,
                               one_dimensional=True)


def _wrapped(index: ir.Value, size: int | ir.Value) -> ir.Value:
    """`where(index < 0, index + size, index)`: a negative index counts from the end, as
    in eager (torch-mlir's lowerings and StableHLO's scatter drop it instead). Torch ops,
    which outofplace-fold-constants folds for a constant index; `size` a `!torch.int` for
    a dynamic dimension."""
    t = torch_types.TensorType.of(index.type)
    if not t.dtype.is_signed:
        return index
    loc, ip = ir.Location.current, ir.InsertionPoint.current
    zero, one = (torch_constant("int", v, loc, ip) for v in (0, 1))
    bound = size if isinstance(size, ir.Value) else torch_constant("int", size, loc, ip)
    negative = ir.Operation.create(
        "torch.aten.lt.Scalar", results=[t.with_dtype(torch.bool).to_ir()],
        operands=[index, zero]).result
    shifted = ir.Operation.create("torch.aten.add.Scalar", results=[index.type],
                                  operands=[index, bound, one]).result
    return ir.Operation.create("torch.aten.where.self", results=[index.type],
                               operands=[negative, shifted, index]).result


def _scatter_at_indices(op: ir.Operation, rewriter: rewrite.PatternRewriter,
                        entries: list[ir.Value | None], values: ir.Value | int | float,
                        accumulating: bool, alpha: int | float = 1,
                        one_dimensional: bool = False) -> bool:
    """Writes `values` (a tensor, or a number) at `self[entries]` (op.operands[0]; one
    entry per dimension, None or an integer index tensor) as one scatter whose windows
    are whole slices of the other dimensions (what JAX emits for `b.at[:, idx].set(v)`):

        stablehlo.scatter(%b, concatenate(broadcast(%i), broadcast(%j)), %v)
          update_window_dims = [0, ...], inserted_window_dims = [1, 2]
          ({ return %new }, or { add %old, %new } when accumulating)

    The index tensors broadcast together to the batch shape B. As in eager, B takes the
    place of the indexed dimensions in the shape of `b[indices]` (the shape `v` is
    broadcast to) when they are adjacent, and goes first when a slice separates them.
    On other sets of dimensions (`b[:, i, j]`, `b[i, :, j]`) each element of that shape
    gets its own index (`_indexed_windows`). Negative indices count from the end
    (`_wrapped`); indices out of range are dropped. `one_dimensional`: a 0-d index
    counts as one of one element (index_copy's, index_fill's, index_add's). The update
    is `values * alpha`.
    """
    self = op.operands[0]
    at_positions = op.name == "torch.aten.index_put" and not accumulating and \
        _positions(op.operands[1]) is not None
    if not at_positions and _dynamic(self, values, *entries):
        raise UnsupportedMutationError.at(
            op, "a write at index tensors (or accumulating) into a tensor with a dynamic "
            "dimension (dynamic_shapes): its scatter would need indices of runtime size; "
            "assign at 0-d tensor positions (`c[:, pos] = k`) or compile static shapes")
    self_t = _static_tensor(self)
    values_t = _static_tensor(values) if isinstance(values, ir.Value) else \
        torch_types.TensorType((), self_t.dtype if self_t is not None else None, True)
    if self_t is None or values_t is None:
        return True
    shape, rank = list(self_t.sizes), len(self_t.sizes)
    indexed = [d for d, e in enumerate(entries) if e is not None]
    index_shapes = [list(torch_types.TensorType.of(entries[d].type).sizes) or
                    ([1] if one_dimensional else []) for d in indexed]
    try:
        batch = list(torch.broadcast_shapes(*index_shapes))
    except RuntimeError:
        return True
    kept = [d for d in range(rank) if d not in indexed]
    first = indexed[0] if indexed == list(range(indexed[0], indexed[-1] + 1)) else 0
    before = [d for d in kept if d < first]
    after = [d for d in kept if d >= first]
    update_shape = [shape[d] for d in before] + batch + [shape[d] for d in after]
    windows = list(range(len(before))) + \
        list(range(len(before) + len(batch), len(update_shape)))
    offset = len(update_shape) - len(values_t.sizes)
    if offset < 0 or any(v not in (1, u) for v, u in zip(values_t.sizes,
                                                          update_shape[offset:])):
        return True
    element = torch_types.element_type(self_t.dtype, signless=True)
    with rewriter.ip, unnamed(op.location):
        if isinstance(values, ir.Value):
            update = to_builtin(values)
            if values_t.dtype != self_t.dtype:
                update = _stablehlo("convert", ir.RankedTensorType.get(
                    list(values_t.sizes), element), update)
        else:
            update = _scalar_constant(element, values, None)
        if alpha != 1:
            update = _stablehlo("multiply", update.type, update, _stablehlo(
                "broadcast_in_dim", update.type, _scalar_constant(element, alpha, None),
                broadcast_dimensions=ir.DenseI64ArrayAttr.get([])))
        if list(values_t.sizes) != update_shape:
            update = _stablehlo("broadcast_in_dim", ir.RankedTensorType.get(
                update_shape, element), update, broadcast_dimensions=ir.DenseI64ArrayAttr.get(
                    list(range(offset, len(update_shape)))))
        # Windows when _indexed_windows allows; else an index per element of the update:
        # the index tensors spread over its batch dimensions, iotas along the others.
        per_element = not _indexed_windows(indexed, rank)
        rows, start = (update_shape, len(before)) if per_element else (batch, 0)
        column_type = ir.RankedTensorType.get(rows + [1], _i64())
        columns = []
        for d in range(rank) if per_element else indexed:
            if d not in indexed:
                position = before.index(d) if d in before else \
                    len(before) + len(batch) + after.index(d)
                columns.append(_iota_column(update_shape, position, 0, 1))
                continue
            sizes = index_shapes[indexed.index(d)]
            column = to_builtin(_wrapped(entries[d], shape[d]))
            if ir.RankedTensorType(column.type).element_type != _i64():
                column = _stablehlo("convert", ir.RankedTensorType.get(
                    ir.RankedTensorType(column.type).shape, _i64()), column)
            if sizes == rows:
                column = _stablehlo("reshape", column_type, column)
            else:
                first = start + len(batch) - len(sizes)
                column = _stablehlo("broadcast_in_dim", column_type, column,
                                    broadcast_dimensions=ir.DenseI64ArrayAttr.get(
                                        list(range(first, first + len(sizes)))))
            columns.append(column)
        dest = to_builtin(self)
        numbers = _scatter_numbers([], list(range(rank)), len(rows)) if per_element \
            else _scatter_numbers(windows, indexed, len(rows))
        scatter = _scatter(dest, _index_vectors(columns, rows), update, numbers,
                           combine=None if not accumulating else
                           "or" if self_t.dtype == torch.bool else "add",
                           unique=False, loc=op.location)
        result = from_builtin(scatter.result, op.result.type)
    rewriter.replace_op(op, [result])
    return False
