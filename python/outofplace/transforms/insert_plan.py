"""A write through a chain of views, seen as one strided box of the root.

`b[2:4, 1:3]`, `b[3]`, `b[..., 0]`, `b[None, 2:4]`, `b[1:9:2]`, `x.t()[3]` and any chain
of `slice`, `select`, `narrow`, `unsqueeze`, `squeeze`, unit-dim `view`s and the views
that only reorder dimensions (`t`, `transpose`, `permute`, `movedim`) select a box of the
root: per root dimension a first element, a count and a step. Such a write becomes one
insert of the root (`tensor.insert_slice`), however long the chain, instead of one
scatter per view; the update is permuted back to the root's dimension order. Chains that
mix elements of several dimensions (diagonal, reshapes that merge dimensions) have no
box and fall back to a write-back per view op. What each view op does to the box is its
entry of the table of view ops (views.VIEW_OPS), with its indices normalised as eager's
(indexing.py); this module holds the walk, the plan and its insert.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir.dialects import tensor

from . import views
from .. import torch_types
from ..indexing import inverse_permutation, slice_length
from ..ir_utils import from_builtin, int_list, to_builtin, unnamed


@dataclass(frozen=True)
class InsertPlan:
    """Where the elements of a view sit in its root."""

    offsets: tuple[int, ...]  # per root dim: index of the first element the view covers
    sizes: tuple[int, ...]  # per root dim: number of elements the view covers
    strides: tuple[int, ...]  # per root dim: step between covered elements
    dims: tuple[int | None, ...] = ()  # per view dim: its root dim (None: added by unsqueeze)

    @property
    def is_empty(self) -> bool:
        return 0 in self.sizes


def _sizes(value: ir.Value) -> tuple[int, ...] | None:
    sizes = torch_types.TensorType.of(value.type).sizes
    if sizes is None or any(d < 0 for d in sizes):
        return None
    return sizes


class _Walk:
    """The box of the root covered by the view reached so far."""

    def __init__(self, root_sizes: tuple[int, ...]) -> None:
        self.offsets = [0] * len(root_sizes)
        self.sizes = list(root_sizes)
        self.strides = [1] * len(root_sizes)
        self.dims: list[int | None] = list(range(len(root_sizes)))  # view dim -> root dim

    def slice(self, dim: int, start: int, end: int, step: int) -> bool:
        root_dim = self.dims[dim]
        length = slice_length(start, end, step)
        if root_dim is None:  # a unit dim added by unsqueeze
            return start == 0 and length == 1
        self.offsets[root_dim] += start * self.strides[root_dim]
        self.strides[root_dim] *= step
        self.sizes[root_dim] = length
        return True

    def select(self, dim: int, index: int) -> None:
        root_dim = self.dims.pop(dim)
        if root_dim is not None:
            self.offsets[root_dim] += index * self.strides[root_dim]
            self.sizes[root_dim] = 1

    def reorder(self, order: list[int]) -> None:
        """The view's dims are the current ones in `order` (a permutation)."""
        self.dims = [self.dims[d] for d in order]

    def regroup_unit_dims(self, before: tuple[int, ...], after: tuple[int, ...]) -> bool:
        """The view only adds or drops unit dims (`before` -> `after` sizes); a dropped
        unit dim of the root stays in the box with size 1."""
        if [d for d in before if d != 1] != [d for d in after if d != 1]:
            return False
        kept = [root for root, size in zip(self.dims, before) if size != 1]
        self.dims = [kept.pop(0) if size != 1 else None for size in after]
        return True

    def plan(self) -> InsertPlan:
        strides = [s if n > 1 else 1 for s, n in zip(self.strides, self.sizes)]
        return InsertPlan(tuple(self.offsets), tuple(self.sizes), tuple(strides),
                          tuple(self.dims))


def plan_insert(root: ir.Value, chain: tuple[ir.Operation, ...]) -> InsertPlan | None:
    """The box the view at the end of `chain` covers in `root`, or None if not a box."""
    root_sizes = _sizes(root)
    if root_sizes is None:
        return None
    walk = _Walk(root_sizes)
    for view in chain:  # each op's box step is its entry in views.VIEW_OPS
        before, after = _sizes(view.operands[0]), _sizes(view.result)
        if before is None or after is None or not views.box_step(walk, view, before,
                                                                 after):
            return None
    return walk.plan()


def _in_root_order(update: ir.Value, plan: InsertPlan, loc: ir.Location,
                   ip: ir.InsertionPoint) -> ir.Value:
    """The update with its dims permuted to the root's order (unit dims added by
    unsqueeze dropped first); unchanged when the view kept the order."""
    order = [d for d in plan.dims if d is not None]
    if order == sorted(order):
        return update
    t = torch_types.TensorType.of(update.type)

    def create(name: str, operand: ir.Value, sizes: list[int], dims: list[int]) -> ir.Value:
        result = torch_types.TensorType(tuple(sizes), t.dtype, True).to_ir()
        return ir.Operation.create(name, results=[result], operands=[
            operand, int_list(dims, loc, ip)], loc=loc, ip=ip).result

    kept = [plan.sizes[d] for d in order]
    if list(t.sizes) != kept:
        update = create("torch.aten.view", update, kept, kept)
    permutation = inverse_permutation(order)
    return create("torch.aten.permute", update, [kept[i] for i in permutation],
                  permutation)


def emit_insert(root: ir.Value, update: ir.Value, plan: InsertPlan, loc: ir.Location,
                ip: ir.InsertionPoint) -> ir.Value:
    """The root with the box `plan` replaced by `update` (the view's new value).

        %u = torch.aten.view %update, [box sizes]      (when the view dropped unit dims)
        %r = tensor.insert_slice %u into %root[offsets] [sizes] [strides]
    """
    if plan.is_empty:
        return root
    named, loc = loc, unnamed(loc)  # only the insert carries <root>_modified
    update = _in_root_order(update, plan, loc, ip)
    update_type = torch_types.TensorType.of(update.type)
    if update_type.sizes != plan.sizes:
        shape = int_list(list(plan.sizes), loc, ip)
        boxed = torch_types.TensorType(plan.sizes, update_type.dtype, True).to_ir()
        update = ir.Operation.create("torch.aten.view", results=[boxed],
                                     operands=[update, shape], loc=loc, ip=ip).result
    dest = to_builtin(root, loc, ip)
    inserted = tensor.insert_slice(to_builtin(update, loc, ip), dest, [], [], [],
                                   list(plan.offsets), list(plan.sizes),
                                   list(plan.strides), loc=named, ip=ip)
    return from_builtin(inserted, root.type, loc, ip)
