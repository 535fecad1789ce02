"""The `outofplace-fold-constants` pass: constant tensor computations folded by PyTorch.

torch-mlir's folders compute some constants wrongly: a negative integer scalar becomes
2**64 - 1 (`torch.tensor([-1.0, 0.0]) * -1` folds to [1.8e19, 0]) and float16/bfloat16
elements are read as doubles without conversion (`torch.tensor(1.0,
dtype=torch.float16) * -1` folds to +inf). Before its pipelines run, this pass folds every
ATen op whose tensor operands are all constants by running the op itself in PyTorch, and
puts the result in as a literal, so torch-mlir finds nothing left to fold.

    %0 = torch.vtensor.literal(dense<[-1.0, 0.0]> : tensor<2xf32>)
    %1 = torch.aten.mul.Scalar %0, %int-1
    =>
    %1 = torch.vtensor.literal(dense<[1.0, -0.0]> : tensor<2xf32>)

A negative int scalar of an op on floats becomes a float constant, which the folders
read right. A `copy` of a constant is that constant, whatever it overwrites: torch-mlir's
canonicaliser would find it so later, after this pass, and hand its folders the literal.

Factories of values (`zeros`, `full`, `arange`, ...) fold too; random ops and `empty`
are left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo
from torch_mlir.dialects import func as func_d

from .. import op_registry, torch_types

from ..ir_utils import all_operations, constant_int, tensor_literal, torch_constant
from .registry import register_pass

_MAX_ELEMENTS = 1 << 16  # larger results stay computed at run time, unless splats
_DTYPES = {number: dtype for dtype, number in torch_types.TORCH_DTYPE_TO_INT.items()}


# Ops without tensor operands that make a constant (torch-mlir's folders would meet it
# after this pass: `torch.zeros(2).sign_()` folded to ones). `empty` holds no values.
_FACTORIES = frozenset({"zeros", "ones", "full", "arange", "scalar_tensor", "eye",
                        "linspace"})
# Factories reading only the shape and dtype of their tensor operand (self), constants
# whatever it holds: torch-mlir turns them into literals its folders misread
# (`torch.full_like(x, 2.5).trunc_()` folded to -2), so they fold here.
_FACTORIES_LIKE = frozenset({"zeros_like", "ones_like", "full_like", "new_zeros",
                             "new_ones", "new_full"})


class _Unknown(Exception):
    """An operand whose value is not a constant this pass can read."""


def _literal_value(op: ir.Operation) -> torch.Tensor:
    t = torch_types.TensorType.of(op.result.type)
    dense = ir.DenseElementsAttr(op.attributes["value"])
    if dense.is_splat:
        splat = dense.get_splat_value()
        value = ir.FloatAttr(splat).value if t.dtype.is_floating_point else \
            ir.BoolAttr(splat).value if t.dtype == torch.bool else ir.IntegerAttr(splat).value
        return torch.full(t.sizes, value, dtype=t.dtype)
    if t.dtype == torch.bfloat16:
        return _bfloat16_values(dense, t.sizes)
    return torch.from_numpy(np.array(dense).copy()).reshape(t.sizes).to(t.dtype)


def _bfloat16_values(dense: ir.DenseElementsAttr, sizes: tuple[int, ...]) -> torch.Tensor:
    """The elements of a bfloat16 attribute, which numpy cannot hold: StableHLO's
    reference interpreter bitcasts them to int16, which numpy reads bit for bit."""
    with ir.Location.unknown():
        bits_type = ir.RankedTensorType.get(list(sizes), ir.IntegerType.get_signless(16))
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            main = func_d.FuncOp("main", ir.FunctionType.get([], [bits_type]))
            with ir.InsertionPoint(main.add_entry_block()):
                constant = ir.Operation.create("stablehlo.constant", results=[dense.type],
                                               attributes={"value": dense})
                bits = ir.Operation.create("stablehlo.bitcast_convert", results=[bits_type],
                                           operands=[constant.result])
                func_d.ReturnOp([bits.result])
    (result,) = _stablehlo.eval_module(module, [])
    bits = ir.DenseElementsAttr(result)
    if bits.is_splat:
        return torch.full(sizes, ir.IntegerAttr(bits.get_splat_value()).value,
                          dtype=torch.int16).view(torch.bfloat16)
    return torch.from_numpy(np.array(bits).copy()).reshape(sizes).view(torch.bfloat16)


def _constant(value: ir.Value, known: dict[ir.Value, Any]) -> Any:
    if value in known:
        return known[value]
    if not isinstance(value, ir.OpResult):
        raise _Unknown()
    op = value.owner
    if op.name == "torch.vtensor.literal":
        result = _literal_value(op)
    elif op.name in ("torch.constant.int", "torch.constant.float", "torch.constant.bool"):
        result = op.attributes["value"].value
    elif op.name in ("torch.constant.device", "torch.constant.str"):  # "cpu", "floor"
        result = ir.StringAttr(op.attributes["value"]).value
    elif op.name == "torch.constant.none":
        result = None
    elif op.name == "torch.prim.ListConstruct":
        result = [_constant(v, known) for v in op.operands]
    elif op.name == "torch.prim.NumToTensor.Scalar":  # `t.add_(1)`: the 1 as a 0-d tensor
        dtype = torch_types.TensorType.of(op.result.type).dtype
        if dtype is None:
            raise _Unknown()
        result = torch.tensor(_constant(op.operands[0], known), dtype=dtype)
    elif op.name == "torch_c.from_builtin_tensor" and isinstance(op.operands[0], ir.OpResult) \
            and op.operands[0].owner.name == "torch_c.to_builtin_tensor":
        result = _constant(op.operands[0].owner.operands[0], known)  # a round trip
    else:
        raise _Unknown()
    known[value] = result
    return result


def _shape_of(value: ir.Value) -> torch.Tensor:
    """A tensor of the value's shape and dtype, for an op that reads nothing else."""
    t = torch_types.TensorType.of(value.type) if torch_types.is_value_tensor(value.type) \
        else None
    if t is None or t.sizes is None or t.dtype is None:
        raise _Unknown()
    return torch.zeros((), dtype=t.dtype).expand(t.sizes)


