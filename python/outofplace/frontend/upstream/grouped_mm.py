"""`_grouped_mm` (`F.grouped_mm`), which torch-mlir does not define, kept whole (a
composite, frontend/composites.py): the XLA engine calls eager's kernel, which reads only
each group's own matrix (outofplace-transposed-kernel-operands hands it transposed
weights as a view, no copy); other engines and exports run its decomposition, products
whose group is read from the offsets at run time. How transformers' mixture-of-experts
layers (`grouped_mm` experts, the default of Mixtral, Qwen-MoE and their kind, in
bfloat16) multiply each token by its experts' weights.

Eager's CPU kernel (`_grouped_mm_fallback`) cuts the jagged dimension of a 2-d operand
at the offsets (group g is `[offs[g-1], offs[g])`) and multiplies each group by its
matrix. The decomposition computes each row's group, `g = count(offs <= i)`, and:

- 2-d x 3-d (`[S, K] @ [G, K, N]`, the experts' forward): with no more rows than groups
  (a decode step's few tokens) each row's matrix gathered (from the weight as it is held
  when it is read transposed) and multiplied; with more, every row by every group's
  matrix and each row's own product gathered (G times eager's multiplications, no
  [S, K, N] gather);
- 3-d x 2-d (`[G, M, K] @ [K, N]`): every column block by every group, each column's
  own group gathered;
- 2-d x 2-d (`[M, K] @ [K, N]`, grouped along K: the weights' gradient): each group's
  product over its own slice of K (the rest masked to zero);
- 3-d x 3-d: a batched product.

Products of bfloat16 (or float16) are taken in float32 and rounded once, as eager's
kernel accumulates (the reference interpreter would sum in bfloat16), each operand
converted after its gather. Rows (or columns) past the last offset belong to no group:
zero here, uninitialized in eager. A bias or an `out_dtype` other than the input's is
refused by eager itself.

Upstream: no issue found (torch-mlir does not define `aten._grouped_mm`; PyTorch's
tables have no decomposition).
Canary: test/pytest/test_fx_upstream_canaries.py::test_histc_and_grouped_mm_are_undefined.
Tests: test/pytest/test_frontend_upstream.py::test_grouped_mm_matches_eager_on_both_paths.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from .. import composites
from ..fx_graph import arguments, source_line
from ..inline import inline, trace


def _groups(offsets: torch.Tensor, length: int) -> torch.Tensor:
    """The group of each of `length` positions: how many offsets are at or before it
    (`len(offsets)` past the last)."""
    positions = torch.arange(length, dtype=offsets.dtype)
    return (offsets[None, :] <= positions[:, None]).sum(1)


def _grouped_product(a: torch.Tensor, b: torch.Tensor,
                     offsets: torch.Tensor | None) -> torch.Tensor:
    """Eager's `_grouped_mm(a, b, offsets)`: reduced-precision operands multiplied in
    float32 and the result rounded once, as eager's kernel accumulates (each operand
    converted where it is multiplied: after a row's matrices are gathered, not the
    whole of `b`)."""
    exact = torch.float32 if a.dtype in (torch.bfloat16, torch.float16) else a.dtype

    def product(x: torch.Tensor, y: torch.Tensor, equation: str) -> torch.Tensor:
        return torch.einsum(equation, x.to(exact), y.to(exact))

    if offsets is None:
        return product(a, b, "gmk,gkn->gmn").to(a.dtype)
    count = offsets.shape[0]
    zero = torch.zeros((), dtype=exact)
    if a.dim() == 2 and b.dim() == 3:
        rows = a.shape[0]
        group = _groups(offsets, rows)
        index = group.clamp(max=count - 1)
        if rows <= count and b.stride(1) == 1 and b.stride(2) != 1:
            # b read transposed (`weight.transpose(-2, -1)`): the rows' matrices
            # gathered as the weight holds them, each product along its rows
            mine = product(a, b.transpose(1, 2)[index], "sk,snk->sn")
        elif rows <= count:
            mine = product(a, b[index], "sk,skn->sn")
        else:
            every = product(a, b, "sk,gkn->gsn")
            mine = every.gather(0, index[None, :, None].expand(1, rows, b.shape[2]))[0]
        return torch.where((group < count)[:, None], mine, zero).to(a.dtype)
    if a.dim() == 3 and b.dim() == 2:
        columns = b.shape[1]
        group = _groups(offsets, columns)
        every = product(a, b, "gmk,kn->gmn")
        index = group.clamp(max=count - 1)[None, None, :].expand(1, a.shape[1], columns)
        mine = every.gather(0, index)[0]
        return torch.where((group < count)[None, :], mine, zero).to(a.dtype)
    group = _groups(offsets, a.shape[1])
    own = group[None, :] == torch.arange(count, dtype=group.dtype)[:, None]   # [G, K]
    masked = torch.where(own[:, None, :], a[None], torch.zeros((), dtype=a.dtype))
    return product(masked, b, "gmk,kn->gmn").to(a.dtype)


def _grouped_mm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """_grouped_mm(a, b, offs)  =>  `_grouped_product`, kept whole (composites.py): the
    XLA engine calls eager's kernel, which reads only the groups' own matrices."""
    a = arguments(node)
    operands = [a["input"], a["mat2"], a["offs"]]
    stack_trace = node.meta.get("stack_trace")

    def body(region: torch.fx.Graph, tensors: list) -> list[torch.fx.Node]:
        traced, inputs = trace(graph, _grouped_product, tuple(operands), {})
        given = {n: t for n, t in zip(operands, tensors) if n is not None}
        return [inline(region, traced, [given[i] for i in inputs], stack_trace)]

    op = torch.ops.aten._grouped_mm.default
    return composites.composite(
        graph, op, op, dict(enumerate(operands)), {composites.BFLOAT16: True}, body,
        source_line(node), stack_trace, returns=[0])[0]


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten._grouped_mm.default: _grouped_mm,
}
