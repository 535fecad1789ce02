"""Eager's fused multiply-adds, rounded where eager rounds them.

Eager's CPU kernels compute some ops as one fused multiply-add, the product not rounded
before the sum (measured against torch 2.13, bit for bit):
- `add(x, y, alpha=a)` (a not 1): fma(y, a, x); `sub`: fma(y, -a, x);
- `addcmul(x, s, t, value=v)`: fma(v * s, t, x);
- `lerp(x, y, w)`: fma(w, y - x, x) where |w| < 0.5, else fma(w - 1, y - x, y).
`addcdiv(x, s, t, value=v)` is x + (v * s) / t, rounded after each op.

XLA:CPU contracts a multiply feeding an add into an fma as well (LLVM's DAG combiner),
but of an add of two products it contracts the first operand's: `b.mul_(0.9).add_(g,
alpha=0.1)` became fma(b, 0.9, g * 0.1) where eager computes fma(g, 0.1, b * 0.9), and
Adam's second moment (`v.mul_(beta2).addcmul_(g, g, value=1 - beta2)`) was one rounding
off in a third of its elements. So each is written here as an add whose first operand is
the product eager fuses (in place: that add stored into self), which XLA contracts as
eager does. torch-mlir's own lowerings put self first, and computed lerp as
x + w * (y - x) at any weight and addcmul as x + (s * t) * v.

Dynamo writes `addcmul_`/`addcdiv_` with a `value` and `add_` with a tensor `alpha` as
inductor's `prims.fma` (its own decompositions): `fma(s * t, v, x)` (`fma(s / t, v, x)`)
of a number v is the addcmul (addcdiv) it was, and is one again here
(`dynamo_fmas_as_eager_ops`); any other fma(a, b, c) is a * b + c, the product first.

Each computes in eager's dtype: the one its operands promote to (a float64 self with
float32 s and t multiplies in float64), float32 for float16 and bfloat16 (eager's
"opmath"), rounded once to the result's dtype.

A product by a negative number (`sub`, a negative alpha or value, lerp's w - 1) LLVM
rewrites as a subtraction of the positive one, whose first operand it contracts first: so
x - p is written -(p - x), the same value with the product first. The XLA engine
compiles without XLA's reshape mover (backends/xla COMPILE_OPTIONS), which computed a
product of a non-flat operand apart from a flat state's update and so contracted the
other one.

Not matched: a product XLA contracts that eager rounds, `b.mul_(0.9)` feeding a later add
or subtract (`.addcdiv_(...)`, `.add_(x)`, `lerp_`'s `y - b`): eager rounds b * 0.9 and
XLA does not (the result is the more precise); and XLA folds a product of constants
(`b.mul_(0.9).addcmul_(b, b, value=0.01)`: (b * 0.9) * 0.01 is b * 0.009). Each is one
rounding from eager's. On a CPU computing float16 natively (AVX512-FP16) a float16
product eager rounds is contracted into the add after it too (test_xla_canaries.py).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.fx

from .fx_graph import call

A = torch.ops.aten


def _in_opmath(graph: torch.fx.Graph, *operands: torch.fx.Node
               ) -> tuple[torch.dtype, torch.dtype, list[torch.fx.Node]] | None:
    """For a pointwise op of these tensors: the dtype of eager's result, the dtype eager
    computes it in ("opmath": float32 for float16 and bfloat16) and each operand in that
    one; None when the result is not floating."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    values = [o.meta.get("val") for o in operands]
    if not all(isinstance(v, torch.Tensor) for v in values):
        return None
    wide, dtype = elementwise_dtypes(
        *values, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    if not dtype.is_floating_point:
        return None
    return dtype, wide, [_as(graph, o, wide) for o in operands]


def _as(graph: torch.fx.Graph, operand: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    if operand.meta["val"].dtype == dtype:
        return operand
    return call(graph, A._to_copy.default, operand, dtype=dtype)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _stored(graph: torch.fx.Graph, node: torch.fx.Node, total: torch.fx.Node,
            dtype: torch.dtype) -> torch.fx.Node:
    """The op's result in its dtype; an in-place op's stored into its self."""
    total = _as(graph, total, dtype)
    if node.target._schema.name.endswith("_"):
        return call(graph, A.copy_.default, node.args[0], total)
    return total


def _fused(graph: torch.fx.Graph, product: torch.fx.Node, addend: torch.fx.Node,
           negated: bool = False) -> torch.fx.Node:
    """product + addend (negated: addend - product), the product first: the operand XLA
    contracts. A product by a negative number LLVM rewrites as a subtraction of the
    positive one, whose first operand it contracts first: so addend - product is written
    -(product - addend), the same value."""
    if negated:
        return call(graph, A.neg.default, call(graph, A.sub.Tensor, product, addend))
    return call(graph, A.add.Tensor, product, addend)


def _magnitude(number: Any) -> tuple[Any, bool]:
    """|number| and whether it is negative; a symbolic number as it is."""
    if not _is_number(number):
        return number, False
    return abs(number), math.copysign(1, number) < 0


def _scaled(graph: torch.fx.Graph, value: torch.fx.Node, scale: Any, wide: torch.dtype
            ) -> torch.fx.Node:
    """value * scale: a number (or a symbolic one, read with `.item()`: a 0-d tensor once
    optimizer_ops.scalars_read_as_tensors has run), or that 0-d tensor."""
    if isinstance(scale, torch.fx.Node) and isinstance(scale.meta.get("val"), torch.Tensor):
        return call(graph, A.mul.Tensor, value, _as(graph, scale, wide))
    return call(graph, A.mul.Scalar, value, scale)


def scaled_add(graph: torch.fx.Graph, node: torch.fx.Node, alpha: Any
               ) -> torch.fx.Node | None:
    """add(x, y, alpha=a)  =>  y * a + x; sub  =>  x - y * a; each written with the
    product first (`_fused`). `alpha` a number, or a 0-d tensor for a number read with
    `.item()` (optimizer_ops.py)."""
    x, y = node.args[:2]
    if not (isinstance(x, torch.fx.Node) and isinstance(y, torch.fx.Node)):
        return None
    found = _in_opmath(graph, x, y)
    if found is None:
        return None
    dtype, wide, (x, y) = found
    subtract = node.target in (A.sub.Tensor, A.sub_.Tensor)
    if isinstance(alpha, torch.fx.Node):  # a 0-d tensor: eager rounds it to the dtype
        product, negated = _scaled(graph, y, _as(graph, alpha, dtype), wide), subtract
    else:
        alpha = torch.tensor(alpha, dtype=dtype).item()
        scale, negated = _magnitude(-alpha if subtract else alpha)
        product = _scaled(graph, y, scale, wide)
    return _stored(graph, node, _fused(graph, product, x, negated), dtype)


def _add(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """add/sub with a number alpha other than 1: `scaled_add`"""
    alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
    if not _is_number(alpha) or alpha == 1:
        return None
    return scaled_add(graph, node, alpha)


def _multiply_add(graph: torch.fx.Graph, x: torch.fx.Node, first: torch.fx.Node,
                  second: torch.fx.Node, value: Any, divide: bool
                  ) -> tuple[torch.fx.Node, torch.dtype] | None:
    """addcmul: (s * v) * t + x; addcdiv: x + (s * v) / t; in eager's opmath dtype, and
    the dtype of the result."""
    found = _in_opmath(graph, x, first, second)
    if found is None:
        return None
    dtype, wide, (x, first, second) = found
    if divide:
        quotient = call(graph, A.div.Tensor, _scaled(graph, first, value, wide), second)
        return call(graph, A.add.Tensor, x, quotient), dtype
    scale, negated = _magnitude(value)
    product = call(graph, A.mul.Tensor, _scaled(graph, first, scale, wide), second)
    return _fused(graph, product, x, negated), dtype


def multiply_add(graph: torch.fx.Graph, node: torch.fx.Node, value: Any
                 ) -> torch.fx.Node | None:
    """addcmul(x, s, t, value=v), addcdiv(...): `_multiply_add`. `value` a number, or a
    0-d tensor for a number read with `.item()` (optimizer_ops.py)."""
    x, first, second = node.args[:3]
    if not all(isinstance(o, torch.fx.Node) for o in (x, first, second)):
        return None
    divide = node.target in (A.addcdiv.default, A.addcdiv_.default)
    result = _multiply_add(graph, x, first, second, value, divide)
    return None if result is None else _stored(graph, node, *result)


def _addcmul(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    return multiply_add(graph, node, node.args[3] if len(node.args) > 3
                        else node.kwargs.get("value", 1))


def _lerp(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """lerp(x, y, w)  =>  w * (y - x) + x where |w| < 0.5, else (w - 1) * (y - x) + y"""
    x, y, weight = node.args[:3]
    if not (isinstance(x, torch.fx.Node) and isinstance(y, torch.fx.Node) and
            (_is_number(weight) or isinstance(weight, torch.fx.Node))):
        return None
    found = _in_opmath(graph, x, y)
    if found is None:
        return None
    dtype, wide, (x, y) = found
    difference = call(graph, A.sub.Tensor, y, x)
    if _is_number(weight):  # eager's weight in its opmath dtype, w - 1 computed in it
        w = torch.tensor(weight, dtype=wide)
        coefficient, base = (w.item(), x) if bool(w.abs() < 0.5) else ((w - 1).item(), y)
        scale, negated = _magnitude(coefficient)
        product = call(graph, A.mul.Scalar, difference, scale)
        return _stored(graph, node, _fused(graph, product, base, negated), dtype)
    weight = _as(graph, weight, wide)
    small = call(graph, A.lt.Scalar, call(graph, A.abs.default, weight), 0.5)
    coefficient = call(graph, A.where.self, small, weight, call(graph, A.sub.Scalar, weight, 1))
    base = call(graph, A.where.self, small, x, y)
    product = call(graph, A.mul.Tensor, coefficient, difference)
    return _stored(graph, node, _fused(graph, product, base), dtype)


def dynamo_fmas_as_eager_ops(graph: torch.fx.Graph) -> None:
    """Dynamo's fma(s * t, v, x) of a number v  =>  addcmul(x, s, t, value=v) (s / t:
    addcdiv): the op the user wrote, before reduced_precision.py computes it in float32
    as eager does and `_addcmul` rounds it as eager does."""
    for node in list(graph.nodes):
        if not (isinstance(node.target, torch._ops.OpOverload) and
                node.target._schema.name == "prims::fma"):
            continue
        a, b, c = node.args[:3]
        if not (_is_number(b) and isinstance(a, torch.fx.Node) and list(a.users) == [node]
                and a.target in (A.mul.Tensor, A.div.Tensor) and len(a.args) == 2 and
                all(isinstance(o, torch.fx.Node) for o in (*a.args, c))):
            continue
        op = A.addcmul.default if a.target is A.mul.Tensor else A.addcdiv.default
        with graph.inserting_before(node):
            replacement = call(graph, op, c, *a.args, value=b)
        replacement.meta = dict(node.meta)
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        graph.erase_node(a)


def _fma(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """Any other fma(a, b, c) (dynamo's `add_` with a tensor alpha)  =>  a * b + c, in the
    result's dtype (a float32 product into a float64 c multiplies in float64)."""
    a, b, c = node.args[:3]
    dtype = node.meta["val"].dtype
    if dtype.is_floating_point:
        a, b = (_as(graph, o, dtype) if isinstance(o, torch.fx.Node) else o for o in (a, b))
    return _fused(graph, call(graph, A.mul.Tensor, a, b), c)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    **{op: _add for op in (A.add.Tensor, A.add_.Tensor, A.sub.Tensor, A.sub_.Tensor)},
    **{op: _addcmul for op in (A.addcmul.default, A.addcmul_.default, A.addcdiv.default,
                               A.addcdiv_.default)},
    **{op: _lerp for op in (A.lerp.Scalar, A.lerp_.Scalar, A.lerp.Tensor, A.lerp_.Tensor)},
}
# Ops defined only once their module is imported (torch._inductor.inductor_prims), by
# schema name.
DECOMPOSITIONS_BY_NAME: dict[str, Callable[..., Any]] = {"prims::fma": _fma}
