"""From a torch program to mutable torch IR that passes the MLIR verifier.

The program is traced with `torch.export` in training IR, which keeps in-place ops and
views (no functionalization, no decompositions). torch-mlir's FxImporter then writes every
tensor as `!torch.vtensor`, in-place ops included, which the verifier rejects (torch-mlir
#4346). `mark_mutable_tensors` repairs that: every tensor that is written, or aliases a
written tensor, becomes `!torch.tensor`.
"""

from __future__ import annotations

import functools
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import (GuardOnDataDependentSymNode,
                                                   PendingUnbackedSymbolNotFound)
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                           DynamicOutputShapeException)
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, TensorArgument
from torch_mlir import ir
from torch_mlir.dialects import func as func_d
from torch_mlir.extras.fx_importer import FxImporter, FxImporterHooks

from . import fx_rewrites

from .. import op_registry, torch_types
from ..errors import UnsupportedMutationError
from .fx_graph import overlaps, source_line, storage_of, view_roots
from .masked_values import MaskedValues
from .runtime_positions import RuntimePositions, user_line
from ..ir_utils import operations, tensor_literal, terminator


@dataclass
class ProgramSignature:
    """How the arguments and results of `main` relate to the Python program."""

    input_names: list[str]  # one per argument of main, in order
    state_targets: list[str]  # module parameters and buffers, the first arguments of main
    in_spec: pytree.TreeSpec | None  # pytree of the user's (args, kwargs)
    user_input_leaves: list[int]  # positions of the tensor leaves of (args, kwargs)
    out_spec: pytree.TreeSpec | None  # pytree of the program's output
    # For each leaf of the output: ("result", index of main's result) or ("constant", value).
    output_leaves: list[tuple[str, Any]] = field(default_factory=list)
    # For each argument written in place: the first op writing it, and its source line.
    first_writes: dict[str, tuple[str, str]] = field(default_factory=dict)

    def user_inputs(self, args: tuple, kwargs: dict) -> list[Any]:
        """The user's tensor arguments among `args` and `kwargs`, in main's order."""
        spec = self.in_spec
        if spec is not None and spec.num_children == 2 and kwargs:
            kwargs = {k: kwargs[k] for k in spec.child(1).context}
        leaves = pytree.tree_leaves((tuple(args), kwargs))
        return [leaves[i] for i in self.user_input_leaves]

    def refuse_written_inputs_sharing_memory(self, inputs: list[torch.Tensor]) -> None:
        """Refuses arguments (one per argument of main) of which one is written in place
        and shares memory with another: eager's write shows through the other, which the
        compiled program, taking them as separate values, cannot do."""
        if not self.first_writes:
            return
        # Run at every call: one storage lookup per argument, not one per pair.
        storages = [storage_of(value) for value in inputs]
        by_storage: dict[Any, list[int]] = {}
        for j, storage in enumerate(storages):
            by_storage.setdefault(storage, []).append(j)
        for i, name in enumerate(self.input_names):
            if name not in self.first_writes:
                continue
            for j in by_storage[storages[i]]:
                if j != i and overlaps(inputs[i], inputs[j]):
                    op, location = self.first_writes[name]
                    raise UnsupportedMutationError(
                        op, f"it writes argument `{name}`, which shares memory with "
                        f"argument `{self.input_names[j]}`: eager's write shows through "
                        f"`{self.input_names[j]}`, separate arguments of the compiled "
                        "program cannot; pass tensors that do not share memory (a clone)",
                        location=location)


def _function_module(fn: Callable) -> torch.nn.Module:
    """A module whose forward is `fn` itself, for torch.export to trace a plain function.

    Its placeholders then take the names of fn's parameters, and registering fn as a
    stack-trace anchor keeps fn's own lines in the FX stack traces, which export would
    otherwise cut down to frames named `forward`.
    """
    torch.fx.proxy._register_stack_trace_anchor(fn)
    name = getattr(fn, "__name__", "function")
    return type(name, (torch.nn.Module,), {"forward": staticmethod(fn)})()


# What torch.export raises when a value computed from tensor data is needed as a Python
# value (`.item()` in a shape, `if x.sum() > 0:`, the bounds check of a runtime index,
# `x.narrow(0, pos, 1)` with a 0-d tensor `pos`).
_DATA_DEPENDENT = (GuardOnDataDependentSymNode, DataDependentOutputException,
                   DynamicOutputShapeException, PendingUnbackedSymbolNotFound)


