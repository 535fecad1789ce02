"""The MLIR context every outofplace module lives in."""

from __future__ import annotations

from torch_mlir import ir, passmanager
from torch_mlir._mlir_libs import _stablehlo
from torch_mlir.dialects import torch as torch_d


def load_torch_conversion(context: ir.Context) -> None:
    """Loads torch-mlir's `torch_c` dialect, in which updates cross to builtin tensors.

    The wheel's Python bindings register `torch` but not `torch_c`; torch-mlir loads it
    only as a dependent dialect of its passes. Running one such pass on an empty module
    loads it into `context`.
    """
    if context.is_registered_operation("torch_c.to_builtin_tensor"):
        return
    with context, ir.Location.unknown():
        empty = ir.Module.create()
        passmanager.PassManager.parse(
            "builtin.module(torch-func-backend-type-conversion)").run(empty.operation)


def make_context() -> ir.Context:
    """A context with the torch, torch_c and StableHLO dialects."""
    context = ir.Context()
    torch_d.register_dialect(context)
    _stablehlo.register_dialect(context)
    load_torch_conversion(context)
    return context
