"""`outofplace-dots-as-kernel-calls`: a `stablehlo.dot_general` of one contracting
dimension becomes a call of eager's matrix product (`aten::linear`, `aten::matmul`)
inside the XLA:CPU program.

XLA:CPU's products of small cached matrices run at a fraction of eager's speed (`x @ W.T`
of a [1, 768] row and a [768, 768] weight read again took 110 µs in JAX's own program
against eager's 20 on an Intel machine), and so did a decoder's batch-1 projections,
vector first, which XLA copies transposed at every call once the weight has 4096
columns. A vector-weight product in float32 or float64 is now XLA's dot with the weight
first (outofplace-vector-dots-weight-first, run before this pass, which leaves it: it
streams the weight faster than eager's gemv); this pass hands eager's kernels the
others: products of several rows (a prefill, a training step), attention's batched
dots in a program that calls eager's kernels anyway, and bfloat16 ones. The XLA engine
already calls eager's convolutions on XLA's buffers (convolutions_as_kernel_calls.py,
the handler of backends/kernel_call.cpp); this pass hands it the dots:

    %y = stablehlo.dot_general %x, %w, contracting_dims = [2] x [1]
           : (tensor<1x4x768xf32>, tensor<2048x768xf32>) -> tensor<1x4x2048xf32>
  =>
    %y = stablehlo.custom_call @"aten::matmul"(%x, %w)
           {backend_config = {"outofplace.op" = "aten::linear.out", outofplace.out.3 = 0,
            ...}, api_version = 4, ...}

Each op is called in its out= form, the product written straight into XLA's result
buffer (a [256, 8192] product: 5% of the call, the copy the plain op's result took).

- no batch dimension, the lhs contracting its last dimension and the rhs of rank 2:
  `aten::linear(x, w)` when the rhs contracts its second dimension (an `nn.Linear`
  weight as the program holds it), `aten::matmul(x, w)` when its first; two operands of
  rank 2 otherwise (a weight's gradient, `g.T @ x`): as without batch dimensions below;
- with batch dimensions (attention's `q @ k.T`, `p @ v`), or none, each operand its batch
  dimensions, at most one free and one contracting dimension: `aten::matmul` of the two
  read as [batch..., M, K] and [batch..., K, N] views of their buffers
  (`outofplace.view.<i>`: no copy; a side without a free dimension, a batch-1 query,
  read with a unit one), its result the dot's [batch..., M, N] (a reshape drops the
  unit dimensions the dot has not); an operand a broadcast repeats (grouped-query
  attention's keys and values, `reshape(broadcast_in_dim(cache))`) is read in the
  cache itself, stride 0 where the broadcast repeats, the batch dimensions it merged
  split on both sides (`_Side.expanded`): XLA materialized the repeats, 11.5 of a 1.1B
  Llama's 161 ms a token;
- f32, f64, bf16 (what eager's CPU matmul takes, as the dot computes), static shapes, at
  least `MIN_MULTIPLY_ADDS` (`MIN_MULTIPLY_ADDS_AT_HOME` in a program that calls eager's
  kernels anyway); a `precision_config` or algorithm other than the default keeps XLA's
  dot.

Only the XLA engine runs this pass (`LEGALIZE_FOR_CPU`, backends/xla/compiler.py), where
the C++ handler is built and registered for `TARGET`; exports, the interpreter, IREE and
a mesh keep XLA's dots. The program runs at home (backends/custom_calls.py `at_home`):
eager's BLAS runs on OpenMP's threads, which must be the caller's.
"""

from __future__ import annotations

import math

from torch_mlir import ir, rewrite
from torch_mlir._mlir_libs import _stablehlo

from ..ir_utils import (all_operations, plain_dot, ranked_shape,
                        row_major_strides)
from . import kernel_calls
from .composites_as_kernel_calls import OUT, TARGET as COMPOSITE
from .convolutions_as_kernel_calls import TARGET as CONVOLUTION
from .registry import register_pass
from .vector_dots_weight_first import weight_first

