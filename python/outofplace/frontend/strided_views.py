"""`as_strided` and `unfold` of a root written in place, before import.

torch-mlir's importer turns `as_strided` into a gather (a copy), so the as_strided of a
written root is re-taken at each read, and a write through it lands in a copy scattered
back at the positions of its elements, which the fake tensors know. `unfold` takes the
same paths, as the as_strided it is.
"""

from __future__ import annotations

import torch
import torch.fx

from .. import op_registry
from ..errors import UnsupportedMutationError
from .fx_graph import (
    call, element_offsets, fake_mode_of, is_list_view, is_position_view, source_line,
    storage_of, view_base, view_roots, writes_root)


_READ_AT_USE = "outofplace_read_at_use"  # an as_strided placed right before its one use
_VIEW_OP = "outofplace_view_op"  # the op a user wrote, where another now stands for it


def _view_closure(node: torch.fx.Node) -> list[torch.fx.Node]:
    """`node` and the views taken of it (and of those), in the order found."""
    closure, stack = [node], [node]
    while stack:
        for user in stack.pop().users:
            if view_base(user) in closure and user not in closure:
                closure.append(user)
                stack.append(user)
    return closure


def _positions_in_root(view: torch.fx.Node, root: torch.fx.Node) -> torch.Tensor:
    """The position of each element of `view` in its root flattened in the root's own
    order (`root.reshape(-1)`), or an error when an element is none of the root's or
    elements overlap (eager's result would depend on the order it writes them)."""
    view_val, root_val = view.meta["val"], root.meta["val"]
    name = op_registry.mlir_name(view.target)
    offsets, root_offsets = element_offsets(view_val), element_offsets(root_val)
    if root_val.is_contiguous():
        positions = offsets - root_val.storage_offset()
        inside = not positions.numel() or 0 <= int(positions.min()) <= \
            int(positions.max()) < root_val.numel()
    else:  # a strided root (an argument as the caller laid it out): found by offset
        ordered, order = root_offsets.sort()
        found = torch.searchsorted(ordered, offsets).clamp(max=max(ordered.numel() - 1, 0))
        inside = ordered.unique().numel() == ordered.numel() and bool(
            (ordered[found] == offsets).all()) if ordered.numel() else not offsets.numel()
        positions = order[found] if ordered.numel() else offsets
    if storage_of(view_val) != storage_of(root_val) or not inside:
        raise UnsupportedMutationError(name, "writing into it: its elements are not "
                                       "elements of the tensor it views",
                                       location=source_line(view))
    if positions.unique().numel() != positions.numel():
        if view.meta.get(_VIEW_OP) == "unfold":
            raise UnsupportedMutationError("torch.aten.unfold", "writing into unfold "
                                           "windows, which overlap",
                                           location=source_line(view))
        raise UnsupportedMutationError(name, "writing into an as_strided view whose "
                                       "elements overlap", location=source_line(view))
    return positions.reshape(view_val.shape)


def _at_positions(graph: torch.fx.Graph, root: torch.fx.Node,
                  positions: torch.Tensor) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    """The root as indexed by `positions` (in its own order): a flat view of a
    contiguous root (or of one with fewer than two dimensions) and the positions, else
    the root and the positions as an index of each of its dimensions."""
    if root.meta["val"].is_contiguous() or root.meta["val"].dim() < 2:
        return call(graph, torch.ops.aten.view.default, root, [-1]), \
            [_constant(graph, positions)]
    return root, [_constant(graph, index) for index in
                  torch.unravel_index(positions, tuple(root.meta["val"].shape))]


def _constant(graph: torch.fx.Graph, value: torch.Tensor) -> torch.fx.Node:
    module = graph.owning_module
    name = f"_outofplace_positions_{len(module._buffers)}"
    module.register_buffer(name, value)
    node = graph.get_attr(name)
    node.meta["val"] = fake_mode_of(graph).from_tensor(value, static_shapes=True)
    return node


