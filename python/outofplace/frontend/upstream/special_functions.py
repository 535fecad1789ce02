"""The special functions torch-mlir neither defines nor lowers, as their usual rational and
series approximations in ATen's elementwise ops: `lgamma` (a distribution's
`log_prob`: Gamma, Beta, Poisson, Dirichlet; `mvlgamma`), `digamma` (its gradient, and
theirs), `polygamma(1, x)` (digamma's gradient), `erfinv` (`nn.init.trunc_normal_`'s
sampling, probit transforms) and `erfc`, each `x.op_()` too.

PyTorch's decompositions record these as `prims.lgamma`, `prims.digamma`,
`prims.erf_inv`, `prims.erfc` and `aten.polygamma`, which no table decomposes further.
Each is computed in the input's dtype (float16 and bfloat16 in float32, rounded once, as
eager's CPU kernels do), with eager's values at its poles and edges:

- lgamma, digamma: Lanczos' approximation (g = 7, 9 terms; Godfrey's coefficients, which
  XLA's and JAX's lowerings use too), Euler's reflection below 1/2; relative error about
  1e-7 in float32 and 1e-14 in float64 against eager's libm (`lgamma`) and Cephes
  (`calc_digamma`);
- polygamma(1, x): eager's own `calc_trigamma`, step for step (reflection below 1/2, six
  recurrence steps, the asymptotic series); polygamma of a higher order (a Hurwitz zeta
  whose series eager sums until it converges) is left undecomposed and refused at its
  line;
- erfinv: eager's own `calc_erfinv` (a rational approximation, then two Newton steps);
- erfc: Cephes' approximations (`erfcf` in float32; `erfc` in float64: P/Q below 8,
  R/S above), `1 - erf` below 1, 0 once `exp(-x^2)` underflows.

Upstream: no issue found (torch-mlir's dialect defines none of these prims; it defines
`aten.erfinv` but its StableHLO lowering has no pattern for it: NOT_LOWERED).
Canary: test/pytest/test_fx_upstream_canaries.py::test_special_functions_do_not_lower.
Tests: test/pytest/test_frontend_upstream.py::test_special_functions.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.fx

from ..fx_graph import call
from ..inline import inline_call

# Lanczos' approximation of the gamma function, g = 7 with 9 coefficients:
#   gamma(z + 1) = sqrt(2 pi) t^(z + 1/2) e^-t a(z),  t = z + g + 1/2,
#   a(z) = BASE + sum_k COEFFICIENTS[k] / (z + k + 1).
_G = 7.0
_BASE = 0.99999999999980993227684700473478
_COEFFICIENTS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
                 771.3234287776530788486528258894, -176.61502916214059906584551354,
                 12.507343278686904814458936853, -0.13857109526572011689554707,
                 9.984369578019570859563e-6, 1.50563273514931155834e-7)


def _computed(fn: Callable[..., torch.Tensor], at_least: torch.dtype = torch.float32
              ) -> Callable[..., torch.Tensor]:
    """`fn` computed in `at_least` for an input of a narrower float dtype, rounded to
    its dtype."""
    def run(x: torch.Tensor, *args: Any) -> torch.Tensor:
        if x.dtype == torch.float64 or x.dtype == at_least:
            return fn(x, *args)
        return fn(x.to(at_least), *args).to(x.dtype)
    return run


def _lanczos(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a(z), a'(z) and log(t) of Lanczos' approximation at z."""
    a = torch.full_like(z, _BASE)
    a_prime = torch.zeros_like(z)
    for k, c in enumerate(_COEFFICIENTS):
        term = z + (k + 1)
        a = a + c / term
        a_prime = a_prime - c / (term * term)
    log_t = math.log(_G + 0.5) + torch.log1p(z / (_G + 0.5))  # log(z + g + 1/2)
    return a, a_prime, log_t


def _fraction_to_half(x: torch.Tensor) -> torch.Tensor:
    """|x| - floor(|x|), folded into [0, 1/2] (sin(pi f) is symmetric about 1/2): the
    argument of the reflections' sine, exact where pi * x would lose x's fraction."""
    absolute = x.abs()
    fraction = absolute - absolute.floor()
    return torch.where(fraction > 0.5, 1 - fraction, fraction)


