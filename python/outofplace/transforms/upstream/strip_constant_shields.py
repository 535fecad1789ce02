"""`outofplace-strip-constant-shields`: the barriers `outofplace-shield-constants`
(shield_constants.py, which says why they exist) put around every literal for the length
of torch-mlir's pipelines removed once those are done, and the reshapes, broadcasts,
transposes, slices and conversions of constants the lowering put after them folded (as
torch-mlir's folders used to), with StableHLO's reference interpreter, so the emitted
program holds one constant where it held one. Goes with its partner once the canaries of
test/pytest/test_upstream_canaries.py fail.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo
from torch_mlir.dialects import func as func_d

from ...ir_utils import all_operations, unnamed
from ..registry import register_pass
from .shield_constants import SHIELD

# Ops that only move or convert elements, folded when their operand is a constant.
_MOVES = frozenset({"stablehlo.reshape", "stablehlo.broadcast_in_dim",
                    "stablehlo.transpose", "stablehlo.slice", "stablehlo.convert",
                    "stablehlo.concatenate"})
_MAX_ELEMENTS = 1 << 16  # larger non-splat results are left to run time


def _constant_value(value: ir.Value) -> ir.DenseElementsAttr | None:
    if isinstance(value, ir.OpResult) and value.owner.name == "stablehlo.constant":
        return ir.DenseElementsAttr(value.owner.attributes["value"])
    return None


def _evaluate(name: str, attributes: dict[str, ir.Attribute],
              operands: list[ir.DenseElementsAttr], result_type: ir.RankedTensorType
              ) -> ir.DenseElementsAttr:
    """Op `name` applied to constant operands, by StableHLO's reference interpreter."""
    with ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            main = func_d.FuncOp("main", ir.FunctionType.get([], [result_type]))
            with ir.InsertionPoint(main.add_entry_block()):
                constants = [ir.Operation.create("stablehlo.constant", results=[o.type],
                                                 attributes={"value": o}).result
                             for o in operands]
                moved = ir.Operation.create(name, results=[result_type], operands=constants,
                                            attributes=attributes)
                func_d.ReturnOp([moved.result])
    (result,) = _stablehlo.eval_module(module, [])
    return ir.DenseElementsAttr(result)


def _fold_move(op: ir.Operation) -> bool:
    """Replaces a reshape, broadcast, transpose, slice, conversion or concatenation of
    constants by the constant it makes, unless that is a large non-splat one."""
    operands = [_constant_value(v) for v in op.operands]
    result_type = ir.RankedTensorType(op.result.type)
    if not operands or any(o is None for o in operands) or not result_type.has_static_shape:
        return False
    if len(operands) == 1 and operands[0].is_splat:  # the same splat, converted if need be
        splat = operands[0].get_splat_value()
        if op.name == "stablehlo.convert":
            with op.location:
                one = ir.RankedTensorType.get([], ir.ShapedType(operands[0].type).element_type)
                into = ir.RankedTensorType.get([], result_type.element_type)
            splat = _evaluate(op.name, {}, [ir.DenseElementsAttr.get_splat(one, splat)],
                              into).get_splat_value()
        value = ir.DenseElementsAttr.get_splat(result_type, splat)
    elif np.prod(result_type.shape) <= _MAX_ELEMENTS:
        attributes = {name: op.attributes[name] for name in op.attributes}
        value = _evaluate(op.name, attributes, operands, result_type)
    else:
        return False
    constant = ir.Operation.create("stablehlo.constant", results=[op.result.type],
                                   attributes={"value": value}, loc=unnamed(op.location),
                                   ip=ir.InsertionPoint(op))  # a constant, no version
    op.result.replace_all_uses_with(constant.result)
    op.erase()
    return True


@register_pass(
    "outofplace-strip-constant-shields",
    "Remove the constant shields and fold reshapes and broadcasts of constants",
    'removes the barriers `outofplace-shield-constants` put, then folds `reshape`, '
    '`broadcast_in_dim`, `transpose`, `slice`, `convert` and `concatenate` of '
    "`stablehlo.constant`s (by StableHLO's reference interpreter; splats of any size, "
    'others up to 65,536 elements)')
def strip_constant_shields(module: ir.Operation) -> None:
    """Removes the barriers `shield_constants` put, then folds the moves of constants."""
    for op in all_operations(module):
        if op.name == "stablehlo.optimization_barrier" and SHIELD in op.attributes:
            op.result.replace_all_uses_with(op.operands[0])
            op.erase()
    for op in all_operations(module):  # program order: a fold feeds the next move
        if op.name not in _MOVES:
            continue
        sources = list(op.operands)  # constants: _fold_move folds nothing else
        if _fold_move(op):
            for source in {s.owner: s for s in sources}.values():  # `concatenate %c, %c`
                if not list(source.uses):
                    source.owner.erase()
