"""The one predicate deciding whether a call of a compiled program is refused.

`arguments` gathers main's arguments for a call (the state as the caller holds it now,
then the user's tensors) and refuses, before anything runs, a call the program was not
compiled for: another number or structure of arguments, a non-tensor, another shape,
dtype or device, a written argument the call cannot write as eager would (requiring grad,
overlapping elements, an inference tensor), written arguments sharing memory, a constant
of the trace the caller changed since (`signature.guards`). `relayout` then says whether
the arguments' layouts are the traced ones (or refuses another layout for a program that
cannot be traced again).

The planned calls (backends/planned_call.cpp, sharded_call.cpp and their Python twins)
refuse nothing: `planned` gives them the layouts of a call `arguments` accepted and the
written arguments whose grad they re-check, they take only calls laid out exactly so,
and hand any other back (None) to `Compiled.run`, which asks `arguments`. So a bad call
raises the same error whichever way it came (test_in_place_calls.py and test_sharding.py
make every bad call through both).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .signature import ProgramSignature


def fits(shape: torch.Size, compiled: tuple[int, ...]) -> bool:
    """A tensor's shape is one the program takes: -1 (a dynamic dimension) takes any size."""
    return len(shape) == len(compiled) and all(n in (size, -1)
                                               for size, n in zip(shape, compiled))


def layout(tensor: torch.Tensor) -> tuple:
    """What a traced program may depend on beyond shape and dtype (a `reshape` that
    views or copies, an `as_strided`): the strides of dimensions longer than 1, and the
    storage offset."""
    if tensor.numel() == 0:
        return ()
    return (tuple(st for size, st in zip(tensor.shape, tensor.stride()) if size > 1),
            tensor.storage_offset())


def _describe_layout(layout: tuple) -> str:
    if not layout:
        return "empty"
    return f"strides {list(layout[0])} (dimensions longer than 1) at storage offset {layout[1]}"


def state_tensors(signature: ProgramSignature, owner: Any) -> list[torch.Tensor]:
    """The program's parameters and buffers, and the state it reaches through Python
    objects (optimizer state, `.grad`), as they are now."""
    return signature.state_reader(owner)


def arguments(signature: ProgramSignature, source: Any, io_map: dict[int, int],
              input_types: list[tuple[tuple[int, ...], torch.dtype]], args: tuple,
              kwargs: dict) -> list[torch.Tensor]:
    """The arguments of main for a call, checked against what was compiled before
    anything runs: a wrong count, type, shape, dtype, device, a written leaf that
    requires grad or a constant of the trace the caller changed since
    (`signature.guards`) raises TypeError or ValueError naming the argument; written
    arguments sharing memory raise UnsupportedMutationError."""
    names = signature.input_names
    if kwargs or len(args) != signature.positional_tensors:
        check_count(signature, args, kwargs)
    for guard in signature.guards:
        guard.check()
    state = state_tensors(signature, source) if signature.state_targets else []
    given = signature.with_spans(state + signature.user_inputs(args, kwargs))
    if len(given) != len(names):  # sharing memory otherwise than traced: traced again
        return given  # (relayout)
    inputs = signature.real_views(given)  # complex tensors as their real pairs
    for i, (name, value, (shape, dtype)) in enumerate(zip(names, inputs, input_types)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"argument '{name}' was compiled as a tensor, got "
                            f"{type(value).__name__}")
        if value.dtype != dtype or (value.shape != shape and not fits(value.shape, shape)):
            want, got = (dtype, list(shape)), (value.dtype, list(value.shape))
            if i in signature.complex_arguments:  # shown as the caller's tensors
                complex_dtype = signature.complex_arguments[i]
                want, got = (complex_dtype, want[1][:-1]), (complex_dtype, got[1][:-1])
            raise ValueError(f"argument '{name}' was compiled for a {want[0]} "
                             f"{want[1]} tensor, got {got[0]} {got[1]}")
        if not value.is_cpu:
            raise ValueError(f"argument '{name}' is on {value.device}; outofplace runs "
                             "on CPU tensors" + (": load the weights of a module "
                             "compiled on meta before calling it (docs/models.md)"
                             if value.is_meta else ""))
        if i in io_map:
            check_writable(name, value, given[i], i >= len(state))
    signature.symbolic_sizes.check(names, inputs)
    if signature.shared_views(inputs)[0] == signature.input_views:  # else traced again
        signature.refuse_written_inputs_sharing_memory(inputs)
    return inputs


