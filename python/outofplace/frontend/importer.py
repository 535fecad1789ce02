"""From a torch program to mutable torch IR that passes the MLIR verifier.

The program is traced with `torch.export` in training IR, which keeps in-place ops and
views (no functionalization, no decompositions). torch-mlir's FxImporter then writes every
tensor as `!torch.vtensor`, in-place ops included, which the verifier rejects (torch-mlir
#4346). `mark_mutable_tensors` repairs that: every tensor that is written, or aliases a
written tensor, becomes `!torch.tensor`.
"""

from __future__ import annotations

import functools
import operator
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import (GuardOnDataDependentSymNode,
                                                   PendingUnbackedSymbolNotFound,
                                                   free_unbacked_symbols)
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                           DynamicOutputShapeException)
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, TensorArgument
from torch_mlir import ir
from torch_mlir.dialects import func as func_d
from torch_mlir.extras.fx_importer import FxImporter, FxImporterHooks

from . import (bounds_checks, complex_pairs, control_flow, cumulative_batch_norm, fx_rewrites,
               higher_order, meta_state)

from .. import op_registry, progress, torch_types
from ..errors import UnsupportedMutationError
from .fx_graph import (call, is_position_view, op_effects, overlaps, source_line,
                       storage_of, view_roots)
from .masked_values import MaskedValues
from . import training
from .runtime_positions import RuntimePositions, user_line
from .tensor_data import DataAsDetach
from . import region_functions
from .shape_changes import InputShapeChanges
from .symbolic_sizes import SymbolicSizes
from ..ir_utils import operations, tensor_literal, terminator
from ..signature import Input, ProgramSignature, Result


def _function_module(fn: Callable) -> torch.nn.Module:
    """A module whose forward is `fn` itself, for torch.export to trace a plain function.

    Its placeholders then take the names of fn's parameters, and registering fn as a
    stack-trace anchor keeps fn's own lines in the FX stack traces, which export would
    otherwise cut down to frames named `forward`.
    """
    torch.fx.proxy._register_stack_trace_anchor(fn)
    name = getattr(fn, "__name__", "function")
    module = type(name, (torch.nn.Module,), {"forward": staticmethod(fn)})()
    # Modules the function names are its submodules: their parameters and buffers are
    # arguments read at every call (an optimizer step writes them), not constants.
    for attr, value in training.program_roots(fn).items():
        if isinstance(value, torch.nn.Module):
            module.add_module(attr, value)
    return module


def _graph_module_with_hooks(gm: torch.fx.GraphModule) -> torch.nn.Module:
    """A module running `gm`'s own code, for torch.export to trace a GraphModule (a
    torch.compile graph) as it traces any module.

    torch.export runs a GraphModule with an fx.Interpreter, which runs no forward hooks:
    the modes `export` enters through them (runtime positions, `.data`, masked values,
    `.item()` as a tensor, the optimizer's traced parameters) would not see the graph's
    ops. This module shares gm's parameters, buffers and submodules (so their names and
    tensors are gm's) and its forward runs gm's nodes with gm's argument names, each op
    recorded with its node's stack trace (the user's lines, not gm's generated code)."""
    module = torch.nn.Module()
    module._parameters, module._buffers, module._modules = \
        gm._parameters, gm._buffers, gm._modules

    @functools.wraps(gm.forward)  # (torch.export names the inputs from its signature)
    def forward(*args: Any) -> Any:
        with torch.fx.traceback.preserve_node_meta():
            return torch.fx.Interpreter(gm).run(*args)

    module.forward = forward
    return module


# What torch.export raises when a value computed from tensor data is needed as a Python
# value (`.item()` in a shape, `if x.sum() > 0:`, the bounds check of a runtime index,
# `x.narrow(0, pos, 1)` with a 0-d tensor `pos`).
_DATA_DEPENDENT = (GuardOnDataDependentSymNode, DataDependentOutputException,
                   DynamicOutputShapeException, PendingUnbackedSymbolNotFound)


