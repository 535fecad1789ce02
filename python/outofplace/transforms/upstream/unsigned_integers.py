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

from ...ir_utils import all_operations
from ..registry import register_pass


def _unsigned(value: ir.Value) -> bool:
    element = ir.ShapedType(value.type).element_type
    return isinstance(element, ir.IntegerType) and element.is_unsigned


def _unsigned_init(init: ir.Value) -> None:
    """A reduction's init constant that is the signed type's least (greatest) value, as
    the unsigned type's least (greatest) value: what torch-mlir meant by it."""
    if not _unsigned(init) or not isinstance(init, ir.OpResult):
        return
    owner = init.owner.operation
    if owner.name != "stablehlo.constant":
        return
    attribute = ir.DenseIntElementsAttr(owner.attributes["value"])
    width = ir.IntegerType(ir.ShapedType(init.type).element_type).width
    if not attribute.is_splat:
        return
    value = attribute.get_splat_value().value
    if value % (1 << width) not in (1 << (width - 1), (1 << (width - 1)) - 1):
        return
    extreme = 0 if value % (1 << width) == 1 << (width - 1) else (1 << width) - 1
    with owner.location, ir.InsertionPoint(owner):
        constant = ir.Operation.create("stablehlo.constant", results=[init.type], attributes={
            "value": ir.DenseElementsAttr.get_splat(
                init.type, ir.IntegerAttr.get(ir.ShapedType(init.type).element_type,
                                              extreme))})
    init.replace_all_uses_with(constant.results[0])
    owner.erase()


@register_pass(
    "outofplace-upstream-unsigned-integers",
    "Compare, shift and reduce unsigned integers as unsigned (torch-mlir: as signed)",
    "`stablehlo.compare ..., SIGNED` of unsigned operands → `UNSIGNED`; "
    "`stablehlo.shift_right_arithmetic` of unsigned operands → `shift_right_logical`; a "
    "`reduce` or `reduce_window` init of an unsigned type that is the signed type's least "
    "(greatest) value → 0 (all ones): torch-mlir's StableHLO lowering treats every "
    "integer type as signed (a workaround, transforms/upstream/)")
def unsigned_integers(module: ir.Operation) -> None:
    for op in all_operations(module):
        if op.name in ("stablehlo.reduce", "stablehlo.reduce_window"):
            inits = list(op.operands)[len(op.operands) // 2:]
            for init in inits:
                _unsigned_init(init)
        elif op.name == "stablehlo.compare" and _unsigned(op.operands[0]):
            op.attributes["compare_type"] = _stablehlo.ComparisonTypeAttr.get("UNSIGNED")
        elif op.name == "stablehlo.shift_right_arithmetic" and _unsigned(op.operands[0]):
            shift = ir.Operation.create(
                "stablehlo.shift_right_logical", results=[op.results[0].type],
                operands=list(op.operands), loc=op.location, ip=ir.InsertionPoint(op))
            op.results[0].replace_all_uses_with(shift.results[0])
            op.erase()
