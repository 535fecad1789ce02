"""The checked mode's flags (`outofplace.compile(..., check_bounds=True)`): for every op
that reads or writes at runtime index tensors, whether all its indices are in the range
eager accepts, computed on the exported FX graph next to the op.

Eager raises IndexError (or RuntimeError) for an index out of range; the compiled ops
clamp or drop it. The flags are one extra result of `main` (a `tensor<Nxi1>`, one entry
per check); bounds.py splits them off into a program of their own that runs before the
main one, so that a call with an index out of range raises before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

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


def _indices(node: torch.fx.Node) -> list[tuple[torch.fx.Node, int, bool, str]]:
    """(index tensor, size it indexes, negatives accepted, what) for each runtime index
    operand of `node`."""
    packet = node.target.overloadpacket if isinstance(node.target, torch._ops.OpOverload) \
        else None
    if packet in _INDEX_LISTS:
        sizes = node.args[0].meta["val"].shape
        found, dim = [], 0
        for index in operand_at(node, 1):
            value = index.meta["val"] if isinstance(index, torch.fx.Node) else None
            if value is None or value.dtype in (torch.bool, torch.uint8):  # a mask
                dim += 1 if value is None else value.dim()
                continue
            found.append((index, int(sizes[dim]), True,
                          f"dimension {dim} of size {int(sizes[dim])}"))
            dim += 1
        return found
    if packet in _ALONG_DIM:
        self, index = node.args[0].meta["val"], operand_at(node, 2)
        dim = operand_at(node, 1) % max(self.dim(), 1)
        size = int(self.shape[dim]) if self.dim() else 1
        return [(index, size, _ALONG_DIM[packet], f"dimension {dim} of size {size}")]
    if packet is aten.embedding:
        size = int(node.args[0].meta["val"].shape[0])
        return [(operand_at(node, 1), size, False, f"the {size} rows of the embedding")]
    if packet is aten.take:
        size = node.args[0].meta["val"].numel()
        return [(operand_at(node, 1), size, True, f"the {size} elements")]
    return []


def add_checks(graph: torch.fx.Graph) -> tuple[torch.fx.Node | None, list[Check]]:
    """Adds, before each op with runtime indices, whether they are all in range; returns
    the node stacking those flags (None when there is nothing to check) and what each
    flag checks."""
    flags: list[torch.fx.Node] = []
    checks: list[Check] = []
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        for index, size, negative, what in _indices(node):
            if not isinstance(index, torch.fx.Node):
                continue
            with graph.inserting_before(node):
                low = call(graph, aten.ge.Scalar, index, -size if negative else 0)
                high = call(graph, aten.lt.Scalar, index, size)
                flag = call(graph, aten.all.default,
                            call(graph, aten.logical_and.default, low, high))
            for added in (low, high, flag, flag.args[0]):
                added.meta["stack_trace"] = node.meta.get("stack_trace")
            flags.append(flag)
            checks.append(Check(str(node.target.overloadpacket), source_line(node),
                                what, negative))
    if not flags:
        return None, []
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        stacked = call(graph, aten.stack.default, flags)
    return stacked, checks