# What tracing raises for a write into an expanded view that eager let through (a copy
# of a tensor onto itself returns early in eager).
_INTERNAL_OVERLAP = "more than one element of the written-to tensor refers to a single memory"


def _distinct_tensors(tree: Any) -> Any:
    """The tree with a tensor given again (`f(x, t, t)`) replaced by a view of all of it:
    torch.export makes one input of one tensor object given twice, and the program would
    read one argument for both at calls given two tensors. (Sharing memory, they still
    share it: a written one is refused.)"""
    seen: set[int] = set()

    def distinct(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        if id(leaf) in seen:
            return leaf.view(leaf.shape)
        seen.add(id(leaf))
        return leaf

    return pytree.tree_map(distinct, tree)


def export(f: Any, args: tuple, kwargs: dict | None = None,
           steps: training.OptimizerSteps | None = None,
           dynamic_shapes: Any = None) -> ExportedProgram:
    """Traces `f` to ATen with its mutations and views kept. Gradients are traced as
    eager computes them (`torch.autograd.grad`, `backward()`); `steps` is told where
    the traced forward starts and ends. `dynamic_shapes` is torch.export's spec."""
    if isinstance(f, ExportedProgram):
        return f
    module = f if isinstance(f, torch.nn.Module) else _function_module(f)
    steps = steps or training.OptimizerSteps(module)
    if isinstance(module, torch.fx.GraphModule):
        module = _graph_module_with_hooks(module)
    # Tracing may run small ops on real buffers it does not see as module state (a 0-d
    # counter held by a plain Python object): compiling must leave the model as it was.
    saved = training.Snapshot(list(module.buffers()),
                              training.uncopied_state(module, steps.roots))
    # Entered by forward hooks, inside the trace, so they see `x[pos]` and `x[mask]`
    # before export's own handler of __getitem__ (which calls .item() on a position).
    positions, masked, shapes = RuntimePositions(), MaskedValues(), InputShapeChanges()
    data, regions = DataAsDetach(), control_flow.region_mode()

    items = steps.items_as_tensors()
    saved_tensors = training.SavedTensors()

    def enter(module: Any, args: tuple, kwargs: dict) -> None:
        shapes.watch(module, args, kwargs)
        steps.enter()
        if torch.is_grad_enabled() and any(  # autograd records: gradients may be taken
                t.requires_grad for t in (*module.parameters(), *pytree.tree_leaves(
                    (args, kwargs))) if isinstance(t, torch.Tensor)):
            saved_tensors.__enter__()
        items.__enter__()
        shapes.__enter__()
        data.__enter__()
        positions.__enter__()
        masked.__enter__()
        regions.__enter__()

    def leave(module: Any, inputs: Any, output: Any) -> None:
        regions.__exit__(None, None, None)
        masked.__exit__(None, None, None)
        positions.__exit__(None, None, None)
        data.__exit__(None, None, None)
        shapes.__exit__(None, None, None)
        items.__exit__(None, None, None)
        saved_tensors.__exit__(None, None, None)
        if sys.exc_info()[0] is None:  # not on the way out of a forward that raised
            masked.refuse_escaping(output)
            steps.leave()

    hooks = [module.register_forward_pre_hook(enter, with_kwargs=True),
             module.register_forward_hook(leave, always_call=True)]
    modes = torch._C._len_torch_function_stack()
    args, kwargs = _distinct_tensors((tuple(args), kwargs or {}))
    try:
        with steps, cumulative_batch_norm.traced(module), meta_state.traced_as_cpu(), \
                control_flow.traced(module):
            return torch.export.export(module, args, kwargs, strict=False,
                                       dynamic_shapes=dynamic_shapes)
    except _DATA_DEPENDENT as error:
        frames = traceback.extract_tb(error.__traceback__)
        raise UnsupportedMutationError(
            "torch.export", "a value read from a tensor's data decides a shape, an index "
            f"or a branch here ({type(error).__name__}); outofplace compiles programs "
            "whose shapes and control flow do not depend on the data",
            location=user_line(frames)) from error
    except TypeError as error:
        if not items.lines:
            raise
        raise UnsupportedMutationError(
            "Tensor.item", "the value read with .item() stays a 0-d tensor (a Python number "
            "would be baked in, and differ at the next call), and something here needs a "
            f"Python number ({error})", location=items.lines[-1]) from error
    except NotImplementedError as error:
        if "Storage" not in str(error):
            raise
        frames = traceback.extract_tb(error.__traceback__)
        line = user_line(frames)
        text = next((f.line or "" for f in reversed(frames)
                     if line == f"{f.filename}:{f.lineno}"), "")
        raise UnsupportedMutationError(
            "torch.aten.set_.source_Storage" if "set_" in text else "a storage operand",
            "it takes a storage (`x.set_(y.untyped_storage())`), which torch.export cannot "
            "trace; take the view of the tensor that owns it (`y.view(-1)`, "
            "`y.as_strided(...)`)", location=line) from error
    except RuntimeError as error:
        meta_state.refuse_meta_device(error)
        if _INTERNAL_OVERLAP not in str(error):
            raise
        frames = traceback.extract_tb(error.__traceback__)
        raise UnsupportedMutationError(
            "torch.export", "writing into a tensor whose elements share memory (an "
            "expanded view), which tracing refuses as eager refuses most such writes",
            location=user_line(frames)) from error
    finally:
        # An error raised inside the trace can leave modes of ours or of torch.export's
        # on the stack, which would change the next trace.
        while torch._C._len_torch_function_stack() > modes:
            torch._C._pop_torch_function_stack()
        saved_tensors.release()
        for hook in hooks:
            hook.remove()
        saved.restore()


def _constant_output(node: Any) -> bool:
    return not isinstance(node, torch.fx.Node)


def _state_value(ep: ExportedProgram, target: str) -> torch.Tensor | None:
    return ep.state_dict[target] if target in ep.state_dict else ep.constants.get(target)


def _propagate_fake_values(gm: torch.fx.GraphModule) -> None:
    """Recomputes every node's fake value from the placeholders'."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    inputs = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = next(v.fake_mode for v in inputs if isinstance(v, torch._subclasses.FakeTensor))
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*inputs)


def _prepare_graph(ep: ExportedProgram, roots: dict[str, Any] | None = None,
                   check_bounds: bool = False
                   ) -> tuple[torch.fx.GraphModule, ProgramSignature]:
    """A copy of the exported graph whose placeholders are exactly main's arguments.

    Tensor constants become module attributes (imported as literals), unless they are
    state the caller holds (training.py): then they are arguments found by their path
    from `roots` at every call. Constant user inputs are substituted, and constant
    outputs are kept aside for the caller.
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
    state = [(_state_value(ep, spec.target), placeholders[spec.arg.name])
             for spec in ep.graph_signature.input_specs
             if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER)]
    held, read_constants = _held_constants(ep, graph, placeholders, roots or {}, state)
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
    for spec in ep.graph_signature.input_specs:
        node = placeholders[spec.arg.name]
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            state_targets.append(spec.target)
            input_names.append(spec.target)
            arguments.append(node)
        elif spec.kind == InputKind.CONSTANT_TENSOR and \
                _state_node(ep.constants[spec.target], state) is not None:
            node.replace_all_uses_with(_state_node(ep.constants[spec.target], state))
            graph.erase_node(node)
            redirected = True
        elif spec.kind == InputKind.CONSTANT_TENSOR and spec.target in held:
            name = held[spec.target].name
            state_targets.append(name)
            input_names.append(name)
            arguments.append(node)
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

    if redirected:  # storages of the fake values must agree with the new aliasing
        _propagate_fake_values(gm)
    _, written = view_roots(graph)
    first_writes = _first_writes(written, dict(zip(arguments, input_names)))
    output = next(n for n in graph.nodes if n.op == "output")
    # An output that is an argument or a view of one is the caller's tensor (a view of
    # it) as in eager, not a result of main; an output given twice is one result.
    leaves: list[tuple[str, Any, ...]] = []
    kept: dict[torch.fx.Node, int] = {}
    for value in output.args[0]:
        alias = _argument_alias(value, {node: i for i, node in enumerate(arguments)},
                                frozenset(written))
        if _constant_output(value):
            leaves.append(("constant", value))
        elif alias is not None:
            leaves.append(("argument", alias[0], _position_results(alias[1], graph, kept)))
        else:
            leaves.append(("result", kept.setdefault(value, len(kept))))
    region = next((n for n in graph.nodes if n.op == "call_function" and
                   control_flow.is_region_op(n.target)), None)
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
                                 guards=read_constants)
    return gm, signature


