"""Random `nn.Module`s with state, called several times, as readable Python source.

`module_programs()` is a hypothesis strategy of `ModuleProgram`s: a class with buffers and
parameters (float32, float64, float16, int64 counters and write pointers) whose forward
writes its state as models do: ring buffers and caches written at a position held in a
buffer (`self.kv0[self.ptr1 % 4] = x0.sum(0); self.ptr1 += 1`), running statistics,
counters, EMAs under `torch.no_grad()`, writes through `.data`, in-place ops on the pieces
of `split`/`chunk`/`unbind` of state, writes into inputs; it returns values, and views of
its state (which later calls write). The program is called 3 or 4 times, each call with
other values and its inputs in a drawn layout (contiguous, transposed, sliced from a bigger
tensor, every other element of one, channels_last for 4-d). Views of the state taken before
the first call (`held(model)`) are compared too. Its `repr` is a runnable reproducer.

Statements are run on a shadow module as they are drawn (fuzz_programs._Gen): one eager
rejects is dropped. fuzz_modules_check.assert_module_matches_eager runs a program on every
path against eager, comparing after every call. OUTOFPLACE_FUZZ_SKIP (fuzz_programs.SKIP) leaves
out statement kinds by name (`ring`, `ema`, ...) and `alias_state` (buffers that view
other state).
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from hypothesis import strategies as st

import fuzz_programs
from fuzz_programs import _DTYPE_NAMES, _Gen, _Rejected, _broadcasts, tensor_literal

_DTYPE_NAMES = {**_DTYPE_NAMES, torch.float64: "torch.float64"}
MAX_STATEMENTS = 8
# Features left out by name: fuzz_programs.SKIP (OUTOFPLACE_FUZZ_SKIP), and what a test adds.
SKIP = set(fuzz_programs.SKIP)
LAYOUTS = ("contiguous", "transposed", "sliced", "stepped", "channels_last")


@dataclass
class State:
    """A buffer (`param` False) or a parameter of the module, its initial value."""
    name: str
    value: torch.Tensor
    param: bool = False
    requires_grad: bool = False
    view: str = ""  # a buffer registered as this view of earlier state (`self.b1[0]`)

    def source(self) -> str:
        if self.view:
            return f"self.register_buffer({self.name!r}, {self.view})"
        literal = _literal(self.value)
        if self.param:
            return f"self.{self.name} = torch.nn.Parameter({literal}, " \
                f"requires_grad={self.requires_grad})"
        return f"self.register_buffer({self.name!r}, {literal})"


@dataclass
class Input:
    """A forward argument: its values and layout at each call."""
    name: str
    values: list[torch.Tensor]
    layouts: list[str]


def _literal(t: torch.Tensor) -> str:
    if t.dtype == torch.float64:
        return tensor_literal(t.float()).replace("torch.float32", "torch.float64")
    return tensor_literal(t)


def laid_out(value: torch.Tensor, layout: str) -> torch.Tensor:
    """A new tensor equal to `value`, in `layout` (see LAYOUTS); a layout that does not
    apply to the rank is contiguous. Never shares memory with `value`."""
    r = value.dim()
    value = value.clone()
    filler = True if value.dtype == torch.bool else 99
    if layout == "transposed" and r >= 2:
        return value.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "sliced" and r >= 1:  # rows 1..n of a tensor with two more rows
        big = torch.full((value.shape[0] + 2, *value.shape[1:]), filler, dtype=value.dtype)
        big[1:1 + value.shape[0]] = value
        return big[1:1 + value.shape[0]]
    if layout == "stepped" and r >= 1:  # every other element along the last dim
        big = torch.full((*value.shape[:-1], 2 * value.shape[-1]), filler,
                         dtype=value.dtype)
        big[..., ::2] = value
        return big[..., ::2]
    if layout == "channels_last" and r == 4:
        return value.contiguous(memory_format=torch.channels_last)
    return value


@dataclass
class ModuleProgram:
    state: list[State]
    inputs: list[Input]
    body: list[str]
    outputs: list[str]
    held: list[str] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.inputs[0].layouts) if self.inputs else 3

    def class_source(self) -> str:
        lines = ["class Fuzzed(torch.nn.Module):", "    def __init__(self):",
                 "        super().__init__()"]
        lines += [f"        {s.source()}" for s in self.state]
        params = ", ".join(["self"] + [i.name for i in self.inputs])
        lines += ["", f"    def forward({params}):"]
        lines += [f"        {s}" for s in self.body] or ["        pass"]
        lines.append(f"        return {', '.join(self.outputs)}"
                     f"{',' if len(self.outputs) == 1 else ''}")
        lines += ["", "", "def held(model):",
                  f"    return [{', '.join(self.held)}]"]
        return "\n".join(lines) + "\n"

    def calls_source(self) -> str:
        lines = ["calls = ["]
        for c in range(self.calls):
            lines.append("    [")
            lines += [f"        ({_literal(i.values[c])}, {i.layouts[c]!r})," for i in self.inputs]
            lines.append("    ],")
        lines.append("]")
        return "\n".join(lines)

    def reproducer(self) -> str:
        return "\n".join(["import torch", "from fuzz_modules_check import assert_module_matches_eager",
                          "", "", self.class_source(), self.calls_source(),
                          "assert_module_matches_eager(Fuzzed, held, calls)"]) + "\n"

    def __repr__(self) -> str:
        return "\n" + self.reproducer()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def build(self) -> tuple[type, Callable, list[list[tuple[torch.Tensor, str]]]]:
        """The class and held() exec'd from source (lines registered for tracebacks), and
        the calls' (value, layout) pairs."""
        source = self.class_source()
        filename = f"<fuzzed-module-{id(self)}-{len(linecache.cache)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = {"torch": torch}
        exec(compile(source, filename, "exec"), namespace)
        calls = [[(i.values[c], i.layouts[c]) for i in self.inputs]
                 for c in range(self.calls)]
        return namespace["Fuzzed"], namespace["held"], calls


