"""`outofplace-split-bounds-check`: the checked mode's flags taken off `main` into a
function of their own, `@bounds_check`, in the same module.

    module attributes {outofplace.bounds_flags = 1 : i64} {
      func.func @main(%cache {tf.aliasing_output = 2 : i32}, %pos) -> (t, flags, cache')
    }
  becomes
    module {
      func.func @main(%cache {tf.aliasing_output = 1 : i32}, %pos) -> (t, cache')
      func.func @bounds_check(%pos) -> flags attributes {outofplace.arguments = array<i64: 1>}
    }

With `check_bounds=True` the frontend (frontend/bounds_checks.py) computes the flags as
one more result of main and names that result on the module (`outofplace.bounds_flags`),
an attribute rather than a pass option: it is a fact of this program's IR, known when it
is imported, and an attribute travels with the module through the pipeline, its dumps and
`outofplace-opt` reproducers, where an option would have to be spelled out again. Without
the attribute the pass does nothing.

main keeps every other result, its aliases renumbered; its flag computation is then dead
and removed, so the main program is the unchecked one. `@bounds_check` is main with the
flags as its only result, nothing aliased, the arguments it does not read dropped
(`outofplace.arguments`: the positions in main's of those it takes). bounds.py runs it
before main, on the same engine and inputs.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from ..ir_utils import erase_unused, operations, terminator
from ..signature import (ALIASING_OUTPUT, BOUNDS_CHECK_ARGUMENTS, BOUNDS_CHECK_FUNCTION,
                         FLAGS_RESULT)
from .registry import register_pass

# StableHLO ops with effects beyond their results: never removed as dead.
_EFFECTS = frozenset({"stablehlo.custom_call", "stablehlo.send", "stablehlo.recv",
                      "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.rng",
                      "stablehlo.rng_bit_generator"})


def _keep_results(function: func_d.FuncOp, kept: list[int], aliases: bool) -> None:
    """Makes `function` return only the results `kept` (in that order), renumbering the
    `tf.aliasing_output` of its arguments, or dropping them all when `aliases` is False,
    then removes what became dead."""
    block = function.regions[0].blocks[0]
    ret = terminator(block)
    values = [ret.operands[i] for i in kept]
    ir.Operation.create("func.return", operands=values, loc=ret.location,
                        ip=ir.InsertionPoint(ret))
    ret.erase()
    new_index = {old: new for new, old in enumerate(kept)}
    context = function.context
    if "arg_attrs" in function.attributes:
        i32 = ir.IntegerType.get_signless(32, context)
        arg_attrs = []
        for attrs in function.arg_attrs:
            entries = {n.name: n.attr for n in ir.DictAttr(attrs)}
            if ALIASING_OUTPUT in entries:
                old = ir.IntegerAttr(entries.pop(ALIASING_OUTPUT)).value
                if aliases:
                    entries[ALIASING_OUTPUT] = ir.IntegerAttr.get(i32, new_index[old])
            arg_attrs.append(ir.DictAttr.get(entries, context=context))
        function.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs, context=context)
    if "res_attrs" in function.attributes:
        res_attrs = list(ir.ArrayAttr(function.attributes["res_attrs"]))
        function.attributes["res_attrs"] = ir.ArrayAttr.get([res_attrs[i] for i in kept],
                                                            context=context)
    function.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in values], context=context))
    erase_unused(operations(block), lambda op: op.name not in _EFFECTS)


def _drop_unused_arguments(function: func_d.FuncOp) -> list[int]:
    """Erases the arguments of `function` nothing reads; returns the positions of the
    rest."""
    block = function.regions[0].blocks[0]
    used = [i for i, a in enumerate(block.arguments) if list(a.uses)]
    attrs = list(function.arg_attrs) if "arg_attrs" in function.attributes else None
    for i in reversed(range(len(block.arguments))):
        if i not in used:
            block.erase_argument(i)
    if attrs is not None:
        function.attributes["arg_attrs"] = ir.ArrayAttr.get([attrs[i] for i in used])
    results = ir.FunctionType(ir.TypeAttr(function.attributes["function_type"]).value
                              ).results
    function.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], results))
    return used


@register_pass(
    "outofplace-split-bounds-check",
    "Split the checked mode's flags off main into @bounds_check",
    "with `check_bounds=True`, main's result that the module's `outofplace.bounds_flags` "
    "names (the flags, frontend/bounds_checks.py) leaves main, whose aliases are "
    "renumbered and whose flag computation is removed as dead, for `@bounds_check`, main "
    "with the flags as its only result, nothing aliased, the arguments it does not read "
    "dropped (`outofplace.arguments`): bounds.py runs it before main; nothing without the "
    "attribute")
def split_bounds_check(module: ir.Operation) -> None:
    if FLAGS_RESULT not in module.attributes:
        return
    flags = ir.IntegerAttr(module.attributes[FLAGS_RESULT]).value
    del module.attributes[FLAGS_RESULT]
    main = next(op for op in operations(module.regions[0].blocks[0])
                if op.name == "func.func" and
                ir.StringAttr(op.attributes["sym_name"]).value == "main").opview
    count = len(terminator(main.regions[0].blocks[0]).operands)
    check = main.operation.clone(ip=ir.InsertionPoint(module.regions[0].blocks[0])).opview
    check.attributes["sym_name"] = ir.StringAttr.get(BOUNDS_CHECK_FUNCTION)
    _keep_results(main, [i for i in range(count) if i != flags], aliases=True)
    _keep_results(check, [flags], aliases=False)
    check.attributes[BOUNDS_CHECK_ARGUMENTS] = ir.DenseI64ArrayAttr.get(
        _drop_unused_arguments(check))