def _state_node(value: torch.Tensor, state: list[tuple[torch.Tensor, torch.fx.Node]]
                ) -> torch.fx.Node | None:
    """The placeholder of the parameter or buffer `value` is (the same elements)."""
    return next((node for tensor, node in state if tensor is value or
                 training.same_view(tensor, value)), None)


def _held_constants(ep: ExportedProgram, graph: torch.fx.Graph,
                    placeholders: dict[str, torch.fx.Node], roots: dict[str, Any],
                    state: list[tuple[torch.Tensor, torch.fx.Node]]
                    ) -> tuple[dict[str, training.HeldTensor], list[training.HeldConstant]]:
    """Constant target -> how to find it at each call, for each tensor constant that is
    state the caller holds: one the program writes, or a `.grad` or an optimizer's (found
    through `roots`). A written constant without a path is the exported tensor itself.
    And the other constants found through `roots` (a module's plain tensor attribute, a
    global), which stay literals of the program: each checked unchanged at a call."""
    _, written = view_roots(graph)
    specs = [spec for spec in ep.graph_signature.input_specs
             if spec.kind == InputKind.CONSTANT_TENSOR and
             _state_node(ep.constants[spec.target], state) is None]
    paths = training.find_paths(roots, [ep.constants[s.target] for s in specs])
    held: dict[str, training.HeldTensor] = {}
    read: list[training.HeldConstant] = []
    names: set[str] = set()
    for spec, found in zip(specs, paths):
        value = ep.constants[spec.target]
        is_written = placeholders[spec.arg.name] in written
        if found is not None and (is_written or training.reached_through_optimizer(
                found[0], found[1])):
            root, path, name = found
        elif is_written:
            root, path, name = value, (), spec.target
        else:
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
    eager would return, else None: through view ops with constant operands that shared
    its storage when traced (in-place ops return their self), an item of a list of
    views (split, chunk, unbind), or `x[pos]` at 0-d positions. A view's operands may
    hold `Input`s, the call's arguments, and `_Computed` positions."""
    views = []
    while value not in arguments:
        if isinstance(value, torch.fx.Node) and value.target is operator.getitem and \
                _returns_views(value.args[0]):
            views.append((operator.getitem, (value.args[1],), {}))
            value = value.args[0]
            if any(isinstance(a, torch.fx.Node) for a in pytree.tree_leaves(
                    (value.args[1:], value.kwargs))):
                return None
            views.append((value.target, tuple(value.args[1:]), dict(value.kwargs)))
            value = value.args[0]
            continue
        position = _position_view(value, arguments, written) \
            if isinstance(value, torch.fx.Node) else None
        if position is not None:
            views.append(position)
            value = value.args[0]
            continue
        effects = op_effects(value) if isinstance(value, torch.fx.Node) else None
        if effects is None or effects.result_views != 0:
            return None
        if not effects.written:  # a view op: taken again on the caller's tensor
            rest = (value.args[1:], value.kwargs)
            if any(isinstance(a, torch.fx.Node) for a in pytree.tree_leaves(rest)) or \
                    storage_of(value.meta.get("val")) != storage_of(
                        value.args[0].meta.get("val")):
                return None  # `reshape`, `contiguous`, `to` that copied when traced
            views.append((value.target, tuple(value.args[1:]), dict(value.kwargs)))
        value = value.args[0]
    return arguments[value], tuple(reversed(views))


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


