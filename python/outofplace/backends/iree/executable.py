"""Running a compiled vmfb in the caller's tensors: the executable `compile` returns.

Calls import the caller's tensors as IREE buffers without a copy (the local device's
memory is host memory), so a written argument IREE updates in place is updated in the
caller's own tensor; a tensor IREE cannot import (not contiguous, not 64-byte aligned),
or one the engine passes as a copy (`outofplace-iree-copy-written-inputs`), goes through
a copy, and the call copies the new value back. Results come back through DLPack, also
without a copy.

One VmInstance and one device per process, never freed: a result tensor keeps its IREE
buffer, and releasing a buffer after its device is gone crashes the process.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

DRIVER = "local-sync"  # the calling thread runs the program: no thread pool next to torch's
_ALIGNMENT = 64  # what IREE requires of an imported host buffer
_DLPACK_CPU = 1
_ELEMENT_TYPES = {
    torch.float32: "FLOAT_32", torch.float64: "FLOAT_64", torch.float16: "FLOAT_16",
    torch.bfloat16: "BFLOAT_16", torch.int64: "SINT_64", torch.int32: "SINT_32",
    torch.int16: "SINT_16", torch.int8: "SINT_8", torch.uint8: "UINT_8",
    torch.bool: "BOOL_8", torch.complex64: "COMPLEX_64", torch.complex128: "COMPLEX_128"}


class Executable:
    """A StableHLO module compiled once for IREE's llvm-cpu backend (`compile`).

    `io_map` is the module's {written argument: result}; `alias_problems` what the
    stream-phase program does not prove of it; `passthrough` the results that are an
    argument as it came ({result: (argument, shape)}), which the vmfb does not return;
    `copied` the arguments passed as copies."""

    def __init__(self, vmfb: bytes, io_map: dict[int, int], result_dtypes: list[torch.dtype],
                 alias_problems: list[str], passthrough: dict[int, tuple[int, list[int]]],
                 copied: set[int]) -> None:
        self.vmfb, self.io_map, self.alias_problems = vmfb, dict(io_map), alias_problems
        self.result_dtypes = list(result_dtypes)
        self._passthrough, self._scratch = passthrough, copied
        rt, instance, device = _runtime()
        module = rt.VmModule.copy_buffer(instance, self.vmfb)
        self._context = rt.VmContext(instance, [rt.create_hal_module(instance, device),
                                                module])
        self._main = module.lookup_function("main")

    def __call__(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Runs `main` and leaves each written argument's new value in the caller's
        tensor (IREE's update in place, else a copy back). A written argument's result is
        that tensor itself (backends/engines.py); every other result owns its memory."""
        results = self._run(inputs)
        with torch.no_grad():
            for argument, result in self.io_map.items():
                if results[result] is not inputs[argument]:
                    inputs[argument].copy_(results[result])
                    results[result] = inputs[argument]
        return results

    def _run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        rt, _, device = _runtime()
        result_dtypes = self.result_dtypes
        # Results that are an argument as it came: its value before the call.
        passed = {result: inputs[argument].detach().clone().reshape(shape)
                  for result, (argument, shape) in self._passthrough.items()}
        imported, views = zip(*(_import(t, copy=i in self._scratch)
                                for i, t in enumerate(inputs))) if inputs else ((), ())
        arguments = rt.VmVariantList(len(views))
        for view in views:
            arguments.push_ref(view.ref)
        outputs = rt.VmVariantList(len(result_dtypes))
        self._context.invoke(self._main, arguments, outputs)
        returned = iter(range(len(result_dtypes) - len(passed)))
        results = [passed[i] if i in passed else
                   _to_torch(outputs.get_as_object(next(returned), rt.HalBufferView), dtype)
                   for i, dtype in enumerate(result_dtypes)]
        in_place = {result: argument for argument, result in self.io_map.items()
                    if result not in passed and inputs[argument].numel()
                    and imported[argument].data_ptr() == inputs[argument].data_ptr()
                    and results[result].data_ptr() == inputs[argument].data_ptr()}
        # IREE's result buffers do not keep an imported copy alive: results in it, or in
        # an input, are cloned.
        taken = [_span(t) for t in (*inputs, *imported) if t.numel()]
        for index, tensor in enumerate(results):
            if index in in_place:
                results[index] = inputs[in_place[index]]
                continue
            start, end = _span(tensor)
            if index not in passed and tensor.numel() and \
                    any(start < e and s < end for s, e in taken):
                tensor = tensor.clone()  # never a view of an input or another result
                start, end = _span(tensor)
            taken.append((start, end))
            results[index] = tensor if tensor.dtype == result_dtypes[index] \
                else tensor.to(result_dtypes[index])
        return results


@functools.cache
def _runtime() -> tuple[Any, Any, Any]:
    """(iree.runtime, the VmInstance, the device): one of each per process, never freed."""
    import iree.runtime as rt

    return rt, rt.VmInstance(), rt.get_driver(DRIVER).create_default_device()


def _importable(tensor: torch.Tensor) -> bool:
    """Whether IREE can take the tensor's memory as its values (not a lazily negated
    view, whose memory holds their negation)."""
    return tensor.device.type == "cpu" and tensor.is_contiguous() and \
        not tensor.is_neg() and tensor.data_ptr() % _ALIGNMENT == 0


def _import(tensor: torch.Tensor, copy: bool = False) -> tuple[torch.Tensor, Any]:
    """(the tensor IREE reads and writes, its buffer view): the tensor itself when IREE can
    import its memory and `copy` is not asked for, else a contiguous copy. (A DLPack import would do for reading, but
    IREE cannot discard-write such a buffer, which it does to a consumed argument.)"""
    rt, _, device = _runtime()
    data = tensor.detach()
    if copy or not _importable(data):
        data = torch.empty_like(data, memory_format=torch.contiguous_format).copy_(data)
    buffer = device.allocator.import_host_allocation(
        # contiguous: its elements are dense, whatever the stride of a size-1 dimension
        data.as_strided((data.numel(),), (1,)).view(torch.uint8).numpy(),
        rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE, rt.BufferUsage.DEFAULT)
    element = getattr(rt.HalElementType, _ELEMENT_TYPES[data.dtype])
    return data, rt.HalBufferView(buffer, list(data.shape), element)


def _to_torch(view: Any, dtype: torch.dtype) -> torch.Tensor:
    """A result as a tensor on its IREE buffer (DLPack); booleans, which torch misreads
    through IREE's DLPack export, as a copy of their bytes."""
    _, _, device = _runtime()
    if dtype == torch.bool:
        import numpy as np

        data = view.map().asarray(list(view.shape), np.dtype(np.uint8))
        return torch.from_numpy(np.array(data)).view(torch.bool)
    return torch.from_dlpack(device.create_dlpack_capsule(view, _DLPACK_CPU, 0))


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    return tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()

