"""Selects, slices and runtime positions of an `expand`, before import.

Every index of a broadcast dimension picks the same elements, so `x.expand(3, -1,
-1)[pos]` is x itself, and eager writes through it into x (`v[0, 1] = 2`, `v[pos] += 1`
on `v = x.expand(3, -1, -1)`): no element is written twice. Such a select (`select.int`)
or 0-d integer position (`index.Tensor`, `index_put_`) is taken before the expand: the
view becomes the expand of the base with that dimension dropped (selected at 0 where the
base has it with size 1), which is the base's own shape when every broadcast dimension
was picked, a view views.py writes through. Selects and slices at the other dimensions
are taken before it too (`v[:, q, 1:]` slices first), so that a position after them
still meets the expand. A write into an expand that still broadcasts
stays refused there. A dropped position is still bounds-checked (bounds_checks.py runs
before); unchecked, it picks the same elements whatever its value, as any position out of
range is clamped (docs/index-categories.md).
"""

from __future__ import annotations

import torch
import torch.fx

from .. import op_registry
from .fx_graph import call, is_position_view

_aten = torch.ops.aten


def _expand_of(node: object) -> torch.fx.Node | None:
    """The `expand` a tensor is, through `alias`es."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function":
        if node.target is _aten.expand.default:
            return node
        if node.target is not _aten.alias.default:
            return None
        node = node.args[0]
    return None


def _broadcast(expand: torch.fx.Node) -> list[bool]:
    """Whether each dimension of the expand's result is one it broadcasts."""
    shape, base = expand.meta["val"].shape, expand.args[0].meta["val"].shape
    new = len(shape) - len(base)
    return [d < new or base[d - new] == 1 and shape[d] != 1 for d in range(len(shape))]


def _view(graph: torch.fx.Graph, target: object, like: torch.fx.Node,
          *args: object) -> torch.fx.Node:
    """`target(*args)`, placed before `like`, at its source line."""
    with graph.inserting_before(like):
        result = call(graph, target, *args)
    result.meta["stack_trace"] = like.meta.get("stack_trace")
    return result


def _without(graph: torch.fx.Graph, expand: torch.fx.Node, dims: list[int],
             like: torch.fx.Node) -> torch.fx.Node:
    """The expand with the broadcast dimensions `dims` dropped, placed before `like`."""
    base, shape = expand.args[0], list(expand.meta["val"].shape)
    new = len(shape) - base.meta["val"].dim()
    for d in sorted((d for d in dims if d >= new), reverse=True):
        base = _view(graph, _aten.select.int, like, base, d - new, 0)
    return _view(graph, _aten.expand.default, like, base,
                 [n for d, n in enumerate(shape) if d not in dims])


def _pushed(graph: torch.fx.Graph, node: torch.fx.Node, expand: torch.fx.Node,
            broadcast: list[bool]) -> torch.fx.Node | None:
    """A select or slice of the expand as the expand of that view of its base (at a
    broadcast dimension: of the base, or its select at 0), else None."""
    base = expand.args[0]
    new = len(broadcast) - base.meta["val"].dim()
    dim = node.args[1] % len(broadcast) if len(node.args) > 1 and \
        isinstance(node.args[1], int) else None
    if node.target is _aten.select.int and dim is not None:
        if broadcast[dim]:
            return _without(graph, expand, [dim], node)
        base = _view(graph, _aten.select.int, node, base, dim - new, node.args[2])
    elif node.target is _aten.slice.Tensor and dim is not None:
        if not broadcast[dim]:
            base = _view(graph, _aten.slice.Tensor, node, base, dim - new, *node.args[2:])
    else:
        return None
    return _view(graph, _aten.expand.default, node, base, list(node.meta["val"].shape))


def positions_before_expand(graph: torch.fx.Graph) -> None:
    """Takes each select, slice and 0-d position of an expand before it, in the graph's
    order (a view of the expand a select or slice made is one too), dropping each select
    and position at a broadcast dimension."""
    for node in list(graph.nodes):
        if node.op != "call_function" or not node.args:
            continue
        expand = _expand_of(node.args[0])
        if expand is None or not isinstance(expand.args[0], torch.fx.Node):
            continue
        broadcast = _broadcast(expand)
        if not any(broadcast):
            continue
        pushed = _pushed(graph, node, expand, broadcast)
        if pushed is not None:
            node.replace_all_uses_with(pushed)
            graph.erase_node(node)
            continue
        if node.target not in (_aten.index.Tensor, _aten.index_put_.default) or \
                node.target is _aten.index.Tensor and not is_position_view(node):
            continue
        items = list(node.args[1])
        dropped = [d for d, item in enumerate(items) if d < len(broadcast) and
                   broadcast[d] and isinstance(item, torch.fx.Node) and
                   item.meta["val"].dim() == 0 and
                   item.meta["val"].dtype in op_registry.POSITION_DTYPES]
        if not dropped:
            continue
        target = _without(graph, expand, dropped, node)
        kept = [item for d, item in enumerate(items) if d not in dropped]
        with graph.inserting_before(node):
            if node.target is _aten.index.Tensor:
                replacement = call(graph, _aten.index.Tensor, target, kept) \
                    if any(item is not None for item in kept) else target
                replacement.meta["stack_trace"] = node.meta.get("stack_trace")
                node.replace_all_uses_with(replacement)
            else:
                values, accumulate = node.args[2], len(node.args) > 3 and node.args[3]
                if any(item is not None for item in kept):
                    replacement = call(graph, _aten.index_put_.default, target, kept, values,
                                       accumulate)
                else:  # index_put_'s values broadcast to the indexed shape, as copy_'s
                    replacement = call(graph, _aten.add_.Tensor if accumulate else
                                       _aten.copy_.default, target, values)
                replacement.meta["stack_trace"] = node.meta.get("stack_trace")
                node.replace_all_uses_with(node.args[0])
        graph.erase_node(node)
