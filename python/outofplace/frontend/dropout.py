"""Dropout in a traced training step, drawn where the tracer sees it (`TracedDropout`,
entered by tracing.py while autograd records).

ATen's `dropout` is a composite op: below autograd it draws a mask (`bernoulli_` of an
`empty_like`), scales it and multiplies, and autograd saves the mask for the backward.
The pre-dispatch tracer sees only `dropout`, so the backward would read a mask it never
saw, and SavedTensors (saved_tensors.py) cannot replay a random op: a second draw would
differ from the forward's. Traced here as eager's kernel computes it (ATen's
`_dropout_impl`: the mask `bernoulli_(1 - p)` of `empty_like(input)`, or of one element
per sample and channel for `feature_dropout`, divided by `1 - p`, then `input * mask`, or
`input.mul_(mask)` in place), the mask is a value of the graph, which the forward and
the backward both read. The same way: `alpha_dropout` and `feature_alpha_dropout`
(`nn.AlphaDropout`, SELU's), with their affine transform of the mask; attention with a
dropout probability (`dropout_p`, which eager computes with ATen's math kernel, a
composite too), as that kernel computes it; and `rrelu` in training (`nn.RReLU`: a
slope drawn for each element at most 0, which its gradient reads too). The numbers are
drawn by the compiled program, not eager's generator: the same distribution, not
eager's draws. Without training, at `p = 0` or of an empty input the op draws nothing
and is traced as it is.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


_ALPHA = 1.7580993408473766  # SELU's alpha (an alpha dropout keeps its mean and variance)


def _dropout(feature: bool, alpha: bool, inplace: bool, input: torch.Tensor, p: float,
             train: bool) -> torch.Tensor | None:
    """eager's `_dropout_impl`, or None where it draws nothing."""
    if not train or p == 0 or input.numel() == 0 or (feature and input.dim() < 2):
        return None
    if p == 1:
        zeros = torch.zeros((), dtype=input.dtype, device=input.device)
        return input.mul_(zeros) if inplace else input * zeros
    shape = [*input.shape[:2], *[1] * (input.dim() - 2)] if feature else input.shape
    noise = torch.empty(shape, dtype=input.dtype, device=input.device)
    noise.bernoulli_(1 - p)
    if alpha:
        a = 1 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
        b = noise.add(-1).mul_(_ALPHA * a).add_(_ALPHA * a * p)
        noise.mul_(a)
    else:
        noise.div_(1 - p)
    if feature:
        noise = noise.expand_as(input)
        b = b.expand_as(input) if alpha else None
    result = input.mul_(noise) if inplace else input * noise
    return result.add_(b) if alpha else result


