"""Custom ops mapped to a backend's own kernel (a foreign custom-call target).

A custom op that writes its arguments compiles to `stablehlo.custom_call @"ns::op"`
(transforms/kernel_calls.py), which XLA:CPU runs by calling the op's CPU implementation
(backends/custom_calls.py). A backend with a kernel of its own for the op (a Neuron NKI
kernel) takes another target and its own backend config; `register_foreign_target` says
which, and the exports (`Compiled.portable_artifact()`, `.hlo_module_proto()`, `.save()`,
`outofplace export`) then call that target, with the same operand-to-result aliases.
`Compiled.stablehlo` and the engines keep the CPU call (backends/foreign_targets.py makes
the exports). docs/backends.md has an example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import op_registry


@dataclass(frozen=True)
class ForeignTarget:
    target: str  # call_target_name in the export
    backend_config: Callable[[dict[str, Any]], str]  # op's non-tensor arguments -> config
    api_version: int = 1  # the custom_call's api_version (1: XLA's original convention)


FOREIGN: dict[str, ForeignTarget] = {}  # CPU target ("ns::op") -> foreign target


def target_name(op: Any) -> str:
    """The custom_call target outofplace gives `op` (`demo::write_kv`): an OpOverload,
    an OpOverloadPacket (its default overload), a `torch.library.custom_op` or the
    name itself."""
    if isinstance(op, str):
        return op
    overload = getattr(op, "_opoverload", op)  # torch.library.custom_op's object
    if isinstance(overload, torch._ops.OpOverloadPacket):
        overload = overload.default
    if not isinstance(overload, torch._ops.OpOverload):
        raise TypeError(f"not a custom op: {op!r}")
    return op_registry.kernel_target(overload)


def register_foreign_target(op: Any, target: str,
                            backend_config: str | Callable[[dict[str, Any]], str] = "",
                            api_version: int = 1) -> None:
    """Exports call `target` for `op`, with `backend_config` (a string, or a function of
    the op's non-tensor arguments, by schema name, returning one)."""
    config = backend_config if callable(backend_config) else \
        (lambda _arguments, text=backend_config: text)
    FOREIGN[target_name(op)] = ForeignTarget(target, config, api_version)


def unregister_foreign_target(op: Any) -> None:
    FOREIGN.pop(target_name(op), None)
