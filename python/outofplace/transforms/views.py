"""Writing a new value of a view back into its base, one view op at a time.

For each ATen view op, `write_back(view, base, src)` builds the value the base has once
the view's elements are replaced by `src`:

    %v = torch.aten.slice.Tensor %base, %dim, %start, %end, %step
    =>  torch.aten.slice_scatter %base, %src, %dim, %start, %end, %step

The pass applies these from the innermost view outwards, so a write through
`x.t()[3]` becomes a new `x`. View ops that cannot be written through (`expand`, whose
elements share memory; `unfold`, whose windows overlap) are refused, as eager refuses
or misbehaves on them.
"""

from __future__ import annotations

from typing import Callable

from torch_mlir import ir

from . import diagonal
from .. import torch_types
from ..errors import UnsupportedMutationError
from ..ir_utils import constant_int, int_list, size_int, torch_constant, unnamed

WriteBack = Callable[[ir.Operation, ir.Value, ir.Value, ir.Location, ir.InsertionPoint],
                     ir.Value]
_WRITE_BACK: dict[str, WriteBack] = {}


def _register(*names: str) -> Callable[[WriteBack], WriteBack]:
    def register(fn: WriteBack) -> WriteBack:
        for name in names:
            _WRITE_BACK[name] = fn
        return fn
    return register


def write_back(view: ir.Operation, base: ir.Value, src: ir.Value, loc: ir.Location,
               ip: ir.InsertionPoint) -> ir.Value:
    """The new value of `base` after the elements `view` selects become `src`."""
    fn = _WRITE_BACK.get(view.name)
    if fn is None:
        raise UnsupportedMutationError.at(
            view, "writing through this view op is not supported")
    return fn(view, base, src, loc, ip)


def _create(name: str, operands: list[ir.Value], like: ir.Value, loc: ir.Location,
            ip: ir.InsertionPoint) -> ir.Value:
    result = torch_types.value_type(like.type)
    return ir.Operation.create(name, results=[result], operands=operands, loc=loc,
                               ip=ip).result


_INT64_MAX = 2**63 - 1


@_register("torch.aten.slice.Tensor")
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
                bound = min(max(bound + size if bound < 0 else bound, 0), size)
                value = torch_constant("int", bound, loc, ip)
            bounds.append(value)
        start_value, end_value = bounds
    elif dim is not None and sizes is not None:  # a dynamic dimension (dynamic_shapes)
        start, end, step = (constant_int(v) for v in (start_value, end_value, step_value))
        if start is None or end is None or start < 0 or end < 0:
            raise UnsupportedMutationError.at(
                view, "writing through a slice of a dynamic dimension (dynamic_shapes) "
                "with bounds that are negative or not constants")
        if start == 0 and end >= _INT64_MAX and step == 1 and src.type == base.type:
            return src  # the whole dimension
        if end >= _INT64_MAX:  # an open end: the dimension's runtime size
            end_value = size_int(base, dim_value, loc, ip)
    return _create("torch.aten.slice_scatter",
                   [base, src, dim_value, start_value, end_value, step_value], base, loc, ip)


@_register("torch.aten.narrow")
def _narrow(view, base, src, loc, ip):
    """x.narrow(d, s, n) = src  =>  slice_scatter(x, src, d, s, s + n), s from the end
    when negative"""
    dim_value, start_value, length_value = view.operands[1:4]
    dim, start, length = (constant_int(v) for v in (dim_value, start_value, length_value))
    sizes = torch_types.TensorType.of(base.type).sizes
    if None in (dim, start, length) or sizes is None or sizes[dim % len(sizes)] < 0:
        raise UnsupportedMutationError.at(view, "narrow with runtime bounds")
    if start < 0:
        start += sizes[dim % len(sizes)]
    bounds = [torch_constant("int", v, loc, ip) for v in (start, start + length, 1)]
    return _create("torch.aten.slice_scatter", [base, src, dim_value, *bounds], base, loc,
                   ip)


@_register("torch.aten.select.int")
def _select(view, base, src, loc, ip):
    """x[i] = src  =>  select_scatter(x, src, dim, i), a negative i counted from the end"""
    dim_value, index_value = view.operands[1], view.operands[2]
    dim, index = constant_int(dim_value), constant_int(index_value)
    sizes = torch_types.TensorType.of(base.type).sizes
    if index is not None and index < 0 and dim is not None and sizes is not None:
        size = sizes[dim % len(sizes)]
        if size >= 0:
            index_value = torch_constant("int", index + size, loc, ip)
    return _create("torch.aten.select_scatter", [base, src, dim_value, index_value], base,
                   loc, ip)


