"""A complex value as a real pair: `Pair` (a real tensor [..., 2] of (real, imaginary)
parts, with eager's lazy conjugate and negative flags) and `Rewriter`, which builds the
real ops of a rewrite (frontend/complex_pairs.py) on the FX graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from .fx_graph import call, fake_mode_of

A = torch.ops.aten

REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


@dataclass(frozen=True)
class Pair:
    """A complex value: `node` is a real tensor [..., 2] of what is stored (a view where
    the complex value is a view); the value is the conjugate (`conj`) and/or the
    negation (`neg`) of what is stored, as eager's lazy conjugate and negative views."""

    node: torch.fx.Node
    conj: bool = False
    neg: bool = False

    @property
    def rank(self) -> int:  # of the complex value
        return self.node.meta["val"].dim() - 1


def is_complex(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_complex()


def real_dtype(dtype: torch.dtype) -> torch.dtype:
    return REAL_OF[dtype]


class Refused(Exception):
    """An op on a complex value outside the subset, with why."""


class Rewriter:
    """The state of one rewrite: the pair of each complex node rewritten so far, the node
    being rewritten (new nodes go before it, with its line), the nodes made."""

    def __init__(self, graph: torch.fx.Graph):
        self.graph = graph
        self.pairs: dict[torch.fx.Node, Pair] = {}
        self.node: torch.fx.Node | None = None  # the node being rewritten
        self.dtype: torch.dtype | None = None  # the real dtype of its complex value
        # The real dtype its floating-point operands are computed in: its result's (for
        # an in-place op its out-of-place twin's), as eager promotes; or None.
        self.common: torch.dtype | None = None
        self.made: list[torch.fx.Node] = []
        self.originals: dict[torch.fx.Node, Any] = {}  # complex arguments' fake values

    def val(self, node: Any) -> Any:
        """The traced (fake) value of a node: complex for a complex argument."""
        if not isinstance(node, torch.fx.Node):
            return node
        return self.originals.get(node, node.meta.get("val"))

    # -- building nodes ------------------------------------------------------------
    def call(self, target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        """A node before the one being rewritten, with its fake value and its line."""
        with self.graph.inserting_before(self.node):
            node = call(self.graph, target, *args, **kwargs)
        if self.node.meta.get("stack_trace"):
            node.meta["stack_trace"] = self.node.meta["stack_trace"]
        self.made.append(node)
        return node

    def constant(self, value: torch.Tensor) -> torch.fx.Node:
        module = self.graph.owning_module
        name = f"_outofplace_complex_{len(module._buffers)}"
        module.register_buffer(name, value)
        with self.graph.inserting_before(self.node):
            node = self.graph.get_attr(name)
        with fake_mode_of(self.graph):
            node.meta["val"] = torch.empty_strided(value.shape, value.stride(),
                                                   dtype=value.dtype)
        self.made.append(node)
        return node

    def scalar_pair(self, number: complex, dtype: torch.dtype) -> torch.fx.Node:
        number = complex(number)
        return self.constant(torch.tensor([number.real, number.imag], dtype=dtype))

    # -- values --------------------------------------------------------------------
    def flip(self, node: torch.fx.Node, conj: bool, neg: bool) -> torch.fx.Node:
        """The conjugate and/or negation of a pair (each its own inverse)."""
        if not conj and not neg:
            return node
        signs = [-1.0 if neg else 1.0, 1.0 if conj == neg else -1.0]
        return self.call(A.mul.Tensor, node, self.constant(
            torch.tensor(signs, dtype=node.meta["val"].dtype)))

    def value(self, pair: Pair) -> torch.fx.Node:
        """A pair of the value (reads computed through the lazy views' flags)."""
        return self.flip(pair.node, pair.conj, pair.neg)

    def operand(self, value: Any) -> tuple[str, Any]:
        """("pair", node) of a complex operand, ("real", node or number) of a real one;
        a floating-point tensor in the result's real dtype, where eager computes (a 0-d
        complex128 or float64 operand does not widen a complex64 result)."""
        if isinstance(value, torch.fx.Node):
            if value in self.pairs:
                return "pair", self.in_common_dtype(self.value(self.pairs[value]))
            if is_complex(value.meta.get("val")):
                raise Refused("a complex value outside the subset")
            return "real", self.in_common_dtype(value)
        if isinstance(value, complex):
            return "pair", self.scalar_pair(value, self.dtype)
        if isinstance(value, (bool, int, float)):
            return "real", value
        raise Refused(f"an operand {value!r}")

    def in_common_dtype(self, node: torch.fx.Node) -> torch.fx.Node:
        value = node.meta.get("val")
        if self.common is None or not isinstance(value, torch.Tensor) or \
                not value.is_floating_point() or value.dtype == self.common:
            return node
        return self.call(A._to_copy.default, node, dtype=self.common)

    def as_pair(self, kind: str, value: Any) -> torch.fx.Node:
        """A pair of a real operand: (value, 0)."""
        if kind == "pair":
            return value
        if not isinstance(value, torch.fx.Node):
            return self.scalar_pair(value, self.dtype)
        return self.call(A.stack.default, [value, self.call(A.zeros_like.default, value)],
                         value.meta["val"].dim())

    def part(self, node: torch.fx.Node, index: int) -> torch.fx.Node:
        return self.call(A.select.int, node, node.meta["val"].dim() - 1, index)

    def join(self, real: torch.fx.Node, imag: torch.fx.Node) -> torch.fx.Node:
        return self.call(A.stack.default, [real, imag], real.meta["val"].dim())

    def dim(self, dim: int, rank: int) -> int:
        """A dimension of a complex value of `rank` as a (non-negative) dim of its pair."""
        if not -max(rank, 1) <= dim < max(rank, 1) or rank == 0:
            raise Refused(f"dimension {dim} of a {rank}-d complex tensor")
        return dim % rank

    def write(self, pair: Pair, value: torch.fx.Node) -> None:
        """Stores a value into a complex tensor (or view): its conjugate into a
        conjugate view; `copy_` broadcasts and casts as eager's in-place ops do."""
        self.call(A.copy_.default, pair.node, self.flip(value, pair.conj, pair.neg))
