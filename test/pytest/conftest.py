"""Shared setup for the outofplace pytest suite.

The differential helper lives in differential.py (importable from every test module here,
pytest puts this directory on sys.path); it is re-exported for convenience.
"""

from __future__ import annotations

import os
import sys

# Eight XLA:CPU devices for the sharded tests (test_sharding.py); read once, when jax
# starts its backend, so it is set before anything imports jax. Programs without a mesh
# run on the first device as before.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from differential import assert_matches_eager  # noqa: E402,F401


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test draws the same random inputs, whatever runs before it."""
    torch.manual_seed(0)
