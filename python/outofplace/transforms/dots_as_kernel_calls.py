"""`outofplace-dots-as-kernel-calls`: a `stablehlo.dot_general` of one contracting
dimension becomes a call of eager's matrix product (`aten::linear`, `aten::matmul`)
inside the XLA:CPU program.

XLA:CPU's matrix-vector products run at a fifth of eager's speed: `x @ W.T` of a
[1, 768] row and a [768, 768] weight took 110 µs in JAX's own program against eager's
20 (one thread's plain loop where eager's BLAS reads the weight with both cores), and a
decoder at batch 1 is made of them (a 148M Llama's token: 25 of its 27.6 ms in 127
dots; docs/performance.md). The XLA engine already calls eager's convolutions on XLA's
buffers (convolutions_as_kernel_calls.py, the handler of backends/kernel_call.cpp); this
pass hands it the dots:

    %y = stablehlo.dot_general %x, %w, contracting_dims = [2] x [1]
           : (tensor<1x1x768xf32>, tensor<2048x768xf32>) -> tensor<1x1x2048xf32>
  =>
    %y = stablehlo.custom_call @"aten::matmul"(%x, %w)
           {backend_config = {"outofplace.op" = "aten::linear", ...}, api_version = 4, ...}

- no batch dimension, the lhs contracting its last dimension and the rhs of rank 2:
  `aten::linear(x, w)` when the rhs contracts its second dimension (an `nn.Linear`
  weight as the program holds it), `aten::matmul(x, w)` when its first;
- with batch dimensions (attention's `q @ k.T`, `p @ v`), each operand its batch
  dimensions, one free and one contracting dimension: `aten::matmul` of the two read as
  [batch..., M, K] and [batch..., K, N] views of their buffers (`outofplace.view.<i>`:
  no copy), its result the dot's [batch..., M, N];
- f32, f64, bf16 (what eager's CPU matmul takes, as the dot computes), static shapes, at
  least `MIN_MULTIPLY_ADDS`; a `precision_config` or algorithm other than the default
  keeps XLA's dot.

Only the XLA engine runs this pass (`LEGALIZE_FOR_CPU`, backends/xla/compiler.py), where
the C++ handler is built and registered for `TARGET`; exports, the interpreter, IREE and
a mesh keep XLA's dots. The program runs at home (backends/custom_calls.py `at_home`):
eager's BLAS runs on OpenMP's threads, which must be the caller's.
"""

from __future__ import annotations

import math

from torch_mlir import ir, rewrite
from torch_mlir._mlir_libs import _stablehlo

from ..ir_utils import ranked_shape
from . import kernel_calls
from .registry import register_pass

TARGET = "aten::matmul"  # the custom call target of every call this pass makes
ELEMENT_TYPES = ("f32", "f64", "bf16")
# Below this many multiply-adds XLA keeps the dot. Measured, a program of one batch-1
# `nn.Linear` (n x n, f32): n = 256 (65K) XLA's 12 µs against the call's 31, n = 512
# (262K) 23 against 40, n = 768 (590K) 137 against 59; a program calling eager's kernels
# runs at home, about 0.1 ms more a call than one that does not.
MIN_MULTIPLY_ADDS = 500_000


def _row_major(rank: int) -> ir.Attribute:
    return ir.Attribute.parse(
        f"dense<{list(range(rank - 1, -1, -1))}> : tensor<{rank}xindex>")


def _strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def _view(shape: list[int], dims: list[int]) -> list[int]:
    """`outofplace.view` of a dense row-major operand of `shape` read with its
    dimensions in the order `dims`: offset 0, sizes, strides."""
    strides = _strides(shape)
    return [0, *(shape[d] for d in dims), *(strides[d] for d in dims)]


