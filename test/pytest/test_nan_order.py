"""transforms/upstream/nan_order.py (outofplace-upstream-nan-order): sorts and
arg-reductions of floats with NaN (and infinities, signed zeros, ties) against eager, on
every engine and on both paths, in float32 and float64. torch-mlir's comparators ignore
NaN: these were silently wrong. Its canaries are in test_upstream_canaries.py."""

from __future__ import annotations

import math

import pytest
import torch

from differential import assert_matches_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def _with_nan(d):
    """Rows with NaNs (one, two, all), infinities, signed zeros and ties."""
    nan, inf = math.nan, math.inf
    return torch.tensor([[3.0, nan, 1.0, 5.0, 1.0, -inf],
                         [2.0, 4.0, nan, -1.0, nan, 0.5],
                         [nan, nan, nan, nan, nan, nan],
                         [-inf, -inf, 0.0, -0.0, 1.0, inf],
                         [0.0, -0.0, 7.0, 7.0, -2.0, -2.0]], dtype=d)


def sorts(x):
    ascending, descending = torch.sort(x, dim=1), torch.sort(x, dim=1, descending=True)
    return (ascending.values, descending.values, torch.topk(x, 3, dim=1).values,
            torch.topk(x, 2, dim=1, largest=False).values, torch.msort(x),
            torch.sort(x, dim=0).values)


def sorted_positions(x):  # rows without ties: the indices are eager's
    return (torch.sort(x, dim=1).indices, torch.argsort(x, dim=1, descending=True),
            torch.topk(x, 3, dim=1).indices)


def arg_reductions(x):
    return (torch.argmax(x, dim=1), torch.argmin(x, dim=1), torch.max(x, dim=1),
            torch.min(x, dim=1, keepdim=True), torch.argmax(x), torch.argmin(x[3:]),
            torch.max(x, dim=0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f", [sorts, arg_reductions], ids=lambda f: f.__name__)
def test_matches_eager_on_both_paths(f, dtype):
    x = _with_nan(dtype)
    assert_matches_eager(f, x)
    by_dynamo(f, f, (x,), {})


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sorted_positions_match_eager(dtype):
    nan, inf = math.nan, math.inf
    x = torch.tensor([[3.0, nan, 1.0, 5.0, -inf, 2.0],
                      [2.0, 4.0, -1.0, inf, nan, 0.5]], dtype=dtype)
    assert_matches_eager(sorted_positions, x)
    by_dynamo(sorted_positions, sorted_positions, (x,), {})
