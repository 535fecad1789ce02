"""Random PyTorch programs with in-place mutation, as readable Python source.

`programs()` is a hypothesis strategy of `Program`s. A program is a function body of a few
statements over a handful of input tensors: writes through every index category of
docs/index-categories.md (ints, negative ints, slices with steps, `...`, `None`, bool masks,
integer tensors, mixed advanced indexing, runtime positions), in-place ops on views and
views of views, whole-tensor ops, index ops, and reads interleaved between the writes (a
view bound early and read late shows a stale view). Its `repr` is a runnable reproducer.

The generator runs every statement eagerly on shadow tensors as it goes: a statement eager
rejects is dropped, and the shadow values give the shapes the next statements index. It
keeps programs whose eager result is defined: no plain setitem through duplicate indices
with differing values, no operand that partially overlaps the memory it is written into.

Values are small distinct integers (floats included), so float16/bfloat16 arithmetic stays
exact and any element written to the wrong place shows.
"""

from __future__ import annotations

import itertools
import linecache
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
from hypothesis import strategies as st

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
DTYPES = (torch.float32, torch.int64, torch.float16, torch.bfloat16, torch.bool)
_DTYPE_NAMES = {torch.float32: "torch.float32", torch.float16: "torch.float16",
                torch.bfloat16: "torch.bfloat16", torch.int64: "torch.int64",
                torch.int32: "torch.int32", torch.bool: "torch.bool"}
MAX_NUMEL = 48
MAX_STATEMENTS = 9
# Features left out, by name (OUTOFPLACE_FUZZ_SKIP=diagonal,addcmul_,advanced_read): any
# statement kind, view op, in-place op, index kind or read kind the generator names, and
# `constant_<dtype>` for inline tensor constants of that dtype (passed as arguments instead).
SKIP = frozenset(filter(None, os.environ.get("OUTOFPLACE_FUZZ_SKIP", "").split(",")))
# Programs ending in an optimizer-style update (`stmt_optimizer`):
# OUTOFPLACE_FUZZ_OPTIMIZER=1 (long_run.py --optimizer; `make test` sets it).
OPTIMIZER_STEPS = os.environ.get("OUTOFPLACE_FUZZ_OPTIMIZER") == "1"
# Views at runtime positions (`x[:, pos]` bound, written through, read after writes) in
# view chains: OUTOFPLACE_FUZZ_POSITION_VIEWS=1 (long_run.py --position-views; `make
# test` sets it).
POSITION_VIEWS = os.environ.get("OUTOFPLACE_FUZZ_POSITION_VIEWS") == "1"
_counter = itertools.count()


# ------------------------------------------------------------------------------- program
@dataclass
class Arg:
    """An argument: its values and how it is laid out in memory (`layout`):
    () contiguous; ("offset", k) at storage offset k; ("strided",) transposed (rank >= 2)
    or every other element (rank 1); ("shared", g) in one buffer with every other
    argument of group g, one after another; ("same", name) the very tensor of argument
    `name`."""
    name: str
    value: torch.Tensor
    keyword: bool = False
    layout: tuple = ()


def _filler(n: int, dtype: torch.dtype) -> torch.Tensor:
    """Values no program computes, around and between an argument's elements."""
    return torch.full((n,), True if dtype == torch.bool else 99, dtype=dtype)


def laid_out(value: torch.Tensor, layout: tuple) -> torch.Tensor:
    """A tensor equal to `value` in the layout ("offset", k) or ("strided",)."""
    if layout and layout[0] == "offset":
        k = layout[1]
        flat = torch.cat([_filler(k, value.dtype), value.reshape(-1)])
        return flat[k:].view(value.shape)
    if layout and layout[0] == "strided" and value.dim() >= 2:
        return value.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout and layout[0] == "strided" and value.dim() == 1:
        pairs = torch.stack([value, _filler(value.numel(), value.dtype)], 1)
        return pairs.reshape(-1)[::2]
    return value.clone()


def fresh_values(value: torch.Tensor, call: int) -> torch.Tensor:
    """Other values of the same kind for the `call`-th call (0: the values themselves)."""
    if not call:
        return value
    if value.dtype == torch.bool:
        return value ^ bool(call % 2)
    return value + call


def build_args(args: list[Arg], call: int = 0, layouts: bool = True
               ) -> tuple[tuple, dict]:
    """Fresh positional and keyword tensors for `args`, in their layouts; for a later
    `call`, data inputs (x...) and values (w...) hold other values. layouts=False: all
    contiguous and separate (a call in another layout than the traced one)."""
    built: dict[str, torch.Tensor] = {}
    groups: dict[Any, list[Arg]] = {}
    for a in args:
        value = fresh_values(a.value, call) if a.name[0] in "xw" else a.value
        kind = a.layout[0] if a.layout and layouts else None
        if kind == "same":
            built[a.name] = built[a.layout[1]]
        elif kind == "shared":
            groups.setdefault(a.layout[1], []).append(a)
            built[a.name] = value
        else:
            built[a.name] = laid_out(value, a.layout if layouts else ())
    for members in groups.values():
        buffer = torch.cat([built[a.name].reshape(-1) for a in members])
        start = 0
        for a in members:
            n = built[a.name].numel()
            built[a.name] = buffer[start:start + n].view(built[a.name].shape)
            start += n
    positional = tuple(built[a.name] for a in args if not a.keyword)
    keyword = {a.name: built[a.name] for a in args if a.keyword}
    return positional, keyword


