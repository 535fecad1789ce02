"""In-place changes of shape or strides (`unsqueeze_`, `squeeze_`, `t_`, `transpose_`,
`swapdims_`, `as_strided_`, `resize_`).

Of a tensor the program made (a local, or a view it took), no caller sees the change:
the tensor after it is a new view of the same memory, which tracing already names as a
new node (later uses read the in-place op's result):

    z.unsqueeze_(0)            ->  z' = z.unsqueeze(0)
    y.resize_(25, 5)           ->  y' = y.view(-1)[:125].view(25, 5)    (y contiguous)
    e = empty(0); e.resize_(n) ->  e' = zeros(n)                         (new memory)

Of an argument, parameter or buffer the caller's tensor would change shape: refused, by
the pass for what torch.export traces and by `InputShapeChanges` before torch.export
for what crashes it (`x.unsqueeze_(0)`, any of them on an argument that is a view).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode

from .. import op_registry
from ..errors import UnsupportedMutationError
from .fx_graph import (call, op_effects, source_line, tensor_identity, view_roots,
                       viewed_before)

REASON = "it changes the shape or strides of a tensor in place"

def _overload_name(name: str, args: tuple, kwargs: dict) -> str:
    """The torch-mlir name of the overload of `aten::<name>` these arguments select."""
    packet = getattr(torch.ops.aten, name)
    for overload in packet.overloads():
        try:
            torch._C._check_schema_allow_fake_script_object(
                getattr(packet, overload)._schema, *args, **kwargs)
        except (RuntimeError, TypeError):
            continue
        return op_registry.mlir_name(getattr(packet, overload))
    return f"torch.aten.{name}"


class InputShapeChanges(TorchFunctionMode):
    """While tracing: refuses an in-place change of shape or strides of an argument,
    parameter or buffer (`inputs`, the tensors the module's pre-hook saw)."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: set[int] = set()

    def watch(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        tensors = [t for t in pytree.tree_leaves((args, kwargs))
                   if isinstance(t, torch.Tensor)]
        self.inputs = {id(t) for t in [*tensors, *module.parameters(), *module.buffers()]}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", None)
        if isinstance(name, str) and op_registry.changes_shape_in_place(name) and args and \
                id(args[0]) in self.inputs:
            from .runtime_positions import user_line
            raise UnsupportedMutationError(_overload_name(name, args, kwargs), REASON,
                                           location=user_line())
        return func(*args, **kwargs)


def _refuse(node: torch.fx.Node, why: str) -> None:
    raise UnsupportedMutationError(op_registry.mlir_name(node.target), f"{REASON}: {why}",
                                   location=source_line(node))


def _resize(graph: torch.fx.Graph, node: torch.fx.Node,
            roots: dict[torch.fx.Node, torch.fx.Node]) -> torch.fx.Node:
    """`y.resize_(size)` of a local y, as eager keeps its memory: the first elements of y
    in memory order, then (growing) new ones."""
    self = node.args[0]
    memory_format = node.args[2] if len(node.args) > 2 else node.kwargs.get("memory_format")
    old = self.meta["val"]
    new = node.meta["val"]
    if memory_format not in (None, torch.contiguous_format):
        _refuse(node, f"resizing to {memory_format} is not compiled")
    if not old.is_contiguous():
        _refuse(node, "resizing a tensor that is not contiguous re-reads its memory in "
                "another order; resize a contiguous copy (`.contiguous()`)")
    size, count = list(new.shape), math.prod(new.shape)
    if count <= old.numel():
        flat = call(graph, torch.ops.aten.view.default, self, [-1])
        if count < old.numel():
            flat = call(graph, torch.ops.aten.slice.Tensor, flat, 0, 0, count)
        return call(graph, torch.ops.aten.view.default, flat, size)
    base = tensor_identity(self)
    if base in roots or viewed_before(base, node, roots):
        _refuse(node, "growing a tensor that is a view or has views gives it new memory "
                "in eager, which its views do not see")
    grown = call(graph, torch.ops.aten.zeros.default, [count - old.numel()],
                 dtype=old.dtype)
    if old.numel():
        grown = call(graph, torch.ops.aten.cat.default,
                     [call(graph, torch.ops.aten.view.default, self, [-1]), grown])
    return call(graph, torch.ops.aten.view.default, grown, size)


def local_shape_changes(graph: torch.fx.Graph) -> None:
    """In-place shape changes of tensors the program made, as the views (or, growing,
    the new tensors) they are; those of arguments are left for the pass to refuse."""
    roots, _ = view_roots(graph)
    for node in list(graph.nodes):
        effects = op_effects(node)
        if effects is None or not effects.rebinds_view or effects.is_autograd_only or \
                not isinstance(node.args[0], torch.fx.Node):
            continue
        origin = tensor_identity(node.args[0])
        if origin.op != "call_function":
            continue  # an argument, parameter or buffer: the caller sees its shape
        with graph.inserting_before(node):
            if node.target in (torch.ops.aten.resize_.default,
                               torch.ops.aten.resize_as_.default):
                replacement = _resize(graph, node, roots)
            elif effects.twin is not None and _is_view_of_self(effects.twin):
                replacement = graph.call_function(effects.twin, node.args, node.kwargs)
            else:
                continue
        replacement.meta = dict(node.meta)  # later views know its storage by this value
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)


def _is_view_of_self(overload: torch._ops.OpOverload) -> bool:
    effects = op_registry.effects(op_registry.mlir_name(overload))
    return effects is not None and effects.is_view and effects.result_views == 0
