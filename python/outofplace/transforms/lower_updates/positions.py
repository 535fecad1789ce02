"""`index_put` at 0-d runtime positions (`c[:, pos] = k`) as one
`dynamic_update_slice` with runtime starts (eager's negative positions counted from the
end, out-of-range ones clamped, as the out-of-bounds policy says); with dynamic sizes,
a scatter."""

from __future__ import annotations

import torch
from torch_mlir import ir, rewrite

from ... import torch_types
from ...errors import warn_out_of_bounds_policy
from ...indexing import index_entries
from ...ir_utils import builtin_shape, constant_bool, from_builtin, to_builtin, unnamed
from .common import (_i64, _scalar_constant, _scatter_numbers, _scatter, _stablehlo,
                     _static_tensor, _ranked_tensor, _dimension_size)


def _integer_entries(indices: ir.Value) -> list[ir.Value | None] | None:
    """The entries of an index list (`indexing.index_entries`): None or a static integer
    tensor; None if the list is anything else."""
    entries = index_entries(indices)
    if entries is None or any(
            (t := _static_tensor(e)) is None or t.dtype.is_floating_point or
            t.dtype == torch.bool for e in entries if e is not None):
        return None
    return entries


def _positions(indices: ir.Value) -> list[ir.Value | None] | None:
    """The entries of an index list: None or a 0-d integer tensor; None if other."""
    entries = _integer_entries(indices)
    if entries is None or any(e is not None and _static_tensor(e).sizes != ()
                              for e in entries):
        return None
    return entries if any(e is not None for e in entries) else None


def _start(position: ir.Value, size: ir.Value) -> ir.Value:
    """A runtime position as a dynamic_update_slice start; negative counts from the end
    (`size`: the dimension's size, a 0-d i64 tensor)."""
    i64 = ir.RankedTensorType.get([], _i64())
    start = to_builtin(position)
    if start.type != i64:
        start = _stablehlo("convert", i64, start)
    i1 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))
    negative = _stablehlo("compare", i1, start, _scalar_constant(_i64(), 0, None),
                          comparison_direction=ir.Attribute.parse(
                              "#stablehlo<comparison_direction LT>"))
    wrapped = _stablehlo("add", i64, start, size)
    return _stablehlo("select", i64, negative, wrapped, start)


def _index_put_at_positions(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`c[:, pos] = k` (index_put with 0-d integer indices) as dynamic_update_slice:

        %r = torch.aten.index_put %c, [%none, %pos], %k, %false
        =>  stablehlo.dynamic_update_slice %c, reshape(broadcast(%k)), %c0, select(%pos<0, ...)

    When `c` has a dynamic dimension (`?`, from dynamic_shapes), the update would have
    its runtime size there, which IREE does not take for dynamic_update_slice: the write
    is then one scatter of `k` as a window at the positions (`_positions_scatter`).
    """
    self, indices, values, accumulate = op.operands
    self_t, values_t = _ranked_tensor(self), _ranked_tensor(values)
    positions = _positions(indices)
    if self_t is None or values_t is None or positions is None or \
            len(positions) > len(self_t.sizes) or constant_bool(accumulate) is not False:
        return True
    positions = positions + [None] * (len(self_t.sizes) - len(positions))
    element = torch_types.element_type(self_t.dtype, signless=True)
    kept = [n for n, p in zip(self_t.sizes, positions) if p is None]
    # Sizes `?` of both agree at run time: torch.export's guards (checked at the call).
    if len(values_t.sizes) > len(kept) or any(
            v not in (1, k) for v, k in zip(reversed(values_t.sizes), reversed(kept))):
        return True
    dynamic = -1 in self_t.sizes
    warn_out_of_bounds_policy(op, "dropped" if dynamic else "clamped into range")
    with rewriter.ip, unnamed(op.location):
        dest = to_builtin(self)
        update = to_builtin(values)
        if values_t.dtype != self_t.dtype:
            update = _stablehlo("convert", ir.RankedTensorType.get(
                builtin_shape(values_t.sizes), element), update)
        starts = [None if p is None else
                  _start(p, _dimension_size(dest, d, _i64()) if n == -1 else
                         _scalar_constant(_i64(), n, None))
                  for d, (n, p) in enumerate(zip(self_t.sizes, positions))]
        if dynamic:
            new = _positions_scatter(dest, update, starts, op.location)
        else:
            offset = len(kept) - len(values_t.sizes)
            if list(values_t.sizes) != kept:
                update = _stablehlo("broadcast_in_dim", ir.RankedTensorType.get(
                    kept, element), update, broadcast_dimensions=ir.DenseI64ArrayAttr.get(
                        list(range(offset, len(kept)))))
            box = [1 if p is not None else n for n, p in zip(self_t.sizes, positions)]
            update = _stablehlo("reshape", ir.RankedTensorType.get(box, element), update)
            starts = [_scalar_constant(_i64(), 0, None) if s is None else s for s in starts]
            new = _stablehlo("dynamic_update_slice", dest.type, dest, update, *starts,
                             loc=op.location)
        result = from_builtin(new, self.type)
    rewriter.replace_op(op, [result])
    return False


def _positions_scatter(dest: ir.Value, update: ir.Value, starts: list[ir.Value | None],
                       loc: ir.Location) -> ir.Value:
    """`dest` with `update` written at `starts` (None: the whole dimension), as one
    scatter whose window is the update, broadcast to the dimensions not indexed. Sizes
    read with get_dimension_size make the broadcast of a dynamic update."""
    dest_type = ir.RankedTensorType(dest.type)
    element = dest_type.element_type
    indexed = [d for d, s in enumerate(starts) if s is not None]
    kept = [d for d, s in enumerate(starts) if s is None]
    window = [dest_type.shape[d] for d in kept]
    update_type = ir.RankedTensorType(update.type)
    if update_type.shape != window:
        i32 = ir.IntegerType.get_signless(32)
        entry = ir.RankedTensorType.get([1], i32)
        sizes = [_stablehlo("reshape", entry, _dimension_size(dest, d, i32))
                 if dest_type.is_dynamic_dim(d) else
                 _stablehlo("broadcast_in_dim", entry, _scalar_constant(
                     i32, dest_type.shape[d], None),
                     broadcast_dimensions=ir.DenseI64ArrayAttr.get([])) for d in kept]
        shape = sizes[0] if len(sizes) == 1 else _stablehlo(
            "concatenate", ir.RankedTensorType.get([len(sizes)], i32), *sizes,
            dimension=ir.IntegerAttr.get(_i64(), 0))
        offset = len(window) - update_type.rank
        # The update's dynamic dimensions are the destination's (torch.export's guards).
        same = [i for i in range(update_type.rank) if update_type.is_dynamic_dim(i)]
        update = _stablehlo("dynamic_broadcast_in_dim",
                            ir.RankedTensorType.get(window, element), update, shape,
                            broadcast_dimensions=ir.DenseI64ArrayAttr.get(
                                list(range(offset, len(window)))),
                            known_nonexpanding_dimensions=ir.DenseI64ArrayAttr.get(same))
    vector = ir.RankedTensorType.get([1], _i64())
    columns = [_stablehlo("reshape", vector, starts[d]) for d in indexed]
    indices = columns[0] if len(columns) == 1 else _stablehlo(
        "concatenate", ir.RankedTensorType.get([len(columns)], _i64()), *columns,
        dimension=ir.IntegerAttr.get(_i64(), 0))
    numbers = _scatter_numbers(list(range(len(kept))), indexed, 0)
    return _scatter(dest, indices, update, numbers, combine=None, unique=True,
                    loc=loc).result
