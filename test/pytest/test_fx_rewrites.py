"""frontend/fx_rewrites.py's own rewrites, against eager on both paths, float32 and
float64: a "view" op that copied in the trace gets a clone (a write to its base must not
reach the copy), and the elements of a list view (split/chunk/unbind) become slices and
selects of the base (a write through one reaches the base)."""

from __future__ import annotations

import pytest
import torch

from differential import assert_matches_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def both_paths(f, *args):
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def view_that_copied(x):
    y = x.t().reshape(-1)  # x.t() is not contiguous: reshape copies
    x.add_(1)
    return y * 2


def list_view_elements(x):
    first, second = x.split(2)
    second.mul_(3)  # a write through the second element reaches x
    rows = x.unbind(1)
    rows[0].sub_(1)
    return first + 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f", [view_that_copied, list_view_elements],
                         ids=lambda f: f.__name__)
def test_matches_eager_on_both_paths(f, dtype):
    torch.manual_seed(0)
    both_paths(f, torch.randn(4, 3, dtype=dtype))
