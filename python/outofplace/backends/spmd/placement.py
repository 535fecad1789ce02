"""How an argument lies on the mesh and moves between the host and the devices: its
placement (a shard per device, `Placement`), the kept buffers a small read-only argument
is copied into (`Stage`), and a written argument's state left on the devices by the last
call (`Resident`)."""

from __future__ import annotations

import ctypes
import functools
import math
import weakref
from typing import Any

import numpy as np
import torch

from .. import xla

# Where a call wrote a state (writes.py): the caller's tensor or a view of it, the
# region, and its new value, or None to read it from the devices' new shards.
Region = tuple[torch.Tensor, tuple[slice, ...], "torch.Tensor | None"]


class Resident:
    """A written argument's value on the devices, for the caller's tensor as the call
    that made it left the tensor: the same tensor, memory and version counter (torch
    counts every in-place write to a tensor and its views there)."""

    __slots__ = ("tensor", "array", "version", "pointer")

    def __init__(self, tensor: torch.Tensor, array: Any, table: dict, key: tuple) -> None:
        self.tensor = weakref.ref(tensor, lambda _: table.pop(key, None))
        self.array, self.version, self.pointer = array, _version(tensor), tensor.data_ptr()

    def holds(self, tensor: torch.Tensor) -> bool:
        return (self.tensor() is tensor and not self.array.is_deleted()
                and self.version == _version(tensor) and self.pointer == tensor.data_ptr())


def tracked(tensor: torch.Tensor) -> bool:
    """Whether every write to the tensor's memory counts in its version: not when NumPy,
    DLPack or a memory map shares the memory (its storage is then not resizable), another
    process (shared memory), or when it is an inference tensor (no version counter). Such
    a tensor is copied to the devices on every call."""
    storage = tensor.untyped_storage()
    return _version(tensor) is not None and storage.resizable() and not storage.is_shared()


