"""Tracing: a torch program to an ExportedProgram with its mutations and views kept.

`export` runs torch.export in training IR (no functionalization, no decompositions,
strict=False) with our modes entered by forward hooks, inside the trace: runtime positions
(`x[pos]`), masked values, `.data`, `.item()` as a 0-d tensor, input shape changes, the
regions of torch.cond and while_loop, and the optimizer's traced steps. What torch.export
raises for a program outofplace cannot compile becomes an `UnsupportedMutationError` at
the user's line. A plain function and a torch.compile graph are traced as modules.
"""

from __future__ import annotations

import functools
import inspect
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, NoReturn

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import (GuardOnDataDependentSymNode,
                                                   PendingUnbackedSymbolNotFound)
import torch.utils._pytree as pytree
from torch.fx._lazy_graph_module import _use_lazy_graph_module
from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                           DynamicOutputShapeException)
from torch.export import ExportedProgram

from . import (activation_checkpoints, control_flow, cumulative_batch_norm, decompositions,
               meta_state, training)
from ..errors import UnsupportedMutationError
from ..memory import end_of
from .dropout import TracedDropout
from .masked_values import MaskedValues
from .saved_tensors import SavedTensors
from .runtime_positions import RuntimePositions, user_line
from .shape_changes import InputShapeChanges
from .tensor_data import DataAsDetach, RealTensorsMet