TARGET = "aten::matmul"  # the custom call target of every call this pass makes
ELEMENT_TYPES = ("f32", "f64", "bf16")
# Below this many multiply-adds XLA keeps the dot. Measured, a program of one batch-1
# `nn.Linear` (n x n, f32): n = 256 (65K) XLA's 12 µs against the call's 31, n = 512
# (262K) 23 against 40, n = 768 (590K) 137 against 59; but a program calling eager's
# kernels runs at home, 0.1-0.3 ms more a call than one that does not (a program of one
# batch-1 attention over 32 heads, 524K: 0.197 ms as XLA's, 0.496 called). Where the
# weights stream from memory (a decoder's, read once a token) XLA's one thread reads
# them as fast as eager's two (28 GB/s); eager's wins where they stay in the caches
# (a [768, 768] weight read again: 20 µs against 110), and the call costs 10-15 µs.
MIN_MULTIPLY_ADDS = 1_000_000
# ... unless the program calls eager's kernels already (a large dot or a convolution), so
# that it runs at home anyway: then a dot of this many (a batch-1 attention's scores
# over 12 heads and 256 positions, 196K: XLA's 61 µs) is eager's too.
MIN_MULTIPLY_ADDS_AT_HOME = 32_768
# the targets of the calls of eager's kernels (the composites', the convolutions', this
# pass's): a program with one runs at home
EAGER_TARGETS = (COMPOSITE, CONVOLUTION, TARGET)
# the schema position of each op's out= argument, XLA's result buffer
# (`aten::linear.out(input, weight, bias, *, out)`, `aten::matmul.out(self, other, *, out)`)
_OUT_POSITION = {"aten::linear": 3, "aten::matmul": 2}


def calls_eager_kernels(module: ir.Operation) -> bool:
    """Whether the module calls eager's kernels (`EAGER_TARGETS`): it runs at home."""
    return any(op.name == "stablehlo.custom_call" and ir.StringAttr(
        op.attributes["call_target_name"]).value in EAGER_TARGETS
        for op in all_operations(module))


def _plan(op: ir.Operation, least: int) -> dict | None:
    """The aten op and its operands' views for `op`, or None where it stays XLA's (among
    others, under `least` multiply-adds)."""
    lhs, rhs = op.operands
    if not plain_dot(op, ELEMENT_TYPES) or weight_first(op):  # (weight first: XLA's)
        return None
    numbers = _stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lb, rb = list(numbers.lhs_batching_dimensions), list(numbers.rhs_batching_dimensions)
    lc, rc = list(numbers.lhs_contracting_dimensions), list(numbers.rhs_contracting_dimensions)
    ls, rs = ranked_shape(lhs), ranked_shape(rhs)
    if len(lc) != 1 or math.prod(ranked_shape(op.result)) * ls[lc[0]] < least:
        return None
    if not lb and len(rs) == 2 and lc[0] == len(ls) - 1:
        return {"op": "aten::linear" if rc[0] == 1 else "aten::matmul", "views": {}}
    # (free dimensions of size 1 read as none: the result is reshaped to the dot's)
    lfree = [d for d in range(len(ls)) if d not in lb and d not in lc and ls[d] != 1] \
        or [None]
    rfree = [d for d in range(len(rs)) if d not in rb and d not in rc and rs[d] != 1] \
        or [None]
    if len(lfree) != 1 or len(rfree) != 1:
        return None
    # (a side without a free dimension, a batch-1 query [heads, head dim] after
    # outofplace-squeeze-state, is read with a unit one: matmul's result has it too)
    sides = [_Side(lhs, lb, [lfree[0], lc[0]], lfree[0]),
             _Side(rhs, rb, [rc[0], rfree[0]], rfree[0])]
    for e in (0, 1):  # a side repeating its elements (grouped-query attention's keys)
        expanded = sides[e].expanded()
        if expanded is not None and sides[1 - e].split_like(expanded):
            sides[e] = expanded
            break
    views = {i: side.view() for i, side in enumerate(sides) if not side.plain()}
    batch = [n for n, _ in sides[0].batch_entries()]
    shape = [*batch, sides[0].entry(sides[0].free)[0], sides[1].entry(sides[1].free)[0]]
    return {"op": "aten::matmul", "views": views, "shape": shape,
            "operands": [side.source for side in sides]}


