"""The `*_scatter` ops AOTAutograd writes a write through a view as, in forms torch-mlir
lowers: `as_strided_scatter` (no StableHLO lowering), `select_scatter` at a negative
index (a scatter without indices, which fails to verify) and `slice_scatter` with an end
past the dimension (the backward of `x[..., 4:]` has end 2**63 - 1, for which torch-mlir
tries to allocate without bound: the process was killed).

Upstream: llvm/torch-mlir#4443 (open: slice_scatter's bounds); as_strided_scatter and
select_scatter at a negative index: no issue found.
Canaries: test/pytest/test_fx_upstream_canaries.py::test_as_strided_scatter_does_not_lower,
::test_select_scatter_at_a_negative_index_does_not_lower,
::test_slice_scatter_past_the_end_allocates_without_bound.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ...indexing import clamp_bound, from_end
from ..fx_graph import operand_at
from ..inline import inline_call


def _as_strided_scatter(x: torch.Tensor, source: torch.Tensor, size: list[int],
                        stride: list[int], offset: int | None) -> torch.Tensor:
    """aten's kernel writes `source` through `x.clone().as_strided(...)`: for a
    contiguous x, the elements at storage positions offset + sum(i_d * stride_d): an
    index_put into x's flat view."""
    index = torch.zeros((), dtype=torch.int64) + (offset or 0)
    for d, (n, step) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        index = index + torch.arange(n).view(shape) * step
    flat = x.reshape(-1).index_put((index.reshape(-1),), source.expand(size).reshape(-1))
    # a new tensor, not a view: the replaced node's fake value (a tensor of its own) is
    # given to the result
    return flat.view(x.shape).clone()


def _numel(size: list[int]) -> int:
    n = 1
    for d in size:
        n *= d
    return n


def _as_strided_scatter_as_index_put(graph: torch.fx.Graph, node: torch.fx.Node
                                     ) -> torch.fx.Node | None:
    """as_strided_scatter(x, src, size, stride, off) of a contiguous x  =>  an
    index_put into x's flat view at the elements' positions (a scatter). AOTAutograd
    writes a write through a view this way (`self.b[self.ptr % 3].add_(x)` under
    torch.compile with gradients). Elements that overlap (eager writes one of them, which
    is not defined) are left to the op's refusal."""
    x, source, size, stride = node.args[:4]
    offset = operand_at(node, 4)
    value = x.meta["val"]
    if not value.is_contiguous() or not all(isinstance(v, int) for v in
                                            [*size, *stride, offset or 0]):
        return None
    positions = {offset or 0}
    for n, step in zip(size, stride):
        positions = {p + i * step for p in positions for i in range(n)}
    if len(positions) != _numel(size) or max(positions, default=0) >= value.numel():
        return None
    return inline_call(graph, node, _as_strided_scatter, x, source, list(size),
                       list(stride), offset)


def _select_scatter_from_end(graph: torch.fx.Graph, node: torch.fx.Node
                             ) -> torch.fx.Node | None:
    """select_scatter(x, v, dim, -1)  =>  select_scatter(x, v, dim, n - 1) (AOTAutograd
    writes `win[-1] = hv` so under torch.compile with gradients)."""
    x, source, dim, index = node.args[:4]
    if not isinstance(index, int) or index >= 0:
        return None
    size = x.meta["val"].shape[dim]
    return graph.call_function(torch.ops.aten.select_scatter.default,
                               (x, source, dim, from_end(index, size)))


def _slice_scatter_bounds(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """slice_scatter(x, v, d, start, end) with its bounds clamped into x's dimension, as
    slicing clamps them."""
    self, src, dim, start, end, step = (list(node.args) + [0, None, None, 1][
        len(node.args) - 2:])[:6]
    dim = node.kwargs.get("dim", dim)
    start = node.kwargs.get("start", start)
    end = node.kwargs.get("end", end)
    step = node.kwargs.get("step", step)
    if any(isinstance(v, torch.fx.Node) for v in (dim, start, end, step)):
        return None
    size = self.meta["val"].shape[dim]
    bounded = [clamp_bound(v, size) if v is not None else d
               for v, d in ((start, 0), (end, size))]
    if bounded == [start, end]:
        return None
    return graph.call_function(node.target, (self, src, dim, *bounded, step))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.as_strided_scatter.default: _as_strided_scatter_as_index_put,
    torch.ops.aten.select_scatter.default: _select_scatter_from_end,
    torch.ops.aten.slice_scatter.default: _slice_scatter_bounds,
}
