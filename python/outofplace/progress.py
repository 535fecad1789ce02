"""Which stage a compile is in: `logging` records (logger "outofplace") at each stage's
start and end, and on a terminal a line on stderr once a compile has run for a few
seconds (docs/api.md#progress).

    with progress.stage("trace"):
        ...

Stages nest (a compile holds trace, import, the pipeline's stages, and they hold each
of outofplace's Python passes, logged at DEBUG); the indicator runs while any is open,
showing the open ones. It is shown only when stderr is a terminal,
OUTOFPLACE_QUIET is not set to 1 and the "outofplace" logger is enabled for warnings
(`logging.getLogger("outofplace").setLevel(logging.ERROR)` silences it); never in tests
or CI, whose stderr is no terminal.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

logger = logging.getLogger("outofplace")

DELAY = 2.5  # seconds of compiling before the indicator shows
INTERVAL = 0.5  # seconds between its updates

_lock = threading.Lock()
_open: list[tuple[str, float]] = []  # the open stages, outermost first, with start times
_indicator: "_Indicator | None" = None


def quiet() -> bool:
    """Whether the terminal indicator stays off (logging records are written anyway)."""
    if os.environ.get("OUTOFPLACE_QUIET", "").strip() not in ("", "0"):
        return True
    if not logger.isEnabledFor(logging.WARNING):
        return True
    stream = sys.stderr
    try:
        return stream is None or not stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return True


@contextlib.contextmanager
def stage(name: str, level: int = logging.INFO) -> Iterator[None]:
    """Logs `name`'s start and end (with its time) at `level` and shows it on the
    indicator."""
    global _indicator
    start = time.perf_counter()
    logger.log(level, "%s: started", name)
    with _lock:
        _open.append((name, start))
        if len(_open) == 1 and not quiet():
            _indicator = _Indicator(start)
    try:
        yield
    finally:
        with _lock:
            _open.remove((name, start))
            indicator = _indicator if not _open else None
            if indicator is not None:
                _indicator = None
        if indicator is not None:
            indicator.stop()
        logger.log(level, "%s: done in %.2f s", name, time.perf_counter() - start)


def staged(name: str) -> Callable:
    """A decorator: the function runs as the stage `name`."""
    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with stage(name):
                return function(*args, **kwargs)
        return wrapper
    return decorate


class _Indicator:
    """A thread that, DELAY seconds after `start`, writes the open stages and the time
    so far on one line of stderr, updated every INTERVAL, and clears it at `stop`."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.shown = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outofplace-progress",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._done.wait(DELAY):
            return
        while not self._done.is_set():
            with _lock:
                stages = " > ".join(name for name, _ in _open)
            self._write(f"\r\x1b[2Koutofplace: {stages} "
                        f"({time.perf_counter() - self.start:.0f} s)")
            self.shown = True
            self._done.wait(INTERVAL)

    def _write(self, text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            self._done.set()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        if self.shown:
            self._write("\r\x1b[2K")
