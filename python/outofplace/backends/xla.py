"""XLA through jaxlib (the `xla` extra): the CPU engine and the HLO module proto.

Compiling the StableHLO text with XLA turns `tf.aliasing_output` into the HLO module's
`input_output_alias`, so the buffers of mutated arguments are donated: XLA updates a
KV cache in place instead of copying it.

XLA:CPU (jaxlib 0.10.2) can fuse a read of a buffer into the dynamic-update-slice that
updates that buffer in place when the two reach it through different bitcasts, and then
overwrites elements before it reads them (plain JAX programs hit it too: openxla/xla#49176,
its reproducer in test/pytest/test_xla_canaries.py). `compile_for_cpu` looks for such a fusion in the optimized HLO and,
when it finds one, compiles again without the fusion pass.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import math
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from . import hlo_proto
from .. import compile_cache, progress


@functools.cache
def available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _jax() -> Any:
    try:
        import jax
    except ImportError as error:
        raise RuntimeError("the XLA engine needs the 'xla' extra: "
                           "pip install 'outofplace[xla]'") from error
    jax.config.update("jax_enable_x64", True)  # or int64 inputs are narrowed
    return jax


def hlo_module_proto(stablehlo: str) -> bytes:
    """The serialized `xla.HloModuleProto` of a StableHLO module, aliases included."""
    _jax()
    from jax._src.lib import _jax as jaxlib

    computation = jaxlib.mlir.mlir_module_to_xla_computation(
        stablehlo, use_tuple_args=False, return_tuple=False)
    return computation.as_serialized_hlo_module_proto()


# The passes the XLA engine runs on the program before XLA:CPU compiles it: written
# arguments without their unit dimensions (a batch-1 KV cache that attention reads is
# copied otherwise), the dots then read through the reshapes that leaves and the
# transposes of weights, and convolutions whose window is larger than their input are
# dots (XLA:CPU's convolution is hundreds of times slower there).
LEGALIZE_FOR_CPU = ("builtin.module(outofplace-squeeze-state, "
                    "outofplace-fold-transposes-into-dots, "
                    "outofplace-small-convolutions-as-dots)")


def legalize_for_cpu(stablehlo: str) -> tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The StableHLO the XLA engine compiles for a module (`LEGALIZE_FOR_CPU`), and the
    shapes of its arguments and results: a written argument's without its unit
    dimensions (the caller's buffer holds the same bytes)."""
    return _legalized(stablehlo)[:3]


def _legalized(stablehlo: str) -> tuple[str, list[tuple[int, ...]], list[tuple[int, ...]],
                                        dict[int, int]]:
    """`legalize_for_cpu`'s module and shapes, and each result that returns the same value
    as an earlier result: {result: that earlier result}."""
    from torch_mlir import ir

    from ..context import make_context
    from ..ir_utils import main_function
    from ..transforms.pipelines import run_pipeline

    with make_context():
        module = ir.Module.parse(stablehlo)
        run_pipeline(module, LEGALIZE_FOR_CPU)
        main = main_function(module)
        function_type = ir.FunctionType(main.type)
        shapes = [[tuple(ir.RankedTensorType(t).shape) for t in types]
                  for types in (function_type.inputs, function_type.results)]
        returned = list(main.regions[0].blocks[0].operations)[-1].operands
        first: dict[Any, int] = {}
        same = {r: first.setdefault(v, r) for r, v in enumerate(returned)}
        return module.operation.get_asm(), *shapes, {r: f for r, f in same.items() if f != r}


def _compile_options(options: dict[str, Any]) -> Any:
    from jax._src.lib import xla_client

    compile_options = xla_client.CompileOptions()
    compile_options.env_option_overrides = list(options.items())
    if COLLECTIVES is not None:  # every rank a replica
        COLLECTIVES.place(compile_options)
    return compile_options


def _devices() -> Any:
    from jax._src.lib import xla_client

    if COLLECTIVES is not None:
        return COLLECTIVES.devices
    return xla_client.DeviceList((_device(),))


