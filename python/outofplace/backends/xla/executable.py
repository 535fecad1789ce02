"""The XLA engine's executable: a StableHLO module compiled once for XLA:CPU (compiler.py),
called on torch tensors, each written argument updated in its own memory (buffers.py),
and `compile`, the engine contract."""

from __future__ import annotations

import bisect
import math
import warnings
from typing import Any

import torch

from .. import custom_calls, hlo_proto
from .buffers import (LOCK, STAGED_BYTES, WARN_BYTES, Holder, Stage, Viewer, holder_of,
                      host, numpy_dtype, owned_copy, put, re_point, why_not_adoptable)
from .client import device_sharding, load_jax
from .compiler import COMPILE_OPTIONS, cached_compile_for_cpu


def compile(stablehlo: str, io_map: dict[int, int], options: dict[str, Any]
            ) -> "CpuExecutable":
    """The engine contract: `stablehlo` compiled for XLA:CPU, its call running main on a
    list of tensors and writing each written argument's new value into the caller's
    tensor itself (`io_map`: written argument -> its result). `options`: "names" (one
    per argument), "inputs" and "results" ((shape, dtype) each), and optionally "cache"
    (the compile cache, compile_cache.py) and "xla" (XLA's options, default
    `COMPILE_OPTIONS`). A call returns one entry per result, a written argument's the
    caller's tensor itself (backends/engines.py)."""
    return CpuExecutable(stablehlo, options["names"], io_map, options["inputs"],
                         options["results"], options.get("xla", COMPILE_OPTIONS),
                         cache=options.get("cache"))


class CallFailed(RuntimeError):
    """A call that failed after XLA had run: says which arguments hold new values."""


