"""Custom op calls (`stablehlo.custom_call` of transforms/kernel_calls.py) on the engines.

- XLA:CPU runs the op's own CPU kernel inside the program: the C++ extension's XLA FFI
  handler (kernel_call.cpp) is registered for each op's target in jaxlib's FFI registry,
  which every XLA:CPU client of the process reads, outofplace's own
  (`xla.make_cpu_client`) included; it calls the op through the c10 dispatcher on XLA's
  buffers, writing the aliased operand in place. Without the extension (no compiler or
  no jaxlib when installing) compiling refuses, naming the op.
- The reference interpreter and IREE cannot call a kernel: compiling for them refuses,
  naming the op and the engine.
- Exports carry a foreign target where outofplace.kernels maps the op to one
  (foreign_targets.py).
- The XLA engine's legalization makes large convolutions calls of `aten::convolution`
  (transforms/convolutions_as_kernel_calls.py), matrix products calls of `aten::linear` /
  `aten::matmul` (transforms/dots_as_kernel_calls.py), ops kept whole and large
  pointwise ops calls of `aten::kernel` (composites_as_kernel_calls.py,
  pointwise_as_kernel_calls.py) that the same handler runs: the XLA engine registers
  their targets (`EAGER_TARGETS`, `register_eager`) before its legalization runs the
  passes, and Compiled before loading a cached executable.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any, Callable

from torch_mlir import ir

from ..errors import UnsupportedMutationError
from ..transforms import dots_as_kernel_calls
from ..ir_utils import all_operations

OP_NAME = "outofplace.op"  # transforms/kernel_calls.py's backend_config entries: the op
EAGER_TARGETS = dots_as_kernel_calls.EAGER_TARGETS  # the legalization's calls of eager's kernels

_registered: set[str] = set()
_lock = threading.Lock()


def kernel_calls(module: ir.Module | ir.Operation) -> list[ir.Operation]:
    """The custom_calls of custom ops (they carry `outofplace.op` in backend_config)."""
    operation = module.operation if isinstance(module, ir.Module) else module
    found = []
    for op in all_operations(operation):
        if op.name == "stablehlo.custom_call" and "backend_config" in op.attributes and \
                isinstance(op.attributes["backend_config"], ir.DictAttr) and \
                OP_NAME in ir.DictAttr(op.attributes["backend_config"]):
            found.append(op)
    return found


def target(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["call_target_name"]).value


def extension():
    """The C++ handler (kernel_call.cpp), or None when it was not built (setup.py)."""
    try:
        from . import _kernel_call
    except ImportError:
        return None
    return _kernel_call


class KernelFailed(RuntimeError):
    """A custom op's kernel raised during a call on XLA:CPU."""


def raise_failure() -> None:
    """After XLA ran a program with kernels: raises KernelFailed when one raised (the
    handler records it rather than failing XLA's execution, which would drop the donated
    buffers, the caller's tensors among them)."""
    handler = extension()
    failure = handler.take_failure() if handler is not None else ""
    if failure:
        raise KernelFailed(
            f"{failure}. The tensors it writes hold what it left (a kernel that checks its "
            "arguments before writing, as PyTorch's ops do, leaves them as they were); "
            "the call's other writes, if any, were made; its results are not returned")


def prepare(module: ir.Module, engine: str, mesh: object = None) -> None:
    """At compile time: refuses an engine that cannot call the program's kernels, and
    registers the CPU handler for each kernel's target when the engine is XLA."""
    calls = kernel_calls(module)
    if not calls:
        return
    if engine == "auto":  # xla when jax is installed, as Compiled.run picks it
        engine = "xla" if importlib.util.find_spec("jax") else "interpreter"
    refuse_engine(calls, engine, mesh)
    handler = extension()
    if handler is None:
        raise UnsupportedMutationError.at(
            calls[0], f"custom op {target(calls[0])}: outofplace's kernel handler "
            "(backends/kernel_call.cpp) is not built, so XLA:CPU cannot call the op's "
            "kernel; install outofplace with a C++ compiler and jaxlib present")
    for op in calls:
        register(target(op))


def register(name: str) -> bool:
    """Registers the CPU handler for the custom call target `name` (once a process);
    False when the handler is not built."""
    handler = extension()
    if handler is None:
        return False
    with _lock:
        if name not in _registered:
            import jax  # (registering needs no more of jax than its FFI registry)

            jax.ffi.register_ffi_target(name, handler.handler(), platform="cpu")
            _registered.add(name)
    return True


def register_eager() -> bool:
    """Registers the handler for the targets of eager's kernels the XLA engine's
    legalization calls (`EAGER_TARGETS`); False when the handler is not built."""
    return all([register(name) for name in EAGER_TARGETS])


def at_home(targets: set[str]) -> Callable[[Callable, Any], Any] | None:
    """For a program calling the custom call `targets`: the handler's `at_home`
    (kernel_home.h: the program on a helper thread, its kernels on the caller's) when
    it calls eager's convolutions or matrix products (`EAGER_TARGETS`: oneDNN's and
    BLAS's kernels, which run on OpenMP's threads); else None, its kernels on XLA's
    threads. A small custom op's kernel (a paged-cache writer) runs no parallel loop,
    and the helper thread's two handoffs cost a quiet machine about 0.2 ms a call (its
    20 µs call took 220)."""
    return extension().at_home if targets & set(EAGER_TARGETS) and \
        extension() is not None else None


def refuse_engine(calls: list[ir.Operation] | ir.Module, engine: str,
                  mesh: object = None) -> None:
    """Refuses an engine other than XLA:CPU on one device for a program with kernels."""
    if not isinstance(calls, list):
        calls = kernel_calls(calls)
    if not calls:
        return
    if mesh is not None:
        raise UnsupportedMutationError.at(
            calls[0], f"custom op {target(calls[0])}: a program with a mesh cannot call a "
            "kernel (outofplace runs kernels on XLA:CPU on one device)")
    if engine != "xla":
        name = {"interpreter": "the StableHLO reference interpreter",
                "iree": "IREE"}.get(engine, engine)
        raise UnsupportedMutationError.at(
            calls[0], f"custom op {target(calls[0])}: engine '{engine}' ({name}) cannot "
            "call its kernel; run it on engine='xla' (XLA:CPU runs the op's CPU "
            "implementation), or export the program for a backend that has the kernel")