def compile_for_cpu(stablehlo: str, options: dict[str, Any] = None) -> Any:
    """The loaded XLA:CPU executable of a StableHLO module on outofplace's client, safe from
    the misfusion above, compiled with `options` (default: `COMPILE_OPTIONS`)."""
    def build(options: dict[str, Any]) -> Any:
        try:
            return _client().compile_and_load(stablehlo, _devices(), _compile_options(options))
        except Exception as error:  # XLA's own text: our StableHLO is at fault
            raise XlaCompileError(stablehlo, error) from error

    return _without_misfusion(build, COMPILE_OPTIONS if options is None else options)


def cached_compile_for_cpu(stablehlo: str, options: dict[str, Any], cache: bool | None
                           ) -> tuple[Any, list[tuple[int, ...]], list[tuple[int, ...]],
                                      dict[int, int]]:
    """`compile_for_cpu` of `_legalized(stablehlo)`: the executable, the shapes of its
    arguments and results and the results returning an earlier one's value; or, when the
    compile cache holds them (compile_cache.py, on unless `cache` is False), the
    executable PJRT serialized then, deserialized, and the rest as they were."""
    import os

    entry = compile_cache.key(
        "xla", stablehlo, LEGALIZE_FOR_CPU, repr(sorted(options.items())),
        os.environ.get("XLA_FLAGS", ""), _client().platform_version, compile_cache.cpu()
    ) if compile_cache.enabled(cache) and COLLECTIVES is None else None
    found = compile_cache.read("xla", entry) if entry is not None else None
    if found is not None:
        metadata, blob = found
        try:
            executable = _client().deserialize_executable(blob, _devices(),
                                                          _compile_options(options))
            return executable, *([tuple(s) for s in metadata[k]]
                                 for k in ("inputs", "results")), \
                {int(r): f for r, f in metadata["same_results"]}
        except Exception as error:  # read back whole, yet PJRT refuses it: compile
            compile_cache.stats["xla corrupt"] += 1
            compile_cache.logger.warning("outofplace compile cache: ignoring the entry "
                                         "%s (%s)", entry, error)
    with progress.stage("xla compile"):
        legalized, inputs, results, same_results = _legalized(stablehlo)
        executable = compile_for_cpu(legalized, options)
    if entry is not None:
        compile_cache.write("xla", entry, {"inputs": inputs, "results": results,
                                           "same_results": sorted(same_results.items())},
                            executable.serialize())
    return executable, inputs, results, same_results


class XlaCompileError(RuntimeError):
    """XLA:CPU rejected the StableHLO outofplace emitted: a bug of outofplace's. The
    message names a file holding the module, to report and reproduce it with."""

    def __init__(self, stablehlo: str, error: Exception) -> None:
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".mlir", prefix="outofplace-xla-",
                                         delete=False) as file:
            file.write(stablehlo)
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        super().__init__(f"internal error: XLA:CPU could not compile the StableHLO "
                         f"outofplace emitted, a bug of outofplace's (please report it "
                         f"with {file.name}): {first}")


# XLA:CPU's copy insertion, by default, copies a donated buffer that the program also reads
# (a slice before or after the update, attention over the whole cache): a copy of the whole
# state every call. Its region analysis proves these reads safe and leaves the update in
# place (docs/backends.md). With excess precision allowed (XLA's default), XLA drops the
# rounding to bfloat16/float16 between two ops (a float32 -> bfloat16 -> float32 convert
# pair), where eager rounds after every op: results differ from eager's in a third of the
# elements of `x * 0.1 + y * 3.3 - 0.2` in bfloat16.
COMPILE_OPTIONS = {"xla_cpu_copy_insertion_use_region_analysis": True,
                   "xla_allow_excess_precision": False}


