"""`outofplace-upstream-unsigned-integers`: comparisons and right shifts of unsigned
integers as unsigned, as eager computes them.

torch-mlir's StableHLO lowering compares and shifts every integer type as signed:

    %0 = torch.aten.gt.Tensor %a, %b : !torch.vtensor<[5],ui8>, ... -> !torch.vtensor<[5],i1>
    =>  stablehlo.compare GT, %a, %b, SIGNED : (tensor<5xui8>, tensor<5xui8>) -> ...
    %1 = torch.aten.bitwise_right_shift.Tensor %a, %b : !torch.vtensor<[5],ui8>, ...
    =>  stablehlo.shift_right_arithmetic %a, %b : tensor<5xui8>

    %2 = torch.aten.amax %a, ... : !torch.vtensor<[5],ui8> ... -> !torch.vtensor<[],ui8>
    =>  stablehlo.reduce(%a init: dense<128>) applies stablehlo.maximum ...

XLA rejects the comparison (its HLO verifier: "Expected comparison type UNSIGNED", at
the first call), `x >> 3` of a uint8 200 gave 249 (eager: 25), and the max of uint8
values below 128 was 128 (the init is int8's least value, -128, as a uint8), on every
engine. A comparison of unsigned operands becomes UNSIGNED, a right shift of unsigned
ones logical, and a reduction's init that is the signed type's least (greatest) value
becomes the unsigned type's least (greatest): 0 (all ones). Canary:
test_upstream_canaries.test_unsigned_integers_compare_and_shift_as_signed.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from ...ir_utils import all_operations, stablehlo_splat
from ..registry import register_pass


def _unsigned(value: ir.Value) -> bool:
    """Unsigned integers, and booleans (i1, which StableHLO compares as unsigned)."""
    element = ir.ShapedType(value.type).element_type
    return isinstance(element, ir.IntegerType) and (element.is_unsigned or
                                                    element.width == 1)


def _splat(value: ir.Value) -> int | None:
    """The bits of a splat integer constant, as an unsigned number; else None."""
    if not isinstance(value, ir.OpResult) or value.owner.operation.name != "stablehlo.constant":
        return None
    attribute = ir.DenseIntElementsAttr(value.owner.operation.attributes["value"])
    if not attribute.is_splat:
        return None
    width = ir.IntegerType(ir.ShapedType(value.type).element_type).width
    return attribute.get_splat_value().value % (1 << width)


def _unsigned_inits(op: ir.Operation) -> list[ir.Operation]:
    """A reduction's inits as the unsigned type means them: the identity of a max (min)
    body, 0 (all ones); and, in any body (argmax's), the signed type's least (greatest)
    value as the unsigned type's. Returns the constants no longer used."""
    inputs = len(op.operands) // 2
    body = [o.name for o in op.regions[0].blocks[0].operations]
    replaced = []
    for i in range(inputs, 2 * inputs):
        init = op.operands[i]
        value = _splat(init) if _unsigned(init) else None
        if value is None:
            continue
        element = ir.ShapedType(init.type).element_type
        width = ir.IntegerType(element).width
        least, greatest = 0, (1 << width) - 1
        if inputs == 1 and body == ["stablehlo.maximum", "stablehlo.return"]:
            wanted = least
        elif inputs == 1 and body == ["stablehlo.minimum", "stablehlo.return"]:
            wanted = greatest
        elif width > 1 and value in (1 << (width - 1), (1 << (width - 1)) - 1):
            wanted = least if value == 1 << (width - 1) else greatest
        else:
            continue
        if value == wanted:
            continue
        with ir.InsertionPoint(op):
            op.operands[i] = stablehlo_splat(init.type, wanted, op.location)
        replaced.append(init.owner.operation)
    return replaced


@register_pass(
    "outofplace-upstream-unsigned-integers",
    "Compare, shift and reduce unsigned integers as unsigned (torch-mlir: as signed)",
    "`stablehlo.compare ..., SIGNED` of unsigned operands → `UNSIGNED`; "
    "`stablehlo.shift_right_arithmetic` of unsigned operands → `shift_right_logical`; a "
    "`reduce` or `reduce_window` init of an unsigned type that is the signed type's least "
    "(greatest) value → 0 (all ones), and a max (min) reduction of booleans from false "
    "(true); booleans compared `UNSIGNED`: torch-mlir's StableHLO lowering treats every "
    "integer type, i1 too, as signed (a workaround, transforms/upstream/)")
def unsigned_integers(module: ir.Operation) -> None:
    unused = []
    for op in list(all_operations(module)):
        if op.name in ("stablehlo.reduce", "stablehlo.reduce_window"):
            unused += _unsigned_inits(op)
        elif op.name == "stablehlo.compare" and _unsigned(op.operands[0]):
            op.attributes["compare_type"] = _stablehlo.ComparisonTypeAttr.get("UNSIGNED")
        elif op.name == "stablehlo.shift_right_arithmetic" and _unsigned(op.operands[0]):
            shift = ir.Operation.create(
                "stablehlo.shift_right_logical", results=[op.results[0].type],
                operands=list(op.operands), loc=op.location, ip=ir.InsertionPoint(op))
            op.results[0].replace_all_uses_with(shift.results[0])
            op.erase()
    distinct: list[ir.Operation] = []  # one init may serve several reductions
    for constant in unused:
        if not any(constant == seen for seen in distinct):
            distinct.append(constant)
    for constant in distinct:
        if not list(constant.results[0].uses):
            constant.erase()
