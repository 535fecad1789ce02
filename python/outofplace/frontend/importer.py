"""From a torch program to mutable torch IR that passes the MLIR verifier: the frontend's
one entry, `compile_to_torch_ir`.

Three steps, each its own module: tracing (tracing.py: torch.export with our modes),
graph preparation (graph_preparation.py: main's graph and the `ProgramSignature`, the
contract of signature.py) and the import here, with torch-mlir's FxImporter, finished by
`mark_mutable_tensors` (mutable_tensors.py).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch_mlir import ir
from torch_mlir.extras.fx_importer import FxImporter, FxImporterHooks

from . import (collectives, input_views, meta_state, region_functions, tracing, training)
from .. import progress
from ..ir_utils import tensor_literal
from ..signature import FLAGS_RESULT, ProgramSignature, state_tensor
from .graph_preparation import (prepare_graph, prepare_region,
                                refuse_data_dependent_shapes, state_value)
from .mutable_tensors import mark_mutable_tensors
from .tensor_data import DataAsDetach, RealTensorsMet


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
                   roots: dict[str, Any] | None = None, check_bounds: bool = False,
                   leaves: list[Any] | None = None, met: RealTensorsMet | None = None
                   ) -> tuple[ir.Module, ProgramSignature]:
    """Imports an exported program into mutable torch IR with named arguments; state it
    reaches through Python objects is looked for from `roots` (training.program_roots).
    `check_bounds` adds the flags of frontend/bounds_checks.py as a result. `leaves` are
    those of the user's (args, kwargs) it was traced with (a user tensor viewing another
    argument is taken from it); `met`, the real tensors the trace met (a constant over
    one of them is checked unchanged at each call)."""
    with torch.no_grad():  # fake values of the rewrites are values, not autograd steps
        gm, signature = prepare_graph(ep, roots, check_bounds, leaves, met)
    refuse_data_dependent_shapes(gm.graph)
    importer = FxImporter(context=context, hooks=_InlineConstants())
    func_op = importer.import_stateless_graph(gm.graph, func_name="main")
    module = importer.module
    with context:
        block = func_op.regions[0].blocks[0]
        for arg, name in zip(block.arguments, signature.input_names):
            arg.set_location(ir.Location.name(name, childLoc=arg.location))
        mark_mutable_tensors(func_op.operation.opview)
        region_functions.import_regions(importer, gm.graph, prepare_region,
                                        mark_mutable_tensors)
        if signature.bounds_result is not None:  # for outofplace-split-bounds-check
            module.operation.attributes[FLAGS_RESULT] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), signature.bounds_result)
        module.operation.verify()
    return module, signature


def _leaves(ep: ExportedProgram, args: tuple, kwargs: dict) -> list[Any]:
    """The leaves of the user's (args, kwargs), keyword arguments in the program's order."""
    spec = ep.call_spec.in_spec
    if spec is not None and spec.num_children == 2 and kwargs:
        kwargs = {k: kwargs[k] for k in spec.child(1).context if k in kwargs}
    return pytree.tree_leaves((tuple(args), kwargs))


def compile_to_torch_ir(f: Any, args: tuple, kwargs: dict | None, context: ir.Context,
                        dynamic_shapes: Any = None, check_bounds: bool = False
                        ) -> tuple[ir.Module, ProgramSignature]:
    """Exports and imports `f` called on `args`, `kwargs`; `dynamic_shapes` (torch.export's
    spec) makes the dimensions it names `?` in the IR; `check_bounds` adds the flags of
    frontend/bounds_checks.py as a result."""
    source = f if isinstance(f, (torch.nn.Module, ExportedProgram)) else \
        tracing.function_module(f)
    roots = training.program_roots(f)
    steps = None if isinstance(f, ExportedProgram) else \
        training.OptimizerSteps(source, roots)
    if dynamic_shapes is not None and isinstance(f, ExportedProgram):
        raise ValueError("dynamic_shapes is for a program to export: an ExportedProgram "
                         "has its dynamic dimensions already")
    data, met = DataAsDetach(), RealTensorsMet()
    with progress.stage("trace"):
        ep = tracing.export(source, args, kwargs, steps, dynamic_shapes, data, met)
    with progress.stage("import"):
        module, signature = import_program(ep, context, roots, check_bounds,
                                           _leaves(ep, args, kwargs or {}), met)
        with context:  # the process groups of its collectives, if any
            collectives.annotate(module)
    if not isinstance(f, (torch.nn.Module, ExportedProgram)):
        for name in signature.state_targets:  # the function's modules' state, by name
            if name not in signature.held:
                value = state_value(ep, name)
                signature.held[name] = training.HeldTensor(
                    source, tuple(("attr", part) for part in name.split(".")), name,
                    tuple(value.shape), value.dtype)
    signature.cleared_grads = steps.cleared if steps is not None else []
    signature.unversioned = data.unversioned
    for view, (base, layout) in signature.state_views.items():
        signature.guards.append(input_views.StateView(
            view, base, layout, functools.partial(state_tensor, source, view),
            functools.partial(state_tensor, source, base)))
    if steps is not None:
        signature.guards += steps.settings.values()
    state = [signature.held[target]() if target in signature.held else
             state_value(ep, target) for target in signature.state_targets]
    signature.refuse_written_inputs_sharing_memory(signature.real_views(
        signature.with_spans(state + signature.user_inputs(args, kwargs or {}))))
    return module, signature