def function_module(fn: Callable) -> torch.nn.Module:
    """A module whose forward is `fn` itself, for torch.export to trace a plain function.

    Its placeholders then take the names of fn's parameters, and registering fn as a
    stack-trace anchor keeps fn's own lines in the FX stack traces, which export would
    otherwise cut down to frames named `forward`.
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    fn = training.called_method(fn) or fn  # (an object called as a function: its method)
    torch.fx.proxy._register_stack_trace_anchor(fn)
    module = type(name, (torch.nn.Module,), {"forward": staticmethod(fn)})()
    # Modules the function names, or reaches through plain objects (`self.model`), are
    # its submodules: their parameters and buffers are arguments read at every call (an
    # optimizer step writes them), not constants.
    for attr, value in training.program_modules(training.program_roots(fn)).items():
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


# What torch.export's tracer raises where a program reads a tensor's value as a Python
# number it then needs (OPT's `position_ids[:, past_seen_tokens:]`)
_ITEM_IN_TRACE = "trying to get value out of a tracing tensor"


def _refuse_data_dependent(error: BaseException, what: str) -> NoReturn:
    """Refuses a program whose shapes or control flow depend on its data, at the user's
    line the traceback of `error` reaches."""
    frames = traceback.extract_tb(error.__traceback__)
    raise UnsupportedMutationError(
        "torch.export", "a value read from a tensor's data decides a shape, an index "
        f"or a branch here ({what}); outofplace compiles programs whose shapes and "
        "control flow do not depend on the data", location=user_line(frames),
        shape_from_values=True) from error


# What tracing raises for a write into an expanded view that eager let through (a copy
# of a tensor onto itself returns early in eager).
_INTERNAL_OVERLAP = "more than one element of the written-to tensor refers to a single memory"

# What torch.export raises when a tensor the trace made is left in the program as a
# constant (`torch.autograd.grad` through a batch norm without affine parameters: plain
# torch.export fails alike).
_TRACED_CONSTANT = "found a fake tensor in the exported program constant's list"


def _forward_line(module: torch.nn.Module, frames: traceback.StackSummary) -> str:
    """`file:line` of the module's forward (the user's program), else (a function or a
    torch.compile graph traced as a module of ours) the user's innermost line of
    `frames`."""
    code = getattr(inspect.unwrap(type(module).forward), "__code__", None)
    ours = Path(__file__).resolve().parents[1]
    if code is None or Path(code.co_filename).resolve().is_relative_to(ours):
        return user_line(frames)
    return f"{code.co_filename}:{code.co_firstlineno}"


def _distinct_tensors(tree: Any) -> Any:
    """The tree with each tensor that shares memory with an earlier one (`f(x, t, t)`,
    `f(x[2], x)`) traced as a copy in the same layout (strides, storage offset).
    torch.export makes one input of one tensor object given twice, and makes the sizes
    of a tensor another input views symbolic: separate arguments of the compiled program,
    they are separate values (a written one sharing memory is refused, at compiling and
    at every call)."""
    storages: set[int] = set()

    def distinct(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor) or leaf.is_meta:
            return leaf
        storage = leaf.untyped_storage()._cdata
        if storage not in storages:
            storages.add(storage)
            return leaf
        with torch.no_grad():  # the elements the layout reaches, expanded ones too
            memory = torch.empty(0, dtype=leaf.dtype, device=leaf.device).set_(
                leaf.untyped_storage())[:end_of(leaf)].clone()
        copy = memory.as_strided(leaf.shape, leaf.stride(), leaf.storage_offset())
        return copy.requires_grad_(leaf.requires_grad)

    return pytree.tree_map(distinct, tree)


class _GradientsOutsideModules:
    """`.grad` that `backward()` writes of leaf tensors that are no module's parameters:
    one the program holds (`w = torch.randn(..., requires_grad=True)`, a global) or
    takes as an argument. The compiled program writes only its modules' parameters'
    `.grad` (training.OptimizerSteps): tracing would leave a fake tensor in a held one's
    `.grad`, and an argument's would stay as it was, where eager writes it. Such a
    program is refused at the line whose backward writes it, and the tensors' `.grad`
    are left as they were. (Their gradients by `torch.autograd.grad` are results.)"""

    def __init__(self, steps: training.OptimizerSteps) -> None:
        parameters = {id(p) for p in steps.module.parameters()}
        held = [t for t in steps.reachable if t.is_leaf and t.requires_grad and
                id(t) not in parameters]
        names = [found[2] if found is not None else "a tensor the program holds"
                 for found in training.find_paths(steps.roots, held)]
        self.held = list(zip(names, held))
        self.grads = [t.grad for t in held]
        self.written: list[tuple[str, str]] = []  # (whose, the user's line)
        self.handles = [t.register_post_accumulate_grad_hook(self._hook(
            f"`{name}`, a tensor the program holds outside any module")) for name, t in self.held]

    def _hook(self, whose: str) -> Callable[[torch.Tensor], None]:
        def written(_: torch.Tensor) -> None:
            self.written.append((whose, user_line(traceback.extract_stack())))
        return written

    def watch_arguments(self, forward: Callable, args: tuple, kwargs: dict) -> None:
        """The traced forward's arguments (its fake tensors), at its start."""
        try:
            names = list(inspect.signature(forward).parameters)
        except (TypeError, ValueError):
            names = []
        given = [*zip(names, args), *kwargs.items()]
        for name, value in given:
            if isinstance(value, torch.Tensor) and value.is_leaf and value.requires_grad:
                self.handles.append(value.register_post_accumulate_grad_hook(self._hook(
                    f"argument `{name}`")))

    def release(self) -> None:
        for handle in self.handles:
            handle.remove()
        for (_, tensor), grad in zip(self.held, self.grads):
            if tensor.grad is not grad:
                tensor.grad = grad

    def refuse(self) -> None:
        if self.written:
            whose, line = self.written[0]
            raise UnsupportedMutationError(
                "backward", f"it writes `.grad` of {whose}; the compiled program writes "
                "only its modules' parameters' `.grad`: make the tensor an nn.Parameter "
                "of a module the program calls, or take its gradient with "
                "torch.autograd.grad", location=line)


