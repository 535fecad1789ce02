"""`outofplace-lower-regions`: the regions of `torch.cond` and `while_loop`
(frontend/control_flow.py) as `stablehlo.if` and `stablehlo.while`, and the ops kept
whole (frontend/composites.py) as `stablehlo.composite`.

A region op of main names its functions (mutable torch IR, private):

    %ops = torch.prim.ListConstruct %i, %h, %n, %start, %cache
    %r = torch.operator "torch.outofplace.region"(%id, %ops)
        {outofplace.kind = "while", outofplace.functions = [@region1_cond, @region1_body],
         outofplace.carried = 2, outofplace.written = [4]}
    %i2, %h2, %cache2 = torch.prim.ListUnpack %r

Each function is lowered on its own, as a program of its own (moved into a module of
its own as `main`, with the functions of the regions it holds, through
inplace-to-stablehlo-pipeline): its writes of its arguments become values. Its body is
then moved into the StableHLO region, between `torch_c` casts (torch-mlir's pipelines
leave StableHLO between them alone):

    while: every operand is carried; the body returns the carried values' new values,
        each written operand's new value, and the other operands unchanged; the op's
        results are the carried values and the written operands' last values.
    cond:  stablehlo.if on the predicate, each branch returning its outputs and the new
        value of every operand either branch writes (the other returns it unchanged).

    composite: `stablehlo.composite` named after its op (`outofplace.composite`), with its
        `composite_attributes` (`outofplace.composite_attributes`); the lowered function
        stays in the module, private, as its decomposition.

After the region, main copies each written operand's value into the tensor it came
from (`copy_`, made a value by inplace-to-outofplace before this pass), so a cache
written in a loop body is a carried value of the while and then main's aliased result.
"""

from __future__ import annotations

from torch_mlir import ir

from ..errors import UnsupportedMutationError
from ..ir_utils import all_operations, from_builtin, operations, terminator
from . import registry
from .registry import register_pass

KIND, FUNCTIONS, CARRIED, WRITTEN = ("outofplace.kind", "outofplace.functions",
                                     "outofplace.carried", "outofplace.written")
COMPOSITE, COMPOSITE_ATTRIBUTES = "outofplace.composite", "outofplace.composite_attributes"


def is_region(op: ir.Operation) -> bool:
    return op.name == "torch.operator" and ir.StringAttr(
        op.attributes["name"]).value == "torch.outofplace.region"


def _functions(module: ir.Operation) -> dict[str, ir.Operation]:
    return {ir.StringAttr(op.attributes["sym_name"]).value: op
            for op in operations(module.regions[0].blocks[0]) if op.name == "func.func"}


def _callees(op: ir.Operation) -> list[str]:
    return [ir.FlatSymbolRefAttr(a).value for a in ir.ArrayAttr(op.attributes[FUNCTIONS])]


def _lowered(function: ir.Operation, functions: dict[str, ir.Operation]
             ) -> tuple[ir.Operation, ir.Module]:
    """`function` (with the region functions it reaches) lowered to StableHLO in a
    module of its own, as `main`: (the lowered function, that module, which owns it
    until its body is moved out)."""
    with function.context, function.location:
        module = ir.Module.create()
        reached, pending = [], [function]
        while pending:
            current = pending.pop()
            reached.append(current)
            pending += [functions[name] for op in all_operations(current)
                        if is_region(op) for name in _callees(op)]
        body = module.body
        for op in reached:
            op.move_before(terminator(body)) if _has_terminator(body) else \
                body.append(op)
        function.attributes["sym_name"] = ir.StringAttr.get("main")
        del function.attributes["sym_visibility"]
        registry.run_pipeline(module, "builtin.module(inplace-to-stablehlo-pipeline)")
        return next(op for op in operations(module.body) if op.name == "func.func" and
                    ir.StringAttr(op.attributes["sym_name"]).value == "main"), module


def _has_terminator(block: ir.Block) -> bool:
    ops = list(block.operations)
    return bool(ops) and ops[-1].operation.name == "builtin.module_terminator"


def _inline_into(lowered: ir.Operation, block: ir.Block, arguments: list[ir.Value]
                 ) -> list[ir.Value]:
    """Moves the lowered function's body to the end of `block`, its arguments replaced
    by `arguments`; returns the values it returned."""
    source = lowered.regions[0].blocks[0]
    ret = terminator(source)
    for op in list(operations(source))[:-1]:
        block.append(op)
    for old, new in zip(source.arguments, arguments):
        old.replace_all_uses_with(new)
    return list(ret.operands)


def _create(name: str, results: list[ir.Type], operands: list[ir.Value],
            regions: int = 0, **attributes: ir.Attribute) -> ir.Operation:
    return ir.Operation.create(name, results=results, operands=operands,
                               regions=regions, attributes=attributes)


def _to_builtin(value: ir.Value, builtin: ir.Type) -> ir.Value:
    return _create("torch_c.to_builtin_tensor", [builtin], [value]).result