class _ShapeChangesInPlace(torch.overrides.TorchFunctionMode):
    """While tracing: the first op changing a tensor's shape or strides in place
    (`x.unsqueeze_(0)`, `x.t_()`), kept as the refusal to give if torch.export fails.
    inplace_to_outofplace refuses every such op it meets, but torch.export crashes on
    some of them applied to an input before (`unsqueeze_`: IndexError, `AssertionError:
    sources must not be empty`)."""

    def __init__(self) -> None:
        super().__init__()
        self.refusal: UnsupportedMutationError | None = None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if self.refusal is None and name.endswith("_") and not name.endswith("__") and \
                _rebinds_view(name):
            self.refusal = UnsupportedMutationError(
                f"torch.aten.{name}", "it changes the shape or strides of a tensor in place",
                location=user_line())
        return func(*args, **(kwargs or {}))


@functools.cache
def _rebinds_view(name: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(effects is not None and effects.rebinds_view and not effects.is_autograd_only
               for effects in (op_registry.effects(op_registry.mlir_name(getattr(packet, o)))
                               for o in packet.overloads()))


# What tracing raises for a write into an expanded view that eager let through (a copy
# of a tensor onto itself returns early in eager).
_INTERNAL_OVERLAP = "more than one element of the written-to tensor refers to a single memory"


def export(f: Any, args: tuple, kwargs: dict | None = None) -> ExportedProgram:
    """Traces `f` to ATen with its mutations and views kept."""
    if isinstance(f, ExportedProgram):
        return f
    module = f if isinstance(f, torch.nn.Module) else _function_module(f)
    # Tracing may run small ops on real buffers it does not see as module state (a 0-d
    # counter held by a plain Python object): compiling must leave the model as it was.
    saved = [(t, t.detach().clone()) for t in module.buffers()]
    # Entered by forward hooks, inside the trace, so they see `x[pos]` and `x[mask]`
    # before export's own handler of __getitem__ (which calls .item() on a position).
    positions, masked = RuntimePositions(), MaskedValues()
    shape_changes = _ShapeChangesInPlace()

    def enter(*_: Any) -> None:
        shape_changes.__enter__()
        positions.__enter__()
        masked.__enter__()

    def leave(module: Any, inputs: Any, output: Any) -> None:
        masked.__exit__(None, None, None)
        positions.__exit__(None, None, None)
        shape_changes.__exit__(None, None, None)
        masked.refuse_escaping(output)

    hooks = [module.register_forward_pre_hook(enter),
             module.register_forward_hook(leave, always_call=True)]
    try:
        with torch.no_grad():
            return torch.export.export(module, tuple(args), kwargs or {}, strict=False)
    except _DATA_DEPENDENT as error:
        frames = traceback.extract_tb(error.__traceback__)
        raise UnsupportedMutationError(
            "torch.export", "a value read from a tensor's data decides a shape, an index "
            f"or a branch here ({type(error).__name__}); outofplace compiles programs "
            "whose shapes and control flow do not depend on the data",
            location=user_line(frames)) from error
    except Exception as error:
        if shape_changes.refusal is not None:  # refused anyway, whatever export crashed on
            raise shape_changes.refusal from error
        if not isinstance(error, RuntimeError) or _INTERNAL_OVERLAP not in str(error):
            raise
        frames = traceback.extract_tb(error.__traceback__)
        raise UnsupportedMutationError(
            "torch.export", "writing into a tensor whose elements share memory (an "
            "expanded view), which tracing refuses as eager refuses most such writes",
            location=user_line(frames)) from error
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for tensor, value in saved:
                tensor.copy_(value)


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


def _prepare_graph(ep: ExportedProgram) -> tuple[torch.fx.GraphModule, ProgramSignature]:
    """A copy of the exported graph whose placeholders are exactly main's arguments.

    Tensor constants become module attributes (imported as literals), constant user
    inputs are substituted, and constant outputs are kept aside for the caller.
    """
    graph = torch.fx.Graph()  # a copy: an ExportedProgram the user passed stays intact
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(ep.graph, copies))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    placeholders = {old.name: copies[old] for old in ep.graph.nodes
                    if old.op == "placeholder"}
    # A tensor reached through a plain Python object (HF's StaticCache holds its buffers
    # in a list) is exported as a constant; it is the buffer, so it becomes the buffer.
    state = {id(_state_value(ep, spec.target)): placeholders[spec.arg.name]
             for spec in ep.graph_signature.input_specs
             if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER)}
    redirected = False
    state_targets: list[str] = []
    input_names: list[str] = []
    arguments: list[torch.fx.Node] = []
    user_position = 0
    user_input_leaves: list[int] = []
    for spec in ep.graph_signature.input_specs:
        node = placeholders[spec.arg.name]
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            state_targets.append(spec.target)
            input_names.append(spec.target)
            arguments.append(node)
        elif spec.kind == InputKind.CONSTANT_TENSOR and \
                id(ep.constants[spec.target]) in state:
            node.replace_all_uses_with(state[id(ep.constants[spec.target])])
            graph.erase_node(node)
            redirected = True
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            attr = f"_outofplace_constant_{len(gm._buffers)}"
            gm.register_buffer(attr, ep.constants[spec.target])
            with graph.inserting_before(node):
                node.replace_all_uses_with(graph.get_attr(attr))
            graph.erase_node(node)
        elif spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument):
            node.replace_all_uses_with(spec.arg.value)  # type: ignore[arg-type]
            graph.erase_node(node)
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
    first_writes = _first_writes(graph, dict(zip(arguments, input_names)))
    fx_rewrites.rewrite(graph)
    _one_use_per_constant(graph)
    output = next(n for n in graph.nodes if n.op == "output")
    leaves: list[tuple[str, Any]] = []
    kept = []
    for value in output.args[0]:
        if _constant_output(value):
            leaves.append(("constant", value))
        else:
            leaves.append(("result", len(kept)))
            kept.append(value)
    output.args = (tuple(kept),)
    graph.lint()
    gm.recompile()
    call_spec = ep.call_spec
    signature = ProgramSignature(input_names, state_targets, call_spec.in_spec,
                                 user_input_leaves, call_spec.out_spec, leaves, first_writes)
    return gm, signature


