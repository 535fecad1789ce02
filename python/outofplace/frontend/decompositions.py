"""Decompositions on the exported FX graph that carry outofplace's semantics: what
eager does that the op's schema does not say (training batch_norm and instance_norm
update their running statistics), or says in terms of memory (`put_` and
`fill_diagonal_` write in row-major element order, `empty_strided` orders dimensions by
strides, `_neg_view` is a view), or does not do (dropout in eval mode returns its input).

Batch norm in training is computed as eager's CPU kernel computes it: the statistics
(`_statistics`, for the forward and for the statistics autograd saves, which the program
then computes once), the output (`_normalize`: one scale and shift a channel) and the
backward (`_batch_norm_backward`: its sums in float64).

`decompose` runs one table, op to function: these, max_pool_gradient.py's (a pooling's
gradient without a scatter), fused_multiply_adds.py's (eager's one-rounding `add` with
alpha, `addcmul`, `lerp`) and the rewrites of frontend/upstream/ (ops torch-mlir lacks or
mis-lowers, each with its issue and canary).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.fx

from ..errors import UnsupportedMutationError
from . import composites, fused_multiply_adds, max_pool_gradient, upstream
from .fx_graph import call, operand_at, source_line, view_roots
from .inline import inline_call


# A node's replacement (a tuple for an op of several results), or None: declined.
Decomposition = Callable[[torch.fx.Graph, torch.fx.Node],
                         torch.fx.Node | tuple[torch.fx.Node | None, ...] | None]


_DECOMPOSITIONS: dict[torch._ops.OpOverload, Decomposition] = {}


def _decomposes(*overloads: torch._ops.OpOverload) -> Callable[[Decomposition], Decomposition]:
    def register(fn: Decomposition) -> Decomposition:
        for overload in overloads:
            _DECOMPOSITIONS[overload] = fn
        return fn
    return register


def decompose(graph: torch.fx.Graph) -> None:
    """Rewrites each node whose op has a decomposition, here or in frontend/upstream/.

    A decomposition may decline a node by returning None."""
    for node in list(graph.nodes):
        fn = _DECOMPOSITIONS.get(node.target) or \
            max_pool_gradient.DECOMPOSITIONS.get(node.target) or \
            fused_multiply_adds.DECOMPOSITIONS.get(node.target) or \
            upstream.DECOMPOSITIONS.get(node.target)
        if fn is None and isinstance(node.target, torch._ops.OpOverload):
            fn = fused_multiply_adds.DECOMPOSITIONS_BY_NAME.get(node.target._schema.name)
        if fn is None:
            continue
        with graph.inserting_before(node):
            replacement = fn(graph, node)
        if replacement is None:
            continue
        if isinstance(replacement, tuple):  # an op of several results: its getitems
            for user in list(node.users):
                user.replace_all_uses_with(replacement[user.args[1]])
                graph.erase_node(user)
            graph.erase_node(node)
            continue
        if replacement not in node.all_input_nodes:  # a new node, not an operand
            replacement.meta = dict(node.meta)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)


_DROPOUTS = tuple(getattr(torch.ops.aten, name).default for name in (
    "dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout",
    "dropout_", "feature_dropout_", "alpha_dropout_", "feature_alpha_dropout_"))


@_decomposes(*_DROPOUTS)
def _dropout(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """Dropout in eval mode (`nn.Dropout(inplace=True)` too), or with p = 0: x itself,
    as eager returns it (its result is x). Dropout with p > 0 in training draws random
    numbers, and is left as it is."""
    x, p, train = node.args[:3]
    return x if not train or p == 0 else None


def _filled_diagonal(x: torch.Tensor, value: Any, wrap: bool) -> torch.Tensor:
    """x.fill_diagonal_(value, wrap) as eager fills it: x[i, i, ...] for i < min(sizes),
    and for a contiguous matrix taller than wide by two or more with wrap=True every
    (columns + 1)-th element of its flattened memory."""
    if wrap and x.dim() == 2 and x.shape[0] > x.shape[1] + 1:
        x.view(-1)[::x.shape[1] + 1] = value
        return x
    diagonal = torch.arange(min(x.shape))
    x[(diagonal,) * x.dim()] = value
    return x


@_decomposes(torch.ops.aten.fill_diagonal_.default)
def _fill_diagonal(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """x.fill_diagonal_(v)  =>  `_filled_diagonal`: a write at the diagonal's positions
    (torch-mlir has no fill_diagonal_; what it writes is memory order). A wrapped fill
    of a matrix that is not contiguous steps through memory eager's way only: left to be
    refused."""
    x, value, wrap = node.args[0], node.args[1], bool(operand_at(node, 2))
    shape = x.meta["val"].shape
    if not all(isinstance(n, int) for n in shape) or (
            wrap and len(shape) == 2 and shape[0] > shape[1] + 1 and
            not x.meta["val"].is_contiguous()):
        return None
    return inline_call(graph, node, _filled_diagonal, x, value, wrap)


def _put(x: torch.Tensor, index: torch.Tensor, source: torch.Tensor,
         accumulate: bool) -> torch.Tensor:
    """x.put_(index, source, accumulate): index_put_ on x's elements in row-major order
    (x.view(-1) when x is contiguous, else its copy, copied back)."""
    key, values = (index.reshape(-1),), source.reshape(-1)
    if x.is_contiguous():
        x.view(-1).index_put_(key, values, accumulate)
        return x
    return x.copy_(x.reshape(-1).index_put(key, values, accumulate).view(x.shape))


@_decomposes(torch.ops.aten.put_.default)
def _put_in_place(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """x.put_(i, v)  =>  `_put`: torch-mlir has no put_."""
    x, index, source = node.args[:3]
    return inline_call(graph, node, _put, x, index, source, bool(operand_at(node, 3)))


@_decomposes(torch.ops.aten._neg_view.default)
def _neg_view(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """A negated view, as a negated copy where nothing can tell them apart: no write
    reaches its base."""
    roots, written = view_roots(graph)
    if roots.get(node.args[0], node.args[0]) in written:
        raise UnsupportedMutationError(
            "torch.aten._neg_view", "the negated view of a tensor that is written: "
            "outofplace has no negated view, only a negated copy", location=source_line(node))
    return graph.call_function(torch.ops.aten.neg.default, (node.args[0],))


@_decomposes(torch.ops.aten.empty_strided.default)
def _empty_strided(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """An empty tensor with strides that order its dimensions otherwise than a
    contiguous one, as the permutation of a contiguous one it is (torch-mlir leaves an
    op it cannot lower behind); strides with gaps or overlaps are refused."""
    value = node.meta["val"]
    if value.is_contiguous():
        return None
    order = sorted(range(value.dim()), key=lambda d: -value.stride(d))
    dense = torch.empty([value.shape[d] for d in order], device="meta").permute(
        [order.index(d) for d in range(value.dim())])
    if dense.stride() != value.stride():
        raise UnsupportedMutationError(
            "torch.aten.empty_strided", f"strides {list(value.stride())} for shape "
            f"{list(value.shape)} leave gaps or overlap", location=source_line(node))
    root = call(graph, torch.ops.aten.zeros.default, [value.shape[d] for d in order],
                dtype=value.dtype)
    return graph.call_function(torch.ops.aten.permute.default,
                               (root, [order.index(d) for d in range(value.dim())]))


def _normalize(graph: torch.fx.Graph, x: torch.fx.Node, mean: torch.fx.Node,
               invstd: torch.fx.Node, weight: Any, bias: Any,
               per_channel: list[int]) -> torch.fx.Node:
    """(x - mean) * invstd * weight + bias, weight and bias per channel, as eager's CPU
    kernel computes it (batch_norm_kernel.cpp, `batch_norm_cpu_contiguous_impl`): one
    scale and one shift a channel, `x * alpha + beta` with `alpha = invstd * weight` and
    `beta = bias - mean * alpha`. So x is read once, and nothing of x's size but the
    output is written (`x - mean` would be, read again by the variance's sum)."""
    alpha = invstd
    if weight is not None:
        alpha = call(graph, torch.ops.aten.mul.Tensor, alpha,
                     call(graph, torch.ops.aten.view.default, weight, per_channel))
    shift = call(graph, torch.ops.aten.mul.Tensor, mean, alpha)
    if bias is not None:
        beta = call(graph, torch.ops.aten.sub.Tensor,
                    call(graph, torch.ops.aten.view.default, bias, per_channel), shift)
    else:
        beta = call(graph, torch.ops.aten.neg.default, shift)
    return call(graph, torch.ops.aten.add.Tensor,
                call(graph, torch.ops.aten.mul.Tensor, x, alpha), beta)


def _rsqrt(graph: torch.fx.Graph, var: torch.fx.Node, eps: float) -> torch.fx.Node:
    return call(graph, torch.ops.aten.rsqrt.default,
                call(graph, torch.ops.aten.add.Scalar, var, eps))


_WIDE = (torch.float32, torch.float64)  # what eager's CPU batch norm sums in float64


def _statistics(graph: torch.fx.Graph, x: torch.fx.Node, dims: list[int], count: int
                ) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]:
    """Batch norm's mean (x's dtype), biased variance and inverse standard deviation
    (float64 for a float32 or float64 x, else x's dtype), kept dims.

    A float32 or float64 x: as eager's CPU kernel computes them (batch_norm_kernel.cpp,
    `batch_norm_cpu_collect_stats` and `_update_stats`): the elements summed in float64,
    the mean rounded to x's dtype, the squares of the deviations from it computed in
    x's dtype and summed in float64, the variance and `1 / sqrt(var + eps)` in float64.
    Each sum widens its own terms, so XLA fuses the conversion into the reduction;
    `var.correction` (which torch-mlir lowers as a float64 copy of the whole of x, both
    sums reading it) cost more than the rest of the statistics. Other dtypes: `mean.dim`
    and `var.correction`, which reduced_precision.py computes in float32."""
    if x.meta["val"].dtype not in _WIDE:
        mean = call(graph, torch.ops.aten.mean.dim, x, dims, True)
        var = call(graph, torch.ops.aten.var.correction, x, dims, correction=0,
                   keepdim=True)
        return mean, var, None
    wide = torch.float64
    total = call(graph, torch.ops.aten.sum.dim_IntList, x, dims, True, dtype=wide)
    mean = call(graph, torch.ops.prims.convert_element_type.default,
                call(graph, torch.ops.aten.div.Scalar, total, count), x.meta["val"].dtype)
    deviation = call(graph, torch.ops.aten.sub.Tensor, x, mean)
    squares = call(graph, torch.ops.aten.mul.Tensor, deviation, deviation)
    var = call(graph, torch.ops.aten.div.Scalar,
               call(graph, torch.ops.aten.sum.dim_IntList, squares, dims, True, dtype=wide),
               count)
    return mean, var, var


