"""`scaled_dot_product_attention` as matmul and softmax, and eager's CPU attention
kernel and its backward, which autograd's graphs call, as the same.

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


A = torch.ops.aten


def _arguments(node: torch.fx.Node, names: tuple[str, ...], defaults: tuple) -> list:
    given = dict(zip(names, node.args))
    return [given.get(n, node.kwargs.get(n, d)) for n, d in zip(names, defaults)]


def _grouped(graph: torch.fx.Graph, q: torch.fx.Node, k: torch.fx.Node,
             v: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, int]:
    """k and v with each head repeated for the query heads that read it (grouped-query
    attention: query head i reads key head i // groups), and the groups."""
    q_val, k_val = q.meta["val"], k.meta["val"]
    if q_val.dim() < 3 or q_val.shape[-3] == k_val.shape[-3]:
        return k, v, 1
    groups = q_val.shape[-3] // k_val.shape[-3]
    return (call(graph, A.repeat_interleave.self_int, k, groups, -3),
            call(graph, A.repeat_interleave.self_int, v, groups, -3), groups)


def _scale(q: torch.fx.Node, scale: float | None) -> float:
    """The scores' factor: `scale`, by default 1 / sqrt(the head's size)."""
    return scale if scale is not None else 1.0 / float(q.meta["val"].shape[-1]) ** 0.5


def _scores(graph: torch.fx.Graph, q: torch.fx.Node, k: torch.fx.Node, mask: Any,
            causal: bool, scale: float | None) -> torch.fx.Node:
    """q @ k.transpose(-2, -1) * scale, the masked scores -inf (a bool mask's False, a
    causal mask's future) or the float mask added."""
    q_val, k_val = q.meta["val"], k.meta["val"]
    scores = call(graph, A.mul.Scalar, call(
        graph, A.matmul.default, q, call(graph, A.transpose.int, k, -2, -1)),
        _scale(q, scale))
    if causal:
        length, source = q_val.shape[-2], k_val.shape[-2]
        ones = call(graph, A.ones.default, [length, source], dtype=torch.bool)
        mask = call(graph, A.tril.default, ones)
    if mask is not None and mask.meta["val"].dtype == torch.bool:
        return call(graph, A.masked_fill.Scalar, scores,
                    call(graph, A.logical_not.default, mask), float("-inf"))
    if mask is not None:
        return call(graph, A.add.Tensor, scores, mask)
    return scores


def _unread(graph: torch.fx.Graph, top: torch.fx.Node) -> torch.fx.Node:
    """Whether each query's every key is masked: its top score (`top`, the scores' amax
    over the keys, kept as a dimension) is -inf."""
    return call(graph, A.eq.Scalar, top, float("-inf"))


def _weights(graph: torch.fx.Graph, scores: torch.fx.Node,
             unread: torch.fx.Node | None) -> torch.fx.Node:
    """softmax of the scores, a query `unread` says every key of which is masked
    weighing none (None: no mask was given; a causal mask leaves every query a key)."""
    weights = call(graph, A._softmax.default, scores, -1, False)
    if unread is not None:
        weights = call(graph, A.masked_fill.Scalar, weights, unread, 0.0)
    return weights


def _attention(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """softmax(q @ k.transpose(-2, -1) * scale + mask) @ v     (no dropout), a query
    every key of which is masked reading zeros"""
    q, k, v, mask, dropout, causal, scale, gqa = _arguments(
        node, ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
               "enable_gqa"), (None, None, None, None, 0.0, False, None, False))
    if dropout:
        return None
    if gqa:
        k, v, _ = _grouped(graph, q, k, v)
    scores = _scores(graph, q, k, mask, causal, scale)
    unread = None if mask is None else \
        _unread(graph, call(graph, A.amax.default, scores, [-1], True))
    return call(graph, A.matmul.default, _weights(graph, scores, unread), v)


def _flash_for_cpu(graph: torch.fx.Graph, node: torch.fx.Node) -> tuple | None:
    """Eager's CPU attention kernel, which autograd's graphs call (its backward reads
    the second result): (the attention as `_attention`, logsumexp of each query's
    scores, 0 for a query every key of which is masked, as eager's kernel gives).
    PyTorch's own decomposition returns the weights for the logsumexp (it serves
    export, whose graphs do not read it)."""
    q, k, v, dropout, causal, mask, scale = _arguments(
        node, ("query", "key", "value", "dropout_p", "is_causal", "attn_mask", "scale"),
        (None, None, None, 0.0, False, None, None))
    if dropout:
        return None
    k, v, _ = _grouped(graph, q, k, v)
    scores = _scores(graph, q, k, mask, causal, scale)
    top = call(graph, A.amax.default, scores, [-1], True)
    unread = None if mask is None else _unread(graph, top)
    output = call(graph, A.matmul.default, _weights(graph, scores, unread), v)
    total = call(graph, A.sum.dim_IntList, call(graph, A.exp.default, call(
        graph, A.sub.Tensor, scores, top)), [-1], True)
    lse = call(graph, A.add.Tensor, top, call(graph, A.log.default, total))
    if unread is not None:
        lse = call(graph, A.masked_fill.Scalar, lse, unread, 0.0)
    lse = call(graph, A.squeeze.dim, lse, -1)
    dtype = node.meta["val"][1].dtype
    if lse.meta["val"].dtype != dtype:
        lse = call(graph, A._to_copy.default, lse, dtype=dtype)
    return output, lse


def _flash_for_cpu_backward(graph: torch.fx.Graph, node: torch.fx.Node) -> tuple | None:
    """The gradients of `_flash_for_cpu`'s output, from the weights its logsumexp gives
    back (exp(scores - logsumexp): none for a masked key, nor for a query every key of
    which is masked)."""
    grad, q, k, v, output, lse, dropout, causal, mask, scale = _arguments(
        node, ("grad_out", "query", "key", "value", "out", "logsumexp", "dropout_p",
               "is_causal", "attn_mask", "scale"),
        (None, None, None, None, None, None, 0.0, False, None, None))
    if dropout:
        return None
    factor = _scale(q, scale)
    kr, vr, groups = _grouped(graph, q, k, v)
    scores = _scores(graph, q, kr, mask, causal, scale)
    if lse.meta["val"].dtype != scores.meta["val"].dtype:
        lse = call(graph, A._to_copy.default, lse, dtype=scores.meta["val"].dtype)
    weights = call(graph, A.exp.default, call(
        graph, A.sub.Tensor, scores, call(graph, A.unsqueeze.default, lse, -1)))
    grad_v = call(graph, A.matmul.default,
                  call(graph, A.transpose.int, weights, -2, -1), grad)
    grad_weights = call(graph, A.matmul.default, grad,
                        call(graph, A.transpose.int, vr, -2, -1))
    row = call(graph, A.sum.dim_IntList, call(graph, A.mul.Tensor, grad, output), [-1], True)
    grad_scores = call(graph, A.mul.Tensor, weights,
                       call(graph, A.sub.Tensor, grad_weights, row))
    grad_q = call(graph, A.mul.Scalar, call(graph, A.matmul.default, grad_scores, kr), factor)
    grad_k = call(graph, A.mul.Scalar, call(graph, A.matmul.default, call(
        graph, A.transpose.int, grad_scores, -2, -1), q), factor)
    if groups > 1:  # each key head's gradient summed over the query heads that read it
        grad_k, grad_v = (call(graph, A.sum.dim_IntList, call(
            graph, A.view.default, g, [*k.meta["val"].shape[:-3], k.meta["val"].shape[-3],
                                       groups, *k.meta["val"].shape[-2:]]), [-3])
                          for g in (grad_k, grad_v))
    return grad_q, grad_k, grad_v


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    A.scaled_dot_product_attention.default: _attention,
    A._scaled_dot_product_flash_attention_for_cpu.default: _flash_for_cpu,
    A._scaled_dot_product_flash_attention_for_cpu_backward.default: _flash_for_cpu_backward,
}
