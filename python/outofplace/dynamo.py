"""`torch.compile(model, backend="outofplace")`.

Registered through the `torch_dynamo_backends` entry point, so it is available after
`pip install outofplace`. Dynamo hands over each captured FX graph (with
`operator.setitem`, `call_method add_`, ...) and its example inputs; the graph is compiled
like any module and runs on XLA:CPU when jax is installed, else on the interpreter,
writing mutated inputs back into the caller's tensors.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .compiled import compile as compile_program
from .errors import UnsupportedMutationError


def _concrete(example: Any) -> Any:
    """A real tensor in place of a fake one, with its layout (the program is compiled for
    the layout it is traced with): the graph is traced again from it."""
    if isinstance(example, torch.Tensor) and \
            isinstance(example, torch._subclasses.fake_tensor.FakeTensor):
        storage = torch.zeros(example.untyped_storage().nbytes() // example.itemsize,
                              dtype=example.dtype)
        return storage.as_strided(example.shape, example.stride(), example.storage_offset())
    return example


def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The dynamo backend: compile the graph once, then run it on every call."""
    for example in example_inputs:
        if isinstance(example, torch.SymInt) or (
                isinstance(example, torch.Tensor) and
                any(isinstance(d, torch.SymInt) for d in example.shape)):
            raise UnsupportedMutationError(
                "torch.compile", "dynamic shapes are not supported yet; call "
                "torch.compile(..., dynamic=False)")
    compiled = compile_program(gm, tuple(_concrete(e) for e in example_inputs))

    def run(*args: Any) -> Any:
        return compiled(*args)

    run.compiled = compiled  # type: ignore[attr-defined]
    return run
