"""Training programs: optimizer steps, gradients and the state they reach through Python
objects.

torch.export swaps a module's parameters for fake ones while it traces; an optimizer still
holds the real ones. `OptimizerSteps`, entered for the trace, gives every optimizer
reachable from the program the parameters the trace sees (the fake ones, with the real
`.grad`) while the forward runs, so a step after `loss.backward()` reads the gradients
the program computed, `zero_grad()` clears them, and the parameters a step writes are the
module's own. It restores the optimizers after the trace and refuses a step that creates
or replaces its state (the first step of most optimizers), which a program could not
keep.

Tensors the program reaches through plain Python objects (optimizer state, `.grad`,
parameters of a model only the optimizer holds) are lifted by torch.export as constants.
`graph_preparation._held_constants` finds each one's path from the program's roots
(`opt.state[lin.weight].exp_avg`); such a tensor, when the program writes it or it is a
`.grad` or an optimizer's, becomes an argument read at every call by its path and
written back like a buffer. The param groups' Python values (`lr`) are the trace's
constants: `OptimizerSettings` refuses a call after they changed.

The modes a step's Python numbers are traced under are in scalar_tensors.py, the
backward's saved tensors the tracer missed in saved_tensors.py.
"""

from __future__ import annotations

import functools
import inspect
import traceback
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch._subclasses import fake_tensor
from torch.multiprocessing.reductions import StorageWeakRef

