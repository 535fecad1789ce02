"""Refusals on the exported FX graph: programs whose eager result the compiled program
could not reproduce, each an `UnsupportedMutationError` naming the op and the line.

- an in-place op whose operand overlaps what it writes (fake storages, offsets, strides);
- a write into `x[pos]` read at a runtime position, which is traced as a copy;
- a runtime-position read used after its tensor is written.
"""

from __future__ import annotations

import bisect
from typing import Any

import torch
import torch.fx

from .. import op_registry
from ..errors import UnsupportedMutationError
from .fx_graph import (op_effects, operand_at, overlaps, source_line, view_base,
                       view_roots)


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.storage_offset() == b.storage_offset() and \
        a.shape == b.shape and a.stride() == b.stride()


# Operands eager reads in full before writing anything (`x.fill_(x[0, 0])` takes the
# value with .item()): overlapping what the op writes is harmless.
_READ_FIRST = {(torch.ops.aten.fill_.Tensor, "value"),
               (torch.ops.aten.masked_fill_.Tensor, "value"),
               (torch.ops.aten.index_fill_.int_Tensor, "value")}


def refuse_overlapping_operands(graph: torch.fx.Graph) -> None:
    """Refuses an in-place op that reads memory it writes through another view:
    `x[:, 1:] += x[:, :-1]`, `x.index_put_(i, x.t())`. Eager then runs element by element
    over shared memory, so its result depends on the order it visits elements in (or it
    raises, when it can tell); value semantics would read every operand before writing.
    A pointwise op or `copy_` reading exactly the elements it writes (`x.mul_(x.detach())`)
    and a fill value read before the fill (`x.fill_(x[0, 0])`) have a single meaning."""
    for node in graph.nodes:
        effects = op_effects(node)
        if effects is None or effects.rebinds_view:
            continue
        elementwise = torch.Tag.pointwise in node.target.tags or \
            node.target is torch.ops.aten.copy_.default
        for position in effects.written:
            target = operand_at(node, position)
            written = target.meta.get("val") if isinstance(target, torch.fx.Node) else None
            if not isinstance(written, torch.Tensor):
                continue
            for operand in node.all_input_nodes:
                read = operand.meta.get("val")
                if operand is target or not isinstance(read, torch.Tensor) or \
                        not overlaps(written, read):
                    continue
                if elementwise and _same_layout(written, read) or \
                        (node.target, _argument_name(node, operand)) in _READ_FIRST:
                    continue
                raise UnsupportedMutationError(
                    op_registry.mlir_name(node.target),
                    f"its operand `{_argument_name(node, operand)}` shares memory with the "
                    "tensor it writes: eager's result then depends on the order it writes "
                    "the elements in; clone the operand first", location=source_line(node))


def _argument_name(node: torch.fx.Node, operand: torch.fx.Node) -> str:
    """The schema name of the argument `operand` is passed as (`values`, `src`)."""
    arguments = node.target._schema.arguments
    for position, argument in enumerate(arguments):
        value = node.args[position] if position < len(node.args) else \
            node.kwargs.get(argument.name)
        if value is operand or isinstance(value, (list, tuple)) and operand in value:
            return argument.name
    return operand.name


def _is_position_read(node: torch.fx.Node) -> bool:
    """`x[:, pos]` as runtime_positions traces it: `index` at 0-d integer tensors only."""
    if node.target is not torch.ops.aten.index.Tensor:
        return False
    indices = [i for i in node.args[1] if i is not None]
    return bool(indices) and all(
        isinstance(i, torch.fx.Node) and isinstance(i.meta.get("val"), torch.Tensor) and
        i.meta["val"].dim() == 0 for i in indices)


def refuse_writes_into_position_reads(graph: torch.fx.Graph) -> None:
    """`x[pos]` with a runtime position is traced as a copy (runtime_positions); eager
    returns a view, so a write into it (or into a view of it) would be lost, unless it
    is stored back at once: `x[pos] += w`."""
    roots, _ = view_roots(graph)
    reads = set(filter(_is_position_read, graph.nodes))
    for node in graph.nodes:
        effects = op_effects(node)
        if effects is None:
            continue
        for position in effects.written:
            target = operand_at(node, position)
            if not isinstance(target, torch.fx.Node) or \
                    roots.get(target, target) not in reads:
                continue
            if target in reads and _is_augmented_assignment(target, node):
                continue
            raise UnsupportedMutationError(
                op_registry.mlir_name(node.target),
                "it writes into a tensor read at a runtime position (x[pos] with a "
                "0-d tensor pos), which outofplace reads as a copy where eager "
                "returns a view; store it back (`x[pos] += w`, `x[pos] = y`) or "
                "write `x[pos] = x[pos] * w`", location=source_line(node))


