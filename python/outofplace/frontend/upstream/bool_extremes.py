"""`max(x, dim)` and `min(x, dim)` of bools, computed on uint8.

torch-mlir reduces bools with indices as signed i1 (true = -1, below false), from the
init `true` (the signed minimum) for a max; outofplace-upstream-unsigned-integers makes
the comparison unsigned but not this init: every row's max came out True at index 0, a
row of False included, silently (autograd's gradient of `cumprod` over an input with a
zero takes the first zero's position this way: that gradient was wrong). The same
reduction of the bools as uint8 (whose inits that pass sets) gives eager's value and
index; the value is cast back.

Upstream: no issue found (TorchToStablehlo's max.dim/min.dim of i1, 2026-10).
Canary: test/pytest/test_upstream_canaries.py::test_bool_max_dim_starts_from_true.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[bool_extremes].
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call


def _as_uint8(graph: torch.fx.Graph, node: torch.fx.Node) -> tuple[torch.fx.Node, ...] | None:
    """max(b, dim, keepdim)  =>  (max(b.to(uint8), dim, keepdim).values.to(bool), .indices)"""
    x = node.args[0]
    if x.meta["val"].dtype != torch.bool:
        return None
    wide = call(graph, torch.ops.aten._to_copy.default, x, dtype=torch.uint8)
    result = call(graph, node.target, wide, *node.args[1:], **node.kwargs)
    values = call(graph, torch.ops.aten._to_copy.default,
                  call(graph, operator.getitem, result, 0), dtype=torch.bool)
    return values, call(graph, operator.getitem, result, 1)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.max.dim: _as_uint8,
    torch.ops.aten.min.dim: _as_uint8,
}