def _plan(op: ir.Operation) -> dict | None:
    """The aten op and its operands' views for `op`, or None where it stays XLA's."""
    lhs, rhs = op.operands
    if any(not isinstance(v.type, ir.RankedTensorType) or
           not ir.RankedTensorType(v.type).has_static_shape for v in (lhs, rhs, op.result)):
        return None
    element = ir.RankedTensorType(op.result.type).element_type
    if str(element) not in ELEMENT_TYPES or \
            any(ir.RankedTensorType(v.type).element_type != element for v in (lhs, rhs)):
        return None
    if "precision_config" in op.attributes and any(
            str(p) not in ("#stablehlo<precision DEFAULT>",)
            for p in ir.ArrayAttr(op.attributes["precision_config"])):
        return None
    if "algorithm" in op.attributes:
        return None
    numbers = _stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lb, rb = list(numbers.lhs_batching_dimensions), list(numbers.rhs_batching_dimensions)
    lc, rc = list(numbers.lhs_contracting_dimensions), list(numbers.rhs_contracting_dimensions)
    ls, rs = ranked_shape(lhs), ranked_shape(rhs)
    if len(lc) != 1 or math.prod(ranked_shape(op.result)) * ls[lc[0]] < MIN_MULTIPLY_ADDS:
        return None
    if not lb:
        if len(rs) != 2 or lc[0] != len(ls) - 1:
            return None
        return {"op": "aten::linear" if rc[0] == 1 else "aten::matmul", "views": {}}
    lfree = [d for d in range(len(ls)) if d not in lb and d not in lc]
    rfree = [d for d in range(len(rs)) if d not in rb and d not in rc]
    if len(lfree) != 1 or len(rfree) != 1:
        return None
    lorder, rorder = [*lb, lfree[0], lc[0]], [*rb, rc[0], rfree[0]]
    views = {}
    if lorder != list(range(len(ls))):
        views[0] = _view(ls, lorder)
    if rorder != list(range(len(rs))):
        views[1] = _view(rs, rorder)
    return {"op": "aten::matmul", "views": views}


def _rewrite(op: ir.Operation, rewriter: rewrite.PatternRewriter) -> bool:
    plan = _plan(op)
    if plan is None:
        return True
    config = {
        kernel_calls.OP_NAME: ir.StringAttr.get(plan["op"]),
        "outofplace.tensors": ir.DenseI64ArrayAttr.get([0, 1]),
        "outofplace.operands": ir.DenseI64ArrayAttr.get([0, 1]),
        "outofplace.results": ir.DenseI64ArrayAttr.get([-1]),
        **{f"outofplace.view.{i}": ir.DenseI64ArrayAttr.get(v)
           for i, v in plan["views"].items()},
    }
    with rewriter.ip, op.location:
        call = ir.Operation.create(
            "stablehlo.custom_call", results=[op.result.type], operands=list(op.operands),
            attributes={
                "call_target_name": ir.StringAttr.get(TARGET),
                "api_version": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4),
                "backend_config": ir.DictAttr.get(config),
                "has_side_effect": ir.BoolAttr.get(False),
                "operand_layouts": ir.ArrayAttr.get(
                    [_row_major(len(ranked_shape(v))) for v in op.operands]),
                "result_layouts": ir.ArrayAttr.get([_row_major(len(ranked_shape(op.result)))]),
            })
    rewriter.replace_op(op, [call.result])
    return False


@register_pass(
    "outofplace-dots-as-kernel-calls",
    "Matrix products as calls of eager's kernel (aten::linear, aten::matmul) inside XLA:CPU",
    "`stablehlo.dot_general` of one contracting dimension and at least "
    "`MIN_MULTIPLY_ADDS` (f32, f64, bf16): without batch dimensions, the lhs contracting "
    "its last and the rhs of rank 2, `aten::linear` (rhs [N, K]) or `aten::matmul` (rhs "
    "[K, N]); with them, one free dimension a side, `aten::matmul` of [batch..., M, K] and "
    "[batch..., K, N] views of the operands → `stablehlo.custom_call @\"aten::matmul\"` "
    "that the kernel handler (backends/kernel_call.cpp) runs: XLA:CPU's matrix-vector "
    "products are ~5x slower than eager's (the XLA engine's legalization only, "
    "backends/xla; exports keep XLA's dots)")
def dots_as_kernel_calls(module: ir.Operation) -> None:
    patterns = rewrite.RewritePatternSet(module.context)
    patterns.add("stablehlo.dot_general", _rewrite)
    rewrite.walk_and_apply_patterns(module, patterns.freeze())