@_computed
def _lgamma(x: torch.Tensor) -> torch.Tensor:
    reflect = x < 0.5
    z = torch.where(reflect, -x, x - 1)
    a, _, log_t = _lanczos(z)
    t = z + (_G + 0.5)
    # (z + 1/2) log t - t, without t^(z + 1/2) overflowing
    value = 0.5 * math.log(2 * math.pi) + (z + 0.5 - t / log_t) * log_t + torch.log(a)
    log_sine = torch.log(torch.sin(math.pi * _fraction_to_half(x)))  # -inf at integers
    reflected = torch.where(torch.isfinite(log_sine), math.log(math.pi) - log_sine - value,
                            -log_sine)
    value = torch.where(reflect, reflected, value)
    return torch.where(torch.isinf(x), torch.full_like(x, math.inf), value)


@_computed
def _digamma(x: torch.Tensor) -> torch.Tensor:
    reflect = x < 0.5
    z = torch.where(reflect, -x, x - 1)
    a, a_prime, log_t = _lanczos(z)
    value = log_t + a_prime / a - _G / (z + (_G + 0.5))
    # digamma(x) = digamma(1 - x) - pi cot(pi x), x moved into [-1/2, 1/2] first
    shifted = x + (x + 0.5).floor().abs()
    reflected = value - math.pi * torch.cos(math.pi * shifted) / torch.sin(math.pi * shifted)
    value = torch.where(reflect, reflected, value)
    # eager: -inf at +0 (+inf at -0), NaN at the negative integers, 0 at +inf
    pole = (x < 0) & (x == x.floor())
    value = torch.where(pole, torch.full_like(x, math.nan), value)
    value = torch.where(x == 0, torch.copysign(torch.full_like(x, math.inf), -x), value)
    return torch.where(x == math.inf, torch.full_like(x, math.inf), value)


@_computed
def _trigamma(x: torch.Tensor) -> torch.Tensor:
    """eager's `calc_trigamma`."""
    reflect = x < 0.5
    sine = torch.sin(math.pi * x)
    result = torch.where(reflect, -(math.pi * math.pi) / (sine * sine), torch.zeros_like(x))
    x = torch.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return torch.where(reflect, -result, result)


