"""`index_put` with one bool mask as `where(mask, v, b)`, v's rows picked by a running
count of the trues (torch ops, never `nonzero`); a mask beside other index tensors is
refused."""

from __future__ import annotations

import torch
from torch_mlir import ir, rewrite
from torch_mlir.extras.fx_importer import TORCH_DTYPE_TO_INT

from ... import torch_types
from ...errors import UnsupportedMutationError
from ...indexing import index_entries
from ...ir_utils import constant_bool, torch_constant, unnamed
from .common import _count, _static_tensor, _ranked_tensor, _dynamic, _torch, _view


def _mask_entries(indices: ir.Value) -> list[ir.Value | None] | None:
    """The entries of an index list holding a bool mask: None or a ranked tensor; None
    if the list is anything else or has no bool tensor."""
    entries = index_entries(indices)
    tensors = [_ranked_tensor(e) for e in entries or () if e is not None]
    if entries is None or None in tensors or not any(t.dtype == torch.bool for t in tensors):
        return None
    return entries


def _index_put_with_mask(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """`b[mask] = v` (index_put with one bool mask), a select over the whole of b; never
    nonzero, so shapes stay static. The value of the k-th true element is row k of v,
    found by a running count of the trues:

        %r = torch.aten.index_put %b, [%mask], %v, %false
        =>  where(mask, v, b)                                v broadcast over the trues
        =>  where(mask, index_select(v, cumsum(mask) - 1), b)   v holds a row per true

    (accumulating: where(mask, b + ..., b)). Torch ops, lowered by torch-mlir.
    """
    self, indices, values, accumulate = op.operands
    self_t, values_t = _static_tensor(self), _static_tensor(values)
    entries = _mask_entries(indices)
    accumulating = constant_bool(accumulate)
    if entries is not None and _dynamic(self, *entries):
        raise UnsupportedMutationError.at(
            op, "a write at a bool mask into a tensor with a dynamic dimension "
            "(dynamic_shapes): the running count of its trues would be of runtime size; "
            "write `torch.where(mask, v, x)` or compile static shapes")
    if self_t is None or values_t is None or entries is None or accumulating is None:
        return True
    masks = [k for k, e in enumerate(entries) if e is not None]
    if len(masks) > 1:
        raise UnsupportedMutationError.at(
            op, "a bool mask together with other index tensors in one index (the "
            "positions of its trues, as many as the data says, would broadcast with the "
            "other indices)")
    k = masks[0]
    mask = entries[k]
    if _static_tensor(mask) is None:
        return True
    mask_sizes = list(torch_types.TensorType.of(mask.type).sizes)
    shape = list(self_t.sizes)
    before, after = shape[:k], shape[k + len(mask_sizes):]
    if shape[k:k + len(mask_sizes)] != mask_sizes:
        return True
    if 0 in values_t.sizes:  # eager accepted it: the mask selects nothing
        rewriter.replace_op(op, [self])
        return False
    rows_dim = len(before)  # where the true elements are counted in b[mask]
    wide = [1] * (len(before) + 1 + len(after) - len(values_t.sizes)) + list(values_t.sizes)
    if len(wide) != len(before) + 1 + len(after):
        return True
    with rewriter.ip, unnamed(op.location):
        loc, ip = ir.Location.current, ir.InsertionPoint.current
        if values_t.dtype != self_t.dtype:
            none, false = torch_constant("none", None, loc, ip), \
                torch_constant("bool", False, loc, ip)
            values = _torch("to.dtype", values_t.with_dtype(self_t.dtype), values,
                            torch_constant("int", TORCH_DTYPE_TO_INT[self_t.dtype], loc, ip),
                            false, false, none)
        if wide[rows_dim] == 1:
            picked = _view(values, wide[:rows_dim] + [1] * len(mask_sizes) +
                           wide[rows_dim + 1:])
        else:
            flat = _view(mask, [_count(mask_sizes)])
            counts = torch_types.TensorType((_count(mask_sizes),), torch.int64, True)
            count = _torch("cumsum", counts, flat, torch_constant("int", 0, loc, ip),
                           torch_constant("int", TORCH_DTYPE_TO_INT[torch.int64], loc, ip))
            one, zero = torch_constant("int", 1, loc, ip), torch_constant("int", 0, loc, ip)
            position = _torch("clamp_min", counts, _torch("sub.Scalar", counts, count, one,
                                                          one), zero)
            rows = _torch("index_select", torch_types.TensorType(
                tuple(wide[:rows_dim] + [_count(mask_sizes)] + wide[rows_dim + 1:]),
                self_t.dtype, True), _view(values, wide),
                torch_constant("int", rows_dim, loc, ip), position)
            picked = _view(rows, wide[:rows_dim] + mask_sizes + wide[rows_dim + 1:])
        if accumulating:
            picked = _torch("add.Tensor", self_t.with_value_semantics(), self, picked,
                            torch_constant("int", 1, loc, ip))
        condition = _view(mask, mask_sizes + [1] * len(after))
        new = _torch("where.self", self_t.with_value_semantics(), condition, picked, self)
    rewriter.replace_op(op, [new])
    return False
