"""The view ops the pass writes through: one table, one entry per op (`VIEW_OPS`).

An entry says two things of its op:

- `box`: how the op moves a box of the root (per root dimension a first element, a
  count and a step; insert_plan.py follows a chain of views with it). `slice` and
  `narrow` cut a dimension, `select` fixes one, `t`/`transpose`/`movedim`/`permute`
  reorder the view's dimensions, `unsqueeze`/`squeeze` and unit-dim `view`s add or drop
  dimensions of size 1, the identity views keep the box; None where the op's elements
  are no box of its base (`diagonal`, reshapes that merge dimensions, `as_strided`).
- `write_back(view, base, src)`: the value the base has once the view's elements are
  replaced by `src`, for a chain that is no box:

      %v = torch.aten.slice.Tensor %base, %dim, %start, %end, %step
      =>  torch.aten.slice_scatter %base, %src, %dim, %start, %end, %step

  applied from the innermost view outwards, so a write through `x.t()[3]` becomes a
  new `x`. View ops that cannot be written through (`expand`, whose elements share
  memory; `unfold`, whose windows overlap) are refused, as eager refuses or misbehaves
  on them.

Which ops are views at all is read from PyTorch's schemas (op_registry.viewed_operand):
a view op without an entry is followed for reads, and a write through it is refused.
Constant indices and bounds are normalised as eager normalises them (indexing.py).
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Callable

from torch_mlir import ir

from . import decompose_diagonal
from .. import torch_types
from ..errors import UnsupportedMutationError, source_line
from ..op_registry import aten_name
from ..indexing import (INT64_MAX, clamp_bound, clamp_slice, constant_bound, from_end,
                        inverse_permutation, normalise_index)
from ..ir_utils import constant_int, int_list, size_int, torch_constant, unnamed

Sizes = tuple[int, ...]
# A box step: (insert_plan's walk, the view op, the static sizes of its operand and of
# its result) -> False when the view leaves the box shape.
BoxStep = Callable[[Any, ir.Operation, Sizes, Sizes], bool]
WriteBack = Callable[[ir.Operation, ir.Value, ir.Value, ir.Location, ir.InsertionPoint],
                     ir.Value]


@dataclass(frozen=True)
class ViewOp:
    """What the pass knows of one view op."""

    box: BoxStep | None  # how it moves a box of the root; None: its elements are no box
    write_back: WriteBack  # the base with the view's elements replaced


def write_back(view: ir.Operation, base: ir.Value, src: ir.Value, loc: ir.Location,
               ip: ir.InsertionPoint) -> ir.Value:
    """The new value of `base` after the elements `view` selects become `src`."""
    entry = VIEW_OPS.get(view.name)
    if entry is None:
        raise UnsupportedMutationError.at(
            view, "writing through this view op is not supported")
    return entry.write_back(view, base, src, loc, ip)


def box_step(walk: Any, view: ir.Operation, before: Sizes, after: Sizes) -> bool:
    """Applies `view` to insert_plan's walk; False when it leaves the box shape."""
    entry = VIEW_OPS.get(view.name)
    return entry is not None and entry.box is not None and \
        entry.box(walk, view, before, after)


def is_identity(view: ir.Operation) -> bool:
    """A view that is the tensor itself (`alias`, `detach`, `to` that did not copy)."""
    entry = VIEW_OPS.get(view.name)
    return entry is not None and entry.box is _same_box


def _create(name: str, operands: list[ir.Value], like: ir.Value, loc: ir.Location,
            ip: ir.InsertionPoint) -> ir.Value:
    result = torch_types.value_type(like.type)
    return ir.Operation.create(name, results=[result], operands=operands, loc=loc,
                               ip=ip).result


def _constant_ints(items: ir.Value) -> list[int] | None:
    """The values of a `torch.prim.ListConstruct` of int constants, else None."""
    if not isinstance(items, ir.OpResult) or items.owner.name != "torch.prim.ListConstruct":
        return None
    values = [constant_int(v) for v in items.owner.operands]
    return None if None in values else values


# ------------------------------------------------------------------------- slice, narrow
def _slice_box(walk, view, before, after):
    dim, start, end, step = (constant_int(view.operands[1]),
                             constant_bound(view.operands[2], 0),
                             constant_bound(view.operands[3], INT64_MAX),
                             constant_int(view.operands[4]))
    if None in (dim, start, end, step) or step <= 0:
        return False
    dim %= len(before)
    return walk.slice(dim, *clamp_slice(start, end, before[dim]), step)