def check_writable(name: str, value: torch.Tensor, given: torch.Tensor,
                   user_input: bool) -> None:
    """Raises ValueError for a tensor the program writes that a call cannot write as
    eager would: one that requires grad with grad enabled (eager refuses a leaf; for
    another, eager records the write in its autograd history, which a compiled call
    cannot: its gradients would be silently wrong), state whose elements share memory
    (expanded: a user's expanded tensor is taken from the memory it spans, and the
    program traced again for it, memory.spans_of_inputs), an inference tensor outside
    inference mode (eager refuses it)."""
    if user_input and value.requires_grad and torch.is_grad_enabled():
        if given.is_leaf:
            raise ValueError(f"argument '{name}' is a leaf tensor that requires grad, "
                             "and the program writes it in place, which eager refuses: "
                             "call under torch.no_grad() or pass a tensor that does "
                             "not require grad")
        raise ValueError(f"argument '{name}' requires grad and the program writes it "
                         "in place: eager records the write in its autograd history, "
                         "a compiled call cannot (gradients through it would be "
                         "wrong): call under torch.no_grad() or pass a detached tensor")
    if not user_input and torch._debug_has_internal_overlap(value) == 1:  # (2: unknown)
        raise ValueError(f"argument '{name}' has elements that share memory (an "
                         "expanded tensor) and the program writes it, which eager "
                         "refuses for most writes and a call cannot write back: pass "
                         "a tensor whose elements do not overlap (a clone)")
    if value.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(f"argument '{name}' is an inference tensor and the program "
                         "writes it in place, which eager refuses outside inference "
                         "mode: call under torch.inference_mode() or pass a clone")


def check_count(signature: ProgramSignature, args: tuple, kwargs: dict) -> None:
    """Raises TypeError for a call with another number of positional arguments,
    without a keyword argument or with one the program was not compiled with."""
    spec = signature.in_spec
    if spec is not None and spec.num_children == 2:
        expected = spec.child(0).num_children
        missing = [k for k in spec.child(1).context if k not in kwargs]
        unknown = [k for k in kwargs if k not in spec.child(1).context]
        if unknown:  # the traced program ignores them: a default it may not have
            raise TypeError(f"keyword arguments {unknown} were not given when the "
                            "program was compiled, which was traced without them: "
                            "compile with them to pass them")
        if len(args) != expected or missing:
            user_names = signature.input_names[len(signature.state_targets):]
            got = f"{len(args)} positional" + (f", without {missing}" if missing else "")
            raise TypeError(f"the program was compiled for {expected} positional "
                            f"arguments (tensors: {', '.join(user_names)}), got {got}")


def relayout(signature: ProgramSignature, traced: list[tuple], inputs: list[torch.Tensor],
             retraceable: bool) -> tuple | None:
    """None when the arguments (which passed `arguments`) have the traced layouts and
    view each other as traced (`signature.input_views`), else their layouts and views,
    for which the program is traced again (with a warning): eager's `reshape`,
    `contiguous` and `as_strided` may alias for one layout and copy for another, and a
    write through an argument shows through those viewing it, so a program traced for
    one is not run on another. A program that cannot be traced again (an
    ExportedProgram) refuses another layout."""
    names = signature.input_names
    layouts = [layout(t) for t in inputs]
    views = signature.shared_views(inputs)[0]
    if layouts == traced and views == signature.input_views:
        return None
    if len(layouts) == len(traced) and layouts != traced:
        i, name = next((i, n) for i, n in enumerate(names) if layouts[i] != traced[i])
        what = (f"argument '{name}' has {_describe_layout(layouts[i])}; the program was "
                f"traced with {_describe_layout(traced[i])}")
    else:
        def described(views: dict[int, tuple[int, tuple]]) -> str:
            return ", ".join(f"'{names[i]}' a view of '{names[base]}'" if base < len(names)
                             else f"'{names[i]}' overlapping another in part"
                             for i, (base, _) in views.items()) or "no views"
        what = (f"the arguments share memory otherwise than when traced: "
                f"{described(views)} (traced: {described(signature.input_views)})")
    if not retraceable:
        raise ValueError(f"{what}, and an ExportedProgram cannot be traced again: pass "
                         "tensors with the traced layout (for example .contiguous())")
    warnings.warn(f"{what}: compiling it again for this layout", stacklevel=5)
    return tuple(layouts), tuple(views.items())


def planned(state: int, io_map: dict[int, int], inputs: list[torch.Tensor]
            ) -> tuple[list[tuple], list[int]]:
    """What a planned call takes from this predicate, after `arguments` and `relayout`
    accepted `inputs`: (per argument its (dtype, shape, strides, storage offset), the
    written user arguments). A call laid out exactly so passes every check above but
    the ones that hang on the call's moment, which the planned call makes itself and
    hands back to `arguments` when they fail: a written user argument requiring grad
    with grad enabled, a written argument that is an inference tensor outside inference
    mode or shares its memory with another argument (the same strides mean the same
    overlap of elements; guards are checked before the plan by `Compiled.__call__`)."""
    layouts = [(t.dtype, tuple(t.shape), t.stride(), t.storage_offset()) for t in inputs]
    return layouts, [i for i in io_map if i >= state]
