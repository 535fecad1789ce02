"""Decompositions on the exported FX graph: ops torch-mlir cannot express or lower,
rewritten as ops it can, one table from op to function (`DECOMPOSITIONS`).

Besides the table: scalar operands the importer would mistype become 0-d tensors.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..errors import UnsupportedMutationError
from ..indexing import clamp_bound, from_end
from .fx_graph import call, operand_at, source_line, view_roots
from .inline import inline, trace


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
    """In-place ops torch-mlir cannot express or lower, as in-place ops it can.

    A decomposition may decline a node by returning None."""
    for node in list(graph.nodes):
        fn = _DECOMPOSITIONS.get(node.target)
        if fn is None and isinstance(node.target, torch._ops.OpOverload):
            fn = _DECOMPOSITIONS_BY_NAME.get(node.target._schema.name)
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


# Conjugation and negation views that are the tensor itself on real tensors (eager
# returns self); torch-mlir defines none of them.
_SELF_ON_REAL = {torch.ops.aten.resolve_conj.default, torch.ops.aten.resolve_neg.default,
                 torch.ops.aten.conj_physical_.default}


def _inlined(graph: torch.fx.Graph, node: torch.fx.Node, fn: Callable[..., Any],
             *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` traced on the fake values of the nodes among its arguments
    and inlined at the insertion point, with `node`'s stack trace."""
    gm, inputs = trace(graph, fn, args, kwargs)
    return inline(graph, gm, inputs, node.meta.get("stack_trace"))


def real_conjugations(graph: torch.fx.Graph) -> None:
    """`x.resolve_conj()`, `x.resolve_neg()`, `x.conj_physical_()` of a real `x`  =>  `x`."""
    for node in list(graph.nodes):
        if node.target in _SELF_ON_REAL and isinstance(node.args[0], torch.fx.Node) and \
                not node.args[0].meta["val"].is_complex():
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)


def _log_add_exp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """log(exp(a) + exp(b)) without overflow: max + log1p(exp(-|a - b|)); an infinite max
    is the answer (where a - b is nan)."""
    high = torch.maximum(a, b)
    return torch.where(torch.isinf(high), high,
                       high + torch.log1p(torch.exp(-(a - b).abs())))


def _log_cum_sum_exp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Prefix log-sum-exp along `dim` as ceil(log2(n)) doubling steps, each one
    `_log_add_exp` of the running result and itself shifted by a power of two (padded with
    -inf): as exact as eager's, where log(cumsum(exp(x))) overflows at exp(89)."""
    if x.dim() == 0:
        return x.clone()
    n, shift = x.shape[dim], 1
    while shift < n:
        padding = torch.full_like(x.narrow(dim, 0, shift), float("-inf"))
        x = _log_add_exp(x, torch.cat([padding, x.narrow(dim, 0, n - shift)], dim))
        shift *= 2
    return x


