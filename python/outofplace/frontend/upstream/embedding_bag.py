"""`nn.EmbeddingBag` (`embedding_bag`, `_embedding_bag`) in modes sum and mean, and its
gradient `_embedding_bag_backward`, as gathers of the weight's rows and sums into each
bag.

torch-mlir's lowering of `embedding_bag.padding_idx` fails to verify ("number of output
elements (6) doesn't match expected number of elements (3)"), and it defines no gradient.
The bag of each index is a running count of the bags started at or before it (the
offsets marked with a scatter-add of ones, so that an empty bag is one more start at the
same place): no `nonzero`, shapes stay static. The sum of a bag is a scatter-add of its
rows (each times its `per_sample_weights`), a mean that sum over the bag's count (at least
one: eager's empty bag is zeros); an index equal to `padding_idx` adds nothing and is not
counted; with `include_last_offset` the last offset (the indices' count, as eager
requires) starts no bag. The gradient of a weight row is the sum of its bags' gradients
(over their counts, for a mean), at each of its indices. The op's other results are
eager's CPU kernels' (`offset2bag` each index's bag where eager makes it, `bag_size` and
`max_indices` a mean's counts, else zeros).

Mode max, `scale_grad_by_freq`, sparse gradients, a 2-d input (F.embedding_bag makes
it 1-d), or a reduced precision weight (eager sums those in float32): declined, and the
op stays refused.

Upstream: no issue found (TorchToStablehlo's embedding_bag, 2026-12).
Canary: test/pytest/test_upstream_canaries.py::test_embedding_bag_does_not_lower.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[embedding_bags],
::test_special_functions_training_steps_match_eager[_EmbeddingBags].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import arguments
from ..inline import inline_call

_SUM, _MEAN = 0, 1


def _bags(indices: torch.Tensor, offsets: torch.Tensor, include_last_offset: bool,
          padding_idx: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(each index's bag, whether it counts in it, each bag's count); a negative
    `padding_idx` (`_embedding_bag`'s -1) is none. With
    `include_last_offset` the last offset starts no bag: it is the indices' count (eager
    requires it; its kernels disagree, by dtype, on an index past a smaller one)."""
    n = indices.shape[0]
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    starts = offsets[:bags]
    marks = torch.zeros(n + 1, dtype=torch.int64, device=indices.device).index_add(
        0, starts.to(torch.int64), torch.ones_like(starts, dtype=torch.int64))
    bag = marks.cumsum(0)[:n] - 1
    counts = bag >= 0
    if padding_idx is not None and padding_idx >= 0:
        counts = counts & (indices != padding_idx)
    bag = bag.clamp(min=0)
    sizes = torch.zeros(bags, dtype=torch.int64, device=indices.device).index_add(
        0, bag, counts.to(torch.int64))
    return bag, counts, sizes


def _embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                   mode: int, per_sample_weights: torch.Tensor | None,
                   include_last_offset: bool, padding_idx: int | None,
                   shapes: list[torch.Size]) -> tuple[torch.Tensor, ...]:
    bag, counts, sizes = _bags(indices, offsets, include_last_offset, padding_idx)
    rows = weight.index_select(0, indices)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    rows = torch.where(counts.unsqueeze(1), rows, torch.zeros_like(rows))
    output = torch.zeros(sizes.shape[0], weight.shape[1], dtype=weight.dtype,
                         device=weight.device).index_add(0, bag, rows)
    # eager's other results, as its CPU kernels make them: each index's bag where
    # they make it (a mean, a padding index), the bags' counts for a mean
    offset2bag = bag if tuple(shapes[1]) == tuple(bag.shape) else \
        torch.zeros(shapes[1], dtype=torch.int64, device=weight.device)
    if mode == _MEAN:
        output = output / sizes.clamp(min=1).unsqueeze(1).to(weight.dtype)
        return output, offset2bag, sizes, sizes.clone()
    zeros = torch.zeros_like(sizes)
    return output, offset2bag, zeros, zeros.clone()


def _embedding_bag_gradient(grad: torch.Tensor, indices: torch.Tensor,
                            offsets: torch.Tensor, num_weights: int, mode: int,
                            per_sample_weights: torch.Tensor | None,
                            include_last_offset: bool, padding_idx: int | None
                            ) -> torch.Tensor:
    bag, counts, sizes = _bags(indices, offsets, include_last_offset, padding_idx)
    each = grad.index_select(0, bag)
    if mode == _MEAN:
        each = each / sizes.clamp(min=1).index_select(0, bag).unsqueeze(1).to(grad.dtype)
    if per_sample_weights is not None:
        each = each * per_sample_weights.unsqueeze(1)
    each = torch.where(counts.unsqueeze(1), each, torch.zeros_like(each))
    return torch.zeros(num_weights, grad.shape[1], dtype=grad.dtype,
                       device=grad.device).index_add(0, indices, each)


def _declined(a: dict[str, Any], weight: torch.Tensor, indices: torch.Tensor) -> bool:
    """Whether the op (`weight` its weight, or its gradient's) is one this module leaves."""
    return a["mode"] not in (_SUM, _MEAN) or a["scale_grad_by_freq"] or a["sparse"] or \
        indices.dim() != 1 or weight.dim() != 2 or \
        weight.dtype not in (torch.float32, torch.float64)


def _forward(graph: torch.fx.Graph, node: torch.fx.Node) -> Any:
    """embedding_bag(weight, indices, offsets, ...)  =>  `_embedding_bag`"""
    a = arguments(node)
    weight, indices = a["weight"].meta["val"], a["indices"].meta["val"]
    if _declined(a, weight, indices):
        return None
    shapes = [value.shape for value in node.meta["val"]]
    return inline_call(graph, node, _embedding_bag, a["weight"], a["indices"],
                       a["offsets"], a["mode"], a["per_sample_weights"],
                       bool(a["include_last_offset"]), a.get("padding_idx"), shapes)


def _backward(graph: torch.fx.Graph, node: torch.fx.Node) -> Any:
    """_embedding_bag_backward(grad, indices, offsets, ...)  =>  `_embedding_bag_gradient`
    (`include_last_offset` where there is an offset more than bags, as eager reads it)."""
    a = arguments(node)
    grad, offsets = a["grad"].meta["val"], a["offsets"].meta["val"]
    if _declined(a, grad, a["indices"].meta["val"]):
        return None
    return inline_call(graph, node, _embedding_bag_gradient, a["grad"], a["indices"],
                       a["offsets"], int(a["num_weights"]), a["mode"],
                       a["per_sample_weights"], offsets.shape[0] == grad.shape[0] + 1,
                       a["padding_idx"])


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.embedding_bag.default: _forward,
    torch.ops.aten.embedding_bag.padding_idx: _forward,
    torch.ops.aten._embedding_bag.default: _forward,
    torch.ops.aten._embedding_bag_forward_only.default: _forward,
    torch.ops.aten._embedding_bag_backward.default: _backward,
}
