"""frontend/decompositions.py: the FX rewrites that carry outofplace's semantics, each
against eager on both paths (`outofplace.compile` on every engine, and
`torch.compile(backend="outofplace")`), in float32 and float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from differential import assert_matches_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def both_paths(f, *args):
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def dropout_in_eval(x):
    y = F.dropout(x, p=0.5, training=False)  # eager returns x itself
    y.mul_(2)
    return x + 1


def put(x, index, source):
    x.put_(index, source)
    return x.sum()


def put_accumulate_into_transposed(x, index, source):
    x.t().put_(index, source, accumulate=True)  # not contiguous: row-major of the view


def fill_diagonal(x):
    x.fill_diagonal_(3.0)
    return x * 2


def fill_diagonal_wrapped(x):
    x.fill_diagonal_(-1.0, wrap=True)  # a tall matrix: every (columns + 1)-th element


def batch_norm_training(x, weight, bias, mean, var):
    # training mode writes the running statistics, which its schema does not say
    return F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.3)


def instance_norm_with_running_stats(x, mean, var):
    return F.instance_norm(x, mean, var, use_input_stats=True, momentum=0.2)


CASES = [
    (dropout_in_eval, lambda d: (torch.randn(4, 3, dtype=d),)),
    (put, lambda d: (torch.randn(3, 4, dtype=d), torch.tensor([0, 5, -1]),
                     torch.randn(3, dtype=d))),
    (put_accumulate_into_transposed, lambda d: (
        torch.randn(3, 4, dtype=d), torch.tensor([1, 1, 7]), torch.randn(3, dtype=d))),
    (fill_diagonal, lambda d: (torch.randn(3, 4, dtype=d),)),
    (fill_diagonal_wrapped, lambda d: (torch.randn(7, 2, dtype=d),)),
    (batch_norm_training, lambda d: (
        torch.randn(4, 3, 2, dtype=d), torch.randn(3, dtype=d), torch.randn(3, dtype=d),
        torch.randn(3, dtype=d), torch.rand(3, dtype=d) + 0.5)),
    (instance_norm_with_running_stats, lambda d: (
        torch.randn(2, 3, 5, dtype=d), torch.randn(3, dtype=d),
        torch.rand(3, dtype=d) + 0.5)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f, make", CASES, ids=[f.__name__ for f, _ in CASES])
def test_matches_eager_on_both_paths(f, make, dtype):
    torch.manual_seed(0)
    both_paths(f, *make(dtype))
