"""Bytes an emitted update touches, read statically from the StableHLO.

The module is parsed with the MLIR Python bindings (no regexes). From each argument that
aliases a result (`tf.aliasing_output`; for a program without aliases, the argument whose
type the first result has), the chain of ops that carries the buffer to its result is
followed backwards, and each op on it is charged what it must move at least:

    dynamic_update_slice                  the update operand's bytes
    scatter                               the updates' and the indices' bytes
    reshape, bitcast_convert, identity
      broadcast_in_dim / convert / copy   nothing (a relabelling XLA drops)
    anything else (select, pad, add, ...) the whole result

A result that does not alias its argument is charged the whole buffer once more unless
an op on the chain already writes all of it: without donation XLA copies the buffer
before it updates the copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

_FREE = {"stablehlo.reshape", "stablehlo.bitcast_convert"}
_FREE_IF_IDENTITY = {"stablehlo.broadcast_in_dim", "stablehlo.convert", "stablehlo.copy",
                     "stablehlo.transpose"}


@dataclass
class UpdateCost:
    """What the update of one buffer costs, statically."""

    ops: list[str]  # the ops on the chain from the argument to its result, first first
    bytes: int  # bytes the chain touches (see the module docstring)
    aliased: bool  # the result aliases the argument (the buffer is donated)
    buffer_bytes: int  # size of the buffer


def tensor_bytes(t: ir.Type) -> int:
    shaped = ir.RankedTensorType(t)
    element = shaped.element_type
    if isinstance(element, ir.IntegerType):
        bits = element.width
    elif isinstance(element, ir.ComplexType):
        bits = 2 * ir.FloatType(element.element_type).width
    else:
        bits = ir.FloatType(element).width
    count = 1
    for d in shaped.shape:
        count *= d
    return count * max(bits, 8) // 8


def _op_bytes(op: ir.Operation) -> int:
    name = op.name
    if name == "stablehlo.dynamic_update_slice":
        return tensor_bytes(op.operands[1].type)
    if name == "stablehlo.scatter":
        # operands: inputs..., indices, updates... (one input here)
        n = (len(op.operands) - 1) // 2
        return sum(tensor_bytes(v.type) for v in list(op.operands)[n:])
    if name in _FREE:
        return 0
    if name in _FREE_IF_IDENTITY and op.operands[0].type == op.results[0].type:
        return 0
    return tensor_bytes(op.results[0].type)


def _short(name: str) -> str:
    return name.removeprefix("stablehlo.")


def _aliases(func: ir.Operation) -> dict[int, int]:
    """argument index -> result index, from `tf.aliasing_output`."""
    found: dict[int, int] = {}
    if "arg_attrs" not in func.attributes:
        return found
    for i, attrs in enumerate(ir.ArrayAttr(func.attributes["arg_attrs"])):
        attrs = ir.DictAttr(attrs)
        if "tf.aliasing_output" in attrs:
            found[i] = ir.IntegerAttr(attrs["tf.aliasing_output"]).value
    return found


def _main(module: ir.Module) -> ir.Operation:
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and \
                ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise ValueError("no @main")


def _functions(module: ir.Module) -> dict[str, ir.Operation]:
    return {ir.StringAttr(op.operation.attributes["sym_name"]).value: op.operation
            for op in module.body.operations if op.operation.name == "func.func"}


def _chain(func: ir.Operation, arg_index: int, result_index: int,
           functions: dict[str, ir.Operation]) -> list[tuple[str, int]]:
    """(op name, bytes charged) for each op carrying argument `arg_index` of `func` to its
    result `result_index`, first first; a `func.call` (JAX outlines `jnp.where`) is
    followed into its callee."""
    block = func.regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    arg = block.arguments[arg_index]
    carried = {arg}  # values that carry (some of) the argument's data
    for op in ops:
        if any(v in carried for v in op.operands):
            carried.update(op.results)
    chain: list[tuple[str, int]] = []
    value = ops[-1].operands[result_index]
    while value != arg:
        if not isinstance(value, ir.OpResult):
            break  # another block argument: the buffer is replaced
        owner = value.owner
        operands = list(owner.operands)
        nxt = [i for i, v in enumerate(operands) if v in carried]
        if owner.name == "func.call" and nxt:
            callee = ir.FlatSymbolRefAttr(owner.attributes["callee"]).value
            if callee in functions:
                inner = _chain(functions[callee], nxt[0], value.result_number, functions)
                chain += inner[::-1]  # chain is built backwards, inner is forwards
                value = operands[nxt[0]]
                continue
        chain.append((_short(owner.name), _op_bytes(owner)))
        if not nxt:
            break  # the result does not depend on the argument
        value = operands[nxt[0]]
    chain.reverse()
    return chain


def update_costs(stablehlo: str) -> dict[int, UpdateCost]:
    """argument index -> UpdateCost, for every buffer the program updates."""
    with ir.Context() as context, ir.Location.unknown():
        _stablehlo.register_dialect(context)
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(stablehlo)
        functions = _functions(module)
        func = _main(module)
        block = func.regions[0].blocks[0]
        ret = list(block.operations)[-1].operation
        aliases = _aliases(func)
        aliased = bool(aliases)
        if not aliases:  # torch-mlir's output: the result of the cache's type
            result_types = [v.type for v in ret.operands]
            for i, arg in enumerate(block.arguments):
                if arg.type in result_types and tensor_bytes(arg.type) > 0:
                    aliases[i] = result_types.index(arg.type)
                    break
        costs: dict[int, UpdateCost] = {}
        for arg_index, result_index in aliases.items():
            chain = _chain(func, arg_index, result_index, functions)
            charged = [b for _, b in chain]
            total = sum(charged)
            buffer = tensor_bytes(block.arguments[arg_index].type)
            if not aliased and not any(c >= buffer for c in charged):
                total += buffer  # no donation: XLA first copies the buffer, then updates
            costs[arg_index] = UpdateCost([name for name, _ in chain], total, aliased,
                                          buffer)
        return costs
