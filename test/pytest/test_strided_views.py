"""frontend/strided_views.py: `as_strided` and `unfold` of a root written in place,
against eager on both paths, float32 and float64."""

from __future__ import annotations

import pytest
import torch

from differential import assert_matches_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def both_paths(f, *args):
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def read_after_write(x):
    windows = x.unfold(0, 3, 2)  # overlapping windows of x
    x.mul_(2)
    return windows.sum(-1)


def write_through_as_strided(x):
    diagonal = x.as_strided((3,), (5,))  # x's diagonal (4x4, stride 5)
    diagonal.add_(10)
    return x.sum()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f, shape", [(read_after_write, (7,)),
                                      (write_through_as_strided, (4, 4))],
                         ids=["read_after_write", "write_through_as_strided"])
def test_matches_eager_on_both_paths(f, shape, dtype):
    torch.manual_seed(0)
    both_paths(f, torch.randn(shape, dtype=dtype))
