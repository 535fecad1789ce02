"""Refusals on the exported FX graph: programs whose eager result the compiled program
could not reproduce, each an `UnsupportedMutationError` naming the op and the line.

- an in-place op whose operand overlaps what it writes (fake storages, offsets, strides).

(`x[pos]` at a runtime position is traced as a copy, `index.Tensor`, where eager returns a
view: the MLIR pass takes it as a view, op_registry.is_position_view.)
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.fx

from .. import op_registry
from ..errors import UnsupportedMutationError
from ..memory import symbolic
from .fx_graph import element_offsets, is_position_view, op_effects, operand_at, \
    overlaps, source_line, view_base


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same elements in the same order, `b` broadcast to `a`'s shape as an
    elementwise op reads it (`x.unsqueeze(0).mul_(x)`; a dimension of size 1 takes no
    step: its stride is no part of the layout, and a view taken again may give it
    another)."""
    try:
        b = b.expand(a.shape)
    except RuntimeError:  # not broadcastable to it
        return False
    return a.dtype == b.dtype and a.storage_offset() == b.storage_offset() and \
        all(n == 1 or s == t for n, s, t in zip(a.shape, a.stride(), b.stride()))


# Operands eager reads in full before writing anything (`x.fill_(x[0, 0])` takes the
# value with .item()): overlapping what the op writes is harmless.
_READ_FIRST = {(torch.ops.aten.fill_.Tensor, "value"),
               (torch.ops.aten.masked_fill_.Tensor, "value"),
               (torch.ops.aten.index_fill_.int_Tensor, "value")}


# Ops whose written elements take a value of the operand, not one computed from the old
# value (with `accumulate` false): an operand of one element overlapping what they write
# is written into its own place unchanged, whatever the order (`x[pos] = x[j]` at 0-d
# positions, where `x[j]` is a view: eager's `copy_`, an `index_put_` in dynamo's
# trace). (Eager raises for `index_copy_` and `scatter_` over their own memory.)
_COPIES = {torch.ops.aten.copy_.default, torch.ops.aten.index_put_.default,
           torch.ops.aten.masked_scatter_.default}


def _copies_one_element(node: torch.fx.Node, read: torch.Tensor) -> bool:
    if node.target not in _COPIES or read.numel() != 1:
        return False
    if node.target is torch.ops.aten.index_put_.default:
        return not (node.args[3] if len(node.args) > 3 else
                    node.kwargs.get("accumulate", False))
    return True


