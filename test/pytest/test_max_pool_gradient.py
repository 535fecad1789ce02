"""Max pooling, forward with indices and gradient (frontend/max_pool_gradient.py, the
backward without a scatter; transforms/upstream/max_pool_indices.py, eager's indices for
windows of -inf and with NaN). Against eager on both paths (`outofplace.compile` on every
engine, `torch.compile(backend="outofplace")`), float32 and float64, on inputs with ties,
NaNs, -inf windows, over windows with padding, strides, dilation and ceil_mode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import outofplace
from outofplace.backends import custom_calls
from outofplace.backends.xla import legalize_for_cpu
from differential import assert_matches_eager, assert_same, by_dynamo
from outofplace.ir_utils import all_operations
from test_training_step import Trainer, _assert_trainers_match, _optimizer_step

DTYPES = [torch.float32, torch.float64]

WINDOWS = [  # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False),  # ResNet's
    (2, 2, 0, 1, False),
    (3, 1, 1, 1, False),
    (3, 2, 1, 2, True),
    ((2, 3), (1, 2), (1, 0), 1, True),
    # ceil_mode adding a partial last window (upstream/max_pool.py pads the input)
    (2, 2, 0, 1, True),
    ((3, 2), 2, (0, 1), 1, True),
]


class PoolGradient(nn.Module):
    """max_pool2d of x and the gradient of `g` through it (the gradient of `zero`, a
    parameter added to x, is the pooling input's)."""

    def __init__(self, shape: tuple, window: tuple, dtype: torch.dtype) -> None:
        super().__init__()
        self.zero = nn.Parameter(torch.zeros(shape, dtype=dtype))
        self.window = window

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.max_pool2d(x + self.zero, *self.window)
        (grad,) = torch.autograd.grad(y, self.zero, g)
        return y.detach(), grad


def _input(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    x[0, 0, :4, :4] = 1.0  # ties: eager's index is the first maximal element
    x[0, 1, 2, 2] = x[0, 1, 2, 4] = float("nan")  # eager's is the last NaN
    x[0, 2, :, :] = 0.0  # ReLU's zeros
    x[-1, -1] = -float("inf")  # every window -inf: its first element
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("window", WINDOWS, ids=str)
def test_gradient_matches_eager_on_both_paths(window, dtype):
    shape = (2, 3, 9, 11)
    x = _input(shape, dtype)
    g = torch.randn(F.max_pool2d(x, *window).shape, dtype=dtype)
    compiled = assert_matches_eager(PoolGradient(shape, window, dtype), x, g)
    with compiled.module.context:
        names = [op.name for op in all_operations(compiled.module.operation)]
    assert "stablehlo.scatter" not in names  # the gradient is elementwise
    # the values and the indices autograd saved are one pooling's
    assert names.count("stablehlo.reduce_window") == 1
    by_dynamo(PoolGradient(shape, window, dtype), PoolGradient(shape, window, dtype),
              (x, g), {})


@pytest.mark.skipif(not outofplace.xla.available() or custom_calls.extension() is None,
                    reason="needs jax and the kernel handler (backends/kernel_call.cpp)")
def test_xla_engine_calls_eagers_backward():
    """The gradient is kept whole (frontend/composites.py): the XLA engine calls eager's
    kernel of it on XLA's buffers (transforms/composites_as_kernel_calls.py), 24 ms of
    XLA:CPU fusions at ResNet-18's 224x224 stem against the kernel's 2.3; the program
    (the interpreter's, IREE's, an export's) holds its decomposition."""
    shape, window = (2, 3, 9, 11), WINDOWS[0]
    x = _input(shape, torch.float32)
    g = torch.randn(F.max_pool2d(x, *window).shape)
    compiled = outofplace.compile(PoolGradient(shape, window, torch.float32), (x, g))
    call = 'outofplace.op = "aten::max_pool2d_with_indices_backward.grad_input"'
    composite = 'stablehlo.composite "aten.max_pool2d_with_indices_backward"'
    assert composite in compiled.stablehlo and call not in compiled.stablehlo
    legalized = legalize_for_cpu(compiled.stablehlo)[0]
    assert call in legalized and composite not in legalized


def pool_with_indices(x):
    y, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    return y, i


def pool1d_with_indices(x):
    return F.max_pool1d(x.flatten(2), 4, 3, 1, return_indices=True)


def ceil_mode_pool(x):
    # a partial last window: torch-mlir padded both ends (silently wrong values)
    return F.max_pool2d(x, (2, 3), 2, 0, 1, True)


def ceil_mode_pool_with_indices(x):
    return F.max_pool2d(x, 3, 2, (0, 1), 1, True, return_indices=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("f", [pool_with_indices, pool1d_with_indices, ceil_mode_pool,
                               ceil_mode_pool_with_indices],
                         ids=lambda f: f.__name__)
def test_indices_match_eager_on_both_paths(f, dtype):
    x = _input((2, 3, 9, 11), dtype)
    assert_matches_eager(f, x)
    by_dynamo(f, f, (x,), {})


def given_indices(g, x, indices):
    """The backward of indices the program made itself (not a pooling's): PyTorch's
    decomposition, a scatter, as before."""
    return torch.ops.aten.max_pool2d_with_indices_backward(
        g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_other_indices_keep_the_scatter(dtype):
    torch.manual_seed(0)
    x, g = torch.randn(2, 3, 6, 6, dtype=dtype), torch.randn(2, 3, 3, 3, dtype=dtype)
    indices = torch.randint(36, (2, 3, 3, 3))
    compiled = assert_matches_eager(given_indices, g, x, indices)
    assert "stablehlo.scatter" in compiled.stablehlo
    by_dynamo(given_indices, given_indices, (g, x, indices), {})


class Stem(nn.Module):
    """ResNet's stem: convolution, batch norm, ReLU, 3x3 stride-2 pooling; a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                    nn.ReLU(), nn.MaxPool2d(3, 2, 1), nn.Flatten(),
                                    nn.Linear(8 * 8 * 8, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def test_a_resnet_stem_step_matches_eager():
    """SGD steps: loss, parameters, gradients, momentum and running statistics."""
    torch.manual_seed(0)
    trainer = Trainer(Stem().train(), lambda m: torch.optim.SGD(
        m.parameters(), lr=0.1, momentum=0.9), _optimizer_step(F.cross_entropy))
    x, y = torch.randn(4, 3, 32, 32), torch.randint(5, (4,))
    trainer.step(x, y)  # the optimizer's state, which the compiled step updates
    eager = trainer.twin()
    compiled = outofplace.compile(trainer.step, (x, y))
    for i in range(2):
        x, y = torch.randn(4, 3, 32, 32), torch.randint(5, (4,))
        assert_same(compiled(x, y), eager.step(x, y), f"step {i} loss")
        _assert_trainers_match(trainer, eager, f"step {i}")
