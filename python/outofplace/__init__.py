"""outofplace: PyTorch programs with in-place mutation to value-semantic StableHLO.

    compiled = outofplace.compile(model, (kv_cache, k, pos))
    print(compiled.stablehlo)      # StableHLO, kv_cache aliased to its updated result
    compiled(kv_cache, k, pos)     # runs it and updates kv_cache like eager

The lower-level steps work on torch-mlir modules, ours (`import_torch`) or the user's:
`inplace_to_outofplace(module)` returns the io_map, `lower_to_stablehlo(module)` lowers.
"""

from .compiled import Compiled, compile, import_torch
from .context import make_context
from .families import CompiledFamily, compile_family
from .errors import (EngineUnavailableError, OutOfBoundsPolicyWarning,
                     UnsupportedMutationError, UserError)
from .frontend.collectives import rank_local
from .frontend.mutable_tensors import mark_mutable_tensors
from .transforms.inplace_to_outofplace import inplace_to_outofplace
from .transforms.pipelines import lower_to_stablehlo, run_pipeline
from .backends import xla
from . import kernels  # custom ops mapped to a backend's own kernel in the exports

__all__ = [
    "Compiled",
    "CompiledFamily",
    "EngineUnavailableError",
    "OutOfBoundsPolicyWarning",
    "UnsupportedMutationError",
    "UserError",
    "compile",
    "compile_family",
    "import_torch",
    "inplace_to_outofplace",
    "kernels",
    "lower_to_stablehlo",
    "make_context",
    "mark_mutable_tensors",
    "rank_local",
    "run_pipeline",
]
