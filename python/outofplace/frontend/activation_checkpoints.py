"""Activation checkpointing (`torch.utils.checkpoint.checkpoint(f, x,
use_reentrant=False)`, transformers' `gradient_checkpointing_enable()`) traced without
its recomputation.

Eager's checkpoint saves the region's inputs only and runs the region again when the
backward needs its activations. A training step that calls `backward()` is traced whole
(tracing.py), and torch.export's tracer fails on the module call that recomputation
makes inside the backward (`AssertionError: Unexpected key m.block@1, expected
_export_root`, torch/fx/_symbolic_trace.py). While tracing, the region's saved tensors
are kept as any others are (the checkpoint's saved-tensors hooks left out): the backward
reads the values the recomputation would have made again, the same ones (eager checks
that they are: its determinism check), and which activations the compiled program keeps
is for its backend's memory planning to decide.

Upstream: torch.export cannot trace a backward that recomputes a checkpointed module
(no issue found). Canary:
test_training_step.py::test_torch_export_alone_fails_on_a_checkpointed_step.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator
from unittest import mock

import torch.utils.checkpoint


def _saved_as_any_others(_frame: Any) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


@contextlib.contextmanager
def traced() -> Iterator[None]:
    """While entered: a non-reentrant checkpoint's region saves its tensors as autograd
    does outside one (its `_checkpoint_hook` does nothing)."""
    with mock.patch.object(torch.utils.checkpoint, "_checkpoint_hook", _saved_as_any_others):
        yield