def _without_misfusion(build: Callable[[dict[str, Any]], Any], options: dict[str, Any]
                       ) -> Any:
    """`build(options)`, or, when its optimized HLO holds the misfusion above,
    `build(options)` with the fusion pass disabled."""
    executable = build(options)
    if not any(_reads_updated_buffer_through_another_alias(module)
               for module in _executable_of(executable).hlo_modules()):
        return executable
    return build({**options, "xla_disable_hlo_passes": "fusion"})


def _executable_of(compiled: Any) -> Any:
    """The loaded executable of a jax `Compiled` (or the executable itself)."""
    runtime = getattr(compiled, "runtime_executable", None)
    return runtime() if runtime is not None else compiled


def _reads_updated_buffer_through_another_alias(module: Any) -> bool:
    """Whether a fused in-place update's buffer is also read through another bitcast of it.

    In a fusion, a dynamic-update-slice or scatter whose operand is (a chain of bitcasts
    of) a parameter writes that parameter's buffer in place. XLA's fusion pass checks the
    other users of that operand itself; users of the parameter or of another bitcast of
    it are reads of the same memory it does not check.
    """
    from jax._src.lib import xla_client

    opcode = xla_client.hlo.HloOpcode
    unfused = {computation.name for computation in module.make_nonfusion_computations()}
    for computation in module.computations():
        if computation.name in unfused:
            continue
        for update in computation.instructions():
            if update.opcode not in (opcode.kDynamicUpdateSlice, opcode.kScatter):
                continue
            target = update.operands()[0]
            path = [target]
            while path[-1].opcode == opcode.kBitcast:
                path.append(path[-1].operands()[0])
            if path[-1].opcode != opcode.kParameter:
                continue
            on_path = {op.name for op in path}
            aliases = list(path[1:])
            while aliases:
                alias = aliases.pop()
                for user in alias.users():
                    if user.name in on_path:
                        continue
                    if user.opcode != opcode.kBitcast:
                        return True
                    aliases.append(user)
    return False


# What a plain consumer needs to keep the exported program's updates in place: its
# default copy insertion copies a donated buffer the program also reads, where XLA cannot
# order the read before the update (openxla/xla#20440, open: an independent read of the
# old value; a read of the new one, into which XLA's fusion duplicates the update, is one
# too). No form of the update avoids it on XLA:CPU 0.10.2 (`bench/exports.py` measures it).
CONSUMER_OPTION = "xla_cpu_copy_insertion_use_region_analysis"
CONSUMER_HINT = (f"{CONSUMER_OPTION}=true keeps it in place "
                 f"(XLA_FLAGS=--{CONSUMER_OPTION}=true, or jax.jit(..., "
                 f"compiler_options={{'{CONSUMER_OPTION}': True}}); openxla/xla#20440)")


def _plain_problems(stablehlo: str, io_map: dict[int, int], options: dict[str, Any]
                    ) -> tuple[list[str], set[int]]:
    """The alias problems and the copied arguments of `stablehlo` compiled as it is, with
    `options` only (no legalization, no misfusion check), on a plain XLA:CPU client."""
    executable = _client().compile_and_load(stablehlo, _devices(), _compile_options(options))
    problems, copied = [], set()
    for module in executable.hlo_modules():
        proto = module.as_serialized_hlo_module_proto()
        problems += hlo_proto.alias_problems(proto, io_map)
        copied |= {a for a in hlo_proto.copied_parameters(proto) if a in io_map}
    return problems, copied


def alias_problems(stablehlo: str, io_map: dict[int, int]) -> list[str]:
    """What a plain XLA:CPU consumer of the exported text does not keep of `io_map`; []
    when it keeps all: compiled as it is with default options, its input_output_alias is
    io_map (each mutated argument's buffer donated to its result) and no `copy` reads a
    donated parameter (XLA keeps no copy of the old value, as it does when the update
    cannot happen in place). A copy says whether `CONSUMER_OPTION` would avoid it. A
    program that copies the state itself (`old = x.clone()`) is reported too: the check
    cannot tell the two copies apart."""
    problems, copied = _plain_problems(stablehlo, io_map, {})
    if copied:
        _, still = _plain_problems(stablehlo, io_map, {CONSUMER_OPTION: True})
    for argument in sorted(copied):
        problems.append(f"argument {argument}: a plain XLA:CPU consumer (default options) "
                        f"copies the donated buffer" +
                        ("" if argument in still else f"; {CONSUMER_HINT}"))
    return problems


