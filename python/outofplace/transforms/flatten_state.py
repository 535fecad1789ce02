"""`outofplace-flatten-state`: a written argument whose new value is computed elementwise
(an optimizer's parameters and momentum, an `ema.mul_(d).add_(w)`) is passed, computed and
returned as one flat dimension, for XLA:CPU.

XLA:CPU emits a loop fusion as one loop per dimension of its shape and vectorizes only
the innermost: over a convolution's weight [512, 512, 3, 3] that loop has 3 elements, and
the elementwise update runs at 1.06 ns an element where the same update over a flat array
takes 0.43 (SGD with momentum over ResNet-18's parameters: 12.0 ms a step against eager's
6.5; JAX's own program pays the same, docs/performance.md). XLA cannot be told to flatten:
its reshape mover sinks reshapes of every operand of an elementwise op below it, so a
flattening inside the program is undone (the XLA engine now compiles without the mover,
backends/xla COMPILE_OPTIONS, for the operands this pass reshapes). A parameter that is
flat itself stays so:

    func.func @main(%w: tensor<64x64x3x3xf32> {tf.aliasing_output = 0 : i32}, %g: ...)
      %s = stablehlo.multiply %g, %lr : tensor<64x64x3x3xf32>
      %n = stablehlo.subtract %w, %s : tensor<64x64x3x3xf32>
      return %n
  =>
    func.func @main(%w: tensor<36864xf32> {tf.aliasing_output = 0 : i32}, %g: ...)
      %g1 = stablehlo.reshape %g : (tensor<64x64x3x3xf32>) -> tensor<36864xf32>
      %lr1 = stablehlo.reshape %lr : (tensor<64x64x3x3xf32>) -> tensor<36864xf32>
      %s = stablehlo.multiply %g1, %lr1 : tensor<36864xf32>
      %n = stablehlo.subtract %w, %s : tensor<36864xf32>
      return %n

The elementwise ops the returned value is computed by, back to the first operand that is
not one (a gradient a convolution's call made, a constant, another argument), compute on
the flat shape; each such operand is reshaped to it (a bitcast for XLA), and the
argument is reshaped back for its other readers (the forward's convolution). Only an
argument whose new value is no update of it in place (`dynamic_update_slice`, `scatter`:
a cache) is flattened, so XLA's updates in place are left as they are. Only the XLA
engine runs it (backends/xla): the program a user exports keeps the caller's shapes.
"""

from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from ..ir_utils import all_operations, operations, ranked_shape, reshape, retype_function
from ..signature import io_map_of
from .registry import register_pass

# StableHLO ops computing each element from the same element of each operand.
ELEMENTWISE = frozenset(f"stablehlo.{name}" for name in (
    "abs add and atan2 cbrt ceil clamp compare complex convert cosine "
    "count_leading_zeros divide exponential exponential_minus_one floor imag is_finite "
    "log log_plus_one logistic maximum minimum multiply negate not or popcnt power real "
    "reduce_precision remainder round_nearest_afz round_nearest_even rsqrt select "
    "shift_left shift_right_arithmetic shift_right_logical sign sine sqrt subtract tan "
    "tanh xor").split())


def _elementwise(value: ir.Value, shape: list[int]) -> bool:
    """Whether value is made by an elementwise op of `shape` whose operands all have it
    (a `select` or `clamp` with a scalar operand is not)."""
    if not isinstance(value, ir.OpResult) or value.owner.name not in ELEMENTWISE:
        return False
    return all(isinstance(v.type, ir.RankedTensorType) and ranked_shape(v) == shape
               for v in [*value.owner.operands, *value.owner.results])


def _cone(value: ir.Value, shape: list[int], found: set) -> None:
    """The results of the elementwise ops of `shape` that `value` is computed by, into
    `found` (values, which hash as what they are; operations' wrappers may not)."""
    stack = [value]
    while stack:
        value = stack.pop()
        if value in found or not _elementwise(value, shape):
            continue
        found.add(value)
        stack.extend(value.owner.operands)


def _flat_type(value: ir.Value) -> ir.Type:
    return ir.RankedTensorType.get([math.prod(ranked_shape(value))],
                                   ir.RankedTensorType(value.type).element_type)


