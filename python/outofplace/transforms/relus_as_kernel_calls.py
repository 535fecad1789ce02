"""`outofplace-relus-as-kernel-calls`: in a program that calls eager's kernels, a large
ReLU between them, and its gradient, become calls of eager's own kernels
(`aten::clamp_min.out`, which eager's `relu` is, and
`aten::threshold_backward.grad_input`) inside the XLA:CPU program.

A program that calls eager's convolutions runs at home (backends/kernel_home.h), its
XLA loops on one thread (`UNSPLIT`, backends/xla/compiler.py) while OpenMP's other thread
spins for the next kernel; eager's ReLUs run on every core. ResNet-18's 224x224 training
step spent 8-20 ms a step in the ReLUs after its batch norms and 11-13 in their
gradients, where eager's kernels take half (a [8, 64, 112, 112] ReLU: XLA's loop on one
thread 2.0 ms, eager's 1.0; docs/performance.md). A ReLU whose operand is another XLA
loop (a residual sum: `relu(x + y)`), or a gradient that is (the sum of two branches'),
stays XLA's: one fused loop on one thread is as fast as eager's two loops on two.

    %y = stablehlo.maximum %bn#0, %zero : tensor<8x64x112x112xf32>
  =>
    %y = stablehlo.custom_call @"aten::kernel"(%bn#0)
           {backend_config = {outofplace.op = "aten::clamp_min.out", min = 0 : i64,
            outofplace.out.2 = 0, ...}}

    %g = stablehlo.select (compare LE, %y, %zero), %zero, %dy
  =>
    %g = stablehlo.custom_call @"aten::kernel"(%dy, %y)
           {backend_config = {outofplace.op = "aten::threshold_backward.grad_input",
            threshold = 0.0 : f64, outofplace.out.3 = 0, ...}}

Both compute what the ops say, as eager computes them (a NaN kept by the ReLU and passed
by its gradient, as `maximum` and `compare LE` do). Float32 and float64, static shapes,
at least `MIN_ELEMENTS`, the operand (the gradient) a kernel call's result.

Only the XLA engine runs this pass (`LEGALIZE_FOR_CPU`, after the passes that make the
kernel calls it looks for); exports, the interpreter, IREE and a mesh keep the ops.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from ..ir_utils import all_operations, ranked_shape, row_major_layout
from . import kernel_calls
from .composites_as_kernel_calls import OUT, TARGET
from .registry import register_pass

ELEMENT_TYPES = ("f32", "f64")
# Below this many elements XLA keeps the op: a [8, 64, 56, 56] activation (1.6M), XLA's
# ReLU on one thread 0.54 ms against eager's 0.29 on two and the call's 10-15 µs; at
# [8, 64, 32, 32] (524K) the two are within the call's cost.
MIN_ELEMENTS = 1 << 20
_EAGER = ("aten::convolution", "aten::matmul", TARGET)  # the calls of eager's kernels


def _kernel_result(value: ir.Value) -> bool:
    """Whether `value` is a result of a call of eager's kernels (memory already, no XLA
    loop to fuse with)."""
    owner = value.owner
    return isinstance(value, ir.OpResult) and owner.name == "stablehlo.custom_call" and \
        ir.StringAttr(owner.attributes["call_target_name"]).value in _EAGER


def _splat(value: ir.Value) -> float | None:
    """The number every element of `value` is, when it is a constant's (or a broadcast
    of one)."""
    while isinstance(value, ir.OpResult) and value.owner.name == "stablehlo.broadcast_in_dim":
        value = value.owner.operands[0]
    if not isinstance(value, ir.OpResult) or value.owner.name != "stablehlo.constant":
        return None
    literal = ir.DenseElementsAttr(value.owner.attributes["value"])
    if not literal.is_splat or not isinstance(literal.get_splat_value(), ir.FloatAttr):
        return None
    return ir.FloatAttr(literal.get_splat_value()).value


def _same_shape(value: ir.Value) -> ir.Value:
    """`value` without the broadcasts to its own shape it is read through."""
    while isinstance(value, ir.OpResult) and \
            value.owner.name == "stablehlo.broadcast_in_dim" and \
            value.owner.operands[0].type == value.type:
        value = value.owner.operands[0]
    return value


def _large(value: ir.Value) -> bool:
    t = ir.RankedTensorType(value.type)
    if not t.has_static_shape or str(t.element_type) not in ELEMENT_TYPES:
        return False
    count = 1
    for size in t.shape:
        count *= size
    return count >= MIN_ELEMENTS


def _call(op: ir.Operation, rewriter: rewrite.PatternRewriter, kernel: str,
          operands: list[ir.Value], out: int, arguments: dict[str, ir.Attribute]) -> None:
    """`op` replaced by a call of `kernel` (an out= variant: its out argument at schema
    position `out` is the result) of `operands` (schema positions 0, 1, ...)."""
    positions = ir.DenseI64ArrayAttr.get(list(range(len(operands))))
    config = {kernel_calls.OP_NAME: ir.StringAttr.get(kernel),
              "outofplace.tensors": positions, "outofplace.operands": positions,
              kernel_calls.RESULTS: ir.DenseI64ArrayAttr.get([-1] * len(operands)),
              f"{OUT}{out}": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0),
              **arguments}
    with rewriter.ip, op.location:
        call = ir.Operation.create(
            "stablehlo.custom_call", results=[op.result.type], operands=operands,
            attributes={
                "call_target_name": ir.StringAttr.get(TARGET),
                "api_version": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4),
                "backend_config": ir.DictAttr.get(config),
                "has_side_effect": ir.BoolAttr.get(False),
                "operand_layouts": ir.ArrayAttr.get(
                    [row_major_layout(len(ranked_shape(v))) for v in operands]),
                "result_layouts": ir.ArrayAttr.get(
                    [row_major_layout(len(ranked_shape(op.result)))]),
            })
    rewriter.replace_op(op, [call.result])


def _relu(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """maximum(x, 0) of a kernel's result x → `aten::clamp_min.out(x, 0)`."""
    x, zero = op.operands
    if _splat(x) == 0.0 and _splat(zero) != 0.0:
        x, zero = zero, x
    if _splat(zero) != 0.0 or not _large(op.result) or not _kernel_result(_same_shape(x)):
        return True
    with op.location:
        _call(op, rewriter, "aten::clamp_min.out", [_same_shape(x)], 2,
              {"min": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)})
    return False


