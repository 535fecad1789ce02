"""A program with dynamic dimensions (`tensor<?x...>`) specialised to the sizes of a call.

XLA compiles static shapes only, and the StableHLO reference interpreter aborts the process
on an op whose result it cannot size: both run a copy of the program whose arguments take
the call's sizes, every type refined from them by StableHLO's `stablehlo-refine-shapes`.
"""

from __future__ import annotations

from torch_mlir import ir

from ..ir_utils import all_operations, main_function
from .pipelines import run_pipeline


def is_dynamic(module: ir.Module) -> bool:
    """Whether an argument of `main` has a dynamic dimension."""
    return not all(ir.RankedTensorType(a.type).has_static_shape
                   for a in main_function(module).arguments)


def specialize(module: ir.Module, shapes: list[tuple[int, ...]]) -> ir.Module:
    """A copy of `module` whose `main` takes arguments of `shapes`, every type static.
    Raises ValueError naming the first op whose result stays dynamic."""
    with module.context, ir.Location.unknown():
        copy = ir.Module.parse(module.operation.get_asm(binary=True))
        main = main_function(copy)
        for argument, shape in zip(main.arguments, shapes):
            element = ir.RankedTensorType(argument.type).element_type
            argument.set_type(ir.RankedTensorType.get(list(shape), element))
        function_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in main.arguments], function_type.results))
        run_pipeline(copy, "builtin.module(stablehlo-refine-shapes)")
        for op in all_operations(copy.operation):
            for result in op.results:
                if isinstance(result.type, ir.ShapedType) and \
                        not ir.ShapedType(result.type).has_static_shape:
                    raise ValueError(
                        f"{op.name} at {op.location} keeps a dynamic result type "
                        f"({result.type}) for arguments of shapes {shapes}: the program "
                        "cannot be specialised to them")
    return copy
