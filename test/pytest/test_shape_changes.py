"""frontend/shape_changes.py: in-place shape changes of tensors the program made, as
views, against eager on both paths, float32 and float64."""

from __future__ import annotations

import pytest
import torch

from differential import assert_matches_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def both_paths(f, *args):
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def local_shape_changes(x):
    z = x * 2
    z.unsqueeze_(0)
    z.transpose_(0, 1)
    w = x + 1
    w.t_()
    z.add_(1)
    return z, w


def local_resize(x):
    y = x.clone().view(-1)
    y.resize_(3, 2)  # fewer elements: a view of the first six
    y.mul_(2)
    return y


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f", [local_shape_changes, local_resize], ids=lambda f: f.__name__)
def test_matches_eager_on_both_paths(f, dtype):
    torch.manual_seed(0)
    both_paths(f, torch.randn(3, 4, dtype=dtype))