class _Side:
    """A dot operand read as matmul's [batch..., M, K] (lhs) or [batch..., K, N] (rhs):
    its batch dimensions, then its two others (`tail`; None a unit one), each an entry
    (size, stride) over `source`'s row-major buffer, or several (`groups`: a batch
    dimension split as the other side's is, or one a broadcast repeats, stride 0)."""

    def __init__(self, value: ir.Value, batch: list[int], tail: list[int | None],
                 free: int | None) -> None:
        self.source, self.batch, self.tail, self.free = value, batch, tail, free
        shape = ranked_shape(value)
        self.entries = {d: [(n, st)] for d, (n, st) in enumerate(zip(shape, row_major_strides(shape)))}
        self.moved = [*batch, *tail] != list(range(len(shape)))

    def entry(self, d: int | None) -> tuple[int, int]:
        """The one entry of a dimension outside the batch."""
        return (1, 1) if d is None or not self.entries[d] else self.entries[d][0]

    def batch_entries(self) -> list[tuple[int, int]]:
        return [e for d in self.batch for e in (self.entries[d] or [(1, 1)])]

    def view(self) -> list[int]:
        entries = [*self.batch_entries(), *(self.entry(d) for d in self.tail)]
        return [0, *(n for n, _ in entries), *(st for _, st in entries)]

    def plain(self) -> bool:
        return not self.moved and all(len(e) == 1 for e in self.entries.values())

    def expanded(self) -> "_Side | None":
        """This side read from the tensor a broadcast repeats (`reshape(broadcast_in_dim
        (x))`, grouped-query attention's `repeat_kv`), the repeated dimensions stride 0,
        when each of the reshape's dimensions outside the dot's batch is one of the
        broadcast's (or a unit one); else None."""
        value = self.source
        if not isinstance(value, ir.OpResult) or value.owner.name != "stablehlo.reshape":
            return None
        b = value.owner.operands[0]
        if not isinstance(b, ir.OpResult) or b.owner.name != "stablehlo.broadcast_in_dim":
            return None
        x = b.owner.operands[0]
        bshape, xshape = ranked_shape(b), ranked_shape(x)
        if list(ir.DenseI64ArrayAttr(b.owner.attributes["broadcast_dimensions"])) != \
                list(range(len(bshape))) or len(xshape) != len(bshape) or \
                any(m not in (n, 1) for m, n in zip(xshape, bshape)):
            return None
        strides = [0 if m == 1 and n > 1 else st
                   for m, n, st in zip(xshape, bshape, row_major_strides(xshape))]
        # the broadcast's dimensions (of more than one element) making each of ours, in
        # order: a reshape of a row-major tensor merges consecutive ones
        long = [d for d, n in enumerate(bshape) if n > 1]
        # (read in the tensor the broadcast's operand reshapes, the same row-major bytes:
        # XLA copies a donated cache a call reads through a bitcast of its update)
        while isinstance(x, ir.OpResult) and x.owner.name == "stablehlo.reshape":
            x = x.owner.operands[0]
        side = _Side(x, self.batch, self.tail, self.free)
        side.moved, j = True, 0
        for d, n in enumerate(ranked_shape(value)):
            group, size = [], 1
            while size < n and j < len(long):
                group.append((bshape[long[j]], strides[long[j]]))
                size *= bshape[long[j]]
                j += 1
            if size != n or (d not in self.batch and len(group) > 1):
                return None
            side.entries[d] = group
        return side if j == len(long) else None

    def split_like(self, other: "_Side") -> bool:
        """This side's batch dimensions split as `other`'s are (row-major sub-dimensions
        of each); False when the sizes do not match."""
        split = {}
        for d, e in zip(self.batch, other.batch):
            sizes = [n for n, _ in other.entries[e]] or [1]
            (n, st), = self.entries[d]
            if math.prod(sizes) != n:
                return False
            split[d] = [(m, st * math.prod(sizes[i + 1:])) for i, m in enumerate(sizes)]
        self.entries.update(split)
        return True