def _version(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # an inference tensor counts no versions
        return None


class Placement:
    """How an argument lies on the mesh: its sharding, and each device's slice."""

    def __init__(self, sharding: Any, shape: tuple[int, ...]) -> None:
        self.sharding, self.shape = sharding, shape
        indices = sharding.devices_indices_map(shape)
        self.devices = list(indices)
        self.slices = [tuple(slice(*s.indices(n)[:2]) for s, n in zip(indices[d], shape))
                       for d in self.devices]
        # A jax Array's per-device arrays (`_arrays`) are in the sharding's device order:
        # each one's slice, and the positions of the distinct ones (a replicated axis
        # holds the same shard twice)
        held = dict(zip(self.devices, self.slices))
        self.held = [held[d] for d in sharding._addressable_device_assignment]
        first: dict[tuple, int] = {}
        for position, slices in enumerate(self.held):
            first.setdefault(tuple((s.start, s.stop) for s in slices), position)
        self.distinct = sorted(first.values())
        self.boxes = [[(s.start, s.stop) for s in slices] for slices in self.held]
        self._views: dict[int, tuple[int, np.ndarray]] = {}  # position -> (address, view)

    def put(self, host: np.ndarray, owned: bool) -> Any:
        """The array on the devices, a shard each: in buffers XLA owns (copies), or over
        `host` where XLA can read it in place (aligned, contiguous pieces)."""
        jax = xla.load_jax()
        from jax._src.lib import xla_client

        semantics = xla_client.HostBufferSemantics
        pieces, seen = [], set()
        for where in self.slices:
            piece = _contiguous(host[where + (...,)])
            key = tuple((s.start, s.stop) for s in where)
            if owned and key in seen and piece.size != host.size:
                # jaxlib 0.10.2 copying one piece of host memory that is not a whole
                # array to two devices fails with "bad_function_call" (a state
                # replicated over a mesh axis, split on its first dimension over
                # another): each device after the first gets a copy of its own
                piece = piece.copy()
            seen.add(key)
            pieces.append(piece)
        array = xla_client.batched_device_put(
            jax.core.ShapedArray(self.shape, host.dtype), self.sharding, pieces,
            self.devices, True, owned, semantics.IMMUTABLE_ONLY_DURING_CALL if owned
            else semantics.ZERO_COPY)
        if owned:
            array.block_until_ready()
        return array

    def copy_in(self, tensor: torch.Tensor, shards: list[Any], regions: list[Region]
                ) -> None:
        """Writes each region into the caller's tensor, in order: its value, or (a region
        of the tensor itself) the part of each device's new shard (`shards`: an array's
        `_arrays`) that holds it, copied by NumPy (a few µs a piece, a third of torch's
        indexing and copy); torch counts the write in the tensor's version."""
        host = None  # the caller's tensor as NumPy sees it, made when first needed
        for target, where, value in regions:
            if value is not None:
                with torch.no_grad():
                    target[where].copy_(value)
                continue
            if host is None:
                if tensor.numel() == 0:
                    continue
                host = array_at(tensor.data_ptr(), tuple(tensor.shape), tensor.dtype,
                              tuple(s * tensor.element_size() for s in tensor.stride()))
            for position in self.distinct:
                box = self.boxes[position]
                common = [(max(w.start, a), min(w.stop, b)) for w, (a, b) in zip(where, box)]
                if all(lo < hi for lo, hi in common):
                    values = self._view(position, shards[position], tensor.dtype)[tuple(
                        slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(common, box))]
                    # a lazily negated tensor's bytes are its values negated
                    host[tuple(slice(lo, hi) for lo, hi in common)] = \
                        -values if tensor.is_neg() else values
        torch.autograd.graph.increment_version(tensor)

    def _view(self, position: int, shard: Any, dtype: torch.dtype) -> np.ndarray:
        """A NumPy view of a device's shard, made once per address: a donated state's new
        shard is the old one's buffer. The view owns nothing: it is read only while the
        shard at its address is alive (during the call that returned it)."""
        address = shard.unsafe_buffer_pointer()
        kept = self._views.get(position)
        if kept is None or kept[0] != address:
            shape = tuple(b - a for a, b in self.boxes[position])
            kept = self._views[position] = (address, array_at(address, shape, dtype))
        return kept[1]


class Stage:
    """A small read-only argument's kept buffers on the devices, XLA's own (a shard
    each), which each call copies the caller's tensor into: no new device arrays per
    call (as xla.buffers.Stage on one device). Calls hold the engine's lock and wait for the
    program, so no call reads them while the next one writes."""

    def __init__(self, placement: Placement, dtype: torch.dtype) -> None:
        self.array = placement.put(np.zeros(placement.shape, xla.buffers.numpy_dtype(dtype)),
                                   owned=True)
        shards = self.array._arrays
        self.whole = all(tuple(s.stop - s.start for s in slices) == placement.shape
                         for slices in placement.held)  # replicated: every device all
        self.addresses = [a.unsafe_buffer_pointer() for a in shards]
        self.nbytes = math.prod(placement.shape) * dtype.itemsize
        # tensors over each device's buffer (they keep the array), and its slice
        self.views = [(xla.buffers.tensor_over(a, dtype), slices)
                      for a, slices in zip(shards, placement.held)]

    def __call__(self, tensor: torch.Tensor) -> Any:
        if self.whole and tensor.is_contiguous() and not tensor.is_neg() \
                and not tensor.is_conj():  # its bytes are its values
            source = tensor.data_ptr()
            for address in self.addresses:
                ctypes.memmove(address, source, self.nbytes)
        else:
            with torch.no_grad():
                for view, slices in self.views:
                    view.copy_(tensor[slices])
        return self.array


def array_at(address: int, shape: tuple[int, ...], dtype: torch.dtype,
           strides: tuple[int, ...] | None = None) -> np.ndarray:
    """A NumPy view of memory at an address, which it does not own (bfloat16 as its
    bits)."""
    return np.asarray(Address(address, shape, _typestr(dtype), strides))


@functools.cache
def _typestr(dtype: torch.dtype) -> str:
    return "<u2" if dtype == torch.bfloat16 else xla.buffers.numpy_dtype(dtype).str


class Address:
    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, shape: tuple[int, ...], typestr: str,
                 strides: tuple[int, ...] | None = None) -> None:
        self.__array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                    "data": (address, False), "version": 3}


def _contiguous(array: np.ndarray) -> np.ndarray:
    return array if array.flags.c_contiguous else array.copy(order="C")

