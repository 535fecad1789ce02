"""`abs` of an unsigned integer tensor (uint8: eager's only unsigned `abs`) is the tensor.

torch-mlir lowers `aten.abs` to `stablehlo.abs`, which takes signless or signed integers
only: the lowering fails, and the statement was refused. An unsigned element is its own
magnitude, so `abs` is a copy and `abs_` writes nothing.

Upstream: no issue found (TorchToStablehlo's abs of ui8, 2026-12).
Canary: test/pytest/test_upstream_canaries.py::test_abs_of_uint8_does_not_lower.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[unsigned_abs].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call

_UNSIGNED = (torch.uint8, torch.uint16, torch.uint32, torch.uint64)


def _copy(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """abs(x) of unsigned x  =>  clone(x)"""
    x = node.args[0]
    if x.meta["val"].dtype not in _UNSIGNED:
        return None
    return call(graph, torch.ops.aten.clone.default, x)


def _nothing(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """abs_(x) of unsigned x  =>  x"""
    x = node.args[0]
    return x if x.meta["val"].dtype in _UNSIGNED else None


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.abs.default: _copy,
    torch.ops.aten.abs_.default: _nothing,
}
