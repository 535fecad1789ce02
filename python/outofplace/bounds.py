"""The checked mode, `outofplace.compile(..., check_bounds=True)`: a call whose runtime
indices are out of range raises IndexError naming the statement, before anything runs.

The frontend (frontend/bounds_checks.py) computes, next to each op with runtime index
tensors, whether all its indices are in range, and returns the flags as one more result
of `main`. The pipeline's outofplace-split-bounds-check (transforms/split_bounds_check.py)
takes that result off `main` (whose flag computation is then dead and removed: the main
program is the unchecked one) into a function of its own, `@bounds_check`, which
`BoundsCheck.take` moves out of the lowered module into a program of its own.
A call runs that program first, on the same engine and inputs; only when every flag is
set does the main program run. On XLA and IREE the main program updates the written
arguments in the caller's memory (donated buffers), so a check after it would come too
late; a check first leaves the caller's tensors as they were.
"""

from __future__ import annotations

from typing import Any

import torch
from torch_mlir import ir

from .backends import engines
from .errors import UserIndexError
from .frontend.bounds_checks import Check
from .ir_utils import operations
from .signature import BOUNDS_CHECK_ARGUMENTS, BOUNDS_CHECK_FUNCTION
from .transforms.specialize import is_dynamic, specialize



class BoundsCheck:
    """The flags program of a `Compiled` and what each flag checks; calling it on a
    call's inputs raises IndexError for the first check that fails."""

    def __init__(self, module: ir.Module, arguments: list[int], checks: list[Check],
                 names: list[str], input_types: list[tuple[tuple[int, ...], torch.dtype]],
                 cache: bool | None = None) -> None:
        self.module = module  # the program computing the flags
        self.arguments = arguments  # the positions among main's arguments of its own
        self.cache = cache  # the compile cache (compile_cache.py); None: the environment
        self.checks = checks
        self.names = [names[i] for i in self.arguments]
        self.input_types = [input_types[i] for i in self.arguments]
        self._result_types = [((len(checks),), torch.bool)]
        self._engines: dict[str, Any] = {}

    @classmethod
    def take(cls, module: ir.Module, checks: list[Check], names: list[str],
             input_types: list[tuple[tuple[int, ...], torch.dtype]],
             cache: bool | None = None) -> "BoundsCheck | None":
        """The check of a lowered module: its `@bounds_check` function
        (outofplace-split-bounds-check), moved out of `module` into a program of its own
        as its `main`; None when the module has none."""
        function = next((op for op in operations(module.body) if op.name == "func.func" and
                         ir.StringAttr(op.attributes["sym_name"]).value == BOUNDS_CHECK_FUNCTION),
                        None)
        if function is None:
            return None
        arguments = list(ir.DenseI64ArrayAttr(function.attributes[BOUNDS_CHECK_ARGUMENTS]))
        with module.context:
            check = ir.Module.parse(function.get_asm(enable_debug_info=True))
            main = next(iter(operations(check.body)))
            main.attributes["sym_name"] = ir.StringAttr.get("main")
            del main.attributes[BOUNDS_CHECK_ARGUMENTS]
        function.erase()
        return cls(check, arguments, checks, names, input_types, cache)

    @property
    def stablehlo(self) -> str:
        return self.module.operation.get_asm(use_name_loc_as_prefix=True)

    def flags(self, inputs: list[torch.Tensor], engine: str) -> torch.Tensor:
        """Runs the check program on `engine` ("xla", "iree" or "interpreter") for the
        arguments of main `inputs` (specialised to their shapes where the program has
        dynamic dimensions and the engine needs static ones)."""
        inputs = [inputs[i] for i in self.arguments]
        shapes = tuple(tuple(t.shape) for t in inputs)
        key = (engine, shapes if engine != "iree" and is_dynamic(self.module) else None)
        if key not in self._engines:
            module = self.module if key[1] is None else specialize(self.module, list(shapes))
            input_types = self.input_types if key[1] is None else \
                [(shape, dtype) for shape, (_, dtype) in zip(shapes, self.input_types)]
            asm = module.operation.get_asm(use_name_loc_as_prefix=True)
            executable = engines.compile(engine, asm, {}, {  # by name (backends/engines.py)
                "names": self.names, "inputs": input_types,
                "results": self._result_types, "cache": self.cache})
            self._engines[key] = lambda ins, e=executable: e(ins)[0]
            if len(self._engines) > 16:  # a few shapes of a dynamic program
                self._engines.pop(next(iter(self._engines)))
        return self._engines[key](inputs)

    def __call__(self, inputs: list[torch.Tensor], engine: str) -> None:
        """Raises IndexError (outofplace.UserIndexError) naming the first statement whose
        runtime indices are out of range for these inputs."""
        flags = self.flags(inputs, engine)
        if not bool(flags.all()):
            failed = int((~flags).nonzero()[0, 0])
            raise UserIndexError(self.checks[failed].message())