def consumer_checks(stablehlo: str, io_map: dict[int, int]) -> list[dict[str, Any]]:
    """Which consumers the exported artifacts were checked on, for `Compiled.save`: a
    plain XLA:CPU client with default options, and with `CONSUMER_OPTION`; each with
    whether every written argument stays in place and what does not."""
    from jax._src.lib import version_str

    checks = []
    for options in ({}, {CONSUMER_OPTION: True}):
        problems, copied = _plain_problems(stablehlo, io_map, options)
        problems += [f"argument {a}: copied" for a in sorted(copied)]
        checks.append({"consumer": f"XLA:CPU (jaxlib {version_str})",
                       "options": options, "in_place": not problems,
                       "problems": problems})
    return checks


# ------------------------------------------------------------ zero-copy calls on torch
# The calling convention. XLA:CPU (PJRT) updates a donated buffer in place only when it
# owns it: a buffer it was handed by DLPack or as a zero-copy view of host memory is
# copied, whole, on every call, and so is a buffer with a DLPack export alive. So XLA owns
# the state and torch looks at XLA's memory: on its first call, each written argument is
# "adopted": copied once into an XLA-owned buffer, and its torch storage re-pointed at that
# buffer (a storage over the buffer's raw address, swapped into the caller's StorageImpl,
# so the tensor and every view of it read and write XLA's memory). Each call donates that
# buffer; XLA writes the update into it and hands it back as the aliased result, at the
# same address. A small read-only argument is copied into a buffer of its own that XLA
# owns and torch views, kept from call to call (a few hundred bytes copied beats making a
# buffer per call); a large one goes in as a zero-copy view of torch memory.
#
# The client is outofplace's own, synchronous: a call returns when XLA has run, which a
# call needs anyway (torch reads the results right after), without handing the work to a
# thread and waiting for it to come back (tens of µs per call on jax's asynchronous one).
_LOCK = threading.RLock()  # calls, adoptions and the holders' arrays change under it
STAGED_BYTES = 1 << 16
# Copies per call under this many bytes in all are not warned of: they cost less than the
# call itself (StaticCache's per-layer counters, 8 bytes each, get one new value and all
# but one are copied). `in_place_report` says them.
WARN_BYTES = 4096  # read-only arguments up to this size go through a kept buffer


# A process that runs its rank of a job's collectives (backends/distributed.py sets it
# when it joins the job): `client` (synchronous, its devices every rank's), `device` (this
# rank's), `sharding` (on it), `devices` (all, in rank order) and `place(CompileOptions)`
# (a replica per rank). Programs compiled and arrays made after it use it; None in a
# lone process.
COLLECTIVES: Any = None


def _client() -> Any:
    return _local_client() if COLLECTIVES is None else COLLECTIVES.client


@functools.cache
def _local_client() -> Any:
    _jax()
    from jax._src.lib import xla_client

    return xla_client.make_cpu_client(asynchronous=False, num_devices=1)


def _device() -> Any:
    return _local_device() if COLLECTIVES is None else COLLECTIVES.device


@functools.cache
def _local_device() -> Any:
    return _local_client().local_devices()[0]


def _sharding() -> Any:
    return _local_sharding() if COLLECTIVES is None else COLLECTIVES.sharding


@functools.cache
def _local_sharding() -> Any:
    return _jax().sharding.SingleDeviceSharding(_local_device())


