"""`torch.compile(model, backend="outofplace")`.

Registered through the `torch_dynamo_backends` entry point, so it is available after
`pip install outofplace`. Dynamo hands over each captured FX graph (with
`operator.setitem`, `call_method add_`, ...) and its example inputs; the graph is compiled
like any module and runs on XLA:CPU when jax is installed, else on the interpreter,
writing mutated inputs back into the caller's tensors.

torch.compile's defaults make a dimension dynamic once it has changed: the graph then
takes symbolic sizes (`SymInt` placeholders, tensors of symbolic shape). StableHLO for
XLA needs static shapes, so such a graph is compiled once per concrete shape seen at call
time, keyed by the tensors' shapes and dtypes and the sizes' values, as torch-xla's dynamo
bridge does; the programs are kept in a bounded cache.
"""

from __future__ import annotations

import collections
import contextlib
import re
import warnings
import weakref
from typing import Any, Callable

import torch

from .compiled import Compiled
from .compiled import compile as compile_program
from .errors import UnsupportedMutationError
from .frontend import decompositions
from .frontend.input_views import take_view
from .memory import end_of, shared_memory, span_tensor

# Programs kept per graph with symbolic sizes; past this the least recently used goes.
SHAPE_CACHE_SIZE = 16
# A graph compiled for this many shapes gets a warning (once): padding inputs to a few
# sizes, or `dynamic=False`, would compile less.
RECOMPILE_WARNING = 8


def _concrete(example: Any) -> Any:
    """A meta tensor in place of a fake one, with its layout (the program is compiled for
    the layout it is traced with): the graph is traced again from it, as the CPU tensor
    it stands for (frontend/meta_state.py), without memory for the values (the graph's
    inputs are the model's weights too)."""
    if isinstance(example, torch.Tensor) and \
            isinstance(example, torch._subclasses.fake_tensor.FakeTensor):
        elements = example.untyped_storage().nbytes() // example.itemsize
        if isinstance(elements, torch.SymInt):  # (dynamo's recompile after another
            elements = end_of(example)           # layout): the elements the view reaches
        storage = torch.empty(elements, dtype=example.dtype, device="meta")
        return storage.as_strided(example.shape, example.stride(), example.storage_offset())
    return example


def _is_symbolic(example: Any) -> bool:
    return isinstance(example, torch.SymInt) or (
        isinstance(example, torch.Tensor) and
        any(isinstance(d, torch.SymInt) for d in example.shape))


def _shape_key(args: tuple) -> tuple:
    """What a program compiled for static shapes depends on: each tensor's shape and dtype,
    each other argument's value (the sizes dynamo passes as ints)."""
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a
                 for a in args)


class ShapeSpecializing:
    """Runs a graph with symbolic sizes: one static program per concrete shape."""

    def __init__(self, gm: torch.fx.GraphModule, options: dict[str, Any]) -> None:
        self.gm, self.options = gm, options
        self.programs: collections.OrderedDict[tuple, Compiled] = collections.OrderedDict()
        self.compilations = 0

    def program(self, args: tuple) -> Compiled:
        key = _shape_key(args)
        compiled = self.programs.get(key)
        if compiled is not None:
            self.programs.move_to_end(key)
            return compiled
        with _item_values():
            compiled = compile_program(self.gm, args, **self.options)
        _refuse_written_overlapping(compiled, args)
        self.compilations += 1
        if self.compilations == RECOMPILE_WARNING:
            warnings.warn(
                f"outofplace compiled one torch.compile graph for {self.compilations} "
                "shapes; pad inputs to a few sizes or pass dynamic=False to compile less",
                stacklevel=3)
        self.programs[key] = compiled
        if len(self.programs) > SHAPE_CACHE_SIZE:
            self.programs.popitem(last=False)
        return compiled

    def __call__(self, *args: Any) -> Any:
        return self.program(args)(*args)


# A dynamo source's steps that name nothing the user wrote: `L['self']`,
# `._modules['layers']`, `._parameters['weight']`, `L['kwargs']['input_ids']`,
# `L['args'][0]` (the module a bound `forward` was called on).
_SOURCE_NOISE = re.compile(r"^L\['(?:self|kwargs)'\]|^L\['args'\]\[0\]|\._(?:modules|parameters|"
                           r"buffers)(?=\[)")


