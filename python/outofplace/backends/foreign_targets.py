"""Exports calling a backend's own kernel (outofplace.kernels' foreign targets).

`Compiled.portable_artifact()`, `.hlo_module_proto()` and `.save()` export the program
with each custom op call that `kernels.register_foreign_target` maps rewritten to call
the foreign target: its name, the backend config the mapping makes of the op's
non-tensor arguments, its api_version, the same operand-to-result aliases. The CPU call
(transforms/kernel_calls.py) gives the kernel the root a view argument lies in, with the
view's place in `backend_config`, which a foreign kernel does not read: a view that is
the whole root reshaped (`pool.view(-1, d)`) is passed as that reshape (a bitcast, the
alias kept), and its result reshaped back; any other view (a slice, two views of one
root) is refused naming the op, as the kernel would get the wrong tensor.
"""

from __future__ import annotations

import math

from torch_mlir import ir

from .. import kernels
from ..context import make_context
from ..errors import UnsupportedMutationError
from .custom_calls import kernel_calls, target

_VIEW = "outofplace.view."


def with_foreign_targets(module: ir.Module, stablehlo: str) -> str:
    """`stablehlo` (the text of `module`) with each mapped kernel calling its foreign
    target; `stablehlo` itself when none is mapped. Rewritten with the MLIR bindings on
    a copy of `module` (its locations kept: names and refusals' lines)."""
    if not kernels.FOREIGN or not any(target(op) in kernels.FOREIGN
                                      for op in kernel_calls(module)):
        return stablehlo
    with make_context() as context, ir.Location.unknown(context):
        copy = ir.Module.parse(module.operation.get_asm(enable_debug_info=True))
        for op in kernel_calls(copy):
            foreign = kernels.FOREIGN.get(target(op))
            if foreign is not None:
                _call_foreign(op, foreign)
        return copy.operation.get_asm(use_name_loc_as_prefix=True)


def _entries(config: ir.DictAttr) -> dict[str, object]:
    return {n.name: _python_value(n.attr) for n in config}


def _call_foreign(op: ir.Operation, foreign: kernels.ForeignTarget) -> None:
    entries = _entries(ir.DictAttr(op.attributes["backend_config"]))
    operands_of = list(entries["outofplace.operands"])
    positions = list(entries["outofplace.tensors"])
    if len(set(operands_of)) != len(operands_of):
        raise UnsupportedMutationError.at(
            op, f"custom op {target(op)}: two of its arguments are views of one tensor; "
            f"its foreign target {foreign.target} would get that tensor once, not the views")
    operands, reshaped = list(op.operands), {}
    for position, k in zip(positions, operands_of):
        view = entries.get(f"{_VIEW}{position}")
        if view is None:
            continue
        rank = (len(view) - 1) // 2
        sizes, strides = list(view[1:1 + rank]), list(view[1 + rank:])
        root = ir.RankedTensorType(operands[k].type)
        contiguous = [math.prod(sizes[i + 1:]) for i in range(rank)]
        if view[0] != 0 or math.prod(sizes) != math.prod(root.shape) or \
                any(s != c for s, c, n in zip(strides, contiguous, sizes) if n != 1):
            raise UnsupportedMutationError.at(
                op, f"custom op {target(op)}: its argument at position {position} is a "
                f"view of part of a tensor (offset {view[0]}, sizes {sizes}, strides "
                f"{strides}); its foreign target {foreign.target} would get the whole "
                "tensor: pass the part as a tensor of its own")
        shaped = ir.RankedTensorType.get(sizes, root.element_type)
        operands[k] = ir.Operation.create("stablehlo.reshape", results=[shaped],
                                          operands=[operands[k]],
                                          ip=ir.InsertionPoint(op)).result
        reshaped[k] = shaped
    result_of = list(entries["outofplace.results"])
    types = [r.type for r in op.results]
    for k, r in enumerate(result_of):
        if r >= 0 and k in reshaped:
            types[r] = reshaped[k]
    attributes = {name: op.attributes[name] for name in op.attributes}
    attributes["call_target_name"] = ir.StringAttr.get(foreign.target)
    attributes["backend_config"] = ir.StringAttr.get(foreign.backend_config(
        {k: v for k, v in entries.items() if not k.startswith("outofplace.")}))
    attributes["api_version"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32),
                                                   foreign.api_version)
    call = ir.Operation.create("stablehlo.custom_call", results=types, operands=operands,
                               attributes=attributes, loc=op.location,
                               ip=ir.InsertionPoint(op))
    for old, new in zip(op.results, call.results):
        value = new
        if new.type != old.type:  # the view's new value, reshaped back into its root
            value = ir.Operation.create("stablehlo.reshape", results=[old.type],
                                        operands=[new], ip=ir.InsertionPoint(op)).result
        old.replace_all_uses_with(value)
    op.erase()


def _python_value(attribute: ir.Attribute) -> object:
    for kind in (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr, ir.StringAttr):
        if isinstance(attribute, kind):
            return kind(attribute).value
    for kind in (ir.DenseI64ArrayAttr, ir.DenseF64ArrayAttr):
        if isinstance(attribute, kind):
            return list(kind(attribute))
    return str(attribute)
