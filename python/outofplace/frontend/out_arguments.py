"""`out=` arguments: `torch.add(a, b, out=z)`, `torch.cat(xs, out=buf)`,
`torch.mv(w, v, out=u)` (spectral norm's power iteration) are the functional op and a
write of its whole result into `out`:

    z.copy_(add(a, b))                      out has the result's shape
    z' = add(a, b)                          out is resized, as eager resizes it: a new
                                            tensor for the later uses of z

Eager resizes an `out` of another shape (warning unless it had no elements). That is
compiled for a tensor the program made itself, of which no view is taken; resizing an
argument or buffer (the caller's tensor would change shape) or a view is refused.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch
import torch.fx

from .. import op_registry
from ..errors import UnsupportedMutationError
from .fx_graph import (call, replace_node, source_line, tensor_identity, view_roots,
                       viewed_before)


def _out_positions(schema: torch._C.FunctionSchema) -> list[int]:
    return [i for i, a in enumerate(schema.arguments) if a.is_out]


@functools.cache
def functional_form(overload: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The overload of the same op without the `out=` arguments (add.out -> add.Tensor,
    max.dim_max -> max.dim): the same other arguments, nothing written."""
    schema = overload._schema
    outs = set(_out_positions(schema))
    inputs = [a for i, a in enumerate(schema.arguments) if i not in outs]
    packet = overload.overloadpacket
    for name in packet.overloads():
        candidate = getattr(packet, name)._schema
        if len(candidate.arguments) != len(inputs) or \
                len(candidate.returns) != len(outs):
            continue
        if any(a.alias_info is not None and a.alias_info.is_write
               for a in candidate.arguments):
            continue
        if all(a.name == b.name and str(a.type) == str(b.type)
               for a, b in zip(inputs, candidate.arguments)):
            return getattr(packet, name)
    return None


def _is_local_root(node: torch.fx.Node, out: torch.fx.Node,
                   roots: dict[torch.fx.Node, torch.fx.Node]) -> bool:
    """A tensor the program made, not an argument, constant or view, of which no view
    is taken before `node`."""
    base = tensor_identity(out)
    return base.op == "call_function" and base not in roots and \
        not viewed_before(base, node, roots)


def _refuse_resize(node: torch.fx.Node, out: torch.fx.Node, shape: torch.Size,
                   roots: dict[torch.fx.Node, torch.fx.Node]) -> None:
    old = tuple(out.meta["val"].shape)
    if out.op in ("placeholder", "get_attr") or roots.get(out, out).op in (
            "placeholder", "get_attr") and out not in roots:
        what = "an argument, parameter or buffer of the program: the caller's tensor " \
            "would change shape"
    elif out in roots:
        what = "a view: eager would give it new storage, apart from its base"
    else:
        what = "a tensor of which a view is taken: eager would give it new storage, " \
            "apart from its views"
    raise UnsupportedMutationError(
        op_registry.mlir_name(node.target),
        f"its `out=` tensor of shape {list(old)} is resized to {list(shape)}, and it is "
        f"{what}; pass an `out` of the result's shape", location=source_line(node))


def _write(graph: torch.fx.Graph, node: torch.fx.Node, out: torch.fx.Node,
           result: torch.fx.Node, resized: torch.Tensor,
           roots: dict[torch.fx.Node, torch.fx.Node]) -> torch.fx.Node:
    """`out` holding `result`: a copy_ into it, or a new tensor when eager resizes it
    (`resized`: the fake value of `out` after the op)."""
    out_val, result_val = out.meta["val"], result.meta["val"]
    if out_val.shape == result_val.shape:
        return call(graph, torch.ops.aten.copy_.default, out, result)
    if not _is_local_root(node, out, roots):
        _refuse_resize(node, out, result_val.shape, roots)
    if torch.Tag.pointwise in node.target.tags and resized.stride() != result_val.stride():
        # Eager's pointwise kernels lay a resized `out` out like their inputs; the fake
        # tensors torch.export traces with make it contiguous (PyTorch 2.13), so the
        # program's later views, reshapes and flattens were traced for another layout.
        raise UnsupportedMutationError(
            op_registry.mlir_name(node.target),
            f"its `out=` tensor is resized to {list(result_val.shape)}: eager lays it out "
            f"like the inputs (strides {list(result_val.stride())}), torch.export's trace "
            f"as contiguous (strides {list(resized.stride())}), so what the program does "
            "with it later (a view or a copy?) was traced for another layout than eager's; "
            "pass an `out` of the result's shape, or contiguous inputs",
            location=source_line(node))
    if out_val.dtype != result_val.dtype:
        result = call(graph, torch.ops.aten._to_copy.default, result, dtype=out_val.dtype)
    # The traced program's later views know the resized tensor's storage by this value.
    result.meta["val"] = resized
    order = {n: i for i, n in enumerate(graph.nodes)}
    for user in list(out.users):
        if user in order and order[user] > order[node]:
            user.replace_input_with(out, result)
    return result


def _out_targets(node: torch.fx.Node) -> list[Any]:
    """What `node` (an op with `out=` arguments) writes, in its schema's order."""
    schema = node.target._schema
    return [node.kwargs[schema.arguments[i].name] if schema.arguments[i].name in node.kwargs
            else node.args[i] for i in _out_positions(schema)]


def _undetach_fresh_outs(graph: torch.fx.Graph) -> None:
    """An `out=` argument that is `detach` of a tensor the program made and nothing else
    reads becomes that tensor: torch.export's trace of `o = torch.empty(0)` in a
    program whose gradients may be taken reads `o` through a `detach` of its own, which
    the resize of `o` would otherwise take for a view's (eager's `o` is a fresh tensor)."""
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        for out in _out_targets(node):
            if isinstance(out, torch.fx.Node) and out.op == "call_function" and \
                    out.target is torch.ops.aten.detach.default and \
                    isinstance(out.args[0], torch.fx.Node) and \
                    out.args[0].op == "call_function" and len(out.args[0].users) == 1:
                base = out.args[0]
                out.replace_all_uses_with(base)
                graph.erase_node(out)


def functional_out_writes(graph: torch.fx.Graph) -> None:
    """Each op with `out=` arguments as its functional form and a whole-tensor write of
    each result into its `out`."""
    _undetach_fresh_outs(graph)
    roots, _ = view_roots(graph)
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        schema = node.target._schema
        outs = _out_positions(schema)
        if not outs:
            continue
        functional = functional_form(node.target)
        if functional is None:
            raise UnsupportedMutationError(
                op_registry.mlir_name(node.target), "it writes `out=` and PyTorch has no "
                "form of it without `out=` to compute the result with",
                location=source_line(node))
        names = [schema.arguments[i].name for i in outs]
        kwargs = {k: v for k, v in node.kwargs.items() if k not in names}
        targets = _out_targets(node)
        first = node.prev
        with graph.inserting_before(node):
            result = call(graph, functional, *node.args, **kwargs)
            if len(outs) == 1:
                written = [_write(graph, node, targets[0], result, node.meta["val"],
                                  roots)]
            else:
                written = [_write(graph, node, out, call(graph, operator.getitem, result, k),
                                  node.meta["val"][k], roots)
                           for k, out in enumerate(targets)]
        new = first.next
        while new is not node:
            new.meta["stack_trace"] = node.meta.get("stack_trace")
            new = new.next
        replace_node(graph, node, written[0] if len(outs) == 1 else written)
