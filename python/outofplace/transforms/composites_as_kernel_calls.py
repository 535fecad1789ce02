"""`outofplace-composites-as-kernel-calls`: an op kept whole (`stablehlo.composite` of an
ATen op, frontend/composites.py) becomes a call of eager's CPU kernel of that op inside
the XLA:CPU program.

Batch norm is an op kept whole: XLA:CPU runs outofplace's decomposition of it (eager's
arithmetic: sums in float64) as several loops over the activation, most of them on one
thread, where eager's kernel reads it twice on every core. ResNet-18's training step,
batch 8: at 64x64, eager's batch norms (forward and backward) take 3 ms, XLA's fusions
of them about 25 of the step's 84; docs/performance.md. Max pooling's gradient is
another (frontend/max_pool_gradient.py: 24 ms of XLA's fusions at 224x224, eager's
kernel 2.3), and grouped_mm (frontend/upstream/grouped_mm.py).

    %r:5 = stablehlo.composite "aten._native_batch_norm_legit_functional" %x, %w, %b, %rm, %rv
             {composite_attributes = {training = true, momentum = 1.0e-01 : f64,
              eps = 1.0e-05 : f64, outofplace.kernel = "aten::_native_batch_norm_legit.out",
              outofplace.tensors = array<i64: 0, 1, 2, 3, 4>, outofplace.returns = array<i64>,
              outofplace.written = array<i64: 8, 9, 10, 3, 4>},
              decomposition = @aten._native_batch_norm_legit_functional.region0_body}
  =>
    %r:5 = stablehlo.custom_call @"aten::kernel"(%x, %w, %b, %rm, %rv)
             {backend_config = {outofplace.op = "aten::_native_batch_norm_legit.out",
              training = true, momentum = ..., eps = ..., outofplace.tensors = ...,
              outofplace.returns = array<i64>, outofplace.out.8 = 0, outofplace.out.9 = 1,
              outofplace.out.10 = 2, outofplace.operands = array<i64: 0, 1, 2, 3, 4>,
              outofplace.results = array<i64: -1, -1, -1, 3, 4>},
              output_operand_aliases = [result 3 = operand 3, result 4 = operand 4], ...}

The handler (backends/kernel_call.cpp) calls the composite's `outofplace.kernel` through
the dispatcher with the operands at their schema positions (`outofplace.tensors`; an
optional tensor not there is None) and the composite's other attributes as its other
arguments (a list of bools as integers). Its returns `outofplace.returns` are copied into
the first results; each later result is the argument `outofplace.written` names after
the call: an operand it writes in place (aliased to that result: batch norm's running
statistics, no copy) or an `out=` argument, a tensor over the result's buffer
(`outofplace.out.<position>`: the output and the saved statistics written there).
Operands and results are dense row-major (a transposed operand a view of it,
outofplace-transposed-kernel-operands); ops of static shapes in float32 or float64 are
called (eager's kernel is the one the program's dtype has), in bfloat16 those whose
kernel computes it as their decomposition does (`outofplace.bfloat16`: grouped_mm, not
batch norm); the rest, and every composite on another engine, run their decomposition
(a composite's meaning in StableHLO). A decomposition nothing calls any more is erased.

Only the XLA engine runs this pass (its legalization, `LEGALIZE_FOR_CPU` in
backends/xla/compiler.py), where the C++ handler is built, after registering it for
`TARGET` (backends/custom_calls.py).
"""

from __future__ import annotations

from torch_mlir import ir

from ..ir_utils import all_operations, operations
from . import kernel_calls
from .registry import register_pass

TARGET = "aten::kernel"  # the custom call target of every call this pass makes
ELEMENT_TYPES = ("f32", "f64")
# the composite's attributes of the call (frontend/composites.py)
KERNEL, TENSORS, RETURNS, WRITTEN = ("outofplace.kernel", "outofplace.tensors",
                                     "outofplace.returns", "outofplace.written")
BFLOAT16 = "outofplace.bfloat16"  # eager's kernel computes bfloat16 as the decomposition
OUT = "outofplace.out."  # + position: the result an out= argument is (kernel_call.cpp)


