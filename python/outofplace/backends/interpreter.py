"""Running a StableHLO module: tensors in, tensors out.

The default engine is the StableHLO reference interpreter that ships with torch-mlir. It
aborts the whole process on an op it does not know, so a module is checked to be pure
StableHLO before it runs (`verify_stablehlo.check_pure_stablehlo`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch_mlir import ir
from torch_mlir._mlir_libs import _stablehlo

from ..transforms import verify_stablehlo
from ..transforms.specialize import is_dynamic, specialize

from .. import torch_types
from ..context import make_context
from ..ir_utils import all_operations, main_function, terminator

_BITCAST = torch_types.BITCAST_DTYPES  # passed bit for bit through an integer view


def to_attribute(tensor: torch.Tensor) -> ir.DenseElementsAttr:
    """A tensor as a DenseElementsAttr of the element type StableHLO gives its dtype."""
    # A copy: `numpy()` of the caller's own storage would mark it non-resizable.
    data = tensor.detach().cpu().clone(memory_format=torch.contiguous_format)
    if data.dtype in _BITCAST:
        data = data.view(_BITCAST[data.dtype])
    array = np.ascontiguousarray(data.numpy())
    return ir.DenseElementsAttr.get(array, type=torch_types.element_type(tensor.dtype, signless=True),
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
    if dtype in _BITCAST:  # arrives bitcast to integers by _bitcast_results
        bits_dtype = _BITCAST[dtype]
        if dense.is_splat:
            bits = torch.full(shape, _scalar(dense.get_splat_value()), dtype=bits_dtype)
        else:
            bits = torch.from_numpy(np.array(dense).copy()).reshape(shape)
        return bits.view(dtype)
    if dense.is_splat:
        return torch.full(shape, _scalar(dense.get_splat_value()), dtype=dtype)
    return torch.from_numpy(np.array(dense).copy()).to(dtype).reshape(shape)


def _bitcast_results(module: ir.Module, result_dtypes: list[torch.dtype]) -> ir.Module:
    """A copy of `module` whose results numpy cannot hold are bitcast to integers."""
    if not any(d in _BITCAST for d in result_dtypes):
        return module
    copy = ir.Module.parse(module.operation.get_asm(binary=True), module.context)
    main = main_function(copy)
    ret = terminator(main.regions[0].blocks[0])
    for position, dtype in enumerate(result_dtypes):
        if dtype not in _BITCAST:
            continue
        value = ret.operands[position]
        shape = ir.ShapedType(value.type).shape
        bits = ir.RankedTensorType.get(shape, torch_types.element_type(_BITCAST[dtype], signless=True),
                                       loc=ret.location)
        cast = ir.Operation.create("stablehlo.bitcast_convert", results=[bits],
                                   operands=[value], loc=ret.location,
                                   ip=ir.InsertionPoint(ret))
        ret.operands[position] = cast.result
    function_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        function_type.inputs, [v.type for v in ret.operands]))
    return copy


# Ops the reference interpreter aborts on (LLVM ERROR), seen for random in-place ops.
_NOT_INTERPRETED = frozenset({"stablehlo.rng", "stablehlo.rng_bit_generator"})


def interpret(module: ir.Module, inputs: list[torch.Tensor],
              result_dtypes: list[torch.dtype]) -> list[torch.Tensor]:
    """Runs `main` of a pure StableHLO module in the reference interpreter."""
    verify_stablehlo.check_pure_stablehlo(module.operation)
    unsupported = sorted({op.name for op in all_operations(module.operation) if op.name in _NOT_INTERPRETED})
    if unsupported:  # the interpreter would abort the whole process on these
        raise NotImplementedError(
            f"the StableHLO reference interpreter cannot run {', '.join(unsupported)} "
            "(random ops); export the module and run it on XLA")
    with module.context:
        if is_dynamic(module):
            # The interpreter refines the module it is given to the inputs' sizes, and
            # aborts the process on a type it cannot refine: a copy, checked first.
            specialize(module, [tuple(t.shape) for t in inputs])
            module = ir.Module.parse(module.operation.get_asm(binary=True), module.context)
        module = _bitcast_results(module, result_dtypes)
        attrs = [to_attribute(t) for t in inputs]
        results = _stablehlo.eval_module(module, attrs)
        return [from_attribute(r, d) for r, d in zip(results, result_dtypes)]


def compile(stablehlo: str, io_map: dict[int, int], options: dict) -> "Executable":
    """The engine contract (backends/engines.py) for the reference interpreter: `options`
    "results" gives each result's (shape, dtype)."""
    return Executable(stablehlo, io_map, [dtype for _, dtype in options["results"]])


class Executable:
    """A program for the reference interpreter, called on main's arguments (the
    caller's tensors): each written argument (io_map) gets its new value copied into it
    after the run, which leaves them as they were when the run fails."""

    def __init__(self, stablehlo: str, io_map: dict[int, int],
                 result_dtypes: list[torch.dtype]) -> None:
        self.module = ir.Module.parse(stablehlo, make_context())
        self.io_map = io_map
        self.result_dtypes = result_dtypes

    def __call__(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        results = interpret(self.module, inputs, self.result_dtypes)
        with torch.no_grad():
            for arg, result in self.io_map.items():
                inputs[arg].copy_(results[result])
                results[result] = inputs[arg]  # the engine contract: the caller's tensor
        return results
