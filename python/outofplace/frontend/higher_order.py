"""Regions torch.export keeps as higher-order ops, inlined before import: a
`with torch.autocast(...)` block becomes `wrap_with_autocast(device, dtype, enabled,
cache, submod, *operands)`, a `torch.enable_grad()` / `torch.no_grad()` block inside the
forward `wrap_with_set_grad_enabled(enabled, submod, *operands)`, each calling a
submodule that torch-mlir's importer cannot see.

The submodule is traced again to ATen under the region's mode (autocast inserts the
casts eager makes; grad mode changes nothing without autograd) and inlined; its
in-place ops on its placeholders then write the operands, as they do in eager.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from ..errors import UnsupportedMutationError
from .fx_graph import replace_node, source_line
from .inline import inline, trace

_AUTOCAST = torch.ops.higher_order.wrap_with_autocast
_SET_GRAD = torch.ops.higher_order.wrap_with_set_grad_enabled
_FUNCTIONALIZED = torch.ops.higher_order.auto_functionalized_v2


def _region(node: torch.fx.Node) -> tuple[Any, torch.fx.Node, tuple] | None:
    """(the mode the region runs under, its submodule's get_attr node, its operands)."""
    if node.target is _AUTOCAST:
        device, dtype, enabled, cache, submodule, *operands = node.args
        return (lambda: torch.autocast(device, dtype, enabled, cache)), submodule, \
            tuple(operands)
    if node.target is _SET_GRAD:
        enabled, submodule, *operands = node.args
        return (lambda: torch.set_grad_enabled(enabled)), submodule, tuple(operands)
    return None


def _inline_functionalized(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """`auto_functionalized_v2(op, **kwargs)`: a custom op that writes its arguments, as
    AOTAutograd's functional graph holds it (the training path of torch.compile), inlined
    as PyTorch's own dense implementation records it: the written bases cloned, the op
    called on views of the clones (a kernel, transforms/kernel_writes.py), the clones the
    new values, which the graph then copies into the inputs."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2_dense

    def run(**kwargs: Any) -> Any:
        return auto_functionalized_v2_dense(node.args[0], **kwargs)

    traced, inputs = trace(graph, run, (), dict(node.kwargs))
    with graph.inserting_before(node):
        results = inline(graph, traced, inputs, node.meta.get("stack_trace"))
    replace_node(graph, node, results)


def inline_regions(gm: torch.fx.GraphModule) -> None:
    """Every autocast and grad-mode region of `gm`, inlined; other higher-order ops are
    refused by name."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or \
                not isinstance(node.target, torch._ops.HigherOrderOperator):
            continue
        if node.target is _FUNCTIONALIZED:
            _inline_functionalized(graph, node)
            continue
        region = _region(node)
        if region is None:
            raise UnsupportedMutationError(
                f"torch.higher_order.{node.target.name()}", "outofplace inlines only "
                "autocast and grad-mode regions of the higher-order ops torch.export "
                "makes", location=source_line(node))
        mode, submodule_node, operands = region
        submodule = getattr(gm, submodule_node.target)

        def run(*values: Any, submodule: Any = submodule, mode: Any = mode) -> Any:
            with mode():
                return torch.fx.Interpreter(submodule).run(*values)

        traced, inputs = trace(graph, run, operands, {}, preserve_meta=True)
        with graph.inserting_before(node):
            results = inline(graph, traced, inputs, node.meta.get("stack_trace"))
        replace_node(graph, node, results)
        if not submodule_node.users:
            graph.erase_node(submodule_node)
    for name, _ in list(gm.named_children()):
        if not any(n.op == "get_attr" and n.target == name for n in graph.nodes):
            delattr(gm, name)