def strided_views_of_roots(graph: torch.fx.Graph) -> None:
    """Every `as_strided` as the as_strided of its root, at the same storage positions,
    and `x.unfold(d, size, step)` as the as_strided of its root it is (torch-mlir does
    not lower unfold to StableHLO): no as_strided then views another, and reads and
    writes take the as_strided paths below. Of a one-element root, it is an expand."""
    roots, _ = view_roots(graph)
    for node in list(graph.nodes):
        if node.target not in (torch.ops.aten.unfold.default,
                               torch.ops.aten.as_strided.default):
            continue
        root = roots.get(node, node.args[0])
        val, root_val = node.meta["val"], root.meta["val"]
        base = node.args[0]
        while isinstance(base, torch.fx.Node) and base is not root:
            if is_position_view(base):  # traced as a copy: torch-mlir's as_strided of it
                # indexes the copy, not the storage eager reads (and crashes on a 0-d one)
                raise UnsupportedMutationError(
                    op_registry.mlir_name(node.target), "of a view at a runtime position "
                    "(`x[pos]` with a 0-d tensor `pos`): where it starts in storage is "
                    "known only at the call", location=source_line(node))
            if base.meta["val"].numel() == 0:  # tracing may place it elsewhere than eager
                raise UnsupportedMutationError(
                    op_registry.mlir_name(node.target), "of a view without elements: "
                    "where it starts in storage is not known while tracing",
                    location=source_line(node))
            base = view_base(base)
        if not root_val.is_contiguous() or storage_of(val) != storage_of(root_val):
            if node.target is torch.ops.aten.as_strided.default:
                if storage_of(val) == storage_of(root_val) and val.numel() and not bool(
                        torch.isin(element_offsets(val), element_offsets(root_val)).all()):
                    raise UnsupportedMutationError(  # (eager reads the memory between)
                        "torch.aten.as_strided", "of storage between the elements of the "
                        "strided tensor it views (memory the program does not receive)",
                        location=source_line(node))
                continue  # left to the importer's own rewrite of as_strided
            raise UnsupportedMutationError(
                "torch.aten.unfold", "unfold of a tensor that is not contiguous",
                location=source_line(node))
        if val.dtype != root_val.dtype and val.itemsize != root_val.itemsize:
            raise UnsupportedMutationError(
                op_registry.mlir_name(node.target), f"of a view as {val.dtype} of a "
                f"{root_val.dtype} tensor (elements of another size)",
                location=source_line(node))
        with graph.inserting_before(node):
            if root_val.numel() == 1:  # every element is the one element: torch-mlir's
                # rewrite of as_strided fails on a 0-d base
                strided = call(graph, torch.ops.aten.expand.default, call(
                    graph, torch.ops.aten.view.default, root, [1] * val.dim()),
                    list(val.shape))
            else:
                # as_strided's storage_offset is absolute in the storage, as in eager
                # and in torch-mlir's importer (fx_as_strided), not relative to root:
                # of an input at a storage offset, the relative one moved the view.
                positions = element_offsets(val) - root_val.storage_offset()
                if positions.numel() and not 0 <= int(positions.min()) <= \
                        int(positions.max()) < root_val.numel():
                    raise UnsupportedMutationError(
                        op_registry.mlir_name(node.target), "of elements outside the "
                        "tensor it views (storage the program does not receive)",
                        location=source_line(node))
                strided = call(graph, torch.ops.aten.view.default, root,
                               list(val.shape)) \
                    if val.is_contiguous() and val.dtype == root_val.dtype and \
                    val.storage_offset() == root_val.storage_offset() and \
                    val.numel() == root_val.numel() else \
                    call(graph, torch.ops.aten.as_strided.default, root,
                         list(val.shape), list(val.stride()), val.storage_offset())
                # (the root's elements in order, as AOTAutograd's regenerated views of
                # a custom op's arguments are: the view it is, no gather)
            if val.dtype != root_val.dtype:  # `x.view(torch.int32).as_strided(...)`:
                # the root's elements at those positions, reinterpreted (a bitcast)
                strided = call(graph, torch.ops.aten.view.dtype, strided, val.dtype)
        view_op = "unfold" if node.target is torch.ops.aten.unfold.default else \
            node.meta.get(_VIEW_OP)
        strided.meta = {**node.meta, "val": strided.meta["val"], _VIEW_OP: view_op}
        node.replace_all_uses_with(strided)
        graph.erase_node(node)


