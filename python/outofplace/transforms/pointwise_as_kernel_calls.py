"""`outofplace-pointwise-as-kernel-calls`: in a program that calls eager's kernels, a
large pointwise op whose operands are in memory anyway becomes a call of eager's own
kernel inside the XLA:CPU program: a ReLU of a kernel's result and its gradient
(`aten::clamp_min.out`, which eager's `relu` is, and
`aten::threshold_backward.grad_input`), and a multiply-add of two operands in memory
(`aten::add.out` with an `alpha`: an optimizer's momentum and parameter updates).

A program that calls eager's convolutions runs at home (backends/kernel_home.h), its
XLA loops on one thread (`UNSPLIT`, backends/xla/compiler.py) while OpenMP's other thread
spins for the next kernel; eager's loops run on every core. ResNet-18's 224x224 training
step spent 8-20 ms a step in the ReLUs after its batch norms and 11-13 in their
gradients, where eager's kernels take half (a [8, 64, 112, 112] ReLU: XLA's loop on one
thread 2.0 ms, eager's 1.0), and at 64x64 11 ms in SGD's update, two loops over 11.7M
elements (docs/performance.md). An op whose operand is another XLA loop's result (a
residual sum: `relu(x + y)`; a gradient summed over two branches) stays XLA's: one fused
loop on one thread is as fast as eager's two loops on two.

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

    %b2 = stablehlo.add (multiply %b, 0.9), %grad       (SGD's momentum)
    %p2 = stablehlo.negate (subtract (multiply %b2, 0.01), %p)   (p - lr * b2)
  =>
    %b2 = stablehlo.custom_call @"aten::kernel"(%grad, %b) {alpha = 0.9 : f64,
            outofplace.op = "aten::add.out", ...}, output_operand_aliases = [%b]
    %p2 = stablehlo.custom_call @"aten::kernel"(%p, %b2) {alpha = -0.01 : f64, ...},
            output_operand_aliases = [%p]

Each computes what the ops computed: the ReLU and its gradient are exact (a NaN kept
by the ReLU and passed by its gradient, as `maximum` and `compare LE` do); eager's
`add(x, y, alpha=a)` is one fused multiply-add, fma(y, a, x), which is what XLA:CPU
contracts x + y * a into (frontend/fused_multiply_adds.py; x - y * a, written
-(y * a - x) there, is fma(y, -a, x) negated twice). The result of a multiply-add
takes the buffer of a written argument it reads (`tf.aliasing_output`: the momentum,
the parameter), as XLA's loop did, so the state stays in place. Float32 and float64,
static shapes, at least `MIN_ELEMENTS` (a ReLU) or `MIN_MULTIPLY_ADD_ELEMENTS`; the
operands in memory: arguments, kernel calls' results, the program's results.

Only the XLA engine runs this pass (`LEGALIZE_FOR_CPU`, after the passes that make the
kernel calls it looks for); exports, the interpreter, IREE and a mesh keep the ops.
"""

from __future__ import annotations

from torch_mlir import ir, rewrite

from . import kernel_calls
from .composites_as_kernel_calls import OUT, TARGET
from .dots_as_kernel_calls import EAGER_TARGETS, calls_eager_kernels
from .registry import register_pass

ELEMENT_TYPES = ("f32", "f64")
# Below this many elements XLA keeps the op: a [8, 64, 56, 56] activation (1.6M), XLA's
# ReLU on one thread 0.54 ms against eager's 0.29 on two and the call's 10-15 µs; at
# [8, 64, 32, 32] (524K) ResNet-18's 64x64 step measured no faster with them.
MIN_ELEMENTS = 1 << 20
# ... and this many for a multiply-add (ResNet-18's 64x64 step with SGD, its weights of
# 256K elements and more: 0.959x eager's against 0.997x without the pass; of 64K and
# more, 0.982x against 1.029x, within the machine's spread of the other)
MIN_MULTIPLY_ADD_ELEMENTS = 1 << 18


def _kernel_result(value: ir.Value) -> bool:
    """Whether `value` is a result of a call of eager's kernels (memory already, no XLA
    loop to fuse with)."""
    owner = value.owner
    return isinstance(value, ir.OpResult) and owner.name == "stablehlo.custom_call" and \
        ir.StringAttr(owner.attributes["call_target_name"]).value in EAGER_TARGETS


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


def _large(value: ir.Value, least: int | None = None) -> bool:
    t = ir.RankedTensorType(value.type)
    if not t.has_static_shape or str(t.element_type) not in ELEMENT_TYPES:
        return False
    count = 1
    for size in t.shape:
        count *= size
    return count >= (MIN_ELEMENTS if least is None else least)


