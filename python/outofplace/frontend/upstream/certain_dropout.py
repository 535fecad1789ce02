"""`native_dropout` in training with `p = 1` (every element dropped) is the input times
zero and a mask of `False`, as eager's CPU kernel computes it (its scale 0 where `1 - p`
is 0).

torch-mlir lowers `native_dropout` as the input times the mask divided by `1 - p`: at
`p = 1`, 0 / 0, NaN everywhere. A torch.compile graph carries `native_dropout` (AOT
autograd's), so `F.dropout(x, 1.0, training=True)` gave NaN on that path where eager
gives zeros.

Upstream: no issue found (torch-mlir's decomposition of native_dropout, 2026-12).
Canary: test/pytest/test_fx_upstream_canaries.py::test_certain_dropout_divides_by_zero.
Tests: test/pytest/test_dropout.py::test_steps_that_draw_nothing_are_eagers.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call


def _zeros(graph: torch.fx.Graph, node: torch.fx.Node) -> tuple | None:
    """native_dropout(x, 1.0, train)  =>  (x * 0, zeros of bool)"""
    x, p, train = (*node.args, None)[:3]
    if p != 1 or train is False:
        return None
    value = x.meta["val"]
    return (call(graph, torch.ops.aten.mul.Scalar, x, 0.0),
            call(graph, torch.ops.aten.zeros.default, list(value.shape), dtype=torch.bool,
                 device=value.device))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.native_dropout.default: _zeros,
}
