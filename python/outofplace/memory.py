"""Which bytes of its storage a tensor, real or fake, covers, and whether two tensors
share one: read by the frontend on fake values (what aliases what in the trace) and by
every call on the caller's tensors (signature.py: a written argument sharing memory with
another is refused).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef


def storage_of(value: Any) -> StorageWeakRef | None:
    if isinstance(value, torch.Tensor):
        return StorageWeakRef(value.untyped_storage())
    return None


def element_offsets(value: torch.Tensor) -> torch.Tensor:
    """The storage offset of every element of a (fake) tensor, from its metadata."""
    addresses = torch.tensor(value.storage_offset())
    for dim, (size, stride) in enumerate(zip(value.shape, value.stride())):
        shape = [1] * value.dim()
        shape[dim] = int(size)
        addresses = addresses + torch.arange(int(size)).view(shape) * int(stride)
    return addresses.reshape(-1)


# Above this many elements the exact overlap test is not run and overlap is assumed.
_OVERLAP_TEST_LIMIT = 1 << 24


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two (real or fake) tensors share a byte of memory; assumed when too large
    to test exactly."""
    if a.numel() == 0 or b.numel() == 0 or storage_of(a) != storage_of(b):
        return False

    def byte_range(t: torch.Tensor) -> tuple[int, int]:
        last = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
        return t.storage_offset() * t.itemsize, (last + 1) * t.itemsize

    (a_start, a_end), (b_start, b_end) = byte_range(a), byte_range(b)
    if a_end <= b_start or b_end <= a_start:
        return False
    if a.itemsize != b.itemsize or a.numel() + b.numel() > _OVERLAP_TEST_LIMIT:
        return True
    return bool(torch.isin(element_offsets(a), element_offsets(b)).any())