from ..errors import UnsupportedMutationError
from ..signature import attribute_of
from .runtime_positions import user_line
from .scalar_tensors import ItemAsTensor, ScalarTensorLists


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors are the same elements of the same memory."""
    return a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() and \
        a.storage_offset() == b.storage_offset() and \
        StorageWeakRef(a.untyped_storage()) == StorageWeakRef(b.untyped_storage())


# A parameter or buffer larger than this is not copied before tracing when tracing
# cannot write it (`uncopied_state`): the weights, which a copy would make compiling hold
# twice (issue 31).
COPIED_BYTES = 1 << 20


def uncopied_state(module: torch.nn.Module, roots: dict[str, Any]) -> set[int]:
    """The ids of `module`'s parameters and buffers over COPIED_BYTES that tracing cannot
    write: the program meets each only as module state, where torch.export puts a fake
    tensor in its place. One that a plain Python object holds, or a view of it (HF's
    StaticCache keeps its buffers in a list, an optimizer its parameters), the program
    meets as the real tensor, and an op on real tensors alone runs for real inside the
    trace (`cache.mul_(2)`): those are copied. Empty when the objects reachable from
    `roots` are too many to look through."""
    held = _held_outside_state(roots)
    if held is None:
        return set()
    storages = {t.untyped_storage().data_ptr() for t in held if not t.is_meta}
    return {id(t) for t in (*module.parameters(), *module.buffers())
            if t.nbytes > COPIED_BYTES and not t.is_meta and
            t.untyped_storage().data_ptr() not in storages}


def _held_outside_state(roots: dict[str, Any]) -> list[torch.Tensor] | None:
    """The real tensors reachable from the roots other than as a module's parameter or
    buffer, or None past _SEARCH_LIMIT objects."""
    queue, seen, found = list(roots.values()), set(), []
    while queue:
        value = queue.pop()
        if id(value) in seen:
            continue
        if len(seen) >= _SEARCH_LIMIT:
            return None
        seen.add(id(value))
        if isinstance(value, torch.Tensor) and \
                not isinstance(value, torch._subclasses.FakeTensor):
            found.append(value)
        for (kind, key), child in _children(value):
            if isinstance(value, torch.nn.Module) and kind == "attr" and \
                    (key in value._parameters or key in value._buffers):
                continue
            queue.append(child)
    return found


class Snapshot:
    """Tensors as they were before tracing, restored after it: tracing may run small ops
    on real tensors (a 0-d counter, a gradient, optimizer state it lifts as constants,
    a buffer held by a plain Python object). The tensors of `uncopied` (ids,
    `uncopied_state`) and meta tensors, which hold nothing, are not copied."""

    def __init__(self, tensors: list[torch.Tensor], uncopied: set[int]) -> None:
        self.copies = [(t, t.detach().clone()) for t in tensors
                       if not t.is_meta and id(t) not in uncopied]
        # their versions now, set back with their values (a buffer viewing a parameter
        # shares its version: written back, it would move the parameter's on, and a view
        # of the parameter autograd checks would refuse to be read, as after `.data`
        # writes, frontend/tensor_data.py)
        self.versions = torch.autograd.grad_mode._unsafe_preserve_version_counter(
            tuple(t for t, _ in self.copies))

    def restore(self) -> None:
        with torch.no_grad(), self.versions:
            for tensor, value in self.copies:
                tensor.copy_(value)


class OptimizerSteps:
    """While entered: every optimizer step works on the parameters the trace sees."""

    def __init__(self, module: torch.nn.Module, roots: dict[str, Any] | None = None) -> None:
        self.module = module
        self.roots = {"": module, **(roots or {})}
        self.real = {name: p for name, p in
                     module.named_parameters(remove_duplicate=False)}
        self.restores: list[Callable[[], None]] = []
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.cleared: list[torch.Tensor] = []  # real parameters whose .grad the program clears
        self.settings: dict[int, OptimizerSettings] = {}  # per optimizer stepped, by id
        self.item_mode = ItemAsTensor()

    @functools.cached_property
    def reachable(self) -> list[torch.Tensor]:
        """The tensors the roots reach (`reachable_tensors`), found once for the trace."""
        return reachable_tensors(self.roots)

    def __enter__(self) -> "OptimizerSteps":
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)

        # Tracing writes tensors it lifts as constants (optimizer state): compiling must
        # leave them as they were.
        # (The module's buffers are export's own snapshot: tracing.export.)
        buffers = {id(t) for t in self.module.buffers()}
        self.saved = Snapshot([t for t in self.reachable if id(t) not in buffers],
                              uncopied_state(self.module, self.roots))
        self.handles = [register_optimizer_step_pre_hook(self._before),
                        register_optimizer_step_post_hook(self._after)]
        # Fake tensors of one element compute on the real tensor they stand for, and
        # `.item()` of one returns its value now: a step counter's would be baked in.
        self.constant_limit = fake_tensor.CONSTANT_NUMEL_LIMIT
        fake_tensor.CONSTANT_NUMEL_LIMIT = 0
        return self

    def __exit__(self, *exc: Any) -> None:
        fake_tensor.CONSTANT_NUMEL_LIMIT = self.constant_limit
        for handle in self.handles:
            handle.remove()
        while self.restores:
            self.restores.pop()()
        self.saved.restore()

    def items_as_tensors(self) -> "ItemAsTensor":
        """The mode the traced forward runs in: `.item()` stays a 0-d tensor."""
        return self.item_mode

    def traced_parameters(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(real parameter, what the module holds in its place while tracing)."""
        pairs = []
        for name, value in self.module.named_parameters(remove_duplicate=False):
            real = self.real.get(name)
            if real is not None and value is not real:
                pairs.append((real, value))
        return pairs

    def enter(self) -> None:
        """At the start of the traced forward: the traced parameters' gradients are the
        caller's tensors (read at every call, written back when the program writes them)."""
        self.pairs = self.traced_parameters()
        for real, traced in self.pairs:
            traced.grad = real.grad
        traced_by_id = {id(real): traced for real, traced in self.pairs}
        for _, value, _, _ in _walk(self.roots):
            if isinstance(value, torch.optim.Optimizer):
                self._swap(value, traced_by_id)

    def leave(self) -> None:
        """At its end: a gradient the program cleared is cleared after every call; one it
        leaves behind (a new tensor) cannot be returned into `.grad`, and is refused."""
        names = {id(p): n for n, p in self.real.items()}
        for real, traced in self.pairs:
            if traced.grad is real.grad:
                continue
            if traced.grad is None:
                self.cleared.append(real)
                continue
            if real.grad is not None and real.grad.shape == traced.grad.shape and \
                    real.grad.dtype == traced.grad.dtype:
                # `zero_grad(); loss.backward()`: the new gradient is written into the
                # caller's `.grad` tensor (eager's is a new tensor of the same values).
                with torch.no_grad():
                    real.grad.copy_(traced.grad)
                continue
            raise UnsupportedMutationError(
                "backward", f"the program leaves a new gradient in "
                f"`{names[id(real)]}.grad`, which the compiled program cannot create; "
                "run one step eagerly before compiling (the gradients it leaves are then "
                "updated in place), clear it in the program (`opt.zero_grad()` after "
                "the step) or compute the gradients with torch.autograd.grad",
                location=user_line(traceback.extract_stack()))

    def _swap(self, opt: torch.optim.Optimizer,
              traced: dict[int, torch.Tensor]) -> None:
        """The optimizer's parameters (and its state's keys) become the traced ones, until
        the trace ends."""
        groups = [dict(group) for group in opt.param_groups]
        state = {key: dict(value) for key, value in opt.state.items()}

        def restore() -> None:
            for group, saved in zip(opt.param_groups, groups):
                group.clear()
                group.update(saved)
            opt.state.clear()
            for key, value in state.items():
                opt.state[key] = value

        self.restores.append(restore)
        for group in opt.param_groups:
            group["params"] = [traced.get(id(p), p) for p in group["params"]]
        for key in list(opt.state):
            if id(key) in traced:
                opt.state[traced[id(key)]] = dict(opt.state.pop(key))

    def _before(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.settings.setdefault(id(opt), OptimizerSettings(opt))
        self.scalar_lists = ScalarTensorLists()
        self.scalar_lists.__enter__()
        # torch.export sets the flag, and torch.optim then computes its step counts and
        # bias corrections as tensors of the step's dtype (float32), where eager reads
        # them with .item() as Python floats: the step traces eager's code.
        compiling = torch.compiler._is_compiling_flag
        torch.compiler._is_compiling_flag = False
        scalar_lists = self.scalar_lists

        def end_step() -> None:  # after the step
            torch.compiler._is_compiling_flag = compiling
            scalar_lists.__exit__(None, None, None)

        def after_raise() -> None:  # after a step that raised, once export has returned:
            # export restored the flag as it left (setting it here would leave it set,
            # and eager's optimizers would read their step counts as tensors after)
            scalar_lists.__exit__(None, None, None)
        self.end_step, self.after_raise = end_step, after_raise
        self.restores.append(after_raise)

    def _after(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.restores.remove(self.after_raise)
        self.end_step()
        names = {id(p): n for n, p in self.module.named_parameters(remove_duplicate=False)}
        for key, entries in opt.state.items():
            for entry, value in entries.items():
                if isinstance(value, torch._subclasses.FakeTensor):
                    where = user_line(traceback.extract_stack())
                    raise UnsupportedMutationError(
                        f"{type(opt).__name__}.step", f"it creates or replaces its state "
                        f"'{entry}' of parameter `{names.get(id(key), 'a parameter')}` "
                        "(an optimizer's first step creates its state): the compiled "
                        "program could not keep it; run one step eagerly before "
                        "compiling, so the step updates existing state in place",
                        location=where)


class OptimizerSettings:
    """The Python values of a stepped optimizer's param groups (`lr`, `momentum`, ...),
    which the trace made constants of the program: `check` raises when the caller changed
    one since (a learning-rate scheduler), which the compiled step would not see."""

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        self.optimizer = opt
        self.groups = self._values()

    def _values(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in group.items()
                 if k != "params" and not isinstance(v, torch.Tensor)}
                for group in self.optimizer.param_groups]

    def check(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) == len(self.groups) and all(
                group.get(k, self) == v for group, traced in zip(groups, self.groups)
                for k, v in traced.items()):
            return  # (a key added since, a scheduler's `initial_lr`, is not read)
        i, key = next(((i, k) for i, (group, traced) in enumerate(zip(groups, self.groups))
                       for k, v in traced.items() if group.get(k, self) != v),
                      (min(len(groups), len(self.groups)), None))
        if key is None:
            raise ValueError(f"the program was compiled for {type(self.optimizer).__name__}"
                             f" with {len(self.groups)} param groups, it has {len(groups)} "
                             "now: compile again")
        raise ValueError(
            f"the program was compiled with {type(self.optimizer).__name__} param_groups"
            f"[{i}][{key!r}] = {self.groups[i][key]!r}, and it is "
            f"{groups[i].get(key, 'missing')!r} now: the compiled step keeps the value it "
            "was traced with; compile again for the new value")


# A path from a root object to a tensor: ("attr", name), ("item", key) or ("grad", None).
Step = tuple[str, Any]


@dataclass
class HeldTensor:
    """A tensor the caller holds through Python objects, found again at every call."""

    root: Any
    path: tuple[Step, ...]
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __call__(self) -> torch.Tensor:
        value = self.root
        for kind, key in self.path:
            value = value.grad if kind == "grad" else attribute_of(value, key) \
                if kind == "attr" else value[key]
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != self.shape or \
                value.dtype != self.dtype:
            raise ValueError(
                f"`{self.name}` was compiled as a tensor of shape {self.shape} and dtype "
                f"{self.dtype}; it is {_describe(value)} now: compile again")
        return value


class HeldConstant:
    """A tensor the caller holds that the program reads as a constant (a module's plain
    tensor attribute, a global: torch.export lifts them as constants, and they are
    literals of the program): `check` raises ValueError at a call when it is another
    tensor or was written since, which the compiled program would not see."""

    def __init__(self, held: HeldTensor) -> None:
        self.held = held
        self.tensor = held()
        self.version, self.address = self.tensor._version, self.tensor.data_ptr()

    def check(self) -> None:
        value = self.held()
        if value is not self.tensor or value._version != self.version or \
                value.data_ptr() != self.address:
            name = self.held.name
            raise ValueError(
                f"{name if ' ' in name else f'`{name}`'} is a constant of the compiled "
                "program (its values when compiled), and it was written or replaced "
                "since: compile again, or make it a buffer or an argument (read at every "
                "call)")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return repr(value)


# Callables that are code, not objects holding state (an object with `__call__` is one).
_CODE = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)


