"""The `outofplace-kernel-calls` pass: custom op calls → `stablehlo.custom_call`.

torch-mlir's lowering has no pattern for a custom op (`torch.operator "torch.demo.write_kv"`,
an illegal op to its conversion). This pass, run before it, makes each call StableHLO
between `torch_c` casts, which torch-mlir leaves alone:

    %0 = torch.operator "torch.demo.write_kv"(%cache, %idx, %k, %float2)
           {outofplace.kernel = "demo::write_kv", outofplace.written = [0], ...}
    =>
    %cache_modified = stablehlo.custom_call @"demo::write_kv"(%cache, %idx, %k)
      {api_version = 4 : i32, has_side_effect = false,
       backend_config = {"outofplace.op" = "demo::write_kv", scale = 2.0 : f64},
       output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [],
                                 operand_index = 0, operand_tuple_indices = []>]}

- the target is the op's schema name; the results are the op's own tensor results, then
  the new value of each written argument, which aliases its operand (XLA writes the
  operand's buffer in place, copying it first only where the old value is read after);
- the non-tensor arguments are typed FFI attributes in `backend_config`, by their schema
  names (int → i64, float → f64, bool → i1, str, int[] / float[] → dense arrays; None
  left out), with the op's name under `outofplace.op` (an XLA FFI handler is not told
  the target it was called for) and the schema positions of the tensor operands under
  `outofplace.tensors`; a value computed at run time is refused;
- `has_side_effect` only where the schema says so (kernel_writes.has_side_effect).

A call of a custom op that writes nothing the pass did not visit (it read no tracked
tensor) takes its attributes from the schema here.

The module holds a second pass, `outofplace-name-kernel-results` (its lit test
test/outofplace-name-kernel-results.mlir), run after torch-mlir's pipelines (whose
canonicalization would fold its identity reshapes): it names each written root's result
of the calls this one makes, from the names inplace-to-outofplace recorded and this one
carries onto them.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from .. import op_registry, torch_types
from ..errors import UnsupportedMutationError
from ..ir_utils import all_operations, from_builtin, row_major_layout, to_builtin, unnamed
from . import kernel_writes
from .registry import register_pass

# backend_config entries for the CPU handler (backends/kernel_call.cpp):
OP_NAME = "outofplace.op"  # the op it calls
TENSORS = "outofplace.tensors"  # the schema positions of the tensor arguments
OPERANDS = "outofplace.operands"  # for each of those, the custom_call operand it is
RESULTS = "outofplace.results"  # for each operand, the result aliasing it, or -1
VIEW = "outofplace.view."  # + position: [offset, sizes, strides] of the argument in it


def _attribute(value: ir.Value, op: ir.Operation, name: str) -> ir.Attribute | None:
    """A constant non-tensor argument as a typed FFI attribute; None for `None`."""
    owner = value.owner if isinstance(value, ir.OpResult) else None
    kind = owner.name if owner is not None else ""
    i64, f64 = ir.IntegerType.get_signless(64), ir.F64Type.get()
    if kind == "torch.constant.none":
        return None
    if kind == "torch.constant.int":
        return ir.IntegerAttr.get(i64, ir.IntegerAttr(owner.attributes["value"]).value)
    if kind == "torch.constant.float":
        return ir.FloatAttr.get(f64, ir.FloatAttr(owner.attributes["value"]).value)
    if kind == "torch.constant.bool":
        return ir.BoolAttr.get(ir.BoolAttr(owner.attributes["value"]).value)
    if kind == "torch.constant.str":
        return ir.StringAttr.get(ir.StringAttr(owner.attributes["value"]).value)
    if kind == "torch.prim.ListConstruct":
        items = [_attribute(v, op, name) for v in owner.operands]
        if all(isinstance(a, ir.IntegerAttr) and not isinstance(a, ir.BoolAttr)
               for a in items):
            return ir.DenseI64ArrayAttr.get([ir.IntegerAttr(a).value for a in items])
        if all(isinstance(a, ir.FloatAttr) for a in items):
            return ir.DenseF64ArrayAttr.get([ir.FloatAttr(a).value for a in items])
    raise UnsupportedMutationError.at(
        op, f"custom op: its argument '{name}' ({value.type}) is not a constant int, "
        "float, bool, str or list of ints or floats; a kernel's non-tensor arguments are "
        "its custom_call's backend_config, fixed when compiling")


def operand_alias(output: int | None, operand: int) -> ir.Attribute:
    """`output_operand_aliases`' entry: result `output` (None: the only one) is operand
    `operand`'s buffer."""
    return _stablehlo.OutputOperandAlias.get([] if output is None else [output], operand, [])