def _batch_statistics(graph: torch.fx.Graph, x: torch.fx.Node, dims: list[int],
                      count: int, eps: float
                      ) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]:
    """`_statistics` and the inverse standard deviation in x's dtype: mean, var, invstd."""
    mean, var, wide = _statistics(graph, x, dims, count)
    invstd = _rsqrt(graph, var, eps)
    if wide is not None:
        invstd = call(graph, torch.ops.prims.convert_element_type.default, invstd,
                      x.meta["val"].dtype)
    return mean, var, invstd


def _running_update(graph: torch.fx.Graph, running: torch.fx.Node, batch: torch.fx.Node,
                    momentum: float, scale: float) -> torch.fx.Node:
    """running * (1 - momentum) + batch * momentum * scale"""
    return call(graph, torch.ops.aten.add.Tensor,
                call(graph, torch.ops.aten.mul.Scalar, running, 1 - momentum),
                call(graph, torch.ops.aten.mul.Scalar, batch, momentum * scale))


def _per_channel(x: torch.Tensor) -> tuple[int, list[int], list[int], int]:
    """Batch norm's view of x [N, C, ...]: its channels, the dimensions each channel's
    statistics reduce, the shape of a per-channel value broadcast over x, and the
    elements a channel has."""
    channels = x.shape[1]
    return (channels, [0, *range(2, x.dim())], [1, channels] + [1] * (x.dim() - 2),
            x.numel() // channels)


@_decomposes(torch.ops.aten.batch_norm.default)
def _batch_norm_training(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """Training-mode batch_norm updates its running statistics, though its schema does
    not say so; made explicit as `running_mean.copy_(...)`, `running_var.copy_(...)`
    (each where it is given), the statistics and the output as eager computes them
    (`_statistics`, `_normalize`):

        mean, var = x.mean(dims), x.var(dims, correction=0)
        out = (x - mean) * rsqrt(var + eps) * weight + bias
        running_mean.copy_(running_mean * (1 - m) + mean * m)
        running_var.copy_(running_var * (1 - m) + var * n / (n - 1) * m)

    With both running statistics, of a float32 or float64 x: eager's
    `_native_batch_norm_legit_functional` kept whole (`_batch_norm_functional`) and
    its new statistics copied into them; with neither, `_native_batch_norm_legit.no_stats`
    kept whole (`_batch_norm_without_statistics`)."""
    x, weight, bias, running_mean, running_var, training, momentum, eps = node.args[:8]
    if not training:
        return None
    x_val = x.meta["val"]
    if running_mean is not None and running_var is not None and x_val.dtype in _WIDE and \
            x_val.dim() >= 2:
        results = _functional_composite(graph, node, torch.ops.aten.batch_norm.default)
        for running, value in zip((running_mean, running_var), results[3:]):
            call(graph, torch.ops.aten.copy_.default, running, value)
        return results[0]
    if running_mean is None and running_var is None and x_val.dtype in _WIDE and \
            x_val.dim() >= 2:
        return _no_stats_composite(graph, node)[0]
    (out, mean, _), var = _legit(graph, x, weight, bias, eps)
    for running, update in _new_statistics(graph, x, mean, var, running_mean, running_var,
                                           momentum):
        call(graph, torch.ops.aten.copy_.default, running, update)
    return out


def _legit(graph: torch.fx.Graph, x: torch.fx.Node, weight: Any, bias: Any, eps: float
           ) -> tuple[list[torch.fx.Node], torch.fx.Node]:
    """`_native_batch_norm_legit`'s results (training) as eager computes them: out,
    save_mean, save_invstd (per channel); and the batch variance (kept dims)."""
    channels, dims, per_channel, count = _per_channel(x.meta["val"])
    mean, var, invstd = _batch_statistics(graph, x, dims, count, eps)
    out = _normalize(graph, x, mean, invstd, weight, bias, per_channel)
    return [out] + [call(graph, torch.ops.aten.view.default, value, [channels])
                    for value in (mean, invstd)], var


def _new_statistics(graph: torch.fx.Graph, x: torch.fx.Node, mean: torch.fx.Node,
                    var: torch.fx.Node, running_mean: Any, running_var: Any,
                    momentum: float) -> list[tuple[torch.fx.Node, torch.fx.Node]]:
    """Each running statistic given (not None) beside its new value from the batch's
    `mean` (per channel) and `var` (`_legit`'s, biased, kept dims), as eager updates it:

        running_mean * (1 - m) + mean * m
        running_var * (1 - m) + var * n / (n - 1) * m"""
    channels, _, _, count = _per_channel(x.meta["val"])
    var = call(graph, torch.ops.aten.view.default, var, [channels])
    return [(running, _running_update(graph, running, batch, momentum, scale))
            for running, batch, scale in ((running_mean, mean, 1.0),
                                          (running_var, var, count / max(count - 1, 1)))
            if running is not None]


def _functional_body(momentum: float, eps: float
                     ) -> Callable[[torch.fx.Graph, list], list[torch.fx.Node]]:
    """The decomposition of `_native_batch_norm_legit_functional` (training): its five
    results from x, weight, bias, running_mean, running_var (weight, bias maybe None)."""
    def body(graph: torch.fx.Graph, tensors: list) -> list[torch.fx.Node]:
        x, weight, bias, running_mean, running_var = tensors
        results, var = _legit(graph, x, weight, bias, eps)
        return results + [
            call(graph, torch.ops.prims.convert_element_type.default, update,
                 running.meta["val"].dtype)
            for running, update in _new_statistics(graph, x, results[1], var, running_mean,
                                                   running_var, momentum)]
    return body


_FUNCTIONAL = torch.ops.aten._native_batch_norm_legit_functional.default


def _functional_composite(graph: torch.fx.Graph, node: torch.fx.Node,
                          op: torch._ops.OpOverload) -> list[torch.fx.Node]:
    """`_native_batch_norm_legit_functional(x, weight, bias, running_mean, running_var,
    True, momentum, eps)` for `node` (that op, or a training `batch_norm` of the same
    arguments) kept whole (composites.py): its five results. A second one of the same
    tensors and numbers, none of x, weight, bias written between, whose new running
    statistics are not read (the one saved_tensors.py replays beside a `batch_norm` for
    the statistics the backward reads) is the first's: computed once."""
    x, weight, bias, running_mean, running_var = node.args[:5]
    momentum, eps = node.args[6:8]
    operands = [x, weight, bias, running_mean, running_var]
    if op is _FUNCTIONAL and not any(u.args[1] in (3, 4) for u in node.users):
        found = composites.earlier(graph, node, _FUNCTIONAL, operands,
                                   {"momentum": momentum, "eps": eps}, operands[:3])
        if found is not None:
            return found
    # eager's kernel: `_native_batch_norm_legit.out`, the running statistics updated in
    # place and the rest written into out=, save_mean=, save_invstd=
    kernel = torch.ops.aten._native_batch_norm_legit.out
    positions = {a.name: p for p, a in enumerate(kernel._schema.arguments)}
    return composites.composite(
        graph, _FUNCTIONAL, kernel, dict(enumerate(operands)),
        {"training": True, "momentum": momentum, "eps": eps},
        _functional_body(momentum, eps), source_line(node), node.meta.get("stack_trace"),
        written=[positions[name] for name in ("out", "save_mean", "save_invstd",
                                              "running_mean", "running_var")])


@_decomposes(torch.ops.aten._native_batch_norm_legit_functional.default)
def _batch_norm_functional(graph: torch.fx.Graph, node: torch.fx.Node
                           ) -> tuple[torch.fx.Node, ...] | None:
    """The functional batch norm autograd saves the statistics of (a training step's
    backward reads its `save_mean`, `save_invstd`; frontend/saved_tensors.py replays it
    beside the forward's `batch_norm`), kept whole (composites.py) with the statistics
    `batch_norm`'s decomposition computes, computed once (`_functional_composite`) and
    as eager does:

        out, mean, invstd, running_mean * (1 - m) + mean * m,
        running_var * (1 - m) + var * n / (n - 1) * m

    Other dtypes than float32/float64, and eval mode, are left to PyTorch's
    decomposition (frontend/upstream/unlowered_ops.py)."""
    x, training = node.args[0], node.args[5]
    x_val = x.meta["val"]
    if not training or x_val.dtype not in _WIDE or x_val.dim() < 2:
        return None
    return tuple(_functional_composite(graph, node, _FUNCTIONAL))


_NO_STATS = torch.ops.aten._native_batch_norm_legit.no_stats


def _no_stats_composite(graph: torch.fx.Graph, node: torch.fx.Node) -> list[torch.fx.Node]:
    """`_native_batch_norm_legit.no_stats(x, weight, bias, True, momentum, eps)` for
    `node` (that op, or a training `batch_norm` of the same tensors without running
    statistics) kept whole (composites.py), as eager's `no_stats_out` kernel computes it
    into XLA's buffers: out, save_mean, save_invstd. One before it of the same tensors
    and numbers, none of them written between, is it."""
    x, weight, bias = node.args[:3]
    momentum, eps = (node.args[6:8] if node.target is torch.ops.aten.batch_norm.default
                     else node.args[4:6])
    attributes = {"training": True, "momentum": momentum, "eps": eps}
    found = composites.earlier(graph, node, _NO_STATS, [x, weight, bias], attributes,
                               [x, weight, bias])
    if found is not None:
        return found

    def body(region: torch.fx.Graph, tensors: list) -> list[torch.fx.Node]:
        return _legit(region, *tensors, eps)[0]

    kernel = torch.ops.aten._native_batch_norm_legit.no_stats_out
    positions = {a.name: p for p, a in enumerate(kernel._schema.arguments)}
    return composites.composite(
        graph, _NO_STATS, kernel, {0: x, 1: weight, 2: bias}, attributes, body,
        source_line(node), node.meta.get("stack_trace"),
        written=[positions[name] for name in ("out", "save_mean", "save_invstd")])


@_decomposes(_NO_STATS)
def _batch_norm_without_statistics(graph: torch.fx.Graph, node: torch.fx.Node
                                   ) -> tuple[torch.fx.Node, ...] | None:
    """Training batch norm without running statistics (`F.batch_norm(x, None, None,
    ...)`), the form autograd saves the statistics of, kept whole: float32 and float64
    (others: PyTorch's decomposition)."""
    x, training = node.args[0], node.args[3]
    if not training or x.meta["val"].dtype not in _WIDE or x.meta["val"].dim() < 2:
        return None
    return tuple(_no_stats_composite(graph, node))


def _as(graph: torch.fx.Graph, value: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    """value in dtype (value itself when it is already)."""
    if value.meta["val"].dtype == dtype:
        return value
    return call(graph, torch.ops.prims.convert_element_type.default, value, dtype)


@_decomposes(torch.ops.aten.native_batch_norm_backward.default)
def _batch_norm_backward(graph: torch.fx.Graph, node: torch.fx.Node
                         ) -> tuple[torch.fx.Node | None, ...] | None:
    """Training batch norm's backward as eager's CPU kernel computes it
    (batch_norm_kernel.cpp, `batch_norm_cpu_backward_contiguous_impl`), kept whole
    (composites.py): the two sums over each channel in float64, of terms in x's dtype,
    the rest in x's dtype:

        sum = Σ dy                      dotp = Σ (x - mean) * dy
        k = dotp * invstd * invstd / n  grad_mean = sum / n
        grad_input = (dy - grad_mean - (x - mean) * k) * invstd * weight
        grad_weight = dotp * invstd     grad_bias = sum

    (PyTorch's decomposition summed in float32: gradients of inputs far from a zero mean
    differed from eager's.) Eval mode, other dtypes than float32/float64 and mixed
    dtypes are left to PyTorch's decomposition."""
    grad_out, x, weight, _, _, mean, invstd, train, eps, mask = node.args
    x_val = x.meta["val"]
    dtype = x_val.dtype
    given = [grad_out, mean, invstd] + ([weight] if weight is not None else [])
    if not train or dtype not in _WIDE or x_val.dim() < 2 or \
            any(v is None or v.meta["val"].dtype != dtype for v in given):
        return None
    returns = [i for i in range(3) if mask[i]]
    if not returns:
        return (None, None, None)
    op = torch.ops.aten.native_batch_norm_backward.default
    results = composites.composite(
        graph, op, op, {0: grad_out, 1: x, 2: weight, 3: None, 4: None, 5: mean, 6: invstd},
        {"train": True, "eps": eps, "output_mask": [bool(m) for m in mask]},
        lambda g, tensors: _backward_body(g, tensors, mask), source_line(node),
        node.meta.get("stack_trace"), returns=returns)
    made = dict(zip(returns, results))
    return tuple(made.get(i) for i in range(3))


def _backward_body(graph: torch.fx.Graph, tensors: list, mask: list[bool]
                   ) -> list[torch.fx.Node]:
    """`_batch_norm_backward`'s decomposition: the gradients `mask` asks for."""
    grad_out, x, weight, _, _, mean, invstd = tensors
    dtype = x.meta["val"].dtype
    channels, dims, per_channel, count = _per_channel(x.meta["val"])
    wide = torch.float64

    def channel(value: torch.fx.Node) -> torch.fx.Node:
        return call(graph, torch.ops.aten.view.default, value, per_channel)

    mean, invstd = channel(mean), channel(invstd)
    deviation = call(graph, torch.ops.aten.sub.Tensor, x, mean)
    total = call(graph, torch.ops.aten.sum.dim_IntList, grad_out, dims, True, dtype=wide)
    dotp = call(graph, torch.ops.aten.sum.dim_IntList,
                call(graph, torch.ops.aten.mul.Tensor, deviation, grad_out), dims, True,
                dtype=wide)
    results = []
    if mask[0]:
        k = call(graph, torch.ops.aten.div.Scalar,
                 call(graph, torch.ops.aten.mul.Tensor,
                      call(graph, torch.ops.aten.mul.Tensor, _as(graph, dotp, dtype),
                           invstd), invstd), count)
        grad_mean = _as(graph, call(graph, torch.ops.aten.div.Scalar, total, count), dtype)
        grad_input = call(graph, torch.ops.aten.mul.Tensor,
                          call(graph, torch.ops.aten.sub.Tensor,
                               call(graph, torch.ops.aten.sub.Tensor, grad_out, grad_mean),
                               call(graph, torch.ops.aten.mul.Tensor, deviation, k)),
                          invstd)
        if weight is not None:
            grad_input = call(graph, torch.ops.aten.mul.Tensor, grad_input, channel(weight))
        results.append(grad_input)
    if mask[1]:
        results.append(call(graph, torch.ops.aten.view.default, _as(
            graph, call(graph, torch.ops.aten.mul.Tensor, dotp, _as(graph, invstd, wide)),
            dtype), [channels]))
    if mask[2]:
        results.append(call(graph, torch.ops.aten.view.default, _as(graph, total, dtype),
                            [channels]))
    return results


@_decomposes(torch.ops.aten.instance_norm.default)
def _instance_norm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """instance_norm normalizes each (sample, channel) over the other dimensions; with
    running statistics and input statistics it updates them, as eager does (its schema
    does not say so), with the mean over the samples of each channel's statistics (the
    variance unbiased). Every call is rewritten: torch-mlir also aborts on the op (an
    LLVM error, the whole process), a gap that alone would put it in upstream/:

        mean, var = x.mean(dims), x.var(dims, correction=0)      dims = 2, 3, ...
        out = (x - mean) * rsqrt(var + eps) * weight + bias
        running_mean.copy_(running_mean * (1 - m) + mean.mean(0) * m)
        running_var.copy_(running_var * (1 - m) + (var * n / (n - 1)).mean(0) * m)

    Without input statistics (eval with running statistics) mean and var are the
    running ones."""
    x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps = \
        node.args[:8]
    x_val = x.meta["val"]
    channels = x_val.shape[1]
    dims = list(range(2, x_val.dim()))
    per_channel = [1, channels] + [1] * (x_val.dim() - 2)
    count = x_val.numel() // (x_val.shape[0] * channels)
    if use_input_stats:
        mean = call(graph, torch.ops.aten.mean.dim, x, dims, True)
        var = call(graph, torch.ops.aten.var.correction, x, dims, correction=0,
                   keepdim=True)
    else:
        mean = call(graph, torch.ops.aten.view.default, running_mean, per_channel)
        var = call(graph, torch.ops.aten.view.default, running_var, per_channel)
    out = _normalize(graph, x, mean, _rsqrt(graph, var, eps), weight, bias, per_channel)
    if use_input_stats and running_mean is not None and running_var is not None:
        for running, batch, scale in ((running_mean, mean, 1.0),
                                      (running_var, var, count / max(count - 1, 1))):
            batch = call(graph, torch.ops.aten.mean.dim,
                         call(graph, torch.ops.aten.view.default, batch,
                              [x_val.shape[0], channels]), [0])
            call(graph, torch.ops.aten.copy_.default, running,
                 _running_update(graph, running, batch, momentum, scale))
    return out


# Gradients of layers that neither torch-mlir defines nor PyTorch decomposes.

def _scattered_gradient(grad: torch.Tensor, indices: torch.Tensor, shape: tuple,
                        spatial: int) -> torch.Tensor:
    """Each output's gradient added at the input position its index names (the index of
    the position in its sample and channel, as eager's kernel adds it)."""
    flat = grad.new_zeros((*shape[:-spatial], torch.Size(shape[-spatial:]).numel()))
    return flat.scatter_add(-1, indices.flatten(-spatial), grad.flatten(-spatial)) \
        .view(shape)


@_decomposes(torch.ops.aten.adaptive_max_pool2d_backward.default,
             torch.ops.aten.adaptive_max_pool3d_backward.default)
def _adaptive_max_pool_backward(graph: torch.fx.Graph, node: torch.fx.Node
                                ) -> torch.fx.Node:
    """adaptive_max_pool{2,3}d_backward(grad, x, indices): the gradient scattered into
    zeros of x's shape at the indices the forward chose."""
    grad, x, indices = node.args[:3]
    spatial = 2 if node.target is torch.ops.aten.adaptive_max_pool2d_backward.default else 3
    return inline_call(graph, node, _scattered_gradient, grad, indices,
                       tuple(x.meta["val"].shape), spatial)


def _weight_norm(v: torch.Tensor, g: torch.Tensor, dim: int) -> tuple[torch.Tensor, ...]:
    """w = v * (g / ‖v‖) and ‖v‖, the norm over every dimension but `dim`, kept with
    size 1 in those (as g is), as eager's kernel computes them."""
    others = [d for d in range(v.dim()) if d != dim % v.dim()]
    norms = (v * v).sum(others, keepdim=True).sqrt()
    return v * (g / norms), norms


@_decomposes(torch.ops.aten._weight_norm_interface.default)
def _weight_norm_forward(graph: torch.fx.Graph, node: torch.fx.Node
                         ) -> tuple[torch.fx.Node, ...]:
    """_weight_norm_interface(v, g, dim) (weight_norm's parametrization): `_weight_norm`."""
    v, g = node.args[:2]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    return tuple(inline_call(graph, node, _weight_norm, v, g, dim))


def _weight_norm_gradients(grad_w: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                           norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, ...]:
    """The gradients of v and g of w = g * v / ‖v‖ (the norm over every dimension but
    `dim`; g and norms are kept with size 1 in those), as eager's kernel computes them:

        grad_g = Σ grad_w * v / ‖v‖    grad_v = g / ‖v‖ * (grad_w - v * Σ grad_w * v / ‖v‖²)
    """
    others = [d for d in range(v.dim()) if d != dim % v.dim()]
    norms = norms.view(g.shape)
    sums = (grad_w * v).sum(others, keepdim=True)
    grad_v = g / norms * (grad_w - v * (sums / (norms * norms)))
    return grad_v, (sums / norms).view(g.shape)


@_decomposes(torch.ops.aten._weight_norm_interface_backward.default)
def _weight_norm_backward(graph: torch.fx.Graph, node: torch.fx.Node
                          ) -> tuple[torch.fx.Node, ...]:
    """_weight_norm_interface_backward(grad_w, v, g, norms, dim) (weight_norm's
    parametrization in training): v's and g's gradients (`_weight_norm_gradients`)."""
    grad_w, v, g, norms, dim = node.args[:5]
    return tuple(inline_call(graph, node, _weight_norm_gradients, grad_w, v, g, norms, dim))


def _renormed_rows(weight: torch.Tensor, indices: torch.Tensor, max_norm: float,
                   norm_type: float) -> torch.Tensor:
    """The rows of `weight` that `indices` names, each whose norm passes `max_norm`
    scaled to it, as eager's kernel scales them (the norm read as a double, the scale
    `max_norm / (norm + 1e-7)` computed in double)."""
    rows = weight[indices.flatten()]
    norms = torch.linalg.vector_norm(rows, norm_type, dim=-1, keepdim=True).double()
    scale = torch.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    return rows * scale.to(weight.dtype)


@_decomposes(torch.ops.aten.embedding_renorm_.default,
             torch.ops.aten.embedding_renorm.default)
def _embedding_renorm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """embedding_renorm_(weight, indices, max_norm, norm_type) (`nn.Embedding` with
    `max_norm`): `weight.index_put_((indices,), renormed rows)`, an update of the rows
    looked up (a row named twice is written twice with the same values); its functional
    variant (AOTAutograd's, on the torch.compile path) `index_put`."""
    weight, indices, max_norm, norm_type = node.args[:4]
    rows = inline_call(graph, node, _renormed_rows, weight, indices, max_norm, norm_type)
    flat = call(graph, torch.ops.aten.view.default, indices, [-1])
    put = torch.ops.aten.index_put_.default \
        if node.target is torch.ops.aten.embedding_renorm_.default \
        else torch.ops.aten.index_put.default
    return call(graph, put, weight, [flat], rows)


def _multilabel_margins(x: torch.Tensor, target: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """multilabel_margin_loss's terms, as eager's kernel reads its target: each row's
    classes up to its first -1. Returns the [N, K, C] mask of the hinge terms
    `1 - x[y_k] + x[j]` that count (k a target of the row, j none) and the terms, the
    targets' positions clamped to 0, and the [N, C] is_target (as x's dtype)."""
    x2, t2 = (x, target) if x.dim() == 2 else (x[None], target[None])
    valid = torch.cumsum((t2 < 0).to(torch.int64), dim=1) == 0
    classes = t2.clamp(min=0)
    is_target = torch.zeros_like(x2).scatter_add(1, classes, valid.to(x2.dtype)) > 0
    terms = 1 - x2.gather(1, classes)[:, :, None] + x2[:, None, :]
    counted = valid[:, :, None] & ~is_target[:, None, :] & (terms > 0)
    return counted, terms, classes, is_target.to(x.dtype)


def _multilabel_margin_loss(x: torch.Tensor, target: torch.Tensor, reduction: int
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """multilabel_margin_loss_forward(x, target, reduction): each row's sum of its
    counted hinge terms over the number of classes, reduced; and is_target."""
    counted, terms, _, is_target = _multilabel_margins(x, target)
    loss = torch.where(counted, terms, 0).sum((1, 2)) / x.shape[-1]
    loss = loss if x.dim() == 2 else loss[0]
    if reduction == 1:
        loss = loss.mean()
    elif reduction == 2:
        loss = loss.sum()
    return loss, is_target.view(x.shape)


def _multilabel_margin_gradient(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor,
                                reduction: int) -> torch.Tensor:
    """multilabel_margin_loss_backward: each counted term adds 1 / C to its class j and
    takes 1 / C from its target y_k, times the output's gradient (over N for `mean`)."""
    counted, _, classes, _ = _multilabel_margins(x, target)
    counted = counted.to(x.dtype)
    rows = counted.sum(1) - torch.zeros_like(counted.sum(1)).scatter_add(
        1, classes, counted.sum(2))
    scale = grad if reduction else (grad[:, None] if x.dim() == 2 else grad)
    rows = rows / x.shape[-1] * scale
    if reduction == 1:
        rows = rows / (x.shape[0] if x.dim() == 2 else 1)
    return rows.view(x.shape)


@_decomposes(torch.ops.aten.multilabel_margin_loss_forward.default,
             torch.ops.aten.multilabel_margin_loss.default)
def _multilabel_margin(graph: torch.fx.Graph, node: torch.fx.Node) -> Any:
    """multilabel_margin_loss[_forward](x, target, reduction) as eager's kernel reads
    its target (PyTorch's decomposition adds the terms of the positions after the
    first -1 too, as targets of class 0: wrong values)."""
    x, target, reduction = (list(node.args) + [1])[:3]
    loss, is_target = inline_call(graph, node, _multilabel_margin_loss, x, target,
                                  reduction)
    return (loss, is_target) if node.target is \
        torch.ops.aten.multilabel_margin_loss_forward.default else loss


@_decomposes(torch.ops.aten.multilabel_margin_loss_backward.default)
def _multilabel_margin_backward(graph: torch.fx.Graph, node: torch.fx.Node) -> Any:
    """multilabel_margin_loss_backward(grad, x, target, reduction, is_target)"""
    grad, x, target, reduction = node.args[:4]
    return inline_call(graph, node, _multilabel_margin_gradient, grad, x, target, reduction)


# PyTorch's decompositions that its tracers run in place of eager's kernel (a Python
# kernel at the Autograd key: torch.export's, AOTAutograd's), wrong, and ours instead
# while outofplace traces (`eager_autograd_kernels`)
_WRONG_AUTOGRAD_KERNELS = {
    torch.ops.aten.multilabel_margin_loss_forward.default: _multilabel_margin_loss}


@contextlib.contextmanager
def eager_autograd_kernels() -> Iterator[None]:
    """While entered, the ops of `_WRONG_AUTOGRAD_KERNELS` trace as eager computes them
    (PyTorch's Python kernel of `multilabel_margin_loss_forward`, which its tracers
    run, counts the positions after a row's first -1 as targets of class 0: wrong
    losses and gradients, inductor's too)."""
    key = torch._C.DispatchKey.Autograd
    saved = {op: op.py_kernels.get(key) for op in _WRONG_AUTOGRAD_KERNELS}
    try:
        for op, fn in _WRONG_AUTOGRAD_KERNELS.items():
            op.py_kernels[key] = fn
            op._dispatch_cache.clear()
        yield
    finally:
        for op, fn in saved.items():
            if fn is None:
                op.py_kernels.pop(key, None)
            else:
                op.py_kernels[key] = fn
            op._dispatch_cache.clear()