def _flattened(value: ir.Value, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """value as a flat tensor: a splat constant made again flat, else a reshape."""
    type_ = _flat_type(value)
    if isinstance(value, ir.OpResult) and value.owner.name == "stablehlo.constant":
        literal = ir.DenseElementsAttr(value.owner.attributes["value"])
        if literal.is_splat:
            return ir.Operation.create(
                "stablehlo.constant", results=[type_], loc=value.owner.location, ip=ip,
                attributes={"value": ir.DenseElementsAttr.get_splat(
                    type_, literal.get_splat_value())}).result
    return reshape(value, [math.prod(ranked_shape(value))], ip, loc)


def _through_reshapes(value: ir.Value) -> ir.Value:
    """The value `value` reshapes, through any chain of reshapes (the same elements in
    the same order)."""
    while isinstance(value, ir.OpResult) and value.owner.name == "stablehlo.reshape":
        value = value.owner.operands[0]
    return value


def _flatten(function: func_d.FuncOp) -> None:
    block = function.entry_block
    ret = block.operations[len(block.operations) - 1].operation
    new_values: dict[int, ir.Value] = {}  # result -> the elementwise value it returns
    cone: set = set()
    for argument, result in sorted(io_map_of(function).items()):
        value = block.arguments[argument]
        if not isinstance(value.type, ir.RankedTensorType) or \
                ir.ShapedType.get_dynamic_size() in ranked_shape(value):
            continue
        # (through the reshape that gives a squeezed argument's value its unit
        # dimensions back, outofplace-squeeze-state)
        new = _through_reshapes(ret.operands[result])
        shape = ranked_shape(new)
        if max(len(shape), len(ranked_shape(value))) < 2 or \
                not _elementwise(new, shape) or \
                math.prod(shape) != math.prod(ranked_shape(value)):
            continue
        new_values[result] = new
        _cone(new, shape, cone)
    if not new_values:
        return
    flat_arguments = set()
    first = block.operations[0]
    for argument, result in sorted(io_map_of(function).items()):
        if result in new_values:
            value = block.arguments[argument]
            old_type = value.type
            value.set_type(_flat_type(value))
            back = reshape(value, ir.RankedTensorType(old_type).shape,
                           ir.InsertionPoint(first), first.location)
            value.replace_all_uses_except(back, back.owner.operation)
            flat_arguments.add(value)
    # In program order, so each op's operands in the cone are flat before it.
    for op in all_operations(function.operation):
        if op.name not in ELEMENTWISE or op.result not in cone:
            continue
        ip = ir.InsertionPoint(op)
        for i, operand in enumerate(list(op.operands)):
            source = _through_reshapes(operand)
            if source in flat_arguments or source in cone:  # flat already
                op.operands[i] = source
            elif operand not in cone:
                op.operands[i] = _flattened(source, ip, op.location)
        old_type = op.result.type
        op.result.set_type(_flat_type(op.result))
        outside = [(use.owner.operation, use.operand_number) for use in op.result.uses
                   if not (use.owner.name in ELEMENTWISE and use.owner.result in cone)]
        if outside:
            back = reshape(op.result, ir.RankedTensorType(old_type).shape,
                           ir.InsertionPoint.after(op), op.location)
            for owner, number in outside:
                owner.operands[number] = back
    for result, value in new_values.items():
        ret.operands[result] = value
    for op in reversed(all_operations(function.operation)):
        if op.name in ("stablehlo.reshape", "stablehlo.constant") and \
                not list(op.result.uses):
            op.erase()
    retype_function(function)


@register_pass(
    "outofplace-flatten-state",
    "Pass, compute and return written arguments updated elementwise as flat arrays (XLA:CPU)",
    "a written argument of rank 2 or more whose new value an elementwise op computes "
    "(an optimizer's update) becomes one flat dimension, and so do the elementwise ops "
    "computing it, their other operands reshaped: XLA:CPU vectorizes a loop fusion over "
    "its innermost dimension only (3 elements in a 3x3 convolution's weight) "
    "(the XLA engine's legalization, backends/xla)")
def flatten_state(module: ir.Operation) -> None:
    for op in operations(module.regions[0].blocks[0]):
        if op.name == "func.func":
            with op.location:
                _flatten(op.opview)
