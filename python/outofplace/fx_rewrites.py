"""Rewrites of the exported FX graph before import, while fake tensors know storage.

torch IR carries no storage identity, offsets or strides; some aliasing facts are only
known here:
- an op the schema calls a view (`contiguous`, `reshape`, `to`) may have copied;
- the elements of a list view (`split`, `chunk`, `unbind`) are views at offsets the
  fake tensors know, expressed here as `slice` / `select` of the base;
- torch-mlir's importer turns `as_strided` into a gather (a copy): strided_views;
- whether an operand of an in-place op overlaps what the op writes.
"""

from __future__ import annotations

import bisect
import operator
from typing import Any, Callable

import torch
import torch.fx

from . import op_registry, strided_views
from .errors import UnsupportedMutationError
from .fx_graph import (
    call, fake_mode_of, is_list_view, op_effects, overlaps, source_line, storage_of,
    view_base, view_roots)


def rewrite(graph: torch.fx.Graph) -> None:
    """All rewrites, in the order they depend on each other."""
    _fake_constants(graph)
    _refuse_overlapping_operands(graph)
    _refuse_writes_into_position_reads(graph)
    _refuse_stale_position_reads(graph)
    _scalars_as_tensors(graph)
    _decompose(graph)
    _wrap_negative_indices(graph)
    _copy_where_views_copy(graph)
    _explicit_list_views(graph)
    strided_views.strided_views_of_roots(graph)
    strided_views.writes_through_strided_views(graph)
    strided_views.as_strided_read_at_each_use(graph)
    strided_views.refuse_as_strided_of_written(graph)


def _fake_constants(graph: torch.fx.Graph) -> None:
    """Gives each constant (`get_attr`) the fake value every other node has."""
    constants = [n for n in graph.nodes if n.op == "get_attr" and "val" not in n.meta]
    if constants:
        fake_mode = fake_mode_of(graph)
        for node in constants:
            node.meta["val"] = fake_mode.from_tensor(getattr(graph.owning_module, node.target),
                                                     static_shapes=True)


Decomposition = Callable[[torch.fx.Graph, torch.fx.Node], torch.fx.Node | None]
_DECOMPOSITIONS: dict[torch._ops.OpOverload, Decomposition] = {}


def _decomposes(*overloads: torch._ops.OpOverload) -> Callable[[Decomposition], Decomposition]:
    def register(fn: Decomposition) -> Decomposition:
        for overload in overloads:
            _DECOMPOSITIONS[overload] = fn
        return fn
    return register


def _decompose(graph: torch.fx.Graph) -> None:
    """In-place ops torch-mlir cannot express or lower, as in-place ops it can.

    A decomposition may decline a node by returning None."""
    for node in list(graph.nodes):
        fn = _DECOMPOSITIONS.get(node.target)
        if fn is None:
            continue
        with graph.inserting_before(node):
            replacement = fn(graph, node)
        if replacement is None:
            continue
        replacement.meta = dict(node.meta)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)


def _indices_at(node: torch.fx.Node, dim: int, index: Any) -> list[Any]:
    """`[None] * dim + [index]`: indexing dimension `dim` of self by `index`."""
    rank = node.args[0].meta["val"].dim()
    return [None] * (dim % max(rank, 1)) + [index]


