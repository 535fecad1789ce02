"""A convolution of `padding="same"` whose padding is uneven (an even window: `Conv1d(..,
4, padding="same")`) is the input padded by the excess on the right, then the
convolution with the left's padding, as eager's kernel computes it.

torch.export keeps `aten.conv{1,2,3}d.padding` in a graph without autograd, and
torch-mlir lowers it with the same padding on both sides: one output too few, and the
lowering fails to verify (the statement was refused on `outofplace.compile`, while
`torch.compile` compiled it: dynamo's graph carries eager's decomposition). An even
padding (an odd window) lowers as it is and is left alone; so is `"valid"`.

Upstream: no issue found (TorchToStablehlo's convolution with a string padding, 2026-12).
Canary: test/pytest/test_fx_upstream_canaries.py::test_uneven_same_padding_does_not_lower.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[same_padding].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx
import torch.nn.functional as F

from ..inline import inline_call


def _convolution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 stride: list[int], left: list[int], right: list[int],
                 dilation: list[int], groups: int) -> torch.Tensor:
    excess = [p for lo, hi in zip(reversed(left), reversed(right)) for p in (0, hi - lo)]
    return torch.ops.aten.convolution(F.pad(x, excess), weight, bias, stride, left,
                                      dilation, False, [0] * len(left), groups)


def _widened(values: Any, rank: int) -> list[int]:
    """A convolution's `stride` or `dilation`, one value for each spatial dimension."""
    values = list(values)
    return values * rank if len(values) == 1 else values


def _same(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """conv{1,2,3}d(x, w, b, stride, "same", dilation, groups) of an uneven padding  =>
    convolution(pad(x, the excess on the right), w, b, stride, left, dilation)"""
    arguments = dict(zip(("input", "weight", "bias", "stride", "padding", "dilation",
                          "groups"), node.args)) | dict(node.kwargs)
    if arguments.get("padding") != "same":
        return None
    x, weight = arguments["input"], arguments["weight"]
    rank = weight.meta["val"].dim() - 2
    dilation, stride = (_widened(arguments.get(name, [1]), rank)
                        for name in ("dilation", "stride"))
    window = weight.meta["val"].shape[2:]
    if not all(isinstance(k, int) for k in window):
        return None
    total = [d * (k - 1) for d, k in zip(dilation, window)]
    left = [t // 2 for t in total]
    right = [t - lo for t, lo in zip(total, left)]
    if left == right:
        return None
    return inline_call(graph, node, _convolution, x, weight, arguments.get("bias"), stride,
                       left, right, dilation, arguments.get("groups", 1))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    op: _same for op in (torch.ops.aten.conv1d.padding, torch.ops.aten.conv2d.padding,
                         torch.ops.aten.conv3d.padding)}