@_register("torch.aten.index.Tensor")
def _position(view, base, src, loc, ip):
    """x[pos] = src  =>  index_put(x, [pos], src): only a read at 0-d integer positions
    is a view (op_registry.is_position_view); outofplace-lower-updates makes it one
    dynamic_update_slice at the runtime starts"""
    false = torch_constant("bool", False, unnamed(loc), ip)
    return _create("torch.aten.index_put", [base, view.operands[1], src, false], base, loc,
                   ip)


@_register("torch.aten.diagonal")
def _diagonal(view, base, src, loc, ip):
    """x.diagonal(o, a, b) = src  =>  a strided slice_scatter of x with a, b moved last
    and flattened (diagonal.py)"""
    return diagonal.write_back(view, base, src, loc, ip)


@_register("torch.aten.as_strided")
def _as_strided(view, base, src, loc, ip):
    """x.as_strided(size, stride, off) = src  =>  as_strided_scatter(x, src, ...)"""
    return _create("torch.aten.as_strided_scatter", [base, src, *view.operands[1:]],
                   base, loc, ip)


@_register("torch.aten.transpose.int")
def _transpose(view, base, src, loc, ip):
    """x.transpose(a, b) = src  =>  x = src.transpose(a, b)"""
    return _create("torch.aten.transpose.int", [src, *view.operands[1:]], base, loc, ip)


@_register("torch.aten.swapaxes", "torch.aten.swapdims")
def _swap(view, base, src, loc, ip):
    """x.swapaxes(a, b) = src  =>  x = src.transpose(a, b)"""
    return _create("torch.aten.transpose.int", [src, *view.operands[1:]], base, loc, ip)


@_register("torch.aten.movedim.int")
def _movedim(view, base, src, loc, ip):
    """x.movedim(a, b) = src  =>  x = src.movedim(b, a)"""
    source, destination = view.operands[1:3]
    return _create("torch.aten.movedim.int", [src, destination, source], base, loc, ip)


@_register("torch.aten.t", "torch.aten.numpy_T")
def _t(view, base, src, loc, ip):
    """x.t() = src  =>  x = src.t()"""
    return _create(view.name, [src], base, loc, ip)


@_register("torch.aten.permute")
def _permute(view, base, src, loc, ip):
    """x.permute(p) = src  =>  x = src.permute(inverse of p)"""
    dims_list = view.operands[1].owner
    dims = [constant_int(v) for v in dims_list.operands]
    if dims_list.name != "torch.prim.ListConstruct" or None in dims:
        raise UnsupportedMutationError.at(view, "permute with runtime dims")
    rank = len(dims)
    inverse = [0] * rank
    for position, dim in enumerate(dims):
        inverse[dim % rank] = position
    return _create("torch.aten.permute", [src, int_list(inverse, loc, ip)], base, loc, ip)


@_register("torch.aten.view", "torch.aten._unsafe_view", "torch.aten.reshape",
           "torch.aten.unsqueeze", "torch.aten.squeeze", "torch.aten.squeeze.dim",
           "torch.aten.squeeze.dims", "torch.aten.flatten.using_ints",
           "torch.aten.unflatten.int", "torch.aten.view_as", "torch.aten.reshape_as")
def _reshape(view, base, src, loc, ip):
    """x.view(s) = src  =>  x = src.view(x's shape); views keep row-major element order"""
    sizes = torch_types.TensorType.of(base.type).sizes
    if sizes is None or any(d < 0 for d in sizes):
        raise UnsupportedMutationError.at(view, "writing through a view of a dynamic shape")
    return _create("torch.aten.view", [src, int_list(list(sizes), loc, ip)], base, loc, ip)


# Views that are the tensor itself (when `to`, `contiguous` or `type_as` copied instead,
# the frontend put a clone after them: fx_rewrites._copy_where_views_copy).
IDENTITY_VIEWS = ("torch.aten.alias", "torch.aten.detach", "torch.aten.lift_fresh",
                  "torch.aten.to.dtype", "torch.aten.to.dtype_layout", "torch.aten.to.device",
                  "torch.aten.to.other", "torch.aten.contiguous", "torch.aten.type_as")


@_register(*IDENTITY_VIEWS)
def _identity(view, base, src, loc, ip):
    """x.alias() = src  =>  x = src"""
    return src


@_register("torch.aten.expand", "torch.aten.expand_as")
def _expand(view, base, src, loc, ip):
    """x.expand(x's own shape) = src  =>  x = src; any real expansion is refused"""
    sizes = torch_types.TensorType.of(base.type).sizes
    if sizes is not None and sizes == torch_types.TensorType.of(view.result.type).sizes \
            and all(d >= 0 for d in sizes):
        return src
    raise UnsupportedMutationError.at(
        view, "writing into an expanded tensor: its elements share memory (eager refuses "
        "most such writes)")


@_register("torch.aten.unfold")
def _unfold(view, base, src, loc, ip):
    raise UnsupportedMutationError.at(view, "writing into unfold windows, which overlap")
