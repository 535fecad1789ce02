"""outofplace: PyTorch programs with in-place mutation to value-semantic StableHLO.

    compiled = outofplace.compile(model, (kv_cache, k, pos))
    print(compiled.stablehlo)      # StableHLO, kv_cache aliased to its updated result
    compiled(kv_cache, k, pos)     # runs it and updates kv_cache like eager

The lower-level steps work on torch-mlir modules, ours (`import_torch`) or the user's:
`inplace_to_outofplace(module)` returns the io_map, `lower_to_stablehlo(module)` lowers.

The names below are imported when first used, so that a tool needing only the passes
(`outofplace-opt`) does not import the frontend and the engines.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (EngineUnavailableError, OutOfBoundsPolicyWarning,
                     UnsupportedMutationError, UserError)
from . import kernels  # custom ops mapped to a backend's own kernel in the exports

if TYPE_CHECKING:
    from .compiled import Compiled, compile, import_torch
    from .context import make_context
    from .families import CompiledFamily, compile_family
    from .frontend.collectives import rank_local
    from .frontend.mutable_tensors import mark_mutable_tensors
    from .transforms.inplace_to_outofplace import inplace_to_outofplace
    from .transforms.pipelines import lower_to_stablehlo, run_pipeline
    from .backends import xla

# name -> the module defining it (the module itself for `xla`)
_LAZY = {
    "Compiled": ".compiled", "compile": ".compiled", "import_torch": ".compiled",
    "make_context": ".context",
    "CompiledFamily": ".families", "compile_family": ".families",
    "rank_local": ".frontend.collectives",
    "mark_mutable_tensors": ".frontend.mutable_tensors",
    "inplace_to_outofplace": ".transforms.inplace_to_outofplace",
    "lower_to_stablehlo": ".transforms.pipelines", "run_pipeline": ".transforms.pipelines",
    "xla": ".backends.xla",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:  # a subpackage not imported yet (`outofplace.backends`)
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'outofplace' has no attribute '{name}'") from None
    module = importlib.import_module(_LAZY[name], __name__)
    value = module if name == "xla" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