def _user_name(node: torch.fx.Node) -> str | None:
    """The name of the user's tensor a dynamo placeholder stands for, as an identifier:
    `model_layers_0_self_attn_q_proj_weight` for
    `L['self']._modules['model']...._parameters['weight']`,
    `past_key_values_layers_3_keys` for a StaticCache's layer; None when dynamo gave no
    source."""
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        return None
    name = _SOURCE_NOISE.sub("", source.name)
    name = re.sub(r"\W+", "_", name.replace("L['", "")).strip("_")
    return name if name.isidentifier() else None


def _name_placeholders(gm: torch.fx.GraphModule, names: list[str | None] | None) -> None:
    """The graph's inputs take the names of the user's tensors they stand for (dynamo's
    sources, or `names` by position when given and as many as the inputs), so that
    messages and reports name those (`past_key_values_layers_3_keys`), not the graph's
    positions (`args_10`, `primals_3`)."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    if names is None or len(names) != len(placeholders):
        names = [_user_name(node) for node in placeholders]
    for node, name in zip(placeholders, names):
        if name is not None:
            node._rename(name)  # through the graph's namespace: a name taken gets a suffix
            node.target = node.name
    # dynamo's graphs are lazy: their forward takes `*args` (which torch.export would
    # name args_0, args_1, ...) until compiled for real
    getattr(gm, "real_recompile", gm.recompile)()


@contextlib.contextmanager
def _item_values() -> Any:
    """While compiling a graph: `.item()` of a tensor traced in dynamo's fake mode (the
    tracing context's, which torch.export traces the graph in) makes a symbolic number,
    as it does in torch.export's own mode, where dynamo's (`capture_scalar_outputs` off)
    raised DataDependentOutputException. Dynamo passes a Python float that changed
    between calls (a learning rate, a weight decay) as a 0-d tensor and reads it with
    `.item()` in the graph; outofplace reads it as that 0-d tensor at every call
    (scalar_tensors.ItemAsTensor, optimizer_ops), as it does in `outofplace.compile`."""
    mode = torch._guards.detect_fake_mode()
    if mode is None or mode.allow_scalar_outputs:
        yield
        return
    mode.allow_scalar_outputs = True
    try:
        yield
    finally:
        mode.allow_scalar_outputs = False


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any],
                   names: list[str | None] | None = None,
                   options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """Compiles one graph once (per shape, when sizes are symbolic); the callable runs it.
    `names`: the user's names of its inputs, when dynamo's sources are not on them;
    `options`: `outofplace.compile`'s keyword arguments (`BACKEND_OPTIONS`)."""
    options = options or {}
    _name_placeholders(gm, names)
    if any(_is_symbolic(example) for example in example_inputs):
        return ShapeSpecializing(gm, options)
    key = _graph_key(gm, example_inputs)
    key = None if key is None else (key, tuple(sorted(options.items())))
    compiled = _PROGRAMS.get(key) if key is not None else None
    if compiled is None:
        examples = tuple(_concrete(e) for e in example_inputs)
        with _item_values():
            compiled = compile_program(gm, examples, **options)
        _refuse_written_overlapping(compiled, examples)
        if key is not None:
            _PROGRAMS[key] = compiled
    return compiled


def _refuse_written_overlapping(compiled: Compiled, example_inputs: tuple) -> None:
    """A graph writing an input whose elements overlap (an expanded tensor a graph break
    passes without the tensor it expands, `v = x.expand(2, -1)` then `v[1, 2:] = 0`) is
    refused at the write: eager writes the memory the elements share, a compiled program
    takes the input as a value of its own elements and could not write it back (the
    call would raise)."""
    signature = compiled.signature
    users = signature.user_input_leaves
    first = len(signature.input_names) - len(users)  # main's first user argument
    for k, leaf in enumerate(users):
        example, name = example_inputs[leaf], signature.input_names[first + k]
        if first + k in compiled.io_map and isinstance(example, torch.Tensor) and \
                torch._debug_has_internal_overlap(example) == 1:
            op, location = signature.first_writes.get(name, ("an in-place op", ""))
            raise UnsupportedMutationError(
                op, f"it writes `{name}`, whose elements share memory (an expanded tensor "
                "a graph break passes without the tensor it expands): eager writes the "
                "memory they share, the compiled graph takes its elements as values of "
                "their own; compute the expansion and the write in one graph, or write a "
                "clone", location=location)


# The programs compiled in this process, by graph (`_graph_key`), while dynamo holds them.
# Dynamo traces a frame again when a guard fails, often into the same graph: a write at a
# 0-d int64 tensor position (`cache[:, pos] = k`) guards on the position's value (for
# every backend), so each new position re-traces the frame; the graph, and so its
# program, are the same.
_PROGRAMS: weakref.WeakValueDictionary[tuple, Compiled] = weakref.WeakValueDictionary()


