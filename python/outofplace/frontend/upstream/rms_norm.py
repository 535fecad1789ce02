"""`rms_norm` without `eps` given: eager's default, the machine epsilon of its computing
type.

eager's `rms_norm` takes `eps=None` as `std::numeric_limits<opmath>::epsilon()` (float32's
for float16, bfloat16 and float32; float64's); torch-mlir's decomposition takes it as 0:
a row of zeros (a padding position) came out NaN, 0 / sqrt(0), where eager gives 0. The
rewrite gives the op its eps.

Upstream: no issue found (torch-mlir's DecomposeComplexOps, 2026-10).
Canary: test/pytest/test_upstream_canaries.py::test_rms_norm_without_eps_divides_by_zero.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[rms_norm].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import arguments, call


def _with_eps(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """rms_norm(x, shape, weight, eps=None)  =>  rms_norm(x, shape, weight, epsilon)"""
    a = arguments(node)
    if a["eps"] is not None:
        return None
    dtype = node.meta["val"].dtype
    computing = torch.float64 if dtype == torch.float64 else torch.float32
    return call(graph, torch.ops.aten.rms_norm.default, a["input"], a["normalized_shape"],
                a["weight"], torch.finfo(computing).eps)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.rms_norm.default: _with_eps,
}
