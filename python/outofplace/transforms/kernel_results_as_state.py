"""`outofplace-kernel-results-as-state`: each large result of a kernel call is also
returned through an argument of its own, written in place like a cache, so that it
lives in a buffer the caller keeps between calls instead of in XLA:CPU's temporaries.

XLA:CPU allocates all of a program's temporaries as one buffer at each call and frees
it after; glibc's malloc serves an allocation that large with fresh pages from the
kernel each time (a ResNet-18 training step at 224x224: 220 MB, 54,000 page faults a
call where eager's step takes 6,000-27,000). The values kernel calls make (a
convolution's output, batch norm's, their gradients) are most of those bytes. Returned
through a donated argument (`tf.aliasing_output`), a value is written straight into
that argument's buffer, which the XLA engine passes again at the next call: the same
pages every call. The argument is only ever written, never read, and is marked
`outofplace.temporary`:

    func.func @main(%x: tensor<8x3x224x224xf32>, %w: tensor<64x3x7x7xf32>)
        -> tensor<f32> {
      %y = stablehlo.custom_call @"aten::convolution"(%x, %w) {...}
      ...
      return %loss : tensor<f32>
  =>
    func.func @main(%x: ..., %w: ..., %t0: tensor<8x64x112x112xf32>
                    {outofplace.temporary, tf.aliasing_output = 1 : i32})
        -> (tensor<f32>, tensor<8x64x112x112xf32>) {
      %y = stablehlo.custom_call @"aten::convolution"(%x, %w) {...}
      ...
      return %loss, %y : tensor<f32>, tensor<8x64x112x112xf32>

A result counts when it holds at least `MIN_BYTES` and static shape, is the kernel's own
(not the new value of an operand it writes in place) and main does not return it already
(as XLA returns it: through reshapes, or transposes undoing each other; kept too, it
would be copied from one result to the other at every call: a Llama training step's
weight gradients, `(g.T @ x).T.T`), a direct operation of main (not in a loop's body).
With `results=at-peaks` only the results alive where the most of their bytes are are
kept, again among the rest until at most `PEAK_LEFT` bytes of them are alive at once
(`live_at_peaks`: a training step's activations, not its gradients, whose bytes XLA
reuses). The XLA engine runs the pass only when a program's temporaries are over what
glibc maps fresh, and keeps its output only where XLA's temporaries shrink and what it
holds between calls is at most twice their bytes, every result first, then those at the
peaks (backends/xla/temporaries.py); the program a user exports keeps its own signature.
"""

from __future__ import annotations

import math

from torch_mlir import ir

from ..ir_utils import all_operations, operations, terminator
from ..signature import ALIASING_OUTPUT
from .kernel_calls import OP_NAME, RESULTS
from .registry import Option, register_pass

TEMPORARY = "outofplace.temporary"  # on an argument of main: a kept temporary
# A kept result holds at least this many bytes: smaller ones leave XLA's temporaries
# small enough for glibc's heap, and a kernel's small results (batch norm's statistics)
# are not worth an argument.
MIN_BYTES = 1 << 20
# With `results=at-peaks`, results are kept until the rest are at most this many bytes
# alive at once: XLA's temporaries then fit under glibc's largest mmap threshold (32 MiB),
# with room for XLA's own loops' results.
PEAK_LEFT = 16 << 20


def _backend_config(op: ir.Operation) -> ir.DictAttr | None:
    if "backend_config" not in op.attributes or \
            not isinstance(op.attributes["backend_config"], ir.DictAttr):
        return None
    config = ir.DictAttr(op.attributes["backend_config"])
    return config if OP_NAME in config else None


