"""One rewrite per op on complex values, as real ops on their pairs (`HANDLERS`, op ->
function of the rewriter, the op and its arguments): views as the same views of the pair,
lazy conjugate and negative views as flags, arithmetic on the parts, writes stored
through the flags. A handler raises `Refused` for a case outside the subset; an op
without one is refused (frontend/complex_pairs.py)."""

from __future__ import annotations

import math
import operator
from dataclasses import replace
from typing import Any, Callable

import torch
import torch.fx

from .complex_values import A, REAL_OF, Pair, Refused, Rewriter, is_complex, real_dtype
from .fx_graph import is_list_view, op_effects, view_base, written_operands

Handler = Callable[[Rewriter, Any, tuple, dict], Any]
HANDLERS: dict[Any, Handler] = {}


def _handles(*targets: Any) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for target in targets:
            HANDLERS[target] = fn
        return fn
    return register


# -- views: the same view of the pair, on the leading dimensions ----------------------


def _pair_of(rw: Rewriter, value: Any) -> Pair:
    if not isinstance(value, torch.fx.Node) or value not in rw.pairs:
        raise Refused("a complex value outside the subset")
    return rw.pairs[value]


def _view(rw: Rewriter, pair: Pair, target: Any, *args: Any) -> Pair:
    return replace(pair, node=rw.call(target, pair.node, *args))


@_handles(A.alias.default, A.detach.default, A.detach_.default)
def _alias(rw, target, args, kwargs):
    return _view(rw, _pair_of(rw, args[0]), target)


