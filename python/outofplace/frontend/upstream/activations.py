"""Activations torch-mlir's StableHLO lowering computes wrongly, silently:

- `softshrink(x, λ)`: below -λ it gives `x - λ` where eager gives `x + λ`.
- `prelu(x, w)` with one weight a channel: the weights broadcast along the last
  dimension, not the channel dimension (1): wrong values where the last dimension has
  as many elements as the channels, a failed broadcast elsewhere.

Both become eager's kernel's expression as elementwise ops.

Upstream: no issue found.
Canaries: test/pytest/test_fx_upstream_canaries.py::test_softshrink_subtracts_below_minus_lambda,
::test_prelu_broadcasts_along_the_last_dimension.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[activations].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..inline import inline_call


def _softshrink(x: torch.Tensor, lambd: float) -> torch.Tensor:
    """x - λ above λ, x + λ below -λ, else 0 (`x * 0`: NaN stays NaN)."""
    return torch.where(x > lambd, x - lambd, torch.where(x < -lambd, x + lambd, x * 0))


def _prelu(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x where positive, else the weight of its channel (dimension 1) times x."""
    if weight.numel() > 1 and x.dim() > 1:
        weight = weight.view(1, -1, *[1] * (x.dim() - 2))
    return torch.where(x > 0, x, weight * x)


def _softshrink_node(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """softshrink(x, λ)  =>  `_softshrink`"""
    x = node.args[0]
    lambd = node.args[1] if len(node.args) > 1 else node.kwargs.get("lambd", 0.5)
    return inline_call(graph, node, _softshrink, x, lambd)


def _prelu_node(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """prelu(x, w), _prelu_kernel(x, w)  =>  `_prelu`"""
    return inline_call(graph, node, _prelu, *node.args[:2])


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.softshrink.default: _softshrink_node,
    torch.ops.aten.prelu.default: _prelu_node,
    torch.ops.aten._prelu_kernel.default: _prelu_node,
}
