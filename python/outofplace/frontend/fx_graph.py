"""Facts about the exported FX graph that its fake tensors know: each node's effects
(from op_registry), the root a view chain reaches, the storage and element offsets of a
value, whether two tensors overlap, the user's source line; and `call`, which adds a
node with its fake value.

Shared by the rewrites before import (fx_rewrites, strided_views) and the frontend.
"""

from __future__ import annotations

import operator
import re
from typing import Any

import torch
import torch.fx

from .. import op_registry
# (memory facts of a value, shared with the call checks; named here with the rest)
from ..memory import element_offsets, overlaps, storage_of  # noqa: F401


def fake_mode_of(graph: torch.fx.Graph) -> torch._subclasses.FakeTensorMode:
    """The fake mode of the graph's values; a new one where no value is a tensor (a
    program of no tensor, such as `with torch.no_grad(): pass`: nothing to trace)."""
    found = next((n.meta["val"].fake_mode for n in graph.nodes
                  if isinstance(n.meta.get("val"), torch._subclasses.FakeTensor)), None)
    return found if found is not None else torch._subclasses.FakeTensorMode()


def call(graph: torch.fx.Graph, target: torch._ops.OpOverload, *args: Any,
         **kwargs: Any) -> torch.fx.Node:
    """A new node with its fake value, which the importer reads its type from."""
    node = graph.call_function(target, args, kwargs)
    fake_mode = next((v.meta["val"].fake_mode for v in node.all_input_nodes
                      if isinstance(v.meta.get("val"), torch._subclasses.FakeTensor)),
                     None) or torch._guards.detect_fake_mode() or fake_mode_of(graph)
    fake_args = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
    with fake_mode, torch.no_grad():  # a value, not a step of autograd
        node.meta["val"] = target(*fake_args[0], **fake_args[1])
    return node


def op_effects(node: torch.fx.Node) -> op_registry.OpEffects | None:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    return op_registry.effects(op_registry.mlir_name(node.target))


def write_effects(node: torch.fx.Node) -> op_registry.OpEffects | None:
    """`op_effects`, and for a custom op (a kernel: op_registry.kernel_effects) its own:
    what writes a root, for the FX rewrites that follow writes (view_roots, writes_root),
    not for those that rewrite ATen ops."""
    effects = op_effects(node)
    if effects is None and node.op == "call_function" and \
            isinstance(node.target, torch._ops.OpOverload):
        effects = op_registry.kernel_effects(op_registry.mlir_name(node.target))
    return effects


def operand_at(node: torch.fx.Node, position: int) -> Any:
    """The value of the schema's argument `position`, passed positionally or by name
    (`out=` arguments are keyword-only), or None."""
    if position < len(node.args):
        return node.args[position]
    return node.kwargs.get(node.target._schema.arguments[position].name)


def arguments(node: torch.fx.Node) -> dict[str, Any]:
    """A node's arguments by their schema's names, the defaults filled in (torch.fx's
    `normalize_function`; the schema's `self` is named `input` there)."""
    from torch.fx.operator_schemas import normalize_function

    bound = normalize_function(node.target, tuple(node.args), dict(node.kwargs),
                               normalize_to_only_use_kwargs=True)
    if bound is None:
        raise ValueError(f"{node.target} does not bind {node.args}, {node.kwargs}")
    return bound.kwargs


def replace_node(graph: torch.fx.Graph, node: torch.fx.Node, results: Any) -> None:
    """Erases `node`, its uses taking `results`: one node, or a sequence that replaces
    the `operator.getitem` users of a node with several results (a result that is a
    sequence itself, a region's `native_layer_norm` say, replaces its own getitems)."""
    if isinstance(results, torch.fx.Node):
        node.replace_all_uses_with(results)
    else:
        for user in list(node.users):
            assert user.target is operator.getitem
            replace_node(graph, user, results[user.args[1]])
    graph.erase_node(node)


def is_list_view(node: torch.fx.Node) -> bool:
    """`split`, `chunk`, `unbind`, ...: a list of views of self (`Tensor(a -> *)`)."""
    effects = op_effects(node)
    if effects is None:
        return False
    arguments = node.target._schema.arguments
    return bool(arguments) and arguments[0].alias_info is not None and \
        "*" in arguments[0].alias_info.after_set


