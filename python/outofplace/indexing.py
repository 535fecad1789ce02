"""Indices normalised as eager normalises them, for reads and writes at both stages.

Indexing runs in three steps, as JAX's does (normalise → plan → emit): this module
normalises (a negative index or bound counts from the end, slice bounds are clamped
into their dimension, a constant index outside it is eager's IndexError, a key is split
into its items with `...` spelled out, an MLIR index list read as its entries); the plan
is a box of the root (transforms/insert_plan.py) or a scatter's numbers
(transforms/lower_updates/); the emit builds the insert, slice, gather or scatter.

The helpers on ints serve the FX stage (keys of `x[...]` while tracing, bounds of FX
nodes) and the MLIR passes (constant operands) alike.
"""

from __future__ import annotations

from typing import Any

import torch
from torch_mlir import ir

from .errors import UserIndexError, source_line
from .ir_utils import constant_int

INT64_MAX = 2**63 - 1  # an open slice end, as torch.export and torch-mlir spell it


class StaticIndexError(UserIndexError):
    """A constant index outside its dimension: eager raises IndexError too."""

    def __init__(self, op: ir.Operation, index: int, size: int) -> None:
        where = source_line(op.location)
        super().__init__(f"{where + ': ' if where else ''}index {index} is out of bounds "
                         f"for dimension of size {size}")


def from_end(index: int, size: int) -> int:
    """A negative index or bound counts from the end of a dimension of `size`."""
    return index + size if index < 0 else index


def normalise_index(index: int, size: int, op: ir.Operation) -> int:
    """A constant index of `op` (select) into [0, size); outside [-size, size) eager
    raises IndexError, and so does this."""
    if not -size <= index < size:
        raise StaticIndexError(op, index, size)
    return from_end(index, size)


def clamp_bound(bound: int, size: int) -> int:
    """A slice bound as eager takes it: from the end when negative, clamped into
    [0, size] (an open end, INT64_MAX, is the size)."""
    return min(max(from_end(bound, size), 0), size)


def clamp_slice(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """`[start:end]` of a dimension of `size` as eager slices it: None is the whole
    extent, bounds clamped (`clamp_bound`), an end before the start is the start."""
    start = clamp_bound(0 if start is None else start, size)
    return start, max(clamp_bound(size if end is None else end, size), start)


def slice_length(start: int, end: int, step: int) -> int:
    """Elements of `[start:end:step]` (normalised bounds, step > 0)."""
    return max(0, -(-(end - start) // step))


def inverse_permutation(order: list[int]) -> list[int]:
    """The permutation that undoes `order` (for distinct dims, not all of them: the
    positions that sort them)."""
    return sorted(range(len(order)), key=order.__getitem__)


def key_items(index: Any) -> list[Any]:
    """The items of a key of `x[index]` (a tuple, or one item)."""
    return list(index) if isinstance(index, tuple) else [index]


def expand_ellipsis(items: list[Any], rank: int) -> list[Any]:
    """The items with `...` spelled out as full slices of the dimensions no other item
    takes (a bool mask takes as many as it has; None and `...` none); eager's
    IndexError for two ellipses or more items than dimensions."""
    if sum(item is Ellipsis for item in items) > 1:
        raise UserIndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(item.dim() if isinstance(item, torch.Tensor) and
                   item.dtype == torch.bool else 1
                   for item in items if item is not None and item is not Ellipsis)
    if consumed > rank:
        raise UserIndexError(f"too many indices for tensor of dimension {rank}")
    if Ellipsis not in items:
        return items
    at = items.index(Ellipsis)
    return items[:at] + [slice(None)] * (rank - consumed) + items[at + 1:]


def index_entries(indices: ir.Value) -> list[ir.Value | None] | None:
    """The entries of an MLIR index list (`torch.prim.ListConstruct`, as `index` and
    `index_put` take it): a tensor, or None for `none` (a dimension not indexed); None
    when the list is not a ListConstruct."""
    if not isinstance(indices, ir.OpResult) or \
            indices.owner.name != "torch.prim.ListConstruct":
        return None
    return [None if is_none(item) else item for item in indices.owner.operands]


def constant_bound(value: ir.Value, default: int) -> int | None:
    """A slice bound operand: its constant, `default` where it is `none` (open), None
    where it is a runtime value."""
    return default if is_none(value) else constant_int(value)


def is_none(value: ir.Value) -> bool:
    """A `torch.constant.none` (an optional operand left out: an open slice bound)."""
    return isinstance(value, ir.OpResult) and value.owner.name == "torch.constant.none"
