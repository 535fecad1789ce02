"""frontend/upstream/avg_pool.py: average pooling's gradient and its windows past the
input (ceil_mode), against eager's, in float32 and float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import outofplace

CASES = [  # (input shape, kernel, stride, padding, ceil_mode, count_include_pad,
    # divisor_override)
    ((2, 3, 8, 8), 2, None, 0, False, True, None),
    ((2, 3, 9, 7), 3, 2, 1, False, True, None),
    ((2, 3, 9, 7), 3, 2, 1, False, False, None),
    ((1, 2, 7, 8), (3, 2), (2, 3), (1, 0), True, True, None),
    ((1, 2, 7, 8), 3, 2, 1, True, False, None),
    ((3, 6, 5), 2, 2, 0, True, True, 3),  # unbatched
    ((1, 2, 5, 6, 7), 3, 2, 1, False, False, None),  # 3-d
    ((1, 2, 5, 6, 7), 2, 2, 0, True, True, None),
]


def _pool(case):
    shape, kernel, stride, padding, ceil_mode, include, override = case
    pool = F.avg_pool3d if len(shape) == 5 else F.avg_pool2d
    return lambda x: pool(x, kernel, stride, padding, ceil_mode, include, override)


def _assert_pooling_matches_eager(pool, shape: tuple, dtype: torch.dtype) -> None:
    """`pool(x)` and its gradient, compiled, against eager's."""
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    g = torch.randn(pool(x).shape, dtype=dtype)

    def pooled_and_gradient(x, g):
        out = pool(x)
        return out.detach(), torch.autograd.grad(out, [x], g)[0]

    expected = pooled_and_gradient(x, g)
    got = outofplace.compile(pooled_and_gradient, (x, g))(x, g)
    for e, r in zip(expected, got):
        torch.testing.assert_close(r, e, rtol=1e-6 if dtype == torch.float32 else 1e-14,
                                   atol=1e-6 if dtype == torch.float32 else 1e-14)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]} k{c[1]} s{c[2]} p{c[3]} "
                                             f"ceil={c[4]} include={c[5]} /{c[6]}"
                                             for c in CASES])
def test_pooling_and_its_gradient_match_eager(case, dtype):
    _assert_pooling_matches_eager(_pool(case), case[0], dtype)


ADAPTIVE = [  # (input shape, output size)
    ((2, 3, 8, 7), (3, 5)),  # uneven, overlapping windows
    ((3, 8, 7), 3),  # unbatched
    ((2, 3, 8, 8), 4),  # even: only the gradient is rewritten
    ((1, 2, 5, 6, 7), (2, 4, 3)),  # 3-d
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("case", ADAPTIVE, ids=[f"{c[0]} to {c[1]}" for c in ADAPTIVE])
def test_adaptive_pooling_and_its_gradient_match_eager(case, dtype):
    shape, out = case
    adaptive = F.adaptive_avg_pool3d if len(shape) == 5 else F.adaptive_avg_pool2d
    _assert_pooling_matches_eager(lambda x: adaptive(x, out), shape, dtype)