def _relu_gradient(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """select(y <= t, 0, dy) of a kernel's result dy → `aten::threshold_backward.
    grad_input(dy, y, t)`."""
    predicate, on_true, on_false = (_same_shape(v) for v in op.operands)
    if not isinstance(predicate, ir.OpResult) or \
            predicate.owner.name != "stablehlo.compare" or \
            str(ir.Attribute(predicate.owner.attributes["comparison_direction"])) != \
            "#stablehlo<comparison_direction LE>":
        return True
    y, threshold = (_same_shape(v) for v in predicate.owner.operands)
    value = _splat(threshold)
    if value is None or _splat(on_true) != 0.0 or not _large(op.result) or \
            not _kernel_result(on_false) or y.type != op.result.type or \
            on_false.type != op.result.type:
        return True
    with op.location:
        _call(op, rewriter, "aten::threshold_backward.grad_input", [on_false, y], 3,
              {"threshold": ir.FloatAttr.get(ir.F64Type.get(), value)})
    return False


@register_pass(
    "outofplace-relus-as-kernel-calls",
    "A large ReLU between eager's kernels, and its gradient, as calls of eager's kernels",
    "in a program that calls eager's kernels: `stablehlo.maximum` of a kernel call's "
    "result and zero → `aten::clamp_min.out`, `stablehlo.select` of `compare LE` (y, t), "
    "zero and a kernel call's result → `aten::threshold_backward.grad_input`, float32 "
    "or float64, at least `MIN_ELEMENTS` (XLA's loop runs on one thread there, eager's "
    "on every core; the XLA engine's legalization only, backends/xla)")
def relus_as_kernel_calls(module: ir.Operation) -> None:
    if not any(op.name == "stablehlo.custom_call" and
               ir.StringAttr(op.attributes["call_target_name"]).value in _EAGER
               for op in all_operations(module)):
        return
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.maximum", _relu)
    patterns.add("stablehlo.select", _relu_gradient)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
