"""`outofplace-upstream-wrap-negative-indices`: a negative index of a read counts from the
end, as in eager.

torch-mlir's StableHLO lowering of `index.Tensor` uses the indices as given:

    %list = torch.prim.ListConstruct %i : (!torch.vtensor<[2],si64>) -> ...
    %0 = torch.aten.index.Tensor %x, %list : !torch.vtensor<[4],f32>, ... -> ...
    =>  %1 = "stablehlo.gather"(%x, reshape(%i)) ...           (no wrap)

and StableHLO's gather clamps an index out of range, so `x[[-1]]` reads x[0]. (Its
Linalg and TOSA lowerings wrap, llvm/torch-mlir#2233 and #3790; the StableHLO one does
not.) Writes are outofplace-lower-updates' own scatters, which wrap in their builder.
Canary: test_upstream_canaries.test_index_tensor_gathers_negative_indices_as_given.
"""

from __future__ import annotations

import torch
from torch_mlir import ir

from ...indexing import index_entries
from ...ir_utils import all_operations, size_int, torch_constant, unnamed
from ...torch_types import TensorType
from ..lower_updates.common import _ranked_tensor, _static_tensor
from ..lower_updates.index_tensors import _wrapped
from ..registry import register_pass


_INDEXING = frozenset({"torch.aten.index.Tensor", "torch.aten.index.Tensor_hacked_twin",
                       "torch.aten.index_put", "torch.aten.index_put.hacked_twin"})


@register_pass(
    "outofplace-upstream-wrap-negative-indices",
    "Wrap negative index tensors of the reads torch-mlir lowers (its gather clamps them)",
    "the integer index tensors of `index.Tensor` (and of any `index_put` left) → "
    "`where(i < 0, i + size, i)` (a dynamic dimension's runtime size): torch-mlir's "
    "StableHLO lowering gathers at a negative index as given, which the gather clamps "
    "to 0 (a workaround, transforms/upstream/)")
def wrap_negative_indices(module: ir.Operation) -> None:
    """The integer index tensors of the reads (and writes) left for torch-mlir to lower,
    wrapped (`_wrapped`): its gather clamps a negative index to 0 where eager counts it
    from the end."""
    for op in all_operations(module):
        if op.name not in _INDEXING:
            continue
        self_t, indices = _ranked_tensor(op.operands[0]), op.operands[1]
        if self_t is None or index_entries(indices) is None:
            continue
        items, dim = [], 0
        with ir.InsertionPoint(op), unnamed(op.location):
            for item in indices.owner.operands:
                index_t = _static_tensor(item)
                if index_t is None:  # None: a whole dimension
                    items.append(item)
                    dim += 1
                    continue
                items.append(item if index_t.dtype == torch.bool
                             else _wrapped(item, _size(op.operands[0], self_t, dim)))
                dim += len(index_t.sizes) if index_t.dtype == torch.bool else 1
            if items != list(indices.owner.operands):
                op.operands[1] = ir.Operation.create(
                    "torch.prim.ListConstruct", results=[indices.type],
                    operands=items).result
                if not list(indices.uses):
                    indices.owner.erase()


def _size(tensor: ir.Value, t: TensorType, dim: int) -> int | ir.Value:
    """The size of a dimension: a number, or for a dynamic one (`?`, dynamic_shapes) its
    runtime size, a `!torch.int`."""
    if t.sizes[dim] >= 0:
        return t.sizes[dim]
    loc, ip = ir.Location.current, ir.InsertionPoint.current
    return size_int(tensor, torch_constant("int", dim, loc, ip), loc, ip)
