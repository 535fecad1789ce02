"""XLA through jaxlib (the `xla` extra): the CPU engine and the HLO module proto.

Compiling the StableHLO text with XLA turns `tf.aliasing_output` into the HLO module's
`input_output_alias`, so the buffers of mutated arguments are donated: XLA updates a
KV cache in place instead of copying it.

The package, by concern:

- client.py: jax loaded, outofplace's synchronous XLA:CPU client and its device, the C++
  planned calls' extension;
- heaps.py: glibc's malloc set to keep the heaps a call's temporaries leave empty;
- temporaries.py: kernels' large results kept between calls (temporaries over 32 MiB);
- compiler.py: the legalization (`LEGALIZE_FOR_CPU`), XLA:CPU's compile with
  `COMPILE_OPTIONS`, the compile cache, the HLO module proto;
- misfusion.py: the workaround of openxla/xla#49176 (a compile option), quarantined;
  the engine's workaround passes are in its legalization pipelines (docs/backends.md);
- consumers.py: what a plain XLA:CPU consumer of an exported program keeps in place;
- buffers.py: the memory between torch and XLA (adopted state, staged and zero-copy
  arguments, results as tensors over XLA's buffers);
- executable.py: `compile`, the engine contract, and `CpuExecutable`, a call;
- planned.py: the planned call and its frozen `CallPlan` (what planned_call.cpp reads).
"""

from .buffers import STAGED_BYTES, WARN_BYTES, why_not_adoptable  # noqa: F401
from .client import available, extension, load_jax  # noqa: F401
from .compiler import (COMPILE_OPTIONS, LEGALIZE_FOR_CPU, XlaCompileError,  # noqa: F401
                       compile_for_cpu, hlo_module_proto, legalize_for_cpu)
from .consumers import (CONSUMER_HINT, CONSUMER_OPTION, alias_problems,  # noqa: F401
                        consumer_checks)
from .executable import CallFailed, CpuExecutable, compile  # noqa: F401
from .planned import CallPlan, call_plan, planned_call  # noqa: F401
