"""The planned call: a call of a CpuExecutable for arguments laid out as the last ones,
taken straight to the executable (planned_call.cpp when the extension is built, else
`PlannedCall`), reading the frozen `CallPlan` only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .buffers import HOLDERS, LOCK
from .client import extension
from .executable import CpuExecutable


@dataclass(frozen=True)
class CallPlan:
    """Everything a planned call reads of a CpuExecutable, built once by Python
    (`call_plan`): planned_call.cpp reads these fields by name and nothing else of
    outofplace's (test_in_place_calls.py checks each name it reads is a field here), so a rename
    in Python fails that test, not the first planned call."""

    executable: Any  # the CpuExecutable; its `executable.execute_sharded` is read per call
    # What the call checks (call_checks.planned, from the one predicate of a refusal): per
    # argument, (dtype, shape, strides, storage offset) of a call that predicate accepted,
    # and the written user arguments, none of which may require grad. Any other call is
    # handed back (None) for Python to check.
    layouts: tuple
    written: tuple[int, ...]
    donated: tuple[int, ...]  # written arguments whose XLA buffers are donated
    aliased: tuple[int, ...]  # per donated argument, the result it comes back as
    stages: tuple  # (argument, Stage): a small read-only argument's kept buffer
    zero_copied: tuple[int, ...]  # large read-only arguments, viewed by `zero_copy`
    unaliased: tuple[int, ...]  # results that become tensors over XLA's buffers
    viewers: tuple  # per result, its Viewer (`shape`, `dtype`)
    handlers: Any  # per result, what makes it a jax Array (consume_with_handlers)
    zero_copy: Callable[[int, torch.Tensor], Any]  # CpuExecutable._zero_copy
    execute_failed: Callable[..., None]  # after XLA failed: raises CallFailed, or returns
    failed_after: Callable[..., None]  # a failure after XLA ran: raises CallFailed
    moved: Callable[..., None]  # XLA returned a donated buffer elsewhere: re-points
    lock: Any  # `LOCK`: calls, adoptions and the holders' arrays change under it
    holder_at: Callable[[int], Any]  # address -> the Holder of XLA's buffer there, or None
    # `at_home(run, arguments)` for a program calling eager's convolutions or matrix
    # products (kernel_home.h, custom_calls.at_home), or None
    at_home: Callable[[Callable, Any], Any] | None


def call_plan(executable: CpuExecutable, layouts: list[tuple], written: list[int]
              ) -> CallPlan:
    """The plan of `executable`'s calls for arguments in `layouts`."""
    return CallPlan(
        executable=executable, layouts=tuple(layouts), written=tuple(written),
        donated=tuple(executable.donated),
        aliased=tuple(executable.io_map[i] for i in executable.donated),
        stages=tuple(executable._stages.items()),
        zero_copied=tuple(executable._zero_copied),
        unaliased=tuple(executable._unaliased), viewers=tuple(executable._viewers),
        handlers=executable._handlers, zero_copy=executable._zero_copy,
        execute_failed=executable._execute_failed, failed_after=executable._failed_after,
        moved=executable._moved, lock=LOCK, holder_at=HOLDERS.get,
        at_home=executable.at_home)


def planned_call(executable: CpuExecutable, layouts: list[tuple], written: list[int]
                 ) -> Callable[[Any], list[torch.Tensor | None] | None]:
    """A call of `executable` for arguments in `layouts` ((dtype, shape, strides, storage
    offset) each), `written` ones not requiring grad (both from call_checks.planned): it
    returns the results as `executable(inputs)` does, or None, having changed nothing,
    when the arguments do not look like that, a written one is not XLA's already
    (`run_adopted`) or is an inference tensor outside inference mode. It refuses
    nothing itself: a call it hands back is checked by call_checks.arguments. In C++
    (planned_call.cpp) when the extension is built, else its Python twin; both read the
    `CallPlan` only."""
    plan = call_plan(executable, layouts, written)
    built = extension()
    if built is None:  # not built: the same checks in Python
        return PlannedCall(plan)
    return built.PlannedCall(plan)


class PlannedCall:
    """planned_call.cpp in Python."""

    def __init__(self, plan: CallPlan) -> None:
        self.plan = plan

    def __call__(self, inputs: Any) -> list[torch.Tensor | None] | None:
        plan = self.plan
        if len(inputs) != len(plan.layouts):
            return None
        for value, (dtype, shape, strides, offset) in zip(inputs, plan.layouts):
            if not isinstance(value, torch.Tensor) or value.layout != torch.strided or \
                    not value.is_cpu or value.dtype != dtype or value.shape != shape or \
                    value.stride() != strides or value.storage_offset() != offset:
                return None
        if torch.is_grad_enabled() and any(inputs[i].requires_grad for i in plan.written):
            return None
        if not torch.is_inference_mode_enabled() and \
                any(inputs[i].is_inference() for i in plan.donated):
            return None
        return plan.executable.run_adopted(inputs)
