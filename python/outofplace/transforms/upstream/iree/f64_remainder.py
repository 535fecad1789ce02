"""`outofplace-iree-f64-remainder`: a float64 `stablehlo.remainder` (C's fmod: `fmod`,
`remainder`, floor division) as a quotient and a correction.

IREE 3.13 lowers a float64 remainder to a call of libm's `fmod`, which its embedded
linker does not have: every float64 fmod failed to compile ("iree-lld: error: undefined
symbol: fmod"); float32 compiles. No IREE issue was found. Here it is

    n = trunc(a / b);  r = a - n * b
    r + |b| where a > 0 > r,  r - |b| where a < 0 < r   (n one too many)
    r - |b| where r >= |b|,   r + |b| where r <= -|b|   (n one too few)
    a * 0 where r is 0 (the dividend's sign), a where b is infinite and a is not

which is C's fmod wherever `n * b` is exact (a quotient of 1e10 by 3.0, or of 1e15 by
0.7: exact); a quotient past 2**52 leaves it wrong (`fmod(1e300, 7.0)`): the IREE
engine's limit (docs/backends.md; it is experimental). Canary:
test_iree_canaries.test_float64_remainder_does_not_link.
"""

from __future__ import annotations

from torch_mlir import ir

from ....ir_utils import stablehlo_compare, stablehlo_splat
from ...registry import register_pass
from .common import _main, _walk


def _op(name: str, *operands: ir.Value, result: ir.Type | None = None, **attributes
        ) -> ir.Value:
    return ir.Operation.create(name, results=[result or operands[0].type],
                               operands=list(operands), attributes=attributes).results[0]


def _corrected(op: ir.Operation) -> ir.Value:
    a, b = op.operands
    zero, inf = stablehlo_splat(a.type, 0.0), stablehlo_splat(a.type, float("inf"))
    quotient = _op("stablehlo.divide", a, b)
    whole = _op("stablehlo.multiply", _op("stablehlo.sign", quotient),
                _op("stablehlo.floor", _op("stablehlo.abs", quotient)))
    r = _op("stablehlo.subtract", a, _op("stablehlo.multiply", whole, b))
    size = _op("stablehlo.abs", b)
    compare = stablehlo_compare
    for past, fix in ((_op("stablehlo.and", compare("GT", a, zero), compare("LT", r, zero)),
                       "stablehlo.add"),
                      (_op("stablehlo.and", compare("LT", a, zero), compare("GT", r, zero)),
                       "stablehlo.subtract"),
                      (compare("GE", r, size), "stablehlo.subtract"),
                      (compare("LE", r, _op("stablehlo.negate", size)), "stablehlo.add")):
        r = _op("stablehlo.select", past, _op(fix, r, size), r, result=a.type)
    r = _op("stablehlo.select", compare("EQ", r, zero), _op("stablehlo.multiply", a, zero),
            r, result=a.type)  # a zero with the dividend's sign
    finite_by_infinite = _op("stablehlo.and", compare("EQ", size, inf),
                             compare("LT", _op("stablehlo.abs", a), inf))
    return _op("stablehlo.select", finite_by_infinite, a, r, result=a.type)


@register_pass(
    "outofplace-iree-f64-remainder",
    "A float64 remainder as a quotient and a correction (IREE cannot link libm's fmod)",
    "`stablehlo.remainder` of float64 → `a - trunc(a / b) * b`, corrected by |b| where "
    "the quotient was one off, the dividend where the divisor is infinite: IREE 3.13 "
    "calls libm's `fmod`, which its embedded linker lacks (a workaround, "
    "transforms/upstream/iree/)")
def f64_remainder(module: ir.Operation) -> None:
    for op in [op for op in _walk(_main(module)) if op.name == "stablehlo.remainder" and
               str(ir.RankedTensorType(op.operands[0].type).element_type) == "f64"]:
        with op.location, ir.InsertionPoint(op):
            op.results[0].replace_all_uses_with(_corrected(op))
        op.erase()
