"""What the `legalize-for-iree` passes share: reading `main`, following values through
the ops IREE 3.13 folds, and the barriers that keep it from folding.

Two marks carry what a pass decided to the engine (backends/iree/compiler.py reads and
removes them before IREE sees the module): `COPIED`, a unit attribute on an argument of
`main` the engine passes as a copy, and `RETURNED`, on `main`, the results removed
because they are an argument as it came (`[result, argument, *shape]` each).
"""

from __future__ import annotations

import math
from typing import Any

from torch_mlir import ir

from ....ir_utils import all_operations

COPIED = "outofplace.iree_copied"
RETURNED = "outofplace.iree_returned_arguments"
ALIASING_OUTPUT = "tf.aliasing_output"


def _main(module: Any) -> Any:
    """The function `@main` of the module operation `module`."""
    return next(op.operation for op in module.regions[0].blocks[0].operations
                if op.operation.name == "func.func" and
                ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")


def _walk(op: Any) -> list[Any]:
    """Every op nested in `op`, in pre-order (not `op` itself)."""
    return all_operations(op)[1:]


def aliases(main: Any) -> dict[int, int]:
    """{argument: result} of `main`'s `tf.aliasing_output`s."""
    if "arg_attrs" not in main.attributes:
        return {}
    found = {}
    for number, attrs in enumerate(ir.ArrayAttr(main.attributes["arg_attrs"])):
        attrs = ir.DictAttr(attrs)
        if ALIASING_OUTPUT in attrs:
            found[number] = ir.IntegerAttr(attrs[ALIASING_OUTPUT]).value
    return found


def set_argument_attributes(main: Any, changes: dict[int, dict[str, Any]]) -> None:
    """Sets (an attribute, or None to remove it) argument attributes of `main`."""
    if not changes:
        return
    count = len(main.regions[0].blocks[0].arguments)
    attrs = list(ir.ArrayAttr(main.attributes["arg_attrs"])) \
        if "arg_attrs" in main.attributes else [ir.DictAttr.get({})] * count
    for argument, change in changes.items():
        entries = {named.name: named.attr for named in ir.DictAttr(attrs[argument])}
        for name, attr in change.items():
            if attr is None:
                entries.pop(name, None)
            else:
                entries[name] = attr
        attrs[argument] = ir.DictAttr.get(entries)
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


def _reads_arguments(value: Any) -> bool:
    """Whether `value` is computed from an argument of its function (not from constants
    and iotas alone: indices known when compiling, which the frontend made in range)."""
    seen: dict[int, Any] = {}  # id -> the operation, kept alive so that ids stay its
    pending = [value]
    while pending:
        value = pending.pop()
        if not isinstance(value, ir.OpResult):
            return True
        owner = value.owner.operation
        if id(owner) in seen:
            continue
        seen[id(owner)] = owner
        pending.extend(owner.operands)
    return False


def _update_targets(module: Any) -> set[int]:
    """Arguments of `main` whose value reaches, through ops that keep each element in
    its place (`_same_places`, which IREE may fold away: `x * 1`, a reshape), a
    transpose or broadcast that moves only dimensions of size one (`_keeps_order`) or a
    dynamic_update_slice of the whole tensor (`_whole_update`), the
    operand a dynamic_update_slice or scatter updates, or a sort's operands. IREE 3.13
    writes such an update into the argument's buffer even when the argument is not
    consumed (`w[0] = 1` on an input w that is not written in eager, but copied into a
    written tensor first, or multiplied by 1), and sorts a sort's operands in their
    buffers (`torch.quantile(x, 0.3)` sorted the caller's x)."""
    main = _main(module)
    targets = set()
    for number, argument in enumerate(main.regions[0].blocks[0].arguments):
        values, seen = [argument], set()
        while values and number not in targets:
            value = values.pop()
            for use in value.uses:
                user = use.owner
                if user.name == "stablehlo.sort" or use.operand_number == 0 and \
                        user.name in ("stablehlo.dynamic_update_slice", "stablehlo.scatter"):
                    targets.add(number)
                elif (_same_places(user) or _keeps_order(user) or
                      _whole_update(user, use.operand_number)) and \
                        user.results[0] not in seen:
                    seen.add(user.results[0])
                    values.append(user.results[0])
    return targets


_ELEMENTWISE = frozenset("stablehlo." + name for name in """
    abs add and atan2 bitcast_convert cbrt ceil clamp compare complex convert cosine
    count_leading_zeros divide exponential exponential_minus_one floor imag is_finite log
    log_plus_one logistic maximum minimum multiply negate not or popcnt power real
    reduce_precision remainder reshape round_nearest_afz round_nearest_even rsqrt select
    shift_left shift_right_arithmetic shift_right_logical sign sine sqrt subtract tan tanh
    xor""".split())


def _same_places(op: Any) -> bool:
    """Whether each element of `op`'s one result is computed from the elements at the
    same place (in row-major order) of its operands: elementwise ops, reshapes, and a
    broadcast_in_dim, slice or transpose that leaves its operand as it is."""
    if len(op.results) != 1 or op.parent.name != "func.func":
        return False
    if op.name in _ELEMENTWISE:
        return op.name != "stablehlo.bitcast_convert" or \
            ir.RankedTensorType(op.operands[0].type).shape == \
            ir.RankedTensorType(op.results[0].type).shape
    if op.name not in ("stablehlo.broadcast_in_dim", "stablehlo.slice",
                       "stablehlo.transpose") or op.operands[0].type != op.results[0].type:
        return False
    rank = ir.RankedTensorType(op.results[0].type).rank
    identity = list(range(rank))
    if op.name == "stablehlo.slice":
        return list(ir.DenseI64ArrayAttr(op.attributes["strides"])) == [1] * rank
    name = "broadcast_dimensions" if op.name == "stablehlo.broadcast_in_dim" \
        else "permutation"
    return list(ir.DenseI64ArrayAttr(op.attributes[name])) == identity


def _keeps_order(op: Any) -> bool:
    """Whether `op` is a transpose or broadcast_in_dim that only moves or adds dimensions
    of size one: its result holds its operand's elements in the same row-major order, a
    reshape that IREE 3.13 folds to the operand's buffer (`t = x.clone(); t.t_();
    t.view(-1)[i] = 0` on a 1x5 x scattered into x's buffer)."""
    if op.name not in ("stablehlo.transpose", "stablehlo.broadcast_in_dim") or \
            len(op.results) != 1:
        return False
    operand = ir.RankedTensorType(op.operands[0].type)
    result = ir.RankedTensorType(op.results[0].type)
    if not (operand.has_static_shape and result.has_static_shape):
        return False
    if op.name == "stablehlo.transpose":
        order = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        moved = [d for d in order if operand.shape[d] != 1]
    else:  # as many elements: no dimension is broadcast
        if math.prod(operand.shape) != math.prod(result.shape):
            return False
        dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
        moved = [d for d, n in zip(dims, operand.shape) if n != 1]
    return moved == sorted(moved)


def _whole_update(op: Any, operand: int) -> bool:
    """Whether operand `operand` of `op` is a dynamic_update_slice's update as large as
    its result: the result is the update (IREE folds it so: `x1[:, pos] = w5` on a
    5x1 x1 wrote a later update of x1 into w5)."""
    return op.name == "stablehlo.dynamic_update_slice" and operand == 1 and \
        op.operands[1].type == op.results[0].type


def _through_reshapes(value: Any) -> Any:
    while _defining_op(value) is not None and \
            _defining_op(value).name == "stablehlo.reshape":
        value = _defining_op(value).operands[0]
    return value


def _copied(op: Any, operand: int) -> None:
    """`op`'s operand as `select(barrier(true), operand, zeros)`: computed into a buffer
    of its own, which IREE cannot take for the operand's (a barrier alone, it can)."""
    value = op.operands[operand]
    type = ir.RankedTensorType(value.type)
    with op.location, ir.InsertionPoint(op):
        zero = ir.Operation.create("stablehlo.constant", results=[type], attributes={
            "value": ir.DenseElementsAttr.get_splat(type, _zero(type.element_type))})
    op.operands[operand] = _opaque_select(op, value, zero.results[0])


def _opaque_select(op: Any, on_true: Any, on_false: Any) -> Any:
    """`select(barrier(true), on_true, on_false)`, placed before `op`: on_true's value in
    a buffer of its own, as IREE cannot see through the barrier to fold the select."""
    with op.location, ir.InsertionPoint(op):
        flags = ir.RankedTensorType.get(ir.RankedTensorType(on_true.type).shape,
                                        ir.IntegerType.get_signless(1))
        true = ir.Operation.create("stablehlo.constant", results=[flags], attributes={
            "value": ir.DenseElementsAttr.get_splat(flags, ir.BoolAttr.get(True))})
        opaque = ir.Operation.create("stablehlo.optimization_barrier", results=[flags],
                                     operands=[true.results[0]])
        select = ir.Operation.create("stablehlo.select", results=[on_true.type],
                                     operands=[opaque.results[0], on_true, on_false])
    return select.results[0]


def _zero(element: Any) -> Any:
    if isinstance(element, ir.IntegerType):
        return ir.IntegerAttr.get(element, 0)
    return ir.FloatAttr.get(element, 0.0)


def _elements(value: Any) -> int:
    return math.prod(ir.RankedTensorType(value.type).shape)


def _behind_barrier(op: Any, operand: int) -> None:
    value = op.operands[operand]
    barrier = ir.Operation.create("stablehlo.optimization_barrier", results=[value.type],
                                  operands=[value], loc=op.location,
                                  ip=ir.InsertionPoint(op))
    op.operands[operand] = barrier.results[0]


def _is_constant(value: Any) -> bool:
    op = _defining_op(value)
    while op is not None and op.name in ("stablehlo.reshape", "stablehlo.broadcast_in_dim",
                                         "stablehlo.convert"):
        op = _defining_op(op.operands[0])
    return op is not None and op.name == "stablehlo.constant"


def _reads(value: Any, source: Any) -> bool:
    """Whether `value` is computed from `source`."""
    values, seen = [value], set()
    while values:
        value = values.pop()
        if value == source:
            return True
        op = _defining_op(value)
        if op is not None:
            for operand in op.operands:
                if operand not in seen:
                    seen.add(operand)
                    values.append(operand)
    return False


def _defining_op(value: Any) -> Any:
    owner = value.owner
    return getattr(owner, "operation", None) if hasattr(owner, "name") else None

