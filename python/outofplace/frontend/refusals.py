"""Refusals on the exported FX graph: programs whose eager result the compiled program
could not reproduce, each an `UnsupportedMutationError` naming the op and the line.

- an in-place op whose operand overlaps what it writes (fake storages, offsets, strides).

(`x[pos]` at a runtime position is traced as a copy, `index.Tensor`, where eager returns a
view: the MLIR pass takes it as a view, op_registry.is_position_view.)
"""

from __future__ import annotations

import torch
import torch.fx

from .. import op_registry
from ..errors import UnsupportedMutationError
from .fx_graph import op_effects, operand_at, overlaps, source_line


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.storage_offset() == b.storage_offset() and \
        a.shape == b.shape and a.stride() == b.stride()


# Operands eager reads in full before writing anything (`x.fill_(x[0, 0])` takes the
# value with .item()): overlapping what the op writes is harmless.
_READ_FIRST = {(torch.ops.aten.fill_.Tensor, "value"),
               (torch.ops.aten.masked_fill_.Tensor, "value"),
               (torch.ops.aten.index_fill_.int_Tensor, "value")}


# Ops whose written elements take a value of the operand, not one computed from the old
# value (with `accumulate` false): an operand of one element overlapping what they write
# is written into its own place unchanged, whatever the order (`x[pos] = x[j]` at 0-d
# positions, where `x[j]` is a view).
_COPIES = {torch.ops.aten.copy_.default, torch.ops.aten.index_put_.default,
           torch.ops.aten.index_copy_.default, torch.ops.aten.masked_scatter_.default,
           torch.ops.aten.scatter_.src}


def _copies_one_element(node: torch.fx.Node, read: torch.Tensor) -> bool:
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    return node.target in _COPIES and read.numel() == 1 and not accumulate


def refuse_overlapping_operands(graph: torch.fx.Graph) -> None:
    """Refuses an in-place op that reads memory it writes through another view:
    `x[:, 1:] += x[:, :-1]`, `x.index_put_(i, x.t())`. Eager then runs element by element
    over shared memory, so its result depends on the order it visits elements in (or it
    raises, when it can tell); value semantics would read every operand before writing.
    A pointwise op or `copy_` reading exactly the elements it writes (`x.mul_(x.detach())`),
    a fill value read before the fill (`x.fill_(x[0, 0])`) and one element copied
    (`x[i] = x[j]`) have a single meaning."""
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
                        (node.target, _argument_name(node, operand)) in _READ_FIRST or \
                        _copies_one_element(node, read):
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
