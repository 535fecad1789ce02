"""`searchsorted`, which torch-mlir does not define (and PyTorch does not decompose), as
eager's binary search, unrolled: how `torch.bucketize`'s decomposition (which works)
finds a position, for a sequence of any rank and with a `sorter`.

Eager's CPU kernel (`cus_lower_bound`, `cus_upper_bound`) halves [0, n) until it is
empty: `mid = start + (end - start) / 2`, then `start = mid + 1` where `!(seq[mid] >=
value)` (`side='right'`: `!(seq[mid] > value)`), else `end = mid`. The same steps are
made here for every element at once, floor(log2(n)) + 1 of them (each element's search
ends within that many; an ended one stays put), reading `seq[mid]` with a gather along
the last dimension (through `sorter` when given). So each position is eager's, NaN
included (a NaN value compares false: it ends at n; a NaN in the sequence sends the
search where eager's goes).

Upstream: no issue found (torch-mlir defines no `aten.searchsorted`).
Canary: test/pytest/test_fx_upstream_canaries.py::test_searchsorted_is_undefined.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[searchsorted].
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import arguments
from ..inline import inline_call


def _search(sequence: torch.Tensor, values: torch.Tensor, right: bool,
            sorter: torch.Tensor | None, int32: bool) -> torch.Tensor:
    """Each value's position in `sequence` (sorted along its last dimension, or in the
    order `sorter` gives), by eager's binary search."""
    dtype = torch.promote_types(sequence.dtype, values.dtype)
    sequence, values = sequence.to(dtype), values.to(dtype)
    n = sequence.shape[-1]
    start = torch.zeros(values.shape, dtype=torch.int64)
    if n > 0:
        end = torch.full(values.shape, n, dtype=torch.int64)
        if sequence.dim() == 1:  # one sequence for every value
            flat = values.reshape(-1)
            start, end = start.reshape(-1), end.reshape(-1)
        else:
            flat = values
        for _ in range(int(math.log2(n)) + 1):
            searching = start < end
            mid = start + (end - start) // 2
            at = mid.clamp(max=n - 1)
            if sorter is not None:
                at = sorter.gather(-1, at) if sorter.dim() > 1 else sorter[at]
            middle = sequence.gather(-1, at) if sequence.dim() > 1 else sequence[at]
            after = ~(middle > flat) if right else ~(middle >= flat)
            start = torch.where(searching & after, mid + 1, start)
            end = torch.where(searching & ~after, mid, end)
        start = start.reshape(values.shape)
    return start.to(torch.int32 if int32 else torch.int64)


def _searchsorted(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """searchsorted(seq, values, out_int32, right, side, sorter)  =>  `_search`"""
    options = arguments(node)
    sequence, values = options["sorted_sequence"], options["input"]
    right = options["right"] or options["side"] == "right"
    if not isinstance(values, torch.fx.Node):  # the Scalar overload: a 0-d value
        def search(sequence: torch.Tensor, sorter: torch.Tensor | None) -> torch.Tensor:
            scalar = torch.tensor(values, dtype=torch.result_type(sequence, values))
            return _search(sequence, scalar, right, sorter, options["out_int32"])
        return inline_call(graph, node, search, sequence, options["sorter"])
    if any(v is not None and v.meta["val"].is_complex()
           for v in (sequence, values)):
        return None
    return inline_call(graph, node, _search, sequence, values, right, options["sorter"],
                       options["out_int32"])


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.searchsorted.Tensor: _searchsorted,
    torch.ops.aten.searchsorted.Scalar: _searchsorted,
}