def _slice(view, base, src, loc, ip):
    """x[a:b:c] = src  =>  slice_scatter(x, src, dim, a, b, c), with constant bounds
    clamped to the dimension (an open end is INT64_MAX, which slice_scatter would try to
    allocate)"""
    dim_value, start_value, end_value, step_value = view.operands[1:5]
    dim, sizes = constant_int(dim_value), torch_types.TensorType.of(base.type).sizes
    if dim is not None and sizes is not None and sizes[dim % len(sizes)] >= 0:
        size = sizes[dim % len(sizes)]
        bounds = []
        for value in (start_value, end_value):
            bound = constant_int(value)
            if bound is not None:
                value = torch_constant("int", clamp_bound(bound, size), loc, ip)
            bounds.append(value)
        start_value, end_value = bounds
    elif dim is not None and sizes is not None:  # a dynamic dimension (dynamic_shapes)
        start, end, step = (constant_int(v) for v in (start_value, end_value, step_value))
        if start is None or end is None or start < 0 or end < 0:
            raise UnsupportedMutationError.at(
                view, "writing through a slice of a dynamic dimension (dynamic_shapes) "
                "with bounds that are negative or not constants")
        if start == 0 and end >= INT64_MAX and step == 1 and src.type == base.type:
            return src  # the whole dimension
        if end >= INT64_MAX:  # an open end: the dimension's runtime size
            end_value = size_int(base, dim_value, loc, ip)
    return _create("torch.aten.slice_scatter",
                   [base, src, dim_value, start_value, end_value, step_value], base, loc, ip)


def _narrowed(view: ir.Operation, sizes: Sizes | None) -> tuple[int, int, int] | None:
    """(dim, start, end) of a narrow with constant arguments of a static dimension, the
    start from the end when negative."""
    dim, start, length = (constant_int(v) for v in view.operands[1:4])
    if None in (dim, start, length) or sizes is None or sizes[dim % len(sizes)] < 0:
        return None
    dim %= len(sizes)
    start = from_end(start, sizes[dim])
    return dim, start, start + length


def _narrow_box(walk, view, before, after):
    bounds = _narrowed(view, before)
    return bounds is not None and walk.slice(*bounds, 1)


def _narrow(view, base, src, loc, ip):
    """x.narrow(d, s, n) = src  =>  slice_scatter(x, src, d, s, s + n)"""
    bounds = _narrowed(view, torch_types.TensorType.of(base.type).sizes)
    if bounds is None:
        raise UnsupportedMutationError.at(view, "narrow with runtime bounds")
    ints = [torch_constant("int", v, loc, ip) for v in (*bounds[1:], 1)]
    return _create("torch.aten.slice_scatter", [base, src, view.operands[1], *ints], base,
                   loc, ip)


# -------------------------------------------------------------------------------- select
def _select_box(walk, view, before, after):
    dim, index = constant_int(view.operands[1]), constant_int(view.operands[2])
    if dim is None or index is None:
        return False
    dim %= len(before)
    walk.select(dim, normalise_index(index, before[dim], view))
    return True


def _select(view, base, src, loc, ip):
    """x[i] = src  =>  select_scatter(x, src, dim, i), a negative i counted from the end"""
    dim_value, index_value = view.operands[1], view.operands[2]
    dim, index = constant_int(dim_value), constant_int(index_value)
    sizes = torch_types.TensorType.of(base.type).sizes
    if index is not None and index < 0 and dim is not None and sizes is not None:
        size = sizes[dim % len(sizes)]
        if size >= 0:
            index_value = torch_constant("int", from_end(index, size), loc, ip)
    return _create("torch.aten.select_scatter", [base, src, dim_value, index_value], base,
                   loc, ip)


# ---------------------------------------------------------- views that reorder dimensions
def _reordering(order_of: Callable[[ir.Operation, int], list[int] | None]) -> BoxStep:
    """The box step of a view whose result dim i is its operand's dim order[i]."""
    def step(walk, view, before, after):
        order = order_of(view, len(before))
        if order is None:
            return False
        walk.reorder(order)
        return True
    return step


def _reversed(view: ir.Operation, rank: int) -> list[int]:
    return list(reversed(range(rank)))


def _transposed(view: ir.Operation, rank: int) -> list[int] | None:
    a, b = constant_int(view.operands[1]), constant_int(view.operands[2])
    if a is None or b is None:
        return None
    order = list(range(rank))
    order[a % rank], order[b % rank] = order[b % rank], order[a % rank]
    return order


def _moved(view: ir.Operation, rank: int) -> list[int] | None:
    source, destination = constant_int(view.operands[1]), constant_int(view.operands[2])
    if source is None or destination is None:
        return None
    order = list(range(rank))
    order.insert(destination % rank, order.pop(source % rank))
    return order


def _permuted(view: ir.Operation, rank: int) -> list[int] | None:
    order = _constant_ints(view.operands[1])
    if order is None or len(order) != rank:
        return None
    return [d % rank for d in order]


def _t(view, base, src, loc, ip):
    """x.t() = src  =>  x = src.t()"""
    return _create(view.name, [src], base, loc, ip)


def _transpose(view, base, src, loc, ip):
    """x.transpose(a, b) = src  =>  x = src.transpose(a, b)"""
    return _create("torch.aten.transpose.int", [src, *view.operands[1:]], base, loc, ip)


def _movedim(view, base, src, loc, ip):
    """x.movedim(a, b) = src  =>  x = src.movedim(b, a)"""
    source, destination = view.operands[1:3]
    return _create("torch.aten.movedim.int", [src, destination, source], base, loc, ip)


