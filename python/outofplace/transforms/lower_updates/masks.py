"""`index_put` with one bool mask as `where(mask, v, b)`, v's rows picked by a running
count of the trues (torch ops, never `nonzero`); beside it, index tensors of one element
each (their positions made part of the mask) or a second bool mask (the k-th trues of the
two paired); a mask beside larger index tensors is refused."""

from __future__ import annotations

import torch
from torch_mlir import ir, rewrite

from ... import torch_types
from ...torch_types import TORCH_DTYPE_TO_INT
from ...errors import UnsupportedMutationError, warn_out_of_bounds_policy
from ...indexing import index_entries
from ...ir_utils import constant_bool, int_list, tensor_literal, torch_constant, unnamed
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

    (accumulating: where(mask, b + ..., b)). Beside the mask, index tensors of one
    element each (`b[mask, [2]] = v`: the trues' positions broadcast with them) make one
    mask over all the dimensions they index, the mask's trues at each one's position
    (`_one_mask`); so does a second mask, true where the k-th trues of both are (`b[m1,
    m2] = v`, as dynamo hands it a write whose read it ran eagerly). Torch ops, lowered
    by torch-mlir.
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
    tensors = [k for k, e in enumerate(entries) if e is not None]
    if len(tensors) == 1:
        mask, first = entries[tensors[0]], tensors[0]
        if _static_tensor(mask) is None:
            return True
        with rewriter.ip, unnamed(op.location):
            new = _where_at_mask(self, self_t, mask, first, values, values_t, accumulating)
    else:
        advanced = _advanced_dimensions(op, entries)
        if len(values_t.sizes) > len(self_t.sizes) - len(advanced) + 1:
            return True  # (not eager's values for this key; nothing built)
        # eager puts the trues' dimension where the indexed dimensions are when they are
        # adjacent, else first: here the indexed dimensions are made the first ones
        adjacent = tensors == list(range(tensors[0], tensors[-1] + 1))
        order = None if adjacent else \
            advanced + [d for d in range(len(self_t.sizes)) if d not in advanced]
        with rewriter.ip, unnamed(op.location):
            mask = _one_mask(op, entries, [self_t.sizes[d] for d in advanced])
            target, target_t = self, self_t
            if order is not None:
                target_t = torch_types.TensorType(tuple(self_t.sizes[d] for d in order),
                                                  self_t.dtype, True)
                target = _permute(self, order, target_t)
            new = _where_at_mask(target, target_t, mask, advanced[0] if adjacent else 0,
                                 values, values_t, accumulating)
            if new is not None and order is not None:
                new = _permute(new, [order.index(d) for d in range(len(order))],
                               self_t.with_value_semantics())
    if new is None:
        return True
    rewriter.replace_op(op, [new])
    return False


def _advanced_dimensions(op: ir.Operation, entries: list[ir.Value | None]) -> list[int]:
    """The dimensions of self that the index tensors of a key holding a bool mask index,
    in order; refused unless the mask is one and every other tensor is one element."""
    dims, dim, masks = [], 0, 0
    for entry in entries:
        t = None if entry is None else _static_tensor(entry)
        if entry is not None and t is None:
            raise UnsupportedMutationError.at(
                op, "a bool mask together with index tensors of a dynamic shape")
        if t is not None and t.dtype == torch.bool:
            masks += 1
            dims += range(dim, dim + len(t.sizes))
            dim += len(t.sizes)
            if not t.sizes:
                raise UnsupportedMutationError.at(
                    op, "a 0-d bool mask together with other index tensors in one index")
            continue
        if t is not None:
            if _count(list(t.sizes)) != 1 or len(t.sizes) > 1:
                raise UnsupportedMutationError.at(
                    op, "a bool mask together with index tensors of more than one "
                    "element in one index (the positions of its trues, as many as the "
                    "data says, would broadcast with the other indices)")
            dims.append(dim)
        dim += 1
    if masks > 2:
        raise UnsupportedMutationError.at(op, "more than two bool masks in one index")
    return dims


def _one_mask(op: ir.Operation, entries: list[ir.Value | None], sizes: list[int]
              ) -> ir.Value:
    """The bool mask over the dimensions a key's tensors index (`sizes`) that is true
    where the key's mask is and each one-element index tensor points (a negative one
    from the end, one out of range nowhere); with two masks, where the k-th true of one
    and the k-th of the other are (`_paired`)."""
    loc, ip = ir.Location.current, ir.InsertionPoint.current
    factors, masks, at = [], [], 0
    for entry in entries:
        if entry is None:
            continue
        t = _static_tensor(entry)
        if t.dtype == torch.bool:
            factor_sizes = list(t.sizes)
            factor = entry
            masks.append((entry, at))
        else:
            size = sizes[at]
            factor_sizes = [size]
            index = _view(entry, [1])
            bool_t = torch_types.TensorType((size,), torch.bool, True)
            factor = _torch("logical_or", bool_t, *(
                _torch("eq.Tensor", bool_t, tensor_literal(
                    torch.arange(start, start + size, dtype=t.dtype), loc, ip), index)
                for start in (0, -size)))
        shape = [1] * at + factor_sizes + [1] * (len(sizes) - at - len(factor_sizes))
        factors.append(_view(factor, shape))
        at += len(factor_sizes)
    if len(masks) == 2:
        factors.append(_paired(masks, sizes))
        warn_out_of_bounds_policy(op, "paired up to the lesser count", what=(
            "a write at two bool masks whose counts of trues differ (neither one)"))
    mask = factors[0]
    for factor in factors[1:]:
        mask = _and(mask, factor)
    return mask


def _and(a: ir.Value, b: ir.Value) -> ir.Value:
    """a & b, broadcast."""
    return _torch("logical_and", _flags(a, b), a, b)


def _flags(a: ir.Value, b: ir.Value) -> torch_types.TensorType:
    """The type of bools of a and b broadcast together."""
    return torch_types.TensorType(tuple(
        max(m, n) for m, n in zip(torch_types.TensorType.of(a.type).sizes,
                                  torch_types.TensorType.of(b.type).sizes)),
        torch.bool, True)


def _running_count(flat: ir.Value) -> ir.Value:
    """Of a flat mask: each element's count of trues up to it, less one (a true's k:
    it is the k-th, from 0), as int64."""
    loc, ip = ir.Location.current, ir.InsertionPoint.current
    counts = torch_types.TensorType.of(flat.type).with_dtype(torch.int64)
    one = torch_constant("int", 1, loc, ip)
    count = _torch("cumsum", counts, flat, torch_constant("int", 0, loc, ip),
                   torch_constant("int", TORCH_DTYPE_TO_INT[torch.int64], loc, ip))
    return _torch("sub.Scalar", counts, count, one, one)


def _paired(masks: list[tuple[ir.Value, int]], sizes: list[int]) -> ir.Value:
    """Over the dimensions `sizes`, where the trues of two masks (each with the dimension
    it starts at) are paired as eager pairs the positions of their trues: the k-th of one
    with the k-th of the other, or every true of one with the other's only true
    (broadcast). Each true's k is its running count less one; eager raises where the
    counts differ and neither is one, and the masks are then paired up to the lesser."""
    loc, ip = ir.Location.current, ir.InsertionPoint.current
    one, none = torch_constant("int", 1, loc, ip), torch_constant("none", None, loc, ip)
    scalar = torch_types.TensorType((), torch.int64, True)
    flag = torch_types.TensorType((), torch.bool, True)
    ranks, single = [], []
    for mask, at in masks:
        mask_sizes = list(torch_types.TensorType.of(mask.type).sizes)
        flat = _view(mask, [_count(mask_sizes)])
        ranks.append(_view(_running_count(flat), [1] * at + mask_sizes +
                           [1] * (len(sizes) - at - len(mask_sizes))))
        single.append(_torch("eq.Scalar", flag, _torch("sum", scalar, flat, none), one))
    return _torch("logical_or", _flags(*ranks), _torch("eq.Tensor", _flags(*ranks), *ranks),
                  _torch("logical_or", flag, *single))


def _permute(value: ir.Value, order: list[int], result: torch_types.TensorType
             ) -> ir.Value:
    return _torch("permute", result, value,
                  int_list(order, ir.Location.current, ir.InsertionPoint.current))


def _where_at_mask(self: ir.Value, self_t: torch_types.TensorType, mask: ir.Value,
                   k: int, values: ir.Value, values_t: torch_types.TensorType,
                   accumulating: bool) -> ir.Value | None:
    """b's new value after `b[..., mask, ...] = v` (index_put), the mask from dimension
    `k`; None where the shapes are not those of such a write."""
    mask_sizes = list(torch_types.TensorType.of(mask.type).sizes)
    shape = list(self_t.sizes)
    before, after = shape[:k], shape[k + len(mask_sizes):]
    if shape[k:k + len(mask_sizes)] != mask_sizes:
        return None
    if 0 in values_t.sizes:  # eager accepted it: the mask selects nothing
        return self
    rows_dim = len(before)  # where the true elements are counted in b[mask]
    wide = [1] * (len(before) + 1 + len(after) - len(values_t.sizes)) + list(values_t.sizes)
    if len(wide) != len(before) + 1 + len(after):
        return None
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
        position = _torch("clamp_min", counts, _running_count(flat),
                          torch_constant("int", 0, loc, ip))
        rows = _torch("index_select", torch_types.TensorType(
            tuple(wide[:rows_dim] + [_count(mask_sizes)] + wide[rows_dim + 1:]),
            self_t.dtype, True), _view(values, wide),
            torch_constant("int", rows_dim, loc, ip), position)
        picked = _view(rows, wide[:rows_dim] + mask_sizes + wide[rows_dim + 1:])
    if accumulating:
        picked = _torch("add.Tensor", self_t.with_value_semantics(), self, picked,
                        torch_constant("int", 1, loc, ip))
    condition = _view(mask, mask_sizes + [1] * len(after))
    return _torch("where.self", self_t.with_value_semantics(), condition, picked, self)