_INLINED_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                   torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64)


class _InlineConstants(FxImporterHooks):
    """Tensor constants as inline `dense<...>` literals, not `dense_resource` blobs,
    which XLA rejects ("Only dense elements attr are supported")."""

    def resolve_literal(self, gni: Any, literal: Any, info: Any) -> ir.Value | None:
        if not isinstance(literal, torch.Tensor) or literal.dtype not in _INLINED_DTYPES:
            return None
        meta_state.refuse_meta_constant(getattr(info, "name", "a tensor constant"), literal)
        return tensor_literal(literal)


def import_program(ep: ExportedProgram, context: ir.Context,
                   roots: dict[str, Any] | None = None, check_bounds: bool = False
                   ) -> tuple[ir.Module, ProgramSignature]:
    """Imports an exported program into mutable torch IR with named arguments; state it
    reaches through Python objects is looked for from `roots` (training.program_roots).
    `check_bounds` adds the flags of frontend/bounds_checks.py as a result."""
    with torch.no_grad():  # fake values of the rewrites are values, not autograd steps
        gm, signature = _prepare_graph(ep, roots, check_bounds)
    refuse_data_dependent_shapes(gm.graph)
    importer = FxImporter(context=context, hooks=_InlineConstants())
    func_op = importer.import_stateless_graph(gm.graph, func_name="main")
    module = importer.module
    with context:
        block = func_op.regions[0].blocks[0]
        for arg, name in zip(block.arguments, signature.input_names):
            arg.set_location(ir.Location.name(name, childLoc=arg.location))
        mark_mutable_tensors(func_op.operation.opview)
        region_functions.import_regions(importer, gm.graph, _prepare_region,
                                        mark_mutable_tensors)
        module.operation.verify()
    return module, signature


