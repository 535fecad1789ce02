"""Ops torch-mlir has no definition of (`vdot`, `block_diag`, `lift`, ...), defines but
cannot lower to StableHLO (`NOT_LOWERED`), or lowers wrongly (`nll_loss_forward`,
gradient formulas' ops), decomposed with PyTorch's decompositions as torch-mlir's own
default path does: its table
(`torch_mlir.extras.fx_decomp_util.get_decomposition_table`, core ATen's decompositions
less those it cannot lower), then PyTorch's full table (`torch._decomp`) for the op
itself, then the op's CompositeImplicitAutograd kernel. The decomposition is traced on
the node's fake values and inlined.

An op that writes is left to the pass, which refuses it without a twin. A view is
decomposed (into a copy) only where no write reaches its base: nothing can tell the
copy from the view then. What remains that torch-mlir does not define is refused at its
line (`refuse_undefined`), before torch-mlir's lowering fails on it.

Upstream: no single issue (each op of NOT_LOWERED is its own gap; logsumexp's lowering,
llvm/torch-mlir#4606, still fails in this pipeline when the dims are a list).
Canary: test/pytest/test_fx_upstream_canaries.py::test_logsumexp_does_not_lower.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import torch
import torch.utils._pytree as pytree
import torch.fx
from torch._decomp import decomposition_table
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d
from torch_mlir.extras.fx_decomp_util import get_decomposition_table

from ... import op_registry
from ...errors import UnsupportedMutationError
from ..fx_graph import call, op_effects, replace_node, source_line, view_roots
from ..inline import inline, trace


@functools.cache
def _registered(mlir_name: str) -> bool:
    return _torch_context().is_registered_operation(mlir_name)


@functools.cache
def _torch_context() -> ir.Context:
    context = ir.Context()
    torch_d.register_dialect(context)
    return context


# Ops torch-mlir defines whose lowering to StableHLO fails ("failed to legalize"), found
# by test/fuzz/op_db_sweep.py and by model-shaped programs (interpolate, pad, roll,
# unfold/fold, logsumexp, meshgrid; `pad` in circular mode never returned: torch-mlir's
# pipeline looped); each is in torch-mlir's or PyTorch's decomposition table, which
# torch-mlir's default path applies before lowering.
NOT_LOWERED = frozenset({
    "aten.clamp_max.Tensor", "aten.clamp_min.Tensor", "aten.alias_copy.default",
    "aten.expand_copy.default", "aten.diag.default", "aten.diag_embed.default",
    "aten.diagonal_copy.default", "aten.cross_entropy_loss.default", "aten.einsum.default",
    "aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec",
    "aten.upsample_nearest3d.vec", "aten.upsample_bilinear2d.vec",
    "aten.upsample_linear1d.vec",
    "aten.upsample_bilinear2d.default", "aten.upsample_nearest2d.default",
    # (not defined: what PyTorch's decomposition of the .vec form records)
    "aten.upsample_bicubic2d.default",
    "aten.pad.default", "aten.im2col.default", "aten.col2im.default", "aten.roll.default",
    "aten.logsumexp.default", "aten.meshgrid.indexing", "aten.meshgrid.default",
    # (of tensors of two dtypes: `F.mse_loss(float32, float64)`, "operand types should
    # have the same type as the list contained type")
    "aten.broadcast_tensors.default",
    # (found by a sweep of losses and activations, 2026-12-06: "failed to legalize
    # operation 'torch.constant.int'" or no pattern)
    "aten.binary_cross_entropy.default", "aten.binary_cross_entropy_backward.default",
    "aten.log_sigmoid_forward.default", "aten.log_sigmoid_backward.default",
    "aten.xlogy.Tensor", "aten.cosine_embedding_loss.default",
    # (with pos_weight: a broadcast of the wrong shape, an MLIR verifier error)
    "aten.binary_cross_entropy_with_logits.default",
    # (found by a sweep of ops, 2026-12-06: no pattern)
    "aten.trace.default",
    # (no pattern: decomposed to prims.erf_inv, which special_functions.py computes)
    "aten.erfinv.default",
    # (lowered, wrongly at the edges, found by a sweep of special values, 2026-12-06:
    # log_sigmoid as log(logistic(x)), -inf below -88 where eager gives x; threshold and
    # hardshrink replacing NaN, which eager keeps)
    "aten.log_sigmoid.default", "aten.threshold.default", "aten.hardshrink.default",
    # (no pattern, "failed to legalize operation 'torch.constant.int'" or '.bool':
    # `torch.dist`, `x.norm(p)` of every element, `torch.linalg.norm(x)`)
    "aten.norm.Scalar", "aten.linalg_norm.default",
    # (no pattern: `torch.isclose`; the 1-d adaptive poolings, which torch-mlir's own
    # table decomposes, and adaptive max pooling, PyTorch's)
    "aten.isclose.default", "aten.adaptive_avg_pool1d.default",
    "aten.adaptive_max_pool1d.default", "aten.adaptive_max_pool2d.default",
})


@functools.cache
def _not_lowered() -> tuple[torch._ops.OpOverload, ...]:
    """The ops of NOT_LOWERED (so a decomposition that records one, as
    upsample_bilinear2d.vec records .default, is decomposed further)."""
    ops = []
    for name in NOT_LOWERED:
        namespace, packet, overload = name.split(".")
        ops.append(getattr(getattr(getattr(torch.ops, namespace), packet), overload))
    return tuple(ops)


def _lowered(op: torch._ops.OpOverload) -> bool:
    """Whether torch-mlir defines `op` and, as far as we know, lowers it (rightly:
    `_pytorch_first`), or outofplace lowers it (OPERATOR_TWINS, the twins of
    `index_copy_` and its kind)."""
    name = op_registry.mlir_name(op)
    return _registered(name) and str(op) not in NOT_LOWERED and not _pytorch_first(op) \
        or name in op_registry.OPERATOR_TWINS


def _decomposable(op: torch._ops.OpOverload) -> bool:
    return op in get_decomposition_table() or op in decomposition_table or \
        op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)


# Ops torch-mlir defines but lowers wrongly, decomposed by PyTorch before they reach it:
# its StableHLO lowering of nll_loss_forward (F.cross_entropy, F.nll_loss) crashes the
# process (a segmentation fault, torch-mlir 2026-09).
_MISLOWERED = (torch.ops.aten.nll_loss_forward.default,
               torch.ops.aten.nll_loss2d_forward.default,
               torch.ops.aten.cross_entropy_loss.default)


def _pytorch_first(op: torch._ops.OpOverload) -> bool:
    """An op taken by PyTorch's decomposition although torch-mlir defines it: those of
    `_MISLOWERED`, and gradient formulas' (`threshold_backward`, `_softmax_backward_data`),
    of which torch-mlir lowers few to StableHLO (`threshold_backward` with an int
    threshold fails to legalize)."""
    return op in _MISLOWERED or "_backward" in op._schema.name and op in decomposition_table


def decompose_unregistered(graph: torch.fx.Graph) -> None:
    """Every node whose op torch-mlir does not define (or should not lower) and PyTorch
    decomposes, as the ops its decomposition records."""
    roots, written = view_roots(graph)
    for node in list(graph.nodes):
        effects = op_effects(node)
        if effects is not None and effects.written == (0,) and effects.twin is not None and \
                not _lowered(effects.twin) and _decomposable(effects.twin) and \
                torch.Tag.nondeterministic_seeded not in node.target.tags:
            node = _as_twin_and_copy(graph, node, effects.twin)
            effects = op_effects(node)
        if effects is None or effects.written or _lowered(node.target) or \
                not _decomposable(node.target) or not _computes_tensors(node):
            continue
        if effects.is_view and roots.get(node, node) in written:
            continue
        table = dict(get_decomposition_table())
        for op in (node.target, *_MISLOWERED, *_not_lowered()):
            if op in decomposition_table:
                table[op] = decomposition_table[op]
        try:
            with _without_onednn():
                gm, inputs = trace(graph, node.target, node.args, node.kwargs, table)
        except Exception:  # noqa: BLE001 - one that reads tensor data: refused below
            continue
        recorded = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        if recorded == [node.target]:
            continue  # nothing decomposed it
        with graph.inserting_before(node):
            result = inline(graph, gm, inputs, node.meta.get("stack_trace"))
        replace_node(graph, node, result)


@contextlib.contextmanager
def _without_onednn() -> Iterator[None]:
    """oneDNN off while a decomposition is traced: PyTorch's decomposition of an RNN
    (`lstm`, `gru`) then records its cells' ops, where it would record eager's oneDNN
    kernel (`mkldnn_rnn_layer`), which torch-mlir does not define."""
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = enabled


def _computes_tensors(node: torch.fx.Node) -> bool:
    """Whether a node's value is tensors (or None: a gradient its output mask leaves out):
    a size (`sym_size.int` of a dynamic dimension, CompositeImplicitAutograd) traced
    would be the size it has in the trace, a constant."""
    return all(v is None or isinstance(v, torch.Tensor)
               for v in pytree.tree_leaves(node.meta.get("val")))


def _as_twin_and_copy(graph: torch.fx.Graph, node: torch.fx.Node,
                      twin: torch._ops.OpOverload) -> torch.fx.Node:
    """`x.op_(*args)` whose twin torch-mlir cannot lower  =>  `x.copy_(op(x, *args))`;
    returns the twin's node, to be decomposed."""
    with graph.inserting_before(node):
        value = call(graph, twin, *node.args, **node.kwargs)
        value.meta["stack_trace"] = node.meta.get("stack_trace")
        copy = call(graph, torch.ops.aten.copy_.default, node.args[0], value)
        copy.meta["stack_trace"] = node.meta.get("stack_trace")
    replace_node(graph, node, copy)
    return value


def refuse_undefined(graph: torch.fx.Graph) -> None:
    """Refuses the first op making a tensor that torch-mlir does not define, outofplace
    does not lower (OPERATOR_TWINS) and nothing decomposed: its importer would keep it
    as a `torch.operator`, which no lowering accepts (a write is the pass's to refuse,
    with its reason)."""
    for node in graph.nodes:
        effects = op_effects(node)
        name = op_registry.mlir_name(node.target) if effects is not None else None
        if effects is None or effects.written or _registered(name) or \
                name in op_registry.OPERATOR_TWINS:
            continue
        values = node.meta.get("val")
        values = values if isinstance(values, (list, tuple)) else [values]
        if any(isinstance(v, torch.Tensor) for v in values):
            raise UnsupportedMutationError(
                str(node.target.overloadpacket), "torch-mlir has no definition of this op "
                "and no decomposition of it could be traced (none in torch-mlir's or "
                "PyTorch's tables, or one reading tensor data), so it cannot be lowered to "
                "StableHLO", location=source_line(node))
