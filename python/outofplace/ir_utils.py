"""Small IR helpers shared by the frontend, the pass, the lowering and the runtime."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo
from torch_mlir.dialects import func as func_d

from . import torch_types


def operations(block: ir.Block) -> list[ir.Operation]:
    """A snapshot of the block's ops as plain `ir.Operation`s (OpViews shadow `.name`)."""
    return [op.operation for op in block.operations]


def all_operations(root: ir.Operation) -> list[ir.Operation]:
    """Every op nested in `root`, `root` included, in pre-order."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        found.append(op.operation)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def erase_unused(ops: list[ir.Operation], removable: Callable[[ir.Operation], bool]
                 ) -> None:
    """Erases the ops of `ops` (in program order) that `removable` allows and whose
    results nothing uses, last first, so that a value's users go before it."""
    for op in reversed(ops):
        if op.results and removable(op) and all(not list(r.uses) for r in op.results):
            op.erase()


def main_function(module: ir.Module) -> func_d.FuncOp:
    """The function `@main` of a module."""
    for op in operations(module.body):
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op.opview
    raise ValueError("module has no function @main")


def terminator(block: ir.Block) -> ir.Operation:
    return block.operations[len(block.operations) - 1].operation


def retype_function(function: func_d.FuncOp) -> None:
    """The function's type made again from its entry block's arguments and the values
    its return returns, after a pass changed their types."""
    block = function.entry_block
    function.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in terminator(block).operands]))


