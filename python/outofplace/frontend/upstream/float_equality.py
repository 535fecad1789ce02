"""`eq` of floats as `not ne`: torch-mlir folds `eq(x, x)` to true.

torch-mlir's folder of `aten.eq.Tensor` answers true for a tensor compared with itself,
which a NaN is not equal to: `x == x` (a NaN test's other half) gave True at every NaN,
silently, and so did `x == x.clone()` once the clone was gone. `ne` has no such folder
(`x != x` was right), and `a == b` is `not (a != b)` for every pair of floats, NaN
included: floating-point (and complex) `eq` is that here, `x.eq_(y)` its copy into x.
XLA fuses the `not` into the comparison.

Upstream: no issue found (`AtenEqTensorOp::fold`, torch-mlir 2026-10).
Canary: test/pytest/test_upstream_canaries.py::test_eq_of_a_tensor_and_itself_folds_to_true.
Tests: test/pytest/test_frontend_upstream.py::test_matches_eager_on_both_paths[float_equality].
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call


def _equal(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """eq(a, b)  =>  logical_not(ne(a, b)) for floats; a.eq_(b)  =>  a.copy_(that)"""
    a, b = node.args[:2]
    values = [v.meta["val"] for v in (a, b) if isinstance(v, torch.fx.Node)]
    if not any(v.is_floating_point() or v.is_complex() for v in values):
        return None
    result = call(graph, torch.ops.aten.logical_not.default,
                  call(graph, torch.ops.aten.ne.Tensor, a, b))
    if node.target is torch.ops.aten.eq_.Tensor:
        return call(graph, torch.ops.aten.copy_.default, a, result)
    return result


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.eq.Tensor: _equal,
    torch.ops.aten.eq_.Tensor: _equal,
}