def _prepare_region(graph: torch.fx.Graph) -> None:
    """A region's graph (control_flow.py) as main's is before its import. Its fake
    values are computed again from its placeholders': tracing gave each op on a tensor
    the program holds through a Python object a fake of its own (storages would not
    say what aliases what), as `_prepare_graph` does for main's redirected constants."""
    _propagate_fake_values(graph.owning_module)
    for node in graph.nodes:
        if isinstance(node.meta.get("val"), torch._subclasses.FakeTensor):
            node.meta["val"].constant = None
    with torch.no_grad():
        fx_rewrites.rewrite(graph)
    _one_use_per_constant(graph)
    graph.lint()
    refuse_data_dependent_shapes(graph)


def compile_to_torch_ir(f: Any, args: tuple, kwargs: dict | None, context: ir.Context,
                        dynamic_shapes: Any = None, check_bounds: bool = False
                        ) -> tuple[ir.Module, ProgramSignature]:
    """Exports and imports `f` called on `args`, `kwargs`; `dynamic_shapes` (torch.export's
    spec) makes the dimensions it names `?` in the IR; `check_bounds` adds the flags of
    frontend/bounds_checks.py as a result."""
    source = f if isinstance(f, (torch.nn.Module, ExportedProgram)) else _function_module(f)
    roots = training.program_roots(f)
    steps = None if isinstance(f, ExportedProgram) else \
        training.OptimizerSteps(source, roots)
    if dynamic_shapes is not None and isinstance(f, ExportedProgram):
        raise ValueError("dynamic_shapes is for a program to export: an ExportedProgram "
                         "has its dynamic dimensions already")
    with progress.stage("trace"):
        ep = export(source, args, kwargs, steps, dynamic_shapes)
    with progress.stage("import"):
        module, signature = import_program(ep, context, roots, check_bounds)
    if not isinstance(f, (torch.nn.Module, ExportedProgram)):
        for name in signature.state_targets:  # the function's modules' state, by name
            if name not in signature.held:
                value = _state_value(ep, name)
                signature.held[name] = training.HeldTensor(
                    source, tuple(("attr", part) for part in name.split(".")), name,
                    tuple(value.shape), value.dtype)
    signature.cleared_grads = steps.cleared if steps is not None else []
    if steps is not None:
        signature.guards += steps.settings.values()
    state = [signature.held[target]() if target in signature.held else
             _state_value(ep, target) for target in signature.state_targets]
    signature.refuse_written_inputs_sharing_memory(
        signature.real_views(state + signature.user_inputs(args, kwargs or {})))
    return module, signature