def _first_writes(graph: torch.fx.Graph, names: dict[torch.fx.Node, str]
                  ) -> dict[str, tuple[str, str]]:
    """For each argument written in place (through any view): the first op writing it
    and that op's source line."""
    _, written = view_roots(graph)
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
        return tensor_literal(literal)


def import_program(ep: ExportedProgram, context: ir.Context
                   ) -> tuple[ir.Module, ProgramSignature]:
    """Imports an exported program into mutable torch IR with named arguments."""
    gm, signature = _prepare_graph(ep)
    importer = FxImporter(context=context, hooks=_InlineConstants())
    func_op = importer.import_stateless_graph(gm.graph, func_name="main")
    module = importer.module
    with context:
        block = func_op.regions[0].blocks[0]
        for arg, name in zip(block.arguments, signature.input_names):
            arg.set_location(ir.Location.name(name, childLoc=arg.location))
        refuse_dynamic_shapes(func_op.operation.opview, signature.input_names)
        mark_mutable_tensors(func_op.operation.opview)
        module.operation.verify()
    return module, signature


def compile_to_torch_ir(f: Any, args: tuple, kwargs: dict | None, context: ir.Context
                        ) -> tuple[ir.Module, ProgramSignature]:
    """Exports and imports `f` called on `args`, `kwargs`."""
    ep = export(f, args, kwargs)
    module, signature = import_program(ep, context)
    state = [_state_value(ep, target) for target in signature.state_targets]
    signature.refuse_written_inputs_sharing_memory(
        state + signature.user_inputs(args, kwargs or {}))
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


def refuse_dynamic_shapes(func: func_d.FuncOp, names: list[str]) -> None:
    """Refuses the first use of an argument with a symbolic size (an exported program with
    dynamic shapes) and the first op whose result shape depends on the data (`x[mask]`,
    `nonzero`): StableHLO needs static shapes, and torch-mlir would lower such an op to
    a program that computes the wrong values."""
    block = func.regions[0].blocks[0]
    dynamic = [(arg, name) for arg, name in zip(block.arguments, names)
               if _has_dynamic_size(arg)]
    for op in operations(block):
        for arg, name in dynamic:
            if any(operand == arg for operand in op.operands):
                raise UnsupportedMutationError.at(
                    op, f"argument `{name}` has a dynamic size ({arg.type}), from the "
                    "exported program's dynamic shapes; outofplace compiles static "
                    "shapes only: export with the sizes fixed")
        for result in op.results:
            if _has_dynamic_size(result):
                raise UnsupportedMutationError.at(
                    op, "its result's shape depends on the data (a dynamic shape); "
                    "outofplace compiles static shapes only")


def _has_dynamic_size(value: ir.Value) -> bool:
    if not torch_types.is_tensor(value.type):
        return False
    sizes = torch_types.TensorType.of(value.type).sizes
    return sizes is None or any(d < 0 for d in sizes)


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
        effects = op_registry.effects(op_registry.aten_name(op))
        if effects is None:
            continue
        if effects.result_views is not None and len(op.results) == 1:
            roots[op.results[0]] = _root_of(op.operands[effects.result_views], roots)
        for position in effects.written:
            if position < len(op.operands) and not effects.is_autograd_only:
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
        effects = op_registry.effects(op_registry.aten_name(op))
        if effects is not None and effects.written:
            _copy_operands(op, to_value=False)
        elif op.name == "torch.prim.ListConstruct":
            _copy_operands(op, to_value=True)
        if op.name == "torch.vtensor.literal" and op.results[0] in written:
            raise UnsupportedMutationError.at(op, "a tensor constant is written in place")
    ret = terminator(block)
    func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in ret.operands]))