class CpuExecutable:
    """A StableHLO module compiled once for XLA:CPU, called on torch tensors in place:
    written arguments are updated in their own memory, nothing is copied in or out
    (the calling convention, buffers.py; `report` says where a copy remains)."""

    def __init__(self, stablehlo: str, names: list[str], io_map: dict[int, int],
                 inputs: list[tuple[tuple[int, ...], torch.dtype]],
                 results: list[tuple[tuple[int, ...], torch.dtype]],
                 options: dict[str, Any] = COMPILE_OPTIONS, *, cache: bool | None = None
                 ) -> None:
        from jax._src.lib import xla_client

        self.names, self.io_map = names, io_map
        self.donated = sorted(io_map)
        self.input_bytes = [math.prod(s) * d.itemsize for s, d in inputs]
        self.executable, xla_inputs, xla_results, same_results = \
            cached_compile_for_cpu(stablehlo, options, cache)
        # The shape and dtype XLA takes a written argument in where they are not the
        # caller's: without its unit dimensions, or flat (outofplace-squeeze-state,
        # outofplace-flatten-state), a bfloat16 one as its 16-bit integers
        # (outofplace-bfloat16-state-as-bits).
        self._as_xla: dict[int, tuple[tuple[int, ...], torch.dtype]] = {}
        for i in self.donated:
            shape, dtype = xla_inputs[i][0], _dtype(xla_inputs[i][1], inputs[i][1])
            if (shape, dtype) != (tuple(inputs[i][0]), inputs[i][1]):
                self._as_xla[i] = (shape, dtype)
        self._viewers = [Viewer(s, d) for s, d in results]
        # What makes each result a jax Array, in C++
        # (`disassemble_into_single_device_arrays` makes them in Python: µs a call).
        self._handlers = [xla_client.array_result_handler(
            load_jax().core.ShapedArray(s, numpy_dtype(_dtype(e, d))), device_sharding(),
            committed=True, _skip_checks=True)
            for (s, e), (_, d) in zip(xla_results, results)]
        self._stages = {i: Stage(s, d) for i, (s, d) in enumerate(inputs)
                        if i not in io_map and self.input_bytes[i] <= STAGED_BYTES}
        self._zero_copied = [i for i in range(len(inputs))
                             if i not in io_map and i not in self._stages]
        # Per large read-only argument, the address of the memory the last call viewed
        # and XLA's view of it: a weight passed again is not put again (a 148M decoder's
        # hundred weights cost 3 ms a call to put).
        self._views: dict[int, tuple[int, Any]] = {}
        aliased = set(io_map.values())
        self._unaliased = [r for r in range(len(results)) if r not in aliased]
        protos = [m.as_serialized_hlo_module_proto() for m in self.executable.hlo_modules()]
        copied = set().union(*(hlo_proto.copied_parameters(p, io_map)
                               for p in protos)) & io_map.keys()
        # A program that calls eager's convolutions or matrix products runs on a helper
        # thread while the caller's thread runs its kernels, as eager would
        # (kernel_home.h); None for the others (custom_calls.at_home).
        self.at_home = custom_calls.at_home(
            set().union(*(hlo_proto.custom_call_targets(p) for p in protos)))
        # Per argument: "in place", or what is copied per call and why.
        self.report = {names[a]: "in place" for a in self.donated}
        self._warned: set[tuple[int, str]] = set()
        self._unwarned: list[tuple[int, int, str]] = []
        arguments_of = {r: a for a, r in io_map.items()}
        for a in sorted(copied):
            shared = same_results.get(io_map[a])
            self._copied(a, self.input_bytes[a], "XLA:CPU's optimized program copies it "
                         "(a `copy` of the donated buffer in its HLO)" if shared is None else
                         "the program gives it the same new value as "
                         + (f"argument '{names[arguments_of[shared]]}'"
                            if shared in arguments_of else f"result {shared}")
                         + ", and one buffer cannot be both")
        # (warned of at the first call, with what that call copies: one warning)

    def _copied(self, argument: int, nbytes: int, why: str) -> None:
        """Argument's report says it is copied; the next `_warn_copies` warns of it, once
        for each reason."""
        self.report[self.names[argument]] = f"copied {nbytes} bytes per call: {why}"
        if (argument, why) not in self._warned:
            self._warned.add((argument, why))
            self._unwarned.append((argument, nbytes, why))

    def _warn_copies(self, stacklevel: int) -> None:
        """One warning for the copies found since the last: each argument by name, with
        its bytes, grouped by reason; none when they come to under `WARN_BYTES` (the
        report still says them)."""
        if not self._unwarned:
            return
        copies, self._unwarned = self._unwarned, []
        if sum(nbytes for _, nbytes, _ in copies) < WARN_BYTES:
            return
        if len(copies) == 1:
            a, nbytes, why = copies[0]
            message = (f"argument '{self.names[a]}' is copied on every call ({nbytes} "
                       f"bytes), not updated in place: {why}")
        else:
            reasons: dict[str, list[str]] = {}
            for a, nbytes, why in copies:
                reasons.setdefault(why, []).append(f"'{self.names[a]}' ({nbytes} bytes)")
            message = (f"{len(copies)} arguments are copied on every call "
                       f"({sum(c[1] for c in copies)} bytes in all), not updated in place: "
                       + "; ".join(f"{', '.join(names)}: {why}"
                                   for why, names in reasons.items()))
        warnings.warn(message, stacklevel=stacklevel + 1)

    def execute(self, arguments: list[Any]) -> list[Any]:
        """The executable run on jax Arrays of outofplace's device: one array per result."""
        run = self.executable.execute_sharded
        results = run(arguments) if self.at_home is None else self.at_home(run, arguments)
        return results.consume_with_handlers(self._handlers)

    def __call__(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Runs the program: written arguments hold their new values after it. Returns
        one entry per result, a written argument's the caller's tensor itself."""
        with LOCK:
            return self._run(inputs)

    def run_adopted(self, inputs: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
        """`self(inputs)` when every written argument is XLA's already (adopted by an
        earlier call) and no other argument starts in its memory: as an adopted argument
        covers all of its storage, none shares memory with it. Else None, nothing done
        (the caller takes the general path, which checks and adopts)."""
        with LOCK:
            holders = []
            for i in self.donated:
                holder = holder_of(inputs[i])
                if holder is None:
                    return None
                holders.append(holder)
            starts = sorted(map(torch.Tensor.data_ptr, inputs))
            for holder in holders:
                if bisect.bisect_left(starts, holder.ptr + holder.nbytes) - \
                        bisect.bisect_left(starts, holder.ptr) != 1:
                    return None
            return self._run(inputs, holders)

    def _zero_copy(self, i: int, tensor: torch.Tensor) -> Any:
        """A large read-only argument as XLA takes it: a view of torch memory, the last
        call's again when the tensor starts at the same address (the view keeps that
        memory alive, so an address it views is that memory's still: the same values)."""
        address = tensor.data_ptr()
        viewed = self._views.get(i)
        if viewed is not None and viewed[0] == address and not tensor.is_neg() and \
                tensor.is_contiguous():
            return viewed[1]
        if tensor.is_neg():  # its memory holds the negation of its values
            self._copied(i, self.input_bytes[i], "it is a lazily negated view")
            tensor = tensor.resolve_neg()
        if not tensor.is_contiguous() or tensor.data_ptr() % 64:
            # XLA takes host memory without a copy only when it is contiguous and 64-byte
            # aligned; it copies the rest.
            self._copied(i, self.input_bytes[i], "it is not contiguous or not 64-byte aligned")
            return put(host(tensor.contiguous()), "ZERO_COPY")
        array = put(host(tensor), "ZERO_COPY")
        self._views[i] = (address, array)
        return array

    def _xla_view(self, i: int, tensor: torch.Tensor) -> torch.Tensor:
        """Written argument i's contiguous tensor viewed as XLA takes it (`_as_xla`)."""
        if i not in self._as_xla:
            return tensor
        shape, dtype = self._as_xla[i]
        return tensor.view(dtype).view(shape)

    def _run(self, inputs: list[torch.Tensor], holders: list[Holder] | None = None
             ) -> list[torch.Tensor | None]:
        """Runs the program; `holders`, when given, are the written arguments' (else each
        is found, adopted or copied here)."""
        arguments: list[Any] = [None] * len(inputs)
        for i, stage in self._stages.items():
            arguments[i] = stage(inputs[i])
        for i in self._zero_copied:
            arguments[i] = self._zero_copy(i, inputs[i])
        adopted: dict[int, Holder] = {}
        copied: list[int] = []
        for n, i in enumerate(self.donated):
            tensor = inputs[i]
            holder = holder_of(tensor) if holders is None else holders[n]
            if holder is None:
                why = why_not_adoptable(tensor)
                if why is None:
                    holder = Holder(owned_copy(self._xla_view(i, tensor)))  # the only copy
                    re_point(tensor, holder)
                else:
                    self._copied(i, 2 * self.input_bytes[i], f"it is {why}")
                    copied.append(i)
                    arguments[i] = owned_copy(self._xla_view(i, tensor.contiguous()))
                    continue
            adopted[i] = holder
            arguments[i] = holder.array
        self._warn_copies(stacklevel=3)
        try:
            results = self.execute(arguments)
        except Exception as error:
            self._execute_failed(inputs, adopted, error)
            raise
        done: list[int] = []  # written arguments that hold their new values
        try:
            for i, holder in adopted.items():
                result = results[self.io_map[i]]
                if result.unsafe_buffer_pointer() == holder.ptr:
                    holder.array = result
                else:
                    self._moved(i, inputs[i], result)
                done.append(i)
                torch.autograd.graph.increment_version(inputs[i])
            for i in copied:
                with torch.no_grad():
                    r = self.io_map[i]
                    inputs[i].copy_(self._viewers[r](results[r]))
                done.append(i)
            out: list[torch.Tensor | None] = [None] * len(results)
            for i in self.donated:  # the engine contract: the caller's tensor
                out[self.io_map[i]] = inputs[i]
            for r in self._unaliased:
                out[r] = self._viewers[r](results[r])
            return out
        except Exception as error:
            self._failed_after(done, error)
            raise

    def _moved(self, i: int, tensor: torch.Tensor, result: Any) -> None:
        """XLA wrote argument i's new value elsewhere: its storage follows the new buffer."""
        re_point(tensor, Holder(result))
        self.report[self.names[i]] = "in place, though XLA returned it in a new buffer"

    def _execute_failed(self, inputs: list[torch.Tensor], adopted: dict[int, Holder],
                        error: Exception) -> None:
        """After XLA failed: raises CallFailed naming the written arguments whose buffers
        it took (their memory re-pointed at zeros), or returns when it took none."""
        lost = [i for i, h in adopted.items() if h.array.is_deleted()]
        for i in lost:  # XLA took the buffer: the memory may be gone
            zeros = self._xla_view(i, torch.zeros_like(inputs[i],
                                                       memory_format=torch.contiguous_format))
            re_point(inputs[i], Holder(owned_copy(zeros)))
        if lost:
            raise CallFailed(
                f"the call failed ({type(error).__name__}: {error}) after XLA took the "
                f"buffers of {_named(self.names, lost)}: their values are lost (now zeros); "
                "the other arguments keep their values from before the call") from error

    def _failed_after(self, done: list[int], error: Exception) -> None:
        """Raises CallFailed for a failure after XLA ran, naming the written arguments
        that hold their new values (`done`) and those that keep their old ones."""
        kept = [i for i in self.donated if i not in done]
        raise CallFailed(
            f"the call failed after XLA ran ({type(error).__name__}: {error}); "
            f"{_named(self.names, done)} already hold the call's new values "
            f"(updated in place); {_named(self.names, kept)} keep their values from "
            "before the call") from error


def _dtype(element: str, dtype: torch.dtype) -> torch.dtype:
    """The dtype of XLA's element type `element` for a tensor of `dtype`: its own, or
    int16 where a bfloat16 one goes in as its bits (outofplace-bfloat16-state-as-bits)."""
    return torch.int16 if element == "i16" else dtype


def _named(names: list[str], indices: list[int]) -> str:
    if not indices:
        return "no argument"
    return "arguments " + ", ".join(f"'{names[i]}'" for i in indices)
