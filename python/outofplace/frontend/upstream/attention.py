"""`scaled_dot_product_attention` as matmul and softmax.

torch-mlir decomposes the op itself only without a mask, causality or grouped heads;
with `attn_mask` or `is_causal` (every decoder's attention) it stays, and its StableHLO
lowering fails ("failed to legalize operation"). Upstream: llvm/torch-mlir#3473 (open),
the StableHLO pattern proposed in llvm/torch-mlir#3406 (open). The rewrite is taken for
every call, so that masked and unmasked attention compute alike.
Canary: test/pytest/test_fx_upstream_canaries.py::test_masked_attention_does_not_lower.

A query whose every key is masked (a padding token's row in a left-padded batch's prefill,
a prompt that starts with the pad token) reads zeros, as eager's CPU attention returns
them, not softmax's NaNs: those would reach the next layer through that position's keys
and values, and every later token's logits (a batch's generate then emitted token 0).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call


def _attention(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """softmax(q @ k.transpose(-2, -1) * scale + mask) @ v     (no dropout), a query
    every key of which is masked reading zeros"""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
             "enable_gqa")
    defaults = (None, None, None, None, 0.0, False, None, False)
    given = dict(zip(names, node.args))
    q, k, v, mask, dropout, causal, scale, gqa = (
        given.get(n, node.kwargs.get(n, d)) for n, d in zip(names, defaults))
    if dropout:
        return None
    q_val, k_val = q.meta["val"], k.meta["val"]
    if gqa and q_val.dim() >= 3 and q_val.shape[-3] != k_val.shape[-3]:
        repeats = q_val.shape[-3] // k_val.shape[-3]
        k = call(graph, torch.ops.aten.repeat_interleave.self_int, k, repeats, -3)
        v = call(graph, torch.ops.aten.repeat_interleave.self_int, v, repeats, -3)
    scale = scale if scale is not None else 1.0 / float(q_val.shape[-1]) ** 0.5
    scores = call(graph, torch.ops.aten.mul.Scalar, call(
        graph, torch.ops.aten.matmul.default, q,
        call(graph, torch.ops.aten.transpose.int, k, -2, -1)), scale)
    masked = mask is not None  # (a causal mask leaves every query a key)
    if causal:
        length, source = q_val.shape[-2], k_val.shape[-2]
        ones = call(graph, torch.ops.aten.ones.default, [length, source], dtype=torch.bool)
        mask = call(graph, torch.ops.aten.tril.default, ones)
    if mask is not None and mask.meta["val"].dtype == torch.bool:
        scores = call(graph, torch.ops.aten.masked_fill.Scalar, scores,
                      call(graph, torch.ops.aten.logical_not.default, mask), float("-inf"))
    elif mask is not None:
        scores = call(graph, torch.ops.aten.add.Tensor, scores, mask)
    weights = call(graph, torch.ops.aten._softmax.default, scores, -1, False)
    if masked:
        top = call(graph, torch.ops.aten.amax.default, scores, [-1], True)
        unread = call(graph, torch.ops.aten.eq.Scalar, top, float("-inf"))
        weights = call(graph, torch.ops.aten.masked_fill.Scalar, weights, unread, 0.0)
    return call(graph, torch.ops.aten.matmul.default, weights, v)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.scaled_dot_product_attention.default: _attention,
}
