"""`outofplace-bfloat16-state-as-bits`: a bfloat16 written argument that is updated in place
(a KV cache's `scatter` or `dynamic_update_slice`) is passed, updated and returned as its
16-bit integers, for XLA:CPU.

XLA:CPU computes nothing in bfloat16 but its library's matrix products: its float
normalization makes every other op on bfloat16 a float32 one, converts around it
included (float16 it computes as it is, and updates in place).
An update in place becomes `convert(dynamic_update_slice(convert(cache), convert(k)))`:
the whole cache converted to float32, updated and converted back into a new buffer, the
donated parameter copied first (a 148M Llama's bfloat16 caches, 28 of 28 copied on every
token; JAX's own program pays the same). Its integers are only moved, so the update is
done in place; each reader takes the bits back as `bitcast_convert`, which XLA fuses into
its own conversion to float32:

    func.func @main(%cache: tensor<12x256x64xbf16> {tf.aliasing_output = 1 : i32}, ...)
      %u = "stablehlo.scatter"(%cache, %i, %k) ({ ^bb0(%a: tensor<bf16>, %b: tensor<bf16>):
          stablehlo.return %b }) ...
      %s = stablehlo.dot_general %q, %u, ...
      return %s, %u
  =>
    func.func @main(%cache: tensor<12x256x64xi16> {tf.aliasing_output = 1 : i32}, ...)
      %k1 = stablehlo.bitcast_convert %k : (tensor<12x1x64xbf16>) -> tensor<12x1x64xi16>
      %u = "stablehlo.scatter"(%cache, %i, %k1) ({ ^bb0(%a: tensor<i16>, %b: tensor<i16>):
          stablehlo.return %b }) ...
      %u1 = stablehlo.bitcast_convert %u : (tensor<12x256x64xi16>) -> tensor<12x256x64xbf16>
      %s = stablehlo.dot_general %q, %u1, ...
      return %s, %u

Only an argument whose returned value is made from it by such updates alone (and
reshapes) is changed: a `scatter` whose computation returns the update (a combining one
adds floats), a `dynamic_update_slice`, a `stablehlo.while` carrying it whose body makes
its new value so (a decode loop's cache: carried as bits, where XLA:CPU converted and
copied it at every iteration). Its other readers, of the argument itself or of a value
between, in the loop's regions too, read the bits back. The caller's buffer holds the
same bytes: the executable hands XLA a view of it as int16 (backends/xla/executable.py).
Only the XLA engine runs it (backends/xla): the program a user exports keeps the
caller's types.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from ..ir_utils import operations, retype_function, terminator
from ..signature import io_map_of
from .registry import register_pass

_UPDATES = ("stablehlo.dynamic_update_slice", "stablehlo.scatter", "stablehlo.reshape")


def _bfloat16(type_: ir.Type) -> bool:
    return isinstance(type_, ir.RankedTensorType) and isinstance(type_.element_type, ir.BF16Type)


def _replaces(scatter: ir.Operation) -> bool:
    """Whether a single-input scatter's computation returns the update as it is."""
    block = scatter.regions[0].blocks[0]
    body = operations(block)
    return len(scatter.operands) == 3 and len(body) == 1 and \
        body[0].name == "stablehlo.return" and body[0].operands[0] == block.arguments[1]


# An op of a chain, the operand it reads the chain at, and for a loop its body's chain.
Link = tuple[ir.Operation, int, "list[Link] | None"]


def _chain(returned: ir.Value, start: ir.Value) -> list[Link] | None:
    """The links that make `returned` from `start`, first to last, each reading the one
    before: updates and reshapes (at operand 0), and loops carrying the value (at its
    position) whose body makes its new value the same way; None when it is made
    otherwise."""
    chain: list[Link] = []
    value = returned
    while value != start:
        if not isinstance(value, ir.OpResult):
            return None
        op, k, inner = value.owner, 0, None
        if op.name == "stablehlo.while":
            k = value.result_number
            body = op.regions[1].blocks[0]
            inner = _chain(terminator(body).operands[k], body.arguments[k])
            if inner is None:
                return None
        elif op.name not in _UPDATES or \
                (op.name == "stablehlo.scatter" and not _replaces(op)):
            return None
        chain.append((op, k, inner))
        value = op.operands[k]
    return chain[::-1]


