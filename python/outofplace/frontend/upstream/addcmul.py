"""`addcmul` and `addcdiv` in eager's order of rounding.

Eager's kernels compute self + (value * a) * b (addcdiv: self + (value * a) / b), in the
dtype of all three operands (a float64 self with float32 operands multiplies in
float64). torch-mlir lowers addcmul as self + (a * b) * value: in float32 the result is
one rounding off (1.5e-8 for `s.addcmul_(a, b, value=0.5)`).

Upstream: no issue found.
Canary: test/pytest/test_fx_upstream_canaries.py::test_addcmul_multiplies_by_value_last.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call

_ADDCMUL = (torch.ops.aten.addcmul_.default, torch.ops.aten.addcmul.default)
_IN_PLACE = (torch.ops.aten.addcmul_.default, torch.ops.aten.addcdiv_.default)


def _addcmul(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """self.addcmul_(a, b, value=v)  =>  self.add_(a * v * b) (addcdiv: a * v / b)"""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    self, first, second = node.args[:3]
    value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value", 1)
    values = [getattr(n, "meta", {}).get("val") for n in (self, first, second)]
    if all(isinstance(v, torch.Tensor) for v in values):
        _, dtype = elementwise_dtypes(
            *values, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        first, second = (call(graph, torch.ops.aten._to_copy.default, operand, dtype=dtype)
                         if operand.meta["val"].dtype != dtype else operand
                         for operand in (first, second))
    scaled = call(graph, torch.ops.aten.mul.Scalar, first, value)
    combine = torch.ops.aten.mul.Tensor if node.target in _ADDCMUL \
        else torch.ops.aten.div.Tensor
    term = call(graph, combine, scaled, second)
    add = torch.ops.aten.add_.Tensor if node.target in _IN_PLACE else torch.ops.aten.add.Tensor
    return graph.call_function(add, (self, term))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {op: _addcmul for op in (
    torch.ops.aten.addcmul_.default, torch.ops.aten.addcdiv_.default,
    torch.ops.aten.addcmul.default, torch.ops.aten.addcdiv.default)}
