"""`index_reduce` (and `index_reduce_`), which torch-mlir does not define (and PyTorch does
not decompose), as the `scatter_reduce` it is: the index along `dim` expanded to the
source's shape.

Eager's `index_reduce(self, dim, index, source, reduce, include_self)` reduces each
slice `source.select(dim, i)` into `self.select(dim, index[i])` by "prod", "mean",
"amax" or "amin", `self`'s own value counted unless `include_self=False`, slices no index
names left as they are: `scatter_reduce` with the same `reduce` and `include_self`, each
element of the source sent along `dim` to its slice's index.

Upstream: no issue found (torch-mlir defines no `aten.index_reduce`).
Canary: test/pytest/test_fx_upstream_canaries.py::test_index_reduce_is_undefined.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[index_reduce].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import arguments, call
from ..inline import inline_call


def _index_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor,
                  reduce: str, include_self: bool) -> torch.Tensor:
    dim = dim % max(source.dim(), 1)
    shape = [1] * source.dim()
    shape[dim] = -1
    spread = index.reshape(shape).expand(source.shape)
    return self.scatter_reduce(dim, spread, source, reduce, include_self=include_self)


def _rewrite(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """index_reduce(self, dim, index, source, reduce, include_self)  =>  scatter_reduce"""
    a = arguments(node)
    if a["source"].meta["val"].dim() == 0:
        return None
    result = inline_call(graph, node, _index_reduce, a["input"], a["dim"], a["index"],
                         a["source"], a["reduce"], a["include_self"])
    if node.target is torch.ops.aten.index_reduce_.default:
        return call(graph, torch.ops.aten.copy_.default, a["input"], result)
    return result


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.index_reduce.default: _rewrite,
    torch.ops.aten.index_reduce_.default: _rewrite,
}
