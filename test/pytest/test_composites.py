"""Ops kept whole (frontend/composites.py): batch norm's forward and backward in
training are `stablehlo.composite`s of their ATen ops, whose decomposition is
outofplace's (the interpreter, IREE and exports run it); the XLA engine calls eager's
kernels (transforms/composites_as_kernel_calls.py), so batch norm computes bit for bit
what eager computes. Both paths (`outofplace.compile`, `torch.compile`), float32 and
float64."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import outofplace
from differential import assert_matches_eager, assert_module_state_matches, squared_mean_step
from outofplace.backends.xla.compiler import legalize_for_cpu
from outofplace.ir_utils import all_operations

DTYPES = [torch.float32, torch.float64]


class Gradients(nn.Module):
    """A training batch norm on the program's input and the gradients of a loss
    through it: everything it computes is batch norm's forward and backward."""

    def __init__(self, norm: type, channels: int) -> None:
        super().__init__()
        self.bn = norm(channels, momentum=0.3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x.detach().requires_grad_()
        y = self.bn(x)
        loss = (y * torch.linspace(1, 2, y.numel(), dtype=y.dtype).view(y.shape)).sum()
        return (y, *torch.autograd.grad(loss, [x, self.bn.weight, self.bn.bias]))


def _model(norm: type, shape: tuple, dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = Gradients(norm, shape[1]).to(dtype)
    with torch.no_grad():
        model.bn.weight.uniform_(0.5, 2)
        model.bn.bias.normal_()
    return model, torch.randn(shape, dtype=dtype) * 3 + 5


def _assert_bit_for_bit(eager_model: nn.Module, model: nn.Module, run, x: torch.Tensor,
                        calls: int = 3) -> None:
    """`run(x)` and `model`'s state after each call are `eager_model`'s, bit for bit."""
    for _ in range(calls):
        expected, actual = eager_model(x), run(x)
        for e, a in zip(*(v if isinstance(v, tuple) else (v,) for v in (expected, actual))):
            assert torch.equal(e, a), (e - a).abs().max()
        for name, value in eager_model.state_dict().items():
            assert torch.equal(value, model.state_dict()[name]), name


SHAPES = [(nn.BatchNorm2d, (8, 16, 12, 12)), (nn.BatchNorm1d, (64, 32)),
          (nn.BatchNorm1d, (4, 8, 50))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm, shape", SHAPES, ids=[str(s) for _, s in SHAPES])
def test_batch_norm_is_eager_s_kernel_bit_for_bit_on_both_paths(norm, shape, dtype):
    """The output, the gradients of x, weight and bias and the running statistics are
    eager's own (its decomposition rounds some elements otherwise) on XLA through
    `outofplace.compile` and through `torch.compile`."""
    eager_model, x = _model(norm, shape, dtype)
    model = copy.deepcopy(eager_model)
    compiled = outofplace.compile(model, (x,), engine="xla", cache=False)
    _assert_bit_for_bit(eager_model, model, compiled, x)
    eager_model, x = _model(norm, shape, dtype)
    model = copy.deepcopy(eager_model)
    torch._dynamo.reset()
    _assert_bit_for_bit(eager_model, model, torch.compile(model, backend="outofplace"), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batch_norm_without_affine_parameters_is_eager_s_kernel(dtype):
    """No weight and bias (`affine=False`): the kernel's optional tensors are None."""
    torch.manual_seed(0)
    x = torch.randn(8, 6, 7, 7, dtype=dtype) * 2 + 3
    for path in ("compile", "dynamo"):
        eager_model = nn.BatchNorm2d(6, affine=False).to(dtype)
        model = copy.deepcopy(eager_model)
        torch._dynamo.reset()
        run = outofplace.compile(model, (x,), engine="xla", cache=False) \
            if path == "compile" else torch.compile(model, backend="outofplace")
        _assert_bit_for_bit(eager_model, model, run, x)


def _without_statistics(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
                        ) -> tuple[torch.Tensor, ...]:
    """`F.batch_norm` without running statistics and its gradients."""
    x = x.detach().requires_grad_()
    y = nn.functional.batch_norm(x, None, None, weight, bias, training=True)
    return (y, *torch.autograd.grad((y * y).sum(), [x, weight, bias]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batch_norm_without_running_statistics_is_eager_s_kernel(dtype):
    """`_native_batch_norm_legit.no_stats`, kept whole: eager's `no_stats_out` kernel
    writing XLA's buffers, once for the forward and the statistics autograd saves; the
    output and gradients bit for bit eager's on both paths."""
    torch.manual_seed(0)
    x = torch.randn(8, 6, 9, 9, dtype=dtype) * 2 + 3
    weight = torch.rand(6, dtype=dtype).requires_grad_()
    bias = torch.randn(6, dtype=dtype).requires_grad_()
    expected = _without_statistics(x, weight, bias)
    compiled = outofplace.compile(_without_statistics, (x, weight, bias), engine="xla",
                                  cache=False)
    torch._dynamo.reset()
    by_dynamo = torch.compile(_without_statistics, backend="outofplace")
    for run in (compiled, by_dynamo):
        for e, a in zip(expected, run(x, weight, bias)):
            assert torch.equal(e, a), (e - a).abs().max()
    assert _composites(compiled.module) == {
        "aten._native_batch_norm_legit.no_stats": 1, "aten.native_batch_norm_backward": 1}


def _composites(module) -> dict[str, int]:
    from torch_mlir import ir

    with module.context:
        names = [ir.StringAttr(op.attributes["name"]).value
                 for op in all_operations(module.operation) if op.name == "stablehlo.composite"]
    return {name: names.count(name) for name in names}


def test_a_training_step_calls_one_kernel_per_batch_norm_and_gradient():
    """A step of two batch norms: the statistics autograd saves for the backward are the
    forward's (one `_native_batch_norm_legit_functional` a layer, not two), each
    backward one `native_batch_norm_backward`; in the XLA engine's program each is a call
    of eager's kernel and no decomposition is left. The running statistics are written
    in place (no argument copied)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8), nn.Flatten(),
                          nn.Linear(8 * 6 * 6, 2))
    eager_model = copy.deepcopy(model)
    steps = [squared_mean_step(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
             for m in (model, eager_model)]
    x = torch.randn(4, 3, 10, 10)
    for step in steps:
        step(x)  # (the gradients and momenta the compiled step updates)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*copied on every call.*")
        compiled = outofplace.compile(steps[0], (x,), engine="xla", cache=False)
        for _ in range(2):
            torch.testing.assert_close(compiled(x), steps[1](x))
    assert_module_state_matches(model, eager_model)
    assert _composites(compiled.module) == {
        "aten._native_batch_norm_legit_functional": 2, "aten.native_batch_norm_backward": 2}
    legal = legalize_for_cpu(compiled.stablehlo)[0]
    assert "stablehlo.composite" not in legal and "region" not in legal
    assert legal.count('outofplace.op = "aten::_native_batch_norm_legit.out"') == 2
    assert legal.count('outofplace.op = "aten::native_batch_norm_backward"') == 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_other_engines_run_the_decomposition(dtype):
    """The interpreter and IREE run the composite's decomposition (eager's arithmetic:
    float64 sums), matching eager as the XLA engine's kernels do."""
    model, x = _model(nn.BatchNorm2d, (4, 3, 5, 6), dtype)
    assert_matches_eager(model, x)


# A convolution and a batch norm in training, compiled (from the cache when it holds it)
# and called: prints whether the cache was read and whether the call matched eager.
CACHED = textwrap.dedent("""
    import copy, json
    import torch
    import outofplace
    from outofplace import compile_cache

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(32))
    eager = copy.deepcopy(model)
    x = torch.randn(4, 32, 24, 24)  # (42 MFLOP: a kernel call)
    compiled = outofplace.compile(model, (x,), engine="xla")
    close = lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-5)
    same = close(compiled(x), eager(x)) and \\
        close(model[1].running_var, eager[1].running_var)
    print(json.dumps({"stats": dict(compile_cache.stats), "same": same}))
""")


def test_a_second_process_calls_the_kernels_of_a_cached_program(tmp_path):
    """A program whose kernels are a convolution's and batch norm's, loaded from the
    compile cache by a second process, calls them there (the executable PJRT serialized
    names the handlers' targets, registered before it is loaded: compiled.py) and
    matches eager."""
    script = tmp_path / "program.py"
    script.write_text(CACHED)
    environment = {**os.environ,
                   "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "python"),
                   "OUTOFPLACE_CACHE_DIR": str(tmp_path / "cache"), "OUTOFPLACE_CACHE": "1"}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], env=environment,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[1]["stats"].get("xla hit") == 1, runs
    assert runs[0]["same"] and runs[1]["same"], runs
