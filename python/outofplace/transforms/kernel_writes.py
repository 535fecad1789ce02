"""Custom ops that write their arguments (`Tensor(a!)`), for `inplace-to-outofplace`.

A custom op (`torch.library.custom_op(..., mutates_args=...)`, `torch.library.define`
with `Tensor(a!)`, a C++ op) is a kernel outofplace cannot see into: it stays a call,
given the current values of its operands and returning, after its own results, the new
value of each argument it writes. The pass then writes each new value into the tensor
the argument was, as for an ATen in-place op: through the views it was taken by (a paged
pool seen through `view(-1, d)`, a slice of a cache), into the root, which later reads
see and which is an aliased result when it is an argument.

    torch.operator "torch.demo.write_kv"(%pages, %idx, %k) : (!torch.tensor<[16,8],f32>, ...) -> ()
    =>
    %0 = torch.operator "torch.demo.write_kv"(%pages_value, %idx, %k)
           {outofplace.kernel = "demo::write_kv", outofplace.written = [0], ...}
           : (!torch.vtensor<[16,8],f32>, ...) -> !torch.vtensor<[16,8],f32>
    %pool_modified = torch.aten.view %0, ...   (the write through view(-1, 8))

transforms/kernel_calls.py lowers the call to a `stablehlo.custom_call` whose results
alias the written operands (`output_operand_aliases`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch_mlir import ir

from .. import op_registry, torch_types
from ..errors import UnsupportedMutationError

KERNEL = "outofplace.kernel"  # the custom_call target: the op's schema name
WRITTEN = "outofplace.written"  # operand positions written, one result each after its own
ARGUMENTS = "outofplace.arguments"  # the schema's argument names, in operand order
SIDE_EFFECT = "outofplace.side_effect"  # the schema says the op has effects beyond values


def has_side_effect(overload: torch._ops.OpOverload) -> bool:
    """What the schema says beyond its aliases: a seeded random op (its generator's state
    is an effect no value carries). Writes are not side effects: they are aliases."""
    return torch.Tag.nondeterministic_seeded in overload.tags


def kernel_attributes(effects: op_registry.OpEffects, written: tuple[int, ...]
                      ) -> dict[str, ir.Attribute]:
    """The attributes kernel_calls.py lowers the call from (the schema, recorded on the op,
    so the lowering needs no PyTorch registry)."""
    i64 = ir.IntegerType.get_signless(64)
    schema = effects.overload._schema
    return {
        KERNEL: ir.StringAttr.get(op_registry.kernel_target(effects.overload)),
        WRITTEN: ir.ArrayAttr.get([ir.IntegerAttr.get(i64, p) for p in written]),
        ARGUMENTS: ir.ArrayAttr.get([ir.StringAttr.get(a.name) for a in schema.arguments]),
        SIDE_EFFECT: ir.BoolAttr.get(has_side_effect(effects.overload)),
    }


def _returns(op: ir.Operation, effects: op_registry.OpEffects) -> dict[int, int]:
    """Results that are a written argument itself (`-> Tensor(a!)`): result -> operand.
    A result that views an argument it does not write is refused: the call's result would
    be a copy where eager's is a view."""
    schema = effects.overload._schema
    aliased = {}
    for index, ret in enumerate(schema.returns):
        if ret.alias_info is None:
            if index < len(op.results) and not torch_types.is_tensor(op.results[index].type):
                raise UnsupportedMutationError.at(
                    op, f"custom op: its result {index} is not a tensor ({ret.type}); "
                    "outofplace calls kernels that return tensors only")
            continue
        same = [p for p, a in enumerate(schema.arguments) if a.alias_info is not None and
                a.alias_info.before_set & ret.alias_info.before_set]
        if not same or same[0] not in effects.written:
            raise UnsupportedMutationError.at(
                op, f"custom op: its result {index} is a view of its argument "
                f"'{schema.arguments[same[0]].name if same else '?'}' (`Tensor(a)` in its "
                "schema); outofplace calls a kernel as an opaque custom_call, whose results "
                "are new tensors, so writes through that view could not reach the argument")
        aliased[index] = same[0]
    return aliased


def _refuse_overlaps(rewriter: Any, op: ir.Operation, written: tuple[int, ...]) -> None:
    """A written argument sharing its root with another tensor argument: the kernel would
    read (or write twice) memory it writes, whose result depends on its order in eager."""
    operands = list(op.operands)
    for p in written:
        root = rewriter.aliases[operands[p]].root
        for q, other in enumerate(operands):
            if q != p and other in rewriter.aliases and rewriter.aliases[other].root is root:
                raise UnsupportedMutationError.at(
                    op, f"custom op: argument {p} it writes and argument {q} are views of "
                    "the same tensor; outofplace passes a kernel each argument's value, so "
                    "it could not see its own writes through the other (pass them as "
                    "separate tensors, or clone the one it reads)")


def visit_kernel(rewriter: Any, op: ir.Operation, effects: op_registry.OpEffects) -> None:
    """Rewrites one custom op call (`_FunctionRewriter.visit` of inplace_to_outofplace)."""
    operands = list(op.operands)
    schema = effects.overload._schema
    if len(operands) != len(schema.arguments) or any(
            r.blocks for r in op.regions):
        raise UnsupportedMutationError.at(op, "custom op: its operands are not its schema's")
    for p in effects.written:
        if not torch_types.is_tensor(operands[p].type) or operands[p] not in rewriter.aliases:
            raise UnsupportedMutationError.at(
                op, f"custom op: it writes its argument '{schema.arguments[p].name}' of "
                f"type {schema.arguments[p].type}; outofplace follows writes of Tensor "
                "arguments only (not lists or optionals)")
    written = effects.written
    _refuse_overlaps(rewriter, op, written)
    aliased = _returns(op, effects)
    fresh = [i for i in range(len(op.results)) if i not in aliased]
    values = rewriter.read_operands(op)
    types = [torch_types.value_type(op.results[i].type) for i in fresh] + \
        [torch_types.value_type(values[p].type) for p in written]
    direct = [rewriter.aliases[operands[p]] for p in written]
    direct = [a.root for a in direct if not a.chain]
    # One result, a root's new version: `<root>_modified`. Several: MLIR names an op's
    # results together (`%write_kv:3`), so the call takes the op's name.
    loc = rewriter.version_location(direct[0], op) if direct and len(types) == 1 else \
        op.location if len(types) == 1 else ir.Location.name(
            schema.name.split("::")[-1], childLoc=op.location)
    attributes = {"name": op.attributes["name"], **kernel_attributes(effects, written)}
    call = ir.Operation.create("torch.operator", results=types, operands=values, loc=loc,
                               attributes=attributes, ip=ir.InsertionPoint(op))
    for k, index in enumerate(fresh):
        old = op.results[index]
        mutable = torch_types.is_nonvalue_tensor(old.type)
        old.replace_all_uses_with(call.results[k])
        if mutable:  # written later: a root of its own
            rewriter.new_root(call.results[k], call.results[k])
    for j, p in enumerate(written):
        value = call.results[len(fresh) + j]
        rewriter.write(operands[p], op, lambda _loc, value=value: value)
    for index, p in aliased.items():
        rewriter.aliases[op.results[index]] = rewriter.aliases[operands[p]]
    rewriter.dead.append(op)