def _children(value: Any) -> list[tuple[Step, Any]]:
    """The objects a path may go through from `value`."""
    if isinstance(value, torch.Tensor):
        return [(("grad", None), value.grad)] if value.grad is not None else []
    if isinstance(value, torch.optim.Optimizer):
        return [(("attr", "param_groups"), value.param_groups),
                (("attr", "state"), value.state)]
    if isinstance(value, torch.nn.Module):
        named = {**value._parameters, **value._buffers, **value._modules}
        named.update({k: v for k, v in vars(value).items() if not k.startswith("_")})
        return [(("attr", k), v) for k, v in named.items() if v is not None]
    if isinstance(value, dict):
        return [(("item", k), v) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [(("item", i), v) for i, v in enumerate(value)]
    if hasattr(value, "__dict__") and not isinstance(value, (type, *_CODE)) and \
            type(value).__module__.split(".")[0] not in ("torch", "builtins", "numpy") and \
            (not callable(value) or _users(value)):
        return [(("attr", k), v) for k, v in vars(value).items() if not k.startswith("__")]
    return []


# Objects visited at most, looking for the paths of a program's held tensors.
_SEARCH_LIMIT = 100_000


def _walk(roots: dict[str, Any]):
    """(root, value, path, root's name) of every object reachable from the roots, breadth
    first, each once."""
    queue = [(root, root, (), name) for name, root in roots.items()]
    seen: set[int] = set()
    while queue and len(seen) < _SEARCH_LIMIT:
        next_queue = []
        for root, value, path, name in queue:
            if id(value) in seen:
                continue
            seen.add(id(value))
            yield root, value, path, name
            for step, child in _children(value):
                next_queue.append((root, child, path + (step,), name))
        queue = next_queue


def reachable_tensors(roots: dict[str, Any]) -> list[torch.Tensor]:
    """The real tensors reachable from the roots (state, gradients, parameters)."""
    return [value for _, value, _, _ in _walk(roots) if isinstance(value, torch.Tensor)
            and not isinstance(value, torch._subclasses.FakeTensor)]


def find_paths(roots: dict[str, Any], targets: list[torch.Tensor]
               ) -> list[tuple[Any, tuple[Step, ...], str] | None]:
    """For each target, (root, path, name) of the first path from a root reaching a tensor
    with the same elements of the same memory (breadth first), or None. A dict key that
    is a tensor (an optimizer's state is keyed by parameter) is named by its own path."""
    found: list[tuple[Any, tuple[Step, ...], str] | None] = [None] * len(targets)
    if not targets:
        return found
    paths: dict[int, tuple[str, tuple[Step, ...]]] = {}
    for root, value, path, name in _walk(roots):
        if isinstance(value, torch.Tensor):
            paths.setdefault(id(value), (name, path))
            for i, target in enumerate(targets):
                if found[i] is None and same_view(value, target):
                    found[i] = (root, path, name)

    def path_name(name: str, path: tuple[Step, ...], depth: int = 0) -> str:
        for kind, key in path:
            if kind == "grad":
                text = "grad"
            elif isinstance(key, torch.Tensor):
                text = path_name(*paths[id(key)], depth + 1) \
                    if id(key) in paths and depth < 4 else "tensor"
            else:
                text = str(key)
            name = f"{name}.{text}" if name else text
        return name

    return [None if f is None else (f[0], f[1], path_name(f[2], f[1])) for f in found]


def program_roots(f: Any, _seen: set[int] | None = None) -> dict[str, Any]:
    """Where a program's held tensors are looked for: the objects a function names
    (globals, closure cells and its parameters' defaults), and those the user's functions it names in turn name
    (`loss = compute_loss(x)` reaching the model only through the helper); for a module,
    itself and those its forward names; for a bound method, its object too, by the name
    the method gives it (`self`: `compile(model.forward)` reads the module's parameters
    at every call). A helper's name that another object took already is prefixed with
    the helper's (`compute_loss.model`)."""
    if isinstance(f, torch.nn.Module):
        return {**program_roots(type(f).forward, _seen), "": f}
    if isinstance(f, functools.partial):  # its bound arguments, by their parameters' names
        try:
            names = list(inspect.signature(f.func).parameters)[:len(f.args)]
        except (TypeError, ValueError):  # (no signature to read)
            names = [f"arg{i}" for i in range(len(f.args))]
        bound = {**dict(zip(names, f.args)), **f.keywords}
        return {**program_roots(f.func, _seen),
                **{k: v for k, v in bound.items() if _held(v)}}
    if called_method(f) is not None:
        return program_roots(called_method(f), _seen)
    if isinstance(f, types.MethodType):  # `trainer.step`: its object too, as `self`
        code = f.__func__.__code__
        name = code.co_varnames[0] if code.co_argcount else "self"
        return {**program_roots(f.__func__, _seen), name: f.__self__}
    seen = set() if _seen is None else _seen
    code = getattr(f, "__code__", None)
    if code is None or id(code) in seen:
        return {}
    seen.add(id(code))
    named = {}
    scope = getattr(f, "__globals__", {})
    for name in code.co_names:
        if name in scope:
            named[name] = scope[name]
    for name, cell in zip(code.co_freevars, f.__closure__ or ()):
        try:
            named[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    defaults = getattr(f, "__defaults__", None) or ()  # `def f(x, model=model)`
    named.update(zip(code.co_varnames[code.co_argcount - len(defaults):code.co_argcount],
                     defaults))
    named.update(getattr(f, "__kwdefaults__", None) or {})
    roots = {k: v for k, v in named.items() if _held(v)}
    for helper in named.values():
        if not isinstance(helper, (types.FunctionType, types.MethodType)) or \
                (helper.__module__ or "").split(".")[0] in _LIBRARIES:
            continue
        for name, value in program_roots(helper, seen).items():
            if roots.get(name, value) is not value:
                name = f"{helper.__name__}.{name}"
            roots.setdefault(name, value)
    return roots


def called_method(f: Any) -> types.MethodType | None:
    """The method an object called as a function runs (`obj.__call__`, a bound method
    whose code export can read), or None for a function, a method, a partial or a
    module."""
    if isinstance(f, (*_CODE, torch.nn.Module)):
        return None
    method = getattr(f, "__call__", None)
    return method if isinstance(method, types.MethodType) else None


def program_modules(roots: dict[str, Any]) -> dict[str, torch.nn.Module]:
    """The modules a program's roots are or hold through plain Python objects (a
    trainer's `self.model`, a dict of models), named as the program names them, or by
    their attribute (`model`) when that name is free: the modules whose parameters and
    buffers the program reads as arguments. Optimizers and modules are not looked into."""
    found: dict[str, torch.nn.Module] = {}
    seen: set[int] = set()
    queue = [(name, value, 0) for name, value in roots.items() if name]
    while queue:
        name, value, depth = queue.pop(0)
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, torch.nn.Module):
            name = name.replace(".", "_")  # (a submodule's name has no dots)
            if all(value is not m for m in found.values()):
                found[name if name not in found else f"{name}_{len(found)}"] = value
            continue
        if depth >= 2 or isinstance(value, (torch.Tensor, torch.optim.Optimizer)):
            continue
        for (_, key), child in _children(value):
            queue.append((str(key) if isinstance(key, str) and key.isidentifier()
                          else f"{name}_{key}", child, depth + 1))
    return found


def _held(value: Any) -> bool:
    """Whether a value a program names may hold its tensors: a module, an object that is
    not called, or one of the user's own classes that is (a trainer with `__call__`);
    not a class, a function or a library's callable."""
    return isinstance(value, torch.nn.Module) or not isinstance(value, (type, *_CODE)) and \
        (not callable(value) or _users(value))


def _users(value: Any) -> bool:
    """Whether value's class is the user's, not a library's."""
    return (type(value).__module__ or "").split(".")[0] not in _LIBRARIES


# Packages whose functions a program calls are not looked into for held tensors.
_LIBRARIES = frozenset(("torch", "numpy", "transformers", "jax", "outofplace"))


def reached_through_optimizer(root: Any, path: tuple[Step, ...]) -> bool:
    """Whether a path reads a gradient or goes through an optimizer."""
    value = root
    for kind, key in path:
        if kind == "grad" or isinstance(value, torch.optim.Optimizer):
            return True
        value = value.grad if kind == "grad" else getattr(value, key) \
            if kind == "attr" else value[key]
    return False