def _composite(op: ir.Operation, lowered: ir.Operation, values: list[ir.Value],
               module: ir.Operation) -> ir.Operation:
    """The composite region `op` as `stablehlo.composite` of `values`, its decomposition
    the lowered function, moved into `module` as a private function named after it."""
    name = ir.StringAttr(op.attributes[COMPOSITE]).value
    callee = _callees(op)[0]  # (region<id>_body: unique in the module)
    symbol = f"{name}.{callee}"
    lowered.attributes["sym_name"] = ir.StringAttr.get(symbol)
    lowered.attributes["sym_visibility"] = ir.StringAttr.get("private")
    body = module.regions[0].blocks[0]
    lowered.move_before(terminator(body)) if _has_terminator(body) else body.append(lowered)
    types = list(ir.FunctionType(ir.TypeAttr(lowered.attributes["function_type"]).value
                                 ).results)
    return ir.Operation.create("stablehlo.composite", results=types, operands=values,
                               attributes={
                                   "name": ir.StringAttr.get(name),
                                   "composite_attributes": op.attributes[COMPOSITE_ATTRIBUTES],
                                   "decomposition": ir.FlatSymbolRefAttr.get(symbol)})


def _lower_region(op: ir.Operation, functions: dict[str, ir.Operation],
                  module: ir.Operation) -> None:
    """The region op `op` (with its ListConstruct of operands and ListUnpack of
    results) replaced by the `stablehlo.if` / `stablehlo.while` / `stablehlo.composite`
    it is."""
    kind = ir.StringAttr(op.attributes[KIND]).value
    carried = ir.IntegerAttr(op.attributes[CARRIED]).value
    written = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes[WRITTEN])]
    lowered = [_lowered(functions[name], functions) for name in _callees(op)]
    body = module.regions[0].blocks[0]
    for function, own in lowered:  # (the decompositions of composites its regions held)
        for other in list(operations(own.body)):
            if other.name == "func.func" and other != function:
                other.move_before(terminator(body)) if _has_terminator(body) else \
                    body.append(other)
    first = lowered[0][0]
    inputs = list(ir.FunctionType(ir.TypeAttr(first.attributes["function_type"]).value
                                  ).inputs)
    listed = op.operands[1].owner  # (the first is the region's number)
    operands = list(listed.operands)
    unpacked = [user.owner for user in op.result.uses]
    if len(unpacked) != 1 or unpacked[0].name != "torch.prim.ListUnpack":
        raise UnsupportedMutationError.at(op, "its results are not unpacked as the "
                                          "frontend makes them")
    unpacked = unpacked[0]
    with ir.InsertionPoint(op), op.location:
        if kind == "composite":
            values = [_to_builtin(v, t) for v, t in zip(operands, inputs)]
            results = list(_composite(op, first, values, module).results)
        elif kind == "cond":
            pred_type = ir.RankedTensorType.get([], ir.IntegerType.get_signless(1))
            values = [_to_builtin(v, t) for v, t in zip(operands, [pred_type] + inputs)]
            outs = len(unpacked.results) - len(written)
            types = list(ir.FunctionType(ir.TypeAttr(first.attributes[
                "function_type"]).value).results)[:len(unpacked.results)]
            new = _create("stablehlo.if", types, [values[0]], regions=2)
            for region, (function, _) in zip(new.regions, lowered):
                block = region.blocks.append()
                returned = _inline_into(function, block, values[1:])
                with ir.InsertionPoint(block):
                    _create("stablehlo.return", [], returned[:outs + len(written)])
            results = list(new.results)
        else:
            values = [_to_builtin(v, t) for v, t in zip(operands, inputs)]
            new = _create("stablehlo.while", inputs, values, regions=2)
            condition, body = new.regions
            for region, (function, _), role in ((condition, lowered[0], "cond"),
                                                (body, lowered[1], "body")):
                block = region.blocks.append(*inputs)
                args = list(block.arguments)
                returned = _inline_into(function, block, args)
                if role == "body":
                    news = dict(zip(written, returned[carried:]))
                    returned = returned[:carried] + [
                        news.get(i, args[i]) for i in range(carried, len(args))]
                with ir.InsertionPoint(block):
                    _create("stablehlo.return", [], returned[:len(args)] if role == "body"
                            else returned[:1])
            results = list(new.results)[:carried] + [new.results[i] for i in written]
        for old, value in zip(unpacked.results, results):
            old.replace_all_uses_with(from_builtin(value, old.type))
    number = op.operands[0]
    unpacked.erase()
    op.erase()
    for made in (listed, number.owner):
        if not any(list(r.uses) for r in made.results):
            made.erase()


@register_pass(
    "outofplace-lower-regions",
    "Lower the regions of torch.cond and while_loop to stablehlo.if and stablehlo.while, "
    "an op kept whole to stablehlo.composite",
    "each region function (mutable torch IR) lowered as a program of its own, its "
    "body moved into `stablehlo.if` (a written operand returned unchanged by the "
    "branch that does not write it) or `stablehlo.while` (every operand carried, "
    "written ones with their new values), between `torch_c` casts; a composite's "
    "function kept, private, as the decomposition of a `stablehlo.composite` named "
    "after its op")
def lower_regions(module: ir.Operation) -> None:
    """Every region op of the module's public functions, lowered and spliced in."""
    functions = _functions(module)
    public = [f for f in functions.values() if "sym_visibility" not in f.attributes]
    for function in public:  # (the region functions leave the module as they are lowered)
        for op in all_operations(function):
            if is_region(op):
                _lower_region(op, functions, module)
