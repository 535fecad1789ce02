"""A program's scalar integer computations, evaluated on the host (for backends/spmd).

A sharded call repeats the program's writes of its state on the caller's tensor, so the
host must know where each `dynamic_update_slice` wrote. A start made of constants and
read-only arguments by a few integer ops (`c[:, pos] = k`: pos wrapped when negative,
then clamped) is computed here from the caller's tensors, with the program's integer
widths; only a start made otherwise is returned by the program as an extra result,
which costs the devices a result per call.

A computation is a tree of `Scalar`s, plain data: Python evaluates it here, the sharded
planned call (backends/sharded_call.cpp) evaluates the same tree in C++.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Sequence

import torch

_BINARY = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
           "maximum": max, "minimum": min}
_COMPARE = {"EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le,
            "GT": operator.gt, "GE": operator.ge}
_SAME = {"stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.convert"}


def _wrap(value: int, bits: int, unsigned: bool) -> int:
    """`value` as an integer of `bits` bits holds it (two's complement)."""
    value &= (1 << bits) - 1
    if not unsigned and bits > 1 and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


@dataclass(frozen=True)
class Scalar:
    """One integer op of the program on one-element values, with its result's width.

    `op`: "argument" (`value` is the argument's index), "constant" (`value`), "convert"
    (one operand, wrapped to this width), "add", "subtract", "multiply", "maximum",
    "minimum", "negate" (wrapped to this width), "select", "clamp" (not wrapped: their
    result is an operand), or a comparison direction "EQ" ... "GE" (0 or 1; `value` is
    the operands' width when they compare as unsigned, else 0)."""

    op: str
    bits: int
    unsigned: bool
    value: int = 0
    operands: tuple["Scalar", ...] = ()

    def __call__(self, inputs: Sequence[torch.Tensor]) -> int:
        op, bits, unsigned = self.op, self.bits, self.unsigned
        if op == "argument":
            return _wrap(int(inputs[self.value].reshape(()).item()), bits, unsigned)
        if op == "constant":
            return self.value
        values = [o(inputs) for o in self.operands]
        if op == "convert":
            return _wrap(values[0], bits, unsigned)
        if op in _BINARY:
            return _wrap(_BINARY[op](*values), bits, unsigned)
        if op == "negate":
            return _wrap(-values[0], bits, unsigned)
        if op == "select":
            return values[1] if values[0] else values[2]
        if op == "clamp":
            low, value, high = values
            return max(low, min(value, high))
        if self.value:  # an unsigned comparison of operands of that width
            values = [_wrap(v, self.value, True) for v in values]
        return int(_COMPARE[op](*values))


def host_scalar(value: Any, read_only: set[int]) -> Scalar | None:
    """The computation of `value` (a one-element integer of the program, in jax's MLIR
    bindings) from the call's arguments, when it is made of constants and arguments in
    `read_only` by the ops `Scalar` names (and reshapes, broadcasts); else None."""
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
            return Scalar("argument", bits, unsigned, index) if index in read_only else None
        name = owner.name
        if name == "stablehlo.constant":
            number = int(ir.DenseIntElementsAttr(owner.attributes["value"])[0])
            return Scalar("constant", bits, unsigned, _wrap(number, bits, unsigned))
        operands = tuple(build(v, depth + 1) for v in owner.operands)
        if any(o is None for o in operands):
            return None
        op = name.removeprefix("stablehlo.")
        if name in _SAME:
            return Scalar("convert", bits, unsigned, 0, operands)
        if op in _BINARY or op in ("negate", "select", "clamp"):
            return Scalar(op, bits, unsigned, 0, operands)
        if op == "compare":
            direction = hlo.ComparisonDirectionAttr(
                owner.attributes["comparison_direction"]).value
            width = 0
            if "compare_type" in owner.attributes and hlo.ComparisonTypeAttr(
                    owner.attributes["compare_type"]).value == "UNSIGNED":
                width = kind(owner.operands[0].type)[0]
            return Scalar(direction, bits, unsigned, width, operands)
        return None

    return build(value, 0)
