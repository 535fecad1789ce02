"""`outofplace-iree-strip-returned-arguments`: results of `main` that are an argument as
it came (or a reshape of it) are removed; the engine returns them itself.

`old = x.clone(); ...; return old`, `return x.flatten().clone()`: IREE 3.13 returns the
argument's own buffer for such a result and may write into it, even when the argument
is not consumed (its buffer is then the caller's tensor, which the call changes):
iree-org/iree#16168 (exported I/O buffer views alias with tied ops; closed, but a
2026-09 comment there shows the same symptom, an input returned unchanged coming back
written, and IREE 3.13 still has it: the canary). The removed results are recorded on
`main` (`RETURNED`: `[result, argument, *shape]` each); the engine returns a copy of the
argument taken before the call for each, and `tf.aliasing_output` is renumbered (an
argument aliased with a removed result loses its alias). Canary:
test_iree_canaries.test_an_argument_returned_as_it_came_is_written_by_its_update.
"""

from __future__ import annotations

from typing import Any

from torch_mlir import ir

from ...registry import register_pass
from .common import RETURNED, _main, _through_reshapes


@register_pass(
    "outofplace-iree-strip-returned-arguments",
    "Remove the results of main that are an argument as it came (IREE returns its buffer "
    "and may write it)",
    "each result of `main` that is an argument or a reshape of one → removed, recorded in "
    f"`{RETURNED}` on `main` for the engine to return the argument's value itself, "
    "`tf.aliasing_output` renumbered: IREE 3.13 returns the argument's buffer for it and "
    "may write into it (a workaround, transforms/upstream/iree/)")
def strip_returned_arguments(module: ir.Operation) -> None:
    passthrough, _ = _strip_returned_arguments(module)
    if passthrough:
        _main(module).attributes[RETURNED] = ir.ArrayAttr.get([
            ir.DenseI64ArrayAttr.get([result, argument, *shape])
            for result, (argument, shape) in sorted(passthrough.items())])


def _strip_returned_arguments(module: Any
                              ) -> tuple[dict[int, tuple[int, list[int]]], list[int]]:
    """Removes the results of `main` that are one of its arguments as it came, or a
    reshape of it (`old = x.clone(); ...; return old`, `return x.flatten().clone()`):
    IREE 3.13 returns the argument's own buffer for them and may write into it, even
    when it is not consumed. Returns ({result: (argument, shape)} removed, the results
    kept in order); `tf.aliasing_output` is renumbered."""
    main = _main(module)
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    arguments = list(block.arguments)
    passthrough, kept = {}, []
    for index, value in enumerate(ret.operands):
        source = _through_reshapes(value)
        match = [a for a, argument in enumerate(arguments) if argument == source]
        if match:
            passthrough[index] = (match[0], list(ir.RankedTensorType(value.type).shape))
        else:
            kept.append(index)
    if not passthrough:
        return passthrough, kept
    with module.context:
        ir.Operation.create("func.return", operands=[ret.operands[i] for i in kept],
                            loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.erase()
        function_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            function_type.inputs, [function_type.results[i] for i in kept]))
        if "res_attrs" in main.attributes:
            attrs = list(ir.ArrayAttr(main.attributes["res_attrs"]))
            main.attributes["res_attrs"] = ir.ArrayAttr.get([attrs[i] for i in kept])
        if "arg_attrs" in main.attributes:
            renumbered = []
            for attrs in ir.ArrayAttr(main.attributes["arg_attrs"]):
                entries = {named.name: named.attr for named in ir.DictAttr(attrs)}
                if "tf.aliasing_output" in entries:
                    result = ir.IntegerAttr(entries.pop("tf.aliasing_output")).value
                    if result in kept:
                        entries["tf.aliasing_output"] = ir.IntegerAttr.get(
                            ir.IntegerType.get_signless(32), kept.index(result))
                renumbered.append(ir.DictAttr.get(entries))
            main.attributes["arg_attrs"] = ir.ArrayAttr.get(renumbered)
    return passthrough, kept

