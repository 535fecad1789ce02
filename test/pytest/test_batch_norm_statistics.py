"""Batch norm's statistics in training (frontend/decompositions.py, `_statistics`): summed
in float64 as eager's CPU kernel sums them, without a float64 copy of the activation,
and computed once for the forward and the statistics autograd saves for the backward
(`_native_batch_norm_legit_functional`, replayed beside `batch_norm`). Against eager on
both paths (`outofplace.compile` on every engine, `torch.compile(backend="outofplace")`),
float32 and float64."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import outofplace
from differential import assert_matches_eager, by_dynamo
from outofplace.ir_utils import all_operations

DTYPES = [torch.float32, torch.float64]


class BatchNormGradients(nn.Module):
    """A training-mode batch norm (running statistics written) and the gradients of a
    loss through it: the backward reads the saved mean and inverse deviation."""

    def __init__(self, norm: type, channels: int) -> None:
        super().__init__()
        self.bn = norm(channels, momentum=0.3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.bn(x)
        loss = (y * torch.linspace(1, 2, y.numel(), dtype=y.dtype).view(y.shape)).sum()
        grad_w, grad_b = torch.autograd.grad(loss, [self.bn.weight, self.bn.bias])
        return y, grad_w, grad_b


SHAPES = {nn.BatchNorm1d: [(16, 4), (3, 4, 7)], nn.BatchNorm2d: [(3, 4, 5, 6)]}
CASES = [(norm, shape) for norm, shapes in SHAPES.items() for shape in shapes]


def _model(norm: type, shape: tuple, dtype: torch.dtype, offset: float = 1.0
           ) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = BatchNormGradients(norm, shape[1]).to(dtype)
    with torch.no_grad():
        model.bn.weight.uniform_(0.5, 2)
        model.bn.bias.normal_()
    return model, torch.randn(shape, dtype=dtype) * 3 + offset


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm, shape", CASES, ids=[str(s) for _, s in CASES])
def test_batch_norm_gradients_match_eager_on_both_paths(norm, shape, dtype):
    model, x = _model(norm, shape, dtype)
    assert_matches_eager(model, x)
    model, x = _model(norm, shape, dtype)
    by_dynamo(model, model, (x,), {})


# 8,192 elements a channel: the float32 sums drifted (3/4 of the outputs off eager's)
FAR = [*CASES, (nn.BatchNorm2d, (32, 4, 16, 16))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm, shape", FAR, ids=[str(s) for _, s in FAR])
def test_statistics_far_from_zero_mean_match_eager_on_both_paths(norm, shape, dtype):
    """The output and the running statistics of inputs whose mean is far from zero."""
    torch.manual_seed(0)
    model = norm(shape[1], momentum=0.3).to(dtype)
    x = torch.randn(shape, dtype=dtype) * 3 + 100
    assert_matches_eager(model, x)
    by_dynamo(model, model, (x,), {})


def test_statistics_are_two_float64_sums_fused_with_their_conversions():
    """The program sums x and the squared deviations in float64 once each (the forward's
    statistics and the saved ones are the same ops; a float32 program's other sums are
    float32), and each widening of an
    activation-sized tensor feeds its sum alone (XLA fuses it: no float64 copy)."""
    model, x = _model(nn.BatchNorm2d, (3, 4, 5, 6), torch.float32)
    module = outofplace.compile(model, (x,), cache=False).module
    from torch_mlir import ir

    def f64(value: ir.Value) -> bool:
        return ir.RankedTensorType(value.type).element_type == ir.F64Type.get()

    with module.context:
        ops = all_operations(module.operation)
        sums = [op for op in ops if op.name == "stablehlo.reduce" and f64(op.results[0])]
        assert len(sums) == 2
        for op in ops:
            if op.name == "stablehlo.convert" and f64(op.results[0]) and \
                    list(ir.RankedTensorType(op.results[0].type).shape) == list(x.shape):
                users = [use.owner.name for use in op.results[0].uses]
                assert users == ["stablehlo.reduce"], users
