"""Graph preparation: the exported FX graph made the graph torch-mlir imports as `main`,
and the `ProgramSignature` that relates main to the Python program.

`prepare_graph` copies the exported graph (an ExportedProgram the user passed stays
intact), inlines higher-order ops' submodules, makes its placeholders exactly main's
arguments (state, held state, user tensors; constants substituted), finds which outputs
are the caller's tensors or views of them, adds the bounds-check flags, and runs the FX
rewrites (fx_rewrites.py) while fake tensors still know storages. `prepare_region` does
the same for a region's graph (control_flow.py).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, TensorArgument

from . import (bounds_checks, complex_pairs, control_flow, fx_rewrites, higher_order,
               input_views, meta_state, training)
from .. import op_registry
from ..errors import UnsupportedMutationError
from ..memory import end_of, shared_memory, span_tensor, view_layout, views_of_inputs
from ..signature import Input, ProgramSignature, Result
from .fx_graph import (call, fake_mode_of, is_position_view, op_effects, operand_at,
                       source_line, storage_of, view_roots)
from ..symbolic_sizes import SymbolicSizes


def _same_tensor(node: torch.fx.Node, views: bool = True) -> torch.fx.Node:
    """The node whose tensor `node` is in all but name: through in-place and out= ops
    that write its data (not `t_`, `squeeze_`, `resize_`: the tensor then has another
    shape) and, with `views`, views that change nothing of it (`detach`, `alias`, a `to`
    of its own dtype: torch.export returns `t.float()` of a float32 `t` for `t`)."""
    while True:
        effects = op_effects(node)
        if effects is None or effects.result_views is None or effects.rebinds_view:
            return node
        base = operand_at(node, effects.result_views)
        if not isinstance(base, torch.fx.Node):
            return node
        if effects.written:
            node = base
            continue
        if effects.result_views != 0 or not views:
            return node
        value, base = node.meta.get("val"), base.meta.get("val")
        if not (isinstance(value, torch.Tensor) and isinstance(base, torch.Tensor)) or \
                storage_of(value) != storage_of(base) or value.dtype != base.dtype or \
                value.shape != base.shape or value.stride() != base.stride() or \
                value.storage_offset() != base.storage_offset():
            return node
        node = node.args[0]


def _constant_output(node: Any) -> bool:
    return not isinstance(node, torch.fx.Node)


def _eager_layout(node: torch.fx.Node) -> tuple | None:
    """How eager lays out an output the program makes, when it is not the contiguous
    tensor a result of main is: (strides, storage offset, storage size in elements).
    A graph's next graph (after a graph break) and the caller see it as eager has it: a
    transposed clone's `contiguous()` copies, a view of it steps as eager's does. None
    for a contiguous output, and where the layout is symbolic (dynamic sizes); a storage
    of symbolic size (a concrete view of it) taken as the elements the view reaches."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or complex_pairs.is_complex(value):
        return None
    numbers = (*value.shape, *value.stride(), value.storage_offset())
    if any(not isinstance(n, int) for n in numbers):
        return None
    if value.is_contiguous() and value.storage_offset() == 0:
        return None
    storage = value.untyped_storage().nbytes() // value.element_size()
    if not isinstance(storage, int):  # (a storage sized symbolically: what the view reaches)
        storage = end_of(value)
    return tuple(value.stride()), value.storage_offset(), storage


def state_value(ep: ExportedProgram, target: str) -> torch.Tensor | None:
    return ep.state_dict[target] if target in ep.state_dict else ep.constants.get(target)


