"""`topk(..., sorted=False)`, which torch-mlir fails to lower, as `topk(..., sorted=True)`:
how DeepSeek-V3's router (and its kind) picks its expert groups and experts.

PyTorch promises no order of an unsorted topk's results; eager's CPU kernel gives them
sorted when `k * 64 <= n` (a partial sort) and in its selection's order otherwise. The
sorted order is one of the orders eager may give, each value with its own index: a
program that reads them as a set (the router gathers each expert's weight by its index,
and sums their products) computes what eager computes.

Upstream: no issue found (torch-mlir's StableHLO lowering has no pattern for topk with
`sorted=false`: "failed to legalize operation 'torch.constant.bool'").
Canary: test/pytest/test_fx_upstream_canaries.py::test_unsorted_topk_does_not_lower.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[unsorted_topk].
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import arguments, call


def _sorted(graph: torch.fx.Graph, node: torch.fx.Node) -> tuple[torch.fx.Node, ...] | None:
    """topk(x, k, dim, largest, sorted=False)  =>  topk(x, k, dim, largest, sorted=True)"""
    a = arguments(node)
    if a["sorted"]:
        return None
    result = call(graph, torch.ops.aten.topk.default, a["input"], a["k"], a["dim"],
                  a["largest"], True)
    result.meta["stack_trace"] = node.meta.get("stack_trace")
    return tuple(call(graph, operator.getitem, result, i) for i in range(2))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.topk.default: _sorted,
}
