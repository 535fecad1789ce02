"""Batch norm in training as eager's CPU kernel computes it (frontend/decompositions.py):
the statistics (`_statistics`) summed in float64 without a float64 copy of the
activation, computed once for the forward and the statistics autograd saves for the
backward (`_native_batch_norm_legit_functional`, replayed beside `batch_norm`); the
output one scale and shift a channel (`_normalize`); the backward's sums in float64
(`_batch_norm_backward`). Against eager on both paths (`outofplace.compile` on every
engine, `torch.compile(backend="outofplace")`), float32 and float64."""

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


class InputGradients(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x.detach().requires_grad_()
        leaves = [x, *self.bn.parameters()]
        return torch.autograd.grad(self.bn(x), leaves, grad)


def test_statistics_are_four_float64_sums_fused_with_their_conversions():
    """A training step sums in float64 four times (a float32 program's other sums are
    float32): the forward x and the squared deviations, once each (the forward's
    statistics and the saved ones are the same ops), the backward the output's gradient
    and the deviations times it (`_batch_norm_backward`, as eager's kernel; PyTorch's
    decomposition summed those in float32); each widening of an activation-sized tensor
    feeds its sum alone (XLA fuses it: no float64 copy)."""
    torch.manual_seed(0)
    x, grad = torch.randn(3, 4, 5, 6), torch.randn(3, 4, 5, 6)
    module = outofplace.compile(InputGradients(), (x, grad), cache=False).module
    from torch_mlir import ir

    def f64(value: ir.Value) -> bool:
        return ir.RankedTensorType(value.type).element_type == ir.F64Type.get()

    with module.context:
        ops = all_operations(module.operation)
        sums = [op for op in ops if op.name == "stablehlo.reduce" and f64(op.results[0])]
        assert len(sums) == 4
        for op in ops:
            if op.name == "stablehlo.convert" and f64(op.results[0]) and \
                    list(ir.RankedTensorType(op.results[0].type).shape) == list(x.shape):
                users = [use.owner.name for use in op.results[0].uses]
                assert users == ["stablehlo.reduce"], users


def _activation_ops(module, shape: list[int], name: str) -> list:
    from torch_mlir import ir

    with module.context:
        return [op for op in all_operations(module.operation) if op.name == name
                and list(ir.RankedTensorType(op.results[0].type).shape) == shape]


def test_output_is_one_scale_and_shift_a_channel_as_eager_computes_it():
    """The output is `x * alpha + beta` (alpha = invstd * weight, beta = bias - mean *
    alpha), as eager's CPU kernel computes it: x's deviation from the mean is computed
    for the variance's sum alone, not kept for the output (XLA wrote it out whole,
    read again by the normalization)."""
    torch.manual_seed(0)
    model, x = nn.BatchNorm2d(4), torch.randn(3, 4, 5, 6) * 3 + 1
    module = assert_matches_eager(model, x).module
    shape = list(x.shape)
    (deviation,) = _activation_ops(module, shape, "stablehlo.subtract")
    with module.context:
        users = {use.owner.name for use in deviation.results[0].uses}
        square = deviation.results[0].uses.__iter__().__next__().owner
        assert users == {"stablehlo.multiply"}
        assert square.operands[0] == square.operands[1] == deviation.results[0]
    from torch_mlir import ir

    (output,) = _activation_ops(module, shape, "stablehlo.add")
    with module.context:
        scaled = output.operands[0].owner
        assert scaled.name == "stablehlo.multiply"
        x_read = [operand for operand in scaled.operands
                  if isinstance(operand, ir.BlockArgument)]
        assert len(x_read) == 1  # x itself, times alpha


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_batch_statistics_without_running_ones_match_eager_on_both_paths(dtype, affine):
    """`F.batch_norm(x, None, None, ..., training=True)` (no running statistics): the
    same float64 sums and scale and shift as with them, none written."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 6, dtype=dtype) * 3 + 2
    weight, bias = (torch.rand(3, dtype=dtype) + 0.5, torch.randn(3, dtype=dtype)) \
        if affine else (None, None)

    def normalize(x: torch.Tensor) -> torch.Tensor:
        return nn.functional.batch_norm(x, None, None, weight, bias, training=True)

    compiled = assert_matches_eager(normalize, x)
    shape = list(x.shape)
    assert len(_activation_ops(compiled.module, shape, "stablehlo.subtract")) == 1
    by_dynamo(normalize, normalize, (x,), {})


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_input_gradients_far_from_zero_mean_match_eager_on_both_paths(dtype):
    """The backward's gradients of x, weight and bias, of inputs whose mean is far from
    zero."""
    torch.manual_seed(0)
    model = InputGradients().to(dtype)
    with torch.no_grad():
        model.bn.weight.uniform_(0.5, 2)
    x = torch.randn(8, 4, 6, 6, dtype=dtype) * 3 + 100
    grad = torch.randn(8, 4, 6, 6, dtype=dtype)
    assert_matches_eager(model, x, grad)
    by_dynamo(model, model, (x, grad), {})