# ----------------------------------------------------------------------------- generator
class _ModuleGen(_Gen):
    def __init__(self, draw: Callable) -> None:
        self.state: list[State] = []
        self.inputs: list[Input] = []
        self.locals: list[str] = []  # names bound in forward to values
        self.outs: list[str] = []  # expressions returned
        self.n_calls = 3
        super().__init__(draw)

    def _fresh_namespace(self) -> dict[str, Any]:
        module = torch.nn.Module()
        for s in getattr(self, "state", []):
            if s.view:
                module.register_buffer(s.name, eval(s.view, {"self": module}))
            elif s.param:
                setattr(module, s.name, torch.nn.Parameter(
                    s.value.clone(), requires_grad=s.requires_grad))
            else:
                module.register_buffer(s.name, s.value.clone())
        ns: dict[str, Any] = {"torch": torch, "self": module}
        for i in getattr(self, "inputs", []):
            ns[i.name] = laid_out(i.values[0], i.layouts[0])
        return ns

    # -- state and inputs
    def dtype(self, table: list[tuple[str, int]]) -> torch.dtype:
        return getattr(torch, self.weighted(table))

    def float_dtype(self) -> torch.dtype:
        return self.dtype([("float32", 5), ("float64", 4), ("float16", 1)])

    def add_state(self, prefix: str, value: torch.Tensor, param: bool = False) -> str:
        name = self.fresh(prefix)
        grad = param and value.dtype.is_floating_point and self.flag(0.3)
        self.state.append(State(name, value, param, grad))
        if param:
            setattr(self.ns["self"], name, torch.nn.Parameter(value.clone(),
                                                              requires_grad=grad))
        else:
            self.ns["self"].register_buffer(name, value.clone())
        return f"self.{name}"

    def new_state(self, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> str:
        dtype = dtype or self.float_dtype()
        param = dtype.is_floating_point and self.flag(0.35)
        return self.add_state("w" if param else "b", self.values(shape, dtype), param)

    def alias_state(self) -> str:
        """A buffer registered as a view of other state (the halves of a KV cache)."""
        names = [n for n in self.state_names() if n.startswith("self.")
                 and not n.startswith("self.n")]
        if not names:
            raise _Rejected("no state to view")
        view = self.state_view(self.pick(names), alias=True)
        name = self.fresh("v")
        value = self.eval(view)
        self.state.append(State(name, value.detach().clone(), view=view))
        self.ns["self"].register_buffer(name, value)
        return f"self.{name}"

    def pointer(self) -> str:
        """A 0-d int64 buffer holding a write position (an existing one or a new one)."""
        ptrs = [f"self.{s.name}" for s in self.state if s.name.startswith("ptr")]
        if ptrs and self.flag(0.7):
            return self.pick(ptrs)
        return self.add_state("ptr", torch.tensor(self.int(0, 5)))

    def add_input(self) -> str:
        name = self.fresh("x")
        shape = self.shape()
        dtype = self.dtype([("float32", 6), ("float64", 3), ("float16", 1), ("int64", 1)])
        values = [self.values(shape, dtype) for _ in range(self.n_calls)]
        layouts = [self.weighted([("contiguous", 3), ("transposed", 3), ("sliced", 2),
                                  ("stepped", 2), ("channels_last", 3 if len(shape) == 4
                                                   else 0)])
                   for _ in range(self.n_calls)]
        self.inputs.append(Input(name, values, layouts))
        self.ns[name] = laid_out(values[0], layouts[0])
        return name

    def state_names(self, floating: bool = False) -> list[str]:
        """State (and views of it bound in forward), pointers left out."""
        names = [f"self.{s.name}" for s in self.state if not s.name.startswith("ptr")]
        return [n for n in names + self.views
                if not floating or self.eval(n).dtype.is_floating_point]

    # -- values read from inputs and state
    def source(self) -> str:
        """An expression of the inputs, locals or state, as values to write."""
        pool = [i.name for i in self.inputs] + self.locals
        if self.flag(0.2) and self.state_names():
            pool += self.state_names()
        base = self.pick(pool) if pool and self.flag(0.9) else self.add_input()
        t = self.eval(base)
        r = t.dim()
        # means of float64 only: XLA:CPU divides float32 by a constant as a product by
        # its reciprocal, an ulp from eager, which a float64 buffer keeping it shows
        exact_mean = t.dtype == torch.float64
        ops = [("", 6), ("[0]", 3 if r else 0), (".sum(0)", 2 if r else 0),
               (".mean(-1)", 2 if r and exact_mean else 0),
               (".t()", 2 if r == 2 else 0), (" * 0.5", 2), (".double()", 1),
               (".float()", 1), (".mean((2, 3))", 3 if r == 4 and exact_mean else 0),
               (".sum((2, 3))", 3 if r == 4 else 0), (".abs() + 1", 1), (".sum()", 1)]
        return f"{base}{self.weighted(ops)}"

    def target_for(self, value: str, dtype: torch.dtype | None = None) -> str:
        """State that `value` broadcasts to (its shape), or new state of its shape."""
        shape = tuple(self.eval(value).shape)
        fits = [n for n in self.state_names(floating=True)
                if _broadcasts(shape, tuple(self.eval(n).shape))]
        if fits and self.flag(0.6):
            return self.pick(fits)
        if self.state and "alias_state" not in SKIP and self.flag(0.15):
            alias = self.alias_state()
            if _broadcasts(shape, tuple(self.eval(alias).shape)):
                return alias
        return self.new_state(shape, dtype)

    # -- statements
    def statement(self) -> None:
        kind = self.weighted([("ring", 5), ("running", 3), ("counter", 2), ("ema", 2),
                              ("data", 2), ("pieces", 3), ("compute", 3),
                              ("input_write", 1), ("bound_view", 2)])
        getattr(self, f"stmt_{kind}")()

    def stmt_ring(self) -> None:
        """A ring buffer or cache written at a position held in a buffer, the position
        moved on in the same or a later statement."""
        value = self.source()
        v = self.eval(value)
        size = self.int(2, 5)
        dim = 1 if v.dim() and self.flag(0.3) else 0
        shape = (size, *v.shape) if dim == 0 else (v.shape[0], size, *v.shape[1:])
        caches = [n for n in self.state_names(floating=True)
                  if tuple(self.eval(n).shape) == shape]
        cache = self.pick(caches) if caches and self.flag(0.5) else \
            self.new_state(shape, self.float_dtype())
        ptr = self.pointer()
        at = self.weighted([(f"{ptr} % {size}", 5), (f"{ptr}.remainder({size})", 1),
                            (f"({ptr} + 1) % {size}", 1), ("local", 3),
                            (f"{ptr}.item() % {size}", 1)])
        if at == "local":  # p = self.ptr % T; ...; return self.kv[p]
            at = self.fresh("p")
            self.emit(f"{at} = {ptr} % {size}")
            if self.flag(0.6):
                self.outs.append(f"{cache}[{at}]" if dim == 0 else f"{cache}[:, {at}]")
        how = self.weighted([("setitem", 5), ("index_copy", 1), ("inplace", 2)])
        if how == "index_copy" and dim == 0:
            self.emit(f"{cache}.index_copy_(0, ({at}).reshape(1), "
                      f"({value}).unsqueeze(0).to({cache}.dtype))")
        elif how == "inplace":
            items = f"{at}" if dim == 0 else f":, {at}"
            self.emit(f"{cache}[{items}].{self.pick(['add_', 'copy_', 'mul_'])}({value})")
        else:
            items = f"{at}" if dim == 0 else f":, {at}"
            self.emit(f"{cache}[{items}] = {value}")
        if self.flag(0.7):
            self.emit(self.pick([f"{ptr} += 1", f"{ptr}.add_(1)",
                                 f"{ptr}.copy_(({ptr} + 1) % {size})"]))
        if self.flag(0.3):  # the row just written, read back
            self.outs.append(f"{cache}[({ptr} - 1) % {size}]" if dim == 0
                             else f"{cache}[:, {ptr} % {size}]")

    def stmt_running(self) -> None:
        """Running statistics: a momentum update of a buffer from the inputs."""
        value = self.source()
        target = self.target_for(value)
        m = self.pick(["0.1", "0.9", "0.5", "0.25"])
        form = self.pick(["mul_add", "lerp", "iadd", "var", "masked", "clamp", "copy"])
        if form == "mul_add":
            self.emit(f"{target}.mul_(1 - {m}).add_({value}, alpha={m})")
        elif form == "lerp":
            self.emit(f"{target}.lerp_(({value}).to({target}.dtype), {m})")
        elif form == "iadd":
            self.emit(f"{target} += {m} * ({value} - {target})")
        elif form == "var":
            self.emit(f"{target}.mul_({m}).addcmul_({value}, {value}, value=1 - {m})")
        elif form == "masked":
            self.emit(f"{target}.masked_fill_({value} > 0, {self.pick(['0', '-1.5'])})")
        elif form == "clamp":
            self.emit(f"{target}.add_({value}).clamp_(min={self.int(-4, 0)}, "
                      f"max={self.int(1, 9)})")
        else:
            self.emit(f"{target}.copy_({value})")

    def stmt_counter(self) -> None:
        counters = [f"self.{s.name}" for s in self.state if s.name.startswith("n")]
        n = self.pick(counters) if counters and self.flag(0.5) else \
            self.add_state("n", torch.tensor(0, dtype=self.pick([torch.int64,
                                                                 torch.float64])))
        x = self.pick([i.name for i in self.inputs]) if self.inputs else self.add_input()
        self.emit(self.pick([f"{n} += 1", f"{n}.add_(1)", f"{n}.add_({x}.shape[0])",
                             f"{n}.fill_({n} + 2)"]))
        if self.flag(0.3):
            self.outs.append(n)

    def stmt_ema(self) -> None:
        """An EMA of a parameter (or state) into a buffer, under no_grad."""
        sources = self.state_names(floating=True)
        src = self.pick(sources) if sources and self.flag(0.7) else \
            self.new_state(self.shape(3), self.float_dtype())
        shape = tuple(self.eval(src).shape)
        emas = [n for n in self.state_names(floating=True)
                if n != src and tuple(self.eval(n).shape) == shape]
        ema = self.pick(emas) if emas and self.flag(0.5) else \
            self.add_state("ema", self.values(shape, self.float_dtype()))
        d = self.pick(["0.9", "0.99", "0.5"])
        body = self.pick([f"{ema}.mul_({d}).add_({src}, alpha=1 - {d})",
                          f"{ema}.lerp_({src}.to({ema}.dtype), 1 - {d})",
                          f"{ema}.copy_({d} * {ema} + (1 - {d}) * {src})"])
        self.emit(f"with torch.no_grad(): {body}")

    def stmt_data(self) -> None:
        """A write through `.data` of a parameter (or buffer)."""
        names = self.state_names(floating=True)
        params = [n for n in names if n.startswith("self.w")]
        target = self.pick(params) if params and self.flag(0.7) else (
            self.pick(names) if names and self.flag(0.5) else
            self.add_state("w", self.values(self.shape(3), self.float_dtype()), True))
        t = self.eval(target)
        form = self.pick(["mul", "add", "copy", "setitem", "clamp"])
        if form == "mul":
            self.emit(f"{target}.data.mul_({self.pick(['0.9', '0.5', '2'])})")
        elif form == "add":
            self.emit(f"{target}.data.add_({self.source()})")
        elif form == "copy":
            self.emit(f"{target}.data.copy_({self.source()})")
        elif form == "setitem" and t.dim():
            self.emit(f"{target}.data[{self.int(0, t.shape[0] - 1)}] = {self.source()}")
        else:
            self.emit(f"{target}.data.clamp_({self.int(-3, 0)}, {self.int(1, 4)})")

    def stmt_pieces(self) -> None:
        """In-place ops on the results of split/chunk/unbind of state."""
        names = self.state_names()
        target = self.pick(names) if names and self.flag(0.7) else \
            self.new_state(self.shape(3), self.float_dtype())
        t = self.eval(target)
        if not t.dim() or not t.shape[0]:
            raise _Rejected("0-d")
        d = self.int(0, t.dim() - 1)
        n = t.shape[d]
        op, arg = self.pick([("split", f"{self.int(1, max(n, 1))}, {d}"),
                             ("chunk", f"{self.int(1, max(n, 1))}, {d}"),
                             ("unbind", f"{d}")])
        pieces = f"{target}.{op}({arg})"
        count = len(self.eval(pieces))
        update = self.pick(["mul_(0.5)", "add_(1)", "neg_()", "zero_()", "fill_(3)",
                            "copy_({other})", "add_({src})"])
        if self.flag(0.3):
            self.emit(f"for p in {pieces}: p.{update.format(other='p * 2', src='1')}")
            return
        i = self.int(0, count - 1)
        if "{other}" in update:
            j = self.int(0, count - 1)
            if i == j:
                raise _Rejected("the same piece")
            self.emit(f"a, b = {pieces}[{i}], {pieces}[{j}]")
            self.emit("a.copy_(b)")
            return
        if "{src}" in update:
            update = update.format(src=self.source())
        self.emit(f"{pieces}[{i}].{update}")

    def stmt_compute(self) -> None:
        """A value computed from inputs and state, returned or used later."""
        a = self.source()
        names = self.state_names()
        b = self.pick(names) if names and self.flag(0.7) else self.source()
        op = self.pick(["+", "*", "-"])
        name = self.fresh("y")
        self.emit(f"{name} = {a} {op} {b}")
        self.locals.append(name)
        if self.flag(0.7):
            self.outs.append(name)

    def stmt_input_write(self) -> None:
        x = self.pick([i.name for i in self.inputs]) if self.inputs else self.add_input()
        if not self.eval(x).is_floating_point():
            raise _Rejected("int input")
        names = self.state_names()
        value = self.pick(names) if names and self.flag(0.5) else "1"
        t = self.eval(x)
        view = self.weighted([("", 4), ("[0]", 2 if t.dim() else 0),
                              ("[..., -1]", 1 if t.dim() else 0), (".t()", 1 if t.dim() == 2
                                                                   else 0)])
        self.emit(f"{x}{view}.{self.pick(['add_', 'mul_', 'sub_', 'copy_'])}({value})")

    def stmt_bound_view(self) -> None:
        """A view of state bound in forward and returned: later calls write it."""
        names = self.state_names()
        target = self.pick(names) if names else self.new_state(self.shape(3))
        view = self.state_view(target)
        if self.flag(0.5):
            name = self.fresh("v")
            self.emit(f"{name} = {view}")
            self.views.append(name)
            view = name
        self.outs.append(view)

    def state_view(self, target: str, alias: bool = False) -> str:
        t = self.eval(target)
        r = t.dim()
        view = self.weighted([("", 0 if alias else 2), ("[0]", 3 if r and t.shape[0] else 0),
                              (".t()", 2 if r == 2 else 0), ("[1:]", 2 if r else 0),
                              (".unbind(0)[-1]", 1 if r and t.shape[0] else 0),
                              (".chunk(2)[0]", 1 if r and t.shape[0] else 0),
                              (".view(-1)", 1), (".data", 0 if alias else 1),
                              (".narrow(-1, 1, 1)", 1 if r and t.shape[-1] > 1 else 0),
                              (".unsqueeze(0)", 1)])
        expr = f"{target}{view}"
        self.eval(expr)
        return expr

    # -- whole program
    def program(self) -> ModuleProgram:
        self.n_calls = self.weighted([(3, 3), (4, 1)])
        for _ in range(self.weighted([(1, 3), (2, 3), (3, 1)])):
            self.add_input()
        while len(self.body) < MAX_STATEMENTS and self.draw(_module_statement(self)):
            pass
        outputs = list(dict.fromkeys(self.outs))
        for name in self.locals:
            if name not in outputs and self.flag(0.3):
                outputs.append(name)
        names = self.state_names()
        if names and self.flag(0.3):
            outputs.append(self.state_view(self.pick(names)))
        if not outputs:
            outputs.append(self.state_view(self.pick(names)) if names and self.flag(0.5)
                           else f"{self.pick([i.name for i in self.inputs])}.sum()")
        held = []
        for _ in range(self.weighted([(0, 1), (1, 2), (2, 2)])):
            names = [n for n in self.state_names() if n.startswith("self.")]
            if names:
                held.append(self.state_view(self.pick(names)).replace("self.", "model.", 1))
        used = "\n".join(self.body + outputs)
        inputs = [i for i in self.inputs if i.name in used or i is self.inputs[0]]
        return ModuleProgram(self.state, inputs, self.body, outputs, held)


@st.composite
def _module_statement(draw: Callable, gen: _ModuleGen) -> bool:
    """One more statement, or False to end the body; each a span hypothesis can delete."""
    gen.attempts += 1
    if gen.attempts > 3 * MAX_STATEMENTS or (len(gen.body) >= 2 and not gen.flag(0.8)):
        return False
    outer, gen.draw = gen.draw, draw
    kept = (len(gen.state), len(gen.inputs), len(gen.body), len(gen.locals), len(gen.outs),
            len(gen.views))
    try:
        gen.statement()
    except _Rejected:
        del gen.state[kept[0]:], gen.inputs[kept[1]:], gen.body[kept[2]:]
        del gen.locals[kept[3]:], gen.outs[kept[4]:], gen.views[kept[5]:]
        gen.replay()
    finally:
        gen.draw = outer
    return True


@st.composite
def module_programs(draw: Callable) -> ModuleProgram:
    """A random module with state and its calls, valid for eager PyTorch (first call)."""
    return _ModuleGen(draw).program()

