"""What an ATen op does to its operands, read from PyTorch's own op registry.

torch-mlir names an ATen op `torch.<ns>.<name>[.<overload>]` and lists its operands in
schema order. Looking the op up in `torch.ops` gives the schema, whose alias annotations
say which operands an op writes (`Tensor(a!)`) and which operand its result views
(`Tensor(a)`). The out-of-place twin of an in-place op is derived from the same registry,
never from a hand-written list.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch_mlir import ir

from . import torch_types


@dataclass(frozen=True)
class OpEffects:
    """The aliasing behaviour of one ATen overload."""

    overload: torch._ops.OpOverload  # the PyTorch overload behind the MLIR op
    written: tuple[int, ...]  # operand positions the op writes in place
    result_views: int | None  # operand position the first result aliases (views or is)
    twin: torch._ops.OpOverload | None  # functional twin of an in-place op, if one exists
    rebinds_view: bool  # an in-place op on metadata (t_, resize_, ...), not on data
    kernel: bool = False  # a custom op (torch.library, C++ TORCH_LIBRARY): an opaque call

    @property
    def is_inplace(self) -> bool:
        return bool(self.written)

    @property
    def is_view(self) -> bool:
        return not self.written and self.result_views is not None

    @property
    def is_autograd_only(self) -> bool:
        """`detach_`: tagged as a metadata mutation, but leaves data and metadata alone."""
        return self.rebinds_view and self.twin is not None and \
            self.twin._schema.name == "aten::detach"


def _split_name(mlir_name: str) -> tuple[str, str, str] | None:
    parts = mlir_name.split(".")
    if len(parts) not in (3, 4) or parts[0] != "torch" or parts[1] not in ("aten", "prims"):
        return None
    return parts[1], parts[2], parts[3] if len(parts) == 4 else "default"


def _overload(namespace: str, name: str, overload: str) -> torch._ops.OpOverload | None:
    packet = getattr(getattr(torch.ops, namespace), name, None)
    if packet is None:
        return None
    return getattr(packet, overload, None)


def mlir_name(overload: torch._ops.OpOverload) -> str:
    """The torch-mlir op name of a PyTorch overload (`aten::add.Tensor` -> torch.aten.add.Tensor)."""
    namespace, name = overload._schema.name.split("::")
    suffix = "" if overload._overloadname == "default" else f".{overload._overloadname}"
    return f"torch.{namespace}.{name}{suffix}"


def _same_signature(inplace: torch._C.FunctionSchema, twin: torch._C.FunctionSchema) -> bool:
    if len(inplace.arguments) != len(twin.arguments):
        return False
    return all(a.name == b.name and str(a.type) == str(b.type)
               for a, b in zip(inplace.arguments, twin.arguments))


def _functional_name(name: str) -> str | None:
    if name.startswith("__i") and name.endswith("__"):  # __iand__ -> __and__
        return "__" + name[3:]
    if name.endswith("_") and not name.endswith("__"):
        return name[:-1]
    return None


def _find_twin(namespace: str, name: str, overload: str,
               schema: torch._C.FunctionSchema) -> torch._ops.OpOverload | None:
    functional = _functional_name(name)
    if functional is None:
        return None
    packet = getattr(getattr(torch.ops, namespace), functional, None)
    if packet is None:
        return None
    # The same overload name first (add_.Tensor -> add.Tensor), then any overload with
    # the same signature (pow_.Scalar -> pow.Tensor_Scalar).
    names = [overload] + [o for o in packet.overloads() if o != overload]
    for candidate in names:
        twin = getattr(packet, candidate, None)
        if twin is None or not _same_signature(schema, twin._schema):
            continue
        if not any(a.alias_info is not None and a.alias_info.is_write
                   for a in twin._schema.arguments):
            return twin
    return None


def aten_name(op: ir.Operation) -> str:
    """The ATen name of an op; torch-mlir wraps ops it has no definition for in
    `torch.operator` with the name as an attribute."""
    op = op.operation  # an OpView of torch.operator has a `name` of its own: the attribute
    if op.name == "torch.operator":
        return ir.StringAttr(op.attributes["name"]).value
    return op.name


@functools.cache
def effects(mlir_op_name: str) -> OpEffects | None:
    """The aliasing behaviour of a torch-mlir op, or None when it is not an ATen/prims op."""
    split = _split_name(mlir_op_name)
    if split is None:
        return None
    overload = _overload(*split)
    if overload is None:
        return None
    return _effects_of_schema(overload, split)


def _effects_of_schema(overload: torch._ops.OpOverload, split: tuple[str, str, str],
                       kernel: bool = False) -> OpEffects:
    schema = overload._schema
    written = tuple(i for i, a in enumerate(schema.arguments)
                    if a.alias_info is not None and a.alias_info.is_write)
    result_views = None
    if schema.returns and schema.returns[0].alias_info is not None:
        result_sets = schema.returns[0].alias_info.before_set
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.before_set & result_sets:
                result_views = i
                break
    twin = _find_twin(*split, schema) if written and not kernel else None
    return OpEffects(overload, written, result_views, twin,
                     torch.Tag.inplace_view in overload.tags, kernel)


@functools.cache
def kernel_effects(mlir_op_name: str) -> OpEffects | None:
    """The effects of a custom op torch-mlir imports as `torch.operator "<name>"`: an op
    of a namespace other than aten/prims that `torch.ops` knows (`torch.library.custom_op`,
    `torch.library.define`, a C++ `TORCH_LIBRARY`). Its schema's `Tensor(a!)` arguments
    are what it writes; it is called as it is (a custom_call), never rewritten."""
    parts = mlir_op_name.split(".")
    if len(parts) not in (3, 4) or parts[0] != "torch" or parts[1] in ("aten", "prims"):
        return None
    split = (parts[1], parts[2], parts[3] if len(parts) == 4 else "default")
    try:
        overload = _overload(*split)
    except (AttributeError, RuntimeError):
        return None
    if not isinstance(overload, torch._ops.OpOverload):
        return None
    return _effects_of_schema(overload, split, kernel=True)


def effects_of(op: ir.Operation) -> OpEffects | None:
    """`effects` of an op of the IR: an ATen/prims op, or a custom op (`kernel_effects`)
    that torch-mlir wrote as `torch.operator`."""
    name = aten_name(op)
    found = effects(name)
    if found is None and op.operation.name == "torch.operator":
        found = kernel_effects(name)
    return found


def kernel_target(overload: torch._ops.OpOverload) -> str:
    """The custom_call target of a custom op: its schema name, with the overload unless
    it is the default one (`demo::write_kv`, `demo::write_kv.rows`)."""
    suffix = "" if overload._overloadname == "default" else f".{overload._overloadname}"
    return overload._schema.name + suffix


@functools.cache
def changes_shape_in_place(name: str) -> bool:
    """Whether `aten::<name>` (a Python method's name: `t_`) changes shape or strides in
    place (`inplace_view`)."""
    if not name.endswith("_") or name.startswith("_") or name == "detach_":
        return False
    packet = getattr(torch.ops.aten, name, None)
    return isinstance(packet, torch._ops.OpOverloadPacket) and any(
        torch.Tag.inplace_view in getattr(packet, o).tags for o in packet.overloads())


# Functional twins torch-mlir has no op for, written as `torch.operator "<name>"`, that
# outofplace-lower-updates lowers (to one scatter; test/outofplace-lower-updates.mlir).
OPERATOR_TWINS = frozenset({"torch.aten.index_copy", "torch.aten.index_fill.int_Scalar",
                            "torch.aten.index_fill.int_Tensor", "torch.aten.index_add"})


def twin_is_available(twin: torch._ops.OpOverload, context: ir.Context) -> bool:
    """True when torch-mlir can express (and so lower) the functional twin, or
    outofplace lowers it (OPERATOR_TWINS)."""
    name = mlir_name(twin)
    return context.is_registered_operation(name) or name in OPERATOR_TWINS


# 0-d index dtypes eager applies as an int (`x[pos]` is then a select, a view); a 0-d
# bool or uint8 index is a mask (a copy).
POSITION_DTYPES = frozenset({torch.int64, torch.int32, torch.int16, torch.int8})


def is_position_view(op: ir.Operation) -> bool:
    """`x[pos]`, `x[1:, pos, 2]` as frontend/runtime_positions.py traces them: `index.Tensor`
    whose indices are only `None` and 0-d integer tensors. Eager's result is a view of x
    (a select at a runtime index), so the pass treats it as a view op whose write-back is
    `index_put` at the same positions. The types alone decide: no other `index` at only
    0-d positions reaches the pass (torch.export traces `x[pos]` through runtime_positions;
    dynamo specializes `x[pos]` on pos's value), but strided_views' gather of a 0-d
    `as_strided` view, written and stored back at once, where view and copy agree."""
    op = op.operation
    if op.name != "torch.aten.index.Tensor" or not isinstance(op.operands[1], ir.OpResult):
        return False
    items = op.operands[1].owner
    if items.name != "torch.prim.ListConstruct":
        return False
    # The list holds tensors and `none`s (the dimensions not indexed).
    positions = [torch_types.TensorType.of(v.type) for v in items.operands
                 if torch_types.is_tensor(v.type)]
    return bool(positions) and all(
        t.sizes == () and t.dtype in POSITION_DTYPES for t in positions)


def viewed_operand(op: ir.Operation) -> int | None:
    """The operand position the op's (only) result is a view of: from the schema, or 0
    for a runtime-position read (`is_position_view`)."""
    found = effects(aten_name(op))
    if found is not None and found.is_view:
        return found.result_views
    return 0 if is_position_view(op) else None