def _is_augmented_assignment(read: torch.fx.Node, write: torch.fx.Node) -> bool:
    """`x[k] += w`: a write into the read `x[k]`, then at once a store of it at `x[k]`,
    with no other use of either after the write (reads of `x[k]` before it, as a complex
    product's parts are, see the same values in a copy as in a view). Copy or view, the
    result is then the same."""
    between: set[torch.fx.Node] = set()
    store = write.next
    while _is_harmless(store):
        between.add(store)
        store = store.next
    if store.target is not torch.ops.aten.index_put_.default or \
            (store.args[3] if len(store.args) > 3 else store.kwargs.get("accumulate")):
        return False
    value = store.args[2]
    while value in between and view_base(value) is not None:
        value = view_base(value)
    inside = between | {store}
    if value not in (read, write) or set(read.users) - inside - {write} - _after(read, write) or \
            set(write.users) - inside or any(set(n.users) - inside for n in between):
        return False
    indices, stored = read.args[1], store.args[1]
    return len(indices) == len(stored) and _same_value(read.args[0], store.args[0]) and \
        all(_same_value(a, b) for a, b in zip(indices, stored))


def _after(first: torch.fx.Node, last: torch.fx.Node) -> set[torch.fx.Node]:
    """The nodes after `first` and before `last`, in program order."""
    nodes: set[torch.fx.Node] = set()
    node = first.next
    while node is not last and node.op != "output":
        nodes.add(node)
        node = node.next
    return nodes


# Nodes tracing puts between the two halves of `x[k] += w`: constants and checks.
_HARMLESS = (torch.ops.aten.lift_fresh_copy.default,
             torch.ops.aten._assert_tensor_metadata.default)


def _is_harmless(node: torch.fx.Node) -> bool:
    """A constant, a check, a view or an autograd-only op (`detach_`): nothing that reads
    or writes tensor data."""
    if node.op == "get_attr" or node.target in _HARMLESS:
        return True
    effects = op_effects(node)
    return effects is not None and (effects.is_autograd_only or effects.is_view)


def _same_value(a: Any, b: Any) -> bool:
    """The same node, or nodes that compute the same from the same inputs (views of one
    tensor by the same arguments, equal constants)."""
    if not isinstance(a, torch.fx.Node) or not isinstance(b, torch.fx.Node):
        return not isinstance(a, torch.fx.Node) and not isinstance(b, torch.fx.Node) and \
            a == b
    if a is b:
        return True
    if a.op == b.op == "get_attr":
        module = a.graph.owning_module
        x, y = getattr(module, a.target, None), getattr(module, b.target, None)
        return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and \
            x.dtype == y.dtype and x.shape == y.shape and bool(torch.equal(x, y))
    if a.op != "call_function" or a.target != b.target or len(a.args) != len(b.args) or \
            a.kwargs != b.kwargs or not _is_harmless(a):
        return False
    return all(_same_value(x, y) for x, y in zip(a.args, b.args))


def refuse_stale_position_reads(graph: torch.fx.Graph) -> None:
    """`y = x[pos]` with a runtime position is a copy where eager returns a view: when x
    is written after the read and y is used after that write, eager's y would show the
    write and the copy would not. One pass over the graph, then a lookup per read."""
    roots, _ = view_roots(graph)
    order = {node: number for number, node in enumerate(graph.nodes)}
    writes: dict[torch.fx.Node, list[int]] = {}  # root -> positions of writes to it
    views: dict[torch.fx.Node, list[torch.fx.Node]] = {}  # root -> views of it
    for node in graph.nodes:
        effects = op_effects(node)
        if effects is not None and not effects.is_autograd_only:
            for position in effects.written:
                target = operand_at(node, position)
                if isinstance(target, torch.fx.Node):
                    writes.setdefault(roots.get(target, target), []).append(order[node])
        if node in roots:
            views.setdefault(roots[node], []).append(node)
    nodes = list(graph.nodes)
    for read in filter(_is_position_read, nodes):
        root = roots.get(read.args[0], read.args[0])
        later = writes.get(root, [])
        first = bisect.bisect_right(later, order[read])
        if first == len(later):
            continue
        write = nodes[later[first]]
        aliases = [read, *views.get(read, [])]
        last_use = max((order[user] for alias in aliases for user in alias.users),
                       default=-1)
        if last_use > order[write]:
            raise UnsupportedMutationError(
                "torch.aten.index.Tensor", "x[pos] with a runtime position is read as a "
                "copy where eager returns a view, and x is written while the read is "
                f"still used (at {source_line(write) or 'a later line'}); clone the read "
                "(`x[pos].clone()`) or read it after the write", location=source_line(read))
