"""outofplace-fold-transposes-into-dots (transforms/fold_transposes_into_dots.py) on programs: every
product with transposed or unit-broadcast operands matches eager on every engine, and the
StableHLO keeps no transpose of a weight."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import outofplace
from outofplace.backends.xla import legalize_for_cpu
from differential import assert_matches_eager


def linear_2d(w, b, x):
    return F.linear(x, w, b)


def linear_4d(w, b, x):
    return F.linear(x.view(2, 1, 3, 4), w, b)


def linear_3d_batched(w, b, x):  # the weight broadcast to x's batch of 3 by torch-mlir
    return F.linear(x, w, b)


def shared_keys(q, k):  # one key matrix broadcast to every query batch
    return q @ k.expand(3, -1, -1)


def linear_backward_shapes(w, x, g):  # the weight gradient: g^T @ x
    return g.t() @ x, g @ w


def bmm_transposed(a, b):
    return torch.bmm(a.transpose(1, 2), b.transpose(1, 2))


def einsum_permuted(a, b):
    return torch.einsum("bji,bkj->bik", a, b)


def matmul_broadcast(a, b):
    return a @ b.mT


def attention_scores(q, k):
    return (q @ k.transpose(-1, -2)).softmax(-1) @ k


def linear_then_written(w, x, out):
    out.add_(F.linear(x, w))  # a product feeding an in-place update


PROGRAMS = [
    (linear_2d, lambda d: (torch.randn(6, 4, dtype=d), torch.randn(6, dtype=d),
                           torch.randn(1, 4, dtype=d))),
    (linear_4d, lambda d: (torch.randn(5, 4, dtype=d), torch.randn(5, dtype=d),
                           torch.randn(6, 4, dtype=d))),
    (linear_3d_batched, lambda d: (torch.randn(6, 4, dtype=d), torch.randn(6, dtype=d),
                                   torch.randn(3, 1, 4, dtype=d))),
    (shared_keys, lambda d: (torch.randn(3, 2, 4, dtype=d), torch.randn(4, 5, dtype=d))),
    (linear_backward_shapes, lambda d: (torch.randn(6, 4, dtype=d),
                                        torch.randn(3, 4, dtype=d),
                                        torch.randn(3, 6, dtype=d))),
    (bmm_transposed, lambda d: (torch.randn(2, 4, 3, dtype=d), torch.randn(2, 5, 4, dtype=d))),
    (einsum_permuted, lambda d: (torch.randn(2, 4, 3, dtype=d), torch.randn(2, 5, 4, dtype=d))),
    (matmul_broadcast, lambda d: (torch.randn(2, 1, 3, 4, dtype=d),
                                  torch.randn(5, 4, dtype=d))),
    (attention_scores, lambda d: (torch.randn(1, 2, 1, 8, dtype=d),
                                  torch.randn(1, 2, 6, 8, dtype=d))),
    (linear_then_written, lambda d: (torch.randn(6, 4, dtype=d), torch.randn(2, 4, dtype=d),
                                     torch.randn(2, 6, dtype=d))),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("program,make", PROGRAMS, ids=[p.__name__ for p, _ in PROGRAMS])
def test_products_match_eager(program, make, dtype):
    torch.manual_seed(0)
    assert_matches_eager(program, *make(dtype))


def test_linear_reads_its_weight_untransposed():
    module = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    compiled = outofplace.compile(module, (torch.randn(1, 1, 4),))
    # the XLA engine's module (its legalization runs the pass), not the exported one
    engine_module = legalize_for_cpu(compiled.stablehlo)[0]
    assert "stablehlo.transpose" not in engine_module
    assert engine_module.count("stablehlo.dot_general") == 2


def test_batched_linear_reads_its_weight_once():
    """A 3-d input of batch 8: torch-mlir broadcasts the weight to the batch (XLA:CPU
    materialised [64, 2048, 5632] floats for a batch of 64); the engine's dot reads it once."""
    compiled = outofplace.compile(torch.nn.Linear(4, 6), (torch.randn(8, 1, 4),))
    broadcast_weight = "tensor<8x4x6xf32>"
    assert broadcast_weight in compiled.stablehlo  # torch-mlir's form
    engine_module = legalize_for_cpu(compiled.stablehlo)[0]
    assert broadcast_weight not in engine_module
    assert "batching_dims" not in engine_module