@dataclass
class Program:
    """A generated program: its arguments, body statements and returned names."""

    args: list[Arg]
    body: list[str]
    outputs: list[str]

    def function_source(self) -> str:
        ordered = [a for a in self.args if not a.keyword] + \
            [a for a in self.args if a.keyword]
        params = ", ".join(a.name for a in ordered)
        lines = [f"def fuzzed({params}):"]
        lines += [f"    {s}" for s in self.body] or ["    pass"]
        if self.outputs:
            lines.append(f"    return {', '.join(self.outputs)}{',' if len(self.outputs) == 1 else ''}")
        return "\n".join(lines) + "\n"

    def args_source(self) -> str:
        if any(a.layout for a in self.args):  # rebuilt in their layouts
            ordered = [a for a in self.args if not a.keyword] + \
                [a for a in self.args if a.keyword]
            lines = [f"    Arg({a.name!r}, {tensor_literal(a.value)}, {a.keyword}, "
                     f"{a.layout!r})," for a in ordered]
            return "\n".join(["args, kwargs = build_args([", *lines, "])"])
        positional = [f"    {tensor_literal(a.value)}," for a in self.args if not a.keyword]
        keyword = [f"    {a.name}={tensor_literal(a.value)}," for a in self.args if a.keyword]
        return "\n".join(["args = (", *positional, ")", "kwargs = dict(", *keyword, ")"])

    def reproducer(self) -> str:
        return "\n".join([
            "import torch",
            "from differential import assert_matches_eager",
            *(["from fuzz_programs import Arg, build_args"]
              if any(a.layout for a in self.args) else []),
            "",
            self.function_source(),
            self.args_source(),
            "assert_matches_eager(fuzzed, *args, **kwargs)",
        ]) + "\n"

    def __repr__(self) -> str:
        return "\n" + self.reproducer()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How hypothesis prints a failing example: the runnable reproducer."""
        printer.text(repr(self))

    def build(self, call: int = 0, layouts: bool = True) -> tuple[Callable, tuple, dict]:
        """The function (exec'd from its source, lines registered for tracebacks), its
        positional arguments and its keyword arguments, fresh copies in their layouts
        (other values for a later `call`; see build_args)."""
        source = self.function_source()
        filename = f"<fuzzed-{next(_counter)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = {"torch": torch}
        exec(compile(source, filename, "exec"), namespace)
        args, kwargs = build_args(self.args, call, layouts)
        # Ordered as the function's parameters: positional ones, then keywords.
        return namespace["fuzzed"], args, kwargs


def tensor_literal(t: torch.Tensor) -> str:
    dtype = _DTYPE_NAMES[t.dtype]
    values = t.tolist()
    if t.dtype in FLOATS:
        values = _floats(values)
    if t.numel() == 0:
        return f"torch.empty({tuple(t.shape)}, dtype={dtype})"
    return f"torch.tensor({values!r}, dtype={dtype})"


def _floats(values: Any) -> Any:
    if isinstance(values, list):
        return [_floats(v) for v in values]
    return float(values)


# ------------------------------------------------------------------------- shadow memory
def storage_offsets(t: torch.Tensor) -> torch.Tensor:
    """For every element of `t`, its position in t's storage."""
    n = t.untyped_storage().nbytes() // max(t.element_size(), 1)
    return torch.arange(max(n, 1)).as_strided(t.shape, t.stride(), t.storage_offset())


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def operand_is_safe(target: torch.Tensor, written: torch.Tensor, operand: Any) -> bool:
    """An operand read while `written` (storage offsets of `target`) is written: from
    other memory, or the very elements written in the same layout (`x.add_(x)`)."""
    if not isinstance(operand, torch.Tensor) or not same_storage(target, operand):
        return True
    theirs = storage_offsets(operand)
    if not set(theirs.flatten().tolist()) & set(written.flatten().tolist()):
        return True
    try:
        return bool((theirs.broadcast_to(written.shape) == written).all())
    except RuntimeError:
        return False


# ----------------------------------------------------------------------------- generator
class _Rejected(Exception):
    """A statement the generator drops (eager rejects it or its result is undefined)."""


def _fmt_slice(start: int | None, stop: int | None, step: int | None) -> str:
    text = f"{'' if start is None else start}:{'' if stop is None else stop}"
    if step is not None:
        text += f":{step}"
    return text


class _Gen:
    def __init__(self, draw: Callable) -> None:
        self.draw = draw
        self.args: list[Arg] = []
        self.body: list[str] = []
        self.roots: list[str] = []  # tensors that own memory: inputs and intermediates
        self.views: list[str] = []  # names bound to views of them
        self.reads: list[str] = []  # names holding values read mid-program
        self.names = itertools.count()
        self.attempts = 0
        self.ns = self._fresh_namespace()

    # -- draws (each shrinks towards the simplest choice)
    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def flag(self, p: float) -> bool:
        """True with probability about p; shrinks to False."""
        return self.draw(st.integers(0, 99)) >= round(100 * (1 - p))

    def pick(self, options: list | tuple) -> Any:
        options = [o for o in options if not (isinstance(o, str) and o in SKIP)]
        if not options:
            raise _Rejected("nothing to choose from")
        return self.draw(st.sampled_from(list(options)))

    def weighted(self, table: list[tuple[Any, int]]) -> Any:
        """One of the options, with integer weights; shrinks towards the first."""
        table = [(o, 0 if isinstance(o, str) and o in SKIP else w) for o, w in table]
        total = sum(w for _, w in table)
        if total <= 0:
            raise _Rejected("every option is skipped")
        r = self.int(0, total - 1)
        for option, weight in table:
            if r < weight:
                return option
            r -= weight
        raise AssertionError

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.names)}"

    # -- shadow execution
    def _fresh_namespace(self) -> dict[str, Any]:
        ns: dict[str, Any] = {"torch": torch}
        args = self.args if hasattr(self, "args") else []
        positional, keyword = build_args(args)
        ns.update(zip([a.name for a in args if not a.keyword], positional))
        ns.update(keyword)
        return ns

    def replay(self) -> None:
        self.ns = self._fresh_namespace()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for statement in self.body:
                exec(statement, self.ns)

    def eval(self, expr: str) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return eval(expr, self.ns)
        except Exception as error:  # noqa: BLE001 - eager rejects it: drop the statement
            raise _Rejected(str(error)) from None

    def emit(self, statement: str) -> None:
        """Runs the statement on the shadow tensors and keeps it, or drops it."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(statement, self.ns)
        except Exception as error:  # noqa: BLE001
            self.replay()
            raise _Rejected(str(error)) from None
        self.body.append(statement)

    # -- inputs
    def values(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        seed = self.int(0, 255)
        g = torch.Generator().manual_seed(seed)
        n = 1
        for d in shape:
            n *= d
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        base = torch.randperm(max(n, 1), generator=g)[:n] - n // 2
        if seed % 3 == 0:
            base = base + 1  # not always centred on zero
        return base.reshape(shape).to(dtype)

    def shape(self, max_rank: int = 4) -> tuple[int, ...]:
        rank = self.weighted([(r, w) for r, w in [(2, 5), (1, 3), (3, 4), (0, 1), (4, 1)]
                              if r <= max_rank])
        limit = {0: 1, 1: 8, 2: 6, 3: 4, 4: 3}[rank]
        dims = [self.int(1, limit) for _ in range(rank)]
        while rank and _numel(dims) > MAX_NUMEL:
            dims[dims.index(max(dims))] -= 1
        return tuple(dims)

    def add_arg(self, prefix: str, value: torch.Tensor, keyword_ok: bool = True) -> str:
        name = self.fresh(prefix)
        self.args.append(Arg(name, value, keyword=keyword_ok and self.flag(0.05)))
        self.ns[name] = value.clone()
        return name

    def data_input(self) -> str:
        earlier = [a for a in self.args if a.name.startswith("x")]
        layout = self.weighted([("contiguous", 12), ("offset", 3), ("strided", 3),
                                ("same", 1 if earlier else 0),
                                ("shared", 2 if earlier else 0)])
        if layout == "same":  # one tensor passed for two inputs
            other = self.pick(earlier)
            name = self.add_arg("x", other.value, keyword_ok=False)
            self.args[-1].layout = ("same", other.name)
            self.roots.append(name)
            return name
        dtype = getattr(torch, self.weighted([("float32", 5), ("int64", 2), ("float16", 2),
                                              ("bfloat16", 2), ("bool", 1)]))
        if layout == "shared":  # two inputs in one buffer
            other = self.pick(earlier)
            dtype = other.value.dtype
            if other.layout and other.layout[0] != "shared":
                other = None
        name = self.add_arg("x", self.values(self.shape(), dtype), keyword_ok=False)
        if layout == "offset":
            self.args[-1].layout = ("offset", self.int(1, 5))
        elif layout == "strided":
            self.args[-1].layout = ("strided",)
        elif layout == "shared" and other is not None:
            other.layout = other.layout or ("shared", other.name)
            self.args[-1].layout = other.layout
        self.roots.append(name)
        return name

    # -- index material
    def index_tensor(self, size: int, count: int, unique: bool) -> torch.Tensor:
        if size == 0:
            return torch.zeros(0, dtype=torch.int64)
        if unique:
            count = min(count, size)
            chosen = self.draw(st.lists(st.integers(0, size - 1), min_size=count,
                                        max_size=count, unique=True))
        else:
            chosen = self.draw(st.lists(st.integers(0, size - 1), min_size=count,
                                        max_size=count))
        signs = [i - size if self.flag(0.25) else i for i in chosen]
        return torch.tensor(signs, dtype=torch.int64)

    def tensor_operand(self, value: torch.Tensor, prefix: str) -> str:
        """An index or value tensor, passed as an argument (runtime) or inline (constant)."""
        if f"constant_{str(value.dtype).split('.')[-1]}" not in SKIP and self.flag(0.3):
            return tensor_literal(value)
        return self.add_arg(prefix, value)

    def basic_items(self, shape: tuple[int, ...], allow_int: bool = True) -> list[str]:
        """Index items for each dim: ints, negative ints, slices with steps, `:`."""
        items = []
        for n in shape:
            kind = self.weighted([("full", 3), ("int", 3 if allow_int and n else 0),
                                  ("slice", 4)])
            if kind == "full":
                items.append(":")
            elif kind == "int":
                i = self.int(0, n - 1)
                items.append(str(i - n if self.flag(0.35) else i))
            else:
                start = self.pick([None, *range(-n - 1, n + 2)]) if self.flag(0.8) else None
                stop = self.pick([None, *range(-n - 1, n + 2)]) if self.flag(0.6) else None
                step = self.weighted([(None, 4), (2, 3), (1, 1), (3, 1)])
                items.append(_fmt_slice(start, stop, step))
        return items

    def dress(self, items: list[str]) -> list[str]:
        """Trailing `:` dropped, some `:` run replaced by `...`, `None`s inserted."""
        if self.flag(0.4):
            while items and items[-1] == ":":
                items.pop()
        if self.flag(0.25):
            at = self.int(0, len(items))
            run = self.int(0, len(items) - at)
            if all(i == ":" for i in items[at:at + run]):
                items = items[:at] + ["..."] + items[at + run:]
        for _ in range(self.weighted([(0, 6), (1, 2), (2, 1)])):
            items.insert(self.int(0, len(items)), "None")
        return items

    def advanced_items(self, shape: tuple[int, ...], unique: bool) -> list[str]:
        """Items with at least one advanced index: int tensors, bool masks, lists,
        runtime positions (0-d tensors), mixed with basic items."""
        if not shape:
            return []
        items = self.basic_items(shape)
        kinds = [("int_tensor", 4), ("mask", 3), ("position_index", 3), ("list", 1),
                 ("int_tensor_2d", 1)]
        count = self.weighted([(1, 6), (2, 2)])
        dims = sorted(set(self.int(0, len(shape) - 1) for _ in range(count)))
        for d in dims:
            n = shape[d]
            kind = self.weighted(kinds)
            if kind == "int_tensor":
                items[d] = self.tensor_operand(
                    self.index_tensor(n, self.int(1, 4), unique), "i")
            elif kind == "int_tensor_2d":
                t = self.index_tensor(n, 4, unique)
                items[d] = self.tensor_operand(t.reshape(2, -1) if t.numel() % 2 == 0
                                               else t, "i")
            elif kind == "list":
                items[d] = repr(self.index_tensor(n, self.int(1, 3), unique).tolist())
            elif kind == "mask":
                mask = torch.tensor(self.draw(st.lists(st.booleans(), min_size=n,
                                                       max_size=n)), dtype=torch.bool)
                items[d] = self.tensor_operand(mask, "m")
            else:
                i = self.int(0, n - 1) if n else 0
                pos = torch.tensor(i - n if self.flag(0.3) else i,
                                   dtype=self.pick([torch.int64, torch.int32]))
                items[d] = self.add_arg("pos", pos)
        return items

    def position_items(self, shape: tuple[int, ...]) -> list[str]:
        """`c[:, pos]`, `c[pos]`, `c[..., pos]`, `c[pos, 1]`: runtime positions among
        full slices and ints, the form traced as index_put_ with 0-d indices."""
        if not shape:
            return []
        items = [":"] * len(shape)
        for d in sorted(set(self.int(0, len(shape) - 1)
                            for _ in range(self.weighted([(1, 5), (2, 2)])))):
            n = shape[d]
            if n == 0:
                continue
            i = self.int(0, n - 1)
            pos = torch.tensor(i - n if self.flag(0.3) else i,
                               dtype=self.weighted([(torch.int64, 4), (torch.int32, 1)]))
            items[d] = self.add_arg("pos", pos)
        if self.flag(0.2):
            ints = [k for k, item in enumerate(items) if item == ":"]
            if ints:
                k = self.pick(ints)
                items[k] = str(self.int(0, shape[k] - 1)) if shape[k] else ":"
        if self.flag(0.4):
            while items and items[-1] == ":":
                items.pop()
        elif self.flag(0.3) and items and items[0] == ":":
            run = 1
            while run < len(items) and items[run] == ":":
                run += 1
            items = ["..."] + items[run:]
        return items

    # -- views
    def view_step(self, expr: str, t: torch.Tensor) -> str | None:
        """One view op applied to `expr` (shadow value `t`), as source text."""
        r, shape = t.dim(), tuple(t.shape)
        op = self.weighted([  # views that are refused when written are rarer
            ("index", 12), ("t", 4 if r <= 2 else 0), ("transpose", 4 if r >= 2 else 0),
            ("permute", 4 if r >= 2 else 0), ("view", 6), ("unsqueeze", 4),
            ("squeeze", 2), ("narrow", 6 if r else 0), ("split", 4 if r else 0),
            ("chunk", 2 if r else 0), ("unbind", 2 if r else 0),
            ("select", 4 if r else 0), ("diagonal", 1 if r >= 2 else 0),
            ("flatten", 2), ("reshape", 2), ("mT", 1 if r >= 2 else 0),
            ("contiguous", 2), ("detach", 2), ("to", 2), ("expand", 1),
            ("as_strided", 1 if r else 0), ("unflatten", 2 if r else 0),
            ("movedim", 1 if r >= 2 else 0), ("position_view", 3 if r and POSITION_VIEWS else 0)])
        dim = (lambda: self.int(0, r - 1) - (r if self.flag(0.3) else 0)) if r else None
        if op == "index":
            items = self.dress(self.basic_items(shape))
            return f"{expr}[{', '.join(items)}]" if items else None
        if op == "position_view":  # x[:, pos]: a select at a runtime index, a view
            items = self.position_items(shape)
            return f"{expr}[{', '.join(items)}]" if items else None
        if op == "t":
            return f"{expr}.t()"
        if op == "transpose":
            return f"{expr}.transpose({dim()}, {dim()})"
        if op == "permute":
            order = self.draw(st.permutations(list(range(r))))
            return f"{expr}.permute({', '.join(map(str, order))})"
        if op == "mT":
            return f"{expr}.mT"
        if op == "movedim":
            return f"{expr}.movedim({dim()}, {dim()})"
        if op in ("view", "reshape"):
            return f"{expr}.{op}({', '.join(map(str, self.regroup(shape)))})"
        if op == "flatten":
            return f"{expr}.flatten()"
        if op == "unflatten":
            d = self.int(0, r - 1)
            n = shape[d]
            factors = [f for f in range(1, n + 1) if n % f == 0] or [1]
            f = self.pick(factors)
            return f"{expr}.unflatten({d}, ({f}, {n // f if n else -1}))"
        if op == "unsqueeze":
            return f"{expr}.unsqueeze({self.int(-r - 1, r)})"
        if op == "squeeze":
            ones = [d for d, n in enumerate(shape) if n == 1]
            if ones and self.flag(0.7):
                return f"{expr}.squeeze({self.pick(ones)})"
            return f"{expr}.squeeze()"
        if op == "narrow":
            d = dim()
            n = shape[d]
            start = self.int(0, n)
            length = self.int(0, n - start)
            if self.flag(0.3) and start < n:
                start -= n
            return f"{expr}.narrow({d}, {start}, {length})"
        if op in ("split", "chunk", "unbind"):
            d = dim()
            n = shape[d]
            if op == "split":
                k = self.int(1, max(n, 1))
                parts = -(-n // k) if n else 1
                arg = f"{k}, {d}" if d else f"{k}"
            elif op == "chunk":
                k = self.int(1, max(n, 1))
                parts = len(torch.empty(shape).chunk(k, d))
                arg = f"{k}, {d}"
            else:
                parts, arg = n, f"{d}"
            if parts == 0:
                return None
            i = self.int(0, parts - 1)
            if self.flag(0.2):
                i -= parts
            return f"{expr}.{op}({arg})[{i}]"
        if op == "select":
            d = dim()
            n = shape[d]
            if not n:
                return None
            i = self.int(0, n - 1)
            return f"{expr}.select({d}, {i - n if self.flag(0.3) else i})"
        if op == "diagonal":
            return f"{expr}.diagonal({self.int(-1, 1)})" if self.flag(0.5) else \
                f"{expr}.diagonal()"
        if op == "contiguous":
            return f"{expr}.contiguous()"
        if op == "detach":
            return f"{expr}.detach()"
        if op == "to":
            return f"{expr}.to({_DTYPE_NAMES[self.pick([t.dtype, torch.float32])]})"
        if op == "expand":
            return f"{expr}.expand({self.int(1, 3)}, {', '.join(['-1'] * r)})" if r \
                else f"{expr}.expand({self.int(1, 3)})"
        if op == "as_strided":
            return f"{expr}.as_strided(({max(shape[0] // 2, 1)},), (1,))"
        raise AssertionError(op)

    def regroup(self, shape: tuple[int, ...]) -> list[int]:
        """A new shape of the same numel: dims merged, split, unit dims added, or -1."""
        dims = list(shape)
        how = self.weighted([("merge", 3), ("split", 2), ("unit", 2), ("flat", 1)])
        if how == "merge" and len(dims) >= 2:
            k = self.int(0, len(dims) - 2)
            dims[k:k + 2] = [dims[k] * dims[k + 1]]
        elif how == "split" and dims:
            k = self.int(0, len(dims) - 1)
            n = dims[k]
            factors = [f for f in range(1, n + 1) if n % f == 0] or [1]
            f = self.pick(factors)
            dims[k:k + 1] = [f, n // f]
        elif how == "unit":
            dims.insert(self.int(0, len(dims)), 1)
        else:
            return [-1]
        if dims and self.flag(0.2):
            dims[self.int(0, len(dims) - 1)] = -1
        return dims

    def view_chain(self, base: str, max_ops: int = 3) -> tuple[str, torch.Tensor]:
        """A view of `base` through up to `max_ops` view ops (views of views)."""
        expr = base
        t = self.eval(expr)
        for _ in range(self.weighted([(0, 3), (1, 4), (2, 2), (3, 1)][:max_ops + 1])):
            step = self.view_step(expr, t)
            if step is None:
                continue
            try:
                new = self.eval(step)
            except _Rejected:
                continue
            if not isinstance(new, torch.Tensor):
                continue
            expr, t = step, new
        return expr, t

    def some_tensor(self) -> str:
        """A root, or (more often) a view bound earlier."""
        if self.views and self.flag(0.5):
            return self.pick(self.views)
        return self.pick(self.roots)

    # -- values
    def scalar(self, dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return self.pick(["True", "False"])
        if dtype in FLOATS and self.flag(0.3):
            return self.pick(["0.5", "-1.5", "2.5"])
        return str(self.int(-3, 3))

    def value_for(self, shape: tuple[int, ...], dtype: torch.dtype,
                  scalar_ok: bool = True, same_dtype: bool = False) -> str:
        """A value for a write of `shape`: a scalar, an argument or constant of that
        shape (or a shape it broadcasts to it), or an expression of the program's
        tensors."""
        kind = self.weighted([("scalar", 3 if scalar_ok else 0), ("tensor", 4),
                              ("expr", 3)])
        if kind == "scalar":
            return self.scalar(dtype)
        if kind == "expr":
            for _ in range(3):
                expr, t = self.view_chain(self.some_tensor(), 2)
                if _broadcasts(tuple(t.shape), shape) and (
                        not same_dtype or t.dtype == dtype):
                    if self.flag(0.3) and t.dtype != torch.bool:
                        expr = f"({expr} * 2)" if self.flag(0.5) else f"({expr} + 1)"
                    return expr
        value_shape = list(shape)
        if value_shape and self.flag(0.3):
            value_shape = value_shape[self.int(1, len(value_shape)):]
        if value_shape and self.flag(0.2):
            value_shape[self.int(0, len(value_shape) - 1)] = 1
        value_dtype = dtype if same_dtype or self.flag(0.8) else self.pick(DTYPES)
        return self.tensor_operand(self.values(tuple(value_shape), value_dtype), "w")

    # -- statements
    def statement(self) -> None:
        kind = self.weighted([
            ("setitem", 8), ("inplace", 7), ("bind_view", 4), ("read", 5),
            ("position", 3), ("advanced", 5), ("accumulate", 2), ("index_op", 2),
            ("intermediate", 1), ("augmented", 2), ("out", 2), ("shape_change", 2),
            ("constant_local", 4)])
        getattr(self, f"stmt_{kind}")()

    def stmt_bind_view(self) -> None:
        expr, t = self.view_chain(self.some_tensor())
        if expr in self.roots or expr in self.views or not isinstance(t, torch.Tensor):
            raise _Rejected("not a new view")
        name = self.fresh("v")
        self.emit(f"{name} = {expr}")
        self.views.append(name)

    def stmt_intermediate(self) -> None:
        base = self.some_tensor()
        t = self.eval(base)
        name = self.fresh("t")
        make = self.weighted([("clone", 2), ("arith", 2), ("zeros", 1)])
        if make == "clone":
            source = f"{base}.clone()"
        elif make == "arith" and t.dtype != torch.bool:
            source = f"{base} * 2"
        else:
            source = f"torch.zeros({tuple(t.shape)}, dtype={_DTYPE_NAMES[t.dtype]})"
        self.emit(f"{name} = {source}")
        self.roots.append(name)

    def stmt_constant_local(self) -> None:
        """A local made from constants and changed by ops with literal operands only:
        what constant folding computes at compile time (torch-mlir's folders got
        integer division by a negative, trunc and sgn wrong)."""
        dtype = getattr(torch, self.weighted([("float32", 4), ("int64", 3),
                                              ("float16", 1), ("bfloat16", 1)]))
        shape = self.shape(max_rank=3)
        n, d = _numel(shape), _DTYPE_NAMES[dtype]
        make = self.weighted([("arange", 3), ("full", 2), ("zeros", 1), ("literal", 2),
                              ("like", 2), ("linspace", 1 if dtype == torch.float32 else 0)])
        if make == "arange":
            source = f"torch.arange({-(n // 2)}, {n - n // 2}, dtype={d}).reshape({shape})"
        elif make == "full":
            source = f"torch.full({shape}, {self.scalar(dtype)}, dtype={d})"
        elif make == "zeros":
            source = f"torch.{self.pick(['zeros', 'ones'])}({shape}, dtype={d})"
        elif make == "literal":
            source = tensor_literal(self.values(shape, dtype))
        elif make == "linspace":
            source = f"torch.linspace(-2, 2, {n}).reshape({shape})"
        else:  # reads only the shape and dtype of a tensor of the program
            base = self.pick(self.roots)
            t = self.eval(base)
            if t.dtype == torch.bool:
                raise _Rejected("bool")
            dtype = t.dtype
            source = self.pick([f"torch.full_like({base}, {self.scalar(dtype)})",
                                f"torch.ones_like({base})", f"torch.zeros_like({base})",
                                f"{base}.new_full((2, 2), {self.scalar(dtype)})"])
        name = self.fresh("c")
        self.emit(f"{name} = {source}")
        t = self.eval(name)
        for _ in range(self.int(1, 3)):
            self.emit(f"{name}.{self.literal_op(name, t)}")
        self.roots.append(name)

    def literal_op(self, name: str, t: torch.Tensor) -> str:
        """An in-place op on `name` whose other operands are literals."""
        k = self.pick(["-3", "-2", "2", "3"])
        if t.dtype in FLOATS:
            op = self.pick(["add_", "mul_", "sub_", "div_", "trunc_", "floor_", "ceil_",
                            "round_", "sign_", "sgn_", "abs_", "neg_", "fmod_",
                            "remainder_", "clamp_", "masked_fill_", "floor_divide_"])
        else:
            op = self.pick(["add_", "mul_", "sub_", "floor_divide_", "div_floor",
                            "div_trunc", "remainder_", "fmod_", "abs_", "neg_", "sign_",
                            "clamp_", "masked_fill_"])
        if op in ("trunc_", "floor_", "ceil_", "round_", "sign_", "sgn_", "abs_", "neg_"):
            return f"{op}()"
        if op in ("div_floor", "div_trunc"):
            return f"div_({k}, rounding_mode={op[4:]!r})"
        if op in ("floor_divide_", "remainder_", "div_"):
            return f"{op}({k})"
        if op == "fmod_":
            return f"fmod_({self.pick([k, '1.5', '-1.5'] if t.dtype in FLOATS else [k])})"
        if op == "clamp_":
            lo = self.int(-3, 1)
            return f"clamp_({lo}, {lo + self.int(0, 4)})"
        if op == "masked_fill_":
            mask = self.pick([f"{name} > 0", f"{name} == 0",
                              f"torch.ones({tuple(t.shape)}, dtype=torch.bool)"])
            return f"masked_fill_({mask}, {self.scalar(t.dtype)})"
        return f"{op}({self.scalar(t.dtype)})"

    def stmt_read(self) -> None:
        expr, t = self.view_chain(self.some_tensor())
        if "advanced_read" not in SKIP and self.flag(0.15) and t.dim():
            items = self.advanced_items(tuple(t.shape), unique=False)
            expr = f"{expr}[{', '.join(items)}]"
            t = self.eval(expr)
        how = self.weighted([("clone", 3), ("arith", 3), ("raw", 2), ("float", 1),
                             ("sum", 1)])
        if how == "arith" and t.dtype != torch.bool:
            source = f"{expr} * 2 + 1" if self.flag(0.5) else f"{expr} - 1"
        elif how == "arith":
            source = f"~{expr}"
        elif how == "raw":
            source = expr  # returned as is: an alias, compared at the end
        elif how == "float":
            source = f"{expr}.float()"  # an alias when already float32
        elif how == "sum" and t.dtype in (torch.float32, torch.int64):
            source = f"{expr}.sum()" if self.flag(0.5) or not t.dim() else \
                f"{expr}.sum({self.int(0, t.dim() - 1)})"
        else:
            source = f"{expr}.clone()"
        name = self.fresh("r")
        self.emit(f"{name} = {source}")
        self.reads.append(name)

    def target(self) -> tuple[str, torch.Tensor]:
        expr, t = self.view_chain(self.some_tensor(), 2)
        if not isinstance(t, torch.Tensor):
            raise _Rejected("not a tensor")
        return expr, t

    def write_check(self, target: str, items: list[str] | None,
                    operands: list[str], scalar_value: bool) -> None:
        """Rejects undefined writes: duplicate positions receiving a tensor value, and
        operands that overlap the written memory other than exactly."""
        t = self.eval(target)
        offsets = storage_offsets(t)
        if items is not None:
            ns = dict(self.ns)
            ns["_offsets"] = offsets
            try:
                written = eval(f"_offsets[{', '.join(items)}]", ns)
            except Exception as error:  # noqa: BLE001
                raise _Rejected(str(error)) from None
        else:
            written = offsets
        flat = written.flatten().tolist()
        if not flat and "empty_write" in SKIP:
            raise _Rejected("empty write")
        if len(set(flat)) != len(flat) and not scalar_value:
            raise _Rejected("duplicate positions")
        for operand in operands:
            if not operand_is_safe(t, written, self.eval(operand)):
                raise _Rejected("operand overlaps the written memory")

    def stmt_setitem(self, items: list[str] | None = None, augmented: bool = False,
                     target: str | None = None) -> None:
        if target is None:
            target, t = self.target()
        else:
            t = self.eval(target)
        if items is None:
            if not t.dim():
                items = self.pick([["..."], ["None"], []])
            else:
                items = self.dress(self.basic_items(tuple(t.shape)))
        index = ", ".join(items) if items else "..."
        view = self.eval(f"{target}[{index}]")
        same = any(not _is_basic(i) for i in items)
        value = self.value_for(tuple(view.shape), t.dtype)
        scalar = _is_scalar(value)
        operands = [] if scalar else [value]
        if augmented:
            ops = ["+=", "-=", "*="] if t.dtype != torch.bool else ["|=", "&="]
            op = self.pick(ops)
            self.write_check(target, items or ["..."], operands, scalar or not same)
            self.emit(f"{target}[{index}] {op} {value}")
        else:
            self.write_check(target, items or ["..."], operands, scalar)
            self.emit(f"{target}[{index}] = {value}")

    def stmt_augmented(self) -> None:
        """`t[index] += v`: a read of t[index], an in-place op on it, a write back."""
        if self.weighted([("augmented_basic", 1), ("augmented_advanced", 1)]) == \
                "augmented_basic":
            self.stmt_setitem(augmented=True)
        else:
            self.stmt_advanced(augmented=True)

    def stmt_advanced(self, augmented: bool = False) -> None:
        target, t = self.target()
        items = self.advanced_items(tuple(t.shape), unique=self.flag(0.7))
        if not items:
            raise _Rejected("0-d")
        self.stmt_setitem(items, augmented, target)

    def stmt_position(self) -> None:
        if self.flag(0.7):
            target = self.pick(self.roots)
        else:
            target = self.some_tensor()
        t = self.eval(target)
        items = self.position_items(tuple(t.shape))
        if not items:
            raise _Rejected("0-d")
        index = ", ".join(items)
        view = self.eval(f"{target}[{index}]")
        value = self.value_for(tuple(view.shape), t.dtype)
        operands = [] if _is_scalar(value) else [value]
        self.write_check(target, items, operands, True)
        augmented = t.dtype != torch.bool and self.weighted(
            [("position_plain", 6), ("position_augmented", 1)]) == "position_augmented"
        self.emit(f"{target}[{index}] {'+=' if augmented else '='} {value}")

    def stmt_inplace(self) -> None:
        target, t = self.target()
        dtype = t.dtype
        if dtype == torch.bool:
            op = self.pick(["fill_", "zero_", "copy_", "logical_not_", "bitwise_or_",
                            "logical_and_", "masked_fill_"])
        elif dtype in FLOATS:
            op = self.pick(["add_", "mul_", "copy_", "fill_", "zero_", "clamp_", "sub_",
                            "neg_", "abs_", "div_", "relu_", "clamp_min_",
                            "masked_fill_", "floor_", "sign_", "addcmul_", "lerp_"])
        else:
            op = self.pick(["add_", "mul_", "copy_", "fill_", "zero_", "clamp_", "sub_",
                            "neg_", "abs_", "clamp_max_", "masked_fill_",
                            "bitwise_and_"])
        shape = tuple(t.shape)
        operands: list[str] = []
        if op in ("zero_", "neg_", "abs_", "relu_", "logical_not_", "floor_", "sign_"):
            call = f"{op}()"
        elif op == "fill_":
            call = f"fill_({self.scalar(dtype)})"
        elif op == "div_":
            call = f"div_({self.pick(['2', '-2', '0.5'])})"
        elif op == "clamp_":
            lo = self.int(-4, 2)
            call = f"clamp_({lo}, {lo + self.int(0, 6)})" if self.flag(0.7) else \
                f"clamp_(min={lo})"
        elif op in ("clamp_min_", "clamp_max_"):
            call = f"{op}({self.int(-3, 3)})"
        elif op == "masked_fill_":
            mask_shape = shape[self.int(0, len(shape)):] if shape else ()
            mask = torch.tensor(self.draw(st.lists(st.booleans(), min_size=_numel(
                mask_shape), max_size=_numel(mask_shape))), dtype=torch.bool)
            call = f"masked_fill_({self.tensor_operand(mask.reshape(mask_shape), 'm')}, " \
                f"{self.scalar(dtype)})"
        elif op == "mul_" and self.flag(0.5):
            call = f"mul_({self.pick(['2', '-1', '0.5'] if dtype in FLOATS else ['2', '-1'])})"
        elif op == "addcmul_":
            a = self.value_for(shape, dtype, scalar_ok=False)
            b = self.value_for(shape, dtype, scalar_ok=False)
            operands = [a, b]
            call = f"addcmul_({a}, {b}, value={self.pick(['1', '2', '-1'])})"
        elif op == "lerp_":
            a = self.value_for(shape, dtype, scalar_ok=False, same_dtype=True)
            operands = [a]
            call = f"lerp_({a}, {self.pick(['0.5', '1.0', '0.0'])})"
        else:
            value = self.value_for(shape, dtype, scalar_ok=op != "copy_" or self.flag(0.1))
            operands = [] if _is_scalar(value) else [value]
            alpha = f", alpha={self.int(-2, 2)}" if op in ("add_", "sub_") and \
                self.flag(0.2) and dtype != torch.bool else ""
            call = f"{op}({value}{alpha})"
        self.write_check(target, None, operands, True)
        self.emit(f"{target}.{call}")

    def stmt_accumulate(self) -> None:
        """index_put_(accumulate=True) with repeated indices: every repeat adds."""
        target, t = self.target()
        if not t.dim() or t.dtype == torch.bool:
            raise _Rejected("0-d or bool")
        shape = tuple(t.shape)
        count = self.int(1, 5)
        idx = self.tensor_operand(self.index_tensor(shape[0], count, False), "i")
        if len(shape) > 1 and self.flag(0.3):  # (rows, columns) pairs, repeated
            idx2 = self.tensor_operand(self.index_tensor(shape[1], count, False), "i")
            indices = f"({idx}, {idx2})"
        else:
            indices = f"({idx},)"
        view = self.eval(f"{target}[{indices}]")
        value = self.value_for(tuple(view.shape), t.dtype, scalar_ok=False, same_dtype=True)
        if _is_scalar(value):
            raise _Rejected("scalar")
        self.write_check(target, None, [value], True)
        self.emit(f"{target}.index_put_({indices}, {value}, accumulate=True)")

    def stmt_index_op(self) -> None:
        """index_fill_, index_copy_, index_add_, scatter_, scatter_add_."""
        target, t = self.target()
        if not t.dim():
            raise _Rejected("0-d")
        shape = tuple(t.shape)
        d = self.int(0, len(shape) - 1)
        n = shape[d]
        op = self.pick(["index_fill_", "index_copy_", "index_add_", "scatter_",
                        "scatter_add_"])
        if op == "index_fill_":
            idx = self.tensor_operand(self.index_tensor(n, self.int(1, 3), False), "i")
            self.write_check(target, None, [], True)
            self.emit(f"{target}.index_fill_({d}, {idx}, {self.scalar(t.dtype)})")
            return
        if op in ("index_copy_", "index_add_"):
            index = self.index_tensor(n, self.int(1, 3), op == "index_copy_")
            index = index % max(n, 1)  # index_copy_ / index_add_ take no negatives
            src_shape = list(shape)
            src_shape[d] = index.numel()
            src = self.value_for(tuple(src_shape), t.dtype, scalar_ok=False,
                                 same_dtype=True)
            if _is_scalar(src) or tuple(self.eval(src).shape) != tuple(src_shape):
                raise _Rejected("source shape")
            idx = self.tensor_operand(index, "i")
            self.write_check(target, None, [src], True)
            self.emit(f"{target}.{op}({d}, {idx}, {src})")
            return
        # scatter_: distinct positions along d per column; scatter_add_: any
        index_shape = [self.int(1, s) if s else 0 for s in shape]
        index_shape[d] = min(index_shape[d], n)
        rows = []
        g = torch.Generator().manual_seed(self.int(0, 255))
        columns = _numel(index_shape) // max(index_shape[d], 1)
        for _ in range(columns):
            if op == "scatter_":
                rows.append(torch.randperm(n, generator=g)[:index_shape[d]])
            else:
                rows.append(torch.randint(0, max(n, 1), (index_shape[d],), generator=g))
        moved = [index_shape[d]] + [s for k, s in enumerate(index_shape) if k != d]
        index = torch.stack(rows, 1).reshape(moved).movedim(0, d).contiguous() \
            if rows else torch.zeros(index_shape, dtype=torch.int64)
        src = self.value_for(tuple(index_shape), t.dtype, scalar_ok=False, same_dtype=True)
        if _is_scalar(src) or tuple(self.eval(src).shape) != tuple(index_shape):
            raise _Rejected("source shape")
        idx = self.tensor_operand(index, "i")
        self.write_check(target, None, [src], True)
        self.emit(f"{target}.{op}({d}, {idx}, {src})")

    def stmt_out(self) -> None:
        """`torch.add(a, b, out=target)`: a whole-tensor write into a view, or into a
        new local that eager resizes (`out=torch.empty(0)`)."""
        if self.flag(0.3):
            base = self.some_tensor()
            t = self.eval(base)
            if t.dtype == torch.bool:
                raise _Rejected("bool")
            name = self.fresh("o")
            self.emit(f"{name} = torch.empty(0, dtype={_DTYPE_NAMES[t.dtype]})")
            self.emit(f"torch.{self.pick(['add', 'mul'])}({base}, 2, out={name})")
            self.roots.append(name)
            return
        target, t = self.target()
        if t.dtype == torch.bool:
            raise _Rejected("bool")
        a = self.value_for(tuple(t.shape), t.dtype, scalar_ok=False, same_dtype=True)
        b = self.value_for(tuple(t.shape), t.dtype, same_dtype=True)
        if tuple(self.eval(f"torch.add({a}, {b})").shape) != tuple(t.shape):
            raise _Rejected("eager would resize a view, which is refused")
        self.write_check(target, None, [] if _is_scalar(a) else [a], True)
        if not _is_scalar(b):
            self.write_check(target, None, [b], True)
        self.emit(f"torch.{self.pick(['add', 'mul', 'sub'])}({a}, {b}, out={target})")

    def stmt_shape_change(self) -> None:
        """`z.unsqueeze_(d)`, `z.t_()`, ... on a local the program made."""
        locals_ = [r for r in self.roots if not r.startswith("x")]
        if locals_ and self.flag(0.5):
            name = self.pick(locals_)
        else:
            name = self.fresh("t")
            self.emit(f"{name} = {self.some_tensor()}.clone()")
            self.roots.append(name)
        t = self.eval(name)
        op = self.pick(["unsqueeze_", "squeeze_", "t_", "transpose_"])
        if op == "unsqueeze_":
            call = f"unsqueeze_({self.int(-t.dim() - 1, t.dim())})"
        elif op == "squeeze_":
            call = "squeeze_()" if self.flag(0.5) or not t.dim() else \
                f"squeeze_({self.int(0, t.dim() - 1)})"
        elif op == "t_":
            call = "t_()"
        else:
            if t.dim() < 2:
                raise _Rejected("rank")
            call = f"transpose_({self.int(0, t.dim() - 1)}, {self.int(0, t.dim() - 1)})"
        self.emit(f"{name}.{call}")

    def stmt_optimizer(self) -> None:
        """What optimizers do: a `_foreach_*_` over a list of tensors, a scalar read with
        `.item()` feeding arithmetic, or a gradient (`torch.autograd.grad` of a local
        leaf) then an in-place update."""
        kind = self.pick(["foreach", "item", "grad"])
        target, t = self.target()
        if t.dtype not in FLOATS:
            raise _Rejected("optimizer state is floating point")
        shape = tuple(t.shape)
        if kind == "item":
            k = self.fresh("k")
            self.emit(f"{k} = {self.some_tensor()}.float().mean().item()")
            if self.flag(0.5):
                self.write_check(target, None, [], True)
                self.emit(f"{target}.mul_(1 - 0.5 ** ({k} + 1))")
            else:
                value = self.value_for(shape, t.dtype, scalar_ok=False, same_dtype=True)
                self.write_check(target, None, [value], True)
                self.emit(f"{target}.add_({value} * ({k} / 2))")
            return
        if kind == "grad":
            leaf, grad = self.fresh("p"), self.fresh("g")
            self.emit(f"{leaf} = {self.some_tensor()}.detach().float().clone()"
                      ".requires_grad_()")
            self.emit(f"{grad}, = torch.autograd.grad("
                      f"({leaf} * {leaf}.sin()).sum(), [{leaf}])")
            if tuple(self.eval(grad).shape) and not _broadcasts(
                    tuple(self.eval(grad).shape), shape):
                raise _Rejected("gradient shape")
            self.write_check(target, None, [], True)
            self.emit(f"{target}.sub_({grad}.to({target}.dtype), "
                      f"alpha={self.pick(['0.1', '0.5'])})")
            return
        targets = [(target, t)]
        for _ in range(self.int(1, 2)):
            other, o = self.target()
            if o.dtype != t.dtype or any(same_storage(o, u) for _, u in targets):
                continue
            targets.append((other, o))
        names = ", ".join(name for name, _ in targets)
        op = self.pick(["add", "mul", "lerp", "addcmul"])
        if op == "mul":
            for name, _ in targets:
                self.write_check(name, None, [], True)
            self.emit(f"torch._foreach_mul_([{names}], {self.pick(['0.9', '2', '-1'])})")
            return
        values = []
        for name, u in targets:
            value = self.value_for(tuple(u.shape), u.dtype, scalar_ok=False, same_dtype=True)
            if _is_scalar(value):
                raise _Rejected("scalar")
            self.write_check(name, None, [value], True)
            values.append(value)
        listed = f"[{', '.join(values)}]"
        if op == "add":
            self.emit(f"torch._foreach_add_([{names}], {listed}, "
                      f"alpha={self.pick(['1', '0.5', '-2'])})")
        elif op == "lerp":
            self.emit(f"torch._foreach_lerp_([{names}], {listed}, "
                      f"{self.pick(['0.1', '0.5', '1.0'])})")
        else:
            self.emit(f"torch._foreach_addcmul_([{names}], {listed}, {listed}, "
                      f"value={self.pick(['1', '-0.5'])})")

    # -- whole program
    def program(self) -> Program:
        for _ in range(self.weighted([(1, 4), (2, 4), (3, 2)])):
            self.data_input()
        self.ns = self._fresh_namespace()  # the inputs in their layouts, aliases shared
        while len(self.body) < MAX_STATEMENTS and self.draw(_statement(self)):
            pass
        if OPTIMIZER_STEPS and self.flag(0.25):  # ending as a training step does
            self.draw(_statement(self, "optimizer"))
        outputs = list(self.reads)
        if self.views and self.flag(0.3):
            outputs.append(self.pick(self.views))
        for root in self.roots:
            if not root.startswith("x") and (root not in outputs) and self.flag(0.7):
                outputs.append(root)  # mutated intermediates
        if self.flag(0.1):
            outputs.append(self.pick(self.roots))
        text = "\n".join(self.body + outputs)  # inputs the program never names are left out
        named = {a.name for a in self.args if re.search(rf"\b{a.name}\b", text)}
        named |= {a.layout[1] for a in self.args if a.name in named and a.layout and
                  a.layout[0] == "same"}  # the tensor passed for both stays passed
        return Program([a for a in self.args if a.name in named], self.body, outputs)


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _broadcasts(source: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(source) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(source), reversed(target)))


def _is_scalar(value: str) -> bool:
    return value in ("True", "False") or value.lstrip("-").replace(".", "", 1).isdigit()


def _is_basic(item: str) -> bool:
    return item in ("...", "None") or ":" in item or item.lstrip("-").isdigit()


@st.composite
def _statement(draw: Callable, gen: _Gen, kind: str | None = None) -> bool:
    """One more statement (of `kind`, else any), or False to end the body: each
    statement is one span of choices, which hypothesis deletes whole when it shrinks a
    failing program."""
    gen.attempts += 1
    if kind is None and (gen.attempts > 2 * MAX_STATEMENTS or
                         gen.body and not gen.flag(0.9)):
        return False
    outer, gen.draw = gen.draw, draw
    kept = len(gen.args)
    try:
        getattr(gen, f"stmt_{kind}")() if kind else gen.statement()
    except _Rejected:
        del gen.args[kept:]
        gen.replay()
    finally:
        gen.draw = outer
    return True


@st.composite
def programs(draw: Callable) -> Program:
    """A random program with in-place mutation, valid for eager PyTorch."""
    return _Gen(draw).program()


# ------------------------------------------------------------------------------ checking
# Layouts are checked at call time (compiled.py traces again for another layout): a
# program with inputs in a layout is called once more with every input contiguous and
# separate, which must match eager.
OTHER_LAYOUT_CALLS = True


def assert_program_matches_eager(program: Program) -> Any:
    """The program compiled and run against eager on every engine (its inputs in their
    layouts, whole storages compared), then called again with other values in the same
    layout; returns the Compiled program."""
    import outofplace
    from differential import ENGINES, assert_call_matches_eager, assert_matches_eager

    f, args, kwargs = program.build()
    compiled = assert_matches_eager(f, *args, **kwargs)
    calls = [program.build(call=1)]
    if OTHER_LAYOUT_CALLS and any(a.layout for a in program.args):
        calls.append(program.build(call=2, layouts=False))
    for number, (g, args, kwargs) in enumerate(calls, 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g(*args, **kwargs)
        except Exception:  # noqa: BLE001 - eager rejects the other values: no case
            continue
        for engine in ENGINES:
            if engine == "dynamo":  # (its own two calls, in assert_matches_eager)
                continue
            f_call, args, kwargs = program.build(call=number, layouts=number == 1)
            try:
                assert_call_matches_eager(compiled, f_call, args, kwargs, engine)
            except outofplace.UnsupportedMutationError:
                if number == 1:  # the layout the program was compiled for: no refusal
                    raise
    return compiled
