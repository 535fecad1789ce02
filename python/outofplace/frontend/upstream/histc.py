"""`histc`, which torch-mlir does not define, as a scatter-add of ones at each element's
bin: how transformers' mixture-of-experts layers (`grouped_mm` experts, the default of
Mixtral, Qwen-MoE and their kind) count the tokens each expert receives.

Eager's CPU kernel (`histogramdd_cpu_contiguous`, LINEAR_INTERPOLATION) puts an element
`x` of `[min, max]` in bin `int64((x - min) * bins / (max - min))`, computed in the
input's dtype with the edges rounded to it, the last edge in the last bin; elements
outside the range and NaN are not counted. The same arithmetic in the same dtype here,
so each element meets the bin eager gives it.

With `min == max` eager takes the range from the data (its smallest and largest
element) and raises when that range is not finite: refused (a range the compiled
program would read from the data, and a check it could not make).

Upstream: no issue found (torch-mlir defines neither `aten.histc` nor a decomposition;
PyTorch's tables have none).
Canary: test/pytest/test_fx_upstream_canaries.py::test_histc_and_grouped_mm_are_undefined.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[histc].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ...errors import UnsupportedMutationError
from ..fx_graph import arguments, source_line
from ..inline import inline_call


def _histogram(x: torch.Tensor, bins: int, low: float, high: float) -> torch.Tensor:
    """The counts of eager's `histc(x, bins, low, high)`, in x's dtype."""
    flat = x.reshape(-1)
    left = torch.full((), low, dtype=x.dtype)
    right = torch.full((), high, dtype=x.dtype)
    counted = (flat >= left) & (flat <= right)
    position = ((flat - left) * bins / (right - left)).to(torch.int64)
    position = torch.where(counted, position.clamp(0, bins - 1), 0)
    return torch.zeros(bins, dtype=x.dtype).scatter_add(0, position, counted.to(x.dtype))


def _histc(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """histc(x, bins, min, max)  =>  `_histogram`"""
    a = arguments(node)
    bins, low, high = a["bins"], a["min"], a["max"]
    if float(low) == float(high):
        raise UnsupportedMutationError(
            "aten.histc", f"min == max ({low}): eager reads the histogram's range from "
            "the data and checks it is finite; give histc its range",
            location=source_line(node))
    return inline_call(graph, node, _histogram, a["input"], bins, float(low),
                       float(high))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.histc.default: _histc,
}