def _rewrite(op: ir.Operation, rewriter: rewrite.PatternRewriter, least: int) -> bool:
    plan = _plan(op, least)
    if plan is None:
        return True
    config = {
        kernel_calls.OP_NAME: ir.StringAttr.get(plan["op"] + ".out"),
        "outofplace.tensors": ir.DenseI64ArrayAttr.get([0, 1]),
        "outofplace.operands": ir.DenseI64ArrayAttr.get([0, 1]),
        "outofplace.results": ir.DenseI64ArrayAttr.get([-1]),
        f"{OUT}{_OUT_POSITION[plan['op']]}": ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), 0),
        **{f"outofplace.view.{i}": ir.DenseI64ArrayAttr.get(v)
           for i, v in plan["views"].items()},
    }
    with rewriter.ip, op.location:
        result_type = op.result.type
        if "shape" in plan:  # matmul's [batch..., M, N]: the dot's up to unit dimensions
            result_type = ir.RankedTensorType.get(
                plan["shape"], ir.RankedTensorType(op.result.type).element_type)
        call = kernel_calls.eager_call(TARGET, plan.get("operands", list(op.operands)),
                                       [result_type], config)
        result = call.result
        if result.type != op.result.type:
            result = ir.Operation.create("stablehlo.reshape", results=[op.result.type],
                                         operands=[result]).result
    rewriter.replace_op(op, [result])
    return False


@register_pass(
    "outofplace-dots-as-kernel-calls",
    "Matrix products as calls of eager's kernel (aten::linear, aten::matmul) inside XLA:CPU",
    "`stablehlo.dot_general` of one contracting dimension and at least "
    "`MIN_MULTIPLY_ADDS` (`MIN_MULTIPLY_ADDS_AT_HOME` where the program calls eager's "
    "kernels anyway; f32, f64, bf16): without batch dimensions, the lhs contracting "
    "its last and the rhs of rank 2, `aten::linear` (rhs [N, K]) or `aten::matmul` (rhs "
    "[K, N]); with them, at most one free dimension a side, `aten::matmul` of "
    "[batch..., M, K] and [batch..., K, N] views of the operands → `stablehlo.custom_call @\"aten::matmul\"` "
    "that the kernel handler (backends/kernel_call.cpp) runs; a vector-weight dot with "
    "the weight first (outofplace-vector-dots-weight-first) stays XLA's (the XLA "
    "engine's legalization only, backends/xla; exports keep XLA's dots)")
def dots_as_kernel_calls(module: ir.Operation) -> None:
    for least in (MIN_MULTIPLY_ADDS, MIN_MULTIPLY_ADDS_AT_HOME):
        if least == MIN_MULTIPLY_ADDS_AT_HOME and not calls_eager_kernels(module):
            break
        patterns = rewrite.RewritePatternSet(module.context)
        patterns.add("stablehlo.dot_general",
                     lambda op, rewriter, least=least: _rewrite(op, rewriter, least))
        rewrite.walk_and_apply_patterns(module, patterns.freeze())
    # the repeats the calls read through (`_Side.expanded`), when nothing else reads them
    for op in reversed(all_operations(module)):
        if op.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape") and \
                not list(op.result.uses):
            op.erase()
