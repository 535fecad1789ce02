"""A write through a chain of views, seen as one strided box of the root.

`b[2:4, 1:3]`, `b[3]`, `b[..., 0]`, `b[None, 2:4]`, `b[1:9:2]`, `x.t()[3]` and any chain
of `slice`, `select`, `narrow`, `unsqueeze`, `squeeze`, unit-dim `view`s and the views
that only reorder dimensions (`t`, `transpose`, `permute`, `movedim`) select a box of the
root: per root dimension a first element, a count and a step. Such a write becomes one
insert of the root (`tensor.insert_slice`), however long the chain, instead of one
scatter per view; the update is permuted back to the root's dimension order. Chains that
mix elements of several dimensions (diagonal, reshapes that merge dimensions) have no
box and fall back to a write-back per view op (views.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir.dialects import tensor

from .. import torch_types
from ..errors import UserIndexError, source_line
from ..ir_utils import constant_int, int_list, to_builtin, unnamed
from .views import IDENTITY_VIEWS


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


class StaticIndexError(UserIndexError):
    """A constant index outside its dimension: eager raises IndexError too."""

    def __init__(self, op: ir.Operation, index: int, size: int) -> None:
        where = source_line(op.location)
        super().__init__(f"{where + ': ' if where else ''}index {index} is out of bounds "
                         f"for dimension of size {size}")


_INT64_MAX = 2**63 - 1


def _sizes(value: ir.Value) -> tuple[int, ...] | None:
    sizes = torch_types.TensorType.of(value.type).sizes
    if sizes is None or any(d < 0 for d in sizes):
        return None
    return sizes


def _optional_int(value: ir.Value, default: int) -> int | None:
    if isinstance(value, ir.OpResult) and value.owner.name == "torch.constant.none":
        return default
    return constant_int(value)


class _Walk:
    """The box of the root covered by the view reached so far."""

    def __init__(self, root_sizes: tuple[int, ...]) -> None:
        self.offsets = [0] * len(root_sizes)
        self.sizes = list(root_sizes)
        self.strides = [1] * len(root_sizes)
        self.dims: list[int | None] = list(range(len(root_sizes)))  # view dim -> root dim

    def slice(self, dim: int, start: int, end: int, step: int) -> bool:
        root_dim = self.dims[dim]
        length = max(0, -(-(end - start) // step))
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

    def plan(self) -> InsertPlan:
        strides = [s if n > 1 else 1 for s, n in zip(self.strides, self.sizes)]
        return InsertPlan(tuple(self.offsets), tuple(self.sizes), tuple(strides),
                          tuple(self.dims))


def _normalise(index: int, size: int, op: ir.Operation) -> int:
    if not -size <= index < size:
        raise StaticIndexError(op, index, size)
    return index % size


def _step(walk: _Walk, view: ir.Operation) -> bool:
    """Applies one view op to the walk; False when it leaves the box shape."""
    name = view.name
    before = _sizes(view.operands[0])
    after = _sizes(view.result)
    if before is None or after is None:
        return False
    rank = len(before)
    if name in IDENTITY_VIEWS:
        return before == after
    if name == "torch.aten.slice.Tensor":
        dim, start, end, step = (constant_int(view.operands[1]),
                                 _optional_int(view.operands[2], 0),
                                 _optional_int(view.operands[3], _INT64_MAX),
                                 constant_int(view.operands[4]))
        if None in (dim, start, end, step) or step <= 0:
            return False
        size = before[dim % rank]
        start = min(max(start + size if start < 0 else start, 0), size)
        end = min(max(end + size if end < 0 else end, 0), size)
        return walk.slice(dim % rank, start, max(end, start), step)
    if name == "torch.aten.narrow":
        dim, start, length = (constant_int(view.operands[1]), constant_int(view.operands[2]),
                              constant_int(view.operands[3]))
        if None in (dim, start, length):
            return False
        size = before[dim % rank]
        start = start + size if start < 0 else start
        return walk.slice(dim % rank, start, start + length, 1)
    if name == "torch.aten.select.int":
        dim, index = constant_int(view.operands[1]), constant_int(view.operands[2])
        if dim is None or index is None:
            return False
        walk.select(dim % rank, _normalise(index, before[dim % rank], view))
        return True
    order = _reordering(view, rank)
    if order is not None:
        walk.reorder(order)
        return True
    # Ops that only add or drop unit dims: match the sizes of the two sides.
    if name in ("torch.aten.unsqueeze", "torch.aten.squeeze", "torch.aten.squeeze.dim",
                "torch.aten.squeeze.dims", "torch.aten.view", "torch.aten._unsafe_view",
                "torch.aten.reshape"):
        return _regroup_unit_dims(walk, before, after)
    return False


def _reordering(view: ir.Operation, rank: int) -> list[int] | None:
    """For a view that only reorders dims: result dim i is operand dim order[i]."""
    name = view.name
    if name in ("torch.aten.t", "torch.aten.numpy_T"):
        return list(reversed(range(rank)))
    if name == "torch.aten.transpose.int":
        a, b = constant_int(view.operands[1]), constant_int(view.operands[2])
        if a is None or b is None:
            return None
        order = list(range(rank))
        order[a % rank], order[b % rank] = order[b % rank], order[a % rank]
        return order
    if name == "torch.aten.movedim.int":
        source, destination = constant_int(view.operands[1]), constant_int(view.operands[2])
        if source is None or destination is None:
            return None
        order = list(range(rank))
        order.insert(destination % rank, order.pop(source % rank))
        return order
    if name == "torch.aten.permute":
        items = view.operands[1].owner
        if items.name != "torch.prim.ListConstruct":
            return None
        order = [constant_int(v) for v in items.operands]
        if None in order or len(order) != rank:
            return None
        return [d % rank for d in order]
    return None


def _regroup_unit_dims(walk: _Walk, before: tuple[int, ...], after: tuple[int, ...]
                       ) -> bool:
    if [d for d in before if d != 1] != [d for d in after if d != 1]:
        return False
    kept = [root for root, size in zip(walk.dims, before) if size != 1]
    dims: list[int | None] = []
    for size in after:
        dims.append(kept.pop(0) if size != 1 else None)
    walk.dims = dims
    # A dropped unit dim of the root stays in the box with size 1.
    return True


def plan_insert(root: ir.Value, chain: tuple[ir.Operation, ...]) -> InsertPlan | None:
    """The box the view at the end of `chain` covers in `root`, or None if not a box."""
    root_sizes = _sizes(root)
    if root_sizes is None:
        return None
    walk = _Walk(root_sizes)
    for view in chain:
        if not _step(walk, view):
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
    permutation = sorted(range(len(order)), key=lambda i: order[i])
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
    return ir.Operation.create("torch_c.from_builtin_tensor", results=[root.type],
                               operands=[inserted], loc=loc, ip=ip).result
