"""Which bytes of its storage a tensor, real or fake, covers, whether two tensors share
one and whether one views the other's elements: read by the frontend on fake values
(what aliases what in the trace) and by every call on the caller's tensors (signature.py:
arguments viewing another are taken from it, a written argument sharing memory otherwise
is refused).
"""

from __future__ import annotations

import functools
import math
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


def end_of(value: torch.Tensor) -> int:
    """One past the last storage element a tensor's layout reaches (its storage offset
    when it has no elements)."""
    return value.storage_offset() + (sum(
        (n - 1) * st for n, st in zip(value.shape, value.stride())) + 1 if value.numel() else 0)


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


def symbolic(tensor: torch.Tensor) -> bool:
    """Whether a (fake) tensor's sizes or strides are symbolic (dynamic shapes)."""
    return any(isinstance(d, torch.SymInt) for d in (*tensor.shape, *tensor.stride()))


def view_layout(view: Any, base: Any) -> tuple | None:
    """Where `view` sits in `base`'s memory, (size, stride, storage offset, base's size,
    stride and storage offset), when base is of view's dtype and each element of view is
    an element of base; else None."""
    if not (isinstance(view, torch.Tensor) and isinstance(base, torch.Tensor)) or \
            symbolic(view) or symbolic(base) or not view.numel() or \
            view.dtype != base.dtype or \
            view.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():
        return None
    layout = (tuple(view.shape), view.stride(), view.storage_offset(),
              tuple(base.shape), base.stride(), base.storage_offset())
    return layout if within(layout) else None


@functools.lru_cache(maxsize=256)
def within(layout: tuple) -> bool:
    """Whether every element of the first strided layout (size, stride, offset) is an
    element of the second."""
    def extent(size: tuple, stride: tuple, offset: int) -> tuple[int, int]:
        return offset, offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1

    def offsets(size: tuple, stride: tuple, offset: int) -> torch.Tensor:
        addresses = torch.tensor(offset)
        for dim, (n, s) in enumerate(zip(size, stride)):
            shape = [1] * len(size)
            shape[dim] = n
            addresses = addresses + torch.arange(n).view(shape) * s
        return addresses.reshape(-1)

    view, base = layout[:3], layout[3:]
    (start, end), (first, last) = extent(*base), extent(*view)
    if min(view[1], default=0) < 0 or min(base[1], default=0) < 0 or \
            not start <= first <= last <= end:
        return False
    if math.prod(base[0]) == end - start:  # base covers its extent: contiguous
        return True
    if math.prod(view[0]) + math.prod(base[0]) > 1 << 22:
        return False  # too large to test element by element
    return bool(torch.isin(offsets(*view), offsets(*base)).all())


def views_of_inputs(inputs: list[Any]) -> dict[int, int]:
    """The inputs that are views of another input's memory, each with that input (its
    base): {view: base}. A graph break hands the next graph a view of a tensor beside
    the tensor itself (`stack0 = x[:, pos]` computed eagerly, then `x[:, 0] = stack0`).
    A view's base is the largest input of its storage whose elements include the view's
    (so itself no view of another): inputs side by side in one buffer are each the base
    of their own views. An input whose elements overlap (expanded) is a base last: the
    tensor it expands, passed beside it, is its base."""
    groups: dict[int, list[int]] = {}
    for i, tensor in enumerate(inputs):
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            groups.setdefault(tensor.untyped_storage()._cdata, []).append(i)
    views = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        largest_first = sorted(members, key=lambda i: (
            torch._debug_has_internal_overlap(inputs[i]) == 1, -inputs[i].numel(),
            not inputs[i].is_contiguous(), i))
        roots: list[int] = []  # the bases: larger inputs come first
        for i in largest_first:
            base = next((b for b in roots if view_layout(inputs[i], inputs[b]) is not None),
                        None)
            if base is None:
                roots.append(i)
            else:
                views[i] = base
    return views


def spans_of_inputs(inputs: list[Any], views: dict[int, int], first: int = 0
                    ) -> list[tuple[tuple[int, ...], int, int]]:
    """Inputs (from `first`) in one storage that overlap in part, neither viewing the
    other (the bases `views_of_inputs` left), and an input whose own elements overlap
    (`x.expand(2, -1)`, passed alone or by a graph break without x): each group with its
    views, and the span of
    the storage they cover, [first element, end). They are taken from a tensor of that
    span (`span_tensor`, a synthetic base, as AOTAutograd makes), as views are from their
    base. Groups of mixed dtypes, complex ones or ones requiring grad are left out (a
    write is refused)."""
    roots: dict[int, list[int]] = {}
    for i, value in enumerate(inputs):
        if i >= first and isinstance(value, torch.Tensor) and value.numel() and \
                i not in views:
            roots.setdefault(value.untyped_storage()._cdata, []).append(i)
    spans = []
    for members in roots.values():
        groups = [[i] for i in members]  # joined while two of them overlap
        for i in members:
            for j in members:
                a = next(g for g in groups if i in g)
                b = next(g for g in groups if j in g)
                if a is not b and overlaps(inputs[i], inputs[j]):
                    a += b
                    groups.remove(b)
        for group in groups:
            tensors = [inputs[i] for i in group]
            if len(group) < 2 and torch._debug_has_internal_overlap(tensors[0]) != 1 or \
                    len({t.dtype for t in tensors}) > 1 or \
                    tensors[0].is_complex() or any(t.requires_grad for t in tensors):
                continue
            group += [i for i, base in views.items() if base in group]
            start = min(inputs[i].storage_offset() for i in group)
            end = max(end_of(inputs[i]) for i in group)
            spans.append((tuple(sorted(group)), start, end))
    return spans


def span_tensor(inputs: list[Any], span: tuple[tuple[int, ...], int, int]
                ) -> torch.Tensor:
    """The 1-d tensor of the storage a span of `spans_of_inputs` covers (a view)."""
    members, start, end = span
    return inputs[members[0]].as_strided((end - start,), (1,), start)


def shared_memory(inputs: list[Any], first: int = 0
                  ) -> tuple[dict[int, tuple[int, tuple]], list[tuple]]:
    """How the inputs from `first` share memory with the others: each that views
    another's elements -> (that one's index, the view's layout); the members of the
    spans (`spans_of_inputs`) -> (len(inputs) + k for the k-th span's tensor, the
    layout in it); and the spans."""
    views = {i: base for i, base in views_of_inputs(inputs).items()
             if i >= first and not inputs[i].is_complex()}
    spans = spans_of_inputs(inputs, views, first)
    relation = {i: (base, view_layout(inputs[i], inputs[base])) for i, base in views.items()}
    for k, span in enumerate(spans):
        tensor = span_tensor(inputs, span)
        for i in span[0]:
            relation[i] = (len(inputs) + k, view_layout(inputs[i], tensor))
    return dict(sorted(relation.items())), spans
