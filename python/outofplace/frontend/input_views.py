"""Tensors given to a program that are views of another it is given: a module buffer
registered as a view of another (the halves of a KV cache), or, under torch.compile, a
view a graph break hands the next graph beside its base (`stack0 = x[:, pos]`).

Separate arguments of a compiled program cannot show a write through one in the other,
as eager does: such a view is taken again inside the program from its base
(`take_view`), as the basic indexing eager would have used (`indexing`), else as the
`as_strided` of the base it is.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

_A = torch.ops.aten


def _symbolic(tensor: torch.Tensor) -> bool:
    return any(isinstance(d, torch.SymInt) for d in (*tensor.shape, *tensor.stride()))


def view_layout(view: Any, base: Any) -> tuple | None:
    """Where `view` sits in `base`'s memory, (size, stride, storage offset, base's size,
    stride and storage offset), when base is of view's dtype and each element of view is
    an element of base; else None."""
    if not (isinstance(view, torch.Tensor) and isinstance(base, torch.Tensor)) or \
            _symbolic(view) or _symbolic(base) or not view.numel() or \
            view.dtype != base.dtype or \
            view.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():
        return None
    layout = (tuple(view.shape), view.stride(), view.storage_offset(),
              tuple(base.shape), base.stride(), base.storage_offset())
    return layout if within(layout) else None


@functools.lru_cache(maxsize=256)
def within(layout: tuple) -> bool:
    """Whether every element of the first strided layout (size, stride, offset) is an
    element of the second."""
    def extent(size: tuple, stride: tuple, offset: int) -> tuple[int, int]:
        return offset, offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1

    def offsets(size: tuple, stride: tuple, offset: int) -> torch.Tensor:
        addresses = torch.tensor(offset)
        for dim, (n, s) in enumerate(zip(size, stride)):
            shape = [1] * len(size)
            shape[dim] = n
            addresses = addresses + torch.arange(n).view(shape) * s
        return addresses.reshape(-1)

    view, base = layout[:3], layout[3:]
    (start, end), (first, last) = extent(*base), extent(*view)
    if min(view[1], default=0) < 0 or min(base[1], default=0) < 0 or \
            not start <= first <= last <= end:
        return False
    if math.prod(base[0]) == end - start:  # base covers its extent: contiguous
        return True
    if math.prod(view[0]) + math.prod(base[0]) > 1 << 22:
        return False  # too large to test element by element
    return bool(torch.isin(offsets(*view), offsets(*base)).all())


_A = torch.ops.aten


@functools.lru_cache(maxsize=256)
def indexing(layout: tuple) -> tuple | None:
    """The view (size, stride, offset) as basic indexing of its base (size, stride,
    offset): `select`s, strided `slice`s, a `permute` and `unsqueeze`s, as eager would
    have taken it (`x[:, pos]`), which the pass writes through whatever the base's
    layout; None when none gives exactly that view."""
    size, stride, offset, base_size, base_stride, base_offset = layout
    dims = sorted((d for d in range(len(base_size)) if base_size[d] > 1 and base_stride[d]),
                  key=lambda d: -base_stride[d])
    start, rest = [0] * len(base_size), offset - base_offset
    for d in dims:  # the view's first element, as an index of base
        start[d] = min(rest // base_stride[d], base_size[d] - 1) if rest >= 0 else 0
        rest -= start[d] * base_stride[d]
    if rest:
        return None
    mapped: dict[int, tuple[int, int]] = {}  # base dim -> (view dim, step)
    for j in sorted(range(len(size)), key=lambda j: -stride[j]):
        if size[j] == 1:
            continue
        for d in dims:
            if d in mapped or stride[j] % base_stride[d]:
                continue
            step = stride[j] // base_stride[d]
            if start[d] + (size[j] - 1) * step < base_size[d]:
                mapped[d] = (j, step)
                break
        else:
            return None
    steps: list[tuple] = []
    for d in reversed(range(len(base_size))):  # selects from the last: dims keep places
        if d in mapped:
            j, step = mapped[d]
            steps.append((_A.slice.Tensor, d, start[d], start[d] + (size[j] - 1) * step + 1,
                          step))
        else:
            steps.append((_A.select.int, d, start[d]))
    kept = [mapped[d][0] for d in sorted(mapped)]  # view dims in base order
    order = sorted(range(len(kept)), key=lambda k: kept[k])
    if order != list(range(len(kept))):
        steps.append((_A.permute.default, order))
    for j in range(len(size)):
        if size[j] == 1:
            steps.append((_A.unsqueeze.default, j))
    # checked on a tensor of that layout: exactly the view, or nothing
    storage = torch.empty(base_offset + sum((n - 1) * s for n, s in
                                            zip(base_size, base_stride)) + 1, device="meta")
    value = storage.as_strided(base_size, base_stride, base_offset)
    for op, *arguments in steps:
        value = op(value, *arguments)
    strides = [s for n, s in zip(size, stride) if n != 1]  # a unit dim's stride is no step
    if tuple(value.shape) != tuple(size) or value.storage_offset() != offset or \
            [s for n, s in zip(value.shape, value.stride()) if n != 1] != strides:
        return None
    return tuple(steps)


def views_of_inputs(inputs: list[Any]) -> dict[int, int]:
    """The inputs that are views of another input's memory, each with that input (its
    base): {view: base}. A graph break hands the next graph a view of a tensor beside
    the tensor itself (`stack0 = x[:, pos]` computed eagerly, then `x[:, 0] = stack0`).
    A view's base is the largest input of its storage whose elements include the view's
    (so itself no view of another): inputs side by side in one buffer are each the base
    of their own views."""
    groups: dict[int, list[int]] = {}
    for i, tensor in enumerate(inputs):
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            groups.setdefault(tensor.untyped_storage()._cdata, []).append(i)
    views = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        largest_first = sorted(members, key=lambda i: (-inputs[i].numel(),
                                                     not inputs[i].is_contiguous(), i))
        roots: list[int] = []  # the bases: larger inputs come first
        for i in largest_first:
            base = next((b for b in roots if view_layout(inputs[i], inputs[b]) is not None),
                        None)
            if base is None:
                roots.append(i)
            else:
                views[i] = base
    return views


def take_view(graph: torch.fx.Graph, base: torch.fx.Node, layout: tuple) -> torch.fx.Node:
    """Nodes taking the view of `layout` (`view_layout`) from `base`, inserted at the
    graph's insertion point: its basic indexing, else the `as_strided` of the base."""
    steps = indexing(layout)
    if steps is None:  # the elements at their offsets
        return graph.call_function(_A.as_strided.default, (base, *layout[:3]))
    view = base
    for op, *arguments in steps:
        view = graph.call_function(op, (view, *arguments))
    return view


class StateView:
    """A parameter or buffer the program takes from another (graph_preparation.py's
    `_take_state_views`): `check` raises ValueError at a call when it no longer views that
    one's elements where it did when compiled (reassigned since), which the compiled
    program, writing the base, would not see."""

    def __init__(self, name: str, base_name: str, layout: tuple,
                 view: Any, base: Any) -> None:
        self.name, self.base_name, self.layout = name, base_name, layout
        self.view, self.base = view, base  # () -> the tensor the module holds now

    def check(self) -> None:
        if view_layout(self.view(), self.base()) != self.layout:
            raise ValueError(
                f"`{self.name}` was compiled as a view of `{self.base_name}`, which the "
                "program writes and reads it through; it is not that view now: compile "
                "again")
