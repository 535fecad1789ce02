"""Ops PyTorch's op database (test/fuzz/op_db_sweep.py) found reaching torch-mlir's
lowering and failing there with a raw error, or aborting the process: each now compiles
and matches eager (decomposed by PyTorch's or torch-mlir's tables, or by ours), or is
refused as an UnsupportedMutationError naming the op and the user's line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import outofplace
from differential import assert_matches_eager, by_dynamo


def einsum_to_scalar(x):
    return torch.einsum("i->", x)  # torch-mlir's decomposition left an unranked sum: abort


def cross_entropy(x, target):
    return F.cross_entropy(x, target)  # aborted the same way


def clamp_max_tensor(x, bound):
    return x.clamp_max(bound) + 1


def clamp_max_tensor_(x, bound):
    x.clamp_max_(bound)  # the twin, clamp_max.Tensor, has no lowering: decomposed


def diag_embed(x):
    return torch.diag_embed(x) * 2


def logcumsumexp(x):
    return x.logcumsumexp(0)  # torch-mlir's log(cumsum(exp(x))) overflowed to inf


def trace(x):
    return torch.trace(x[:, :3]) + torch.trace(x)  # (no lowering: PyTorch's decomposition)


def cumprod(x):
    return x.cumprod(0) + 1  # (no lowering: a doubling scan, upstream/scans.py)


def norms(x):  # norm.Scalar and linalg_norm: no pattern (NOT_LOWERED)
    return torch.dist(x, x.flip(0)), x.norm(3), torch.linalg.norm(x, dim=1), \
        torch.linalg.norm(x, float("inf"))


def isclose(x):  # (no pattern: its CompositeImplicitAutograd kernel)
    return torch.isclose(x, x * (1 + 1e-9)), torch.isclose(x, x, equal_nan=True), \
        torch.isclose(x, x + 0.1, atol=0.2)


def adaptive_pools(x):  # (no pattern: torch-mlir's and PyTorch's decompositions)
    return F.adaptive_avg_pool1d(x[0], 4), F.adaptive_max_pool1d(x[0], 4), \
        F.adaptive_max_pool2d(x, (3, 4))


def empty_then_written(x):
    y = torch.empty_like(x)
    y[1:] = x[1:]
    y[0] = 0
    return y


def empty_read_and_written(x):  # nothing of the empty tensor reaches the output
    z = torch.empty(3)  # (eager's memory may hold a NaN or an inf: times 0, still one)
    return z.mul_(0).nan_to_num_(0.0, 0.0, 0.0).add_(x)


COMPILED = [
    (einsum_to_scalar, (torch.randn(3),)),
    (cross_entropy, (torch.randn(2, 3), torch.tensor([0, 2]))),
    (clamp_max_tensor, (torch.randn(4), torch.tensor(0.2))),
    (clamp_max_tensor_, (torch.randn(4), torch.tensor(0.2))),
    (diag_embed, (torch.randn(2, 3),)),
    (logcumsumexp, (torch.tensor([1e4, 1e4, -1e3, 3.0, float("-inf"), 2.0]),)),
    (logcumsumexp, (torch.randn(5, 3),)),
    (trace, (torch.randn(3, 4),)),
    (cumprod, (torch.randn(4),)),
    (norms, (torch.randn(3, 4, dtype=torch.float64),)),
    (isclose, (torch.tensor([1.0, float("nan"), float("inf"), -2.0, 0.0]),)),
    (adaptive_pools, (torch.randn(2, 3, 7, 9),)),
    (empty_then_written, (torch.randn(3, 2),)),
    (empty_read_and_written, (torch.randn(3),)),
]


@pytest.mark.parametrize("f, args", COMPILED, ids=[f.__name__ for f, _ in COMPILED])
def test_compiles_and_matches_eager(f, args):
    assert_matches_eager(f, *args)


def mse_of_two_dtypes(x, target):
    return F.mse_loss(x, target)


def l1_of_two_dtypes(x, target):
    return F.l1_loss(x, target) + torch.broadcast_tensors(x, target[0])[1].sum()


@pytest.mark.parametrize("f", [mse_of_two_dtypes, l1_of_two_dtypes])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float64),
                                    (torch.float64, torch.float32)], ids=["32-64", "64-32"])
def test_broadcast_of_two_dtypes_matches_eager_on_both_paths(f, dtypes):
    """`broadcast_tensors` of tensors of two dtypes (a loss of a float32 output against a
    float64 target): torch-mlir's lowering wants one element type in the list and failed
    ("operand types should have the same type as the list contained type"); it is
    decomposed into each tensor's `expand`."""
    args = (torch.randn(4, 3, dtype=dtypes[0]), torch.randn(4, 3, dtype=dtypes[1]))
    assert_matches_eager(f, *args)
    by_dynamo(f, f, args, {})


def cholesky(x):
    return torch.linalg.cholesky(x @ x.mT + torch.eye(3))


def index_copy_0d(x, i, v):
    x.index_copy_(0, i, v)


def heaviside_promoted(x):
    return torch.heaviside(x, torch.tensor(0.5))  # a float32 value for float64 x


REFUSED = [
    (cholesky, (torch.randn(3, 3),), "aten.linalg_cholesky_ex", "no definition"),
    (index_copy_0d, (torch.tensor(1.0), torch.tensor([0]), torch.tensor(2.0)),
     "torch.aten.index_copy", "0-d tensor"),
    (heaviside_promoted, (torch.randn(4, dtype=torch.float64),), "torch.aten.heaviside",
     "fails on this statement"),
]


@pytest.mark.parametrize("f, args, op, reason", REFUSED, ids=[r[0].__name__ for r in REFUSED])
def test_refused_at_the_line_naming_the_op(f, args, op, reason):
    with pytest.raises(outofplace.UnsupportedMutationError) as caught:
        outofplace.compile(f, args)
    assert op in caught.value.op.split(", ")
    assert reason in caught.value.reason
    assert caught.value.location.endswith(f":{f.__code__.co_firstlineno + 1}")
