"""The checked mode's flags (`outofplace.compile(..., check_bounds=True)`): for every op
that reads or writes at runtime index tensors, whether all its indices are in the range
eager accepts, computed on the exported FX graph next to the op.

Eager raises IndexError (or RuntimeError) for an index out of range; the compiled ops
clamp or drop it. The flags are one extra result of `main` (a `tensor<Nxi1>`, one entry
per check), named on the module by `signature.FLAGS_RESULT`; the pass outofplace-split-bounds-check
(transforms/split_bounds_check.py) splits them off into a program of their own that
bounds.py runs before the main one, so that a call with an index out of range raises
before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import torch
import torch.fx

from torch.fx.experimental.symbolic_shapes import is_concrete_int

from .fx_graph import call, operand_at, source_line

aten = torch.ops.aten

# Ops whose `indices` list indexes the leading dimensions of self; each entry in
# [-size, size), as `x[idx]` and `x[idx] = v` take it.
_INDEX_LISTS = {aten.index, aten._unsafe_index, aten.index_put, aten.index_put_,
                aten._unsafe_index_put}
# Ops (self, dim, index, ...) taking `index` along `dim`: True where eager accepts
# negative entries (counting from the end), False where it accepts [0, size) only.
_ALONG_DIM = {aten.index_fill: True, aten.index_fill_: True,
              aten.index_select: False, aten.index_add: False, aten.index_add_: False,
              aten.index_copy: False, aten.index_copy_: False,
              aten.gather: False, aten.scatter: False, aten.scatter_: False,
              aten.scatter_add: False, aten.scatter_add_: False,
              aten.scatter_reduce: False, aten.scatter_reduce_: False}


@dataclass(frozen=True)
class Check:
    """One flag: the indices of `op` at `location` index a dimension of `size`."""

    op: str
    location: str
    what: str  # "dimension 0 of size 4", "the 12 elements"
    negative: bool  # whether eager accepts -size <= index < 0

    def message(self) -> str:
        where = f"{self.location}: " if self.location else ""
        accepted = "[-size, size)" if self.negative else "[0, size)"
        return (f"{where}a runtime index of {self.op} is out of range for {self.what} "
                f"(eager raises for an index outside {accepted}); found before the call "
                "ran: no tensor was changed")


@dataclass(frozen=True)
class PairingCheck(Check):
    """One flag: the two bool masks of `op` at `location` have as many trues, or one of
    them a single true (what eager broadcasts: masks.py pairs them)."""

    def message(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return (f"{where}the two bool masks of {self.op} have different counts of trues, "
                "neither of them one (eager raises IndexError: the positions of their "
                "trues cannot be broadcast together); found before the call ran: no "
                "tensor was changed")


def _packet(node: torch.fx.Node) -> Any:
    """The op `node` calls, overloads aside (None for anything but an ATen op)."""
    return node.target.overloadpacket if isinstance(node.target, torch._ops.OpOverload) \
        else None


def _two_masks(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The two bool masks of an index_put whose index holds two."""
    if _packet(node) not in _INDEX_LISTS:
        return None
    masks = [index for index in operand_at(node, 1) if isinstance(index, torch.fx.Node)
             and index.meta["val"].dtype == torch.bool]
    return masks if len(masks) == 2 else None


def _pairing_flag(graph: torch.fx.Graph, *, masks: list[torch.fx.Node]) -> torch.fx.Node:
    """Whether eager pairs the trues of two masks: as many of each, or one of either."""
    first, second = (call(graph, aten.sum.default, mask) for mask in masks)
    return call(graph, aten.logical_or.default, call(graph, aten.eq.Tensor, first, second),
                call(graph, aten.logical_or.default, call(graph, aten.eq.Scalar, first, 1),
                     call(graph, aten.eq.Scalar, second, 1)))


def _size(base: torch.fx.Node, dim: int | None) -> int | torch.SymInt:
    """Dimension `dim` of `base` (its element count for None), a SymInt where it is a
    dynamic dimension (dynamic_shapes): read without guarding on it."""
    value = base.meta["val"]
    return value.numel() if dim is None else value.shape[dim]


def _describe(size: int | torch.SymInt, dim: int | None) -> str:
    if not is_concrete_int(size):
        return "the call's elements" if dim is None else f"dimension {dim} (of the call's size)"
    return f"the {size} elements" if dim is None else f"dimension {dim} of size {size}"