def torch_constant(kind: str, value: Any, loc: ir.Location, ip: ir.InsertionPoint
                   ) -> ir.Value:
    """`torch.constant.<kind>` for kind int, float, bool or none."""
    attrs = {}
    if kind == "int":
        attrs["value"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    elif kind == "float":
        attrs["value"] = ir.FloatAttr.get(ir.F64Type.get(loc.context), value, loc=loc)
    elif kind == "bool":
        attrs["value"] = ir.BoolAttr.get(value)
    return ir.Operation.create(f"torch.constant.{kind}", results=[ir.Type.parse(
        f"!torch.{kind}")], attributes=attrs, loc=loc, ip=ip).result


def constant_int(value: ir.Value) -> int | None:
    """The value of a `torch.constant.int`, or None for anything else."""
    if isinstance(value, ir.OpResult) and value.owner.name == "torch.constant.int":
        return ir.IntegerAttr(value.owner.attributes["value"]).value
    return None


def constant_bool(value: ir.Value) -> bool | None:
    """The value of a `torch.constant.bool`, or None for anything else."""
    if isinstance(value, ir.OpResult) and value.owner.name == "torch.constant.bool":
        return ir.BoolAttr(value.owner.attributes["value"]).value
    return None


def size_int(tensor: ir.Value, dim: ir.Value, loc: ir.Location, ip: ir.InsertionPoint
             ) -> ir.Value:
    """`torch.aten.size.int`: a dimension's size at run time, a `!torch.int`."""
    return ir.Operation.create("torch.aten.size.int", results=[ir.Type.parse("!torch.int")],
                               operands=[tensor, dim], loc=loc, ip=ip).result


def unnamed(loc: ir.Location) -> ir.Location:
    """The location without its NameLoc: helper ops do not take a new version's name."""
    return ir.NameLoc(loc).child_loc if loc.typeid == ir.NameLoc.static_typeid else loc


def builtin_shape(sizes: Iterable[int]) -> list[int]:
    """torch's sizes (-1 for a dynamic dimension) as a builtin tensor type's shape."""
    return [ir.ShapedType.get_dynamic_size() if n == -1 else n for n in sizes]


def to_builtin(value: ir.Value, loc: ir.Location | None = None,
               ip: ir.InsertionPoint | None = None) -> ir.Value:
    """`torch_c.to_builtin_tensor`: a ranked `!torch.vtensor` as a builtin tensor."""
    t = torch_types.TensorType.of(value.type)
    builtin = ir.RankedTensorType.get(
        builtin_shape(t.sizes), torch_types.element_type(t.dtype, signless=True), loc=loc)
    return ir.Operation.create("torch_c.to_builtin_tensor", results=[builtin],
                               operands=[value], loc=loc, ip=ip).result


def from_builtin(value: ir.Value, vtensor: ir.Type, loc: ir.Location | None = None,
                 ip: ir.InsertionPoint | None = None) -> ir.Value:
    """`torch_c.from_builtin_tensor`: a builtin tensor as the `!torch.vtensor` type
    `vtensor`, back in torch IR."""
    return ir.Operation.create("torch_c.from_builtin_tensor", results=[vtensor],
                               operands=[value], loc=loc, ip=ip).result


def int_list(values: list[int], loc: ir.Location, ip: ir.InsertionPoint) -> ir.Value:
    """`torch.prim.ListConstruct` of int constants."""
    items = [torch_constant("int", v, loc, ip) for v in values]
    return ir.Operation.create("torch.prim.ListConstruct",
                               results=[ir.Type.parse("!torch.list<int>")],
                               operands=items, loc=loc, ip=ip).result


def row_major_strides(shape: list[int]) -> list[int]:
    """The strides, in elements, of a dense row-major tensor of `shape`: how the kernel
    handler lays out a buffer (a view of it, `outofplace.view.<position>`, strides in
    these units)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]


def row_major_layout(rank: int) -> ir.Attribute:
    """Minor to major, the dense row-major layout of a rank-`rank` custom call operand or
    result (`operand_layouts`, `result_layouts`): how the kernel handler reads buffers."""
    return ir.Attribute.parse(
        f"dense<{list(range(rank - 1, -1, -1))}> : tensor<{rank}xindex>")


def stablehlo_splat(tensor_type: ir.Type, value: int | float | bool,
                    loc: ir.Location | None = None) -> ir.Value:
    """A `stablehlo.constant` of `tensor_type` (a ranked tensor type) every element of
    which is `value`."""
    element = ir.RankedTensorType(tensor_type).element_type
    attr = ir.FloatAttr.get(element, float(value)) if isinstance(element, ir.FloatType) \
        else ir.IntegerAttr.get(element, int(value))
    return ir.Operation.create("stablehlo.constant", results=[tensor_type], attributes={
        "value": ir.DenseElementsAttr.get_splat(tensor_type, attr)}, loc=loc).result


def stablehlo_compare(direction: str, x: ir.Value, y: ir.Value, kind: str = "FLOAT",
                      loc: ir.Location | None = None) -> ir.Value:
    """`stablehlo.compare` of x and y (`direction` EQ, NE, LT, ...; `kind` FLOAT, SIGNED,
    UNSIGNED, TOTALORDER): flags of x's shape."""
    flags = ir.RankedTensorType.get(ir.RankedTensorType(x.type).shape,
                                    ir.IntegerType.get_signless(1))
    return ir.Operation.create(
        "stablehlo.compare", results=[flags], operands=[x, y], loc=loc, attributes={
            "comparison_direction": _stablehlo.ComparisonDirectionAttr.get(direction),
            "compare_type": _stablehlo.ComparisonTypeAttr.get(kind)}).result


def tensor_literal(tensor: torch.Tensor, loc: ir.Location | None = None,
                   ip: ir.InsertionPoint | None = None) -> ir.Value:
    """`torch.vtensor.literal` holding `tensor` as an inline dense attribute."""
    data = tensor.detach().contiguous().cpu()
    data = data.view(torch_types.BITCAST_DTYPES.get(data.dtype, data.dtype))
    element = torch_types.element_type(tensor.dtype, signless=False)
    value = ir.DenseElementsAttr.get(np.ascontiguousarray(data.numpy()), type=element,
                                     shape=list(data.shape))
    vtensor = torch_types.TensorType(tuple(data.shape), tensor.dtype, True).to_ir()
    return ir.Operation.create("torch.vtensor.literal", results=[vtensor],
                               attributes={"value": value}, loc=loc, ip=ip).result


def plain_dot(op: ir.Operation, element_types: tuple[str, ...]) -> bool:
    """Whether a `stablehlo.dot_general` computes as written, by XLA or by eager's
    kernel alike: static shapes, operands and result of one element type among
    `element_types`, the default precision, no algorithm."""
    values = [*op.operands, op.result]
    if any(not isinstance(v.type, ir.RankedTensorType) or
           not ir.RankedTensorType(v.type).has_static_shape for v in values):
        return False
    element = ir.RankedTensorType(op.result.type).element_type
    if str(element) not in element_types or \
            any(ir.RankedTensorType(v.type).element_type != element for v in values):
        return False
    return "algorithm" not in op.attributes and (
        "precision_config" not in op.attributes or all(
            str(p) == "#stablehlo<precision DEFAULT>"
            for p in ir.ArrayAttr(op.attributes["precision_config"])))


def ranked_shape(value: ir.Value) -> list[int]:
    """The sizes of a ranked tensor value."""
    return list(ir.RankedTensorType(value.type).shape)


def i64_array(op: ir.Operation, name: str, default: list[int]) -> list[int]:
    """An op's `DenseI64ArrayAttr` attribute as ints, `default` when it has none."""
    return list(ir.DenseI64ArrayAttr(op.attributes[name])) if name in op.attributes \
        else default


def create_ranked(name: str, operands: list[ir.Value], shape: list[int], element: ir.Type,
                  **attributes: ir.Attribute) -> ir.Value:
    """The result of a new op `name` of one ranked tensor result, at the insertion point."""
    return ir.Operation.create(name, results=[ir.RankedTensorType.get(shape, element)],
                               operands=operands, attributes=attributes).result


def reshape(value: ir.Value, shape: list[int], ip: ir.InsertionPoint | None = None,
            loc: ir.Location | None = None) -> ir.Value:
    """A new `stablehlo.reshape` of value to shape (value's element type), at ip and loc
    (default: the current insertion point and location)."""
    type_ = ir.RankedTensorType.get(shape, ir.RankedTensorType(value.type).element_type)
    return ir.Operation.create("stablehlo.reshape", results=[type_], operands=[value],
                               ip=ip, loc=loc).result