def _reads_one_slice_it_writes(node: torch.fx.Node, operand: torch.fx.Node,
                               written: torch.Tensor, read: torch.Tensor) -> bool:
    """`index_put_` at 0-d positions only (`x[:, pos] = v`, `x[:, pos] += v`) whose
    values are exactly the slice it would write at other positions (`x[:, 2]`, a view
    torch.compile's trace keeps; `x[0]` of `x[pos] = x[0]`, its leading ones dropped):
    the slice it writes at run time is that one, each element written from (or added to)
    itself, or shares no element with it; in any order the same values."""
    if node.target is not torch.ops.aten.index_put_.default or \
            _argument_name(node, operand) != "values" or read.dtype != written.dtype or \
            _overlaps_itself(written):
        return False
    indices = list(node.args[1])
    values = [i.meta.get("val") if isinstance(i, torch.fx.Node) else i
              for i in indices if i is not None]
    if not values or not all(isinstance(v, torch.Tensor) and v.dim() == 0 and
                             v.dtype in op_registry.POSITION_DTYPES for v in values):
        return False
    at = {d for d, i in enumerate(indices) if i is not None}
    kept = [d for d in range(written.dim()) if d not in at]
    # values broadcast to the slice (Python's `x[pos] = x[0]` drops their leading ones):
    # aligned from the right, each dimension of the slice's size and stride, none
    # broadcast, the slice's dimensions before them of size one
    shape = [(n, s) for n, s in zip(read.shape, read.stride())]
    while len(shape) > len(kept) and shape[0][0] == 1:
        shape.pop(0)
    lead = len(kept) - len(shape)
    if lead < 0 or any(written.shape[d] != 1 for d in kept[:lead]) or any(
            n != written.shape[d] or n > 1 and stride != written.stride(d)
            for (n, stride), d in zip(shape, kept[lead:])):
        return False
    # the read's first element as an index of the written tensor: 0 on the kept dims
    rest, start = read.storage_offset() - written.storage_offset(), {}
    for d in sorted(range(written.dim()), key=lambda d: -written.stride(d)):
        if rest < 0 or written.shape[d] == 1 or not written.stride(d):
            continue
        start[d] = min(rest // written.stride(d), written.shape[d] - 1)
        rest -= start[d] * written.stride(d)
    return rest == 0 and all(start.get(d, 0) == 0 for d in kept)


def _copies_shared_elements_onto_themselves(node: torch.fx.Node, written: torch.Tensor,
                                            read: torch.Tensor) -> bool:
    """`copy_` whose every element written at memory its source reads is written from
    that very place (`v.copy_(v[0])`: row 0 onto itself, the other rows from it): the
    shared elements keep their values, so every element reads the old value whatever
    the order eager writes in."""
    if node.target is not torch.ops.aten.copy_.default or read.dtype != written.dtype or \
            symbolic(written) or symbolic(read) or written.numel() > _OFFSETS_LIMIT or \
            _overlaps_itself(written):
        return False
    try:
        source = read.expand(written.shape)
    except RuntimeError:  # not broadcastable to it
        return False
    to, of = element_offsets(written), element_offsets(source)
    moved = to != of  # written from another place
    return not bool(torch.isin(to[moved], of).any())


def _overlaps_itself(value: torch.Tensor) -> bool:
    """Whether two elements of `value` share memory: torch's own test, which gives up on
    a tensor that is not contiguous (`x[:, ::2]`), else the elements' offsets (assumed
    to when there are too many to count)."""
    found = torch._debug_has_internal_overlap(value)
    if found != 2:  # 0: no overlap, 1: overlap, 2: too hard for torch's test
        return found == 1
    return value.numel() > _OFFSETS_LIMIT or \
        element_offsets(value).unique().numel() != value.numel()


_OFFSETS_LIMIT = 1 << 20


def refuse_overlapping_operands(graph: torch.fx.Graph,
                                nodes: Iterable[torch.fx.Node] | None = None) -> None:
    """Refuses an in-place op that reads memory it writes through another view:
    `x[:, 1:] += x[:, :-1]`, `x.index_put_(i, x.t())`. Eager then runs element by element
    over shared memory, so its result depends on the order it visits elements in (or it
    raises, when it can tell); value semantics would read every operand before writing.
    A pointwise op or `copy_` reading exactly the elements it writes (`x.mul_(x.detach())`,
    `x.unsqueeze(0).mul_(x)`), a fill value read before the fill (`x.fill_(x[0, 0])`) and
    one element copied (`x[i] = x[j]`) have a single meaning, as has a copy that writes
    each shared element from its own place (`v.copy_(v[0])`), and so has a slice at
    runtime positions written from another of the same dimensions (`x[:, i] += x[:, j]`):
    the same or disjoint.
    A tensor written through a read at runtime positions (`x[:, pos].index_put_(...)`),
    whose traced value is a copy where eager's is a view of x, may share any of x's
    memory: an op other than a pointwise one reading x there is refused too.
    `nodes`: only these (the per-tensor ops a `_foreach_*` op was decomposed into)."""
    for node in graph.nodes if nodes is None else nodes:
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
            indexed = None if elementwise else _indexed_at_runtime(target)
            for operand in node.all_input_nodes:
                read = operand.meta.get("val")
                if operand is target or not isinstance(read, torch.Tensor) or \
                        not overlaps(written, read) and \
                        (indexed is None or not overlaps(indexed, read)):
                    continue
                if elementwise and _same_layout(written, read) or \
                        (node.target, _argument_name(node, operand)) in _READ_FIRST or \
                        _copies_one_element(node, read) or \
                        _copies_shared_elements_onto_themselves(node, written, read) or \
                        _reads_one_slice_it_writes(node, operand, written, read):
                    continue
                raise UnsupportedMutationError(
                    op_registry.mlir_name(node.target),
                    f"its operand `{_argument_name(node, operand)}` shares memory with the "
                    "tensor it writes: eager's result then depends on the order it writes "
                    "the elements in; clone the operand first", location=source_line(node))


def _indexed_at_runtime(node: torch.fx.Node) -> torch.Tensor | None:
    """The (fake) tensor a read at runtime positions indexes, when `node` is that read or
    a view of it (fx_graph.is_position_view): in eager `node` lies somewhere in its
    memory."""
    while node is not None:
        if is_position_view(node):
            value = node.args[0].meta.get("val")
            return value if isinstance(value, torch.Tensor) else None
        node = view_base(node)
    return None


def _argument_name(node: torch.fx.Node, operand: torch.fx.Node) -> str:
    """The schema name of the argument `operand` is passed as (`values`, `src`)."""
    arguments = node.target._schema.arguments
    for position, argument in enumerate(arguments):
        value = node.args[position] if position < len(node.args) else \
            node.kwargs.get(argument.name)
        if value is operand or isinstance(value, (list, tuple)) and operand in value:
            return argument.name
    return operand.name