def _indices(node: torch.fx.Node
             ) -> list[tuple[torch.fx.Node, torch.fx.Node, int | None, bool, str]]:
    """(index tensor, tensor it indexes, dimension it indexes or None for all elements,
    negatives accepted, what) for each runtime index operand of `node`."""
    packet = _packet(node)
    if packet in _INDEX_LISTS:
        base = node.args[0]
        found, dim = [], 0
        for index in operand_at(node, 1):
            value = index.meta["val"] if isinstance(index, torch.fx.Node) else None
            if value is None or value.dtype in (torch.bool, torch.uint8):  # a mask
                dim += 1 if value is None else value.dim()
                continue
            found.append((index, base, dim, True, _describe(_size(base, dim), dim)))
            dim += 1
        return found
    if packet in _ALONG_DIM:
        base, index = node.args[0], operand_at(node, 2)
        rank = base.meta["val"].dim()
        dim = operand_at(node, 1) % max(rank, 1)
        if not rank:  # a 0-d self is taken as one element
            return [(index, base, None, _ALONG_DIM[packet], f"dimension {dim} of size 1")]
        return [(index, base, dim, _ALONG_DIM[packet],
                 _describe(_size(base, dim), dim))]
    if packet is aten.embedding:
        size = _size(node.args[0], 0)
        what = f"the {size} rows of the embedding" if is_concrete_int(size) else \
            "the rows of the embedding"
        return [(operand_at(node, 1), node.args[0], 0, False, what)]
    if packet is aten.take:
        return [(operand_at(node, 1), node.args[0], None, True,
                 _describe(_size(node.args[0], None), None))]
    return []


def _size_operand(graph: torch.fx.Graph, base: torch.fx.Node, dim: int | None
                  ) -> int | torch.fx.Node:
    """The size `_size` reads, as a number, or as a node computing it at run time where
    it is dynamic."""
    size = _size(base, dim)
    if is_concrete_int(size):
        return int(size)
    return call(graph, aten.sym_numel.default, base) if dim is None else \
        call(graph, aten.sym_size.int, base, dim)


def _in_range(graph: torch.fx.Graph, index: torch.fx.Node, base: torch.fx.Node,
              dim: int | None, negative: bool) -> torch.fx.Node:
    """Whether every entry of `index` is in the range eager accepts for dimension `dim`
    of `base` (or its elements)."""
    size = _size_operand(graph, base, dim)
    # -size <= index, as 0 <= index + size (no negation of a runtime size)
    low = call(graph, aten.ge.Scalar,
               call(graph, aten.add.Scalar, index, size) if negative else index, 0)
    high = call(graph, aten.lt.Scalar, index, size)
    return call(graph, aten.all.default, call(graph, aten.logical_and.default, low, high))


def _inserted_before(node: torch.fx.Node,
                     build: Callable[[torch.fx.Graph], torch.fx.Node]) -> torch.fx.Node:
    """The flag `build` makes in node's graph, each node it adds before `node`, with
    node's stack trace (an error names the user's line)."""
    graph = node.graph
    with graph.inserting_before(node):
        before = set(graph.nodes)
        flag = build(graph)
    for added in set(graph.nodes) - before:
        added.meta["stack_trace"] = node.meta.get("stack_trace")
    return flag


def add_checks(graph: torch.fx.Graph) -> tuple[torch.fx.Node | None, list[Check]]:
    """Adds, before each op with runtime indices, whether they are all in range; returns
    the node stacking those flags (None when there is nothing to check) and what each
    flag checks."""
    flags: list[torch.fx.Node] = []
    checks: list[Check] = []
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        indices = [i for i in _indices(node) if isinstance(i[0], torch.fx.Node)]
        masks = _two_masks(node)
        if not indices and masks is None:
            continue
        op, line = str(_packet(node)), source_line(node)
        for index, base, dim, negative, what in indices:
            flags.append(_inserted_before(node, partial(
                _in_range, index=index, base=base, dim=dim, negative=negative)))
            checks.append(Check(op, line, what, negative))
        if masks is not None:
            flags.append(_inserted_before(node, partial(_pairing_flag, masks=masks)))
            checks.append(PairingCheck(op, line, "", False))
    if not flags:
        return None, []
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        stacked = call(graph, aten.stack.default, flags)
    return stacked, checks
