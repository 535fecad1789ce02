"""`remainder` with Python's sign, `fmod` exact, and floor division as eager's.

torch-mlir lowers `remainder.Tensor` to `stablehlo.remainder`, which keeps the dividend's
sign (C's fmod; eager's remainder has the divisor's), leaves `fmod.Scalar` without a
StableHLO lowering, and lowers `fmod.Tensor` as `a - sign(a/b) * floor(|a/b|) * b`: NaN
for a finite dividend by an infinite divisor (C's fmod: the dividend), and wrong wherever
the quotient is past the float's integers (`fmod(1e10, 3.0)` gave 256, eager 1). Its
`div(..., rounding_mode="floor")` of floats is `floor(a / b)`: `inf // -104` gave -inf and
`88.8 // -inf` -0.0 where eager (and Python) give NaN and -1.0; of integers it goes
through floats: int64 quotients past 2**53 came out rounded.

So every fmod here is `fmod.Tensor` of operands of its result's shape and dtype, which
outofplace-upstream-fmod (transforms/upstream/fmod.py) lowers to `stablehlo.remainder`
(C's fmod, exact); remainder is that fmod and a sign fix; floor division of floats is eager's
`div_floor_floating` (the quotient of the dividend less its fmod, rounded as eager does),
of integers the truncated quotient and a correction.
Upstream: llvm/torch-mlir#4440 (open: remainder as a floor division),
llvm/torch-mlir#3575 (the same bug in the linalg lowering, fixed there only),
llvm/torch-mlir#4448 (open: fmod.Scalar's StableHLO lowering); for fmod.Tensor and
floor division no issue found.
Canaries: test/pytest/test_fx_upstream_canaries.py::test_remainder_keeps_the_dividends_sign,
::test_fmod_scalar_does_not_lower, ::test_fmod_is_a_quotient_formula.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import arguments, call
from ..inline import inline_call

def _c_fmod(graph: torch.fx.Graph, a: Any, b: Any, like: torch.fx.Node) -> torch.fx.Node:
    """C's fmod of a and b (nodes or numbers): `fmod.Tensor` of operands broadcast and
    converted to `like`'s shape and dtype, which outofplace-upstream-fmod lowers to
    stablehlo.remainder."""
    value = like.meta["val"]
    shape, dtype = list(value.shape), value.dtype

    def operand(v: Any) -> torch.fx.Node:
        if not isinstance(v, torch.fx.Node):
            return call(graph, torch.ops.aten.full.default, shape, v, dtype=dtype)
        if v.meta["val"].dtype != dtype:
            v = call(graph, torch.ops.aten._to_copy.default, v, dtype=dtype)
        if list(v.meta["val"].shape) != shape:
            v = call(graph, torch.ops.aten.expand.default, v, shape)
        return v
    return call(graph, torch.ops.aten.fmod.Tensor, operand(a), operand(b))


def _like(node: torch.fx.Node) -> bool:
    """An fmod whose operands have its result's shape and dtype already."""
    value = node.meta["val"]
    return all(isinstance(v, torch.fx.Node) and v.meta["val"].dtype == value.dtype and
               v.meta["val"].shape == value.shape for v in node.args[:2])


def _remainder(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """Python's modulo, the sign of the divisor:

        r = fmod(a, b);  where(r != 0 and (r < 0) != (b < 0), r + b, r)
    """
    a, b = node.args[:2]
    if isinstance(b, torch.fx.Node):
        r = _c_fmod(graph, a, b, node)
        r_negative = call(graph, torch.ops.aten.lt.Scalar, r, 0)
        # logical_xor, not ne: torch-mlir compares booleans as signed, which XLA rejects
        differ = call(graph, torch.ops.aten.logical_xor.default, r_negative,
                      call(graph, torch.ops.aten.lt.Scalar, b, 0))
        shifted = call(graph, torch.ops.aten.add.Tensor, r, b)
    else:  # b's sign is known; torch-mlir lowers fmod only between tensors
        r = _c_fmod(graph, a, b, node)
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


def _fmod(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """`fmod(a, b)`, `a.fmod_(1.5)`  =>  C's fmod of like operands (`_c_fmod`)."""
    if node.target is torch.ops.aten.fmod.Tensor and _like(node):
        return None
    a, b = node.args[:2]
    result = _c_fmod(graph, a, b, node)
    if node.target in (torch.ops.aten.fmod_.Tensor, torch.ops.aten.fmod_.Scalar):
        return call(graph, torch.ops.aten.copy_.default, a, result)
    return result


def _floor_divided(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """eager's `div_floor_floating`: the quotient of a less its fmod, one less where the
    fmod's sign is not the divisor's, rounded to the nearest integer below it; a zero
    quotient with the sign of a / b; a / b where b is 0."""
    a, b = torch.broadcast_tensors(a, b)  # (like operands: C's fmod, outofplace-upstream-fmod)
    quotient = a / b
    mod = torch.fmod(a, b)
    div = (a - mod) / b
    div = torch.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = torch.floor(div)
    floored = torch.where(div - floored > 0.5, floored + 1, floored)
    floored = torch.where(div == 0, torch.copysign(torch.zeros_like(div), quotient), floored)
    return torch.where(b == 0, quotient, floored)


def _floor_divided_integers(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Integer floor division as the truncated quotient (exact: stablehlo.divide of
    integers), one less where the remainder's sign is not the divisor's."""
    quotient = torch.div(a, b, rounding_mode="trunc")
    r = a - quotient * b
    return quotient - ((r != 0) & ((r < 0) != (b < 0))).to(quotient.dtype)


def _floor_division(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """`div(a, b, rounding_mode="floor")`, `floor_divide(a, b)`  =>  `_floor_divided` of
    floats (its fmod rewritten to C's in decompose's next pass), `_floor_divided_integers`
    of integers (torch-mlir's went through floats: int64 past 2**53 came out rounded)."""
    if node.target is torch.ops.aten.div.Tensor_mode and \
            arguments(node)["rounding_mode"] != "floor":
        return None
    dtype = node.meta["val"].dtype
    if dtype == torch.bool or dtype.is_complex:
        return None
    a, b = node.args[:2]
    divide = _floor_divided if dtype.is_floating_point else _floor_divided_integers

    def divided(a: Any, b: Any) -> torch.Tensor:
        return divide(torch.as_tensor(a).to(dtype), torch.as_tensor(b).to(dtype))
    return inline_call(graph, node, divided, a, b)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    **{op: _remainder for op in (
        torch.ops.aten.remainder.Tensor, torch.ops.aten.remainder.Scalar,
        torch.ops.aten.remainder_.Tensor, torch.ops.aten.remainder_.Scalar)},
    **{op: _fmod for op in (torch.ops.aten.fmod.Tensor, torch.ops.aten.fmod.Scalar,
                            torch.ops.aten.fmod_.Tensor, torch.ops.aten.fmod_.Scalar)},
    torch.ops.aten.div.Tensor_mode: _floor_division,
    torch.ops.aten.floor_divide.default: _floor_division,
}