def _root_of(value: ir.Value, roots: dict[ir.Value, ir.Value]) -> ir.Value:
    return roots.get(value, value)


def _copy_operands(op: ir.Operation, to_value: bool) -> None:
    """Gives op the tensor kind it takes, with torch-mlir's copy ops.

    In-place torch ops take only `!torch.tensor` operands (`torch.copy.to_tensor`); a list
    of tensors holds values, so it reads mutable operands (`torch.copy.to_vtensor`).
    """
    wrong_kind = torch_types.is_nonvalue_tensor if to_value else torch_types.is_value_tensor
    name, retype = ("torch.copy.to_vtensor", torch_types.value_type) if to_value else \
        ("torch.copy.to_tensor", torch_types.nonvalue_type)
    for position, operand in enumerate(op.operands):
        if wrong_kind(operand.type):
            copy = ir.Operation.create(name, results=[retype(operand.type)],
                                       operands=[operand], loc=op.location,
                                       ip=ir.InsertionPoint(op))
            op.operands[position] = copy.result


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


def mark_mutable_tensors(func: func_d.FuncOp) -> None:
    """Gives `!torch.tensor` type to every tensor written in place or aliasing one.

    Views hang off their base in program order, so each tensor's root is known when it is
    defined: one walk finds the roots, a second retypes the members of written roots.
    """
    block = func.regions[0].blocks[0]
    for op in operations(block):  # detach_ means nothing without autograd
        effects = op_registry.effects(op_registry.aten_name(op))
        if effects is not None and effects.is_autograd_only:
            op.result.replace_all_uses_with(op.operands[0])
            op.erase()
    roots: dict[ir.Value, ir.Value] = {}
    written: set[ir.Value] = set()
    for op in operations(block):
        effects = op_registry.effects_of(op)
        if effects is None:
            continue
        viewed = 0 if op_registry.is_position_view(op) else effects.result_views
        if viewed is not None and len(op.results) == 1:  # views and in-place ops
            roots[op.results[0]] = _root_of(op.operands[viewed], roots)
        for position in effects.written:
            if position < len(op.operands) and not effects.is_autograd_only:
                if not torch_types.is_tensor(op.operands[position].type):
                    raise UnsupportedMutationError.at(
                        op, "it writes the tensors of a list, which outofplace does "
                        "not follow (the frontend decomposes _foreach_* and _fused_* ops)")
                written.add(_root_of(op.operands[position], roots))
    if not written:
        return

    def retype(value: ir.Value) -> None:
        if torch_types.is_value_tensor(value.type) and _root_of(value, roots) in written:
            value.set_type(torch_types.nonvalue_type(value.type))

    for arg in block.arguments:
        retype(arg)
    for op in operations(block):
        for result in op.results:
            retype(result)
        effects = op_registry.effects_of(op)
        if effects is not None and effects.written:
            _copy_operands(op, to_value=False)
        elif op.name == "torch.prim.ListConstruct":
            _copy_operands(op, to_value=True)
        if op.name == "torch.vtensor.literal" and op.results[0] in written:
            raise UnsupportedMutationError.at(op, "a tensor constant is written in place")
    ret = terminator(block)
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in ret.operands]))