def eager_call(target: str, operands: list[ir.Value], result_types: list[ir.Type],
               config: dict[str, ir.Attribute] | ir.DictAttr,
               aliases: list[ir.Attribute] = ()) -> ir.Operation:
    """A `stablehlo.custom_call` of `target` that the kernel handler runs
    (backends/kernel_call.cpp: an eager kernel the `config` names), operands and results
    dense row-major, `aliases` its `output_operand_aliases` (`operand_alias`); at the
    insertion point and location in effect."""
    attributes = {
        "call_target_name": ir.StringAttr.get(target),
        "api_version": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4),
        "backend_config": config if isinstance(config, ir.DictAttr) else
        ir.DictAttr.get(config),
        "has_side_effect": ir.BoolAttr.get(False),
        "operand_layouts": ir.ArrayAttr.get(
            [row_major_layout(len(ir.RankedTensorType(v.type).shape)) for v in operands]),
        "result_layouts": ir.ArrayAttr.get(
            [row_major_layout(len(ir.RankedTensorType(t).shape)) for t in result_types]),
    }
    if aliases:
        attributes["output_operand_aliases"] = ir.ArrayAttr.get(list(aliases))
    return ir.Operation.create("stablehlo.custom_call", results=list(result_types),
                               operands=list(operands), attributes=attributes)


def _ensure_attributes(op: ir.Operation) -> bool:
    """Whether op is a custom op call; records the schema's attributes when the
    inplace-to-outofplace pass did not (a call that writes nothing and read no tracked
    tensor)."""
    if op.name != "torch.operator":
        return False
    if kernel_writes.KERNEL in op.attributes:
        return True
    effects = op_registry.kernel_effects(op_registry.aten_name(op))
    if effects is None:
        return False
    if effects.written:
        raise UnsupportedMutationError.at(
            op, "custom op: a call that writes was not rewritten by inplace-to-outofplace")
    with op.context:
        for key, value in kernel_writes.kernel_attributes(effects, ()).items():
            op.attributes[key] = value
    return True