class _Holder:
    """A jax Array whose memory numpy (so torch) sees: by default as raw bytes, or as
    `shape` elements of `typestr`, `nbytes` in all (`__array_interface__`, no DLPack: an
    export would stop XLA from donating it)."""

    __slots__ = ("array", "ptr", "nbytes", "__array_interface__", "__weakref__")

    def __init__(self, array: Any, shape: tuple[int, ...] | None = None,
                 typestr: str = "|u1", nbytes: int = 0) -> None:
        self.array = array
        self.ptr = array.unsafe_buffer_pointer()
        self.nbytes = array.nbytes if shape is None else nbytes
        if shape is None:
            shape = (self.nbytes,)
        self.__array_interface__ = {"shape": shape, "typestr": typestr,
                                    "data": (self.ptr, False), "version": 3}

    def storage(self) -> torch.UntypedStorage:
        """A torch storage over the memory; it keeps this holder, so the array, alive."""
        return torch.from_numpy(np.asarray(self)).untyped_storage()


_HOLDERS: "weakref.WeakValueDictionary[int, _Holder]" = weakref.WeakValueDictionary()


def _holder_of(tensor: torch.Tensor) -> _Holder | None:
    """The holder whose memory the tensor covers, all of it, or None. (Only storages
    `_re_point` swapped start at a holder's address, so a contiguous tensor starting
    there, of the holder's size, covers the holder's memory.)"""
    holder = _HOLDERS.get(tensor.data_ptr())
    if holder is not None and tensor.is_contiguous() and not tensor.is_neg() and \
            tensor.nbytes == holder.nbytes:
        return holder
    return None


def _covers_storage(tensor: torch.Tensor) -> bool:
    return tensor.is_contiguous() and tensor.storage_offset() == 0 and \
        tensor.untyped_storage().nbytes() == tensor.nbytes


def why_not_adoptable(tensor: torch.Tensor) -> str | None:
    """Why XLA cannot take over a written argument's memory, or None when it can."""
    if tensor.device.type != "cpu":
        return f"on {tensor.device}, not the CPU"
    if tensor.numel() == 0:
        return "empty"
    if tensor.is_neg():
        return "a lazily negated view (its memory holds the negation of its values)"
    if not tensor.is_contiguous():
        return "not contiguous"
    if not _covers_storage(tensor):
        return "a view into a larger storage"
    if tensor.untyped_storage().is_shared():
        return "in shared memory"
    if not tensor.untyped_storage().resizable() and not _is_result(tensor):
        return "memory another owner allocated (numpy, DLPack, a memory map)"
    return None


# The holders of the XLA buffers the result tensors outofplace made cover, by address (the
# C++ planned calls keep theirs: `is_result_buffer`). A result written by a later program
# (a cache a prefill program created, written by the decode program) is memory no one
# else sees: it is taken over as a torch allocation is.
_RESULTS: "weakref.WeakValueDictionary[int, _Holder]" = weakref.WeakValueDictionary()


def _is_result(tensor: torch.Tensor) -> bool:
    address = tensor.untyped_storage().data_ptr()
    built = extension()
    return address in _RESULTS or (built is not None and built.is_result_buffer(address))


def _re_point(tensor: torch.Tensor, holder: _Holder) -> None:
    """The tensor's storage (so every view of it) now reads and writes holder's memory."""
    tensor.untyped_storage()._swap_data_ptr_(holder.storage())
    _HOLDERS[holder.ptr] = holder


def _put(host: np.ndarray, semantics: str = "IMMUTABLE_ONLY_DURING_CALL") -> Any:
    """A jax Array on outofplace's device holding `host`: a copy XLA owns (donatable), or
    with "ZERO_COPY" a view of host's memory when it is aligned (XLA copies it if not).
    (jax.device_put and DLPack alias aligned host memory, even when asked for a copy; a
    forced copy is asked for with any other semantics, and only then: forced, ZERO_COPY
    copies too, 22 ms for a 46 MB weight.)"""
    from jax._src.lib import xla_client

    return xla_client.batched_device_put(
        _jax().core.ShapedArray(host.shape, host.dtype), _sharding(), [host], [_device()],
        True, semantics != "ZERO_COPY", getattr(xla_client.HostBufferSemantics, semantics))


