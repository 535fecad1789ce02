"""The memory between torch and XLA:CPU: how a written argument's memory becomes XLA's
(adopted, `Holder`, `re_point`), how a read-only one goes in (`put`, `Stage`) and how a
result becomes a tensor over XLA's buffer (`Viewer`), with no copy."""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from typing import Any

import numpy as np
import torch

from .client import device, device_sharding, extension, load_jax

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
LOCK = threading.RLock()  # calls, adoptions and the holders' arrays change under it
STAGED_BYTES = 1 << 16
# Copies per call under this many bytes in all are not warned of: they cost less than the
# call itself (StaticCache's per-layer counters, 8 bytes each, get one new value and all
# but one are copied). `in_place_report` says them.
WARN_BYTES = 4096  # read-only arguments up to this size go through a kept buffer


class Holder:
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


HOLDERS: "weakref.WeakValueDictionary[int, Holder]" = weakref.WeakValueDictionary()


def holder_of(tensor: torch.Tensor) -> Holder | None:
    """The holder whose memory the tensor covers, all of it, or None. (Only storages
    `re_point` swapped start at a holder's address, so a contiguous tensor starting
    there, of the holder's size, covers the holder's memory.)"""
    holder = HOLDERS.get(tensor.data_ptr())
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
_RESULTS: "weakref.WeakValueDictionary[int, Holder]" = weakref.WeakValueDictionary()


def _is_result(tensor: torch.Tensor) -> bool:
    address = tensor.untyped_storage().data_ptr()
    built = extension()
    return address in _RESULTS or (built is not None and built.is_result_buffer(address))


def re_point(tensor: torch.Tensor, holder: Holder) -> None:
    """The tensor's storage (so every view of it) now reads and writes holder's memory."""
    tensor.untyped_storage()._swap_data_ptr_(holder.storage())
    HOLDERS[holder.ptr] = holder


def put(host: np.ndarray, semantics: str = "IMMUTABLE_ONLY_DURING_CALL") -> Any:
    """A jax Array on outofplace's device holding `host`: a copy XLA owns (donatable), or
    with "ZERO_COPY" a view of host's memory when it is aligned (XLA copies it if not).
    (jax.device_put and DLPack alias aligned host memory, even when asked for a copy; a
    forced copy is asked for with any other semantics, and only then: forced, ZERO_COPY
    copies too, 22 ms for a 46 MB weight.)"""
    from jax._src.lib import xla_client

    return xla_client.batched_device_put(
        load_jax().core.ShapedArray(host.shape, host.dtype), device_sharding(), [host], [device()],
        True, semantics != "ZERO_COPY", getattr(xla_client.HostBufferSemantics, semantics))


def owned_copy(tensor: torch.Tensor) -> Any:
    """An XLA-owned, donatable copy of a tensor."""
    return put(host(tensor.contiguous()))


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


def host(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous CPU tensor's values (bfloat16 as ml_dtypes'): of its
    memory, or of a copy where the memory holds their negation (a lazily negated view,
    `torch._neg_view`)."""
    dtype = numpy_dtype(tensor.dtype)
    if tensor.numel() == 0:
        return np.empty(tuple(tensor.shape), dtype)
    values = tensor.detach().resolve_neg()
    return np.asarray(_Memory(values)).view(dtype).reshape(tuple(tensor.shape))


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    if dtype == torch.bfloat16:
        import ml_dtypes  # a dependency of jax

        return np.dtype(ml_dtypes.bfloat16)
    return torch.empty((), dtype=dtype).numpy().dtype


class Viewer:
    """Turns a result array of one shape and dtype into a tensor over XLA's buffer, with
    no copy (the tensor keeps the array): its numpy interface made once, ahead of calls."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.shape, self.dtype = shape, dtype
        self.empty = math.prod(shape) == 0
        # numpy has no bfloat16: such results are read as integers of their size
        self.as_dtype = dtype == torch.bfloat16
        self.typestr = "<i2" if self.as_dtype else numpy_dtype(dtype).str
        self.nbytes = math.prod(shape) * dtype.itemsize

    def __call__(self, array: Any) -> torch.Tensor:
        if self.empty:
            return torch.empty(self.shape, dtype=self.dtype)
        holder = Holder(array, self.shape, self.typestr, self.nbytes)
        _RESULTS[holder.ptr] = holder
        tensor = torch.from_numpy(np.asarray(holder))
        return tensor.view(self.dtype) if self.as_dtype else tensor


def tensor_over(array: Any, dtype: torch.dtype) -> torch.Tensor:
    """A tensor over an array's buffer, no copy (the tensor keeps the array)."""
    return Viewer(tuple(array.shape), dtype)(array)


class Stage:
    """The kept, XLA-owned buffer a small read-only argument is copied into at each call,
    and the tensor over it."""

    __slots__ = ("array", "tensor", "ptr", "nbytes")

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.array = owned_copy(torch.zeros(shape, dtype=dtype))
        self.tensor = Viewer(shape, dtype)(self.array) if math.prod(shape) else None
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
