"""`remainder` with Python's sign, and `fmod` by a number.

torch-mlir lowers `remainder.Tensor` to `stablehlo.remainder`, which keeps the dividend's
sign (C's fmod; eager's remainder has the divisor's), and leaves `fmod.Scalar` without a
StableHLO lowering. Upstream: llvm/torch-mlir#4440 (open: remainder as a floor division),
llvm/torch-mlir#3575 (the same bug in the linalg lowering, fixed there only),
llvm/torch-mlir#4448 (open: fmod.Scalar's StableHLO lowering).
Canaries: test/pytest/test_fx_upstream_canaries.py::test_remainder_keeps_the_dividends_sign,
::test_fmod_scalar_does_not_lower.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call


def _remainder(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """Python's modulo, the sign of the divisor:

        r = fmod(a, b);  where(r != 0 and (r < 0) != (b < 0), r + b, r)
    """
    a, b = node.args[:2]
    if isinstance(b, torch.fx.Node):
        r = call(graph, torch.ops.aten.fmod.Tensor, a, b)
        r_negative = call(graph, torch.ops.aten.lt.Scalar, r, 0)
        # logical_xor, not ne: torch-mlir compares booleans as signed, which XLA rejects
        differ = call(graph, torch.ops.aten.logical_xor.default, r_negative,
                      call(graph, torch.ops.aten.lt.Scalar, b, 0))
        shifted = call(graph, torch.ops.aten.add.Tensor, r, b)
    else:  # b's sign is known; torch-mlir lowers fmod only between tensors
        divisor = call(graph, torch.ops.aten.scalar_tensor.default, b,
                       dtype=a.meta["val"].dtype)
        r = call(graph, torch.ops.aten.fmod.Tensor, a, divisor)
        r_negative = call(graph, torch.ops.aten.lt.Scalar, r, 0)
        differ = r_negative if b >= 0 else call(
            graph, torch.ops.aten.logical_not.default, r_negative)
        shifted = call(graph, torch.ops.aten.add.Scalar, r, b)
    fix = call(graph, torch.ops.aten.logical_and.default,
               call(graph, torch.ops.aten.ne.Scalar, r, 0), differ)
    result = call(graph, torch.ops.aten.where.self, fix, shifted, r)
    if node.target in (torch.ops.aten.remainder_.Tensor, torch.ops.aten.remainder_.Scalar):
        return call(graph, torch.ops.aten.copy_.default, a, result)
    return result


def _fmod_scalar(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """`x.fmod_(1.5)`  =>  fmod by a 0-d tensor of the result's dtype."""
    a, b = node.args[:2]
    divisor = call(graph, torch.ops.aten.scalar_tensor.default, b,
                   dtype=node.meta["val"].dtype)
    target = torch.ops.aten.fmod_.Tensor if node.target is torch.ops.aten.fmod_.Scalar \
        else torch.ops.aten.fmod.Tensor
    return call(graph, target, a, divisor)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    **{op: _remainder for op in (
        torch.ops.aten.remainder.Tensor, torch.ops.aten.remainder.Scalar,
        torch.ops.aten.remainder_.Tensor, torch.ops.aten.remainder_.Scalar)},
    torch.ops.aten.fmod.Scalar: _fmod_scalar,
    torch.ops.aten.fmod_.Scalar: _fmod_scalar,
}
