"""Gradients traced in torch.export's training IR: tensors autograd saved in the forward
that the pre-dispatch tracer never saw, replayed from the ops that made them
(`SavedTensors`, entered for the trace by tracing.py; docs/training.md)."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx
from torch.fx.experimental import proxy_tensor
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils.weak import WeakTensorKeyDictionary

from .. import op_registry
from .fx_graph import write_effects, written_operands
from .runtime_positions import user_line


class SavedTensors(TorchDispatchMode):
    """Gradients in torch.export's training IR: the backward reads tensors autograd saved
    in the forward, and some of them the pre-dispatch tracer never saw: a saved output is
    kept as a shallow copy (`tensor_data()`, a `detach`), a composite op saves what its
    decomposition made (`linear` saves `weight.t()`). Looked up in the backward, such a
    tensor would become a constant of the graph, a fake one ("a fake tensor in the
    exported program's constants").

    While entered, every op below autograd is recorded with its operands and the graph's
    last node at the time; when the tracer looks up a tensor it has not seen, the op that
    made it is traced from its operands at that point of the graph, so the backward reads
    the values the forward computed (eager's CPU attention kernel saves its output and
    logsumexp). Ops drawing random numbers are not replayed (a second draw would
    differ): their saved values stay unsupported; an attention kernel with dropout
    probability 0 draws none."""

    def __init__(self) -> None:
        super().__init__()
        # tensor -> the ops that made it (`_Record`s), the last last; an in-place op
        # adds to its operand's
        self.made: Any = None
        self.tracer: Any = None
        # the draw a lookup needed (`_Drawn`), which the trace's failure names
        self.drawn: _Drawn | None = None

    def __enter__(self) -> "SavedTensors":
        mode = proxy_tensor.get_proxy_mode()
        self.tracer = mode.tracer if mode is not None else None
        if self.tracer is not None:
            self.made = WeakTensorKeyDictionary()
            self.tracker = self.tracer.tensor_tracker
            self.tracker.__class__ = _ReplayingTracker
            self.tracker.replay = self._replay
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self in _get_current_dispatch_mode_stack():
            super().__exit__(*exc)
        self.release()

    def release(self) -> None:
        """Gives the tracer its own table back and leaves the mode stack (also after a
        trace that raised, whose forward hook may not have run)."""
        while self in _get_current_dispatch_mode_stack():
            torch._C._pop_torch_dispatch_stack(None)
        if self.tracer is not None:
            self.tracker.__class__ = WeakTensorKeyDictionary
            del self.tracker.replay
            self.made = self.tracer = None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        results = func(*args, **kwargs)
        if self.made is None:
            return results
        if torch.Tag.nondeterministic_seeded in func.tags and \
                not _draws_nothing(func, args, kwargs):
            # not replayed: its results and what it wrote are drawn (`_Drawn`), which a
            # lookup refuses rather than replay the ops before the draw
            drawn = _Drawn(func, user_line())
            for tensor in pytree.tree_leaves((results, _written(func, args, kwargs))):
                if isinstance(tensor, torch.Tensor):
                    self.made.setdefault(tensor, []).append(drawn)
            return results
        replay = _functional_variant(func) if func._schema.is_mutable else func
        if replay is not None:
            last = self.tracer.graph._root.prev
            # each operand as the op read it: its proxy if the tracer saw it, else how
            # many ops had made it then (an in-place op later changes it: autograd's
            # copy of `clamp_min_`'s input is of the value before the op)
            then = []
            for leaf in pytree.tree_leaves((args, kwargs)):
                seen = WeakTensorKeyDictionary.get(self.tracker, leaf) \
                    if isinstance(leaf, torch.Tensor) else None
                then.append(seen if seen is not None or not isinstance(leaf, torch.Tensor)
                            else len(self.made.get(leaf, ())))
            record = _Record(func, replay, args, kwargs, results, last, then)
            for result in pytree.tree_leaves(results):
                if isinstance(result, torch.Tensor):
                    if result not in self.made:
                        self.made[result] = []
                    self.made[result].append(record)
        return results

    def _replay(self, tensor: torch.Tensor) -> Any:
        """The proxy of `tensor`, traced again from the ops that made it, or None."""
        records = self.made.get(tensor) if self.made is not None else None
        if not records:
            return None
        return self._state(tensor, len(records))

    def _state(self, tensor: torch.Tensor, made: int) -> Any:
        """The proxy of `tensor` as the first `made` ops that made it left it (an
        in-place op's operand is the tensor as the ops before it left it: `_fused_rms_norm`
        saves `rstd` made by `mean`, `add_` and `rsqrt_`), or None. Each op is traced
        once, from its operands' values when it ran; the tensor's last op gives the
        tracer its proxy."""
        records = self.made.get(tensor, ())
        if made == 0 or made > len(records):
            return None
        record = records[made - 1]
        if isinstance(record, _Drawn):
            self.drawn = record
            return None
        if record.proxies is None and not self._trace(record):
            return None
        return record.proxies.get(id(tensor))

    def _trace(self, record: "_Record") -> bool:
        """Traces `record`'s op at the point of the forward where it ran; False if an
        operand has no proxy (or is symbolic)."""
        leaves, spec = pytree.tree_flatten((record.args, record.kwargs))
        proxies = []
        for leaf, then in zip(leaves, record.then):
            if isinstance(leaf, torch.Tensor):
                proxy = self._state(leaf, then) if isinstance(then, int) else then
                if proxy is None:
                    return False
                proxies.append(proxy.proxy)
            elif isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                return False
            else:
                proxies.append(leaf)
        # At the point of the forward where the op ran (after its operands' nodes): the
        # operands' values then, whatever the program wrote into them later. The tracer
        # records an in-place op's node before autograd runs it, so an op autograd ran
        # for it (`div_`'s and `pow_`'s copy of the original self, their backward's
        # operand) read its operand before that node wrote it: traced before the node.
        order = {node: i for i, node in enumerate(self.tracer.graph.nodes)}
        nodes = [p.node for p in proxies if isinstance(p, torch.fx.Proxy)]
        after = max([record.last] + nodes, key=lambda node: order.get(node, -1))
        before = after is record.last and _writes_any(record.last, nodes)
        proxy_args, proxy_kwargs = pytree.tree_unflatten(proxies, spec)
        func, results = record.func, record.results
        with self.tracer.graph.inserting_before(after) if before else \
                self.tracer.graph.inserting_after(after):
            proxy = self.tracer.create_proxy("call_function", record.replay, proxy_args,
                                             proxy_kwargs)
        proxy_tensor.set_meta(proxy, results)  # (the values the tracer knows)
        if record.replay is not func:
            # The functional variant returns the op's results, then the new values of
            # the operands the op writes.
            if isinstance(results, tuple):
                written = _written(func, record.args, record.kwargs)
                proxy.node.meta["val"] = (*results, *written)
                proxy = tuple(proxy[i] for i in range(len(results)))
        if isinstance(results, (tuple, list)) and not isinstance(proxy, tuple):
            proxy = tuple(proxy[i] for i in range(len(results)))
        pairs = list(zip(results, proxy)) if isinstance(results, (tuple, list)) else \
            [(results, proxy)]
        for t, p in pairs:
            if isinstance(t, torch.Tensor) and "val" not in p.node.meta:
                proxy_tensor.set_meta(p, t)
        record.proxies = {id(t): proxy_tensor._ProxyTensor(p, None) for t, p in pairs
                          if isinstance(t, torch.Tensor)}
        # the tracer's proxy of each result this op made last
        last_made = tuple(t if isinstance(t, torch.Tensor) and self.made[t][-1] is record
                          else None for t, _ in pairs)
        proxy_tensor.track_tensor_tree(
            [t for t in last_made if t is not None],
            [p for t, (_, p) in zip(last_made, pairs) if t is not None],
            constant=None, tracer=self.tracer)
        return True


def _written(func: Any, args: tuple, kwargs: dict) -> list:
    """The operands `func` writes (`Tensor(a!)` in its schema), as the call passed them."""
    return [kwargs[a.name] if a.name in kwargs else args[i]
            for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write and
            (a.name in kwargs or i < len(args))]


class _Drawn:
    """An op that drew random numbers into a tensor (its result, or an operand it
    wrote): `op` and the user's line where it ran."""

    __slots__ = ("op", "line")

    def __init__(self, func: Any, line: str) -> None:
        self.op, self.line = func._schema.name, line


class _Record:
    """An op below autograd that made a tensor: `then` holds each operand as the op
    read it (a proxy, or how many ops had made it), `proxies` each result's proxy once
    traced."""

    __slots__ = ("func", "replay", "args", "kwargs", "results", "last", "then", "proxies")

    def __init__(self, func: Any, replay: Any, args: tuple, kwargs: dict, results: Any,
                 last: torch.fx.Node, then: list) -> None:
        self.func, self.replay, self.args, self.kwargs = func, replay, args, kwargs
        self.results, self.last, self.then = results, last, then
        self.proxies: dict[int, Any] | None = None


def _writes_any(node: torch.fx.Node, operands: list[torch.fx.Node]) -> bool:
    """Whether `node` is an op that writes one of `operands` (an in-place op's self)."""
    effects = write_effects(node)
    return effects is not None and any(
        operand in operands for position in effects.written
        for operand in written_operands(node, position))


def _draws_nothing(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """Whether a call of an op tagged as drawing random numbers draws none: its only
    randomness a dropout, given probability 0 (eager's CPU attention kernel, which
    saves its output and logsumexp for the backward)."""
    names = [a.name for a in op._schema.arguments]
    if "dropout_p" not in names:
        return False
    position = names.index("dropout_p")
    p = kwargs.get("dropout_p", args[position] if position < len(args) else
                   op._schema.arguments[position].default_value)
    return isinstance(p, (int, float)) and p == 0


def _functional_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The op that computes what `op` does without writing its operands: its out-of-place
    twin (`add_` -> `add`), or the `_functional` variant of an op that writes other
    operands (`_batch_norm_with_update` -> `_batch_norm_with_update_functional`, whose
    results are the op's, then the written operands' new values)."""
    effects = op_registry.effects(op_registry.mlir_name(op))
    if effects is not None and effects.twin is not None:
        return effects.twin
    namespace, name = op._schema.name.split("::")
    packet = getattr(getattr(torch.ops, namespace), f"{name}_functional", None)
    return getattr(packet, op._overloadname, None) if packet is not None else None


class _ReplayingTracker(WeakTensorKeyDictionary):
    """The tracer's tensor -> proxy table, which traces a tensor it has not seen from the
    op that made it (SavedTensors)."""

    replay: Callable[[torch.Tensor], Any]

    def get(self, key: Any, default: Any = None) -> Any:
        value = super().get(key)
        if value is None and isinstance(key, torch.Tensor):
            value = self.replay(key)
        return default if value is None else value
