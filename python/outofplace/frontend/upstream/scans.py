"""Cumulative ops torch-mlir lowers wrongly or not at all: `logcumsumexp`, `cumprod`,
`cummax`, `cummin` and the `cumsum` of a 0-d tensor.

torch-mlir decomposes logcumsumexp as log(cumsum(exp(x))), which overflows (inf for
x = 1e4, where eager gives 1e4). Upstream: llvm/torch-mlir#4748 (open: a stable scan),
after llvm/torch-mlir#4183 (the op's support). `cumprod` (a diffusion model's noise
schedule, `alphas.cumprod(0)`) has no pattern, and PyTorch's decomposition of it does
not lower either; the cumsum of a 0-d tensor fails to legalize; torch-mlir defines neither
`cummax` nor `cummin` (and PyTorch does not decompose them); upstream: no issue found.
The scans are ceil(log2(n)) doubling steps (each element the product of at most
log2(n) partial products: eager's sequential product rounds in another order, within
the dtype's rounding).
Canaries: test/pytest/test_fx_upstream_canaries.py::test_logcumsumexp_is_log_of_cumsum_of_exp,
::test_cumsum_of_0d_does_not_lower, ::test_cumprod_does_not_lower,
::test_cummax_and_cummin_are_undefined.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call
from ..inline import inline_call


def _shifted(t: torch.Tensor, dim: int, shift: int, fill: float | int) -> torch.Tensor:
    """`t` moved `shift` places along `dim`, the first `shift` places `fill`: the other
    operand of a doubling scan's step."""
    return torch.cat([torch.full_like(t.narrow(dim, 0, shift), fill),
                      t.narrow(dim, 0, t.shape[dim] - shift)], dim)


def _log_add_exp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """log(exp(a) + exp(b)) without overflow: max + log1p(exp(-|a - b|)); an infinite max
    is the answer (where a - b is nan)."""
    high = torch.maximum(a, b)
    return torch.where(torch.isinf(high), high,
                       high + torch.log1p(torch.exp(-(a - b).abs())))


def _log_cum_sum_exp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Prefix log-sum-exp along `dim` as ceil(log2(n)) doubling steps, each one
    `_log_add_exp` of the running result and itself shifted by a power of two (padded with
    -inf): as exact as eager's, where log(cumsum(exp(x))) overflows at exp(89)."""
    if x.dim() == 0:
        return x.clone()
    shift = 1
    while shift < x.shape[dim]:
        x = _log_add_exp(x, _shifted(x, dim, shift, float("-inf")))
        shift *= 2
    return x


def _cumulative_product(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None
                        ) -> torch.Tensor:
    """Prefix products along `dim` as doubling steps, each the running result times
    itself shifted by a power of two (padded with ones), in `dtype` when given."""
    x = x.to(dtype) if dtype is not None else x.clone()
    if x.dim() == 0:
        return x
    shift = 1
    while shift < x.shape[dim]:
        x = x * _shifted(x, dim, shift, 1)
        shift *= 2
    return x


def _cumulative_extreme(x: torch.Tensor, dim: int, greatest: bool
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Running maximum (`greatest`) or minimum along `dim` and the index of the element
    it is, as doubling steps: each pair of a running result and the one `shift` before
    it keeps the later unless the earlier beats it (eager's `x >= best`: an equal later
    element takes over; a NaN beats every number and sticks, its index the last NaN's),
    padded with the worst value at index 0 (which every element takes over)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64)
    n = x.shape[dim]
    shape = [1] * x.dim()
    shape[dim] = n
    index = torch.arange(n).reshape(shape).expand(x.shape).contiguous()
    if x.is_floating_point():
        worst = float("-inf") if greatest else float("inf")
    else:
        info = torch.iinfo(x.dtype)
        worst = info.min if greatest else info.max
    values, shift = x.clone(), 1
    while shift < n:
        before = _shifted(values, dim, shift, worst)
        before_index = _shifted(index, dim, shift, 0)
        later_wins = torch.isnan(values) | ~torch.isnan(before) & (
            values >= before if greatest else values <= before)
        values = torch.where(later_wins, values, before)
        index = torch.where(later_wins, index, before_index)
        shift *= 2
    return values, index


def _cummax(graph: torch.fx.Graph, node: torch.fx.Node) -> tuple[torch.fx.Node, ...] | None:
    """cummax(x, d) / cummin(x, d)  =>  the doubling scan of `_cumulative_extreme`"""
    x, dim = node.args[:2]
    if x.meta["val"].dtype == torch.bool or x.meta["val"].is_complex():
        return None
    greatest = node.target is torch.ops.aten.cummax.default
    return tuple(inline_call(graph, node, _cumulative_extreme, x,
                             dim % max(x.meta["val"].dim(), 1), greatest))


def _cumprod(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """x.cumprod(d, dtype=...)  =>  the doubling scan of `_cumulative_product`; x.cumprod_(d)
    its copy into x."""
    x, dim = node.args[:2]
    # (the result's dtype: `dtype=` when given, else eager's promotion, integers to int64)
    dtype = node.meta["val"].dtype
    result = inline_call(graph, node, _cumulative_product, x, dim, dtype)
    if node.target is torch.ops.aten.cumprod_.default:
        return call(graph, torch.ops.aten.copy_.default, x, result)
    return result


def _logcumsumexp(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """x.logcumsumexp(d)  =>  the doubling scan of `_log_cum_sum_exp`."""
    if not node.meta["val"].is_floating_point():
        return None
    return inline_call(graph, node, _log_cum_sum_exp, *node.args, **node.kwargs)


def _cumsum_of_0d(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """cumsum of a 0-d tensor as the cumsum of its one-element view:
    x.view(1).cumsum(0).view(()). (cumprod has no lowering at all.)"""
    self = node.args[0]
    if self.meta["val"].dim() != 0:
        return None
    functional = {torch.ops.aten.cumsum_.default: torch.ops.aten.cumsum.default}
    target = functional.get(node.target, node.target)
    scan = call(graph, target, call(graph, torch.ops.aten.view.default, self, [1]), 0,
                **{k: v for k, v in node.kwargs.items() if k == "dtype"})
    result = call(graph, torch.ops.aten.view.default, scan, [])
    if node.target in functional:
        return call(graph, torch.ops.aten.copy_.default, self, result)
    return result


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.logcumsumexp.default: _logcumsumexp,
    torch.ops.aten.cumsum.default: _cumsum_of_0d,
    torch.ops.aten.cumsum_.default: _cumsum_of_0d,
    torch.ops.aten.cumprod.default: _cumprod,
    torch.ops.aten.cumprod_.default: _cumprod,
    torch.ops.aten.cummax.default: _cummax,
    torch.ops.aten.cummin.default: _cummax,
}
