"""`torch.cond` and `while_loop` whose branches or bodies write tensors in place.

torch.export (through dynamo) refuses a region that writes a tensor it closes over or
takes as an operand. While outofplace traces a program, `traced()` catches these calls
before dynamo sees them (`_hop_compile_and_call`, through which `torch.cond` and
`torch._higher_order_ops.while_loop` call their op, and the ops themselves, which a
torch.compile graph calls) and traces each region itself, on the tracer of the program
(`reenter_make_fx`). The tensors a region closes over (recorded as constants holding
the program's fake tensors) become operands; every operand the region writes, through
any view, becomes one more result of the region, its value at the region's end:

    torch.cond(p, t, f, (k,))   with t writing c[0]   ->
        k2, c_new = outofplace.region(id, [p, k, c])    (t and f return c's new value)
        c.copy_(c_new)

so the region is functional, and the write after it an ordinary `copy_` of the root. A
view the region closes over beside its base (`layer = cache[1]`) is taken again inside
from the base's operand, so writes through either reach one value.
The region's graphs are kept in `REGIONS` under `id`; the importer imports each as a
private function (torch IR) that transforms/lower_regions.py lowers and splices in as
`stablehlo.if` / `stablehlo.while`.
"""

from __future__ import annotations

import contextlib
import itertools
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode

from ..errors import UnsupportedMutationError
from .fx_graph import storage_of, view_roots
from .runtime_positions import user_line

_LIBRARY = torch.library.Library("outofplace", "FRAGMENT")
_DEFINED: set[str] = set()


@dataclass
class Region:
    """One traced region: `kind` "cond" (graphs: true, false; operands: pred, then the
    branches' operands) or "while" (graphs: cond, body; operands: the carried values,
    then the rest), or "composite" (graphs: an op's decomposition, composites.py, with
    the op's `name` and the `attributes` its kernel takes). Each graph takes the
    operands after `pred` and returns its outputs, then the new value of each operand
    in `written` (positions among those operands)."""

    kind: str
    graphs: list[torch.fx.GraphModule]
    carried: int  # operands that are outputs too (while: the carried values; cond: 0)
    written: list[int]
    outputs: list[torch.Tensor]  # fake values of the op's results
    location: str
    names: list[str] = field(default_factory=list)  # functions, set by the importer
    name: str = ""  # a composite's op
    attributes: dict[str, Any] = field(default_factory=dict)  # a composite's


REGIONS: dict[int, Region] = {}
_IDS = itertools.count()
# While tracing: the module traced, and its real parameters and buffers by id, name.
_STATE: list[tuple[torch.nn.Module, dict[int, str]]] = []


def region_op() -> Any:
    """`outofplace::region(int region, Tensor[] operands) -> Tensor[]`: a region of
    `REGIONS` as one functional op (a list: a model's loop has more operands than a
    schema may have arguments), defined on first use."""
    if "region" not in _DEFINED:
        _LIBRARY.define("region(int region, Tensor[] operands) -> Tensor[]")

        def fake(region: int, operands: list[torch.Tensor]) -> list[torch.Tensor]:
            return [torch.empty_strided(o.shape, o.stride(), dtype=o.dtype,
                                        device=operands[0].device)
                    for o in REGIONS[region].outputs]

        torch.library.register_fake("outofplace::region", fake, lib=_LIBRARY)
        _DEFINED.add("region")
    return torch.ops.outofplace.region.default