def _call(op: ir.Operation, rewriter: rewrite.PatternRewriter, kernel: str,
          operands: list[ir.Value], out: int, arguments: dict[str, ir.Attribute],
          written: int | None = None) -> None:
    """`op` replaced by a call of `kernel` (an out= variant: its out argument at schema
    position `out` is the result) of `operands` (schema positions 0, 1, ...); the result
    in the buffer of operand `written` when given."""
    positions = ir.DenseI64ArrayAttr.get(list(range(len(operands))))
    results = [0 if k == written else -1 for k in range(len(operands))]
    config = {kernel_calls.OP_NAME: ir.StringAttr.get(kernel),
              "outofplace.tensors": positions, "outofplace.operands": positions,
              kernel_calls.RESULTS: ir.DenseI64ArrayAttr.get(results),
              f"{OUT}{out}": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0),
              **arguments}
    aliases = [] if written is None else [kernel_calls.operand_alias(None, written)]
    with rewriter.ip, op.location:
        call = kernel_calls.eager_call(TARGET, operands, [op.result.type], config, aliases)
    rewriter.replace_op(op, [call.result])


def _strip_reshapes(value: ir.Value) -> ir.Value:
    while isinstance(value, ir.OpResult) and value.owner.name == "stablehlo.reshape":
        value = value.owner.operands[0]
    return value


def _in_memory(value: ir.Value) -> bool:
    """Whether `value` is in memory whatever XLA fuses: an argument, a kernel call's
    result, or a result of the program (through reshapes, which XLA makes bitcasts)."""
    base = _strip_reshapes(value)
    if isinstance(base, ir.BlockArgument):
        return base.owner.owner.operation.name == "func.func"
    return _kernel_result(base) or any(
        use.owner.name == "func.return" for use in value.uses)


def _written_argument(value: ir.Value) -> bool:
    """Whether `value` is an argument of main the program writes (donated to a result)."""
    if not isinstance(value, ir.BlockArgument) or \
            value.owner.owner.operation.name != "func.func":
        return False
    function = value.owner.owner.operation
    if "arg_attrs" not in function.attributes:
        return False
    attrs = ir.DictAttr(ir.ArrayAttr(function.attributes["arg_attrs"])[value.arg_number])
    return "tf.aliasing_output" in attrs


def _scaled(value: ir.Value) -> tuple[ir.Value, float] | None:
    """(y, a) when `value` is y * a of a number a, computed for this use alone."""
    if not isinstance(value, ir.OpResult) or value.owner.name != "stablehlo.multiply" or \
            len(list(value.uses)) != 1:
        return None
    y, a = value.owner.operands
    if _splat(a) is None:
        y, a = a, y
    factor = _splat(a)
    return None if factor is None else (y, factor)


def _multiply_add(op: ir.Operation, rewriter: rewrite.PatternRewriter, x: ir.Value,
                  product: ir.Value, sign: float) -> bool:
    """`op` = x + sign * (y * a) → `aten::add.out(x, y, alpha=sign * a)`: eager's one
    fused multiply-add, as XLA contracts the two (frontend/fused_multiply_adds.py)."""
    scaled = _scaled(product)
    if scaled is None or not _large(op.result, MIN_MULTIPLY_ADD_ELEMENTS):
        return True
    y, factor = scaled
    if not (x.type == y.type == op.result.type) or not _in_memory(x) or \
            not _in_memory(y):
        return True
    written = 0 if _written_argument(x) else 1 if _written_argument(y) else None
    with op.location:
        _call(op, rewriter, "aten::add.out", [x, y], 3,
              {"alpha": ir.FloatAttr.get(ir.F64Type.get(), sign * factor)}, written)
    return False


def _add(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """x + y * a, either order."""
    lhs, rhs = op.operands
    if _scaled(lhs) is not None:
        return _multiply_add(op, rewriter, rhs, lhs, 1.0)
    return _multiply_add(op, rewriter, lhs, rhs, 1.0)


def _negated_difference(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    """-(y * a - x), how the frontend writes x - y * a (fused_multiply_adds.py)."""
    difference = op.operands[0]
    if not isinstance(difference, ir.OpResult) or \
            difference.owner.name != "stablehlo.subtract" or len(list(difference.uses)) != 1:
        return True
    product, x = difference.owner.operands
    return _multiply_add(op, rewriter, x, product, -1.0)


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
    "outofplace-pointwise-as-kernel-calls",
    "Large pointwise ops on operands in memory as calls of eager's kernels (XLA:CPU)",
    "in a program that calls eager's kernels: `stablehlo.maximum` of a kernel call's "
    "result and zero → `aten::clamp_min.out`, `stablehlo.select` of `compare LE` (y, t), "
    "zero and a kernel call's result → `aten::threshold_backward.grad_input` (at least "
    "`MIN_ELEMENTS`), x + y * a and -(y * a - x) of a number a, x and y in memory "
    "(arguments, kernel calls' or the program's results) → `aten::add.out(x, y, "
    "alpha)`, in the buffer of the written argument it reads (at least "
    "`MIN_MULTIPLY_ADD_ELEMENTS`); float32 or float64 (XLA's loop runs on one thread "
    "there, eager's on every core; the XLA engine's legalization only, backends/xla)")
def pointwise_as_kernel_calls(module: ir.Operation) -> None:
    if not calls_eager_kernels(module):
        return
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.maximum", _relu)
    patterns.add("stablehlo.select", _relu_gradient)
    patterns.add("stablehlo.add", _add)
    patterns.add("stablehlo.negate", _negated_difference)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
