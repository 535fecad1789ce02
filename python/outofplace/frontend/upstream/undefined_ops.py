"""Ops torch-mlir's dialect does not define (its FxImporter leaves each a
`torch.operator`, which no lowering accepts), rewritten as the defined ops they are:
`ravel`, the transposing views (`mT`, `mH`, `adjoint`, `matrix_H`, `swapaxes`,
`swapdims`), `squeeze.dims`, the conjugation views of real tensors (`resolve_conj`,
`resolve_neg`, `conj_physical_`) and autograd's `_efficientzerotensor` (inductor's
`prims::fma`: frontend/fused_multiply_adds.py).

Upstream: no issue found (none of these ops is in torch-mlir's GeneratedTorchOps.td, and
no torch-mlir issue asks for them; #4192 is the same kind of gap for `fliplr`).
Canary: test/pytest/test_fx_upstream_canaries.py::test_undefined_ops_are_still_undefined.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call

# The torch-mlir op names the canary checks are still unregistered.
UNDEFINED = ("torch.aten.ravel", "torch.aten.mT", "torch.aten.mH", "torch.aten.adjoint",
             "torch.aten.matrix_H", "torch.aten.swapaxes", "torch.aten.swapdims",
             "torch.aten.squeeze.dims", "torch.aten.resolve_conj", "torch.aten.resolve_neg",
             "torch.aten.conj_physical_", "torch.aten._efficientzerotensor")

# Conjugation and negation views that are the tensor itself on real tensors (eager
# returns self).
_SELF_ON_REAL = {torch.ops.aten.resolve_conj.default, torch.ops.aten.resolve_neg.default,
                 torch.ops.aten.conj_physical_.default}


def real_conjugations(graph: torch.fx.Graph) -> None:
    """`x.resolve_conj()`, `x.resolve_neg()`, `x.conj_physical_()` of a real `x`  =>  `x`."""
    for node in list(graph.nodes):
        if node.target in _SELF_ON_REAL and isinstance(node.args[0], torch.fx.Node) and \
                not node.args[0].meta["val"].is_complex():
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)


def _ravel(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """x.ravel()  =>  x.reshape(-1). Like reshape, it is a view of a contiguous x and a
    copy otherwise; its fake value (kept) tells _copy_where_views_copy which."""
    return graph.call_function(torch.ops.aten.reshape.default, (node.args[0], [-1]))


_TRANSPOSE_LAST = (torch.ops.aten.mT.default, torch.ops.aten.mH.default,
                   torch.ops.aten.adjoint.default, torch.ops.aten.matrix_H.default)


def _as_transpose(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """x.mT, x.swapaxes(a, b)  =>  the transpose they are (mH, adjoint and matrix_H only
    for real tensors, where they do not conjugate)."""
    self = node.args[0]
    if self.meta["val"].is_complex():
        return None
    dims = (-2, -1) if node.target in _TRANSPOSE_LAST else node.args[1:3]
    return graph.call_function(torch.ops.aten.transpose.int, (self, *dims))


def _squeeze_dims(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """x.squeeze((a, b))  =>  x.squeeze(b).squeeze(a), last dimension first"""
    self, dims = node.args
    rank = max(self.meta["val"].dim(), 1)
    result = self
    for dim in sorted({d % rank for d in dims}, reverse=True):
        result = call(graph, torch.ops.aten.squeeze.dim, result, dim)
    return result


def _zero_tensor(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """A tensor of zeros that autograd's formulas make without memory: zeros."""
    value = node.meta["val"]
    return graph.call_function(torch.ops.aten.zeros.default, (list(value.shape),),
                               {"dtype": value.dtype})


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.ravel.default: _ravel,
    **{op: _as_transpose for op in (*_TRANSPOSE_LAST, torch.ops.aten.swapaxes.default,
                                    torch.ops.aten.swapdims.default)},
    torch.ops.aten.squeeze.dims: _squeeze_dims,
    torch.ops.aten._efficientzerotensor.default: _zero_tensor,
}
