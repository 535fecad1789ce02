"""`clamp` of a bool tensor by bool tensors: torch-mlir's StableHLO lowering fills the
missing bound with int1's signed greatest value, False, so `mask.clamp(min=m)` clamped
every element to False.

Upstream: no issue found.
Canary: test/pytest/test_fx_upstream_canaries.py::
test_bool_clamp_fills_the_missing_bound_with_false.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call, operand_at
from ..inline import inline_call


def _clamped_bools(x: torch.Tensor, low: torch.Tensor | None = None,
                   high: torch.Tensor | None = None) -> torch.Tensor:
    """clamp of a bool tensor by bool tensors: (x | low) & high, as eager orders
    False < True (eager clamps bools by tensors only)."""
    if low is not None:
        x = x | low
    if high is not None:
        x = x & high
    return x if low is not None or high is not None else x.clone()


_CLAMPS = {torch.ops.aten.clamp.Tensor: False, torch.ops.aten.clamp_.Tensor: True}


def _bool_clamp(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """`mask.clamp(min=m)` on bools  =>  `_clamped_bools`."""
    x = node.args[0]
    if x.meta["val"].dtype != torch.bool:
        return None
    result = inline_call(graph, node, _clamped_bools, x, operand_at(node, 1),
                         operand_at(node, 2))
    return call(graph, torch.ops.aten.copy_.default, x, result) if _CLAMPS[node.target] \
        else result


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {op: _bool_clamp for op in _CLAMPS}
