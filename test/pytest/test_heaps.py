"""glibc's heaps kept between calls (backends/xla/heaps.py): the XLA engine's client sets
glibc's malloc so that the heap a call's temporaries leave empty is not unmapped, and a
training step run at home is not given fresh pages at every call; the setting is left
to the user who set glibc's own variables."""

from __future__ import annotations

import copy
import multiprocessing
import resource

import pytest
import torch
from torch import nn

from differential import squared_mean_step

import outofplace
from outofplace.backends.xla import heaps, temporaries
from outofplace.transforms import pointwise_as_kernel_calls

pytestmark = pytest.mark.skipif(
    not outofplace.xla.available() or not outofplace.backends.custom_calls.register_eager(),
    reason="needs jax and the kernel handler")


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _faults_a_call() -> float:
    """The step of the test below, compiled and called in this process: the minor page
    faults of a call, after three calls checked against eager's."""
    pointwise_as_kernel_calls.MIN_ELEMENTS = 1 << 62  # (this process's own)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(8, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    eager_model = copy.deepcopy(model)
    step = squared_mean_step(model, torch.optim.SGD(model.parameters(), lr=0.1,
                                                    momentum=0.9))
    eager = squared_mean_step(eager_model, torch.optim.SGD(eager_model.parameters(),
                                                           lr=0.1, momentum=0.9))
    x = torch.randn(4, 8, 112, 112)
    step(x)
    eager(x)
    compiled = outofplace.compile(step, (x,))
    executable = compiled._xla_executable()
    assert executable.at_home is not None
    assert isinstance(executable.executable, temporaries.KeptTemporaries)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-5, atol=1e-5)
    before, calls = _minor_faults(), 5
    for _ in range(calls):
        compiled(x)
    return (_minor_faults() - before) / calls


@pytest.mark.skipif(not heaps.keep_heaps(), reason="glibc's malloc is not outofplace's to set")
def test_a_step_at_home_is_not_given_fresh_pages_at_every_call():
    """Two convolutions with batch norm at 112x112 (eager's kernels, at home): 37 MB of
    XLA temporaries, 31 of them kernel results kept between calls (temporaries.py; its
    ReLUs XLA's loops here: as eager's kernels, outofplace-pointwise-as-kernel-calls,
    the program keeps no temporaries and took no fresh pages either, 0 faults a call). On
    glibc's defaults the helper thread's heap was unmapped when emptied, 1,500-14,000 page
    faults a call; kept, under 2% of the temporaries' pages (0.4 a call in a process of
    its own). Measured in a process of its own: in a worker that ran other tests first
    (their threads' arenas in glibc's list), a call took 315 faults once. The setting is
    the process's, the same for both paths; torch.compile's three graphs allocate more of
    their own at each call (470 faults a call without the setting, 0.1 with it in a
    process of its own), so only outofplace.compile's path measures it. The steps as
    eager's."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        faults = pool.apply(_faults_a_call)
    pages = (37 << 20) // resource.getpagesize()
    assert faults < pages / 50


@pytest.mark.parametrize("variable", ["OUTOFPLACE_KEEP_HEAPS", "MALLOC_ARENA_MAX",
                                      "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"])
def test_the_users_setting_of_glibc_is_left_as_it_is(monkeypatch, variable):
    monkeypatch.setenv(variable, "0" if variable == "OUTOFPLACE_KEEP_HEAPS" else "1")
    assert heaps.keep_heaps.__wrapped__() is False