def _argument(schema_type: str, value: Any) -> Any:
    if "ScalarType" in schema_type and isinstance(value, int):
        return _DTYPES[value]
    if ("MemoryFormat" in schema_type or "Layout" in schema_type) and value is not None:
        raise _Unknown()
    return value


def _fold(op: ir.Operation, known: dict[ir.Value, Any]) -> torch.Tensor | None:
    """The op's result computed by PyTorch, when all its tensor operands are constants."""
    if len(op.results) != 1 or not torch_types.is_value_tensor(op.result.type):
        return None
    effects = op_registry.effects(op.name)
    if effects is None or effects.written or \
            torch.Tag.nondeterministic_seeded in effects.overload.tags:
        return None
    result_type = torch_types.TensorType.of(op.result.type)
    if op.name == "torch.aten.copy":  # its value is src's, whatever self holds
        try:
            src = _constant(op.operands[1], known)
        except _Unknown:
            return None
        if not isinstance(src, torch.Tensor) or result_type.sizes is None:
            return None
        try:
            return _small(torch.empty(result_type.sizes, dtype=result_type.dtype).copy_(src))
        except RuntimeError:
            return None
    schema = effects.overload._schema
    name = schema.name.split("::")[1]
    try:
        values = [_shape_of(v) if i == 0 and name in _FACTORIES_LIKE else _constant(v, known)
                  for i, v in enumerate(op.operands)]
    except _Unknown:
        return None
    if not any(isinstance(v, torch.Tensor) for v in values) and name not in _FACTORIES:
        return None
    positional, keywords = [], {}
    try:
        for argument, value in zip(schema.arguments, values):
            value = _argument(str(argument.type), value)
            if argument.kwarg_only:
                keywords[argument.name] = value
            else:
                positional.append(value)
        result = effects.overload(*positional, **keywords)
    except (_Unknown, RuntimeError, TypeError, ValueError):
        return None
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != result_type.sizes \
            or result.dtype != result_type.dtype:
        return None
    return _small(result)


def _small(result: torch.Tensor) -> torch.Tensor | None:
    """The result, unless it is too large to be worth a literal (splats always are)."""
    if result.numel() > _MAX_ELEMENTS and not bool((result == result.flatten()[0]).all()):
        return None
    return result


def _float_scalars(op: ir.Operation) -> None:
    """A negative int scalar operand of an op on floats as the float it stands for:
    torch-mlir's folders read it as unsigned (-2 becomes 2**64 - 2), also in constants
    they only find after their own decompositions (`masked_fill(x, true, -2)`)."""
    effects = op_registry.effects(op.name)
    if effects is None or len(op.results) != 1 or \
            not torch_types.is_value_tensor(op.result.type):
        return
    dtype = torch_types.TensorType.of(op.result.type).dtype
    if dtype is None or not dtype.is_floating_point:
        return
    for position, argument in enumerate(effects.overload._schema.arguments):
        if position >= len(op.operands) or not isinstance(argument.type, torch.NumberType):
            continue
        value = constant_int(op.operands[position])
        if value is not None and value < 0:
            op.operands[position] = torch_constant("float", float(value), op.location,
                                                   ir.InsertionPoint(op))


@register_pass(
    "outofplace-fold-constants",
    "Fold constant tensor computations with PyTorch (torch-mlir folds some wrongly)",
    'ATen ops whose tensor operands are all constants (scalars traced as 0-d tensors, '
    '`NumToTensor`, included), a `copy` of a constant, and '
    '`zeros_like`/`ones_like`/`full_like`/`new_zeros`/`new_ones`/`new_full` of '
    "anything → literals computed by PyTorch; torch-mlir's folders turn a negative "
    'int scalar into 2**64 - 1, misread half-precision constants and fold `sign(0)` '
    'to 1')
def fold_constants(module: ir.Operation) -> None:
    """Replaces each constant tensor computation by its value, in program order."""
    known: dict[ir.Value, Any] = {}
    for op in all_operations(module):
        if not op.name.startswith("torch.aten.") and not op.name.startswith("torch.prims."):
            continue
        _float_scalars(op)
        value = _fold(op, known)
        if value is None:
            continue
        literal = tensor_literal(value, op.location, ir.InsertionPoint(op))
        op.result.replace_all_uses_with(literal)
        known[literal] = value
        op.erase()
