"""`outofplace-transposed-kernel-operands`: a kernel call reads a transposed operand as a
strided view of the tensor itself, as eager's kernel was given it, where XLA:CPU would
copy the whole operand transposed at every call.

    %t = stablehlo.transpose %w, dims = [0, 2, 1]
           : (tensor<8x2816x512xf32>) -> tensor<8x512x2816xf32>
    %y = stablehlo.custom_call @"transformers::grouped_mm_fallback"(%x, %t, %offs)
           {backend_config = {outofplace.tensors = array<i64: 0, 1, 2>,
            outofplace.operands = array<i64: 0, 1, 2>, ...}}
  =>
    %y = stablehlo.custom_call @"transformers::grouped_mm_fallback"(%x, %w, %offs)
           {backend_config = {..., outofplace.view.1 = array<i64: 0, 8, 512, 2816,
                                                          1441792, 1, 512>}}

A view (`outofplace.view.<position>`: offset, sizes, strides) is how the kernel handler
(backends/kernel_call.cpp) gives an op an argument inside an operand's buffer; here the
argument is the operand's own buffer with its dimensions permuted, the strides the
program's transpose (`weight.transpose(-2, -1)`) had in eager. transformers' experts
pass their weights so to their grouped product (a custom op, or `_grouped_mm` kept
whole): XLA:CPU copied every expert's weights transposed at every call, where the kernel
reads the few the token chose.

Rewritten for the calls of custom ops (outofplace-kernel-calls) and of ops kept whole
(outofplace-composites-as-kernel-calls): an operand the call only reads, whose schema
argument has no view yet, made by a `stablehlo.transpose` of a static shape. Not for
convolutions and matrix products, whose passes lay out their operands themselves. Only
the XLA engine runs it (its legalization, backends/xla), after those passes.
"""

from __future__ import annotations

from torch_mlir import ir

from ..ir_utils import all_operations, ranked_shape, row_major_layout, row_major_strides
from . import (composites_as_kernel_calls, convolutions_as_kernel_calls,
               dots_as_kernel_calls, kernel_calls)
from .registry import register_pass


def _rewrite(call: ir.Operation) -> None:
    config = ir.DictAttr(call.attributes["backend_config"])
    tensors = list(ir.DenseI64ArrayAttr(config[kernel_calls.TENSORS]))
    operands = list(ir.DenseI64ArrayAttr(config[kernel_calls.OPERANDS]))
    results = list(ir.DenseI64ArrayAttr(config[kernel_calls.RESULTS]))
    entries = {config[i].name: config[i].attr for i in range(len(config))}
    for index, value in enumerate(list(call.operands)):
        positions = [p for p, o in zip(tensors, operands) if o == index]
        if results[index] != -1 or len(positions) != 1 or \
                f"{kernel_calls.VIEW}{positions[0]}" in entries or \
                not isinstance(value, ir.OpResult) or \
                value.owner.name != "stablehlo.transpose" or \
                not ir.RankedTensorType(value.owner.operands[0].type).has_static_shape:
            continue
        transpose = value.owner
        source = transpose.operands[0]
        permutation = list(ir.DenseI64ArrayAttr(transpose.attributes["permutation"]))
        strides = row_major_strides(ranked_shape(source))
        entries[f"{kernel_calls.VIEW}{positions[0]}"] = ir.DenseI64ArrayAttr.get(
            [0, *ranked_shape(value), *[strides[d] for d in permutation]])
        call.operands[index] = source
        if not list(transpose.result.uses):
            transpose.erase()
    call.attributes["backend_config"] = ir.DictAttr.get(entries, context=call.context)
    if "operand_layouts" in call.attributes:
        call.attributes["operand_layouts"] = ir.ArrayAttr.get(
            [row_major_layout(len(ranked_shape(v))) for v in call.operands],
            context=call.context)


def _applies(op: ir.Operation) -> bool:
    if op.name != "stablehlo.custom_call" or "backend_config" not in op.attributes or \
            not isinstance(op.attributes["backend_config"], ir.DictAttr):
        return False
    target = ir.StringAttr(op.attributes["call_target_name"]).value
    config = ir.DictAttr(op.attributes["backend_config"])
    if target in (convolutions_as_kernel_calls.TARGET, dots_as_kernel_calls.TARGET):
        return False
    return kernel_calls.TENSORS in config and kernel_calls.RESULTS in config and \
        (target == composites_as_kernel_calls.TARGET or
         ir.StringAttr(config[kernel_calls.OP_NAME]).value == target)


@register_pass(
    "outofplace-transposed-kernel-operands",
    "A kernel call reads a transposed operand as a strided view of the tensor itself",
    "a `stablehlo.transpose` of a static shape that a custom op's or an op kept whole's "
    "kernel call only reads becomes that argument's view (`outofplace.view.<position>`, "
    "its strides permuted) of the transpose's operand: XLA:CPU copied the whole operand "
    "transposed at every call (the XLA engine's legalization, backends/xla)")
def transposed_kernel_operands(module: ir.Operation) -> None:
    for op in all_operations(module):
        if _applies(op):
            _rewrite(op)
