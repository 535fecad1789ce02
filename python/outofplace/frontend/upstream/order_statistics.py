"""`median`, `nanmedian` and `kthvalue`, which torch-mlir neither defines nor lowers (and
PyTorch does not decompose), as a sort and the position of the element it picks.

Eager's CPU kernels pick the k-th smallest element with NaN above every number:
`median` the lower median ((n - 1) // 2), or the row's first NaN where it has one;
`nanmedian` the lower median of the numbers, a row of NaN alone NaN; `kthvalue` the
k-th. Of equal elements `median` and `nanmedian` give the one of the lesser index (their
partition compares `(value, index)`); `kthvalue`'s quickselect gives any, and this gives
the lesser-index one as well. Here the value is the k-th of the row sorted (NaN last:
outofplace-upstream-nan-order), and its index that of the element it is in `(value,
index)` order: among the elements equal to it, the one whose rank among them is k less
the count of smaller elements (a cumulative count of the equal ones). Of a row of NaN
alone, nanmedian's index is the row's first (eager's kernel leaves whichever its
partition, whose comparator no order satisfies there, ends on).

Upstream: no issue found (torch-mlir defines none of `aten.median`, `aten.nanmedian`;
it defines `aten.kthvalue` but its StableHLO lowering has no pattern for it: NOT_LOWERED
is not needed, the rewrite takes it first).
Canary: test/pytest/test_fx_upstream_canaries.py::test_order_statistics_do_not_lower.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[order_statistics].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import arguments
from ..inline import inline_call


def _kth(x: torch.Tensor, k: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k-th smallest element along `dim` (k: a 0-based position per row, kept
    dimension), NaN the greatest, and its index in `(value, index)` order."""
    value = torch.sort(x, dim).values.gather(dim, k)
    nan = torch.isnan(value)
    equal = torch.where(nan, torch.isnan(x), x == value)
    below = torch.where(nan, (~torch.isnan(x)).sum(dim, keepdim=True),
                        (x < value).sum(dim, keepdim=True))
    rank = equal.to(torch.int64).cumsum(dim)
    hit = equal & (rank == k - below + 1)
    return value, hit.to(torch.int32).argmax(dim, keepdim=True)


def _rows(x: torch.Tensor, dim: int | None) -> tuple[torch.Tensor, int]:
    return (x.reshape(-1), 0) if dim is None else (x, dim % max(x.dim(), 1))


def _median(x: torch.Tensor, dim: int | None = None, keepdim: bool = False,
            ignore_nan: bool = False) -> Any:
    """eager's median (ignore_nan: nanmedian), of every element (dim None: the value
    alone) or along `dim` (the values and their indices)."""
    scalar = x.dim() == 0
    rows, d = _rows(x.reshape(1) if scalar else x, dim)
    nan = torch.isnan(rows)
    if ignore_nan:
        count = (~nan).sum(d, keepdim=True)
        k = torch.clamp((count - 1) // 2, min=0)
        value, index = _kth(rows, k, d)
    else:
        k = torch.full_like(rows.narrow(d, 0, 1), (rows.shape[d] - 1) // 2,
                            dtype=torch.int64)
        value, index = _kth(rows, k, d)
        has_nan = nan.any(d, keepdim=True)
        value = torch.where(has_nan, torch.full_like(value, float("nan")), value)
        index = torch.where(has_nan, nan.to(torch.int32).argmax(d, keepdim=True), index)
    if dim is None:
        return value.reshape(())
    if scalar:
        return value.reshape(()), index.reshape(())
    if not keepdim:
        value, index = value.squeeze(d), index.squeeze(d)
    return value, index


def _kthvalue(x: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor]:
    scalar = x.dim() == 0
    rows, d = _rows(x.reshape(1) if scalar else x, dim)
    position = torch.full_like(rows.narrow(d, 0, 1), k - 1, dtype=torch.int64)
    value, index = _kth(rows, position, d)
    if scalar:
        return value.reshape(()), index.reshape(())
    if not keepdim:
        value, index = value.squeeze(d), index.squeeze(d)
    return value, index


def _declined(node: torch.fx.Node) -> bool:
    """An empty input (eager raises) or a complex one: left to be refused."""
    x = node.args[0].meta["val"]
    return x.numel() == 0 or x.is_complex() or x.dtype == torch.bool


def _median_rewrite(ignore_nan: bool, with_dim: bool) -> Callable[..., Any]:
    def rewrite(graph: torch.fx.Graph, node: torch.fx.Node) -> Any:
        """median(x[, dim, keepdim])  =>  `_median`: a sort and its element's position"""
        if _declined(node):
            return None
        if not with_dim:
            return inline_call(graph, node, _median, node.args[0], None, False, ignore_nan)
        a = arguments(node)
        result = inline_call(graph, node, _median, a["input"], a["dim"], a["keepdim"],
                             ignore_nan)
        return tuple(result)
    return rewrite


def _kthvalue_rewrite(graph: torch.fx.Graph, node: torch.fx.Node) -> Any:
    """kthvalue(x, k, dim, keepdim)  =>  `_kthvalue`"""
    if _declined(node):
        return None
    a = arguments(node)
    return tuple(inline_call(graph, node, _kthvalue, a["input"], a["k"], a["dim"],
                             a["keepdim"]))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.median.default: _median_rewrite(False, False),
    torch.ops.aten.median.dim: _median_rewrite(False, True),
    torch.ops.aten.nanmedian.default: _median_rewrite(True, False),
    torch.ops.aten.nanmedian.dim: _median_rewrite(True, True),
    torch.ops.aten.kthvalue.default: _kthvalue_rewrite,
}
