"""`scatter_reduce` (sum, prod, amax, amin, mean; torch-mlir has no lowering) as a
`scatter` whose body reduces; `slice_scatter` with a runtime end and `select_scatter`
into a dynamic dimension as one `scatter` of the whole source."""

from __future__ import annotations

import torch
from torch_mlir import ir, rewrite

from ... import torch_types
from ...errors import UnsupportedMutationError
from ...indexing import constant_bound, from_end
from ...ir_utils import constant_bool, constant_int, from_builtin, to_builtin, unnamed
from .common import (_i64, _index_vectors, _scatter, _stablehlo, _static_tensor,
                     _ranked_tensor, _splat, _constant_str)


_REDUCTIONS = {"sum": "add", "prod": "multiply", "amax": "maximum", "amin": "minimum"}


def _neutral(reduce: str, dtype: torch.dtype) -> int | float | bool:
    """The value that leaves any element unchanged under `reduce`."""
    if reduce in ("sum", "prod"):
        return 0 if reduce == "sum" else 1
    if dtype.is_floating_point:
        return float("-inf") if reduce == "amax" else float("inf")
    info = torch.iinfo(dtype) if dtype != torch.bool else None
    if info is None:
        return reduce == "amin"
    return info.min if reduce == "amax" else info.max


def _scatter_reduce(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`x.scatter_reduce_(d, idx, src, reduce)` (sum, prod, amax, amin), which torch-mlir
    does not lower to StableHLO, as a scatter of single elements whose body reduces:

        %r = torch.aten.scatter_reduce.two %x, %d, %idx, %src, "amax", %include_self
        =>  stablehlo.scatter(%x, [iota..., idx, iota...], %src) ({ maximum })

    Without include_self the targets are first set to the reduction's neutral element.
    "mean" is a sum divided by a count, as eager computes it (floor division for
    integers): the count scatter-adds ones into ones (include_self) or zeros, at least 1.
    """
    self, dim_value, index, src, reduce_value, include_value = op.operands
    self_t, index_t, src_t = (_static_tensor(v) for v in (self, index, src))
    dim, reduce = constant_int(dim_value), _constant_str(reduce_value)
    include_self = constant_bool(include_value)
    if None in (self_t, index_t, src_t, dim, include_self) or \
            reduce not in _REDUCTIONS and reduce != "mean":
        return True
    if reduce == "mean" and self_t.dtype == torch.bool:
        raise UnsupportedMutationError.at(
            op, 'reduce="mean" of a bool tensor, which eager does not implement either '
            "(scatter_gather_tensor_cpu_reduce_mean is not implemented for 'Bool')")
    combined = "sum" if reduce == "mean" else reduce  # what the scatter's body does
    rank = len(self_t.sizes)
    dim %= max(rank, 1)
    shape = list(index_t.sizes)
    element = torch_types.element_type(self_t.dtype, signless=True)
    with rewriter.ip, unnamed(op.location):
        updates = to_builtin(src)
        if list(src_t.sizes) != shape:
            updates = _stablehlo("slice", ir.RankedTensorType.get(
                shape, torch_types.element_type(src_t.dtype, signless=True)), updates,
                start_indices=ir.DenseI64ArrayAttr.get([0] * rank),
                limit_indices=ir.DenseI64ArrayAttr.get(shape),
                strides=ir.DenseI64ArrayAttr.get([1] * rank))
        if src_t.dtype != self_t.dtype:
            updates = _stablehlo("convert", ir.RankedTensorType.get(shape, element), updates)
        column = ir.RankedTensorType.get(shape + [1], _i64())
        positions = to_builtin(index)
        if ir.RankedTensorType(positions.type).element_type != _i64():
            positions = _stablehlo("convert", ir.RankedTensorType.get(shape, _i64()),
                                   positions)
        parts = [_stablehlo("reshape", column, positions) if d == dim else
                 _stablehlo("iota", column, iota_dimension=ir.IntegerAttr.get(_i64(), d))
                 for d in range(rank)]
        indices = _index_vectors(parts, shape)
        numbers = ir.Attribute.parse(
            f"#stablehlo.scatter<inserted_window_dims = {list(range(rank))}, "
            f"scatter_dims_to_operand_dims = {list(range(rank))}, index_vector_dim = {rank}>")
        dest = to_builtin(self)
        if not include_self:
            neutral = _splat(element, _neutral(combined, self_t.dtype), shape)
            dest = _scatter(dest, indices, neutral, numbers, combine=None, unique=False,
                            loc=unnamed(op.location)).result
        scatter = _scatter(dest, indices, updates, numbers,
                           combine=_REDUCTIONS[combined], unique=False,
                           loc=unnamed(op.location) if reduce == "mean" else op.location)
        new = scatter.result
        if reduce == "mean":
            full = list(self_t.sizes)
            count = _scatter(_splat(element, int(include_self), full), indices,
                             _splat(element, 1, shape), numbers, combine="add",
                             unique=False, loc=unnamed(op.location)).result
            count = _stablehlo("maximum", count.type, count, _splat(element, 1, full))
            new = _stablehlo("divide", count.type, new, count, loc=op.location)
            if not self_t.dtype.is_floating_point:  # floor, where divide truncates
                rest = _stablehlo("remainder", count.type, scatter.result, count)
                below = _stablehlo("compare", ir.RankedTensorType.get(
                    full, ir.IntegerType.get_signless(1)), rest, _splat(element, 0, full),
                    comparison_direction=ir.Attribute.parse(
                        "#stablehlo<comparison_direction LT>"))
                new = _stablehlo("select", count.type, below, _stablehlo(
                    "subtract", count.type, new, _splat(element, 1, full)), new,
                    loc=op.location)
        result = from_builtin(new, self.type)
    rewriter.replace_op(op, [result])
    return False


def _scatter_into_dimension(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`slice_scatter` (unit step) whose end is not a constant (`c[:, :L] = k` with L a
    dynamic length, which torch-mlir does not lower) and `select_scatter` into a tensor
    with a dynamic dimension, at a constant position: one scatter of the whole source as
    the window at that position (IREE takes no dynamic_update_slice of a source of
    runtime size).

        %r = torch.aten.slice_scatter %c, %k, %int1, %int0, %L, %int1
        =>  stablehlo.scatter(%c, [0], %k)  update_window_dims = [0, 1, 2],
              inserted_window_dims = [], scatter_dims_to_operand_dims = [1]
    """
    select = op.name == "torch.aten.select_scatter"
    self, src, dim_value, start_value = op.operands[:4]
    self_t, src_t = _ranked_tensor(self), _ranked_tensor(src)
    dim = constant_int(dim_value)
    start = constant_bound(start_value, 0)
    if self_t is None or src_t is None or dim is None or start is None or \
            self_t.dtype != src_t.dtype:
        return True
    if not select and constant_int(op.operands[5]) != 1:
        return True
    # Else torch-mlir's lowering (IREE rejects this scatter for a slice of static
    # length in a longer dimension: "mismatch in shape of indices and update value").
    if not (-1 in self_t.sizes if select else constant_int(op.operands[4]) is None):
        return True
    dim %= len(self_t.sizes)
    if self_t.sizes[dim] != -1:
        start = from_end(start, self_t.sizes[dim])
    if start < 0:
        return True
    with rewriter.ip, unnamed(op.location):
        index = ir.RankedTensorType.get([1], _i64())
        indices = _stablehlo("constant", index, value=ir.DenseElementsAttr.get_splat(
            index, ir.IntegerAttr.get(_i64(), start)))
        rank = len(src_t.sizes)
        numbers = ir.Attribute.parse(
            f"#stablehlo.scatter<update_window_dims = {list(range(rank))}, "
            f"inserted_window_dims = {[dim] if select else []}, "
            f"scatter_dims_to_operand_dims = [{dim}], index_vector_dim = 0>")
        scatter = _scatter(to_builtin(self), indices, to_builtin(src), numbers,
                           combine=None, unique=True, loc=op.location)
        result = from_builtin(scatter.result, op.result.type)
    rewriter.replace_op(op, [result])
    return False