def _callable(op: ir.Operation) -> bool:
    """Whether the composite is an ATen op of ours (frontend/composites.py) on tensors of
    static shapes, its floating-point ones float32 or float64, or bfloat16 where eager's
    kernel computes it as the decomposition does (`BFLOAT16`: grouped_mm), its integers
    (grouped_mm's offsets) as they are."""
    attributes = ir.DictAttr(op.attributes["composite_attributes"])
    if KERNEL not in attributes:
        return False
    types = ELEMENT_TYPES + (("bf16",) if BFLOAT16 in attributes and
                             ir.BoolAttr(attributes[BFLOAT16]).value else ())
    shapes = [ir.RankedTensorType(v.type) for v in [*op.operands, *op.results]]
    return all(t.has_static_shape and (isinstance(t.element_type, ir.IntegerType) or
                                       str(t.element_type) in types)
               for t in shapes)


def _config(op: ir.Operation) -> tuple[ir.DictAttr, list[ir.Attribute]]:
    """The handler's backend_config of the composite `op`, and its results' aliases."""
    attributes = ir.DictAttr(op.attributes["composite_attributes"])
    tensors = list(ir.DenseI64ArrayAttr(attributes[TENSORS]))
    returns = list(ir.DenseI64ArrayAttr(attributes[RETURNS]))
    config = {kernel_calls.OP_NAME: attributes[KERNEL]}
    for i in range(len(attributes)):
        named = attributes[i]
        value = named.attr
        if named.name in (KERNEL, WRITTEN, BFLOAT16):
            continue
        if isinstance(value, ir.DenseBoolArrayAttr):  # (the handler reads bool[] as ints)
            value = ir.DenseI64ArrayAttr.get([int(bool(v)) for v in value])
        config[named.name] = value
    results, aliases = [-1] * len(tensors), []
    i64 = ir.IntegerType.get_signless(64)
    for result, position in enumerate(ir.DenseI64ArrayAttr(attributes[WRITTEN]),
                                      start=len(returns)):
        if position in tensors:  # an operand written in place: the result its buffer
            results[tensors.index(position)] = result
            aliases.append(kernel_calls.operand_alias(result, tensors.index(position)))
        else:  # an out= argument: over the result's buffer
            config[f"{OUT}{position}"] = ir.IntegerAttr.get(i64, result)
    config[kernel_calls.OPERANDS] = ir.DenseI64ArrayAttr.get(list(range(len(tensors))))
    config[kernel_calls.RESULTS] = ir.DenseI64ArrayAttr.get(results)
    return ir.DictAttr.get(config), aliases


def _call(op: ir.Operation) -> ir.Operation:
    with ir.InsertionPoint(op), op.location:
        config, aliases = _config(op)
        return kernel_calls.eager_call(TARGET, list(op.operands),
                                       [r.type for r in op.results], config, aliases)


@register_pass(
    "outofplace-composites-as-kernel-calls",
    "Call eager's CPU kernel of an op kept whole (stablehlo.composite of an ATen op)",
    "a `stablehlo.composite` of an ATen op (frontend/composites.py: batch norm's forward "
    "and backward, max pooling's gradient, grouped_mm), float32 or float64 (bfloat16 where the kernel computes it as the decomposition) of static shapes → `stablehlo.custom_call "
    "@\"aten::kernel\"` that the kernel handler (backends/kernel_call.cpp) runs with the "
    "composite's attributes as the op's arguments; decompositions no longer called "
    "erased (the XLA engine's legalization only, backends/xla; other engines and exports "
    "run the decomposition)")
def composites_as_kernel_calls(module: ir.Operation) -> None:
    replaced: set[str] = set()
    for op in all_operations(module):
        if op.name == "stablehlo.composite" and _callable(op):
            replaced.add(_decomposition(op))
            call = _call(op)
            for old, new in zip(op.results, call.results):
                old.replace_all_uses_with(new)
            op.erase()
    kept = {_decomposition(op) for op in all_operations(module)
            if op.name == "stablehlo.composite"}
    for op in list(operations(module.regions[0].blocks[0])):
        if op.name == "func.func" and \
                ir.StringAttr(op.attributes["sym_name"]).value in replaced - kept:
            op.erase()


def _decomposition(op: ir.Operation) -> str:
    return ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
