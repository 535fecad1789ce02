"""`_grouped_mm` (`F.grouped_mm`), which torch-mlir does not define, as products whose
group is read from the offsets at run time: how transformers' mixture-of-experts layers
(`grouped_mm` experts, the default of Mixtral, Qwen-MoE and their kind, in bfloat16)
multiply each token by its experts' weights.

Eager's CPU kernel (`_grouped_mm_fallback`) cuts the jagged dimension of a 2-d operand
at the offsets (group g is `[offs[g-1], offs[g])`) and multiplies each group by its
matrix. The offsets are data, so each row's group is computed, `g = count(offs <= i)`,
and:

- 2-d x 3-d (`[S, K] @ [G, K, N]`, the experts' forward): with no more rows than groups
  (a decode step's few tokens) each row's matrix gathered and multiplied (the weights
  read as often as eager reads them); with more, every row by every group's matrix and
  each row's own product gathered (G times eager's multiplications, no [S, K, N] gather);
- 3-d x 2-d (`[G, M, K] @ [K, N]`): every column block by every group, each column's
  own group gathered;
- 2-d x 2-d (`[M, K] @ [K, N]`, grouped along K: the weights' gradient): each group's
  product over its own slice of K (the rest masked to zero);
- 3-d x 3-d: `bmm`.

Products of bfloat16 (or float16) are taken in float32 and rounded once, as eager's
kernel accumulates (XLA:CPU would do the same; the reference interpreter would sum in
bfloat16). Rows (or columns) past the last offset belong to no group: zero here, uninitialized in
eager. A bias or an `out_dtype` other than the input's is refused by eager itself.

Upstream: no issue found (torch-mlir does not define `aten._grouped_mm`; PyTorch's
tables have no decomposition).
Canary: test/pytest/test_fx_upstream_canaries.py::test_histc_and_grouped_mm_are_undefined.
Tests: test/pytest/test_frontend_upstream.py::test_grouped_mm_matches_eager_on_both_paths.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..inline import inline_call


def _groups(offsets: torch.Tensor, length: int) -> torch.Tensor:
    """The group of each of `length` positions: how many offsets are at or before it
    (`len(offsets)` past the last)."""
    positions = torch.arange(length, dtype=offsets.dtype)
    return (offsets[None, :] <= positions[:, None]).sum(1)


def _grouped_product(a: torch.Tensor, b: torch.Tensor,
                     offsets: torch.Tensor | None) -> torch.Tensor:
    """Eager's `_grouped_mm(a, b, offsets)`: reduced-precision operands multiplied in
    float32 and the result rounded once, as eager's kernel accumulates."""
    if a.dtype in (torch.bfloat16, torch.float16):
        return _grouped_product(a.float(), b.float(), offsets).to(a.dtype)
    if offsets is None:
        return torch.bmm(a, b)
    count = offsets.shape[0]
    if a.dim() == 2 and b.dim() == 3:
        rows = a.shape[0]
        group = _groups(offsets, rows)
        known = group < count
        index = group.clamp(max=count - 1)
        if rows <= count:
            product = torch.bmm(a[:, None, :], b[index])[:, 0]
        else:
            every = torch.einsum("sk,gkn->gsn", a, b)
            product = every.gather(0, index[None, :, None].expand(1, rows, b.shape[2]))[0]
        return torch.where(known[:, None], product, torch.zeros((), dtype=product.dtype))
    if a.dim() == 3 and b.dim() == 2:
        columns = b.shape[1]
        group = _groups(offsets, columns)
        known = group < count
        every = torch.einsum("gmk,kn->gmn", a, b)
        index = group.clamp(max=count - 1)[None, None, :].expand(1, a.shape[1], columns)
        product = every.gather(0, index)[0]
        return torch.where(known[None, :], product, torch.zeros((), dtype=product.dtype))
    group = _groups(offsets, a.shape[1])
    mine = group[None, :] == torch.arange(count, dtype=group.dtype)[:, None]   # [G, K]
    masked = torch.where(mine[:, None, :], a[None], torch.zeros((), dtype=a.dtype))
    return torch.matmul(masked, b)


def _grouped_mm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """_grouped_mm(a, b, offs)  =>  `_grouped_product`"""
    arguments = dict(zip(("self", "mat2", "offs"), node.args), **node.kwargs)
    return inline_call(graph, node, _grouped_product, arguments["self"],
                       arguments["mat2"], arguments.get("offs"))


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten._grouped_mm.default: _grouped_mm,
}