def _erfinv(y: torch.Tensor) -> torch.Tensor:
    """eager's `calc_erfinv`: a rational approximation, then two Newton steps. In float64
    for every dtype: eager computes its tail's logarithm in double, and a Newton step
    through float32's erf near |y| = 1 (where erf is flat) would move x by 1e-2."""
    a = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
    b = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
    c = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
    d = (3.543889200, 1.637067800)
    magnitude = y.abs()
    z = y * y
    central = y * (((a[3] * z + a[2]) * z + a[1]) * z + a[0]) / \
        ((((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1)
    w = torch.sqrt(-torch.log((1 - magnitude.clamp(max=1)) / 2))
    tail = torch.copysign(((c[3] * w + c[2]) * w + c[1]) * w + c[0], y) / \
        ((d[1] * w + d[0]) * w + 1)
    x = torch.where(magnitude <= 0.7, central, tail)
    for _ in range(2):
        x = x - (torch.erf(x) - y) / ((2 / math.sqrt(math.pi)) * torch.exp(-x * x))
    x = torch.where(magnitude == 1, torch.copysign(torch.full_like(y, math.inf), y), x)
    return torch.where(magnitude > 1, torch.full_like(y, math.nan), x)


def _polynomial(x: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
    """Horner's rule, the highest power's coefficient first."""
    value = torch.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        value = value * x + c
    return value


# Cephes' erfc (float64: ndtr.c) and erfcf (float32: ndtrf.c).
_ERF_T = (9.60497373987051638749E0, 9.00260197203842689217E1, 2.23200534594684319226E3,
          7.00332514112805075473E3, 5.55923013010394962768E4)
_ERF_U = (1.0, 3.35617141647503099647E1, 5.21357949780152679795E2,
          4.59432382970980127987E3, 2.26290000613890934246E4, 4.92673942608635921086E4)
_ERFC_P = (2.46196981473530512524E-10, 5.64189564831068821977E-1, 7.46321056442269912687E0,
           4.86371970985681366614E1, 1.96520832956077098242E2, 5.26445194995477358631E2,
           9.34528527171957607540E2, 1.02755188689515710272E3, 5.57535335369399327526E2)
_ERFC_Q = (1.0, 1.32281951154744992508E1, 8.67072140885989742329E1,
           3.54937778887819891062E2, 9.75708501743205489753E2, 1.82390916687909736289E3,
           2.24633760818710981792E3, 1.65666309194161350182E3, 5.57535340817727675546E2)
_ERFC_R = (5.64189583547755073984E-1, 1.27536670759978104416E0, 5.01905042251180477414E0,
           6.16021097993053585195E0, 7.40974269950448939160E0, 2.97886665372100240670E0)
_ERFC_S = (1.0, 2.26052863220117276590E0, 9.39603524938001434673E0,
           1.20489539808096656605E1, 1.70814450747565897222E1, 9.60896809063285878198E0,
           3.36907645100081516050E0)
_ERFF_T = (7.853861353153693E-5, -8.010193625184903E-4, 5.188327685732524E-3,
           -2.685381193529856E-2, 1.128358514861418E-1, -3.761262582423300E-1,
           1.128379165726710E+0)
_ERFCF_P = (2.326819970068386E-2, -1.387039388740657E-1, 3.687424674597105E-1,
            -5.824733027278666E-1, 6.210004621745983E-1, -4.944515323274145E-1,
            3.404879937665872E-1, -2.741127028184656E-1, 5.638259427386472E-1)
_ERFCF_R = (-1.047766399936249E+1, 1.297719955372516E+1, -7.495518717768503E+0,
            2.921019019210786E+0, -1.015265279202700E+0, 4.218463358204948E-1,
            -2.820767439740514E-1, 5.641895067754075E-1)


@_computed
def _erfc(x: torch.Tensor) -> torch.Tensor:
    magnitude = x.abs()
    square = x * x
    gaussian = torch.exp(-square)
    if x.dtype == torch.float64:
        near = 1 - x * _polynomial(square, _ERF_T) / _polynomial(square, _ERF_U)
        far = torch.where(
            magnitude < 8,
            gaussian * _polynomial(magnitude, _ERFC_P) / _polynomial(magnitude, _ERFC_Q),
            gaussian * _polynomial(magnitude, _ERFC_R) / _polynomial(magnitude, _ERFC_S))
        underflow = 7.09782712893383996843E2
    else:
        near = 1 - x * _polynomial(square, _ERFF_T)
        inverse = 1 / square
        far = gaussian / magnitude * torch.where(magnitude < 2,
                                                 _polynomial(inverse, _ERFCF_P),
                                                 _polynomial(inverse, _ERFCF_R))
        underflow = 88.72283905206835
    far = torch.where(square > underflow, torch.zeros_like(x), far)
    far = torch.where(x < 0, 2 - far, far)
    return torch.where(magnitude < 1, near, far)


def _elementwise(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    def rewrite(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
        return inline_call(graph, node, fn, node.args[0])
    return rewrite


def _polygamma(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """polygamma(n, x): digamma for n = 0, eager's trigamma for n = 1; a higher order is
    declined (refused at its line)."""
    order, x = node.args[0], node.args[1]
    fn = {0: _digamma, 1: _trigamma}.get(order)
    return None if fn is None else inline_call(graph, node, fn, x)


def _polygamma_in_place(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """x.polygamma_(n)  =>  x.copy_(polygamma(n, x)) (its arguments are the functional
    op's swapped, so the pass finds no twin of it)."""
    x, order = node.args[0], node.args[1]
    fn = {0: _digamma, 1: _trigamma}.get(order)
    if fn is None:
        return None
    return call(graph, torch.ops.aten.copy_.default, x, inline_call(graph, node, fn, x))


# (the prims PyTorch's decompositions record; the aten ops torch-mlir's own table leaves,
# as in its decomposition of `mvlgamma`)
DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    **{op: _elementwise(_lgamma) for op in (torch.ops.prims.lgamma.default,
                                             torch.ops.aten.lgamma.default)},
    **{op: _elementwise(_digamma) for op in (torch.ops.prims.digamma.default,
                                              torch.ops.aten.digamma.default)},
    **{op: _elementwise(_computed(_erfinv, torch.float64)) for op in (torch.ops.prims.erf_inv.default,
                                             torch.ops.aten.erfinv.default)},
    **{op: _elementwise(_erfc) for op in (torch.ops.prims.erfc.default,
                                           torch.ops.aten.erfc.default)},
    torch.ops.aten.polygamma.default: _polygamma,
    torch.ops.aten.polygamma_.default: _polygamma_in_place,
}