def _propagate_fake_values(gm: torch.fx.GraphModule) -> None:
    """Recomputes every node's fake value from the placeholders'."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    inputs = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = next(v.fake_mode for v in inputs if isinstance(v, torch._subclasses.FakeTensor))
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*inputs)
    for node in gm.graph.find_nodes(op="get_attr"):  # a constant's fake is made again,
        if isinstance(getattr(gm, node.target, None), torch.Tensor):  # of its own
            node.meta.pop("val", None)  # storage (fx_rewrites._fake_constants): tracing's
            # was its lift_fresh_copy's, which torch-mlir's as_strided rewrite then read


def prepare_graph(ep: ExportedProgram, roots: dict[str, Any] | None = None,
                   check_bounds: bool = False, leaves: list[Any] | None = None,
                   met: Any = None) -> tuple[torch.fx.GraphModule, ProgramSignature]:
    """A copy of the exported graph whose placeholders are exactly main's arguments.

    Tensor constants become module attributes (imported as literals), unless they are
    state the caller holds (training.py): then they are arguments found by their path
    from `roots` at every call. Constant user inputs are substituted, and constant
    outputs are kept aside for the caller. `leaves` (of the user's (args, kwargs) as
    traced) says which user tensors view another argument (`_take_input_views`).
    """
    graph = torch.fx.Graph()  # a copy: an ExportedProgram the user passed stays intact
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(ep.graph, copies))
    root = torch.nn.Module()  # with the submodules of higher-order ops, until inlined
    for name, child in ep.graph_module.named_children():
        root.add_module(name, child)
    gm = torch.fx.GraphModule(root, graph)
    higher_order.inline_regions(gm)
    placeholders = {old.name: copies[old] for old in ep.graph.nodes
                    if old.op == "placeholder"}
    # A tensor reached through a plain Python object (HF's StaticCache holds its buffers
    # in a list, an optimizer its parameters) is exported as a constant; it is the
    # buffer or parameter, so it becomes that.
    state = [(state_value(ep, spec.target), placeholders[spec.arg.name])
             for spec in ep.graph_signature.input_specs
             if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER)]
    state_views = _take_state_views(ep, graph, state)
    held, read_constants = _held_constants(ep, graph, placeholders, roots or {}, state,
                                           met)
    for node in graph.nodes:  # ops on a fake constant would run on the caller's tensor
        if isinstance(node.meta.get("val"), torch._subclasses.FakeTensor):
            node.meta["val"].constant = None
    redirected = False
    state_targets: list[str] = []
    input_names: list[str] = []
    arguments: list[torch.fx.Node] = []
    user_position = 0
    user_input_leaves: list[int] = []
    constant_inputs: dict[int, tuple[str, Any]] = {}
    arguments_of: dict[str, torch.fx.Node] = {}  # a held tensor's name -> its argument
    for spec in ep.graph_signature.input_specs:
        node = placeholders[spec.arg.name]
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and \
                spec.target in state_views:  # taken from its base
            redirected = True
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            state_targets.append(spec.target)
            input_names.append(spec.target)
            arguments.append(node)
        elif spec.kind == InputKind.CONSTANT_TENSOR and \
                _state_node(ep.constants[spec.target], state) is not None:
            node.replace_all_uses_with(_state_node(ep.constants[spec.target], state))
            graph.erase_node(node)
            redirected = True
        elif spec.kind == InputKind.CONSTANT_TENSOR and spec.target in held and \
                held[spec.target].name in arguments_of:  # another constant's tensor
            node.replace_all_uses_with(arguments_of[held[spec.target].name])
            graph.erase_node(node)
            redirected = True
        elif spec.kind == InputKind.CONSTANT_TENSOR and spec.target in held:
            name = held[spec.target].name
            state_targets.append(name)
            input_names.append(name)
            arguments.append(node)
            arguments_of[name] = node
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            meta_state.refuse_meta_constant(spec.target, ep.constants[spec.target])
            attr = f"_outofplace_constant_{len(gm._buffers)}"
            gm.register_buffer(attr, ep.constants[spec.target])
            with graph.inserting_before(node):
                node.replace_all_uses_with(graph.get_attr(attr))
            graph.erase_node(node)
        elif spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument):
            node.replace_all_uses_with(spec.arg.value)  # type: ignore[arg-type]
            graph.erase_node(node)
            constant_inputs[user_position] = (spec.arg.name, spec.arg.value)
            user_position += 1
        elif spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, TensorArgument):
            input_names.append(spec.arg.name)
            arguments.append(node)
            user_input_leaves.append(user_position)
            user_position += 1
        else:
            raise UnsupportedMutationError(
                str(spec.kind), f"input {spec.arg} of this kind is not supported")
    values = {node: value for value, node in state}
    values.update((arguments[len(state_targets) + k], leaves[position])
                  for k, position in enumerate(user_input_leaves) if leaves is not None)
    input_views, spans, taken = _take_input_views(graph, arguments, input_names,
                                                  len(state_targets),
                                                  [values.get(node) for node in arguments])
    redirected = redirected or bool(input_views)
    if redirected:  # storages of the fake values must agree with the new aliasing
        _propagate_fake_values(gm)
    _, written = view_roots(graph)
    first_writes = _first_writes(written, dict(zip(arguments, input_names)))
    output = next(n for n in graph.nodes if n.op == "output")
    # An output that is an argument or a view of one is the caller's tensor (a view of
    # it) as in eager, not a result of main; an output given twice is one result.
    leaves: list[tuple[str, Any, ...]] = []
    kept: dict[torch.fx.Node, int] = {}
    argument_index = {node: i for i, node in enumerate(arguments)}
    # (a user tensor viewing another argument, taken inside the program from it, is
    # the caller's tensor itself when returned as it is, or as an in-place op returns
    # it: eager returns that object)
    aliases = [None if _constant_output(value) else
               (taken[itself], ()) if (itself := _same_tensor(value, views=False)) in taken
               else _argument_alias(value, argument_index, frozenset(written))
               for value in output.args[0]]
    # Outputs the program makes (not the caller's tensors): one viewing another
    # (`return t, t.select(1, 0)`) is that one's view, as in eager, where a write into
    # either shows in the other (dynamo writes into such a view after a graph break).
    # Outputs that are one tensor in all but name (`t` and `t.detach()`) are one base.
    made: dict[torch.fx.Node, int] = {}
    for i, (value, alias) in enumerate(zip(output.args[0], aliases)):
        if alias is None and not _constant_output(value):
            made.setdefault(_same_tensor(value), i)
    bases: list[tuple | None] = []
    for i, (value, alias) in enumerate(zip(output.args[0], aliases)):
        identity = None if _constant_output(value) else _same_tensor(value)
        if identity not in made:
            base = None
        elif made[identity] != i:  # the tensor of an earlier output
            base = _argument_alias(value, {identity: made[identity]}, frozenset(written))
        else:
            base = _argument_alias(value, {n: j for n, j in made.items() if n is not identity},
                                   frozenset(written))
        bases.append(base)
    # Outputs that view one tensor the program made and does not return (`t = x.clone();
    # return t.t(), t[0]`) are views of it, a result of main no output is, as in eager,
    # where a write into one (the next graph's, after a graph break) shows in the other.
    roots: dict[int, torch.fx.Node] = {}
    for i, (value, alias, base) in enumerate(zip(output.args[0], aliases, bases)):
        if alias is None and base is None and not _constant_output(value):
            root = _view_root(value)
            if root is not value and root not in made and \
                    not complex_pairs.is_complex(root.meta.get("val")):
                roots[i] = root
    shared = {root for root in roots.values() if list(roots.values()).count(root) > 1}
    for i, (value, alias, base) in enumerate(zip(output.args[0], aliases, bases)):
        through = _argument_alias(value, {roots[i]: 0}, frozenset(written)) \
            if roots.get(i) in shared else None
        if _constant_output(value):
            leaves.append(("constant", value))
        elif alias is not None:
            leaves.append(("argument", alias[0], _position_results(alias[1], graph, kept)))
        elif base is not None:
            leaves.append(("output", base[0], _position_results(base[1], graph, kept)))
        elif through is not None:
            root = roots[i]
            leaves.append(("view", kept.setdefault(root, len(kept)), _eager_layout(root),
                           _position_results(through[1], graph, kept)))
        else:
            leaves.append(("result", kept.setdefault(value, len(kept)), _eager_layout(value)))
    region = next((n for n in graph.nodes if n.op == "call_function" and
                   control_flow.is_region_op(n.target) and
                   control_flow.REGIONS[n.args[0]].kind != "composite"), None)
    if check_bounds and region is not None:  # (the flags see main's ops, not a region's)
        raise UnsupportedMutationError(
            {"cond": "torch.cond", "while": "torch.while_loop"}[
                control_flow.REGIONS[region.args[0]].kind], "check_bounds=True "
            "does not check the indices inside torch.cond and while_loop regions yet; "
            "compile without it (runtime indices there are clamped or dropped)",
            location=control_flow.REGIONS[region.args[0]].location)
    flags, checks = bounds_checks.add_checks(graph) if check_bounds else (None, [])
    if flags is not None:
        kept[flags] = len(kept)
    output.args = (tuple(kept),)
    complex_arguments = {i: node.meta["val"].dtype for i, node in enumerate(arguments)
                         if complex_pairs.is_complex(node.meta.get("val"))}
    complex_results = frozenset(index for node, index in kept.items()
                                if complex_pairs.is_complex(node.meta.get("val")))
    fx_rewrites.rewrite(graph)
    _one_use_per_constant(graph)
    graph.lint()
    gm.recompile()
    call_spec = ep.call_spec
    signature = ProgramSignature(input_names, state_targets, call_spec.in_spec,
                                 user_input_leaves, call_spec.out_spec, leaves, first_writes,
                                 constant_inputs, {h.name: h for h in held.values()},
                                 symbolic_sizes=SymbolicSizes.of(arguments,
                                                                 ep.range_constraints),
                                 bounds_checks=checks,
                                 bounds_result=None if flags is None else kept[flags],
                                 complex_arguments=complex_arguments,
                                 complex_results=complex_results,
                                 guards=read_constants, state_views=state_views,
                                 input_views=input_views, input_spans=spans)
    return gm, signature


def _take_input_views(graph: torch.fx.Graph, arguments: list[torch.fx.Node],
                      input_names: list[str], state: int, values: list[Any]
                      ) -> tuple[dict[int, tuple[int, tuple]], list[tuple[int, ...]],
                                 dict[torch.fx.Node, int]]:
    """Each user tensor that views the elements of another argument of main (`f(x,
    x[0])`, `m(m.cache[1])`; `values` are the caller's tensors, None where unknown)
    taken inside the program from that one (input_views.take_view): as separate
    arguments, a write through one would not show through the other. User tensors that
    overlap in part, neither viewing the other (`f(x[:6], x[3:])`), are taken so from a
    tensor of the storage they span, one more argument of main after the others
    (`memory_of_a_b`, memory.span_tensor). The views' own arguments stay, unread.
    Returns (index -> (its base's index, the view's layout), each span's members, each
    view taken -> the index of the tensor it stands for): a call whose arguments are not
    laid out so is compiled again (call_checks.relayout)."""
    relation, spans = shared_memory(values, first=state)
    if not relation:
        return {}, [], {}
    placeholders = graph.find_nodes(op="placeholder")
    for span in spans:  # the synthetic bases, after every argument
        with graph.inserting_after(placeholders[-1]):
            node = graph.placeholder("memory_of_" + "_".join(input_names[i]
                                                              for i in span[0]))
        with meta_state.traced_as_cpu():  # (a meta value stands for a CPU tensor)
            node.meta["val"] = fake_mode_of(graph).from_tensor(span_tensor(values, span),
                                                               static_shapes=True)
        placeholders.append(node)
        arguments.append(node)
        input_names.append(node.name)
    body = placeholders[-1].next  # (constants' get_attrs are above)
    taken = {}
    with graph.inserting_before(body):
        for i, (base, layout) in relation.items():
            view = input_views.take_view(graph, arguments[base], layout)
            arguments[i].replace_all_uses_with(view)
            taken[view] = i
    return relation, [span[0] for span in spans], taken


def _take_state_views(ep: ExportedProgram, graph: torch.fx.Graph,
                      state: list[tuple[torch.Tensor, torch.fx.Node]]
                      ) -> dict[str, tuple[str, tuple]]:
    """Each parameter or buffer that views another's elements (`register_buffer("k",
    kv[0])`) taken inside the program from that one (input_views.take_view), its
    placeholder erased: as separate arguments, a write through one would not show
    through the other. In `state`, the view's node becomes the one taking it. Returns
    target -> (its base's target, the view's layout)."""
    targets = [spec.target for spec in ep.graph_signature.input_specs
               if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER)]
    views = views_of_inputs([value for value, _ in state])
    if not views:
        return {}
    body = next(n for n in graph.nodes if n.op != "placeholder")
    taken = {}
    with graph.inserting_before(body):
        for i, base in views.items():
            layout = view_layout(state[i][0], state[base][0])
            view = input_views.take_view(graph, state[base][1], layout)
            state[i][1].replace_all_uses_with(view)
            graph.erase_node(state[i][1])
            state[i] = (state[i][0], view)
            taken[targets[i]] = (targets[base], layout)
    return taken


def _state_node(value: torch.Tensor, state: list[tuple[torch.Tensor, torch.fx.Node]]
                ) -> torch.fx.Node | None:
    """The placeholder of the parameter or buffer `value` is (the same elements)."""
    return next((node for tensor, node in state if tensor is value or
                 training.same_view(tensor, value)), None)


def _held_constants(ep: ExportedProgram, graph: torch.fx.Graph,
                    placeholders: dict[str, torch.fx.Node], roots: dict[str, Any],
                    state: list[tuple[torch.Tensor, torch.fx.Node]], met: Any = None
                    ) -> tuple[dict[str, training.HeldTensor], list[training.HeldConstant]]:
    """Constant target -> how to find it at each call, for each tensor constant that is
    state the caller holds: one the program writes, or a `.grad` or an optimizer's
    (found through `roots`). A written constant without a path is the exported tensor
    itself; constants found at one path are one tensor, one HeldTensor (prepare_graph
    makes them one argument). And the other constants found through `roots` (a module's
    plain tensor attribute, a global), which stay literals of the program: each checked
    unchanged at a call, the caller's tensor `met` (tensor_data.RealTensorsMet) gives
    back where no path reaches it (a module held by a class attribute: its versions say
    whether it was written)."""
    _, written = view_roots(graph)
    specs = [spec for spec in ep.graph_signature.input_specs
             if spec.kind == InputKind.CONSTANT_TENSOR and
             _state_node(ep.constants[spec.target], state) is None]
    paths = training.find_paths(roots, [ep.constants[s.target] for s in specs])
    held: dict[str, training.HeldTensor] = {}
    read: list[training.HeldConstant] = []
    names: set[str] = set()
    first: dict[tuple[int, tuple], str] = {}  # (root, path) -> the first constant there
    for spec, found in zip(specs, paths):
        value = ep.constants[spec.target]
        is_written = placeholders[spec.arg.name] in written
        if found is not None and (id(found[0]), found[1]) in first:
            # the tensor another constant is (a foreach optimizer's parameter, traced
            # twice as two tensor objects): that constant, one argument
            held[spec.target] = held[first[id(found[0]), found[1]]]
            continue
        if found is not None and (is_written or training.reached_through_optimizer(
                found[0], found[1])):
            root, path, name = found
            first[id(root), path] = spec.target
        elif is_written:
            root, path, name = value, (), spec.target
        else:
            caller = met.held_by(value) if found is None and met is not None else None
            if caller is not None:
                found = (caller, (), f"the tensor of shape {list(value.shape)} the program "
                         f"reads as {spec.target}")
            if found is not None:
                read.append(training.HeldConstant(training.HeldTensor(
                    found[0], found[1], found[2], tuple(value.shape), value.dtype)))
            continue
        while name in names:
            name += "_"
        names.add(name)
        held[spec.target] = training.HeldTensor(root, path, name, tuple(value.shape),
                                                value.dtype)
    return held, read


@dataclass(frozen=True)
class _Computed:
    """A position of an output's view, before it is made a result: `node` as read by
    `view`."""

    node: torch.fx.Node
    view: torch.fx.Node


def _at_positions(tensor: torch.Tensor, key: tuple, *positions: torch.Tensor
                  ) -> torch.Tensor:
    """`tensor[:, pos]` as eager indexes it, a view: `key` has None for each `:` and the
    number of the 0-d position tensor for each other dimension."""
    return tensor[tuple(slice(None) if k is None else positions[k] for k in key)]


def _position_view(value: torch.fx.Node, arguments: dict[torch.fx.Node, int],
                   written: frozenset[torch.fx.Node] = frozenset()) -> tuple | None:
    """`x[:, pos]` with 0-d integer tensors, traced as `index.Tensor`
    (runtime_positions.py; op_registry.is_position_view): eager's view of x, taken
    again on the caller's tensors, else None. A position that is an argument the
    program does not write is read from the call's arguments; any other (`ptr % T`, a
    written `ptr`) is `_Computed`, to become a result of main."""
    if not is_position_view(value):
        return None
    key, positions = [], []
    for item in value.args[1]:
        if item is None:
            key.append(None)
            continue
        key.append(len(positions))
        positions.append(Input(arguments[item]) if item in arguments and item not in written
                         else _Computed(item, value))
    return _at_positions, (tuple(key), *positions), {}


def _position_results(views: tuple, graph: torch.fx.Graph,
                      kept: dict[torch.fx.Node, int]) -> tuple:
    """The views with each `_Computed` position a result of main: a copy of it taken
    right before the view reads it (the program may write it after)."""
    def result(operand: Any) -> Any:
        if type(operand) is not _Computed:
            return operand
        with graph.inserting_before(operand.view):
            copy = call(graph, torch.ops.aten.clone.default, operand.node)
        return Result(kept.setdefault(copy, len(kept)))

    return tuple((view, tuple(result(a) for a in args), kwargs)
                 for view, args, kwargs in views)


def _returns_views(node: Any) -> bool:
    """Whether `node` is an op returning a list of views of its input (split, chunk,
    unbind: `Tensor(a)[]`)."""
    if not isinstance(node, torch.fx.Node) or \
            not isinstance(node.target, torch._ops.OpOverload):
        return False
    returns = node.target._schema.returns
    return len(returns) == 1 and returns[0].alias_info is not None and \
        isinstance(returns[0].type, torch.ListType)


def _argument_alias(value: Any, arguments: dict[torch.fx.Node, int],
                    written: frozenset[torch.fx.Node] = frozenset()
                    ) -> tuple[int, tuple] | None:
    """(argument index, view ops from it) when `value` is an argument, or a view of one
    eager would return (`_view_step`s from it), else None. A view's operands may hold
    `Input`s, the call's arguments, and `_Computed` positions."""
    views: list[tuple] = []
    while value not in arguments:
        step = _view_step(value, arguments, written)
        if step is None:
            return None
        value, taken = step
        views += taken
    return arguments[value], tuple(reversed(views))


def _view_step(value: Any, arguments: dict[torch.fx.Node, int],
               written: frozenset[torch.fx.Node]) -> tuple[Any, list[tuple]] | None:
    """(the tensor `value` views, the view ops from it, last first) for a view eager
    would return, else None: a view op with constant operands that shared its storage
    when traced (`_views_its_operand`), an in-place op (which returns its self), one
    that changes its self's shape (`t.transpose_(0, 1)`: its view twin of the tensor
    before, shape_changes.py), an item of a list of views (split, chunk, unbind), or
    `x[pos]` at 0-d positions (`_position_view`)."""
    if not isinstance(value, torch.fx.Node):
        return None
    if value.target is operator.getitem and _returns_views(value.args[0]):
        views = value.args[0]
        if any(isinstance(a, torch.fx.Node)
               for a in pytree.tree_leaves((views.args[1:], views.kwargs))):
            return None
        return views.args[0], [(operator.getitem, (value.args[1],), {}),
                               (views.target, tuple(views.args[1:]), dict(views.kwargs))]
    position = _position_view(value, arguments, written)
    if position is not None:
        return value.args[0], [position]
    effects = op_effects(value)
    if effects is None or effects.result_views is None:
        return None
    if effects.rebinds_view:  # `t.unsqueeze_(0)`: its view twin of the tensor
        twin = effects.twin  # before (shape_changes.py), or no view at all
        rest = (value.args[1:], value.kwargs)
        if twin is None or any(isinstance(a, torch.fx.Node)
                               for a in pytree.tree_leaves(rest)):
            return None
        effects = op_registry.effects(op_registry.mlir_name(twin))
        if effects is None or not effects.is_view or effects.result_views != 0:
            return None
        return value.args[0], [(twin, tuple(value.args[1:]), dict(value.kwargs))]
    if effects.written:  # an in-place or out= op returns the tensor it writes
        base = operand_at(value, effects.result_views)
        return (base, []) if isinstance(base, torch.fx.Node) else None
    if not _views_its_operand(value):  # a view op: taken again on the caller's
        return None
    return value.args[0], [(value.target, tuple(value.args[1:]), dict(value.kwargs))]


def _views_its_operand(value: Any) -> bool:
    """`value` is a view op of its first operand, its other operands constants, that
    shared the operand's storage when traced (not a `reshape`, `contiguous` or `to`
    that copied)."""
    effects = op_effects(value) if isinstance(value, torch.fx.Node) else None
    return effects is not None and effects.is_view and not effects.rebinds_view and \
        effects.result_views == 0 and isinstance(value.args[0], torch.fx.Node) and \
        not any(isinstance(a, torch.fx.Node)
                for a in pytree.tree_leaves((value.args[1:], value.kwargs))) and \
        storage_of(value.meta.get("val")) == storage_of(value.args[0].meta.get("val"))


def _view_root(value: torch.fx.Node) -> torch.fx.Node:
    """The tensor `value` is a view of through `_view_step`s (itself when it is none)."""
    while (step := _view_step(value, {}, frozenset())) is not None:
        value = step[0]
    return value


def _first_writes(written: dict[torch.fx.Node, torch.fx.Node],
                  names: dict[torch.fx.Node, str]) -> dict[str, tuple[str, str]]:
    """For each argument written in place (through any view): the first op writing it
    and that op's source line."""
    return {names[root]: (op_registry.mlir_name(node.target), source_line(node))
            for root, node in written.items() if root in names}


def _one_use_per_constant(graph: torch.fx.Graph) -> None:
    """A `get_attr` node per use of a constant: torch-mlir's importer binds a constant at
    its first use and, looking it up by the wrong key at the next, binds it again and
    fails ("Node already has a value")."""
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        for user in list(node.users)[1:]:
            with graph.inserting_before(user):
                copy = graph.get_attr(node.target)
            copy.meta = dict(node.meta)
            user.replace_input_with(node, copy)


def prepare_region(graph: torch.fx.Graph) -> None:
    """A region's graph (control_flow.py) as main's is before its import. Its fake
    values are computed again from its placeholders': tracing gave each op on a tensor
    the program holds through a Python object a fake of its own (storages would not
    say what aliases what), as `prepare_graph` does for main's redirected constants."""
    _propagate_fake_values(graph.owning_module)
    for node in graph.nodes:
        if isinstance(node.meta.get("val"), torch._subclasses.FakeTensor):
            node.meta["val"].constant = None
    with torch.no_grad():
        fx_rewrites.rewrite(graph)
    _one_use_per_constant(graph)
    graph.lint()
    refuse_data_dependent_shapes(graph)


def refuse_data_dependent_shapes(graph: torch.fx.Graph) -> None:
    """Refuses the first op whose result shape depends on the data (`nonzero`): its size
    is an unbacked symbol of the trace, which no argument's size determines, and
    torch-mlir would lower such an op to a program that computes the wrong values.
    Sizes that follow the arguments' dynamic dimensions (`dynamic_shapes`) are fine."""
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        op = op_registry.mlir_name(node.target) if isinstance(
            node.target, torch._ops.OpOverload) else str(node.target)
        # A node of a rewrite of ours has no stack trace: the line of what it reads.
        location = next(filter(None, map(source_line, [node, *node.all_input_nodes])), "")
        if free_unbacked_symbols(node.meta.get("val")):
            raise UnsupportedMutationError(
                op, "its result's shape depends on the data (a dynamic shape); outofplace "
                "compiles shapes that follow the arguments' only", location=location)
        if any(isinstance(a, torch.SymInt) for a in pytree.tree_leaves((node.args,
                                                                         node.kwargs))):
            raise UnsupportedMutationError(
                op, "outofplace rewrote it with a size of a dynamic dimension "
                "(dynamic_shapes) held as a number, which torch-mlir cannot import; "
                "compile this program with static shapes", location=location)
