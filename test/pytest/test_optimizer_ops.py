"""frontend/optimizer_ops.py: `_foreach_*` and `_fused_*` optimizer ops as per-tensor
math, against eager on both paths, float32 and float64."""

from __future__ import annotations

import pytest
import torch

from differential import assert_matches_eager, by_dynamo

DTYPES = [torch.float32, torch.float64]


def both_paths(f, *args):
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def foreach_step(p1, p2, g1, g2):
    torch._foreach_mul_([g1, g2], 0.9)
    torch._foreach_add_([p1, p2], [g1, g2], alpha=-0.1)
    torch._foreach_addcmul_([p1, p2], [g1, g2], [g2, g1], value=0.01)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_foreach_step_matches_eager_on_both_paths(dtype):
    torch.manual_seed(0)
    both_paths(foreach_step, *(torch.randn(3, 2, dtype=dtype) for _ in range(4)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", ["outofplace.compile", "torch.compile"])
def test_a_step_with_no_gradient_does_nothing_as_in_eager(path, dtype):
    """`opt.step()` before any backward (no parameter has a gradient) is a program of no
    tensor but a `torch.no_grad` region: it compiles and leaves the parameters as eager
    leaves them (it raised StopIteration looking for the region's fake mode)."""
    from differential import run_on_path

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 3).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = [p.detach().clone() for p in model.parameters()]

    def step():
        opt.step()

    def nothing():
        with torch.no_grad():
            pass

    assert run_on_path(path, step, (), ()) is None
    assert run_on_path(path, nothing, (), ()) is None
    for p, b in zip(model.parameters(), before):
        torch.testing.assert_close(p, b, rtol=0, atol=0)