def _attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
               is_causal: bool = False, scale: float | None = None,
               enable_gqa: bool = False) -> torch.Tensor:
    """`scaled_dot_product_attention` with dropout as eager computes it (ATen's
    `_scaled_dot_product_attention_math`: its only kernel with dropout), the attention
    weights' dropout `_dropout`'s."""
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    root = math.sqrt(abs(scale))  # (query and key each scaled by its root)
    query = query * (-root if scale < 0 else root)
    if is_causal:
        attn_mask = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool,
                               device=query.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros((), dtype=query.dtype, device=query.device).masked_fill(
            attn_mask.logical_not(), -math.inf)
    if enable_gqa and key.size(-3) != query.size(-3):
        key = key.repeat_interleave(query.size(-3) // key.size(-3), -3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), -3)
    scores = query @ (key.transpose(-2, -1) * root)
    if attn_mask is not None:
        scores = scores + attn_mask
    # `_safe_softmax`: a query every key of which is masked reads zeros, not NaN
    weights = torch.softmax(scores, -1).masked_fill(
        (scores == -math.inf).all(-1, keepdim=True), 0.0)
    dropped = _dropout(False, False, False, weights, dropout_p, True)
    return (weights if dropped is None else dropped) @ value


def _rrelu(input: torch.Tensor, lower: float = 1 / 8, upper: float = 1 / 3,
           training: bool = False, inplace: bool = False) -> torch.Tensor | None:
    """eager's `rrelu_with_noise` in training: each element at most 0 times a slope drawn
    from [lower, upper), the others as they are (their slope 1: the gradient's factor);
    None where it draws nothing (evaluation: leaky_relu at the mean slope)."""
    if not training or input.numel() == 0:
        return None
    slope = torch.empty_like(input).uniform_(lower, upper)
    slope = torch.where(input <= 0, slope, torch.ones((), dtype=input.dtype,
                                                      device=input.device))
    return input.mul_(slope) if inplace else input * slope


def _traced_rrelu(op: Any, inplace: bool | None) -> Any:
    """`op` (F.rrelu, torch.rrelu, torch.rrelu_) traced as `_rrelu` in training."""
    def traced(*args: Any, **kwargs: Any) -> torch.Tensor:
        arguments = dict(zip(("input", "lower", "upper", "training", "inplace"), args))
        arguments |= kwargs
        if inplace is not None:
            arguments["inplace"] = inplace
        result = _rrelu(**arguments)
        return op(*args, **kwargs) if result is None else result
    return traced


def _vf(feature: bool, alpha: bool, inplace: bool, op: Any) -> Any:
    """`_VF`'s `op` traced as `_dropout`, or `op` itself where that draws nothing."""
    def traced(input: torch.Tensor, p: float, train: bool) -> torch.Tensor:
        result = _dropout(feature, alpha, inplace, input, p, train)
        return op(input, p, train) if result is None else result
    return traced


_OPS = {  # torch's (and _VF's) dropouts -> traced
    op: _vf("feature" in op.__name__, "alpha" in op.__name__, op.__name__.endswith("_"), op)
    for op in (torch.dropout, torch.dropout_, torch.feature_dropout, torch.feature_dropout_,
               torch.alpha_dropout, torch.alpha_dropout_, torch.feature_alpha_dropout,
               torch.feature_alpha_dropout_)}


class _TracedVF:
    """torch._VF with its dropouts traced (`_OPS`)."""

    def __getattr__(self, name: str) -> Any:
        traced = _OPS.get(getattr(torch, name, None))
        return traced if traced is not None else getattr(torch._VF, name)


def _traced_attention(*args: Any, **kwargs: Any) -> torch.Tensor:
    """`scaled_dot_product_attention`, as `_attention` where it drops weights."""
    dropout_p = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
    if dropout_p > 0 and torch.is_grad_enabled():
        return _attention(*args, **kwargs)
    return F.scaled_dot_product_attention(*args, **kwargs)


def _with_traced_calls(f: Any, dropout: Any = F.dropout) -> Any:
    """`f` (F.dropout, F.multi_head_attention_forward, ...) as PyTorch wrote it, its
    dropouts traced: its `_VF` calls, and its calls of `dropout` and
    `scaled_dot_product_attention` (a function the mode handles runs with the mode off,
    so it would not see those); its checks, warnings and unbatched inputs as eager's."""
    never = lambda *_: False  # noqa: E731 (f's own torch-function check: the mode's)
    g = types.FunctionType(f.__code__, {
        **f.__globals__, "_VF": _TracedVF(), "has_torch_function": never,
        "has_torch_function_unary": never, "has_torch_function_variadic": never,
        "dropout": dropout, "scaled_dot_product_attention": _traced_attention},
        f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    return g


_DROPOUT = _with_traced_calls(F.dropout)  # (it calls no `dropout`)
_FUNCTIONS = {f: _with_traced_calls(f, _DROPOUT) for f in (
    F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout,
    F.multi_head_attention_forward)} | {F.dropout: _DROPOUT} | _OPS | {
    F.scaled_dot_product_attention: _traced_attention,
    F.rrelu: _traced_rrelu(F.rrelu, None), torch.rrelu: _traced_rrelu(torch.rrelu, False),
    torch.rrelu_: _traced_rrelu(torch.rrelu_, True)}


class TracedDropout(TorchFunctionMode):
    """While entered, dropout in training (`nn.Dropout`, `nn.AlphaDropout`, `F.dropout`,
    `F.dropout1d/2d/3d`, `F.alpha_dropout`, `F.feature_alpha_dropout`, their `torch.` ops,
    attention's `dropout_p`, `nn.MultiheadAttention`'s) and `rrelu` are traced as eager's
    kernels compute them, the mask or slopes a value of the graph (see the module's
    docstring)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        traced = _FUNCTIONS.get(func) if torch.is_grad_enabled() else None
        return (traced or func)(*args, **kwargs)

    def exit(self) -> None:
        """Leaves the mode stack if entered (it is, where autograd records)."""
        if self in torch.overrides._get_current_function_mode_stack():
            self.__exit__(None, None, None)