@_handles(A.select.int)
def _select(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return _view(rw, pair, target, rw.dim(args[1], pair.rank), args[2])


@_handles(A.slice.Tensor)
def _slice(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    rest = list(args[1:]) + [kwargs.get(k, d) for k, d in
                             [("dim", 0), ("start", None), ("end", None), ("step", 1)]
                             ][len(args) - 1:]
    rest[0] = rw.dim(rest[0], pair.rank)
    return _view(rw, pair, target, *rest)


@_handles(A.narrow.default)
def _narrow(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return _view(rw, pair, target, rw.dim(args[1], pair.rank), *args[2:])


@_handles(A.unsqueeze.default)
def _unsqueeze(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return _view(rw, pair, target, rw.dim(args[1], pair.rank + 1))


@_handles(A.squeeze.dim, A.squeeze.dims, A.squeeze.default)
def _squeeze(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    shape = rw.val(args[0]).shape
    dims = args[1] if len(args) > 1 else range(pair.rank)
    dims = [dims] if isinstance(dims, int) else dims
    kept = [d for d in (rw.dim(d, pair.rank) for d in dims) if shape[d] == 1]
    return _view(rw, pair, A.squeeze.dims, kept) if kept else pair


@_handles(A.view.default, A._unsafe_view.default, A.reshape.default, A.expand.default)
def _resize(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    if kwargs.get("implicit") or len(args) > 2 and args[2]:
        raise Refused("an implicit expand")
    return _view(rw, pair, target, [*args[1], 2])


@_handles(A.permute.default)
def _permute(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return _view(rw, pair, target, [*(rw.dim(d, pair.rank) for d in args[1]), pair.rank])


@_handles(A.transpose.int)
def _transpose(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return _view(rw, pair, target, rw.dim(args[1], pair.rank), rw.dim(args[2], pair.rank))


@_handles(A.t.default)
def _t(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return _view(rw, pair, A.transpose.int, 0, 1) if pair.rank == 2 else pair


@_handles(A.unbind.int, A.split.Tensor, A.split_with_sizes.default, A.chunk.default)
def _list_view(rw, target, args, kwargs):
    """`x.unbind(0)`, `x.split(2)`, `x.chunk(2, 1)`: the same list view of the pair (its
    elements are made plain views later, fx_rewrites)."""
    pair = _pair_of(rw, args[0])
    dim_position = 1 if target is A.unbind.int else 2
    dim = args[dim_position] if len(args) > dim_position else kwargs.get("dim", 0)
    rest = list(args[1:dim_position])
    return replace(pair, node=rw.call(target, pair.node, *rest, rw.dim(dim, pair.rank)))


@_handles(operator.getitem)
def _element(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return replace(pair, node=rw.call(operator.getitem, pair.node, args[1]))


@_handles(A._conj.default)
def _conj(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return replace(pair, conj=not pair.conj)


@_handles(A._neg_view.default)
def _neg_view(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return replace(pair, neg=not pair.neg)


@_handles(A.resolve_conj.default)
def _resolve_conj(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])  # a new tensor only where the conjugate is lazy
    return Pair(rw.flip(pair.node, True, False), False, pair.neg) if pair.conj else pair


@_handles(A.resolve_neg.default)
def _resolve_neg(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    return Pair(rw.flip(pair.node, False, True), pair.conj, False) if pair.neg else pair


@_handles(A.view_as_real.default)
def _view_as_real(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    if pair.conj or pair.neg:
        raise Refused("view_as_real of a lazily conjugated or negated view")
    rank = pair.rank  # a view of all of the pair, a real node of its own
    return rw.call(A.slice.Tensor, pair.node, rank, 0, 2, 1)


@_handles(A.view_as_complex.default)
def _view_as_complex(rw, target, args, kwargs):
    if not isinstance(args[0], torch.fx.Node) or args[0] in rw.pairs:
        raise Refused("view_as_complex of a complex value")
    return Pair(args[0])


@_handles(A.real.default, A.imag.default)
def _part_view(rw, target, args, kwargs):
    """`x.real`, `x.imag`: a view of the pair's last dimension. Of a lazy view whose flag
    changes that part (`x.conj().imag` is eager's negative view of x's imaginary part)
    it is the part's value, read only."""
    pair = _pair_of(rw, args[0])
    index = 0 if target is A.real.default else 1
    if pair.neg or pair.conj and index == 1:
        if _written_through(rw.node):
            raise Refused("a write through the real or imaginary part of a lazily "
                          "conjugated or negated view (resolve_conj() first)")
        return rw.part(rw.value(pair), index)
    return rw.part(pair.node, index)


def _written_through(node: torch.fx.Node) -> bool:
    """Whether an op writes `node` or a view of it (through views and list views)."""
    todo, seen = [node], set()
    while todo:
        value = todo.pop()
        for user in value.users:
            effects = op_effects(user)
            if effects is not None and any(
                    value in written_operands(user, p) for p in effects.written):
                return True
            if user not in seen and (view_base(user) is value or is_list_view(user) or
                                     user.target is operator.getitem):
                seen.add(user)
                todo.append(user)
    return False


# -- computations: a new pair --------------------------------------------------------


@_handles(A.clone.default, A.lift_fresh_copy.default)
def _clone(rw, target, args, kwargs):
    return Pair(rw.call(A.clone.default, rw.value(_pair_of(rw, args[0]))))


@_handles(A.neg.default)
def _neg(rw, target, args, kwargs):
    return Pair(rw.call(A.neg.default, rw.value(_pair_of(rw, args[0]))))


@_handles(A.conj_physical.default)
def _conj_physical(rw, target, args, kwargs):
    return Pair(rw.flip(rw.value(_pair_of(rw, args[0])), True, False))


def _alpha(kwargs: dict, args: tuple) -> Any:
    alpha = args[2] if len(args) > 2 else kwargs.get("alpha", 1)
    if isinstance(alpha, complex) or isinstance(alpha, torch.fx.Node):
        raise Refused("a complex or tensor alpha")
    return alpha


@_handles(A.add.Tensor, A.add.Scalar, A.sub.Tensor, A.sub.Scalar)
def _add(rw, target, args, kwargs):
    a = rw.as_pair(*rw.operand(args[0]))
    b = rw.as_pair(*rw.operand(args[1]))
    op = A.add.Tensor if target in (A.add.Tensor, A.add.Scalar) else A.sub.Tensor
    return Pair(rw.call(op, a, b, alpha=_alpha(kwargs, args)))


@_handles(A.rsub.Tensor, A.rsub.Scalar)
def _rsub(rw, target, args, kwargs):
    a = rw.as_pair(*rw.operand(args[0]))
    b = rw.as_pair(*rw.operand(args[1]))
    return Pair(rw.call(A.sub.Tensor, b, a, alpha=_alpha(kwargs, args)))


def _scale(rw: Rewriter, op: Any, pair: torch.fx.Node, real: Any) -> torch.fx.Node:
    """A pair times (or over) a real tensor or number: both parts scaled."""
    if isinstance(real, torch.fx.Node):
        real = rw.call(A.unsqueeze.default, real, real.meta["val"].dim())
    return rw.call(op, pair, real)


@_handles(A.mul.Tensor, A.mul.Scalar)
def _mul(rw, target, args, kwargs):
    (ka, a), (kb, b) = rw.operand(args[0]), rw.operand(args[1])
    if ka == "real":
        (ka, a), (kb, b) = (kb, b), (ka, a)
    if kb == "real":
        return Pair(_scale(rw, A.mul.Tensor, a, b))
    a0, a1, b0, b1 = rw.part(a, 0), rw.part(a, 1), rw.part(b, 0), rw.part(b, 1)
    m = lambda x, y: rw.call(A.mul.Tensor, x, y)  # noqa: E731
    return Pair(rw.join(rw.call(A.sub.Tensor, m(a0, b0), m(a1, b1)),
                        rw.call(A.add.Tensor, m(a0, b1), m(a1, b0))))


@_handles(A.div.Tensor, A.div.Scalar)
def _div(rw, target, args, kwargs):
    (ka, a), (kb, b) = rw.operand(args[0]), rw.operand(args[1])
    if kb == "real":
        return Pair(_scale(rw, A.div.Tensor, a, b))
    a = rw.as_pair(ka, a)
    return Pair(rw.join(*_quotient(rw, rw.part(a, 0), rw.part(a, 1), rw.part(b, 0),
                                   rw.part(b, 1))))


def _quotient(rw: Rewriter, a: torch.fx.Node, b: torch.fx.Node, c: torch.fx.Node,
              d: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node]:
    """(a + bi) / (c + di) as c10::complex computes it (numpy's algorithm): scaled by
    the larger of |c|, |d| so that no square overflows; a zero divisor gives a / 0."""
    op = lambda f, *x: rw.call(f, *x)  # noqa: E731
    mul, add, sub = (lambda x, y: op(A.mul.Tensor, x, y)), \
        (lambda x, y: op(A.add.Tensor, x, y)), (lambda x, y: op(A.sub.Tensor, x, y))
    abs_c, abs_d = op(A.abs.default, c), op(A.abs.default, d)
    # |c| >= |d|: r = d / c, s = 1 / (c + d r), ((a + b r) s, (b - a r) s)
    r = op(A.div.Tensor, d, c)
    s = op(A.reciprocal.default, add(c, mul(d, r)))
    real_c, imag_c = mul(add(a, mul(b, r)), s), mul(sub(b, mul(a, r)), s)
    # |c| < |d|: r = c / d, s = 1 / (d + c r), ((a r + b) s, (b r - a) s)
    r = op(A.div.Tensor, c, d)
    s = op(A.reciprocal.default, add(d, mul(c, r)))
    real_d, imag_d = mul(add(mul(a, r), b), s), mul(sub(mul(b, r), a), s)
    zero = op(A.logical_and.default, op(A.eq.Scalar, abs_c, 0.0), op(A.eq.Scalar, abs_d, 0.0))
    real_0, imag_0 = op(A.div.Tensor, a, abs_c), op(A.div.Tensor, b, abs_d)
    larger_c = op(A.ge.Tensor, abs_c, abs_d)
    pick = lambda zero_case, c_case, d_case: op(  # noqa: E731
        A.where.self, larger_c, op(A.where.self, zero, zero_case, c_case), d_case)
    return pick(real_0, real_c, real_d), pick(imag_0, imag_c, imag_d)


@_handles(A.reciprocal.default)
def _reciprocal(rw, target, args, kwargs):
    return _div(rw, A.div.Tensor, (1, args[0]), {})


@_handles(A._assert_tensor_metadata.default)
def _assert_metadata(rw, target, args, kwargs):
    return None  # a check of the traced dtype, which the pair no longer has


@_handles(A.to.dtype, A._to_copy.default)
def _to(rw, target, args, kwargs):
    """`x.to(complex dtype)`: the pair itself for its own dtype (`to` returns self),
    else the pair cast; a real tensor's pair is (x, 0)."""
    dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
    other = {k: v for k, v in kwargs.items() if k != "dtype" and v not in (None, False)}
    if dtype not in REAL_OF or set(other) - {"device", "layout"} or len(args) > 2:
        raise Refused(f"a conversion to {dtype}")
    if target is A.to.dtype and args[0] in rw.pairs and rw.val(args[0]).dtype == dtype:
        return rw.pairs[args[0]]  # self, lazy views as they are
    kind, value = rw.operand(args[0])
    if kind == "real":
        value = rw.as_pair(kind, rw.call(A._to_copy.default, value,
                                         dtype=real_dtype(dtype)))
    return Pair(rw.call(A._to_copy.default, value, dtype=real_dtype(dtype)))


@_handles(A.polar.default)
def _polar(rw, target, args, kwargs):
    size, angle = args[:2]
    m = lambda f: rw.call(A.mul.Tensor, size, rw.call(f, angle))  # noqa: E731
    return Pair(rw.join(m(A.cos.default), m(A.sin.default)))


# Factories: (their fill value from the arguments), a fresh tensor of the node's shape.
_FACTORIES = {A.zeros.default: lambda a: 0, A.ones.default: lambda a: 1,
              A.full.default: lambda a: a[1], A.empty.memory_format: lambda a: 0,
              A.zeros_like.default: lambda a: 0, A.ones_like.default: lambda a: 1,
              A.full_like.default: lambda a: a[1], A.empty_like.default: lambda a: 0}


@_handles(*_FACTORIES)
def _factory(rw, target, args, kwargs):
    """`torch.zeros(..., dtype=complex64)`, `ones_like(z)`, `full(s, 1 + 2j)`: a fresh
    pair of the fill value (empty ones are zeros); a real result of a complex `*_like`
    is the real factory."""
    fill, value = _FACTORIES[target](args), rw.node.meta["val"]
    if isinstance(fill, torch.fx.Node):
        raise Refused("a fill value held in a tensor")
    if not is_complex(value):
        return rw.call(A.full.default, list(value.shape), fill, dtype=value.dtype)
    zeros = rw.call(A.zeros.default, [*value.shape, 2], dtype=rw.dtype)
    if fill == 0:
        return Pair(zeros)
    return Pair(rw.call(A.add.Tensor, zeros, rw.scalar_pair(fill, rw.dtype)))


@_handles(A.cat.default, A.stack.default)
def _concatenate(rw, target, args, kwargs):
    pairs = [rw.as_pair(*rw.operand(t)) for t in args[0]]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    return Pair(rw.call(target, pairs, rw.dim(dim, rw.node.meta["val"].dim())))


@_handles(A.where.self, A.where.ScalarSelf, A.where.ScalarOther, A.where.Scalar)
def _where(rw, target, args, kwargs):
    condition = args[0]
    condition = rw.call(A.unsqueeze.default, condition, condition.meta["val"].dim())
    a, b = (rw.as_pair(*rw.operand(v)) for v in args[1:3])
    return Pair(rw.call(A.where.self, condition, a, b))


@_handles(A.complex.default)
def _complex(rw, target, args, kwargs):
    shape = list(rw.node.meta["val"].shape)
    real, imag = (rw.call(A.expand.default, a, shape) for a in args[:2])
    return Pair(rw.join(real, imag))


def _reduced_dims(rw: Rewriter, pair: Pair, dims: Any) -> list[int]:
    if dims is None or len(dims) == 0:
        return list(range(pair.rank))
    return [rw.dim(d, pair.rank) for d in dims]


@_handles(A.sum.default, A.sum.dim_IntList, A.mean.default, A.mean.dim)
def _reduce(rw, target, args, kwargs):
    pair = _pair_of(rw, args[0])
    whole = target in (A.sum.default, A.mean.default)  # (self, dtype)
    dims = None if whole else args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = False if whole else args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    dtype = args[1 if whole else 3] if len(args) > (1 if whole else 3) else \
        kwargs.get("dtype")
    if dtype is not None and dtype != rw.val(args[0]).dtype:
        raise Refused(f"a reduction into {dtype}")
    value = rw.value(pair)
    if pair.rank == 0:
        return Pair(rw.call(A.clone.default, value))
    op = A.sum.dim_IntList if target in (A.sum.default, A.sum.dim_IntList) else A.mean.dim
    return Pair(rw.call(op, value, _reduced_dims(rw, pair, dims), keepdim))


@_handles(A.abs.default)
def _abs(rw, target, args, kwargs):
    stored = _pair_of(rw, args[0]).node  # the conjugate and negation have its modulus
    op = lambda f, *x: rw.call(f, *x)  # noqa: E731
    a, b = (op(A.abs.default, rw.part(stored, i)) for i in (0, 1))
    # hypot(a, b) = m sqrt(1 + (n / m)^2), m the larger: no square overflows; 0 at 0,
    # inf where either part is (nan or not), nan where the other is nan
    large, small = op(A.maximum.default, a, b), op(A.minimum.default, a, b)
    ratio = op(A.div.Tensor, small, large)
    modulus = op(A.mul.Tensor, large, op(A.sqrt.default, op(
        A.add.Tensor, op(A.mul.Tensor, ratio, ratio), 1.0)))
    modulus = op(A.where.self, op(A.eq.Scalar, large, 0.0), large, modulus)
    infinite = op(A.logical_or.default, op(A.eq.Scalar, a, math.inf),
                  op(A.eq.Scalar, b, math.inf))
    return op(A.where.self, infinite, op(A.full_like.default, a, math.inf), modulus)


@_handles(A.index.Tensor)
def _index(rw, target, args, kwargs):
    return Pair(rw.call(A.index.Tensor, rw.value(_pair_of(rw, args[0])), args[1]))


@_handles(A.index_put.default)
def _index_put(rw, target, args, kwargs):
    values = rw.as_pair(*rw.operand(args[2]))
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    return Pair(rw.call(A.index_put.default, rw.value(_pair_of(rw, args[0])), args[1],
                        values, accumulate))


# -- writes: the new value stored through the view's flags ---------------------------


def _written_self(rw: Rewriter, args: tuple) -> Pair:
    if not isinstance(args[0], torch.fx.Node) or args[0] not in rw.pairs:
        raise Refused("a complex value written into a real tensor, which discards its "
                       "imaginary part")
    return rw.pairs[args[0]]


@_handles(A.add_.Tensor, A.add_.Scalar, A.sub_.Tensor, A.sub_.Scalar, A.mul_.Tensor,
          A.mul_.Scalar, A.div_.Tensor, A.div_.Scalar, A.neg_.default,
          A.conj_physical_.default)
def _inplace(rw, target, args, kwargs):
    """An in-place op on a complex tensor (or view). Where it is linear in what is stored
    (adding, scaling by a real number or tensor, negating, conjugating), the pair itself
    is updated in place, through the view's flags: `x.conj().add_(y)` adds conj(y) to
    what is stored. Otherwise the new value is computed and stored with `copy_`."""
    pair = _written_self(rw, args)
    if _update_pair_in_place(rw, target, pair, args, kwargs):
        return pair
    twin = op_effects(rw.node).twin
    rw.write(pair, HANDLERS[twin](rw, twin, args, kwargs).node)
    return pair


def _update_pair_in_place(rw: Rewriter, target: Any, pair: Pair, args: tuple,
                          kwargs: dict) -> bool:
    stored = pair.node
    if target in (A.neg_.default, A.conj_physical_.default):
        if target is A.neg_.default:
            rw.call(A.neg_.default, stored)
        else:  # the conjugate of a conjugate (negation) is that of what is stored
            rw.call(A.mul_.Tensor, stored, rw.constant(
                torch.tensor([1.0, -1.0], dtype=stored.meta["val"].dtype)))
        return True
    if target in (A.add_.Tensor, A.add_.Scalar, A.sub_.Tensor, A.sub_.Scalar):
        other = rw.flip(rw.as_pair(*rw.operand(args[1])), pair.conj, pair.neg)
        op = A.add_.Tensor if target in (A.add_.Tensor, A.add_.Scalar) else A.sub_.Tensor
        rw.call(op, stored, other, alpha=_alpha(kwargs, args))
        return True
    if not isinstance(args[1], complex) and not is_complex(rw.val(args[1])):
        _, other = rw.operand(args[1])  # mul_ and div_ by a real number or tensor
        op = A.mul_.Tensor if target in (A.mul_.Tensor, A.mul_.Scalar) else A.div_.Tensor
        if isinstance(other, torch.fx.Node):
            other = rw.call(A.unsqueeze.default, other, other.meta["val"].dim())
        rw.call(op, stored, other)
        return True
    return False


@_handles(A.copy_.default)
def _copy(rw, target, args, kwargs):
    pair = _written_self(rw, args)
    rw.write(pair, rw.as_pair(*rw.operand(args[1])))
    return pair


@_handles(A.fill_.Scalar, A.fill_.Tensor)
def _fill(rw, target, args, kwargs):
    pair = _written_self(rw, args)
    rw.write(pair, rw.as_pair(*rw.operand(args[1])))
    return pair


@_handles(A.zero_.default)
def _zero(rw, target, args, kwargs):
    pair = _written_self(rw, args)
    rw.call(A.zero_.default, pair.node)
    return pair


@_handles(A.index_put_.default)
def _index_put_(rw, target, args, kwargs):
    pair = _written_self(rw, args)
    values = rw.as_pair(*rw.operand(args[2]))
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    # Linear in the values: adding (storing) v through a conjugate view stores conj(v).
    rw.call(A.index_put_.default, pair.node, args[1],
            rw.flip(values, pair.conj, pair.neg), accumulate)
    return pair