def _graph_key(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> tuple | None:
    """What a graph's program depends on: its code and its inputs' types, layouts and
    sharing of memory (static ints by value). None for a graph holding tensors of its
    own (`get_attr`): their values would be part of the program."""
    if gm.graph.find_nodes(op="get_attr"):
        return None
    storages: dict[int, int] = {}
    inputs = []
    for example in example_inputs:
        if isinstance(example, torch.Tensor):
            storage = storages.setdefault(example.untyped_storage()._cdata, len(storages))
            inputs.append((tuple(example.shape), example.stride(), example.storage_offset(),
                           example.dtype, example.device.type, example.requires_grad,
                           storage))
        elif isinstance(example, (int, float, bool)) or example is None:
            inputs.append((type(example), example))
        else:
            return None
    return gm.code, tuple(inputs)


class ViewsOfInputs:
    """Runs a graph some of whose inputs are views of another input (`views_of_inputs`)
    or overlap another in part (`memory.spans_of_inputs`): each such input is taken again inside the
    graph, as the `as_strided` of its base that it is (for overlapping ones, of a tensor
    of the storage they span, passed as one more input), so that a write through either
    shows through the other as in eager, where separate arguments could not. The views'
    places in their bases are read at each call: one program per layout (a view at a
    runtime position moves with the position), the graph as it came for inputs that are
    no longer views."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list[Any],
                 options: dict[str, Any]) -> None:
        self.gm, self.options = gm, options
        self.programs: collections.OrderedDict[tuple, Callable[..., Any]] = \
            collections.OrderedDict()
        self.returned_inputs = _returned_inputs(gm)
        layouts, inputs = self._layouts(example_inputs)
        self.programs[layouts] = self._compile(layouts, inputs)

    @staticmethod
    def _layouts(args: Any) -> tuple[tuple, list[Any]]:
        """(each view's (index, its base's, layout), the number of spans), and the
        inputs with a tensor of each span after them (memory.shared_memory)."""
        relation, spans = shared_memory(list(args))
        inputs = list(args) + [span_tensor(list(args), span) for span in spans]
        return (tuple((i, base, layout) for i, (base, layout) in relation.items()
                      if layout is not None), len(spans)), inputs

    def _compile(self, layouts: tuple, inputs: Any) -> Callable[..., Any]:
        import copy

        views, spans = layouts
        gm = copy.deepcopy(self.gm)  # dynamo passes the inputs of its own graph's placeholders
        placeholders = gm.graph.find_nodes(op="placeholder")
        for k in range(spans):  # the synthetic bases, after dynamo's inputs
            members = [placeholders[i].name for i, base, _ in views
                       if base == len(placeholders)]
            with gm.graph.inserting_after(placeholders[-1]):
                placeholders.append(gm.graph.placeholder(
                    "memory_of_" + "_".join(members)))
        body = next(n for n in gm.graph.nodes if n.op != "placeholder")
        with gm.graph.inserting_before(body):  # in order, after every placeholder
            for i, base, layout in views:
                before = set(gm.graph.nodes)
                view = take_view(gm.graph, placeholders[base], layout)
                # eager took the view before the graph: a refusal of it names the line of
                # its first use
                trace = next((user.meta["stack_trace"] for user in gm.graph.nodes
                              if user in placeholders[i].users and
                              user.meta.get("stack_trace")), None)
                for node in gm.graph.nodes:
                    if node not in before and trace:
                        node.meta["stack_trace"] = trace
                placeholders[i].replace_all_uses_with(view)
                gm.graph.erase_node(placeholders[i])
        gm.recompile()
        dropped = [i for i, _, _ in views]
        kept = [i for i in range(len(inputs)) if i not in dropped]
        program = _compile_graph(gm, [inputs[i] for i in kept], options=self.options)

        returned = self.returned_inputs

        def run(*args: Any) -> Any:
            out = program(*[args[i] for i in kept])
            if not returned:
                return out
            leaves = list(out)
            for position, i in returned:
                leaves[position] = args[i]
            return type(out)(leaves)
        return run

    def __call__(self, *args: Any) -> Any:
        layouts, inputs = self._layouts(args)
        program = self.programs.get(layouts)
        if program is None:
            program = self.programs[layouts] = self._compile(layouts, inputs)
            if len(self.programs) == RECOMPILE_WARNING:
                warnings.warn(
                    f"outofplace compiled one torch.compile graph for {len(self.programs)} "
                    "places of an input that views another (a graph break at a runtime "
                    "position passes the view): keep the indexing inside the graph (an "
                    "int64 position) to compile once", stacklevel=2)
            if len(self.programs) > SHAPE_CACHE_SIZE:
                self.programs.popitem(last=False)
        else:
            self.programs.move_to_end(layouts)
        return program(*inputs)


def _returned_inputs(gm: torch.fx.GraphModule) -> list[tuple[int, int]]:
    """(output position, input index) of each of a dynamo graph's outputs that is one of
    its inputs itself (the graph's in-place op returned it: `self.b3 += ...`, `v &= y`),
    as dynamo's fake tensors say. Such an output is the caller's input object, as eager
    returns it, though the program took the input as a view of another (made again from
    its base, the strides of its unit dimensions its own, where PyTorch's checks of a
    write read them) or took another as a view of it (`register_buffer("v", b.view(-1))`:
    dynamo sets `self.b` to the output)."""
    inputs = {id(node.meta["example_value"]): k
              for k, node in enumerate(gm.graph.find_nodes(op="placeholder"))
              if isinstance(node.meta.get("example_value"), torch.Tensor)}
    outputs = gm.graph.output_node().args[0]
    if not isinstance(outputs, (tuple, list)):
        return []
    return [(position, inputs[id(node.meta.get("example_value"))])
            for position, node in enumerate(outputs)
            if isinstance(node, torch.fx.Node) and
            id(node.meta.get("example_value")) in inputs]


def _needs_gradients(example_inputs: list[Any]) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(e, torch.Tensor) and e.requires_grad for e in example_inputs)


def _training_backend(names: list[str | None], options: dict[str, Any]
                      ) -> Callable[..., Any]:
    """AOTAutograd splitting a graph that needs gradients into a forward and a backward
    graph, each compiled by outofplace, as torch's own backends do. Writes to inputs
    that need no gradient (a KV cache, BatchNorm's running statistics) stay in the
    forward graph (`keep_inference_input_mutations`, which inductor sets too), so
    outofplace updates them in place; without it AOTAutograd's wrapper would copy each
    written buffer back after every call. The forward graph's inputs (`primals_1`, ...)
    are dynamo's, in order: they take `names`, the user's tensors' names."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def boxed(gm: torch.fx.GraphModule, example_inputs: list[Any],
              names: list[str | None] | None = None) -> Callable[..., Any]:
        # AOTAutograd calls its compilers inside its fake mode: compiling (tracing
        # again from real tensors, checking arguments) needs real ones.
        with unset_fake_temporarily():
            return make_boxed_func(_compile_graph(gm, example_inputs, names, options))

    return aot_autograd(fw_compiler=lambda gm, inputs: boxed(gm, inputs, names),
                        bw_compiler=boxed, keep_inference_input_mutations=True)


def _data_as_detach(gm: torch.fx.GraphModule) -> None:
    """`x.data` reaches the backend as `torch._C._autograd._get_data_attr(x)`, which
    torch.export cannot trace (it lifts the result as a fake constant): it becomes
    `x.detach()`, the same memory, as frontend/tensor_data.py makes `.data` of a traced
    program."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch._C._autograd._get_data_attr:
            node.op, node.target = "call_method", "detach"
            changed = True
    if changed:
        gm.recompile()


# `torch.compile(..., backend="outofplace", options={...})`: these keyword arguments of
# `outofplace.compile`, passed to it for every graph.
BACKEND_OPTIONS = ("check_bounds", "engine", "cache")


def backend(gm: torch.fx.GraphModule, example_inputs: list[Any],
            options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The dynamo backend: compile the graph once (per shape, when sizes are symbolic),
    then run it on every call. A graph whose inputs require gradients (a model being
    trained) is compiled as the forward and backward graphs AOTAutograd makes, so
    `loss.backward()` runs compiled code too. `options` (torch.compile's) are
    `outofplace.compile`'s keyword arguments named in `BACKEND_OPTIONS`."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(BACKEND_OPTIONS))
    if unknown:
        raise ValueError(f"torch.compile(backend='outofplace') takes the options "
                         f"{', '.join(BACKEND_OPTIONS)}, not {', '.join(unknown)}")
    if _needs_gradients(example_inputs):  # (AOTAutograd traces `.data` itself)
        names = [_user_name(n) for n in gm.graph.find_nodes(op="placeholder")]
        with decompositions.eager_autograd_kernels():
            return _training_backend(names, options)(gm, example_inputs)
    _data_as_detach(gm)
    if shared_memory(list(example_inputs))[0]:
        return ViewsOfInputs(gm, example_inputs, options)
    return _compile_graph(gm, example_inputs, options=options)
