"""`outofplace-shield-constants`: tensor literals kept out of sight of torch-mlir's
folders, which misread constants they can see (its partner, which bares them again, is
strip_constant_shields.py).

A workaround of torch-mlir folder bugs (test/pytest/test_upstream_canaries.py pins them;
when a canary fails, upstream is fixed and both passes can go):
- `comparisonScaleFolder` (torch.aten.gt/ge/lt/le/eq/ne.Scalar) of a float tensor and an
  int scalar takes the integer path and reads float storage as an integer: for a splat,
  an address (a result that changes from run to run with ASLR), otherwise a segfault.
  torch-mlir's own decompositions of `trunc` and `sgn` create `gt/lt.Scalar(x, 0)`.
- `AtenDivTensorModeOp::fold` divides int64 as uint64 (-2 becomes 2**64 - 2) and floors
  wrongly: `arange(5) // -2` folds to zeros.

outofplace-fold-constants computes every constant it sees with PyTorch, but torch-mlir
derives constants of its own from ops with a constant operand, after that pass (a
`where` of an all-true literal mask is its other operand), and hands them to those
folders. So no literal is left readable: `outofplace-shield-constants` puts each behind
an optimization barrier, which folds nothing,

    %0 = torch.vtensor.literal(dense<2.5> : tensor<3xf32>) : !torch.vtensor<[3],f32>
    =>
    %c = stablehlo.constant dense<2.5> : tensor<3xf32>
    %b = stablehlo.optimization_barrier {outofplace.constant_shield} %c : tensor<3xf32>
    %0 = torch_c.from_builtin_tensor %b : tensor<3xf32> -> !torch.vtensor<[3],f32>

and `outofplace-strip-constant-shields`, once torch-mlir's pipelines are done, removes
the barriers and folds the reshapes, broadcasts, transposes, slices and conversions of
constants the lowering put after them (torch-mlir's folders used to), with StableHLO's
reference interpreter, so the emitted program holds one constant where it held one.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ... import torch_types
from ...ir_utils import all_operations, from_builtin
from ..registry import register_pass

SHIELD = "outofplace.constant_shield"


def _builtin_value(literal: ir.Operation) -> ir.DenseElementsAttr:
    """The literal's elements as StableHLO holds them (signless integers)."""
    dense = ir.DenseElementsAttr(literal.attributes["value"])
    t = torch_types.TensorType.of(literal.result.type)
    element = torch_types.element_type(t.dtype, signless=True)
    builtin = ir.RankedTensorType.get(list(t.sizes), element, loc=literal.location)
    if dense.type == builtin:  # floats and bools
        return dense
    if dense.is_splat:
        value = ir.IntegerAttr(dense.get_splat_value()).value
        return ir.DenseElementsAttr.get_splat(builtin, ir.IntegerAttr.get(element, value))
    return ir.DenseElementsAttr.get(np.ascontiguousarray(np.array(dense)), type=element,
                                    shape=list(t.sizes))


@register_pass(
    "outofplace-shield-constants",
    "Hide tensor literals from torch-mlir's folders behind optimization barriers",
    'every `torch.vtensor.literal` → '
    '`torch_c.from_builtin_tensor(stablehlo.optimization_barrier '
    '{outofplace.constant_shield} (stablehlo.constant))`: a workaround of torch-mlir '
    'folder bugs (its comparison folder reads float constants as integers: a segfault '
    'or an address-dependent result; its `div.Tensor_mode` folder divides int64 as '
    'unsigned), pinned in test/pytest/test_upstream_canaries.py')
def shield_constants(module: ir.Operation) -> None:
    """Every `torch.vtensor.literal` as a StableHLO constant behind an optimization
    barrier, brought back into torch IR by `torch_c.from_builtin_tensor`."""
    for op in all_operations(module):
        if op.name != "torch.vtensor.literal":
            continue
        value = _builtin_value(op)
        ip = ir.InsertionPoint(op)
        constant = ir.Operation.create("stablehlo.constant", results=[value.type],
                                       attributes={"value": value}, loc=op.location, ip=ip)
        barrier = ir.Operation.create("stablehlo.optimization_barrier", results=[value.type],
                                      operands=[constant.result],
                                      attributes={SHIELD: ir.UnitAttr.get()},
                                      loc=op.location, ip=ip)
        op.result.replace_all_uses_with(
            from_builtin(barrier.result, op.result.type, op.location, ip))
        op.erase()

