"""Running a StableHLO module: tensors in, tensors out.

The default engine is the StableHLO reference interpreter that ships with torch-mlir. It
aborts the whole process on an op it does not know, so a module is checked to be pure
StableHLO before it runs (`lowering.check_pure_stablehlo`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from . import lowering

# Element types numpy has no dtype for: passed bit for bit through an integer view.
_BITCAST = {torch.bfloat16: torch.int16}


def _element_type(dtype: torch.dtype) -> ir.Type:
    return {
        torch.float32: ir.F32Type.get, torch.float64: ir.F64Type.get,
        torch.float16: ir.F16Type.get, torch.bfloat16: ir.BF16Type.get,
        torch.bool: lambda: ir.IntegerType.get_signless(1),
        torch.int8: lambda: ir.IntegerType.get_signless(8),
        torch.int16: lambda: ir.IntegerType.get_signless(16),
        torch.int32: lambda: ir.IntegerType.get_signless(32),
        torch.int64: lambda: ir.IntegerType.get_signless(64),
        torch.uint8: lambda: ir.IntegerType.get_unsigned(8),
    }[dtype]()


def to_attribute(tensor: torch.Tensor) -> ir.DenseElementsAttr:
    """A tensor as a DenseElementsAttr of the element type StableHLO gives its dtype."""
    data = tensor.detach().contiguous().cpu()
    if data.dtype in _BITCAST:
        data = data.view(_BITCAST[data.dtype])
    array = np.ascontiguousarray(data.numpy())
    return ir.DenseElementsAttr.get(array, type=_element_type(tensor.dtype),
                                    shape=list(tensor.shape))


def _scalar(attr: ir.Attribute) -> float | int | bool:
    for cls in (ir.FloatAttr, ir.BoolAttr, ir.IntegerAttr):
        try:
            return cls(attr).value
        except ValueError:
            continue
    raise TypeError(f"unexpected element attribute {attr}")


def from_attribute(attr: ir.Attribute, dtype: torch.dtype) -> torch.Tensor:
    """A DenseElementsAttr result back as a tensor of `dtype`."""
    dense = ir.DenseElementsAttr(attr)
    shape = ir.ShapedType(dense.type).shape
    if dense.is_splat:
        return torch.full(shape, _scalar(dense.get_splat_value()), dtype=dtype)
    if dtype in _BITCAST:  # arrives bitcast to integers by _bitcast_results
        bits = torch.from_numpy(np.array(dense).copy()).reshape(shape)
        return bits.view(dtype)
    return torch.from_numpy(np.array(dense).copy()).to(dtype).reshape(shape)


def _bitcast_results(module: ir.Module, result_dtypes: list[torch.dtype]) -> ir.Module:
    """A copy of `module` whose results numpy cannot hold are bitcast to integers."""
    if not any(d in _BITCAST for d in result_dtypes):
        return module
    copy = ir.Module.parse(module.operation.get_asm(binary=True), module.context)
    main = next(op for op in copy.body.operations if op.operation.name == "func.func"
                and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")
    block = main.regions[0].blocks[0]
    terminator = block.operations[len(block.operations) - 1].operation
    for position, dtype in enumerate(result_dtypes):
        if dtype not in _BITCAST:
            continue
        value = terminator.operands[position]
        shape = ir.ShapedType(value.type).shape
        bits = ir.RankedTensorType.get(shape, _element_type(_BITCAST[dtype]),
                                       loc=terminator.location)
        cast = ir.Operation.create("stablehlo.bitcast_convert", results=[bits],
                                   operands=[value], loc=terminator.location,
                                   ip=ir.InsertionPoint(terminator))
        terminator.operands[position] = cast.result
    function_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        function_type.inputs, [v.type for v in terminator.operands]))
    return copy


# Ops the reference interpreter aborts on (LLVM ERROR), seen for random in-place ops.
_NOT_INTERPRETED = frozenset({"stablehlo.rng", "stablehlo.rng_bit_generator"})


def _ops(module: ir.Module) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def interpret(module: ir.Module, inputs: list[torch.Tensor],
              result_dtypes: list[torch.dtype]) -> list[torch.Tensor]:
    """Runs `main` of a pure StableHLO module in the reference interpreter."""
    lowering.check_pure_stablehlo(module.operation)
    unsupported = sorted({op.name for op in _ops(module) if op.name in _NOT_INTERPRETED})
    if unsupported:  # the interpreter would abort the whole process on these
        raise NotImplementedError(
            f"the StableHLO reference interpreter cannot run {', '.join(unsupported)} "
            "(random ops); export the module and run it on XLA")
    with module.context:
        module = _bitcast_results(module, result_dtypes)
        attrs = [to_attribute(t) for t in inputs]
        results = _stablehlo.eval_module(module, attrs)
        return [from_attribute(r, d) for r, d in zip(results, result_dtypes)]
