"""The runtime contract between the stages: how `main`'s arguments and results relate
to the Python program, and the checks a call makes against it.

The frontend fills a `ProgramSignature` when it traces and imports the program
(frontend/importer.py); `Compiled` (program.py) reads it at every call: to gather main's
arguments from the call's (state first, then the user's tensors), to refuse a call the
program was not compiled for (call_checks.py), and to build the output from main's
results (call_outputs.py). Nothing here
traces or compiles.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from .errors import UnsupportedMutationError
from .memory import overlaps, shared_memory, span_tensor
from .symbolic_sizes import SymbolicSizes

# On an argument of main: the index of the result holding its new value (the written
# arguments' io_map, set by inplace-to-outofplace); what XLA reads as input/output aliases.
ALIASING_OUTPUT = "tf.aliasing_output"
# In a lowered module with check_bounds: the function computing the flags
# (outofplace-split-bounds-check), and on it the positions among main's arguments of the
# arguments it takes; bounds.py takes it out as a program of its own.
BOUNDS_CHECK_FUNCTION = "bounds_check"
BOUNDS_CHECK_ARGUMENTS = "outofplace.arguments"
# On an imported module with check_bounds: the index of main's result holding the flags
# (frontend/bounds_checks.py), which outofplace-split-bounds-check splits off.
FLAGS_RESULT = "outofplace.bounds_flags"


def io_map_of(func: func_d.FuncOp) -> dict[int, int]:
    """Written argument -> the result holding its new value: the function's
    `tf.aliasing_output` argument attributes, read back."""
    if "arg_attrs" not in func.attributes:
        return {}
    io_map = {}
    for position, attrs in enumerate(func.arg_attrs):
        attrs = ir.DictAttr(attrs)
        if ALIASING_OUTPUT in attrs:
            io_map[position] = ir.IntegerAttr(attrs[ALIASING_OUTPUT]).value
    return io_map


def returned_state(main: Any, io_map: dict[int, int]) -> dict[int, int]:
    """Result index -> the argument whose new value it is: the aliased results, and any
    other result returning the same value (`return cache` after `cache[...] = k`)."""
    block = main.regions[0].blocks[0]
    values = list(block.operations[len(block.operations) - 1].operands)
    state = {}
    for arg, result in io_map.items():
        for index, value in enumerate(values):
            if value == values[result]:
                state[index] = arg
    return state


class Guard(Protocol):
    """A constant of the trace the caller may change (frontend/training.py's
    OptimizerSettings and HeldConstant): `check()` raises ValueError when it did."""

    def check(self) -> None: ...


@dataclass
class ProgramSignature:
    """How the arguments and results of `main` relate to the Python program."""

    # length = # arguments of main. The name of each, in main's order: parameters and
    # buffers by their state-dict name, then the state held through Python objects, then
    # the user's tensor arguments by their parameter names. Main's arguments carry them
    # as NameLocs, and every error about a call names an argument by it.
    input_names: list[str]
    # length = # state arguments, the first arguments of main. The state-dict name (or
    # the name in `held`) of each parameter and buffer; read afresh at each call, so an
    # optimizer step or `load_state_dict` between calls is seen.
    state_targets: list[str]
    # The pytree of the user's (args, kwargs) at trace time; None for a torch.compile
    # graph, whose arguments are flat. A call with another structure is refused.
    in_spec: pytree.TreeSpec | None
    # length = # user tensor arguments. The position of each among the leaves of
    # (args, kwargs): the rest of the leaves are `constant_inputs`.
    user_input_leaves: list[int]
    # The pytree of the program's output; None when it is the flat list of leaves.
    out_spec: pytree.TreeSpec | None
    # length = # leaves of the output. Each leaf is one of:
    #   ("result", i, layout): main's result i (the caller's own tensor where i is the
    #     new value of a written argument), laid out as eager lays it out when `layout`
    #     is not None: (strides, storage offset, storage size in elements);
    #   ("constant", value): a Python value the trace returned as is;
    #   ("argument", i, views): main's argument i itself, or the view of it that `views`
    #     take (tuples (view op, its other arguments, kwargs), innermost first); an
    #     operand of a view may be `Input` or `Result`: a position read at the call;
    #   ("output", j, views): the view of the output's leaf j that `views` take (an
    #     output the program makes viewing another it makes, as eager returns it);
    #   ("view", i, layout, views): the view of main's result i, laid out as `layout`
    #     says, that `views` take: outputs viewing one tensor the program made and does
    #     not return, which no leaf is.
    output_leaves: list[tuple[str, Any]] = field(default_factory=list)
    # Argument name -> (the first op writing it, that op's source line), for each
    # argument the program writes in place (through any view): what a refusal at a call
    # (two written arguments sharing memory) names.
    first_writes: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Position among the leaves of (args, kwargs) -> (name, value): the non-tensor leaves
    # the trace specialized on. A call giving another value is refused.
    constant_inputs: dict[int, tuple[str, Any]] = field(default_factory=dict)
    # Name in state_targets -> the tensor, found at each call: state the caller holds
    # through Python objects (optimizer state, `.grad`, the parameters of the modules a
    # plain function names), not through the compiled module's state dict.
    held: dict[str, Callable[[], torch.Tensor]] = field(default_factory=dict)
    # Parameters whose `.grad` the program clears (`opt.zero_grad()`): set to None after
    # each call, as eager leaves them.
    cleared_grads: list[torch.Tensor] = field(default_factory=list)
    # The parameters and buffers (by name) the program writes only through `.data`: their
    # version stays as it was at a call, as eager's (frontend/tensor_data.py).
    unversioned: set[str] = field(default_factory=set)
    # What the trace made constants of the program that the caller may change (the
    # values of optimizers' param groups, tensors it holds that the program only reads):
    # each `check()` raises ValueError at a call when it changed since.
    guards: list[Guard] = field(default_factory=list)
    # length of .sizes = # arguments of main. Per argument its sizes, symbolic where
    # dynamic (dynamic_shapes), and the symbols' ranges: checked at each call.
    symbolic_sizes: SymbolicSizes = field(default_factory=SymbolicSizes)
    # With check_bounds: what each flag of the bounds-check result checks
    # (frontend/bounds_checks.Check: its `message()`), in the flags' order...
    bounds_checks: list[Any] = field(default_factory=list)
    # ...and main's result holding the flags (the last before the written arguments'),
    # as traced: the pipeline's `outofplace-split-bounds-check` takes it off main.
    bounds_result: int | None = None
    # Complex tensors are computed as real pairs [..., 2] (frontend/complex_pairs.py):
    # main's arguments that take `view_as_real` of the caller's complex tensor (index ->
    # its complex dtype)...
    complex_arguments: dict[int, torch.dtype] = field(default_factory=dict)
    # ...and main's results that are `view_as_real` of a complex output.
    complex_results: frozenset[int] = frozenset()
    # Target -> (its base's target, the view's layout): the parameters and buffers that
    # view another's elements (frontend/input_views.py), no arguments of main but taken
    # inside it from their base; a `StateView` guard checks each still views it there.
    state_views: dict[str, tuple[str, tuple]] = field(default_factory=dict)
    # Argument index -> (its base's index, the view's layout): the user's tensors that
    # viewed another argument's elements when traced (`f(x, x[0])`), taken inside main
    # from that one (their own argument unread). A call whose arguments view each other
    # otherwise (`shared_views`) is compiled again for them.
    input_views: dict[int, tuple[int, tuple]] = field(default_factory=dict)
    # The members of each span (memory.spans_of_inputs): user tensors overlapping in
    # part, taken from a tensor of the storage they span, the k-th of which is main's
    # argument len(input_names) - len(input_spans) + k, made at each call (`with_spans`).
    input_spans: list[tuple[int, ...]] = field(default_factory=list)

    @functools.cached_property
    def state_reader(self) -> StateReader:
        """What reads `state_targets` from the compiled module (or ExportedProgram) at a
        call (made at the first: the targets are fixed once imported)."""
        return StateReader(self.state_targets, self.held)

    @functools.cached_property
    def flat_tensors(self) -> tuple[int, tuple[str, ...]] | None:
        """(n, keys) when the user's arguments are n positional tensors and keyword tensors
        named `keys` (in main's order) and nothing else: their leaves are the arguments
        themselves, a call needs no flattening. Else None."""
        spec = self.in_spec
        if spec is None or spec.num_children != 2 or self.constant_inputs:
            return None
        positional, keyword = spec.child(0), spec.child(1)
        n, keys = positional.num_children, tuple(keyword.context or ())
        if not all(child.is_leaf() for child in (*positional.children(),
                                                  *keyword.children())) or \
                self.user_input_leaves != list(range(n + len(keys))):
            return None
        return n, keys

    @functools.cached_property
    def positional_tensors(self) -> int | None:
        """n when the user's arguments are n positional tensors and nothing else, else
        None."""
        flat = self.flat_tensors
        return flat[0] if flat is not None and not flat[1] else None

    def user_inputs(self, args: tuple, kwargs: dict) -> list[Any]:
        """The user's tensor arguments among `args` and `kwargs`, in main's order."""
        if not kwargs and len(args) == self.positional_tensors:
            return list(args)
        spec = self.in_spec
        if spec is not None and spec.num_children == 2 and kwargs:
            kwargs = {k: kwargs[k] for k in spec.child(1).context}
        leaves = pytree.tree_leaves((tuple(args), kwargs))
        for position, (name, traced) in self.constant_inputs.items():
            given = leaves[position] if position < len(leaves) else None
            if type(given) is not type(traced) or given != traced:
                raise ValueError(
                    f"argument '{name}' was compiled as the constant {traced!r} and is "
                    f"{given!r} now: the program is specialized on non-tensor arguments; "
                    "compile again for this value, or pass it as a tensor to vary it")
        return [leaves[i] for i in self.user_input_leaves]

    def real_views(self, inputs: list[Any]) -> list[Any]:
        """main's arguments for the caller's tensors (one per argument of main): each
        complex one viewed as real pairs (`torch.view_as_real`, no copy), so the program
        writes the caller's memory."""
        if not self.complex_arguments:
            return inputs
        inputs = list(inputs)
        for i, dtype in self.complex_arguments.items():
            value = inputs[i]
            if not isinstance(value, torch.Tensor) or value.dtype != dtype:
                got = f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else \
                    type(value).__name__
                raise ValueError(f"argument '{self.input_names[i]}' was compiled for a "
                                 f"{dtype} tensor, got {got}")
            if value.is_conj() or value.is_neg():
                raise ValueError(f"argument '{self.input_names[i]}' is a lazily conjugated "
                                 "or negated view: pass x.resolve_conj().resolve_neg()")
            inputs[i] = torch.view_as_real(value)
        return inputs

    @functools.cached_property
    def _written_arguments(self) -> list[int]:
        return [i for i, name in enumerate(self.input_names) if name in self.first_writes]

    def shared_views(self, inputs: list[torch.Tensor]
                     ) -> tuple[dict[int, tuple[int, tuple]], list[tuple]]:
        """For main's arguments of a call (the spans' tensors, if there, not read), the
        user's tensors among them that view another's elements or overlap one in part,
        as `input_views` records them (memory.shared_memory), and the spans."""
        inputs = inputs[:len(self.input_names) - len(self.input_spans)]
        storages = [value.untyped_storage()._cdata for value in inputs]
        if len(set(storages)) == len(storages) and not any(  # nothing shares memory
                torch._debug_has_internal_overlap(value) == 1 for value in inputs):
            return {}, []  # (the usual call)
        return shared_memory(inputs, first=len(self.state_targets))

    def with_spans(self, given: list[Any]) -> list[Any]:
        """The state and user tensors of a call, with the tensor of each span after them
        when they share memory as traced (else as given: the call is traced again)."""
        if not self.input_spans:
            return given
        relation, spans = self.shared_views(given)
        if relation != self.input_views:
            return given
        return [*given, *(span_tensor(given, span) for span in spans)]

    def refuse_written_inputs_sharing_memory(self, inputs: list[torch.Tensor]) -> None:
        """Refuses arguments (one per argument of main) of which one is written in place
        and shares memory with another that is no view main takes of it (`input_views`):
        eager's write shows through the other, which the compiled program, taking them as
        separate values, cannot do."""
        written = self._written_arguments
        if not written:
            return
        # Run at every call: one storage lookup per argument, not one per pair.
        storages = [value.untyped_storage().data_ptr() for value in inputs]
        for i in written:
            name = self.input_names[i]
            for j, storage in enumerate(storages):
                if storage == storages[i] and j != i and j not in self.input_views and \
                        overlaps(inputs[i], inputs[j]):
                    op, location = self.first_writes[name]
                    raise UnsupportedMutationError(
                        op, f"it writes argument `{name}`, which shares memory with "
                        f"argument `{self.input_names[j]}`: eager's write shows through "
                        f"`{self.input_names[j]}`, separate arguments of the compiled "
                        "program cannot; pass tensors that do not share memory (a clone)",
                        location=location)


@dataclass(frozen=True)
class Input:
    """In an output's view operands: the call's argument `index` of main (a position)."""

    index: int


@dataclass(frozen=True)
class Result:
    """In an output's view operands: main's result `index`, a position the program
    computed (`ptr % T`) or an argument it writes, as it was when the view was read."""

    index: int


class StateReader:
    """A program's state as the caller holds it now, in `state_targets`' order: a held
    tensor through its own path (`held`), a parameter or buffer through the owner's
    modules, each module on the way to several of them read once (a tree of the dotted
    names: the 12.7M Llama's decode read its 77 one name at a time in 0.24 ms of its
    3.8 ms token)."""

    def __init__(self, targets: list[str], held: dict[str, Callable[[], torch.Tensor]]
                 ) -> None:
        self._count = len(targets)
        self._held = [(i, held[t]) for i, t in enumerate(targets) if t in held]
        self._named = [(i, t) for i, t in enumerate(targets) if t not in held]
        tree: dict = {}  # name -> [the target's index or None, the names under it]
        for i, target in self._named:
            *parents, last = target.split(".")
            node = tree
            for part in parents:
                node = node.setdefault(part, [None, {}])[1]
            node.setdefault(last, [None, {}])[0] = i

        def frozen(node: dict) -> tuple:
            return tuple((name, index, frozen(under)) for name, (index, under) in node.items())

        self._tree = frozen(tree)

    def __call__(self, owner: Any) -> list[torch.Tensor]:
        found: list = [None] * self._count
        for i, read in self._held:
            found[i] = read()
        if isinstance(owner, ExportedProgram):
            for i, target in self._named:
                found[i] = state_tensor(owner, target)
        elif self._tree:
            _read_tree(owner, self._tree, found)
        return found


def _read_tree(value: Any, tree: tuple, found: list) -> None:
    """Each name of `tree` read off `value` (`attribute_of`), into `found` at its
    target's index, and the names under it off what it read."""
    for name, index, under in tree:
        item = attribute_of(value, name)
        if index is not None:
            found[index] = item
        if under:
            _read_tree(item, under, found)


def state_tensor(owner: Any, target: str) -> torch.Tensor:
    """A parameter or buffer of the compiled program as the caller holds it now, by its
    state-dict name: `owner` is the nn.Module or ExportedProgram compiled."""
    if isinstance(owner, ExportedProgram):
        if target in owner.state_dict:
            return owner.state_dict[target]
        return owner.constants[target]
    value = owner
    for part in target.split("."):
        value = attribute_of(value, part)
    return value


def attribute_of(value: Any, name: str) -> Any:
    """`getattr(value, name)`; a module's own parameter, buffer or submodule read from its
    table, where `getattr` first fails the usual lookup, then runs nn.Module's
    `__getattr__` (a decoder's call finds its 77-173 state tensors through about six
    attributes each: 0.4 ms of the 12.7M Llama's 4 ms token, 0.9 of the 148M's)."""
    if isinstance(value, torch.nn.Module):
        for table in (value._parameters, value._buffers, value._modules):
            if name in table:
                return table[name]
    return getattr(value, name)