def _owned_copy(tensor: torch.Tensor) -> Any:
    """An XLA-owned, donatable copy of a tensor."""
    return _put(_host(tensor.contiguous()))


class _Memory:
    """A contiguous tensor's memory as numpy sees it, by address. (`Tensor.numpy()` would
    mark the storage non-resizable, which is how `why_not_adoptable` tells memory that
    numpy or another owner shares.)"""

    __slots__ = ("tensor", "__array_interface__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.__array_interface__ = {
            "shape": (tensor.nbytes,), "typestr": "|u1",
            "data": (tensor.data_ptr(), False), "version": 3}


def _host(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous CPU tensor's values (bfloat16 as ml_dtypes'): of its
    memory, or of a copy where the memory holds their negation (a lazily negated view,
    `torch._neg_view`)."""
    dtype = _numpy_dtype(tensor.dtype)
    if tensor.numel() == 0:
        return np.empty(tuple(tensor.shape), dtype)
    values = tensor.detach().resolve_neg()
    return np.asarray(_Memory(values)).view(dtype).reshape(tuple(tensor.shape))


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    if dtype == torch.bfloat16:
        import ml_dtypes  # a dependency of jax

        return np.dtype(ml_dtypes.bfloat16)
    return torch.empty((), dtype=dtype).numpy().dtype


class _Viewer:
    """Turns a result array of one shape and dtype into a tensor over XLA's buffer, with
    no copy (the tensor keeps the array): its numpy interface made once, ahead of calls."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.shape, self.dtype = shape, dtype
        self.empty = math.prod(shape) == 0
        # numpy has no bfloat16: such results are read as integers of their size
        self.as_dtype = dtype == torch.bfloat16
        self.typestr = "<i2" if self.as_dtype else _numpy_dtype(dtype).str
        self.nbytes = math.prod(shape) * dtype.itemsize

    def __call__(self, array: Any) -> torch.Tensor:
        if self.empty:
            return torch.empty(self.shape, dtype=self.dtype)
        holder = _Holder(array, self.shape, self.typestr, self.nbytes)
        _RESULTS[holder.ptr] = holder
        tensor = torch.from_numpy(np.asarray(holder))
        return tensor.view(self.dtype) if self.as_dtype else tensor


def _tensor_over(array: Any, dtype: torch.dtype) -> torch.Tensor:
    """A tensor over an array's buffer, no copy (the tensor keeps the array)."""
    return _Viewer(tuple(array.shape), dtype)(array)


class _Stage:
    """The kept, XLA-owned buffer a small read-only argument is copied into at each call,
    and the tensor over it."""

    __slots__ = ("array", "tensor", "ptr", "nbytes")

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.array = _owned_copy(torch.zeros(shape, dtype=dtype))
        self.tensor = _Viewer(shape, dtype)(self.array) if math.prod(shape) else None
        self.ptr = self.array.unsafe_buffer_pointer()
        self.nbytes = math.prod(shape) * dtype.itemsize

    def __call__(self, tensor: torch.Tensor) -> Any:
        if self.tensor is None:
            return self.array
        if tensor.is_contiguous() and not tensor.is_neg():  # its bytes are its values
            ctypes.memmove(self.ptr, tensor.data_ptr(), self.nbytes)
        else:
            self.tensor.copy_(tensor.detach() if tensor.requires_grad else tensor)
        return self.array


class CallFailed(RuntimeError):
    """A call that failed after XLA had run: says which arguments hold new values."""


