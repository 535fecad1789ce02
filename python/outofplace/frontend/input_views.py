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
from typing import Any

import torch

from ..memory import view_layout

_A = torch.ops.aten


@functools.lru_cache(maxsize=256)
def indexing(layout: tuple) -> tuple | None:
    """The view (size, stride, offset) as basic indexing of its base (size, stride,
    offset): `select`s, strided `slice`s, a `permute` and `unsqueeze`s, and an `expand`
    for the dimensions of stride 0, as eager would have taken it (`x[:, pos]`), which
    the pass writes through whatever the base's layout; None when none gives exactly
    that view."""
    size, stride, offset, base_size, base_stride, base_offset = layout
    broadcast = [j for j in range(len(size)) if size[j] > 1 and not stride[j]]
    if broadcast:  # an expand of the view with those dimensions of size 1
        inner = indexing((tuple(1 if j in broadcast else n for j, n in enumerate(size)),
                          *layout[1:]))
        return None if inner is None else (*inner, (_A.expand.default, list(size)))
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


def take_view(graph: torch.fx.Graph, base: torch.fx.Node, layout: tuple) -> torch.fx.Node:
    """Nodes taking the view of `layout` (`view_layout`) from `base`, inserted at the
    graph's insertion point: its basic indexing, else the `as_strided` of the base (and
    an `expand` of its dimensions of stride 0, which a write into one copy of them goes
    through: expanded_positions.py)."""
    steps = indexing(layout)
    if steps is None:  # the elements at their offsets
        size, stride, offset = layout[:3]
        if not any(n > 1 and not s for n, s in zip(size, stride)):
            return graph.call_function(_A.as_strided.default, (base, *layout[:3]))
        inner = [1 if n > 1 and not s else n for n, s in zip(size, stride)]
        return graph.call_function(_A.expand.default, (graph.call_function(
            _A.as_strided.default, (base, inner, stride, offset)), list(size)))
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
