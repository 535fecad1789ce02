"""What the update patterns of `outofplace-lower-updates` share: StableHLO builders
(`dynamic_update_slice`, `pad`, `scatter` and its dimension numbers, iota index
columns), typed constants, and reading torch values' static types."""

from __future__ import annotations

from torch_mlir import ir

from ... import torch_types
from ...ir_utils import stablehlo_splat, torch_constant, unnamed


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _scalar_constant(element: ir.Type, value: int | float | bool,
                     loc: ir.Location | None) -> ir.Value:
    return stablehlo_splat(ir.RankedTensorType.get([], element, loc=loc), value, loc)


def _static(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _dynamic_update_slice(dest: ir.Value, source: ir.Value, offsets: list[int],
                          loc: ir.Location) -> ir.Operation:
    starts = [_scalar_constant(_i64(), o, unnamed(loc)) for o in offsets]
    return ir.Operation.create("stablehlo.dynamic_update_slice", results=[dest.type],
                               operands=[dest, source, *starts], loc=loc)


def _pad(value: ir.Value, padding: ir.Value, low: list[int], high: list[int],
         interior: list[int], result: ir.Type, loc: ir.Location) -> ir.Value:
    return ir.Operation.create("stablehlo.pad", results=[result], operands=[value, padding],
                               attributes={
                                   "edge_padding_low": ir.DenseI64ArrayAttr.get(low),
                                   "edge_padding_high": ir.DenseI64ArrayAttr.get(high),
                                   "interior_padding": ir.DenseI64ArrayAttr.get(interior)},
                               loc=loc).result


def _indexed_windows(indexed: list[int], rank: int) -> bool:
    """Whether a scatter may index `indexed` alone, the other dimensions being whole
    windows: one dimension, or the leading ones. IREE 3.13 rejects other sets ("expected
    indices to be equal to batch rank or batch rank + 1"); there every element of the
    update gets its own index, a form XLA, IREE and the interpreter all take."""
    return len(indexed) == 1 or indexed == list(range(len(indexed)))


def _scatter_numbers(windows: list[int], indexed: list[int], index_vector_dim: int
                     ) -> ir.Attribute:
    return ir.Attribute.parse(
        f"#stablehlo.scatter<update_window_dims = {windows}, inserted_window_dims = "
        f"{indexed}, scatter_dims_to_operand_dims = {indexed}, "
        f"index_vector_dim = {index_vector_dim}>")


def _iota_column(batch: list[int], dimension: int, offset: int, stride: int) -> ir.Value:
    """Indices `[*batch, 1]`: offset + iota * stride along batch dimension `dimension`."""
    column = ir.RankedTensorType.get(batch + [1], _i64())
    value = _stablehlo("iota", column, iota_dimension=ir.IntegerAttr.get(_i64(), dimension))
    for op, constant, neutral in (("multiply", stride, 1), ("add", offset, 0)):
        if constant != neutral:
            value = _stablehlo(op, column, value, _stablehlo(
                "broadcast_in_dim", column, _scalar_constant(_i64(), constant, None),
                broadcast_dimensions=ir.DenseI64ArrayAttr.get([])))
    return value


def _index_vectors(columns: list[ir.Value], batch: list[int]) -> ir.Value:
    """Scatter indices `[*batch, len(columns)]` from one `[*batch, 1]` column per
    operand dimension."""
    if len(columns) == 1:
        return columns[0]
    return _stablehlo("concatenate", ir.RankedTensorType.get(batch + [len(columns)], _i64()),
                      *columns, dimension=ir.IntegerAttr.get(_i64(), len(batch)))


def _scatter(dest: ir.Value, indices: ir.Value, updates: ir.Value, numbers: ir.Attribute,
             *, combine: str | None, unique: bool, loc: ir.Location) -> ir.Operation:
    """`stablehlo.scatter` whose body replaces the old element, or combines it with the
    update by the StableHLO op `combine` (add, multiply, maximum, minimum)."""
    scatter = ir.Operation.create(
        "stablehlo.scatter", results=[dest.type], operands=[dest, indices, updates],
        attributes={"scatter_dimension_numbers": numbers,
                    "indices_are_sorted": ir.BoolAttr.get(unique),
                    "unique_indices": ir.BoolAttr.get(unique)},
        regions=1, loc=loc)
    scalar = ir.RankedTensorType.get([], ir.RankedTensorType(dest.type).element_type)
    block = scatter.regions[0].blocks.append(scalar, scalar,
                                             arg_locs=[unnamed(loc), unnamed(loc)])
    with ir.InsertionPoint(block):
        old, new = block.arguments
        combined = _stablehlo(combine, scalar, old, new) if combine else new
        ir.Operation.create("stablehlo.return", operands=[combined])
    return scatter


def _count(shape: list[int]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def _stablehlo(name: str, result: ir.Type, *operands: ir.Value,
               loc: ir.Location | None = None, **attributes: ir.Attribute) -> ir.Value:
    return ir.Operation.create(f"stablehlo.{name}", results=[result], operands=operands,
                               attributes=attributes, loc=loc).result


def _static_tensor(value: ir.Value) -> torch_types.TensorType | None:
    if not torch_types.is_tensor(value.type):
        return None
    t = torch_types.TensorType.of(value.type)
    if t.sizes is None or t.dtype is None or any(d < 0 for d in t.sizes):
        return None
    return t


def _ranked_tensor(value: ir.Value) -> torch_types.TensorType | None:
    """A tensor's type with known rank and dtype; -1 for a dynamic dimension."""
    if not torch_types.is_tensor(value.type):
        return None
    t = torch_types.TensorType.of(value.type)
    return None if t.sizes is None or t.dtype is None else t


def _dynamic(*values: ir.Value | int | float | None) -> bool:
    """Whether any of `values` is a tensor with a dynamic dimension (dynamic_shapes)."""
    return any(isinstance(v, ir.Value) and (t := _ranked_tensor(v)) is not None and
               -1 in t.sizes for v in values)


def _dimension_size(tensor: ir.Value, dim: int, element: ir.Type) -> ir.Value:
    """The runtime size of a dynamic dimension, a 0-d tensor of `element`."""
    size = _stablehlo("get_dimension_size", ir.RankedTensorType.get(
        [], ir.IntegerType.get_signless(32)), tensor, dimension=ir.IntegerAttr.get(_i64(), dim))
    return size if element == size.type.element_type else \
        _stablehlo("convert", ir.RankedTensorType.get([], element), size)


def _constant_number(value: ir.Value) -> int | float | bool | None:
    if not isinstance(value, ir.OpResult):
        return None
    if value.owner.name == "torch.aten.Int.bool":  # a bool the importer passed as an int
        flag = _constant_number(value.owner.operands[0])
        return None if flag is None else int(flag)
    attribute = value.owner.attributes["value"] if "value" in value.owner.attributes \
        else None
    return {"torch.constant.int": lambda: ir.IntegerAttr(attribute).value,
            "torch.constant.float": lambda: ir.FloatAttr(attribute).value,
            "torch.constant.bool": lambda: ir.BoolAttr(attribute).value
            }.get(value.owner.name, lambda: None)()


def _torch(name: str, result: torch_types.TensorType, *operands: ir.Value) -> ir.Value:
    return ir.Operation.create(f"torch.aten.{name}", results=[result.to_ir()],
                               operands=operands).result


def _view(value: ir.Value, sizes: list[int]) -> ir.Value:
    loc, ip = ir.Location.current, ir.InsertionPoint.current
    shape = ir.Operation.create(
        "torch.prim.ListConstruct", results=[ir.Type.parse("!torch.list<int>")],
        operands=[torch_constant("int", n, loc, ip) for n in sizes]).result
    t = torch_types.TensorType.of(value.type)
    return _torch("view", torch_types.TensorType(tuple(sizes), t.dtype, True), value, shape)


def _splat(element: ir.Type, value: int | float | bool, shape: list[int]) -> ir.Value:
    return _stablehlo("broadcast_in_dim", ir.RankedTensorType.get(shape, element),
                      _scalar_constant(element, value, None),
                      broadcast_dimensions=ir.DenseI64ArrayAttr.get([]))


def _constant_str(value: ir.Value) -> str | None:
    if isinstance(value, ir.OpResult) and value.owner.name == "torch.constant.str":
        return ir.StringAttr(value.owner.attributes["value"]).value
    return None