def _as(value: ir.Value, element: ir.Type, ip: ir.InsertionPoint, loc: ir.Location
        ) -> ir.Value:
    """value's bits as `element` (a `bitcast_convert` of the same width)."""
    type_ = ir.RankedTensorType.get(ir.RankedTensorType(value.type).shape, element)
    return ir.Operation.create("stablehlo.bitcast_convert", results=[type_],
                               operands=[value], ip=ip, loc=loc).result


def _as_bits_type(value: ir.Value) -> None:
    value.set_type(ir.RankedTensorType.get(ir.RankedTensorType(value.type).shape,
                                           ir.IntegerType.get_signless(16)))


def _rewrite(start: ir.Value, chain: list[Link], end: tuple[ir.Operation, int]) -> None:
    """`start` (an argument, a loop's block argument), the chain from it and its last
    value on bits; `end` (the terminator, the operand) reads the last value as bits,
    every other reader outside the chain reads it back as bfloat16."""
    bf16 = ir.RankedTensorType(start.type).element_type
    bits = ir.IntegerType.get_signless(16)
    links = [(op, k) for op, k, _ in chain] + [end]

    def inside(use) -> bool:  # a link reading the value before it
        return any(use.owner == op and use.operand_number == k for op, k in links)

    def read_back(value: ir.Value, ip: ir.InsertionPoint, loc: ir.Location) -> None:
        outside = [(use.owner, use.operand_number) for use in value.uses if not inside(use)]
        if outside:
            back = _as(value, bf16, ip, loc)
            for owner, number in outside:
                owner.operands[number] = back

    _as_bits_type(start)
    first = start.owner.operations[0]
    read_back(start, ir.InsertionPoint(first), first.location)
    for op, k, inner in chain:
        ip = ir.InsertionPoint(op)
        if op.name == "stablehlo.dynamic_update_slice":
            op.operands[1] = _as(op.operands[1], bits, ip, op.location)
        elif op.name == "stablehlo.scatter":
            op.operands[2] = _as(op.operands[2], bits, ip, op.location)
            for value in op.regions[0].blocks[0].arguments:
                _as_bits_type(value)
        elif op.name == "stablehlo.while":
            cond, body = (region.blocks[0] for region in op.regions)
            _rewrite(body.arguments[k], inner, (terminator(body), k))
            _as_bits_type(cond.arguments[k])  # (the condition only reads it)
            read_back(cond.arguments[k], ir.InsertionPoint(cond.operations[0]),
                      cond.operations[0].location)
        _as_bits_type(op.results[k])
        read_back(op.results[k], ir.InsertionPoint.after(op), op.location)


def _as_bits(function: func_d.FuncOp) -> None:
    block = function.entry_block
    ret = terminator(block)
    changed = False
    for argument_number, result in sorted(io_map_of(function).items()):
        argument = block.arguments[argument_number]
        if not _bfloat16(argument.type):
            continue
        chain = _chain(ret.operands[result], argument)
        if not chain or all(op.name == "stablehlo.reshape" for op, _, _ in chain):
            continue
        _rewrite(argument, chain, (ret, result))
        changed = True
    if changed:
        retype_function(function)


@register_pass(
    "outofplace-bfloat16-state-as-bits",
    "Pass, update and return bfloat16 state updated in place as 16-bit integers (XLA:CPU)",
    "a bfloat16 written argument whose new value scatters and "
    "dynamic_update_slices alone make from it (a KV cache, also carried by a while) "
    "becomes i16, its updates done on the bits and its readers reading them back "
    "through bitcast_convert: "
    "XLA:CPU's float normalization converts a bfloat16 update to float32, the whole "
    "cache converted and copied on every call (the XLA engine's legalization, "
    "backends/xla)")
def bfloat16_state_as_bits(module: ir.Operation) -> None:
    for op in operations(module.regions[0].blocks[0]):
        if op.name == "func.func":
            with op.location:
                _as_bits(op.opview)