def _permute(view, base, src, loc, ip):
    """x.permute(p) = src  =>  x = src.permute(inverse of p)"""
    dims = _constant_ints(view.operands[1])
    if dims is None:
        raise UnsupportedMutationError.at(view, "permute with runtime dims")
    inverse = inverse_permutation([d % len(dims) for d in dims])
    return _create("torch.aten.permute", [src, int_list(inverse, loc, ip)], base, loc, ip)


# -------------------------------------------------------- reshapes, unit dims, identities
def _unit_dims_box(walk, view, before, after):
    """A view that only adds or drops unit dims: the sizes of the two sides match."""
    return walk.regroup_unit_dims(before, after)


def _reshape(view, base, src, loc, ip):
    """x.view(s) = src  =>  x = src.view(x's shape); views keep row-major element order"""
    sizes = torch_types.TensorType.of(base.type).sizes
    if sizes is None or any(d < 0 for d in sizes):
        raise UnsupportedMutationError.at(view, "writing through a view of a dynamic shape")
    return _create("torch.aten.view", [src, int_list(list(sizes), loc, ip)], base, loc, ip)


def _same_box(walk, view, before, after):
    return before == after


def _identity(view, base, src, loc, ip):
    """x.alias() = src  =>  x = src"""
    return src


# ------------------------------------------------------- views written by other means
def _position(view, base, src, loc, ip):
    """x[pos] = src  =>  index_put(x, [pos], src): only a read at 0-d integer positions
    is a view (op_registry.is_position_view); outofplace-lower-updates makes it one
    dynamic_update_slice at the runtime starts"""
    false = torch_constant("bool", False, unnamed(loc), ip)
    return _create("torch.aten.index_put", [base, view.operands[1], src, false], base, loc,
                   ip)


def _diagonal(view, base, src, loc, ip):
    """x.diagonal(o, a, b) = src  =>  a strided slice_scatter of x with a, b moved last
    and flattened (decompose_diagonal.py)"""
    return decompose_diagonal.write_back(view, base, src, loc, ip)


def _as_strided(view, base, src, loc, ip):
    """x.as_strided(size, stride, off) = src  =>  as_strided_scatter(x, src, ...)"""
    return _create("torch.aten.as_strided_scatter", [base, src, *view.operands[1:]],
                   base, loc, ip)


def _expand(view, base, src, loc, ip):
    """x.expand(x's own shape) = src  =>  x = src; an expand that broadcasts nothing
    (`x.expand(1, -1)`: it adds dimensions of size 1) is a view of x's elements in
    order, written back as a reshape; any real expansion is refused"""
    sizes = torch_types.TensorType.of(base.type).sizes
    result = torch_types.TensorType.of(view.result.type).sizes
    if sizes is not None and result is not None and all(d >= 0 for d in sizes + result):
        if sizes == result:
            return src
        if math.prod(sizes) == math.prod(result) > 0:
            return _reshape(view, base, src, loc, ip)
    where = source_line(view.location)
    raise UnsupportedMutationError(
        aten_name(view), "writing into an expanded tensor: its elements share memory "
        "(eager refuses most such writes)" + (f"; expanded at {where}" if where else ""),
        location=source_line(loc) or where)


def _unfold(view, base, src, loc, ip):
    raise UnsupportedMutationError.at(view, "writing into unfold windows, which overlap")


def _entries(view_op: ViewOp, *names: str) -> dict[str, ViewOp]:
    return {f"torch.aten.{name}": view_op for name in names}


VIEW_OPS: dict[str, ViewOp] = {
    "torch.aten.slice.Tensor": ViewOp(_slice_box, _slice),
    "torch.aten.narrow": ViewOp(_narrow_box, _narrow),
    "torch.aten.select.int": ViewOp(_select_box, _select),
    **_entries(ViewOp(_reordering(_reversed), _t), "t", "numpy_T"),
    # swapaxes, swapdims: the frontend rewrites them to transpose
    # (frontend/upstream/undefined_ops.py)
    **_entries(ViewOp(_reordering(_transposed), _transpose),
               "transpose.int", "swapaxes", "swapdims"),
    "torch.aten.movedim.int": ViewOp(_reordering(_moved), _movedim),
    "torch.aten.permute": ViewOp(_reordering(_permuted), _permute),
    **_entries(ViewOp(_unit_dims_box, _reshape), "unsqueeze", "squeeze", "squeeze.dim",
               "squeeze.dims", "view", "reshape"),
    **_entries(ViewOp(None, _reshape), "flatten.using_ints", "unflatten.int", "view_as",
               "reshape_as"),
    # The tensor itself (when `to` or `contiguous` copied instead, the frontend put a
    # clone after them: fx_rewrites._copy_where_views_copy).
    **_entries(ViewOp(_same_box, _identity), "alias", "detach", "lift_fresh", "to.dtype",
               "to.dtype_layout", "to.device", "to.other", "contiguous"),
    "torch.aten.index.Tensor": ViewOp(None, _position),  # x[pos]: op_registry.is_position_view
    "torch.aten.diagonal": ViewOp(None, _diagonal),
    "torch.aten.as_strided": ViewOp(None, _as_strided),
    **_entries(ViewOp(None, _expand), "expand", "expand_as"),
    "torch.aten.unfold": ViewOp(None, _unfold),
}
