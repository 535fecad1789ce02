"""The MLIR context every outofplace module lives in."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo
from torch_mlir.dialects import torch as torch_d


def make_context() -> ir.Context:
    """A context with the torch and StableHLO dialects registered."""
    context = ir.Context()
    torch_d.register_dialect(context)
    _stablehlo.register_dialect(context)
    return context