def is_region_op(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and \
        target.namespace == "outofplace" and target.__name__ == "region.default"


def _refuse(what: str, why: str, location: str) -> UnsupportedMutationError:
    return UnsupportedMutationError(what, why, location=location)


def _trace(fn: Callable, inputs: list[torch.Tensor]) -> tuple[torch.fx.GraphModule, Any]:
    """`fn(*inputs)` traced as a graph of the program's tracer, outputs flattened."""
    from torch._higher_order_ops.utils import reenter_make_fx
    from torch.fx.experimental import proxy_tensor

    specs = []

    def flat(*args: Any) -> tuple:
        leaves, spec = pytree.tree_flatten(fn(*args))
        specs.append(spec)
        return tuple(leaves)

    tracer = proxy_tensor._CURRENT_MAKE_FX_TRACER
    make_sub_tracer = tracer._make_sub_tracer

    def sub_tracer(*args: Any, **kwargs: Any) -> Any:
        made = make_sub_tracer(*args, **kwargs)
        made.record_stack_traces = True  # the user's lines, for refusals
        return made

    # (frames of the user's function kept in the stack traces, as a forward's are)
    # (torch's flat_body_fn wraps the user's body_fn: its closure's functions too)
    for anchor in [fn] + [c.cell_contents for c in getattr(fn, "__closure__", None) or ()
                          if callable(getattr(c, "cell_contents", None))]:
        torch.fx.proxy._register_stack_trace_anchor(anchor)
    tracer._make_sub_tracer = sub_tracer
    try:
        gm = reenter_make_fx(flat)(*inputs)
    finally:
        del tracer._make_sub_tracer
    return gm, specs[0]


def _closures(gm: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, torch.Tensor]]:
    """The tensor constants of `gm`: tensors of the program being traced (fake), or
    tensors it holds through plain Python objects (a StaticCache's list of caches),
    which torch.export makes constants of the program and the importer maps back to
    the buffers they are. (A literal of the region stays a literal of the program.)"""
    return [(node, getattr(gm, node.target)) for node in gm.graph.nodes
            if node.op == "get_attr" and
            isinstance(getattr(gm, node.target, None), torch.Tensor)]


def _lift(graphs: list[torch.fx.GraphModule], operands: list[torch.Tensor]
          ) -> list[torch.Tensor]:
    """Each tensor the graphs close over, made a placeholder of every graph (after the
    operands' ones, in one order): the operands of the region beyond `operands`. A
    real tensor that is the traced module's state becomes that state's operand; its
    placeholder keeps the fake value the region's ops saw (its storage theirs)."""
    extra: list[torch.Tensor] = []
    seen: list[torch.Tensor] = []  # per extra: the value the region's ops saw
    for gm in graphs:
        for _, value in _closures(gm):
            outer = _traced_state(value)
            if all(outer is not e for e in (*operands, *extra)):
                extra.append(outer)
                seen.append(value)
    mode = _fake_mode(operands, extra)
    for gm in graphs:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        last = placeholders[-1] if placeholders else None
        added = []
        for i, value in enumerate(seen):
            with gm.graph.inserting_after(last) if last is not None else \
                    gm.graph.inserting_before(next(iter(gm.graph.nodes))):
                last = gm.graph.placeholder(f"closure_{i}")
            last.meta["val"] = value if isinstance(value, torch._subclasses.FakeTensor) \
                else mode.from_tensor(value)
            added.append(last)
        for node, value in _closures(gm):
            outer = _traced_state(value)
            for i, e in enumerate(extra):
                if outer is e:
                    node.replace_all_uses_with(added[i])
            for i, e in enumerate(operands):
                if outer is e:  # (state given as an operand too: that operand)
                    node.replace_all_uses_with(placeholders[i])
            gm.graph.erase_node(node)
            if hasattr(gm, node.target):
                delattr(gm, node.target)
        gm.recompile()
    return _views_taken_inside(graphs, operands, extra)


def _outer_node(value: torch.Tensor) -> torch.fx.Node | None:
    """The node of the program being traced that made `value`, if it has one."""
    from torch.fx.experimental import proxy_tensor

    tracer = proxy_tensor._CURRENT_MAKE_FX_TRACER
    slot = proxy_tensor.get_proxy_slot(value, tracer.fx_tracer, None) \
        if tracer is not None and isinstance(value, torch.Tensor) else None
    return getattr(getattr(slot, "proxy", None), "node", None)


