"""frontend/out_arguments.py: `out=` writes as the functional op and a whole-tensor
copy, against eager on both paths, float32 and float64."""

from __future__ import annotations

import pytest
import torch

from differential import assert_matches_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def both_paths(f, *args):
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def out_of_the_same_shape(a, b, z):
    torch.add(a, b, out=z)
    torch.mul(z, 2, out=a)
    return z + a


def out_into_a_view(a, b, z):
    torch.cat([a[:1], b[:1]], out=z[1:3])  # a view of z, of the result's shape


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f", [out_of_the_same_shape, out_into_a_view],
                         ids=lambda f: f.__name__)
def test_matches_eager_on_both_paths(f, dtype):
    torch.manual_seed(0)
    both_paths(f, torch.randn(2, 3, dtype=dtype), torch.randn(2, 3, dtype=dtype),
               torch.randn(4, 3, dtype=dtype) if f is out_into_a_view
               else torch.randn(2, 3, dtype=dtype))
