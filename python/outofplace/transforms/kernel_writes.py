"""Custom ops that write their arguments (`Tensor(a!)`), for `inplace-to-outofplace`.

A custom op (`torch.library.custom_op(..., mutates_args=...)`, `torch.library.define`
with `Tensor(a!)`, a C++ op) is a kernel outofplace cannot see into: it stays a call. The
call is given the root of each tensor it writes, and each argument that views such a
root as that root plus the view's place in it (element offset, sizes, strides, computed
by replaying the view ops on a meta tensor), so the kernel writes the root's memory
through the view as eager's does (a paged pool seen through `view(-1, d)`, a slice of a
cache, `kv[0]` and `kv[1]` of one tensor); the call returns, after its own results, the
new value of each root it writes, which later reads see and which is an aliased result
when the root is an argument:

    torch.operator "torch.demo.write_kv"(%rows, %idx, %k) : (!torch.tensor<[16,8],f32>, ...) -> ()
      (%rows = torch.aten.view %pool [-1, 8])
    =>
    %pool_modified = torch.operator "torch.demo.write_kv"(%pool, %idx, %k)
           {outofplace.kernel = "demo::write_kv", outofplace.written = [0],
            outofplace.views = [array<i64: 0, 16, 8, 8, 1>, array<i64>, array<i64>], ...}
           : (!torch.vtensor<[4,4,8],f32>, ...) -> !torch.vtensor<[4,4,8],f32>

A view whose place is not known when compiling (`x[pos]` at a runtime position) is given
as its value instead, and the call's result written back through its view ops as an
in-place op's is (another argument on the same root is then refused).
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
WRITTEN = "outofplace.written"  # operands written (one per root), a result each after its own
ARGUMENTS = "outofplace.arguments"  # the schema's argument names, in operand order
SIDE_EFFECT = "outofplace.side_effect"  # the schema says the op has effects beyond values
VIEWS = "outofplace.views"  # per operand: [offset, sizes, strides] of a view of it, or []
RESULT_NAMES = "outofplace.result_names"  # of a call with several results: each version's


def has_side_effect(overload: torch._ops.OpOverload) -> bool:
    """What the schema says beyond its aliases: a seeded random op (its generator's state
    is an effect no value carries). Writes are not side effects: they are aliases."""
    return torch.Tag.nondeterministic_seeded in overload.tags


def kernel_attributes(effects: op_registry.OpEffects, written: tuple[int, ...],
                      views: dict[int, tuple] | None = None) -> dict[str, ir.Attribute]:
    """The attributes kernel_calls.py lowers the call from (the schema, recorded on the op,
    so the lowering needs no PyTorch registry)."""
    i64 = ir.IntegerType.get_signless(64)
    schema = effects.overload._schema
    views = views or {}
    return {
        VIEWS: ir.ArrayAttr.get([ir.DenseI64ArrayAttr.get(
            [views[p][0], *views[p][1], *views[p][2]] if p in views else [])
            for p in range(len(schema.arguments))]),
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
    """Where an argument on a written root is a view at a runtime position (no place in
    the root known when compiling, so the kernel is given values, not the root): a
    written argument sharing its root with another tensor argument would not see the
    other's memory, as eager's kernel does."""
    operands = list(op.operands)
    for p in written:
        root = rewriter.aliases[operands[p]].root
        for q, other in enumerate(operands):
            if q != p and other in rewriter.aliases and rewriter.aliases[other].root is root:
                raise UnsupportedMutationError.at(
                    op, f"custom op: argument {p} it writes and argument {q} are views of "
                    "the same tensor, one at a runtime position (`x[pos]`) whose place in "
                    "it is not known when compiling; outofplace then passes the kernel "
                    "each argument's value, so it could not see its writes through the "
                    "other (index with a constant, or clone the one it reads)")


class _NoLayout(Exception):
    """A view whose elements outofplace cannot place in its root at compile time."""


def _static(value: ir.Value) -> Any:
    """A view op's constant argument (int, bool, float, None, list of those)."""
    owner = value.owner if isinstance(value, ir.OpResult) else None
    kind = owner.name if owner is not None else ""
    if kind == "torch.constant.none":
        return None
    if kind in ("torch.constant.int", "torch.constant.bool"):
        return ir.IntegerAttr(owner.attributes["value"]).value if kind.endswith("int") \
            else ir.BoolAttr(owner.attributes["value"]).value
    if kind == "torch.constant.float":
        return ir.FloatAttr(owner.attributes["value"]).value
    if kind == "torch.prim.ListConstruct":
        return [_static(v) for v in owner.operands]
    raise _NoLayout()