def _view_chain(view: torch.fx.Node, base: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The view ops (constant operands only) taking `base` to `view` in the program's
    graph, outermost first; None when `view` is no such view of `base`."""
    from .fx_graph import op_effects

    chain = []
    node = view
    while node is not base:
        effects = op_effects(node) if isinstance(node, torch.fx.Node) else None
        if effects is None or effects.written or effects.result_views != 0 or any(
                isinstance(a, torch.fx.Node) for a in pytree.tree_leaves(
                    (node.args[1:], node.kwargs))):
            return None
        chain.append(node)
        node = node.args[0]
    return chain[::-1]


def _views_taken_inside(graphs: list[torch.fx.GraphModule], operands: list[torch.Tensor],
                        extra: list[torch.Tensor]) -> list[torch.Tensor]:
    """A tensor closed over that is a view of another operand (`layer = cache[1]`, the
    body reading both): taken again inside each graph from that operand's placeholder,
    so that writes through either reach one operand (the region takes values)."""
    inputs = operands + extra
    keep = list(range(len(inputs)))
    for i in range(len(operands), len(inputs)):
        node = _outer_node(inputs[i])
        for j in range(len(inputs)):
            base = _outer_node(inputs[j]) if j != i and j in keep else None
            chain = _view_chain(node, base) if node is not None and base is not None and \
                storage_of(inputs[i]) == storage_of(inputs[j]) else None
            if chain:
                break
        else:
            continue
        keep.remove(i)
        for gm in graphs:
            placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
            value = placeholders[j]
            first = next(n for n in gm.graph.nodes if n.op != "placeholder")
            with gm.graph.inserting_before(first):
                for op in chain:
                    value = gm.graph.call_function(op.target, (value, *op.args[1:]),
                                                   dict(op.kwargs))
                    value.meta["val"] = op.meta.get("val")
                    value.meta["stack_trace"] = op.meta.get("stack_trace")
            placeholders[i].replace_all_uses_with(value)
    for gm in graphs:  # (at the end: positions are those of inputs until then)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i in range(len(inputs)):
            if i not in keep:
                gm.graph.erase_node(placeholders[i])
        gm.recompile()
    dropped = [i for i in range(len(inputs)) if i not in keep]
    assert all(i >= len(operands) for i in dropped)
    return [e for k, e in enumerate(extra, len(operands)) if k in keep]


def _traced_state(value: torch.Tensor) -> torch.Tensor:
    """A real tensor that is a parameter or buffer of the module being traced (a
    StaticCache holds its caches in a list as well as registering them as buffers):
    the module's traced (fake) tensor, so the region has one operand for both."""
    if isinstance(value, torch._subclasses.FakeTensor) or not _STATE:
        return value
    module, names = _STATE[-1]
    name = names.get(id(value))
    if name is None:
        return value
    traced = module.get_parameter(name) if name in dict(module.named_parameters()) \
        else module.get_buffer(name)
    return traced if isinstance(traced, torch._subclasses.FakeTensor) else value


def _fake_mode(*tensors: list[torch.Tensor]) -> Any:
    from torch._guards import detect_fake_mode

    return detect_fake_mode([t for group in tensors for t in group])


def _written(gm: torch.fx.GraphModule) -> dict[int, str]:
    """Positions of the placeholders the graph writes, through any view, with a line."""
    from .fx_graph import source_line

    _, written = view_roots(gm.graph)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {i: source_line(written[p]) for i, p in enumerate(placeholders) if p in written}


def _return_written(gm: torch.fx.GraphModule, written: list[int]) -> None:
    """The graph's outputs followed by the value of each written placeholder at its end."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    output.args = (tuple(outs + [placeholders[i] for i in written]),)
    gm.recompile()


def _outputs(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    return [a.meta["val"] for a in output.args[0]]


def _refuse_aliasing(operands: list[torch.Tensor], written: list[int], op: str,
                     location: str) -> None:
    """Operands of one region sharing memory, one written: the region takes values."""
    for i in written:
        for j, other in enumerate(operands):
            if j != i and storage_of(other) == storage_of(operands[i]):
                raise _refuse(op, "its region writes a tensor that shares memory with "
                              "another tensor it reads (a view and its base); pass or "
                              "close over only one of them", location)


def register(region: Region) -> int:
    """Keeps `region` in `REGIONS`; returns its id."""
    rid = next(_IDS)
    REGIONS[rid] = region
    return rid


def _call(region: Region, operands: list[torch.Tensor]) -> list[torch.Tensor]:
    """Records the region's op in the program and copies each written operand's new
    value back into it; returns the region's own outputs."""
    rid = register(region)
    shift = 1 if region.kind == "cond" else 0
    results = list(region_op()(rid, list(operands)))
    n = len(results) - len(region.written)
    for position, value in zip(region.written, results[n:]):
        operands[shift + position].copy_(value)
    return results[:n]


def _same_types(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and x.dtype == y.dtype
                                    for x, y in zip(a, b))


def cond(pred: Any, true_fn: Callable, false_fn: Callable, operands: Any) -> Any:
    """torch.cond, traced as a region of the program."""
    location = user_line()
    if not isinstance(pred, torch.Tensor):
        return (true_fn if pred else false_fn)(*operands)  # decided while tracing
    flat, in_spec = pytree.tree_flatten(tuple(operands))
    if not all(isinstance(t, torch.Tensor) for t in flat):
        raise _refuse("torch.cond", "outofplace takes tensor operands only", location)
    traced = [_trace(lambda *a, f=f: f(*pytree.tree_unflatten(list(a), in_spec)), flat)
              for f in (true_fn, false_fn)]
    graphs = [gm for gm, _ in traced]
    extra = _lift(graphs, flat)
    inputs = flat + extra
    writes: dict[int, str] = {}
    for gm in graphs:
        writes.update(_written(gm))
    written = sorted(writes)
    _refuse_aliasing(inputs, written, "torch.cond", location)
    outs = [_outputs(gm) for gm in graphs]
    if not _same_types(outs[0], outs[1]):
        raise _refuse("torch.cond", "its branches return tensors of different shapes or "
                      "dtypes", location)
    for gm in graphs:
        _return_written(gm, written)
    p = pred.reshape(()).to(torch.bool) if pred.dtype != torch.bool or pred.dim() else pred
    region = Region("cond", graphs, 0, written,
                    outs[0] + [inputs[i] for i in written], location)
    results = _call(region, [p] + inputs)
    return pytree.tree_unflatten(results, traced[0][1])


def while_loop(cond_fn: Callable, body_fn: Callable, carried: tuple,
               additional: tuple = ()) -> Any:
    """torch._higher_order_ops.while_loop, traced as a region of the program."""
    location = user_line()
    flat = list(carried) + list(additional)
    if not all(isinstance(t, torch.Tensor) for t in flat):
        raise _refuse("torch.while_loop", "outofplace takes tensor carried values only "
                      "(a Python int carried would be a number of unknown value): "
                      "carry a 0-d tensor", location)
    condition, _ = _trace(cond_fn, flat)
    body, spec = _trace(body_fn, flat)
    extra = _lift([condition, body], flat)
    inputs = flat + extra
    n = len(carried)
    body_writes, cond_writes = _written(body), _written(condition)
    if cond_writes:
        raise _refuse("torch.while_loop", "its condition writes a tensor in place",
                      next(iter(cond_writes.values())) or location)
    for i, line in body_writes.items():
        if i < n:
            raise _refuse("torch.while_loop", "its body writes a carried value in place "
                          "(eager writes the caller's tensor in the first iteration "
                          "only); write a tensor the body closes over, or return a new "
                          "value", line or location)
    written = sorted(body_writes)
    _refuse_aliasing(inputs, written, "torch.while_loop", location)
    if not _same_types(_outputs(body), flat[:n]):
        raise _refuse("torch.while_loop", "its body returns values whose shapes or "
                      "dtypes differ from the carried ones", location)
    out = _outputs(condition)
    if len(out) != 1 or out[0].dim() != 0 or out[0].dtype != torch.bool:
        raise _refuse("torch.while_loop", "its condition must return one 0-d bool "
                      "tensor", location)
    _return_written(body, written)
    region = Region("while", [condition, body], n, written,
                    [t for t in flat[:n]] + [inputs[i] for i in written], location)
    return tuple(_call(region, inputs))


class _RegionOps(TorchFunctionMode):
    """The higher-order ops themselves (a torch.compile graph calls them with its
    subgraphs as functions), traced as regions."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        from torch._higher_order_ops.cond import cond_op
        from torch._higher_order_ops.while_loop import while_loop_op

        if func is cond_op:  # (the mode again for the regions inside: torch left it)
            with _RegionOps():
                return cond(*args)
        if func is while_loop_op:
            with _RegionOps():
                return while_loop(*args[:3], *args[3:4])
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def traced(module: torch.nn.Module) -> Iterator[None]:
    """While tracing `module`: `torch.cond` and `while_loop` traced by outofplace."""
    import torch._higher_order_ops.utils as utils

    _STATE.append((module, {id(t): name for name, t in (*module.named_parameters(),
                                                          *module.named_buffers())}))
    original = utils._hop_compile_and_call

    def compile_and_call(fn: Callable, args: tuple, kwargs: dict | None = None) -> Any:
        name = getattr(fn, "__name__", "")
        if name == "_cond_op_wrapper":
            return cond(*args)
        if name == "_while_loop_op_wrapper":
            return while_loop(*args[:3], *args[3:4])
        if name == "_scan_op_wrapper" or "scan" in name:
            raise _refuse("torch.scan", "outofplace compiles torch.cond and while_loop "
                          "regions, not scan; write the loop as a while_loop",
                          user_line(traceback.extract_stack()))
        return original(fn, args, kwargs)

    utils._hop_compile_and_call = compile_and_call
    try:
        yield
    finally:
        utils._hop_compile_and_call = original
        _STATE.pop()


def region_mode() -> TorchFunctionMode:
    return _RegionOps()
