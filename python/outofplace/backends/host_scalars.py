"""A program's scalar integer computations, evaluated on the host (for backends/spmd.py).

A sharded call repeats the program's writes of its state on the caller's tensor, so the
host must know where each `dynamic_update_slice` wrote. A start made of constants and
read-only arguments by a few integer ops (`c[:, pos] = k`: pos wrapped when negative,
then clamped) is computed here from the caller's tensors, with the program's integer
widths; only a start made otherwise is returned by the program as an extra result,
which costs the devices a result per call.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Sequence

import torch

Scalar = Callable[[Sequence[torch.Tensor]], int]

_BINARY = {"stablehlo.add": operator.add, "stablehlo.subtract": operator.sub,
           "stablehlo.multiply": operator.mul, "stablehlo.maximum": max,
           "stablehlo.minimum": min}
_COMPARE = {"EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le,
            "GT": operator.gt, "GE": operator.ge}
_SAME = {"stablehlo.reshape", "stablehlo.broadcast_in_dim"}  # of one element


def _wrap(value: int, bits: int, unsigned: bool) -> int:
    """`value` as an integer of `bits` bits holds it (two's complement)."""
    value &= (1 << bits) - 1
    if not unsigned and bits > 1 and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def host_scalar(value: Any, read_only: set[int]) -> Scalar | None:
    """A function of the call's arguments computing `value` (a one-element integer of the
    program, in jax's MLIR bindings) as the program does, when it is made of constants
    and arguments in `read_only` by the ops above, select, compare, clamp, negate and
    convert; else None."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    def kind(type: Any) -> tuple[int, bool] | None:  # (bits, unsigned) of a scalar int
        ranked = ir.RankedTensorType(type)
        integer = ranked.element_type
        if math.prod(ranked.shape) != 1 or not isinstance(integer, ir.IntegerType):
            return None
        return integer.width, integer.is_unsigned or integer.width == 1

    def build(value: Any, depth: int) -> Scalar | None:
        bits_unsigned = kind(value.type)
        if bits_unsigned is None or depth > 64:
            return None
        bits, unsigned = bits_unsigned
        owner = value.owner
        if isinstance(owner, ir.Block):
            index = ir.BlockArgument(value).arg_number
            if index not in read_only:
                return None
            return lambda inputs: _wrap(int(inputs[index].reshape(()).item()), bits, unsigned)
        name = owner.name
        if name == "stablehlo.constant":
            number = _wrap(int(ir.DenseIntElementsAttr(owner.attributes["value"])[0]),
                           bits, unsigned)
            return lambda inputs: number
        operands = [build(v, depth + 1) for v in owner.operands]
        if any(o is None for o in operands):
            return None
        if name in _SAME or name == "stablehlo.convert":
            (a,) = operands
            return lambda inputs: _wrap(a(inputs), bits, unsigned)
        if name in _BINARY:
            a, b = operands
            op = _BINARY[name]
            return lambda inputs: _wrap(op(a(inputs), b(inputs)), bits, unsigned)
        if name == "stablehlo.negate":
            (a,) = operands
            return lambda inputs: _wrap(-a(inputs), bits, unsigned)
        if name == "stablehlo.select":
            p, a, b = operands
            return lambda inputs: a(inputs) if p(inputs) else b(inputs)
        if name == "stablehlo.clamp":
            low, a, high = operands
            return lambda inputs: max(low(inputs), min(a(inputs), high(inputs)))
        if name == "stablehlo.compare":
            compare = _COMPARE[hlo.ComparisonDirectionAttr(
                owner.attributes["comparison_direction"]).value]
            a, b = operands
            if "compare_type" in owner.attributes and hlo.ComparisonTypeAttr(
                    owner.attributes["compare_type"]).value == "UNSIGNED":
                width = kind(owner.operands[0].type)[0]
                return lambda inputs: int(compare(_wrap(a(inputs), width, True),
                                                  _wrap(b(inputs), width, True)))
            return lambda inputs: int(compare(a(inputs), b(inputs)))
        return None

    return build(value, 0)