@_decomposes(torch.ops.aten.index_copy_.default)
def _index_copy(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """self.index_copy_(d, i, src)  =>  self.index_put_([None] * d + [i], src)"""
    self, dim, index, source = node.args
    return graph.call_function(torch.ops.aten.index_put_.default,
                               (self, _indices_at(node, dim, index), source))


@_decomposes(torch.ops.aten.index_fill_.int_Scalar, torch.ops.aten.index_fill_.int_Tensor)
def _index_fill(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """self.index_fill_(d, i, v)  =>  self.index_put_([None] * d + [i], tensor(v))"""
    self, dim, index, value = node.args
    if not isinstance(value, torch.fx.Node):
        self_val = self.meta["val"]
        scalar = graph.call_function(torch.ops.aten.scalar_tensor.default, (value,),
                                     {"dtype": self_val.dtype})
        with self_val.fake_mode:
            scalar.meta["val"] = torch.scalar_tensor(value, dtype=self_val.dtype)
        value = scalar
    return graph.call_function(torch.ops.aten.index_put_.default,
                               (self, _indices_at(node, dim, index), value))


@_decomposes(torch.ops.aten.index_add_.default)
def _index_add(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """self.index_add_(d, i, src, alpha=a)  =>  self.index_put_([None] * d + [i], src * a,
    accumulate=True)"""
    self, dim, index, source = node.args[:4]
    alpha = node.args[4] if len(node.args) > 4 else node.kwargs.get("alpha", 1)
    if alpha != 1:
        source = call(graph, torch.ops.aten.mul.Scalar, source, alpha)
    return graph.call_function(torch.ops.aten.index_put_.default,
                               (self, _indices_at(node, dim, index), source, True))


@_decomposes(torch.ops.aten.addcmul_.default, torch.ops.aten.addcdiv_.default,
             torch.ops.aten.addcmul.default, torch.ops.aten.addcdiv.default)
def _addcmul(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """self.addcmul_(a, b, value=v)  =>  self.add_(a * v * b) (addcdiv: a * v / b), in
    eager's order; torch-mlir's own lowering mistypes it when a and b broadcast up to
    self."""
    self, first, second = node.args[:3]
    value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value", 1)
    scaled = call(graph, torch.ops.aten.mul.Scalar, first, value)
    combine = torch.ops.aten.mul.Tensor if node.target in (
        torch.ops.aten.addcmul_.default, torch.ops.aten.addcmul.default) \
        else torch.ops.aten.div.Tensor
    term = call(graph, combine, scaled, second)
    inplace = node.target in (torch.ops.aten.addcmul_.default,
                              torch.ops.aten.addcdiv_.default)
    add = torch.ops.aten.add_.Tensor if inplace else torch.ops.aten.add.Tensor
    return graph.call_function(add, (self, term))


@_decomposes(torch.ops.aten.scatter_reduce_.two, torch.ops.aten.scatter_reduce.two)
def _scatter_reduce_mean(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """scatter_reduce with reduce="mean" as a sum divided by a count (lower_updates
    lowers sum, prod, amax and amin), as eager computes it:

        total = x.scatter_reduce(d, i, src, "sum", include_self)
        count = (ones_like(x) if include_self else zeros_like(x)).scatter_add(d, i, 1)
        x = total / count.clamp_min(1)          (floor division for integer x)
    """
    self, dim, index, src = node.args[:4]
    reduce = node.args[4] if len(node.args) > 4 else node.kwargs.get("reduce")
    include_self = node.args[5] if len(node.args) > 5 else node.kwargs.get("include_self", True)
    if reduce != "mean":
        return None
    total = call(graph, torch.ops.aten.scatter_reduce.two, self, dim, index, src, "sum",
                 include_self=include_self)
    start = torch.ops.aten.ones_like.default if include_self else \
        torch.ops.aten.zeros_like.default
    count = call(graph, torch.ops.aten.scatter_add.default, call(graph, start, self), dim,
                 index, call(graph, torch.ops.aten.ones_like.default, src,
                             dtype=self.meta["val"].dtype))
    count = call(graph, torch.ops.aten.clamp_min.default, count, 1)
    if self.meta["val"].is_floating_point():
        mean = call(graph, torch.ops.aten.div.Tensor, total, count)
    else:
        mean = call(graph, torch.ops.aten.div.Tensor_mode, total, count, rounding_mode="floor")
    if node.target is torch.ops.aten.scatter_reduce_.two:
        return call(graph, torch.ops.aten.copy_.default, self, mean)
    return mean


_TRANSPOSE_LAST = (torch.ops.aten.mT.default, torch.ops.aten.mH.default,
                   torch.ops.aten.adjoint.default)


@_decomposes(*_TRANSPOSE_LAST, torch.ops.aten.swapaxes.default,
             torch.ops.aten.swapdims.default)
def _as_transpose(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """Views torch-mlir does not know, as the transpose they are: x.mT, x.swapaxes(a, b)
    (mH and adjoint only for real tensors, where they do not conjugate)."""
    self = node.args[0]
    if self.meta["val"].is_complex():
        return None
    dims = (-2, -1) if node.target in _TRANSPOSE_LAST else node.args[1:3]
    return graph.call_function(torch.ops.aten.transpose.int, (self, *dims))


@_decomposes(torch.ops.aten.squeeze.dims)
def _squeeze_dims(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """x.squeeze((a, b))  =>  x.squeeze(b).squeeze(a), last dimension first"""
    self, dims = node.args
    rank = max(self.meta["val"].dim(), 1)
    result = self
    for dim in sorted({d % rank for d in dims}, reverse=True):
        result = call(graph, torch.ops.aten.squeeze.dim, result, dim)
    return result


# `x &= y` and friends, as the bitwise ops torch-mlir knows in both operand kinds.
_BITWISE = {"__iand__": "bitwise_and_", "__ior__": "bitwise_or_", "__ixor__": "bitwise_xor_",
            "__ilshift__": "bitwise_left_shift_", "__irshift__": "bitwise_right_shift_",
            "__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor",
            "__lshift__": "bitwise_left_shift", "__rshift__": "bitwise_right_shift"}


def _scalar_tensor(graph: torch.fx.Graph, value: Any) -> torch.fx.Node:
    """A 0-d tensor for a Python scalar operand; it promotes like the scalar does."""
    if isinstance(value, bool):  # the importer has no bool scalar_tensor: int != 0
        number = call(graph, torch.ops.aten.scalar_tensor.default, int(value),
                      dtype=torch.int64)
        return call(graph, torch.ops.aten.ne.Scalar, number, 0)
    dtype = torch.int64 if isinstance(value, int) else torch.get_default_dtype()
    return call(graph, torch.ops.aten.scalar_tensor.default, value, dtype=dtype)


def _scalars_as_tensors(graph: torch.fx.Graph) -> None:
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


@_decomposes(torch.ops.aten.index_put_.default)
def _index_put_bool_mask(graph: torch.fx.Graph, node: torch.fx.Node
                         ) -> torch.fx.Node | None:
    """b[mask] = v, a select over the whole buffer (never nonzero, shapes stay static):

        b.copy_(where(mask, v, b))                       v broadcast over the masked rows
        b.copy_(where(mask, v[cumsum(mask) - 1], b))     v holds one row per true element
    """
    self, indices, values = node.args[:3]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    masks = [(k, i) for k, i in enumerate(indices) if i is not None]
    if len(masks) > 1 and any(i.meta["val"].dtype == torch.bool for _, i in masks):
        raise UnsupportedMutationError(
            "torch.aten.index_put_", "a bool mask together with other index tensors in "
            "one index (the positions of its trues, as many as the data says, would "
            "broadcast with the other indices)", location=source_line(node))
    if len(masks) != 1 or not isinstance(values, torch.fx.Node):
        return None
    k, mask = masks[0]
    mask_val, self_val = mask.meta["val"], self.meta["val"]
    if mask_val.dtype != torch.bool or any(i is not None for i in indices[k + 1:]):
        return None
    if values.meta["val"].numel() == 0:  # eager accepted it: the mask selects nothing
        return graph.call_function(torch.ops.aten.alias.default, (self,))
    before, after = list(self_val.shape[:k]), list(self_val.shape[k + mask_val.dim():])
    values = call(graph, torch.ops.aten.to.dtype, values, self_val.dtype)
    rows_dim = len(before)  # where the masked elements are counted in b[mask]
    wide = [1] * (len(before) + 1 + len(after) - values.meta["val"].dim()) + \
        list(values.meta["val"].shape)
    values = call(graph, torch.ops.aten.view.default, values, wide)
    if wide[rows_dim] == 1:
        picked = call(graph, torch.ops.aten.view.default, values,
                      wide[:rows_dim] + [1] * mask_val.dim() + wide[rows_dim + 1:])
    else:
        flat = call(graph, torch.ops.aten.view.default, mask, [-1])
        count = call(graph, torch.ops.aten.cumsum.default, flat, 0, dtype=torch.int64)
        position = call(graph, torch.ops.aten.clamp_min.default,
                        call(graph, torch.ops.aten.sub.Scalar, count, 1), 0)
        rows = call(graph, torch.ops.aten.index_select.default, values, rows_dim, position)
        picked = call(graph, torch.ops.aten.view.default, rows,
                      wide[:rows_dim] + list(mask_val.shape) + wide[rows_dim + 1:])
    if accumulate:
        picked = call(graph, torch.ops.aten.add.Tensor, self, picked)
    cond = call(graph, torch.ops.aten.view.default, mask,
                list(mask_val.shape) + [1] * len(after))
    new = call(graph, torch.ops.aten.where.self, cond, picked, self)
    return call(graph, torch.ops.aten.copy_.default, self, new)


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
    for running, batch, scale in ((running_mean, mean, 1.0),
                                  (running_var, var, count / max(count - 1, 1))):
        batch = call(graph, torch.ops.aten.view.default, batch, [channels])
        update = call(graph, torch.ops.aten.add.Tensor,
                      call(graph, torch.ops.aten.mul.Scalar, running, 1 - momentum),
                      call(graph, torch.ops.aten.mul.Scalar, batch, momentum * scale))
        call(graph, torch.ops.aten.copy_.default, running, update)
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


_INDEXING = (torch.ops.aten.index.Tensor, torch.ops.aten.index_put_.default,
             torch.ops.aten.index_put.default)


def _wrap_negative_indices(graph: torch.fx.Graph) -> None:
    """`b[idx]` with negative entries in an integer index tensor counts from the end, as
    in eager; torch-mlir's lowering of index / index_put drops them instead. Each such
    index becomes `where(idx < 0, idx + size, idx)`."""
    for node in list(graph.nodes):
        if node.target not in _INDEXING:
            continue
        self, indices = node.args[0], list(node.args[1])
        sizes = self.meta["val"].shape
        accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate")
        # A write at 0-d positions becomes a dynamic_update_slice, whose lowering wraps
        # them (lower_updates._start).
        positions_lowered = node.target is not torch.ops.aten.index.Tensor and not accumulate
        dim = 0
        for position, index in enumerate(indices):
            if index is None:
                dim += 1
                continue
            index_val = index.meta["val"]
            if index_val.dtype == torch.bool:
                dim += index_val.dim()
                continue
            if positions_lowered and index_val.dim() == 0:
                dim += 1
                continue
            with graph.inserting_before(node):
                negative = call(graph, torch.ops.aten.lt.Scalar, index, 0)
                shifted = call(graph, torch.ops.aten.add.Scalar, index, int(sizes[dim]))
                indices[position] = call(graph, torch.ops.aten.where.self, negative,
                                         shifted, index)
            dim += 1
        node.args = (self, indices, *node.args[2:])


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.storage_offset() == b.storage_offset() and \
        a.shape == b.shape and a.stride() == b.stride()


# Operands eager reads in full before writing anything (`x.fill_(x[0, 0])` takes the
# value with .item()): overlapping what the op writes is harmless.
_READ_FIRST = {(torch.ops.aten.fill_.Tensor, "value"),
               (torch.ops.aten.masked_fill_.Tensor, "value"),
               (torch.ops.aten.index_fill_.int_Tensor, "value")}


def _refuse_overlapping_operands(graph: torch.fx.Graph) -> None:
    """Refuses an in-place op that reads memory it writes through another view:
    `x[:, 1:] += x[:, :-1]`, `x.index_put_(i, x.t())`. Eager then runs element by element
    over shared memory, so its result depends on the order it visits elements in (or it
    raises, when it can tell); value semantics would read every operand before writing.
    A pointwise op or `copy_` reading exactly the elements it writes (`x.mul_(x.detach())`)
    and a fill value read before the fill (`x.fill_(x[0, 0])`) have a single meaning."""
    for node in graph.nodes:
        effects = op_effects(node)
        if effects is None or effects.rebinds_view:
            continue
        elementwise = torch.Tag.pointwise in node.target.tags or \
            node.target is torch.ops.aten.copy_.default
        for position in effects.written:
            target = node.args[position] if position < len(node.args) else None
            written = target.meta.get("val") if isinstance(target, torch.fx.Node) else None
            if not isinstance(written, torch.Tensor):
                continue
            for operand in node.all_input_nodes:
                read = operand.meta.get("val")
                if operand is target or not isinstance(read, torch.Tensor) or \
                        not overlaps(written, read):
                    continue
                if elementwise and _same_layout(written, read) or \
                        (node.target, _argument_name(node, operand)) in _READ_FIRST:
                    continue
                raise UnsupportedMutationError(
                    op_registry.mlir_name(node.target),
                    f"its operand `{_argument_name(node, operand)}` shares memory with the "
                    "tensor it writes: eager's result then depends on the order it writes "
                    "the elements in; clone the operand first", location=source_line(node))


def _argument_name(node: torch.fx.Node, operand: torch.fx.Node) -> str:
    """The schema name of the argument `operand` is passed as (`values`, `src`)."""
    arguments = node.target._schema.arguments
    for position, argument in enumerate(arguments):
        value = node.args[position] if position < len(node.args) else \
            node.kwargs.get(argument.name)
        if value is operand or isinstance(value, (list, tuple)) and operand in value:
            return argument.name
    return operand.name


def _copy_where_views_copy(graph: torch.fx.Graph) -> None:
    """Makes explicit where an op the schema calls a view (`contiguous`, `reshape`,
    `to.dtype`) returned a copy in this trace: a clone after it.

    Whether such ops alias depends on strides and dtypes, which the trace's fake tensors
    know and the IR does not. A mutation of the base must not reach a copy.
    """
    for node in list(graph.nodes):
        effects = op_effects(node)
        if effects is None or not effects.is_view:
            continue
        base = node.args[effects.result_views] if effects.result_views < len(node.args) \
            else None
        if not isinstance(base, torch.fx.Node):
            continue
        out, into = storage_of(node.meta.get("val")), storage_of(base.meta.get("val"))
        if out is None or into is None or out == into:
            continue
        with graph.inserting_after(node):
            clone = graph.call_function(torch.ops.aten.clone.default, (node,))
        clone.meta = dict(node.meta)
        node.replace_all_uses_with(clone, delete_user_cb=lambda user: user is not clone)


def _list_dim(node: torch.fx.Node) -> int:
    """The dimension a list view (`split`, `chunk`, `unbind`) cuts along."""
    for position, argument in enumerate(node.target._schema.arguments):
        if argument.name == "dim":
            if position < len(node.args):
                return node.args[position]
            return node.kwargs.get("dim", argument.default_value)
    return 0


def _element_view(graph: torch.fx.Graph, item: torch.fx.Node, base: torch.fx.Node,
                  dim: int, index: int) -> torch.fx.Node | None:
    """Element `index` of a list view along `dim`, as a slice or select of the base, at
    the offset the fake tensors know."""
    base_val, item_val = base.meta.get("val"), item.meta.get("val")
    if not isinstance(base_val, torch.Tensor) or not isinstance(item_val, torch.Tensor):
        return None
    dim %= max(base_val.dim(), 1)
    offset = item_val.storage_offset() - base_val.storage_offset()
    stride = base_val.stride(dim)
    if item_val.dim() == base_val.dim():
        if stride == 0 or offset % stride:
            return None
        start = offset // stride
        return graph.call_function(torch.ops.aten.slice.Tensor, (
            base, dim, start, start + item_val.shape[dim], 1))
    if item_val.dim() == base_val.dim() - 1:
        position = index % base_val.shape[dim] if stride == 0 or offset % stride \
            else offset // stride
        return graph.call_function(torch.ops.aten.select.int, (base, dim, position))
    return None


def _explicit_list_views(graph: torch.fx.Graph) -> None:
    """`x.split(2)[1]` becomes `x[2:4]`: a plain view the pass can write through."""
    for node in list(graph.nodes):
        if not is_list_view(node):
            continue
        for item in list(node.users):
            if item.target is not operator.getitem:
                continue
            with graph.inserting_after(item):
                view = _element_view(graph, item, node.args[0], _list_dim(node),
                                     item.args[1])
            if view is None:
                continue
            view.meta = dict(item.meta)
            item.replace_all_uses_with(view)
            graph.erase_node(item)
        if not node.users:
            graph.erase_node(node)


def _is_position_read(node: torch.fx.Node) -> bool:
    """`x[:, pos]` as runtime_positions traces it: `index` at 0-d integer tensors only."""
    if node.target is not torch.ops.aten.index.Tensor:
        return False
    indices = [i for i in node.args[1] if i is not None]
    return bool(indices) and all(
        isinstance(i, torch.fx.Node) and isinstance(i.meta.get("val"), torch.Tensor) and
        i.meta["val"].dim() == 0 for i in indices)


def _refuse_writes_into_position_reads(graph: torch.fx.Graph) -> None:
    """`x[pos]` with a runtime position is traced as a copy (runtime_positions); eager
    returns a view, so a write into it (or into a view of it) would be lost, unless it
    is stored back at once: `x[pos] += w`."""
    roots, _ = view_roots(graph)
    reads = set(filter(_is_position_read, graph.nodes))
    for node in graph.nodes:
        effects = op_effects(node)
        if effects is None:
            continue
        for position in effects.written:
            target = node.args[position] if position < len(node.args) else None
            if not isinstance(target, torch.fx.Node) or \
                    roots.get(target, target) not in reads:
                continue
            if target in reads and _is_augmented_assignment(target, node):
                continue
            raise UnsupportedMutationError(
                op_registry.mlir_name(node.target),
                "it writes into a tensor read at a runtime position (x[pos] with a "
                "0-d tensor pos), which outofplace reads as a copy where eager "
                "returns a view; store it back (`x[pos] += w`, `x[pos] = y`) or "
                "write `x[pos] = x[pos] * w`", location=source_line(node))


def _is_augmented_assignment(read: torch.fx.Node, write: torch.fx.Node) -> bool:
    """`x[k] += w`: a write into the read `x[k]`, then at once a store of it at `x[k]`,
    with no other use of either. Copy or view, the result is then the same."""
    between: set[torch.fx.Node] = set()
    store = write.next
    while _is_harmless(store):
        between.add(store)
        store = store.next
    if store.target is not torch.ops.aten.index_put_.default or \
            (store.args[3] if len(store.args) > 3 else store.kwargs.get("accumulate")):
        return False
    value = store.args[2]
    while value in between and view_base(value) is not None:
        value = view_base(value)
    inside = between | {store}
    if value not in (read, write) or set(read.users) - inside - {write} or \
            set(write.users) - inside or any(set(n.users) - inside for n in between):
        return False
    indices, stored = read.args[1], store.args[1]
    return len(indices) == len(stored) and _same_value(read.args[0], store.args[0]) and \
        all(_same_value(a, b) for a, b in zip(indices, stored))


# Nodes tracing puts between the two halves of `x[k] += w`: constants and checks.
_HARMLESS = (torch.ops.aten.lift_fresh_copy.default,
             torch.ops.aten._assert_tensor_metadata.default)


def _is_harmless(node: torch.fx.Node) -> bool:
    """A constant, a check, a view or an autograd-only op (`detach_`): nothing that reads
    or writes tensor data."""
    if node.op == "get_attr" or node.target in _HARMLESS:
        return True
    effects = op_effects(node)
    return effects is not None and (effects.is_autograd_only or effects.is_view)


def _same_value(a: Any, b: Any) -> bool:
    """The same node, or nodes that compute the same from the same inputs (views of one
    tensor by the same arguments, equal constants)."""
    if not isinstance(a, torch.fx.Node) or not isinstance(b, torch.fx.Node):
        return not isinstance(a, torch.fx.Node) and not isinstance(b, torch.fx.Node) and \
            a == b
    if a is b:
        return True
    if a.op == b.op == "get_attr":
        module = a.graph.owning_module
        x, y = getattr(module, a.target, None), getattr(module, b.target, None)
        return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and \
            x.dtype == y.dtype and x.shape == y.shape and bool(torch.equal(x, y))
    if a.op != "call_function" or a.target != b.target or len(a.args) != len(b.args) or \
            a.kwargs != b.kwargs or not _is_harmless(a):
        return False
    return all(_same_value(x, y) for x, y in zip(a.args, b.args))


def _refuse_stale_position_reads(graph: torch.fx.Graph) -> None:
    """`y = x[pos]` with a runtime position is a copy where eager returns a view: when x
    is written after the read and y is used after that write, eager's y would show the
    write and the copy would not. One pass over the graph, then a lookup per read."""
    roots, _ = view_roots(graph)
    order = {node: number for number, node in enumerate(graph.nodes)}
    writes: dict[torch.fx.Node, list[int]] = {}  # root -> positions of writes to it
    views: dict[torch.fx.Node, list[torch.fx.Node]] = {}  # root -> views of it
    for node in graph.nodes:
        effects = op_effects(node)
        if effects is not None and not effects.is_autograd_only:
            for position in effects.written:
                target = node.args[position] if position < len(node.args) else None
                if isinstance(target, torch.fx.Node):
                    writes.setdefault(roots.get(target, target), []).append(order[node])
        if node in roots:
            views.setdefault(roots[node], []).append(node)
    nodes = list(graph.nodes)
    for read in filter(_is_position_read, nodes):
        root = roots.get(read.args[0], read.args[0])
        later = writes.get(root, [])
        first = bisect.bisect_right(later, order[read])
        if first == len(later):
            continue
        write = nodes[later[first]]
        aliases = [read, *views.get(read, [])]
        last_use = max((order[user] for alias in aliases for user in alias.users),
                       default=-1)
        if last_use > order[write]:
            raise UnsupportedMutationError(
                "torch.aten.index.Tensor", "x[pos] with a runtime position is read as a "
                "copy where eager returns a view, and x is written while the read is "
                f"still used (at {source_line(write) or 'a later line'}); clone the read "
                "(`x[pos].clone()`) or read it after the write", location=source_line(read))