def export(f: Any, args: tuple, kwargs: dict | None = None,
           steps: training.OptimizerSteps | None = None,
           dynamic_shapes: Any = None, data: DataAsDetach | None = None,
           met: RealTensorsMet | None = None) -> ExportedProgram:
    """Traces `f` to ATen with its mutations and views kept. Gradients are traced as
    eager computes them (`torch.autograd.grad`, `backward()`); `steps` is told where
    the traced forward starts and ends. `dynamic_shapes` is torch.export's spec. `data`
    traces `x.data` (frontend/tensor_data.py) and names the state written only through
    it (`data.unversioned`); `met` keeps the real tensors the program's ops take."""
    if isinstance(f, ExportedProgram):
        return f
    module = f if isinstance(f, torch.nn.Module) else function_module(f)
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
    data, regions = data or DataAsDetach(), control_flow.region_mode()
    met = met or RealTensorsMet()

    items = steps.items_as_tensors()
    saved_tensors, dropout = SavedTensors(), TracedDropout()
    gradients = _GradientsOutsideModules(steps)
    # The exception being handled when the forward starts (the caller may compile inside
    # an `except` block): at its end another one means the forward raised.
    handled: list[BaseException | None] = []

    def enter(module: Any, args: tuple, kwargs: dict) -> None:
        handled.append(sys.exc_info()[1])
        shapes.watch(module, args, kwargs)
        steps.enter()
        if torch.is_grad_enabled() and (gradients.held or any(  # autograd records:
                # gradients may be taken (of a parameter, an argument, or a tensor the
                # program holds: `w = torch.randn(..., requires_grad=True)`, a global)
                t.requires_grad for t in (*module.parameters(), *pytree.tree_leaves(
                    (args, kwargs))) if isinstance(t, torch.Tensor))):
            saved_tensors.__enter__()
            dropout.__enter__()
            gradients.watch_arguments(module.forward, args, kwargs)
        items.__enter__()
        shapes.__enter__()
        data.__enter__()
        met.__enter__()
        positions.__enter__()
        masked.__enter__()
        regions.__enter__()

    def leave(module: Any, inputs: Any, output: Any) -> None:
        regions.__exit__(None, None, None)
        masked.__exit__(None, None, None)
        positions.__exit__(None, None, None)
        met.__exit__(None, None, None)
        data.__exit__(None, None, None)
        shapes.__exit__(None, None, None)
        items.__exit__(None, None, None)
        dropout.exit()
        saved_tensors.__exit__(None, None, None)
        entered = handled.pop() if handled else None
        if sys.exc_info()[1] is entered:  # not on the way out of a forward that raised
            masked.refuse_escaping(output)
            steps.leave()
            data.name_unversioned(module)

    hooks = [module.register_forward_pre_hook(enter, with_kwargs=True),
             module.register_forward_hook(leave, always_call=True)]
    modes = torch._C._len_torch_function_stack()
    args, kwargs = _distinct_tensors((tuple(args), kwargs or {}))
    try:
        # Graph modules that write their Python code when it is first run or read:
        # torch.export inlines each `no_grad` region of the trace back into the graph
        # (its set_grad pass), recompiling the whole graph module each time, so a
        # training step's optimizer regions cost it a recompile per region (the 12.7M
        # Llama's AdamW step: 6,170 recompiles, a 13 s trace; lazy, 4.9 s).
        with steps, cumulative_batch_norm.traced(module), meta_state.traced_as_cpu(), \
                control_flow.traced(module), activation_checkpoints.traced(), \
                decompositions.eager_autograd_kernels(), _use_lazy_graph_module(True):
            ep = torch.export.export(module, args, kwargs, strict=False,
                                     dynamic_shapes=dynamic_shapes)
        gradients.refuse()
        return ep
    except _DATA_DEPENDENT as error:
        _refuse_data_dependent(error, type(error).__name__)
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
        frames = traceback.extract_tb(error.__traceback__)
        if _TRACED_CONSTANT in str(error) and saved_tensors.drawn is not None:
            raise UnsupportedMutationError(
                saved_tensors.drawn.op, "it draws random numbers inside a composite op "
                "whose result autograd saves for the backward, which would draw them "
                "again (dropout and rrelu are traced as eager computes them: "
                "docs/training.md)", location=saved_tensors.drawn.line) from error
        if _TRACED_CONSTANT in str(error):
            raise UnsupportedMutationError(
                "torch.export", "torch.export cannot trace this program: a tensor made "
                "while tracing it stays in it as a constant (torch.export alone fails "
                "alike; with autograd.grad through a batch norm without affine "
                "parameters, for one)", location=_forward_line(module, frames)) from error
        if _ITEM_IN_TRACE in str(error):  # (torch.export's tracer reading a value)
            _refuse_data_dependent(error, "a value read with .item() while tracing")
        if _INTERNAL_OVERLAP not in str(error):
            raise
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
        gradients.release()
        for hook in hooks:
            hook.remove()
        saved.restore()