def _nbytes(value: ir.Value) -> int | None:
    """value's bytes, or None when its shape is not static."""
    if not isinstance(value.type, ir.RankedTensorType):
        return None
    type_ = ir.RankedTensorType(value.type)
    if not type_.has_static_shape:
        return None
    return math.prod(type_.shape) * max(1, type_.element_type.width // 8)


def _same_bytes(value: ir.Value) -> list[ir.Value]:
    """`value` and the values it is made of without moving a byte, which XLA returns as
    it would `value` (a kept result returned twice is copied at every call): through
    reshapes and transposes undoing each other (a weight's gradient `(g.T @ x).T.T`)."""
    out = [value]
    while isinstance(value, ir.OpResult):
        op = value.owner
        if op.name == "stablehlo.reshape":
            value = op.operands[0]
        elif op.name == "stablehlo.transpose" and isinstance(op.operands[0], ir.OpResult) \
                and op.operands[0].owner.name == "stablehlo.transpose":
            inner = op.operands[0].owner
            outer_dims = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
            inner_dims = list(ir.DenseI64ArrayAttr(inner.attributes["permutation"]))
            if [inner_dims[d] for d in outer_dims] != list(range(len(outer_dims))):
                break
            value = inner.operands[0]
        else:
            break
        out.append(value)
    return out


def kept_results(main: ir.Operation, min_bytes: int) -> list[ir.Value]:
    """The kernel calls' results the pass returns, in program order."""
    returned = {source for value in terminator(main.regions[0].blocks[0]).operands
                for source in _same_bytes(value)}
    kept = []
    for op in all_operations(main):
        if op.name != "stablehlo.custom_call" or op.parent.name != "func.func":
            continue
        config = _backend_config(op)
        if config is None:
            continue
        aliased = set(ir.DenseI64ArrayAttr(config[RESULTS])) if RESULTS in config else set()
        for index, result in enumerate(op.results):
            nbytes = _nbytes(result)
            if index not in aliased and result not in returned and nbytes is not None \
                    and nbytes >= min_bytes:
                kept.append(result)
    return kept


def _top_level(op: ir.Operation, main: ir.Operation) -> ir.Operation:
    """The op of main's body that is `op` or holds it (in a loop's body)."""
    while op.parent != main:
        op = op.parent
    return op


def live_at_peaks(main: ir.Operation, results: list[ir.Value]) -> list[ir.Value]:
    """Of `results`, those alive where the most of their bytes are, then again among the
    rest, until the rest are at most `PEAK_LEFT` bytes alive at once, in program order:
    a training step's activations, alive from the forward pass to the backward, and not
    its gradients, alive from one op to the next, whose bytes XLA reuses (kept, each
    would hold a buffer of its own: twice the temporaries of a ResNet-18 step)."""
    block = main.regions[0].blocks[0]
    position = {op: i for i, op in enumerate(block.operations)}
    spans = []
    for value in results:
        start = position[_top_level(value.owner, main)]
        end = max([start] + [position[_top_level(use.owner, main)] for use in value.uses])
        spans.append((start, end, _nbytes(value)))
    kept, rest = set(), set(range(len(results)))
    while rest:
        alive = [0] * (len(position) + 1)
        for k in rest:
            start, end, nbytes = spans[k]
            alive[start] += nbytes
            alive[end + 1] -= nbytes
        total, peak, at = 0, 0, 0
        for i, change in enumerate(alive):
            total += change
            if total > peak:
                peak, at = total, i
        if peak <= PEAK_LEFT:
            break
        at_peak = {k for k in rest if spans[k][0] <= at <= spans[k][1]}
        kept |= at_peak
        rest -= at_peak
    return [results[k] for k in sorted(kept)]


@register_pass(
    "outofplace-kernel-results-as-state",
    "Return large kernel results through written arguments (XLA:CPU's temporaries)",
    "each result of a kernel call of at least 1 MiB (not an operand's new value, not "
    "returned already, through reshapes or transposes undoing each other) is also "
    "returned through a new argument of main, aliased to it "
    "and marked outofplace.temporary, so it is written into a buffer the caller keeps "
    "between calls instead of XLA:CPU's temporaries, mapped fresh at each call "
    "(the XLA engine's legalization, backends/xla/temporaries.py)",
    options=[Option("results", "all", ("all", "at-peaks"),
                    "the results kept: every one, or those alive where the most bytes "
                    "are, until the rest are at most `PEAK_LEFT` alive at once")])
def kernel_results_as_state(module: ir.Operation, results: str = "all") -> None:
    mains = [op for op in operations(module.regions[0].blocks[0]) if op.name == "func.func"
             and ir.StringAttr(op.attributes["sym_name"]).value == "main"]
    if not mains:
        return
    main = mains[0]
    kept = kept_results(main, MIN_BYTES)
    if results == "at-peaks":
        kept = live_at_peaks(main, kept)
    if not kept:
        return
    block = main.regions[0].blocks[0]
    ret = terminator(block)
    first = len(ret.operands)
    arg_attrs = list(main.attributes["arg_attrs"]) if "arg_attrs" in main.attributes \
        else [ir.DictAttr.get({})] * len(block.arguments)
    i32 = ir.IntegerType.get_signless(32)
    for k, value in enumerate(kept):
        block.add_argument(value.type, main.location)
        arg_attrs.append(ir.DictAttr.get({
            TEMPORARY: ir.UnitAttr.get(),
            ALIASING_OUTPUT: ir.IntegerAttr.get(i32, first + k)}))
    operands = [*ret.operands, *kept]
    ir.Operation.create("func.return", operands=operands, loc=ret.location,
                        ip=ir.InsertionPoint(ret))
    ret.erase()
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
    if "res_attrs" in main.attributes:
        main.attributes["res_attrs"] = ir.ArrayAttr.get(
            [*main.attributes["res_attrs"], *[ir.DictAttr.get({})] * len(kept)])
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in operands]))
