"""The `outofplace-refuse-unknown-shapes` pass, run between torch-mlir's two backend
pipelines: a tensor of unknown rank would abort its StableHLO conversion (the process),
so it is refused naming its op.
"""

from __future__ import annotations

from torch_mlir import ir

from .. import torch_types
from ..errors import UnsupportedMutationError
from ..ir_utils import all_operations
from .registry import register_pass


@register_pass(
    "outofplace-refuse-unknown-shapes",
    "Refuse tensors of unknown rank before the lowering to StableHLO",
    "refuses the first op whose result has no known rank after torch-mlir's "
    "decompositions (its einsum and cross_entropy_loss patterns have left unranked "
    "tensors, on which its StableHLO conversion aborts the process)")
def refuse_unknown_shapes(module: ir.Operation) -> None:
    """Refuses the first op whose result has no known rank after torch-mlir's
    decompositions: its StableHLO conversion crashes the process on them. (Unknown
    sizes of a known rank it lowers: batch_norm's decomposition makes some.)"""
    for op in all_operations(module):
        for result in op.results:
            if torch_types.is_tensor(result.type) and \
                    torch_types.TensorType.of(result.type).sizes is None:
                raise UnsupportedMutationError.at(
                    op, "torch-mlir's decompositions left a tensor of unknown rank "
                    f"({result.type}), which its lowering to StableHLO cannot take")
