"""progress.py: the stages of a compile in `logging` records, and the terminal line."""

from __future__ import annotations

import io
import logging
import time

import pytest
import torch

import outofplace
from outofplace import progress


def _started(caplog) -> list[str]:
    return [r.getMessage().removesuffix(": started") for r in caplog.records
            if r.name == "outofplace" and r.getMessage().endswith(": started")]


def test_records_name_the_stages_in_order(caplog):
    pytest.importorskip("jax")

    def step(cache, k):
        cache[1:3] = k
        return cache.sum()

    caplog.set_level(logging.INFO, logger="outofplace")
    compiled = outofplace.compile(step, (torch.zeros(4, 2), torch.ones(2, 2)),
                                  engine="xla", cache=False)
    assert _started(caplog) == ["compile", "trace", "import", "inplace-to-outofplace",
                                "outofplace-lower-to-stablehlo"]
    done = [r.getMessage() for r in caplog.records if ": done in " in r.getMessage()]
    assert [m.split(":")[0] for m in done] == ["trace", "import", "inplace-to-outofplace",
                                               "outofplace-lower-to-stablehlo", "compile"]
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="outofplace")
    outofplace.compile(step, (torch.zeros(4, 2), torch.ones(2, 2)), cache=False)
    started = _started(caplog)  # each of our Python passes inside its stage, at DEBUG
    lowering = started.index("outofplace-lower-to-stablehlo")
    assert started.index("inplace-to-outofplace") + 1 == started.index(
        "inplace-to-outofplace", started.index("inplace-to-outofplace") + 1) < lowering
    assert lowering < started.index("outofplace-lower-updates") < \
        started.index("outofplace-fold-constants") < \
        started.index("outofplace-strip-constant-shields")
    caplog.clear()
    caplog.set_level(logging.INFO, logger="outofplace")
    cache = torch.zeros(4, 2)
    compiled(cache, torch.ones(2, 2))  # XLA compiles at the first call
    assert _started(caplog) == ["xla compile"]
    assert torch.equal(cache, torch.tensor([[0.0, 0], [1, 1], [1, 1], [0, 0]]))


def test_verify_each_names_every_pass(caplog):
    caplog.set_level(logging.INFO, logger="outofplace")
    outofplace.compile(lambda x: x.add_(1), (torch.zeros(3),), verify_each=True,
                       engine="interpreter")
    started = _started(caplog)
    assert started[:4] == ["compile", "trace", "import", "inplace-to-outofplace"]
    assert len(started) > 10 and "outofplace-lower-updates" in started


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """A terminal as stderr (set in the test: pytest's capture replaces stderr after
    fixtures run), and the indicator's delay short."""
    stream = _Terminal()
    monkeypatch.setattr(progress, "DELAY", 0.05)
    monkeypatch.setattr(progress, "INTERVAL", 0.02)
    monkeypatch.delenv("OUTOFPLACE_QUIET", raising=False)
    return stream


def test_a_terminal_sees_the_stage_after_the_delay(terminal, monkeypatch):
    monkeypatch.setattr("sys.stderr", terminal)
    with progress.stage("compile"):
        with progress.stage("trace"):
            time.sleep(0.3)
    shown = terminal.getvalue()
    assert "outofplace: compile > trace" in shown
    assert shown.endswith("\r\x1b[2K")  # the line cleared when the compile ends
    terminal.truncate(0)
    terminal.seek(0)
    with progress.stage("quick"):  # done before the delay: nothing shown
        pass
    assert terminal.getvalue() == ""


def test_quiet_when_asked(terminal, monkeypatch):
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv("OUTOFPLACE_QUIET", "1")
    with progress.stage("compile"):
        time.sleep(0.2)
    assert terminal.getvalue() == ""
    monkeypatch.delenv("OUTOFPLACE_QUIET")
    logger = logging.getLogger("outofplace")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with progress.stage("compile"):
            time.sleep(0.2)
    finally:
        logger.setLevel(level)
    assert terminal.getvalue() == ""
    with progress.stage("compile"):  # not quiet: shown
        time.sleep(0.2)
    assert "outofplace: compile" in terminal.getvalue()


def test_never_on_a_stream_that_is_no_terminal(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr(progress, "DELAY", 0.01)
    monkeypatch.delenv("OUTOFPLACE_QUIET", raising=False)
    assert progress.quiet()
    with progress.stage("compile"):
        time.sleep(0.1)
    assert stream.getvalue() == ""
