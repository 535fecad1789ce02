"""`torch.cdist`'s kernels, which torch-mlir does not define (and PyTorch does not
decompose): `_cdist_forward` and its gradient `_cdist_backward`, as eager's CPU kernels
compute them (PyTorch's `cdist_impl` and its backward kernels).

The forward is eager's choice of two: for p = 2 with `compute_mode` 1
(use_mm_for_euclid_dist), or 0 (the default) with more than 25 rows on either side,
`_euclidean_dist` (norms and a matrix product, which PyTorch decomposes); otherwise the
p-norm of each pair's difference: the count of its nonzero elements (p = 0), the sum of
their magnitudes (1), the root of the sum of squares (2), the greatest magnitude (inf),
(sum |d|^p)^(1/p) otherwise. The gradient is eager's formula per p, summed over the
other side's rows (a pair at distance 0 gives none; p = inf gives to the elements at the
distance).

Upstream: no issue found (torch-mlir defines neither op).
Canary: test/pytest/test_fx_upstream_canaries.py::test_cdist_is_undefined.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[distances],
::test_special_functions_training_steps_match_eager.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import arguments
from ..inline import inline_call


def _differences(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """x1[..., i, :] - x2[..., j, :] at [..., i, j, :] (batch dimensions broadcast)."""
    return x1.unsqueeze(-2) - x2.unsqueeze(-3)


def _cdist(x1: torch.Tensor, x2: torch.Tensor, p: float, mode: int | None
           ) -> torch.Tensor:
    if p == 2 and (mode == 1 or (mode in (0, None) and
                                 (x1.shape[-2] > 25 or x2.shape[-2] > 25))):
        return torch.ops.aten._euclidean_dist(x1, x2)
    d = _differences(x1, x2)
    if p == 0:
        return (d != 0).to(x1.dtype).sum(-1)
    if p == 1:
        return d.abs().sum(-1)
    if p == 2:
        return (d * d).sum(-1).sqrt()
    if math.isinf(p):
        return d.abs().amax(-1)
    return d.abs().pow(p).sum(-1).pow(1 / p)


def _cdist_gradient(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, p: float,
                    dist: torch.Tensor) -> torch.Tensor:
    """The gradient of `_cdist_forward` with respect to x1 (eager's kernels)."""
    if p == 0 or x1.shape[-2] == 0 or x2.shape[-2] == 0:
        return torch.zeros_like(x1)
    d = _differences(x1, x2)
    g, r = grad.unsqueeze(-1), dist.unsqueeze(-1)
    zero = torch.zeros_like(d)
    if p == 1:
        each = d.sign() * g
    elif p == 2:
        each = torch.where(r == 0, zero, g * d / r)
    elif math.isinf(p):
        each = g * d.sign() * (d.abs() == r).to(d.dtype)
    elif p < 2:
        each = torch.where((r == 0) | ((d == 0) & (p < 1)), zero,
                           d.sign() * d.abs().pow(p - 1) * g / r.pow(p - 1))
    else:
        each = torch.where(r == 0, zero, d * d.abs().pow(p - 2) * g / r.pow(p - 1))
    return each.sum(-2)


def _forward(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """_cdist_forward(x1, x2, p, compute_mode)  =>  `_cdist`"""
    a = arguments(node)
    if a["x1"].meta["val"].is_complex():
        return None
    return inline_call(graph, node, _cdist, a["x1"], a["x2"], float(a["p"]),
                       a["compute_mode"])


def _backward(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """_cdist_backward(grad, x1, x2, p, cdist)  =>  `_cdist_gradient`"""
    grad, x1, x2, p, dist = node.args[:5]
    return inline_call(graph, node, _cdist_gradient, grad, x1, x2, float(p), dist)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten._cdist_forward.default: _forward,
    torch.ops.aten._cdist_backward.default: _backward,
}