def lower_call(op: ir.Operation) -> None:
    """One custom op call → torch_c casts around a stablehlo.custom_call."""
    names = [ir.StringAttr(a).value for a in ir.ArrayAttr(op.attributes[kernel_writes.ARGUMENTS])]
    written = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes[kernel_writes.WRITTEN])]
    target = ir.StringAttr(op.attributes[kernel_writes.KERNEL]).value
    ip, loc = ir.InsertionPoint(op), op.location
    views = [list(ir.DenseI64ArrayAttr(a)) for a in
             ir.ArrayAttr(op.attributes[kernel_writes.VIEWS])] \
        if kernel_writes.VIEWS in op.attributes else [[] for _ in names]
    operands, values, config, position_of = [], [], {OP_NAME: ir.StringAttr.get(target)}, {}
    for position, (name, value) in enumerate(zip(names, op.operands)):
        if torch_types.is_tensor(value.type):
            t = torch_types.TensorType.of(value.type)
            if t.sizes is None or t.dtype is None:
                raise UnsupportedMutationError.at(
                    op, f"custom op: its argument '{name}' has no known shape or dtype")
            if value not in values:  # a root two arguments view is one operand
                values.append(value)
                operands.append(to_builtin(value, unnamed(loc), ip))
            position_of[position] = values.index(value)
            if views[position]:
                config[f"{VIEW}{position}"] = ir.DenseI64ArrayAttr.get(views[position])
        elif str(value.type).startswith("!torch.list<") and \
                str(value.type) not in ("!torch.list<int>", "!torch.list<float>"):
            raise UnsupportedMutationError.at(
                op, f"custom op: its argument '{name}' ({value.type}) is a list outofplace "
                "cannot pass to a kernel")
        else:
            attribute = _attribute(value, op, name)
            if attribute is not None:
                config[name] = attribute
    config[TENSORS] = ir.DenseI64ArrayAttr.get(list(position_of))
    config[OPERANDS] = ir.DenseI64ArrayAttr.get(list(position_of.values()))
    first_written = len(op.results) - len(written)
    result_of = [-1] * len(operands)
    for j, p in enumerate(written):
        result_of[position_of[p]] = first_written + j
    config[RESULTS] = ir.DenseI64ArrayAttr.get(result_of)
    results = []
    for result in op.results:
        t = torch_types.TensorType.of(result.type)
        if t.sizes is None or t.dtype is None or any(d < 0 for d in t.sizes):
            raise UnsupportedMutationError.at(
                op, "custom op: a kernel's results need static shapes")
        results.append(ir.RankedTensorType.get(
            list(t.sizes), torch_types.element_type(t.dtype, signless=True)))
    first_written = len(results) - len(written)
    single = len(results) == 1
    aliases = [operand_alias(None if single else first_written + j, position_of[p])
               for j, p in enumerate(written)]
    i32 = ir.IntegerType.get_signless(32)
    call = ir.Operation.create(
        "stablehlo.custom_call", results=results, operands=operands, loc=loc, ip=ip,
        attributes={
            "call_target_name": ir.StringAttr.get(target),
            "api_version": ir.IntegerAttr.get(i32, 4),
            "backend_config": ir.DictAttr.get(config),
            "has_side_effect": op.attributes[kernel_writes.SIDE_EFFECT],
            "output_operand_aliases": ir.ArrayAttr.get(aliases),
        })
    if kernel_writes.RESULT_NAMES in op.attributes:  # for outofplace-name-kernel-results
        call.attributes[kernel_writes.RESULT_NAMES] = op.attributes[kernel_writes.RESULT_NAMES]
    for old, new in zip(op.results, call.results):
        old.replace_all_uses_with(from_builtin(new, old.type, unnamed(loc), ip))
    op.erase()


@register_pass(
    "outofplace-kernel-calls",
    "Lower custom op calls (torch.operator kernels) to stablehlo.custom_call",
    "a custom op call (`torch.library`, C++ `Tensor(a!)` ops) → `stablehlo.custom_call` "
    "with the op's name as target, `output_operand_aliases` from each written operand to "
    "its result, non-tensor arguments in `backend_config`")
def kernel_calls(module: ir.Operation) -> None:
    """Lowers every custom op call of `module`."""
    with module.context, ir.Location.unknown():
        for op in all_operations(module):
            if _ensure_attributes(op):
                lower_call(op)


@register_pass(
    "outofplace-name-kernel-results",
    "Name each root a kernel call writes on a result of its own",
    "a custom_call with several results (`%write_kv:3`: MLIR names an op's results "
    "together): each written root's new version becomes a `stablehlo.reshape` to its own "
    "type named `<root>_modified` (XLA removes it); after torch-mlir's pipelines, whose "
    "canonicalization would fold it")
def name_kernel_results(module: ir.Operation) -> None:
    """Each named result of a kernel call (`outofplace.result_names`, set by
    inplace-to-outofplace) read through an identity reshape carrying the name."""
    with module.context:
        for op in all_operations(module):
            if op.name != "stablehlo.custom_call" or \
                    kernel_writes.RESULT_NAMES not in op.attributes:
                continue
            names = [ir.StringAttr(a).value
                     for a in ir.ArrayAttr(op.attributes[kernel_writes.RESULT_NAMES])]
            del op.attributes[kernel_writes.RESULT_NAMES]
            # (each inserted right after the call: in reverse, to read in result order)
            for result, name in reversed(list(zip(op.results, names))):
                if not name:
                    continue
                uses = [(u.owner, u.operand_number) for u in result.uses]
                named = ir.Operation.create(
                    "stablehlo.reshape", results=[result.type], operands=[result],
                    loc=ir.Location.name(name, childLoc=unnamed(op.location)),
                    ip=ir.InsertionPoint.after(op))
                for owner, number in uses:
                    owner.operands[number] = named.result
