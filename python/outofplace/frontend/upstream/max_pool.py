"""`max_pool2d_with_indices` with an empty stride (what autograd saves for
`F.max_pool2d`'s backward): the stride is the kernel's, which torch-mlir's StableHLO
lowering of the op with its indices reads as stride 1 (a window result of the wrong
shape, which fails to verify).

Upstream: llvm/torch-mlir#2932 (open).
Canary: test/pytest/test_fx_upstream_canaries.py::
test_max_pool_with_indices_reads_an_empty_stride_as_1.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx


def _max_pool_stride(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """max_pool2d_with_indices(x, k, stride=[])  =>  (x, k, stride=k)"""
    args = list(node.args)
    stride = args[2] if len(args) > 2 else node.kwargs.get("stride", [])
    if stride:
        return None
    kwargs = dict(node.kwargs)
    kwargs.pop("stride", None)
    args = [*args[:2], list(args[1]), *args[3:]]
    return graph.call_function(node.target, tuple(args), kwargs)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.max_pool2d_with_indices.default: _max_pool_stride,
}
