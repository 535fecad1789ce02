"""Ops kept whole: an ATen op that eager runs as one CPU kernel, traced as a region of
the program (control_flow.py's `outofplace::region`, kind "composite") whose graph is
outofplace's own decomposition of it (decompositions.py's batch norm, max_pool_gradient.py's
gradient, upstream/grouped_mm.py):

    out, mean, invstd, rm2, rv2 = aten._native_batch_norm_legit_functional(x, w, b, rm, rv,
                                                                          True, 0.1, 1e-5)
  ->
    out, mean, invstd, rm2, rv2 = outofplace.region(id, [x, w, b, rm, rv])

transforms/lower_regions.py lowers the region to a `stablehlo.composite` named after the
op (`aten._native_batch_norm_legit_functional`), its decomposition the region's graph
lowered as a private function, its `composite_attributes` how eager's kernel computes
it: the op to call (`outofplace.kernel`: batch norm's `out=` variant, which writes XLA's
buffers), the schema positions of its tensor operands (`outofplace.tensors`), of the
returns that are results (`outofplace.returns`) and of the arguments that hold the
other results once it ran (`outofplace.written`: the running statistics it updates in
place, its `out=` arguments), and its other arguments by their schema names. A consumer
that knows no better runs the decomposition (StableHLO's meaning of a composite: the
interpreter, IREE, exports); the XLA engine calls eager's kernel instead
(transforms/composites_as_kernel_calls.py).
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx

from . import control_flow
from .fx_graph import view_roots, write_effects, written_operands

# The composite's attributes that say how to call the kernel (the rest are its
# arguments): the op, the schema positions of the operands, of the returns that are
# results, and of the arguments holding the results after those
KERNEL, TENSORS, RETURNS, WRITTEN = ("outofplace.kernel", "outofplace.tensors",
                                     "outofplace.returns", "outofplace.written")
# An attribute set when eager's kernel computes bfloat16 as the decomposition does
# (grouped_mm: in float32, rounded once), so that the XLA engine may call it in bfloat16
# too (batch norm's kernel would compute in another precision than its decomposition)
BFLOAT16 = "outofplace.bfloat16"
# The decomposition, written on the region's graph, given a placeholder per tensor
# argument (None for one not given); returns the region's results.
Body = Callable[[torch.fx.Graph, list[torch.fx.Node | None]], list[torch.fx.Node]]


def name_of(op: torch._ops.OpOverload) -> str:
    """The composite's name: `aten.native_batch_norm_backward`, `aten.add.Tensor`."""
    name = f"{op.namespace}.{op._schema.name.split('::')[-1]}"
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def composite(graph: torch.fx.Graph, op: torch._ops.OpOverload,
              kernel: torch._ops.OpOverload, tensors: dict[int, torch.fx.Node | None],
              attributes: dict[str, Any], body: Body, location: str,
              stack_trace: str | None = None, returns: list[int] = (),
              written: list[int] = ()) -> list[torch.fx.Node]:
    """`op` kept whole, a region of `graph` (before its insertion point) whose graph is
    `body`, and called as `kernel` (`op` or a variant of it, `out=` say) where eager's
    kernel is: `tensors` the kernel's tensor arguments by schema position (None: not
    given), `attributes` its other arguments by schema name; the region's results are
    the kernel's returns at positions `returns`, then the arguments at positions
    `written` after the call (an operand it writes in place, an `out=` argument).
    Returns the nodes of the results."""
    given = {p: t for p, t in sorted(tensors.items()) if t is not None}
    region_graph = torch.fx.Graph()
    placeholders = {}
    for position, tensor in given.items():
        name = kernel._schema.arguments[position].name
        # (a schema's `self` is `input`: a placeholder is an argument of the region's
        # graph module's `forward(self, ...)`)
        placeholder = region_graph.placeholder("input" if name == "self" else name)
        placeholder.meta["val"] = tensor.meta["val"]
        placeholders[position] = placeholder
    results = body(region_graph, [placeholders.get(p) for p in sorted(tensors)])
    region_graph.output(tuple(results))
    region = control_flow.Region(
        "composite", [torch.fx.GraphModule(torch.nn.Module(), region_graph)], 0, [],
        [r.meta["val"] for r in results], location, name=name_of(op),
        attributes={**attributes, KERNEL: _qualified(kernel), TENSORS: list(given),
                    RETURNS: list(returns), WRITTEN: list(written)})
    rid = control_flow.register(region)
    made = graph.call_function(control_flow.region_op(), (rid, list(given.values())))
    made.meta["val"] = list(region.outputs)
    if stack_trace is not None:
        made.meta["stack_trace"] = stack_trace
    items = []
    for i, value in enumerate(region.outputs):
        item = graph.call_function(operator.getitem, (made, i))
        item.meta["val"] = value
        items.append(item)
    return items


def _qualified(op: torch._ops.OpOverload) -> str:
    """`aten::_native_batch_norm_legit.out`: the name the dispatcher finds it by."""
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def region_of(node: torch.fx.Node) -> control_flow.Region | None:
    """The composite `node` calls, if it calls one."""
    if node.op != "call_function" or not control_flow.is_region_op(node.target):
        return None
    region = control_flow.REGIONS[node.args[0]]
    return region if region.kind == "composite" else None


def results_of(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The results of the composite `node` calls (its getitems, in order)."""
    items = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    return [items[i] for i in range(len(items))]


def earlier(graph: torch.fx.Graph, node: torch.fx.Node, op: torch._ops.OpOverload,
            operands: list[Any], attributes: dict[str, Any], unwritten: list[Any]
            ) -> list[torch.fx.Node] | None:
    """The results of a composite of `op` before `node` on the same operand nodes
    (`operands`, None for an optional tensor not given) and `attributes`, none of
    `unwritten` written from it to `node`: what `node` computes, computed once (the op
    saved_tensors.py replays beside the forward's for what the backward reads)."""
    given = [o for o in operands if o is not None]
    nodes = list(graph.nodes)
    for before in reversed(nodes[:nodes.index(node)]):
        region = region_of(before)
        if region is not None and region.name == name_of(op) and before.args[1] == given \
                and all(region.attributes.get(k) == v for k, v in attributes.items()) and \
                same_operands_unwritten(graph, before, node, unwritten):
            return results_of(before)
    return None


def same_operands_unwritten(graph: torch.fx.Graph, first: torch.fx.Node,
                            second: torch.fx.Node, operands: list[Any]) -> bool:
    """Whether no node from `first` to `second` writes (through any view) the root of a
    tensor of `operands`: both read the same values of them."""
    roots, _ = view_roots(graph)
    watched = {roots.get(o, o) for o in operands if isinstance(o, torch.fx.Node)}
    node = first
    while node is not second:
        effects = write_effects(node)
        if effects is not None:
            for position in effects.written:
                if any(roots.get(t, t) in watched for t in written_operands(node, position)):
                    return False
        node = node.next
        if node.op == "root":
            return False
    return True
