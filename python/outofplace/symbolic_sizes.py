"""The dynamic dimensions of an exported program (`dynamic_shapes`), checked at each call.

torch.export names each dynamic size by a symbol (`s0`), or an expression of one
(`2*s1` for a derived `Dim`), and bounds it (`Dim("batch", min=2, max=64)`). The
compiled program takes any size at such a dimension (`tensor<?x...>`) and relies on what
export assumed: that two dimensions of one symbol agree (a cache's batch and its update's)
and that sizes stay in range. A call whose sizes break that is refused before it runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # (sympy is imported where a program has dynamic sizes: its import
    import sympy   # costs a tool that runs only passes half a second)

Size = "int | sympy.Expr"  # a static size, or the symbolic one export traced


@dataclass
class SymbolicSizes:
    """Per argument of main, its sizes; the ranges export bounds the symbols by."""

    sizes: list[tuple[Size, ...]] = field(default_factory=list)
    ranges: dict[sympy.Expr, tuple[int, int | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, placeholders: list[torch.fx.Node], range_constraints: dict
           ) -> "SymbolicSizes":
        import sympy
        from torch.utils._sympy.numbers import int_oo

        sizes = []
        for node in placeholders:
            value = node.meta.get("val")
            shape = value.shape if isinstance(value, torch.Tensor) else ()
            # (A symbol the trace pinned to one value is that value.)
            sizes.append(tuple(d.node.expr if isinstance(d, torch.SymInt) and
                               d.node.expr.free_symbols else int(d) for d in shape))

        def bound(value: sympy.Expr) -> int | None:
            return None if value in (int_oo, -int_oo, sympy.oo, -sympy.oo) else int(value)

        # (Unbacked symbols, of `.item()` values, are in range_constraints too.)
        ranges = {expr: (bound(r.lower) or 0, bound(r.upper))
                  for expr, r in range_constraints.items()}
        return cls(sizes, ranges)

    @functools.cached_property
    def is_dynamic(self) -> bool:
        return any(not isinstance(n, int) for shape in self.sizes for n in shape)

    def check(self, names: list[str], inputs: list[Any]) -> None:
        """Raises ValueError naming the argument and dimension whose size breaks what
        the program was exported for: another size where a symbol was seen, or a size
        out of its range."""
        if not self.is_dynamic:
            return
        import sympy

        bound: dict[sympy.Symbol, int] = {}
        where: dict[sympy.Symbol, str] = {}  # the argument and dimension that set it
        pending = []
        for name, value, shape in zip(names, inputs, self.sizes):
            for dim, (expr, size) in enumerate(zip(shape, value.shape)):
                if isinstance(expr, sympy.Symbol) and expr not in bound:
                    bound[expr] = size
                    where[expr] = f"argument '{name}' has {size} at dimension {dim}"
                if not isinstance(expr, int):
                    pending.append((name, dim, expr, size))
        for name, dim, expr, size in pending:
            unknown = expr.free_symbols - bound.keys()
            if len(unknown) == 1:  # a derived size (2*s1) alone names s1
                symbol = unknown.pop()
                solved = [s for s in sympy.solve(sympy.Eq(expr, size), symbol) if s.is_integer]
                if solved:
                    bound[symbol] = int(solved[0])
            if expr.subs(bound) != size:
                seen = "; ".join(where[s] for s in sorted(expr.free_symbols, key=str)
                                 if s in where)
                raise ValueError(
                    f"argument '{name}' has size {size} at dimension {dim}, where {seen}: "
                    f"the program was exported with these sizes related ({expr} = "
                    f"{expr.subs(bound)}, dynamic_shapes)")
            low, high = self.ranges.get(expr, (0, None))
            if size < low or (high is not None and size > high):
                raise ValueError(
                    f"argument '{name}' has size {size} at dimension {dim}, outside the "
                    f"range [{low}, {high if high is not None else 'inf'}] the program "
                    "was exported for (dynamic_shapes)")