_FRAME = re.compile(r'File "([^"]+)", line ([0-9]+)')


def source_line(node: torch.fx.Node) -> str:
    """`file:line` of the innermost frame of the node's FX stack trace (as torch-mlir's
    importer reads it)."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else ""


def is_position_view(node: torch.fx.Node) -> bool:
    """`x[:, pos]` as runtime_positions.py traces it: `index.Tensor` at only None and 0-d
    integer positions, a view of x in eager (op_registry.is_position_view, in MLIR).
    Its fake value is a copy: only the graph says it is a view."""
    if node.target is not torch.ops.aten.index.Tensor:
        return False
    positions = [item for item in node.args[1] if item is not None]
    return bool(positions) and all(
        isinstance(item, torch.fx.Node) and isinstance(item.meta.get("val"), torch.Tensor)
        and item.meta["val"].dim() == 0
        and item.meta["val"].dtype in op_registry.POSITION_DTYPES for item in positions)


def view_roots(graph: torch.fx.Graph) -> tuple[dict[torch.fx.Node, torch.fx.Node],
                                               dict[torch.fx.Node, torch.fx.Node]]:
    """Each node's root through views and list views, and the roots written in place,
    each with the first node that writes it."""
    roots: dict[torch.fx.Node, torch.fx.Node] = {}
    written: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in graph.nodes:
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) \
                and is_list_view(node.args[0]):
            roots[node] = roots.get(node.args[0], node.args[0])
            continue
        if is_position_view(node):
            roots[node] = roots.get(node.args[0], node.args[0])
            continue
        effects = write_effects(node)
        if effects is None:
            continue
        if effects.result_views is not None and effects.result_views < len(node.args):
            base = node.args[effects.result_views]
            if isinstance(base, torch.fx.Node):
                roots[node] = roots.get(base, base)
        if is_list_view(node) and isinstance(node.args[0], torch.fx.Node):
            roots[node] = roots.get(node.args[0], node.args[0])
        for position in effects.written:
            for target in written_operands(node, position):
                written.setdefault(roots.get(target, target), node)
    return roots, written


def written_operands(node: torch.fx.Node, position: int) -> list[torch.fx.Node]:
    """The tensors operand `position` of node names: one, or each of a list (`Tensor(a!)[]`
    of the `_foreach_*_` and `_fused_*_` ops)."""
    value = operand_at(node, position)
    values = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in values if isinstance(v, torch.fx.Node)]


def view_base(node: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor a pure view op views (its `Tensor(a)` operand), or a position view
    (`is_position_view`) its indexed tensor."""
    if is_position_view(node):
        return node.args[0]
    effects = op_effects(node)
    if effects is None or not effects.is_view or effects.result_views >= len(node.args):
        return None
    base = node.args[effects.result_views]
    return base if isinstance(base, torch.fx.Node) else None


def writes_root(node: torch.fx.Node, root: torch.fx.Node,
                roots: dict[torch.fx.Node, torch.fx.Node]) -> bool:
    effects = write_effects(node)
    if effects is None or effects.is_autograd_only:
        return False
    return any(roots.get(target, target) is root for position in effects.written
               for target in written_operands(node, position))


def viewed_before(base: torch.fx.Node, node: torch.fx.Node,
                  roots: dict[torch.fx.Node, torch.fx.Node]) -> bool:
    """Whether a view of `base` (not the result of an in-place op on it) is taken
    before `node`."""
    for earlier in base.graph.nodes:
        if earlier is node:
            return False
        if roots.get(earlier) is base and (view_base(earlier) is not None or
                                           earlier.target is operator.getitem or
                                           is_list_view(earlier)):
            return True
    return False


def tensor_identity(node: torch.fx.Node) -> torch.fx.Node:
    """The node that made the tensor object `node` is: an in-place op returns its self,
    an out= op its `out`."""
    while True:
        effects = op_effects(node)
        if effects is None or not effects.written or effects.result_views is None or \
                not isinstance(operand_at(node, effects.result_views), torch.fx.Node):
            return node
        node = operand_at(node, effects.result_views)
