"""IREE (the `iree` extra): StableHLO compiled in process for llvm-cpu, run on the CPU.

The engine contract: `compile(stablehlo, io_map, options) -> Executable`, whose call
runs main and leaves each written argument's new value in the caller's tensor. By
concern:

- compiler.py: `compile`: the `legalize-for-iree` pipeline (IREE 3.13's bugs worked
  around, transforms/upstream/iree/), then libIREECompiler in two halves split at the
  stream phase;
- alias_check.py: `alias_problems`, what the stream-phase program does not prove of the
  aliases;
- executable.py: `Executable`, the calls in the caller's tensors, and the one IREE
  runtime instance and device a process shares.
"""

from .alias_check import alias_problems  # noqa: F401
from .compiler import (FLAGS, LEGALIZE_FOR_IREE, IreeCompileError, available,  # noqa: F401
                       compile, legalize_for_iree)
from .executable import DRIVER, Executable  # noqa: F401
