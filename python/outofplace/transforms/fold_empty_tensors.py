"""The `outofplace-fold-empty-tensors` pass: a tensor without elements is a constant.

Writes into empty views are dropped by `inplace-to-outofplace`; what is left are reads
that make empty tensors (`x[2:2]`, `x[[]]`, `narrow(d, size, 0)`). They carry no data,
but torch-mlir's lowerings of some of them build invalid StableHLO (a gather of an empty
operand slices one element out of nothing). Each becomes an empty `torch.vtensor.literal`.

    %0 = torch.aten.index.Tensor %x, %list : ... -> !torch.vtensor<[0,3],f32>
    =>
    %0 = torch.vtensor.literal(dense<> : tensor<0x3xf32>) : !torch.vtensor<[0,3],f32>
"""

from __future__ import annotations

from torch_mlir import ir

from .. import torch_types
from ..ir_utils import all_operations
from .registry import register_pass

# Ops that already are constants, or whose results must stay (their tensors are not data).
_KEPT = frozenset({"torch.vtensor.literal", "torch.tensor.literal"})


def empty_literal(t: torch_types.TensorType, loc: ir.Location, ip: ir.InsertionPoint
                  ) -> ir.Value:
    """`torch.vtensor.literal` of an empty tensor of type `t`."""
    element = torch_types.element_type(t.dtype, signless=False)
    shaped = ir.RankedTensorType.get(list(t.sizes), element)
    value = ir.DenseElementsAttr.get_splat(shaped, _zero(element))
    return ir.Operation.create("torch.vtensor.literal", results=[t.to_ir()],
                               attributes={"value": value}, loc=loc, ip=ip).result


def _zero(element: ir.Type) -> ir.Attribute:
    if isinstance(element, ir.IntegerType):
        return ir.IntegerAttr.get(element, 0)
    return ir.FloatAttr.get(element, 0.0)


@register_pass(
    "outofplace-fold-empty-tensors", "Replace tensors without elements by empty literals",
    'a tensor op result without elements (`x[2:2]`, `x[[]]`) → an empty '
    '`torch.vtensor.literal`; torch-mlir lowers some of these reads to invalid '
    'StableHLO')
def fold_empty_tensors(module: ir.Operation) -> None:
    """Replaces every op result that is a static empty `!torch.vtensor` by a literal."""
    for op in all_operations(module):
        if op.name in _KEPT or op.name.startswith("func."):
            continue
        for result in op.results:
            if not torch_types.is_value_tensor(result.type) or not list(result.uses):
                continue
            t = torch_types.TensorType.of(result.type)
            if not t.is_empty or t.dtype is None or any(d < 0 for d in t.sizes):
                continue
            with op.location:
                literal = empty_literal(t, op.location, ir.InsertionPoint(op))
            result.replace_all_uses_with(literal)
        if op.name.startswith("torch.aten.") and \
                not any(list(result.uses) for result in op.results):
            op.erase()  # value-semantic, so without effects; torch-mlir would lower it