class CpuExecutable:
    """A StableHLO module compiled once for XLA:CPU, called on torch tensors in place:
    written arguments are updated in their own memory, nothing is copied in or out
    (see the calling convention above; `report` says where a copy remains)."""

    def __init__(self, stablehlo: str, names: list[str], io_map: dict[int, int],
                 inputs: list[tuple[tuple[int, ...], torch.dtype]],
                 results: list[tuple[tuple[int, ...], torch.dtype]],
                 options: dict[str, Any] = COMPILE_OPTIONS, *, cache: bool | None = None
                 ) -> None:
        from jax._src.lib import xla_client

        self.names, self.io_map = names, io_map
        self.donated = sorted(io_map)
        self.input_bytes = [math.prod(s) * d.itemsize for s, d in inputs]
        self.executable, input_shapes, result_shapes, same_results = \
            cached_compile_for_cpu(stablehlo, options, cache)
        # The shape XLA takes each written argument in (its unit dimensions dropped).
        self._squeezed = {i: input_shapes[i] for i in self.donated
                          if input_shapes[i] != tuple(inputs[i][0])}
        self._viewers = [_Viewer(s, d) for s, d in results]
        # What makes each result a jax Array, in C++
        # (`disassemble_into_single_device_arrays` makes them in Python: µs a call).
        self._handlers = [xla_client.array_result_handler(
            _jax().core.ShapedArray(s, _numpy_dtype(d)), _sharding(), committed=True,
            _skip_checks=True) for s, (_, d) in zip(result_shapes, results)]
        self._stages = {i: _Stage(s, d) for i, (s, d) in enumerate(inputs)
                        if i not in io_map and self.input_bytes[i] <= STAGED_BYTES}
        self._zero_copied = [i for i in range(len(inputs))
                             if i not in io_map and i not in self._stages]
        # Per large read-only argument, the address of the memory the last call viewed
        # and XLA's view of it: a weight passed again is not put again (a 148M decoder's
        # hundred weights cost 3 ms a call to put).
        self._views: dict[int, tuple[int, Any]] = {}
        aliased = set(io_map.values())
        self._unaliased = [r for r in range(len(results)) if r not in aliased]
        copied = set().union(*(hlo_proto.copied_parameters(
            m.as_serialized_hlo_module_proto(), io_map)
            for m in self.executable.hlo_modules())) & io_map.keys()
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
        return self.executable.execute_sharded(arguments).consume_with_handlers(
            self._handlers)

    def __call__(self, inputs: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """Runs the program: written arguments hold their new values after it. Returns
        one entry per result, None for a result aliased with an argument (the caller's
        tensor is that result)."""
        with _LOCK:
            return self._run(inputs)

    def run_adopted(self, inputs: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
        """`self(inputs)` when every written argument is XLA's already (adopted by an
        earlier call) and no other argument starts in its memory: as an adopted argument
        covers all of its storage, none shares memory with it. Else None, nothing done
        (the caller takes the general path, which checks and adopts)."""
        with _LOCK:
            holders = []
            for i in self.donated:
                holder = _holder_of(inputs[i])
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
            return _put(_host(tensor.contiguous()), "ZERO_COPY")
        array = _put(_host(tensor), "ZERO_COPY")
        self._views[i] = (address, array)
        return array

    def _run(self, inputs: list[torch.Tensor], holders: list[_Holder] | None = None
             ) -> list[torch.Tensor | None]:
        """Runs the program; `holders`, when given, are the written arguments' (else each
        is found, adopted or copied here)."""
        arguments: list[Any] = [None] * len(inputs)
        for i, stage in self._stages.items():
            arguments[i] = stage(inputs[i])
        for i in self._zero_copied:
            arguments[i] = self._zero_copy(i, inputs[i])
        adopted: dict[int, _Holder] = {}
        copied: list[int] = []
        for n, i in enumerate(self.donated):
            tensor = inputs[i]
            holder = _holder_of(tensor) if holders is None else holders[n]
            if holder is None:
                why = why_not_adoptable(tensor)
                shape = self._squeezed.get(i, tensor.shape)
                if why is None:
                    holder = _Holder(_owned_copy(tensor.view(shape)))  # the only copy, ever
                    _re_point(tensor, holder)
                else:
                    self._copied(i, 2 * self.input_bytes[i], f"it is {why}")
                    copied.append(i)
                    arguments[i] = _owned_copy(tensor.contiguous().view(shape))
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
            for r in self._unaliased:
                out[r] = self._viewers[r](results[r])
            return out
        except Exception as error:
            self._failed_after(done, error)
            raise

    def _moved(self, i: int, tensor: torch.Tensor, result: Any) -> None:
        """XLA wrote argument i's new value elsewhere: its storage follows the new buffer."""
        _re_point(tensor, _Holder(result))
        self.report[self.names[i]] = "in place, though XLA returned it in a new buffer"

    def _execute_failed(self, inputs: list[torch.Tensor], adopted: dict[int, _Holder],
                        error: Exception) -> None:
        """After XLA failed: raises CallFailed naming the written arguments whose buffers
        it took (their memory re-pointed at zeros), or returns when it took none."""
        lost = [i for i, h in adopted.items() if h.array.is_deleted()]
        for i in lost:  # XLA took the buffer: the memory may be gone
            zeros = torch.zeros(self._squeezed.get(i, inputs[i].shape), dtype=inputs[i].dtype)
            _re_point(inputs[i], _Holder(_owned_copy(zeros)))
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


@dataclass(frozen=True)
class CallPlan:
    """Everything a planned call reads of a CpuExecutable, built once by Python
    (`call_plan`): planned_call.cpp reads these fields by name and nothing else of
    outofplace's (test_xla.py checks each name it reads is a field here), so a rename
    in Python fails that test, not the first planned call."""

    executable: Any  # the CpuExecutable; its `executable.execute_sharded` is read per call
    layouts: tuple  # per argument, (dtype, shape, strides, storage offset) of the plan
    written: tuple[int, ...]  # arguments the program writes: none may require grad
    donated: tuple[int, ...]  # written arguments whose XLA buffers are donated
    aliased: tuple[int, ...]  # per donated argument, the result it comes back as
    stages: tuple  # (argument, _Stage): a small read-only argument's kept buffer
    zero_copied: tuple[int, ...]  # large read-only arguments, viewed by `zero_copy`
    unaliased: tuple[int, ...]  # results that become tensors over XLA's buffers
    viewers: tuple  # per result, its _Viewer (`shape`, `dtype`)
    handlers: Any  # per result, what makes it a jax Array (consume_with_handlers)
    zero_copy: Callable[[int, torch.Tensor], Any]  # CpuExecutable._zero_copy
    execute_failed: Callable[..., None]  # after XLA failed: raises CallFailed, or returns
    failed_after: Callable[..., None]  # a failure after XLA ran: raises CallFailed
    moved: Callable[..., None]  # XLA returned a donated buffer elsewhere: re-points
    lock: Any  # `_LOCK`: calls, adoptions and the holders' arrays change under it
    holder_at: Callable[[int], Any]  # address -> the _Holder of XLA's buffer there, or None


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
        moved=executable._moved, lock=_LOCK, holder_at=_HOLDERS.get)


def planned_call(executable: CpuExecutable, layouts: list[tuple], written: list[int]
                 ) -> Callable[[Any], list[torch.Tensor | None] | None]:
    """A call of `executable` for arguments in `layouts` ((dtype, shape, strides, storage
    offset) each), `written` ones not requiring grad: it returns the results as
    `executable(inputs)` does, or None, having changed nothing, when the arguments do
    not look like that, a written one is not XLA's already (`run_adopted`) or is an
    inference tensor outside inference mode. In C++ (planned_call.cpp) when the
    extension is built, else its Python twin; both read the `CallPlan` only."""
    plan = call_plan(executable, layouts, written)
    built = extension()
    if built is None:  # not built: the same checks in Python
        return _PlannedCall(plan)
    return built.PlannedCall(plan)


@functools.cache
def extension() -> Any:
    """The C++ planned calls (planned_call.cpp, sharded_call.cpp), or None when the
    extension is not built (setup.py)."""
    try:
        from . import _planned_call
    except ImportError:
        return None
    return _planned_call


class _PlannedCall:
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


def _named(names: list[str], indices: list[int]) -> str:
    if not indices:
        return "no argument"
    return "arguments " + ", ".join(f"'{names[i]}'" for i in indices)
