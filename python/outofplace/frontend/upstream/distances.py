"""`torch.cdist`'s and `torch.pdist`'s kernels, which torch-mlir does not define (and
PyTorch does not decompose): `_cdist_forward`, `_pdist_forward` and their gradients
`_cdist_backward`, `_pdist_backward`, as eager's CPU kernels compute them (PyTorch's
`cdist_impl`, `pdist_forward` and their backward kernels).

The forward is eager's choice of two: for p = 2 with `compute_mode` 1
(use_mm_for_euclid_dist), or 0 (the default) with more than 25 rows on either side,
`_euclidean_dist` (norms and a matrix product, which PyTorch decomposes); otherwise the
p-norm of each pair's difference: the count of its nonzero elements (p = 0), the sum of
their magnitudes (1), the root of the sum of squares (2), the greatest magnitude (inf),
(sum |d|^p)^(1/p) otherwise. The gradient is eager's formula per p, summed over the
other side's rows (a pair at distance 0 gives none; p = inf gives to the elements at the
distance). `pdist` is the p-norm of each pair of rows i < j in that order (eager's
kernel, never the product form), its gradient each pair's added to row i and taken
from row j.

Upstream: no issue found (torch-mlir defines none of the four ops).
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
    return _norms(_differences(x1, x2), p)


def _norms(d: torch.Tensor, p: float) -> torch.Tensor:
    """The p-norm of each difference d[..., :] (eager's kernels' forms)."""
    if p == 0:
        return (d != 0).to(d.dtype).sum(-1)
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
    return _pair_gradients(_differences(x1, x2), grad, dist, p).sum(-2)


def _pair_gradients(d: torch.Tensor, grad: torch.Tensor, dist: torch.Tensor, p: float
                    ) -> torch.Tensor:
    """Each difference d[..., :]'s gradient, its norm `dist` and its gradient `grad`
    (eager's formula per p; p = 0 excluded)."""
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
    return each


def _pairs(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows (i, j) of each pair i < j, in pdist's order."""
    i, j = torch.triu_indices(n, n, 1, device=device)
    return i, j


def _pdist(x: torch.Tensor, p: float) -> torch.Tensor:
    i, j = _pairs(x.shape[0], x.device)
    return _norms(x[i] - x[j], p)


def _pdist_gradient(grad: torch.Tensor, x: torch.Tensor, p: float, dist: torch.Tensor
                    ) -> torch.Tensor:
    """The gradient of `_pdist_forward` (eager's kernels): each pair's, added to its
    first row and taken from its second."""
    if p == 0 or x.shape[0] < 2:
        return torch.zeros_like(x)
    i, j = _pairs(x.shape[0], x.device)
    each = _pair_gradients(x[i] - x[j], grad, dist, p)
    return torch.zeros_like(x).index_add(0, i, each).index_add(0, j, each, alpha=-1)


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


def _pdist_forward(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """_pdist_forward(x, p)  =>  `_pdist`"""
    a = arguments(node)
    if a["input"].meta["val"].is_complex():
        return None
    return inline_call(graph, node, _pdist, a["input"], float(a["p"]))


def _pdist_backward(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """_pdist_backward(grad, x, p, pdist)  =>  `_pdist_gradient`"""
    grad, x, p, dist = node.args[:4]
    return inline_call(graph, node, _pdist_gradient, grad, x, float(p), dist)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten._cdist_forward.default: _forward,
    torch.ops.aten._cdist_backward.default: _backward,
    torch.ops.aten._pdist_forward.default: _pdist_forward,
    torch.ops.aten._pdist_backward.default: _pdist_backward,
}
