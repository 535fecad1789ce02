"""Rewrites of the exported FX graph before import, while fake tensors know storage,
and the order all FX-level work runs in (`rewrite`).

torch IR carries no storage identity, offsets or strides; some aliasing facts are only
known here:
- an op the schema calls a view (`contiguous`, `reshape`, `to`) may have copied;
- the elements of a list view (`split`, `chunk`, `unbind`) are views at offsets the
  fake tensors know, expressed here as `slice` / `select` of the base;
- torch-mlir's importer turns `as_strided` into a gather (a copy): strided_views.
Refusals (refusals.py), decompositions (decompositions.py) and the workarounds of
torch-mlir's gaps (upstream/) run from here too, after complex tensors become real pairs
(complex_pairs.py).
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from . import (complex_pairs, decompositions, expanded_positions, fused_multiply_adds,
               optimizer_ops, out_arguments, reduced_precision, refusals, shape_changes,
               strided_views)
from .upstream import scalar_operands, undefined_ops, unlowered_ops
from .fx_graph import fake_mode_of, is_list_view, op_effects, storage_of


def rewrite(graph: torch.fx.Graph) -> None:
    """All rewrites, in the order they depend on each other."""
    _fake_constants(graph)
    shape_changes.local_shape_changes(graph)
    refusals.refuse_overlapping_operands(graph)  # before the pairs' copies hide overlaps
    complex_pairs.rewrite(graph)
    before = set(graph.nodes)
    optimizer_ops.decompose(graph)
    # a list op's operands, each element's own (`_foreach_addcmul_([x], [x.diagonal()],
    # ...)`), checked on the per-tensor ops it became
    refusals.refuse_overlapping_operands(graph, [n for n in graph.nodes if n not in before])
    optimizer_ops.numbers_at_their_ops_dtype(graph)
    out_arguments.functional_out_writes(graph)
    undefined_ops.real_conjugations(graph)
    scalar_operands.scalars_as_tensors(graph)
    fused_multiply_adds.dynamo_fmas_as_eager_ops(graph)
    reduced_precision.compute_in_float32(graph)  # before addcmul_ is a mul and an add_
    decompositions.decompose(graph)
    unlowered_ops.decompose_unregistered(graph)
    decompositions.decompose(graph)  # the ops those made (slice_scatter of slice_backward)
    shape_changes.local_shape_changes(graph)  # those decompositions made (quantile)
    reduced_precision.compute_in_float32(graph)  # the ops decompositions made
    optimizer_ops.scalars_read_as_tensors(graph)
    _copy_where_views_copy(graph)
    _explicit_list_views(graph)
    expanded_positions.positions_before_expand(graph)
    strided_views.strided_views_of_roots(graph)
    strided_views.writes_through_strided_views(graph)
    strided_views.as_strided_read_at_each_use(graph)
    strided_views.refuse_as_strided_of_written(graph)
    unlowered_ops.refuse_undefined(graph)
    scalar_operands.float_operands_as_tensors(graph)  # the decompositions' operands too


def _fake_constants(graph: torch.fx.Graph) -> None:
    """Gives each constant (`get_attr`) the fake value every other node has, with a
    storage of its own: `from_tensor` would return the fake tracing made of the same
    tensor, which for `torch.tensor([...])` in the program is the value of its
    `lift_fresh_copy`, a copy, then seen as a view of the constant (and torch-mlir's
    as_strided rewrite, walking storages back, read the constant for the copy)."""
    constants = [n for n in graph.nodes if n.op == "get_attr" and "val" not in n.meta]
    if constants:
        fake_mode = fake_mode_of(graph)
        for node in constants:
            value = getattr(graph.owning_module, node.target)
            with fake_mode:
                node.meta["val"] = torch.empty_strided(value.shape, value.stride(),
                                                       dtype=value.dtype)


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
        _own_storage(graph, clone)


def _own_storage(graph: torch.fx.Graph, clone: torch.fx.Node) -> None:
    """Gives `clone` a fake value with storage of its own, and the views of it (and the
    in-place ops returning them) values over that storage: with the copied view's, storage
    facts could not tell the copy from what it copied (an as_strided read of it was taken
    from the view's input and lost a write to the copy)."""
    old = storage_of(clone.meta["val"])
    with fake_mode_of(graph):
        clone.meta["val"] = clone.meta["val"].clone()
    changed = {clone}
    for node in list(graph.nodes)[list(graph.nodes).index(clone) + 1:]:
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or storage_of(value) != old:
            continue
        effects = op_effects(node)
        source = node.args[0] if node.args else None
        if effects is None or source not in changed:
            continue
        if effects.is_view and effects.result_views == 0:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                                 lambda n: n.meta["val"])
            with fake_mode_of(graph):
                node.meta["val"] = node.target(*args, **kwargs)
        elif effects.written and effects.result_views == 0:  # returns its self
            node.meta["val"] = source.meta["val"]
        else:
            continue
        changed.add(node)


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
    if not isinstance(offset, int) or not isinstance(stride, int):
        return None  # sizes the data decides (symbolic): refused as dynamic shapes
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

