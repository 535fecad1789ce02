"""Shared setup for the outofplace pytest suite.

The differential helper lives in differential.py (importable from every test module here,
pytest puts this directory on sys.path); it is re-exported for convenience.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
# Tests compile afresh: the persistent compile cache would skip the passes and XLA's
# compile of a program another run compiled (test_compile_cache.py turns it on; so does
# OUTOFPLACE_CACHE=1 in the environment, to run a suite's programs from the cache).
os.environ.setdefault("OUTOFPLACE_CACHE", "0")

# first: it sets the XLA:CPU device count the sharded tests need before jax starts
from differential import assert_matches_eager  # noqa: E402,F401

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test draws the same random inputs, whatever runs before it."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _fresh_torch_compile_programs() -> None:
    """The torch.compile backend reuses the program of a graph it compiled before, in
    this process (dynamo.py, `_PROGRAMS`): each test compiles its own, as the tests
    counting compilations and first-call warnings expect."""
    import outofplace.dynamo

    outofplace.dynamo._PROGRAMS.clear()



@pytest.fixture(autouse=True)
def _torch_compile_flags_restored():
    """No call leaves torch's compile flags set, whether it returned or raised: eager
    code reads them (torch.optim's steps read their step counts as tensors while
    `torch.compiler.is_compiling()`, and an eager Adamax step then fails)."""
    yield
    leaked = torch.compiler._is_compiling_flag or torch.compiler._is_exporting_flag
    torch.compiler._is_compiling_flag = torch.compiler._is_exporting_flag = False
    assert not leaked, "torch.compiler.is_compiling() left True after the test"
