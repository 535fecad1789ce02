"""outofplace-kernel-results-as-state (transforms/kernel_results_as_state.py) and the XLA
engine's kept temporaries (backends/xla/temporaries.py): a program whose XLA:CPU
temporaries glibc would map fresh at each call keeps its kernels' large results in
buffers passed again at every call. Values against eager's, float32 and float64, on
both paths, over several calls; kept only where it holds at most twice XLA's
temporaries; the same from the compile cache."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch import nn

from differential import squared_mean_step

import outofplace
from outofplace import compile_cache
from outofplace.backends.xla import temporaries

pytestmark = pytest.mark.skipif(
    not outofplace.xla.available() or not outofplace.backends.custom_calls.register_eager(),
    reason="needs jax and the kernel handler")

DTYPES = [torch.float32, torch.float64]
SIDE = {torch.float32: 192, torch.float64: 128}  # XLA's temporaries over 32 MiB
KEPT = "kept between calls"


def tolerance(dtype: torch.dtype) -> dict:
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else \
        dict(rtol=1e-12, atol=1e-12)


def net(dtype: torch.dtype) -> nn.Module:
    """Two convolutions (eager's kernels on the XLA engine) with batch norm: at 128x128
    their outputs and gradients are 8 MB each in float32, XLA's temporaries 48 MB. (The
    torch.compile path runs the backward as a graph of its own, whose temporaries are a
    third of those: `SIDE`.)"""
    return nn.Sequential(
        nn.Conv2d(8, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(dtype)


def step_of(model: nn.Module):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return squared_mean_step(model, optimizer), optimizer


def batch(dtype: torch.dtype, side: int, seed: int) -> tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(4, 8, side, side, dtype=dtype, generator=g),)


def _compiled(path: str, step, example):
    return outofplace.compile(step, example) if path == "compile" else \
        torch.compile(step, backend="outofplace")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", ["compile", "torch.compile"])
@pytest.mark.parametrize("results", temporaries.CANDIDATES)
def test_training_step_keeps_its_kernel_results_and_matches_eager(path, dtype, results,
                                                                   caplog, monkeypatch):
    """Three steps on different batches: losses, parameters, running statistics and
    momentum as eager's; the parameters in their own memory; the kernels' results kept:
    every one, or those alive at the program's peaks (`results=at-peaks`, the engine's
    choice where every one would hold more than twice XLA's temporaries: ResNet-18's
    step at batch 16, 224x224, 798 MB for 387; in so small a net every result is alive
    at its peak, which of them the lit test pins)."""
    torch._dynamo.reset()
    monkeypatch.setattr(temporaries, "CANDIDATES", (results,))
    model = net(dtype)
    eager_model = copy.deepcopy(model)
    (step, optimizer), (eager, eager_optimizer) = step_of(model), step_of(eager_model)
    side = SIDE[dtype]
    step(*batch(dtype, side, 0))
    eager(*batch(dtype, side, 0))
    with caplog.at_level(logging.INFO, logger="outofplace"):
        compiled = _compiled(path, step, batch(dtype, side, 0))
        torch.testing.assert_close(compiled(*batch(dtype, side, 1)),
                                   eager(*batch(dtype, side, 1)), **tolerance(dtype))
        addresses = [p.data_ptr() for p in model.parameters()]  # (XLA's from the first)
        for seed in (2, 3):
            torch.testing.assert_close(compiled(*batch(dtype, side, seed)),
                                       eager(*batch(dtype, side, seed)), **tolerance(dtype))
    assert any(KEPT in r.getMessage() for r in caplog.records), caplog.text
    assert [p.data_ptr() for p in model.parameters()] == addresses
    for got, expected in zip(model.state_dict().values(), eager_model.state_dict().values()):
        torch.testing.assert_close(got, expected, **tolerance(dtype))
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(optimizer.state[p]["momentum_buffer"],
                                   eager_optimizer.state[q]["momentum_buffer"],
                                   **tolerance(dtype))
    if path == "compile":
        executable = compiled._xla_executable().executable
        assert isinstance(executable, temporaries.KeptTemporaries)
        assert len(executable.temporaries) >= 4  # (each convolution's output and gradient)
        assert set(compiled.in_place_report.values()) == {"in place"}


def test_small_temporaries_are_left_to_xla(caplog):
    """At 32x32 XLA's temporaries fit glibc's heap: nothing kept."""
    step, _ = step_of(net(torch.float32))
    example = batch(torch.float32, 32, 0)
    step(*example)
    with caplog.at_level(logging.INFO, logger="outofplace"):
        compiled = outofplace.compile(step, example)
        compiled(*example)
    assert not any(KEPT in r.getMessage() for r in caplog.records)
    assert not isinstance(compiled._xla_executable().executable, temporaries.KeptTemporaries)


def test_short_lived_results_are_not_kept(caplog):
    """Inference through eight convolutions: each output lives until the next is made,
    so XLA's temporaries hold one or two of them (38 MB each), and keeping all eight
    would hold far more than twice that between calls: left to XLA (values as eager's)."""
    layers = nn.Sequential(*[nn.Conv2d(8, 8, 3, padding=1) for _ in range(8)])
    x = torch.randn(4, 8, 544, 544)
    with caplog.at_level(logging.INFO, logger="outofplace"), torch.no_grad():
        compiled = outofplace.compile(layers, (x,))
        torch.testing.assert_close(compiled(x), layers(x), rtol=1e-4, atol=1e-4)
    messages = [r.getMessage() for r in caplog.records]
    assert any("not kept" in m for m in messages), messages
    assert not any(KEPT in m for m in messages)


def test_kept_temporaries_come_back_from_the_compile_cache(tmp_path, monkeypatch):
    """A second compile of the step reads its executable from the compile cache, with
    its kept temporaries, and goes on computing as eager."""
    monkeypatch.setenv("OUTOFPLACE_CACHE", "1")
    monkeypatch.setenv("OUTOFPLACE_CACHE_DIR", str(tmp_path / "cache"))
    model = net(torch.float32)
    eager_model = copy.deepcopy(model)
    (step, _), (eager, _) = step_of(model), step_of(eager_model)
    example = batch(torch.float32, 128, 0)
    step(*example)
    eager(*example)
    hits = compile_cache.stats["xla hit"]
    for seed in (1, 2):
        compiled = outofplace.compile(step, example)
        torch.testing.assert_close(compiled(*batch(torch.float32, 128, seed)),
                                   eager(*batch(torch.float32, 128, seed)),
                                   **tolerance(torch.float32))
        assert isinstance(compiled._xla_executable().executable, temporaries.KeptTemporaries)
    assert compile_cache.stats["xla hit"] == hits + 1
    for got, expected in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(got, expected, **tolerance(torch.float32))
