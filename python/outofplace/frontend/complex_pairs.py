"""Complex tensors as real tensors with a trailing dimension of 2 (real, imaginary).

torch-mlir's lowering to StableHLO has no complex element types (docs/reliability.md), so
the FX graph is rewritten before import: a complex argument becomes the real tensor
`torch.view_as_real` makes of the caller's tensor at each call (no copy, written in
place), a complex result is returned as `view_as_complex` of the real one
(call_outputs.py), and each op on a complex value becomes real ops on its pair.

Views keep aliasing: a view of a complex tensor is the same view of its pair on the
leading dimensions (the trailing 2 stays whole), `view_as_real` a view of all the pair,
`real` / `imag` select its last dimension. `x.conj()` and `_neg_view` are lazy views in
eager: a `Pair` carries the flags, a read computes the value, a write through it stores
the conjugate (negation) of what is written. Any other op on a complex value is refused
at its line.

This module walks the graph; complex_values.py holds the pair and the rewriter that builds
real ops, complex_ops.py one rewrite per op.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from .. import op_registry
from ..errors import UnsupportedMutationError
from .complex_ops import HANDLERS
from .complex_values import REAL_OF, Pair, Refused, Rewriter, is_complex, real_dtype
from .fx_graph import fake_mode_of, op_effects, source_line


def rewrite(graph: torch.fx.Graph) -> None:
    """Rewrites every complex tensor of the graph as its real pair, or refuses the first
    op on a complex value the subset does not cover, at its line."""
    if not any(is_complex(n.meta.get("val")) or n.op == "get_attr" and is_complex(
            getattr(graph.owning_module, n.target, None)) for n in graph.nodes):
        return
    rw = Rewriter(graph)
    old: list[torch.fx.Node] = []
    for node in list(graph.nodes):
        value = node.meta.get("val")
        if node.op == "placeholder" and is_complex(value) and value.dtype in REAL_OF:
            rw.originals[node] = value
            with value.fake_mode:
                node.meta["val"] = torch.view_as_real(value)
            node.meta.pop("tensor_meta", None)  # the importer would read its type there
            rw.pairs[node] = Pair(node)
            rw.made.append(node)
        elif node.op == "get_attr" and is_complex(tensor := getattr(
                graph.owning_module, node.target)) and tensor.dtype in REAL_OF:
            rw.node = node
            rw.pairs[node] = Pair(rw.constant(torch.view_as_real(tensor).clone()))
            old.append(node)
        elif node.op == "call_function" and (
                is_complex(value) or any(n in rw.pairs for n in node.all_input_nodes)):
            _rewrite_node(rw, node)
            old.append(node)
        elif node.op == "output":
            rw.node = node
            node.args = torch.fx.node.map_arg(
                node.args, lambda n: rw.value(rw.pairs[n]) if n in rw.pairs else n)
    for node in reversed(old):
        graph.erase_node(node)
    _refresh_fake_values(graph, rw.made)


def _op_name(target: Any) -> str:
    return op_registry.mlir_name(target) if isinstance(target, torch._ops.OpOverload) \
        else str(target)


def _rewrite_node(rw: Rewriter, node: torch.fx.Node) -> None:
    rw.node = node
    value = node.meta.get("val")
    self_value = rw.val(node.args[0]) if node.args else None
    dtype = value.dtype if is_complex(value) else \
        self_value.dtype if is_complex(self_value) else None
    rw.dtype = real_dtype(dtype) if dtype in REAL_OF else torch.float32
    result = value  # an in-place op computes in the type its out-of-place twin returns
    effects = op_effects(node)
    if effects is not None and effects.written and effects.twin is not None:
        result = _twin_value(rw, node, effects.twin)
    rw.common = real_dtype(result.dtype) if is_complex(result) and \
        result.dtype in REAL_OF else None
    handler = HANDLERS.get(node.target)
    try:  # (a complex32 argument or constant is left as it is: refused at its first use)
        if any(is_complex(v) and v.dtype not in REAL_OF for v in (value, self_value)):
            raise Refused("complex32: complex64 and complex128 are computed")
        if handler is None:
            raise Refused("no rewrite of it as real (re, im) pairs")
        result = handler(rw, node.target, node.args, node.kwargs)
    except Refused as why:
        raise UnsupportedMutationError(
            _op_name(node.target), f"an op on a complex tensor that outofplace does not "
            f"compute ({why}): complex tensors are computed as (real, imaginary) pairs "
            "for the ops docs/reliability.md lists", location=source_line(node)) from None
    if isinstance(result, Pair) and isinstance(value, (list, tuple)):  # a list view
        rw.pairs[node] = result
    elif isinstance(result, Pair):
        result_value = result.node.meta["val"]
        if not is_complex(value) or result_value.dtype != rw.dtype or \
                list(result_value.shape) != [*value.shape, 2]:
            raise AssertionError(f"complex pair of {node.format_node()}: "
                                 f"{result_value.dtype} {list(result_value.shape)}")
        rw.pairs[node] = result
    elif result is not None:
        node.replace_all_uses_with(result)


def _twin_value(rw: Rewriter, node: torch.fx.Node, twin: torch._ops.OpOverload) -> Any:
    """The fake value the out-of-place twin of an in-place op would return."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), rw.val)
    try:
        with fake_mode_of(node.graph), torch.no_grad():
            return twin(*args, **kwargs)
    except Exception:  # noqa: BLE001 - then its operands are taken as they are
        return None


def _refresh_fake_values(graph: torch.fx.Graph, made: list[torch.fx.Node]) -> None:
    """Recomputes the fake value of each node that reads a new node (directly or not),
    so storages agree again: a view of a new node is a view of its storage."""
    changed = set(made)
    mode = fake_mode_of(graph)
    for node in graph.nodes:
        if node in changed or node.op != "call_function" or \
                not any(n in changed for n in node.all_input_nodes):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                             lambda n: n.meta.get("val"))
        try:
            with mode, torch.no_grad():
                node.meta["val"] = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a value it cannot recompute keeps its own
            continue
        changed.add(node)