def _layout(alias: Any) -> tuple[int, list[int], list[int]] | None:
    """Where the view `alias` lies in its (contiguous) root: (element offset, sizes,
    strides), by replaying its view ops on a meta tensor of the root; None for the root
    itself. Raises _NoLayout for a view at a runtime position or of unknown shape."""
    if not alias.chain:
        return None
    root = torch_types.TensorType.of(alias.root.value.type)
    if root.sizes is None or root.dtype is None or any(d < 0 for d in root.sizes):
        raise _NoLayout()
    base = torch.empty(root.sizes, dtype=root.dtype, device="meta")
    current = base
    for view in alias.chain:
        effects = op_registry.effects(op_registry.aten_name(view))
        if effects is None or not effects.is_view or effects.result_views != 0:
            raise _NoLayout()
        try:
            current = effects.overload(current, *map(_static, list(view.operands)[1:]))
        except (RuntimeError, TypeError, ValueError):
            raise _NoLayout() from None
    if not isinstance(current, torch.Tensor) or not torch._C._is_alias_of(current, base):
        raise _NoLayout()
    return current.storage_offset(), list(current.shape), list(current.stride())


def _shared_layouts(rewriter: Any, op: ir.Operation, written: tuple[int, ...]
                    ) -> dict[int, tuple | None] | None:
    """For each tensor operand whose root a written operand shares: its layout in that
    root (the kernel is then given the root and views it as eager's argument views it);
    None when one of them has no layout at compile time."""
    operands = list(op.operands)
    roots = {id(rewriter.aliases[operands[p]].root) for p in written}
    try:
        return {p: _layout(rewriter.aliases[v]) for p, v in enumerate(operands)
                if v in rewriter.aliases and id(rewriter.aliases[v].root) in roots}
    except _NoLayout:
        return None


def visit_kernel(rewriter: Any, op: ir.Operation, effects: op_registry.OpEffects) -> None:
    """Rewrites one custom op call (`_FunctionRewriter.visit` of inplace_to_outofplace).

    The kernel is given the root of each tensor it writes, and each argument that is a
    view of such a root as that root and the view's place in it (offset, sizes, strides:
    `outofplace.views`), so it writes the root's memory through the view as eager's kernel
    does (backends/kernel_call.cpp takes the view of XLA's buffer); the root's new value
    is a result of the call. A view at a runtime position has no place known when
    compiling: the call then takes the view's value and its result is written back
    through the view ops (as an in-place op's), other arguments on the same root refused.
    """
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
    layouts = _shared_layouts(rewriter, op, effects.written)
    aliased = _returns(op, effects)
    fresh = [i for i in range(len(op.results)) if i not in aliased]
    if layouts is None:  # the views' values, written back through their view ops
        _refuse_overlaps(rewriter, op, effects.written)
        values = rewriter.read_operands(op)
        targets = list(effects.written)
        roots = [rewriter.aliases[operands[p]].root for p in targets
                 if not rewriter.aliases[operands[p]].chain]
        views = {}
    else:  # the roots, with each argument's place in its root
        values = [rewriter.aliases[v].root.value if p in layouts else
                  rewriter.read(v, op) if v in rewriter.aliases else v
                  for p, v in enumerate(operands)]
        targets, roots = [], []
        for p in effects.written:  # one result per written root
            root = rewriter.aliases[operands[p]].root
            if all(r is not root for r in roots):
                targets.append(p)
                roots.append(root)
        views = {p: layout for p, layout in layouts.items() if layout is not None}
    types = [torch_types.value_type(op.results[i].type) for i in fresh] + \
        [torch_types.value_type(values[p].type) for p in targets]
    # One result, a root's new version: `<root>_modified`. Several: MLIR names an op's
    # results together (`%write_kv:3`), so the call takes the op's name.
    loc = rewriter.version_location(roots[0], op) if roots and len(types) == 1 else \
        op.location if len(types) == 1 else ir.Location.name(
            schema.name.split("::")[-1], childLoc=op.location)
    attributes = {"name": op.attributes["name"],
                  **kernel_attributes(effects, tuple(targets), views)}
    if len(types) > 1:  # each root's version named on a result (kernel_calls.py)
        attributes[RESULT_NAMES] = ir.ArrayAttr.get(
            [ir.StringAttr.get("")] * len(fresh) + [ir.StringAttr.get(
                "" if layouts is None and rewriter.aliases[operands[p]].chain else
                ir.NameLoc(rewriter.version_location(rewriter.aliases[operands[p]].root,
                                                     op)).name_str) for p in targets])
    call = ir.Operation.create("torch.operator", results=types, operands=values, loc=loc,
                               attributes=attributes, ip=ir.InsertionPoint(op))
    for k, index in enumerate(fresh):
        old = op.results[index]
        mutable = torch_types.is_nonvalue_tensor(old.type)
        old.replace_all_uses_with(call.results[k])
        if mutable:  # written later: a root of its own
            rewriter.new_root(call.results[k], call.results[k])
    for j, p in enumerate(targets):
        value = call.results[len(fresh) + j]
        if layouts is None:
            rewriter.write(operands[p], op, lambda _loc, value=value: value)
        else:
            root = rewriter.aliases[operands[p]].root
            root.value = value
            root.versions += 1
    for index, p in aliased.items():
        rewriter.aliases[op.results[index]] = rewriter.aliases[operands[p]]
    rewriter.dead.append(op)
