"""Ops torch-mlir has no definition of (`vdot`, `block_diag`, `lift`, ...), or lowers
wrongly (`nll_loss_forward`, gradient formulas' ops), decomposed
with PyTorch's decompositions as torch-mlir's own default path does: its table
(`torch_mlir.extras.fx_decomp_util.get_decomposition_table`, core ATen's decompositions
less those it cannot lower), then PyTorch's full table (`torch._decomp`) for the op
itself, then the op's CompositeImplicitAutograd kernel. The decomposition is traced on
the node's fake values and inlined.

An op that writes is left to the pass, which refuses it without a twin. A view is
decomposed (into a copy) only where no write reaches its base: nothing can tell the
copy from the view then.
"""

from __future__ import annotations

import functools

import torch
import torch.fx
from torch._decomp import decomposition_table
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d
from torch_mlir.extras.fx_decomp_util import get_decomposition_table

from .. import op_registry
from .fx_graph import op_effects, replace_node, view_roots
from .inline import inline, trace


@functools.cache
def _registered(mlir_name: str) -> bool:
    return _torch_context().is_registered_operation(mlir_name)


@functools.cache
def _torch_context() -> ir.Context:
    context = ir.Context()
    torch_d.register_dialect(context)
    return context


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
        if effects is None or effects.written or not _decomposable(node.target) or (
                _registered(op_registry.mlir_name(node.target)) and
                not _pytorch_first(node.target)):
            continue
        if effects.is_view and roots.get(node, node) in written:
            continue
        table = dict(get_decomposition_table())
        for op in (node.target, *_MISLOWERED):
            if op in decomposition_table:
                table[op] = decomposition_table[op]
        gm, inputs = trace(graph, node.target, node.args, node.kwargs, table)
        recorded = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        if recorded == [node.target]:
            continue  # nothing decomposed it
        with graph.inserting_before(node):
            result = inline(graph, gm, inputs, node.meta.get("stack_trace"))
        replace_node(graph, node, result)
