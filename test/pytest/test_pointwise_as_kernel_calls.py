"""outofplace-pointwise-as-kernel-calls (transforms/pointwise_as_kernel_calls.py): in a
program that calls eager's kernels, the XLA engine runs a large ReLU of a kernel's result
and its gradient (aten::clamp_min.out, aten::threshold_backward.grad_input), and a
multiply-add of operands in memory (aten::add.out with alpha: SGD's updates), through
eager's kernels. Results against eager's, float32 and float64, on both paths, and bit
for bit against the same program without the pass; each test checks which kernels were
called (the thresholds lowered so that the models stay small; the compile cache off, so
the pass runs on every compile)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from differential import squared_mean_step

import outofplace
from outofplace.backends import custom_calls
from outofplace.backends.xla import compiler, legalize_for_cpu
from outofplace.transforms import convolutions_as_kernel_calls
from outofplace.transforms import pointwise_as_kernel_calls as pass_module

pytestmark = pytest.mark.skipif(
    not outofplace.xla.available() or custom_calls.extension() is None,
    reason="needs jax and the kernel handler (backends/kernel_call.cpp)")

DTYPES = [torch.float32, torch.float64]


def tolerance(dtype: torch.dtype) -> dict:
    return dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else \
        dict(rtol=1e-12, atol=1e-12)


@pytest.fixture
def called(monkeypatch) -> list:
    """The kernels the pass calls (their op names) while the test runs, every ReLU and
    gradient large enough, and every convolution eager's."""
    monkeypatch.setattr(pass_module, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(pass_module, "MIN_MULTIPLY_ADD_ELEMENTS", 0)
    monkeypatch.setattr(convolutions_as_kernel_calls, "MIN_FLOPS", 0)
    kernels = []
    call = pass_module._call

    def recording(op, rewriter, kernel, *rest):
        kernels.append(kernel)
        return call(op, rewriter, kernel, *rest)
    monkeypatch.setattr(pass_module, "_call", recording)
    return kernels


class Block(nn.Module):
    """A residual block: two convolutions, each with a batch norm and a ReLU, the second
    ReLU of the sum with the input."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False, dtype=dtype)
        self.bn1 = nn.BatchNorm2d(8, dtype=dtype)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False, dtype=dtype)
        self.bn2 = nn.BatchNorm2d(8, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


def _step(model: nn.Module):
    return squared_mean_step(model, torch.optim.SGD(model.parameters(), lr=0.1,
                                                    momentum=0.9))


@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_training_step_matches_eager(path, dtype, called):
    """A residual block's training step: the ReLU after the batch norm and its gradient
    (the batch norm's output and the convolution's input gradient are kernels' results)
    are eager's kernels; the ReLU of the residual sum and its gradient, which reads the
    sum of two branches' gradients, XLA's loops. Loss, parameters and running statistics
    as eager's (XLA's mean and SGD's update round as XLA does)."""
    torch.manual_seed(0)
    model = Block(dtype)
    x = torch.randn(2, 8, 16, 16, dtype=dtype)
    eager_model, compiled_model = copy.deepcopy(model), copy.deepcopy(model)
    eager, step = _step(eager_model), _step(compiled_model)
    eager(x), step(x)  # the gradients and momenta the compiled step updates
    compiled = outofplace.compile(step, (x,), cache=False) if path == "compile" else \
        torch.compile(step, backend="outofplace", options={"cache": False})
    for _ in range(3):
        torch.testing.assert_close(compiled(x), eager(x), **tolerance(dtype))
    for got, expected in zip([*compiled_model.parameters(), *compiled_model.buffers()],
                             [*eager_model.parameters(), *eager_model.buffers()]):
        torch.testing.assert_close(got, expected, **tolerance(dtype))
    assert called.count("aten::clamp_min.out") == 1, called
    assert called.count("aten::threshold_backward.grad_input") == 1, called
    if path == "compile":
        # SGD's momentum and parameter updates of the 2 convolutions' weights and the 2
        # batch norms' weights and biases, each in its own memory
        assert called.count("aten::add.out") == 2 * 6, called
        assert set(compiled.in_place_report.values()) == {"in place"}, \
            compiled.in_place_report
    else:  # dynamo's graph of `opt.step()` calls no kernel: XLA's loops, split there
        assert "aten::add.out" not in called, called


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_kernels_compute_what_xla_computed(dtype, called, monkeypatch):
    """The step with the pass and without it, from the same state: the same bits (the
    ReLUs are exact; eager's add with alpha is the fused multiply-add XLA:CPU contracts
    the momentum's and the parameter's updates into)."""
    torch.manual_seed(0)
    model = Block(dtype)
    x = torch.randn(2, 8, 16, 16, dtype=dtype)
    models = [copy.deepcopy(model) for _ in range(2)]
    steps = [_step(m) for m in models]
    for step in steps:
        step(x)
    with_pass = outofplace.compile(steps[0], (x,), cache=False)
    without = outofplace.compile(steps[1], (x,), cache=False)
    first = with_pass(x)  # (XLA compiles at the first call: with the pass)
    count = len(called)
    monkeypatch.setattr(compiler, "LEGALIZE_FOR_CPU", compiler.LEGALIZE_FOR_CPU.replace(
        "outofplace-pointwise-as-kernel-calls, ", ""))
    monkeypatch.setattr(compiler.legalized, "__defaults__", (compiler.LEGALIZE_FOR_CPU,))
    torch.testing.assert_close(first, without(x), rtol=0, atol=0)
    assert len(called) == count > 0  # the second program compiled without the pass
    for _ in range(2):
        torch.testing.assert_close(with_pass(x), without(x), rtol=0, atol=0)
    for got, expected in zip(models[0].state_dict().values(),
                             models[1].state_dict().values()):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_nan_passes_as_in_eager(called):
    """A NaN the convolution computes: the ReLU keeps it and its gradient passes the
    gradient there, as eager's kernels (and the ops they replace) do."""
    w = torch.randn(4, 4, 3, 3, requires_grad=True)

    def f(x, w):
        y = torch.relu(F.conv2d(x, w, padding=1))
        (g,) = torch.autograd.grad(y.sum(), w)
        return y, g

    x = torch.randn(1, 4, 8, 8)
    x[0, 1, 3, 3] = float("nan")
    compiled = outofplace.compile(f, (x, w), cache=False)
    for got, expected in zip(compiled(x, w), f(x, w)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert "aten::clamp_min.out" in called


def test_program_without_kernels_keeps_its_relus(called):
    """A program that calls no eager kernel keeps XLA's loops (split across XLA's
    threads there), however large."""
    compiled = outofplace.compile(lambda x: torch.relu(x * 2), (torch.randn(64, 64),),
                                  cache=False)
    engine = legalize_for_cpu(compiled.stablehlo)[0]
    assert "stablehlo.maximum" in engine and "aten::kernel" not in engine
    assert called == []