@_decomposes(torch.ops.aten.logcumsumexp.default)
def _logcumsumexp(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """x.logcumsumexp(d)  =>  the doubling scan of `_log_cum_sum_exp`: torch-mlir's own
    decomposition, log(cumsum(exp(x))), gave inf for x = 1e4 where eager gives 1e4."""
    if not node.meta["val"].is_floating_point():
        return None
    return _inlined(graph, node, _log_cum_sum_exp, *node.args, **node.kwargs)


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
    (torch-mlir has no fill_diagonal_). A wrapped fill of a matrix that is not
    contiguous steps through memory eager's way only: left to be refused."""
    x, value, wrap = node.args[0], node.args[1], bool(operand_at(node, 2))
    shape = x.meta["val"].shape
    if not all(isinstance(n, int) for n in shape) or (
            wrap and len(shape) == 2 and shape[0] > shape[1] + 1 and
            not x.meta["val"].is_contiguous()):
        return None
    return _inlined(graph, node, _filled_diagonal, x, value, wrap)


def _clamped_bools(x: torch.Tensor, low: torch.Tensor | None = None,
                   high: torch.Tensor | None = None) -> torch.Tensor:
    """clamp of a bool tensor by bool tensors: (x | low) & high, as eager orders
    False < True (eager clamps bools by tensors only)."""
    if low is not None:
        x = x | low
    if high is not None:
        x = x & high
    return x if low is not None or high is not None else x.clone()


_CLAMPS = {torch.ops.aten.clamp.Tensor: False, torch.ops.aten.clamp_.Tensor: True}


@_decomposes(*_CLAMPS)
def _bool_clamp(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """`mask.clamp(min=m)` on bools as `_clamped_bools`: torch-mlir fills the missing
    bound with int1's signed greatest value, False, and so clamped every element to
    False."""
    x = node.args[0]
    if x.meta["val"].dtype != torch.bool:
        return None
    result = _inlined(graph, node, _clamped_bools, x, operand_at(node, 1),
                      operand_at(node, 2))
    return call(graph, torch.ops.aten.copy_.default, x, result) if _CLAMPS[node.target] \
        else result


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
    return _inlined(graph, node, _put, x, index, source, bool(operand_at(node, 3)))


@_decomposes(torch.ops.aten.addcmul_.default, torch.ops.aten.addcdiv_.default,
             torch.ops.aten.addcmul.default, torch.ops.aten.addcdiv.default)
def _addcmul(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """self.addcmul_(a, b, value=v)  =>  self.add_(a * v * b) (addcdiv: a * v / b), in
    eager's order; torch-mlir's own lowering mistypes it when a and b broadcast up to
    self."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    self, first, second = node.args[:3]
    value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value", 1)
    values = [getattr(n, "meta", {}).get("val") for n in (self, first, second)]
    if all(isinstance(v, torch.Tensor) for v in values):
        # eager computes the product in the dtype of all three: a float64 self with
        # float32 operands multiplies in float64
        _, dtype = elementwise_dtypes(
            *values, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        first, second = (call(graph, torch.ops.aten._to_copy.default, operand, dtype=dtype)
                         if operand.meta["val"].dtype != dtype else operand
                         for operand in (first, second))
    scaled = call(graph, torch.ops.aten.mul.Scalar, first, value)
    combine = torch.ops.aten.mul.Tensor if node.target in (
        torch.ops.aten.addcmul_.default, torch.ops.aten.addcmul.default) \
        else torch.ops.aten.div.Tensor
    term = call(graph, combine, scaled, second)
    inplace = node.target in (torch.ops.aten.addcmul_.default,
                              torch.ops.aten.addcdiv_.default)
    add = torch.ops.aten.add_.Tensor if inplace else torch.ops.aten.add.Tensor
    return graph.call_function(add, (self, term))


def _as_strided_scatter(x: torch.Tensor, source: torch.Tensor, size: list[int],
                        stride: list[int], offset: int | None) -> torch.Tensor:
    """aten's kernel writes `source` through `x.clone().as_strided(...)`: for a
    contiguous x, the elements at storage positions offset + sum(i_d * stride_d): an
    index_put into x's flat view."""
    index = torch.zeros((), dtype=torch.int64) + (offset or 0)
    for d, (n, step) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        index = index + torch.arange(n).view(shape) * step
    flat = x.reshape(-1).index_put((index.reshape(-1),), source.expand(size).reshape(-1))
    # a new tensor, not a view: the replaced node's fake value (a tensor of its own) is
    # given to the result
    return flat.view(x.shape).clone()


@_decomposes(torch.ops.aten.as_strided_scatter.default)
def _as_strided_scatter_as_index_put(graph: torch.fx.Graph, node: torch.fx.Node
                                     ) -> torch.fx.Node | None:
    """as_strided_scatter(x, src, size, stride, off) of a contiguous x  =>  an
    index_put into x's flat view at the elements' positions (a scatter). AOTAutograd
    writes a write through a view this way (`self.b[self.ptr % 3].add_(x)` under
    torch.compile with gradients), and torch-mlir's lowering to StableHLO has no pattern
    for it. Elements that overlap (eager writes one of them, which is not defined) are
    left to the op's refusal."""
    x, source, size, stride = node.args[:4]
    offset = operand_at(node, 4)
    value = x.meta["val"]
    if not value.is_contiguous() or not all(isinstance(v, int) for v in
                                            [*size, *stride, offset or 0]):
        return None
    positions = {offset or 0}
    for n, step in zip(size, stride):
        positions = {p + i * step for p in positions for i in range(n)}
    if len(positions) != _numel(size) or max(positions, default=0) >= value.numel():
        return None
    return _inlined(graph, node, _as_strided_scatter, x, source, list(size), list(stride),
                    offset)


def _numel(size: list[int]) -> int:
    n = 1
    for d in size:
        n *= d
    return n


def _fma(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """fma(a, b, c)  =>  a * b + c. Dynamo writes `addcmul_`/`addcdiv_` with a `value`
    and `add_` with a tensor `alpha` as inductor's fma (its own decompositions), which
    torch-mlir does not define; eager's kernels round after the product, as this does.
    A product (addcdiv: quotient) of narrower operands than the result (`a * b` of
    float32 tensors into a float64 self) is computed in the result's dtype, as eager's
    addcmul does."""
    a, b, c = node.args[:3]
    dtype = getattr(node.meta.get("val"), "dtype", None)
    if isinstance(a, torch.fx.Node) and a.target in (torch.ops.aten.mul.Tensor,
                                                     torch.ops.aten.div.Tensor) and \
            list(a.users) == [node] and dtype is not None and dtype.is_floating_point \
            and a.meta["val"].dtype != dtype and \
            torch.promote_types(a.meta["val"].dtype, dtype) == dtype:
        a = call(graph, a.target, *(
            call(graph, torch.ops.aten._to_copy.default, operand, dtype=dtype)
            if isinstance(operand, torch.fx.Node) else operand for operand in a.args))
    return graph.call_function(torch.ops.aten.add.Tensor,
                               (call(graph, torch.ops.aten.mul.Tensor, a, b), c))


@_decomposes(torch.ops.aten.select_scatter.default)
def _select_scatter_from_end(graph: torch.fx.Graph, node: torch.fx.Node
                             ) -> torch.fx.Node | None:
    """select_scatter(x, v, dim, -1)  =>  select_scatter(x, v, dim, n - 1): torch-mlir's
    lowering builds a scatter of no indices for a negative index and fails (AOTAutograd
    writes `win[-1] = hv` so under torch.compile with gradients)."""
    x, source, dim, index = node.args[:4]
    if not isinstance(index, int) or index >= 0:
        return None
    size = x.meta["val"].shape[dim]
    return graph.call_function(torch.ops.aten.select_scatter.default,
                               (x, source, dim, from_end(index, size)))


# Ops defined only once their module is imported (torch._inductor.inductor_prims), by
# schema name.
_DECOMPOSITIONS_BY_NAME: dict[str, Decomposition] = {"prims::fma": _fma}


_TRANSPOSE_LAST = (torch.ops.aten.mT.default, torch.ops.aten.mH.default,
                   torch.ops.aten.adjoint.default, torch.ops.aten.matrix_H.default)


@_decomposes(*_TRANSPOSE_LAST, torch.ops.aten.swapaxes.default,
             torch.ops.aten.swapdims.default)
def _as_transpose(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """Views torch-mlir does not know, as the transpose they are: x.mT, x.swapaxes(a, b)
    (mH, adjoint and matrix_H only for real tensors, where they do not conjugate)."""
    self = node.args[0]
    if self.meta["val"].is_complex():
        return None
    dims = (-2, -1) if node.target in _TRANSPOSE_LAST else node.args[1:3]
    return graph.call_function(torch.ops.aten.transpose.int, (self, *dims))


@_decomposes(torch.ops.aten.ravel.default)
def _ravel(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """x.ravel()  =>  x.reshape(-1): torch-mlir knows no aten.ravel (it stays a
    torch.operator, illegal in the lowering). Like reshape, it is a view of a contiguous
    x and a copy otherwise; its fake value (kept) tells _copy_where_views_copy which."""
    return graph.call_function(torch.ops.aten.reshape.default, (node.args[0], [-1]))


@_decomposes(torch.ops.aten.cumsum.default, torch.ops.aten.cumsum_.default)
def _cumsum_of_0d(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """cumsum of a 0-d tensor, which torch-mlir fails to lower, as the cumsum of its
    one-element view: x.view(1).cumsum(0).view(()). (cumprod has no lowering at all.)"""
    self = node.args[0]
    if self.meta["val"].dim() != 0:
        return None
    functional = {torch.ops.aten.cumsum_.default: torch.ops.aten.cumsum.default}
    target = functional.get(node.target, node.target)
    scan = call(graph, target, call(graph, torch.ops.aten.view.default, self, [1]), 0,
                **{k: v for k, v in node.kwargs.items() if k == "dtype"})
    result = call(graph, torch.ops.aten.view.default, scan, [])
    if node.target in functional:
        return call(graph, torch.ops.aten.copy_.default, self, result)
    return result


@_decomposes(torch.ops.aten.squeeze.dims)
def _squeeze_dims(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """x.squeeze((a, b))  =>  x.squeeze(b).squeeze(a), last dimension first"""
    self, dims = node.args
    rank = max(self.meta["val"].dim(), 1)
    result = self
    for dim in sorted({d % rank for d in dims}, reverse=True):
        result = call(graph, torch.ops.aten.squeeze.dim, result, dim)
    return result


@_decomposes(torch.ops.aten._efficientzerotensor.default)
def _zero_tensor(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """A tensor of zeros that autograd's formulas make without memory: zeros."""
    value = node.meta["val"]
    return graph.call_function(torch.ops.aten.zeros.default, (list(value.shape),),
                               {"dtype": value.dtype})


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


@_decomposes(torch.ops.aten.max_pool2d_with_indices.default)
def _max_pool_stride(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """max_pool2d_with_indices(x, k, stride=[])  =>  (x, k, stride=k): an empty stride is
    the kernel's (what autograd saves for F.max_pool2d's backward), which torch-mlir's
    lowering reads as stride 1."""
    args = list(node.args)
    stride = args[2] if len(args) > 2 else node.kwargs.get("stride", [])
    if stride:
        return None
    kwargs = dict(node.kwargs)
    kwargs.pop("stride", None)
    args = [*args[:2], list(args[1]), *args[3:]]
    return graph.call_function(node.target, tuple(args), kwargs)


@_decomposes(torch.ops.aten.slice_scatter.default)
def _slice_scatter_bounds(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """slice_scatter(x, v, d, start, end) with its bounds clamped into x's dimension, as
    slicing clamps them: the backward of `x[..., 4:]` has end 2**63 - 1, for which
    torch-mlir's lowering tried to allocate without bound (the process was killed)."""
    self, src, dim, start, end, step = (list(node.args) + [0, None, None, 1][
        len(node.args) - 2:])[:6]
    dim = node.kwargs.get("dim", dim)
    start = node.kwargs.get("start", start)
    end = node.kwargs.get("end", end)
    step = node.kwargs.get("step", step)
    if any(isinstance(v, torch.fx.Node) for v in (dim, start, end, step)):
        return None
    size = self.meta["val"].shape[dim]
    bounded = [clamp_bound(v, size) if v is not None else d
               for v, d in ((start, 0), (end, size))]
    if bounded == [start, end]:
        return None
    return graph.call_function(node.target, (self, src, dim, *bounded, step))


# `x &= y` and friends, as the bitwise ops torch-mlir knows in both operand kinds; the
# bitwise ops' Scalar forms (`x.bitwise_xor_(5)` decomposes to a prim torch-mlir lacks)
# as their Tensor forms.
_BITWISE = {"__iand__": "bitwise_and_", "__ior__": "bitwise_or_", "__ixor__": "bitwise_xor_",
            "__ilshift__": "bitwise_left_shift_", "__irshift__": "bitwise_right_shift_",
            "__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor",
            "__lshift__": "bitwise_left_shift", "__rshift__": "bitwise_right_shift",
            **{name: name for name in ("bitwise_and", "bitwise_or", "bitwise_xor",
                                       "bitwise_and_", "bitwise_or_", "bitwise_xor_")}}


def _scalar_tensor(graph: torch.fx.Graph, value: Any) -> torch.fx.Node:
    """A 0-d tensor for a Python scalar operand; it promotes like the scalar does."""
    if isinstance(value, bool):  # the importer has no bool scalar_tensor: int != 0
        number = call(graph, torch.ops.aten.scalar_tensor.default, int(value),
                      dtype=torch.int64)
        return call(graph, torch.ops.aten.ne.Scalar, number, 0)
    dtype = torch.int64 if isinstance(value, int) else torch.get_default_dtype()
    return call(graph, torch.ops.aten.scalar_tensor.default, value, dtype=dtype)


def scalars_as_tensors(graph: torch.fx.Graph) -> None:
    """Scalar operands the importer would get wrong, as 0-d tensors of the Tensor overload.

    torch-mlir imports a Python bool operand as an int, which promotes a bool tensor to
    int64 (`mask &= True` would fail), and a bool passed as a tensor (`x.copy_(True)`) as
    invalid IR; and it lacks the Scalar form of some bitwise ops.
    """
    for node in list(graph.nodes):
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            continue
        bools = [i for i, (arg, value) in enumerate(zip(target._schema.arguments, node.args))
                 if isinstance(arg.type, torch.TensorType) and isinstance(value, bool)]
        if bools:  # `x.copy_(True)`: the importer makes a bool a tensor of ... a bool
            with graph.inserting_before(node):
                node.args = tuple(_scalar_tensor(graph, v) if i in bools else v
                                  for i, v in enumerate(node.args))
        name = target.overloadpacket.__name__
        renamed = _BITWISE.get(name)
        scalars = [i for i, (arg, value) in enumerate(zip(target._schema.arguments, node.args))
                   if isinstance(arg.type, torch.NumberType) and
                   not isinstance(value, torch.fx.Node)]
        if target._overloadname not in ("Scalar", "Tensor") or renamed is None and (
                target._overloadname != "Scalar" or
                not any(isinstance(node.args[i], bool) for i in scalars)):
            continue
        packet = getattr(torch.ops.aten, renamed or name)
        if "Tensor" not in packet.overloads():
            continue
        args = list(node.args)
        with graph.inserting_before(node):
            for i in scalars:
                args[i] = _scalar_tensor(graph, args[i])
            replacement = graph.call_function(packet.Tensor, tuple(args), dict(node.kwargs))
        replacement.meta = dict(node.meta)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)


def _is_tensor_type(argument: torch._C.Argument) -> bool:
    kind = argument.type
    if isinstance(kind, torch.OptionalType):
        kind = kind.getElementType()
    return isinstance(kind, torch.TensorType)


def float_operands_as_tensors(graph: torch.fx.Graph) -> None:
    """A Python float passed where the schema takes a Tensor (`buf.mul_(0.9)` is traced as
    `mul_.Tensor(buf, 0.9)`), as a 0-d tensor of the dtype eager computes in.

    Eager wraps the number as a double that promotes like a scalar and is read at the
    computation's dtype; torch-mlir's importer makes it a float32 tensor
    (`torch.tensor(0.9)`), so a float64 program multiplied by 0.9 rounded to float32
    (an SGD step with momentum off by 1e-8)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    for node in list(graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        schema = target._schema.arguments
        given = [(i, a, node.args[i] if i < len(node.args) else node.kwargs.get(a.name))
                 for i, a in enumerate(schema)]
        floats = [(i, a, v) for i, a, v in given
                  if _is_tensor_type(a) and isinstance(v, float)]
        if not floats:
            continue
        tensors = [v.meta["val"] for _, a, v in given if isinstance(v, torch.fx.Node)
                   and isinstance(v.meta.get("val"), torch.Tensor)]
        if not tensors:
            continue
        _, dtype = elementwise_dtypes(
            *tensors, *(v for _, _, v in floats),
            type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
        if not dtype.is_floating_point:
            continue  # complex: the importer's
        args, kwargs = list(node.args), dict(node.kwargs)
        with graph.inserting_before(node):
            for i, argument, value in floats:
                number = call(graph, torch.ops.aten.scalar_tensor.default, value,
                              dtype=dtype)
                if i < len(args):
                    args[i] = number
                else:
                    kwargs[argument.name] = number
        node.args, node.kwargs = tuple(args), kwargs


def _normalize(graph: torch.fx.Graph, x: torch.fx.Node, mean: torch.fx.Node,
               var: torch.fx.Node, eps: float, weight: Any, bias: Any,
               per_channel: list[int]) -> torch.fx.Node:
    """(x - mean) * rsqrt(var + eps) * weight + bias, weight and bias per channel."""
    invstd = call(graph, torch.ops.aten.rsqrt.default,
                  call(graph, torch.ops.aten.add.Scalar, var, eps))
    out = call(graph, torch.ops.aten.mul.Tensor,
               call(graph, torch.ops.aten.sub.Tensor, x, mean), invstd)
    if weight is not None:
        out = call(graph, torch.ops.aten.mul.Tensor, out,
                   call(graph, torch.ops.aten.view.default, weight, per_channel))
    if bias is not None:
        out = call(graph, torch.ops.aten.add.Tensor, out,
                   call(graph, torch.ops.aten.view.default, bias, per_channel))
    return out


def _update_running(graph: torch.fx.Graph, running: torch.fx.Node, batch: torch.fx.Node,
                    momentum: float, scale: float) -> None:
    """running.copy_(running * (1 - momentum) + batch * momentum * scale)"""
    update = call(graph, torch.ops.aten.add.Tensor,
                  call(graph, torch.ops.aten.mul.Scalar, running, 1 - momentum),
                  call(graph, torch.ops.aten.mul.Scalar, batch, momentum * scale))
    call(graph, torch.ops.aten.copy_.default, running, update)


@_decomposes(torch.ops.aten.batch_norm.default)
def _batch_norm_training(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """Training-mode batch_norm updates its running statistics, though its schema does
    not say so; made explicit as `running_mean.copy_(...)`, `running_var.copy_(...)`:

        mean, var = x.mean(dims), x.var(dims, correction=0)
        out = (x - mean) * rsqrt(var + eps) * weight + bias
        running_mean.copy_(running_mean * (1 - m) + mean * m)
        running_var.copy_(running_var * (1 - m) + var * n / (n - 1) * m)
    """
    x, weight, bias, running_mean, running_var, training, momentum, eps = node.args[:8]
    if not training or running_mean is None or running_var is None:
        return None
    x_val = x.meta["val"]
    channels = x_val.shape[1]
    dims = [0, *range(2, x_val.dim())]
    per_channel = [1, channels] + [1] * (x_val.dim() - 2)
    count = x_val.numel() // channels
    mean = call(graph, torch.ops.aten.mean.dim, x, dims, True)
    var = call(graph, torch.ops.aten.var.correction, x, dims, correction=0, keepdim=True)
    out = _normalize(graph, x, mean, var, eps, weight, bias, per_channel)
    for running, batch, scale in ((running_mean, mean, 1.0),
                                  (running_var, var, count / max(count - 1, 1))):
        batch = call(graph, torch.ops.aten.view.default, batch, [channels])
        _update_running(graph, running, batch, momentum, scale)
    return out


@_decomposes(torch.ops.aten.instance_norm.default)
def _instance_norm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """instance_norm, which torch-mlir aborts on (an LLVM error, the whole process),
    normalizing each (sample, channel) over the other dimensions; with running
    statistics and input statistics it updates them, as eager does, with the mean over
    the samples of each channel's statistics (the variance unbiased):

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
    out = _normalize(graph, x, mean, var, eps, weight, bias, per_channel)
    if use_input_stats and running_mean is not None and running_var is not None:
        for running, batch, scale in ((running_mean, mean, 1.0),
                                      (running_var, var, count / max(count - 1, 1))):
            batch = call(graph, torch.ops.aten.mean.dim,
                         call(graph, torch.ops.aten.view.default, batch,
                              [x_val.shape[0], channels]), [0])
            _update_running(graph, running, batch, momentum, scale)
    return out


@_decomposes(torch.ops.aten.scaled_dot_product_attention.default)
def _attention(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """torch-mlir has no StableHLO lowering for scaled_dot_product_attention:

        softmax(q @ k.transpose(-2, -1) * scale + mask) @ v     (no dropout)
    """
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
    return call(graph, torch.ops.aten.matmul.default, weights, v)


def _convolution_gradients(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                           stride: list[int], padding: list[int], dilation: list[int],
                           groups: int, mask: list[bool]) -> tuple[torch.Tensor | None, ...]:
    """The gradients of `convolution(x, w, stride, padding, dilation, groups)` as
    convolutions, as JAX's transpose rules compute them: the input's a transposed
    convolution of the output's gradient, the weight's a convolution of the input by the
    output's gradient over the batch (strides and dilations swapped), cut to the kernel."""
    spatial = range(2, x.dim())
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        # the full transposed convolution, then the input's rows of it: (rows past the
        # last window, read by no output, have gradient 0). torch-mlir applies an
        # output_padding to the dimensions in reverse order, so none is asked of it.
        full = torch.ops.aten.convolution(grad, w, None, stride, [0] * len(stride),
                                          dilation, True, [0] * len(stride), groups)
        grad_input = full
        for d in spatial:
            grad_input = grad_input.narrow(d, padding[d - 2], min(
                x.shape[d], full.shape[d] - padding[d - 2]))
        extra = [x.shape[d] - grad_input.shape[d] for d in spatial]
        if any(extra):
            grad_input = torch.constant_pad_nd(
                grad_input, [p for e in reversed(extra) for p in (0, e)])
    if mask[1]:
        # the batch contracted as the convolution's features: in groups, the input's
        # channels [N, g * c, ...] as [c, g * N, ...], group-major, the gradient's
        # [g * o, N, ...] (its transpose)
        n, c = x.shape[0], x.shape[1] // groups
        by_group = x.reshape(n, groups, c, *x.shape[2:]).permute(
            2, 1, 0, *range(3, x.dim() + 1)).reshape(c, groups * n, *x.shape[2:])
        by_batch = torch.ops.aten.convolution(
            by_group, grad.transpose(0, 1), None, dilation, padding, stride,
            False, [0] * len(stride), groups)
        for d in spatial:
            by_batch = by_batch.narrow(d, 0, w.shape[d])
        grad_weight = by_batch.transpose(0, 1)
    if mask[2]:
        grad_bias = grad.sum([0, *spatial])
    return grad_input, grad_weight, grad_bias


@_decomposes(torch.ops.aten.convolution_backward.default)
def _convolution_backward(graph: torch.fx.Graph, node: torch.fx.Node
                          ) -> tuple[torch.fx.Node | None, ...] | None:
    """convolution_backward (not transposed)  =>  `_convolution_gradients`:
    torch-mlir computes the weight's gradient as a convolution grouped by the batch, over
    a window one row and column too big, which XLA:CPU runs 3x slower than JAX's program
    (a stride-2 3x3 convolution's backward, bench/op_classes.py)."""
    (grad, x, w, _, stride, padding, dilation, transposed, output_padding, groups,
     mask) = node.args
    if transposed or any(output_padding):
        return None
    return _inlined(graph, node, _convolution_gradients, grad, x, w, list(stride),
                    list(padding), list(dilation), groups, list(mask))


@_decomposes(torch.ops.aten.remainder.Tensor, torch.ops.aten.remainder.Scalar,
             torch.ops.aten.remainder_.Tensor, torch.ops.aten.remainder_.Scalar)
def _remainder(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """Python's modulo: the sign of the divisor. torch-mlir lowers remainder to
    stablehlo.remainder, which keeps the dividend's sign (C's fmod):

        r = fmod(a, b);  where(r != 0 and (r < 0) != (b < 0), r + b, r)
    """
    a, b = node.args[:2]
    if isinstance(b, torch.fx.Node):
        r = call(graph, torch.ops.aten.fmod.Tensor, a, b)
        r_negative = call(graph, torch.ops.aten.lt.Scalar, r, 0)
        # logical_xor, not ne: torch-mlir compares booleans as signed, which XLA rejects
        differ = call(graph, torch.ops.aten.logical_xor.default, r_negative,
                      call(graph, torch.ops.aten.lt.Scalar, b, 0))
        shifted = call(graph, torch.ops.aten.add.Tensor, r, b)
    else:  # b's sign is known; torch-mlir lowers fmod only between tensors
        divisor = call(graph, torch.ops.aten.scalar_tensor.default, b,
                       dtype=a.meta["val"].dtype)
        r = call(graph, torch.ops.aten.fmod.Tensor, a, divisor)
        r_negative = call(graph, torch.ops.aten.lt.Scalar, r, 0)
        differ = r_negative if b >= 0 else call(
            graph, torch.ops.aten.logical_not.default, r_negative)
        shifted = call(graph, torch.ops.aten.add.Scalar, r, b)
    fix = call(graph, torch.ops.aten.logical_and.default,
               call(graph, torch.ops.aten.ne.Scalar, r, 0), differ)
    result = call(graph, torch.ops.aten.where.self, fix, shifted, r)
    if node.target in (torch.ops.aten.remainder_.Tensor, torch.ops.aten.remainder_.Scalar):
        return call(graph, torch.ops.aten.copy_.default, a, result)
    return result


@_decomposes(torch.ops.aten.fmod.Scalar, torch.ops.aten.fmod_.Scalar)
def _fmod_scalar(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """`x.fmod_(1.5)`: torch-mlir lowers fmod only between tensors (fmod.Scalar is left
    illegal), so the divisor becomes a 0-d tensor of the result's dtype."""
    a, b = node.args[:2]
    divisor = call(graph, torch.ops.aten.scalar_tensor.default, b,
                   dtype=node.meta["val"].dtype)
    target = torch.ops.aten.fmod_.Tensor if node.target is torch.ops.aten.fmod_.Scalar \
        else torch.ops.aten.fmod.Tensor
    return call(graph, target, a, divisor)