def writes_through_strided_views(graph: torch.fx.Graph) -> None:
    """A write through `as_strided` (or a view of it), as a write into a gathered copy,
    scattered back at once at the elements' positions in the root:

        v = x.as_strided((2, 2), (1, 2)); v[0].add_(1)
        =>  c = x.view(-1)[P]; c[0].add_(1); x.view(-1).index_put_([P.flatten()], c.view(-1))

    with P the constant position of each element of v in x: torch-mlir imports as_strided
    as a gather, a copy. Reads are left to as_strided_read_at_each_use."""
    roots, written = view_roots(graph)
    for node in list(graph.nodes):
        if node.target is not torch.ops.aten.as_strided.default or \
                roots.get(node) not in written:
            continue
        root, positions = roots[node], None
        # Writes are nodes already in the graph: the nodes added below never write
        # through node, so one order serves every round.
        order = {n: i for i, n in enumerate(graph.nodes)}
        while True:  # one write at a time: a write's result is one more view of node
            closure = _view_closure(node)
            writes = sorted(((user, member) for member in closure for user in member.users
                             if user not in closure and writes_root(user, member, {})),
                            key=lambda write: order[write[0]])
            if not writes:
                break
            user, member = writes[0]
            if not member.meta["val"].numel():  # a write of no element writes nothing
                user.replace_all_uses_with(member)
                graph.erase_node(user)
                continue
            if positions is None:
                positions = _positions_in_root(node, root)
            with graph.inserting_before(user):
                gathered = call(graph, torch.ops.aten.index.Tensor,
                                *_at_positions(graph, root, positions))
                copies = {node: gathered}

                def copy(original: torch.fx.Node) -> torch.fx.Node:
                    if original not in copies:
                        args, kwargs = torch.fx.node.map_arg(
                            (original.args, original.kwargs),
                            lambda n: copy(n) if n in closure else n)
                        copies[original] = call(graph, original.target, *args, **kwargs)
                    return copies[original]

                user.replace_input_with(member, copy(member))
            user.replace_all_uses_with(member)  # `v.add_(1)` returns v, not the copy
            with graph.inserting_before(user.next):
                flat = call(graph, torch.ops.aten.view.default, gathered, [-1])
                store = call(graph, torch.ops.aten.index_put_.default,
                             *_at_positions(graph, root, positions.reshape(-1)), flat)
            store.meta["stack_trace"] = user.meta.get("stack_trace")


def as_strided_read_at_each_use(graph: torch.fx.Graph) -> None:
    """`v = x.as_strided(...)` of a tensor written in place, read later: torch-mlir's
    importer makes as_strided a gather, a copy taken where it stands, so a write to x
    between the two would be lost. Each use of v (and of views of v) gets its own
    as_strided, placed right before it: the gather then reads x as it is at the use.
    (Writes were made writes into copies by writes_through_strided_views.)"""
    roots, written = view_roots(graph)
    erased: set[torch.fx.Node] = set()
    for node in list(graph.nodes):
        if node in erased or node.target is not torch.ops.aten.as_strided.default or \
                roots.get(node) not in written:
            continue
        closure = _view_closure(node)
        if any(writes_root(user, member, {}) for member in closure
               for user in member.users):
            continue
        for member in closure:
            for user in list(member.users):
                if user in closure:
                    continue
                copies: dict[torch.fx.Node, torch.fx.Node] = {}

                def copy(original: torch.fx.Node) -> torch.fx.Node:
                    if original not in copies:
                        with graph.inserting_before(user):
                            copies[original] = graph.node_copy(
                                original, lambda n: copy(n) if n in closure else n)
                            copies[original].meta[_READ_AT_USE] = True
                    return copies[original]

                user.replace_input_with(member, copy(member))
        order = {n: i for i, n in enumerate(graph.nodes)}
        for member in sorted(closure, key=order.__getitem__, reverse=True):
            if not member.users:
                graph.erase_node(member)
                erased.add(member)


def refuse_as_strided_of_written(graph: torch.fx.Graph) -> None:
    """Refuses what the importer would get wrong: `as_strided` of a written root, and
    list views left whole (not indexed by a constant) of one."""
    roots, written = view_roots(graph)
    for node in graph.nodes:
        if roots.get(node) not in written:
            continue
        if node.target is torch.ops.aten.as_strided.default and \
                not node.meta.get(_READ_AT_USE):
            raise UnsupportedMutationError(
                "torch.aten.as_strided", "as_strided of a tensor that is written in "
                "place (torch-mlir imports as_strided as a copy)",
                location=source_line(node))
        if is_list_view(node):
            raise UnsupportedMutationError(
                op_registry.mlir_name(node.target), "a list of views of a tensor that is "
                "written in place, used other than by constant indexing",
                location=source_line(node))
