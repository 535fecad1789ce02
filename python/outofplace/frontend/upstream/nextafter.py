"""`torch.nextafter(x, y)`: the float after x toward y, a step of one in x's bits.

torch-mlir defines neither `aten.nextafter` nor the `prims.nextafter` PyTorch
decomposes it to. Each element is computed on the float's bits (`view` as the integer of
its width, a bitcast): toward a greater value a positive x's bits grow by one and a
negative x's shrink, toward a smaller value the reverse; from a zero the least
subnormal with y's sign; x equal to y gives y (a zero's sign too), a NaN gives NaN, as
C's `nextafter` and eager's kernel. The comparisons are of the floats' places in order,
as integers, and the result is made from bits: a subnormal x or result is exact,
although XLA:CPU takes subnormal floats as zeros.

Upstream: no issue found (torch-mlir defines no nextafter).
Canary: test/pytest/test_fx_upstream_canaries.py::test_nextafter_is_undefined.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[next_floats].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..inline import inline_call

_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16,
         torch.float32: torch.int32, torch.float64: torch.int64}


def _nextafter(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = torch.broadcast_tensors(x, y)
    integer = _BITS[x.dtype]
    lowest = torch.iinfo(integer).min  # the sign bit
    bits, y_bits = x.view(integer), y.view(integer)
    # each float's place in order as an integer (-0.0 and 0.0 at 0): compared there, as
    # XLA:CPU compares a subnormal float as zero
    key, y_key = (torch.where(b < 0, lowest - b, b) for b in (bits, y_bits))
    up = y_key > key
    step = torch.where(up == (key > 0), 1, -1).to(integer)
    # the least subnormal, its sign y's (its bits 1, or 1 and the sign bit)
    from_zero = torch.where(up, torch.ones_like(bits), torch.full_like(bits, lowest + 1))
    moved = torch.where(key == 0, from_zero, bits + step)
    result = torch.where(key == y_key, y_bits, moved)
    unordered = (x + y).view(integer)  # a NaN
    return torch.where(x.isnan() | y.isnan(), unordered, result).view(x.dtype)


def _next(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """nextafter(x, y)  =>  `_nextafter`"""
    x, y = node.args[:2]
    if x.meta["val"].dtype not in _BITS or y.meta["val"].dtype != x.meta["val"].dtype:
        return None
    return inline_call(graph, node, _nextafter, x, y)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.nextafter.default: _next,
    torch.ops.prims.nextafter.default: _next,
}
