"""The special functions torch-mlir neither defines nor lowers, as their usual rational and
series approximations in ATen's elementwise ops: `lgamma` (a distribution's
`log_prob`: Gamma, Beta, Poisson, Dirichlet; `mvlgamma`), `digamma` (its gradient, and
theirs), `polygamma(1, x)` (digamma's gradient), `erfinv` (`nn.init.trunc_normal_`'s
sampling, probit transforms), `erfc`, the modified Bessel functions `i0`, `i0e`, `i1`,
`i1e` (a Kaiser window's; i0's gradient is i1) and `hypot`, each `x.op_()` too.

PyTorch's decompositions record these as `prims.lgamma`, `prims.digamma`,
`prims.erf_inv`, `prims.erfc`, `prims.bessel_*`, `prims.hypot` and `aten.polygamma`,
which no table decomposes further.
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
  R/S above), `1 - erf` below 1, 0 once `exp(-x^2)` underflows;
- i0, i0e, i1, i1e: eager's own (Cephes' Chebyshev series, the same tables);
- hypot: in float64 for narrower dtypes; in float64 the larger magnitude times
  sqrt(1 + ratio^2), infinite where either operand is, as C's `hypot`.

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


# Cephes' Chebyshev series of the modified Bessel functions (eager's Math.h, the same
# tables): exp(-x) I0(x) on [0, 8] and exp(-x) sqrt(x) I0(x) on [8, inf), the same of
# I1(x) / x and I1(x). Eager's float32 kernels take the last 17 and 7 terms of I1's.
_I0E_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17,
          -2.43127984654795469359E-16, 1.71539128555513303061E-15,
          -1.16853328779934516808E-14, 7.67618549860493561688E-14,
          -4.85644678311192946090E-13, 2.95505266312963983461E-12,
          -1.72682629144155570723E-11, 9.67580903537323691224E-11,
          -5.18979560163526290666E-10, 2.65982372468238665035E-9,
          -1.30002500998624804212E-8, 6.04699502254191894932E-8,
          -2.67079385394061173391E-7, 1.11738753912010371815E-6,
          -4.41673835845875056359E-6, 1.64484480707288970893E-5,
          -5.75419501008210370398E-5, 1.88502885095841655729E-4,
          -5.76375574538582365885E-4, 1.63947561694133579842E-3,
          -4.32430999505057594430E-3, 1.05464603945949983183E-2,
          -2.37374148058994688156E-2, 4.93052842396707084878E-2,
          -9.49010970480476444210E-2, 1.71620901522208775349E-1,
          -3.04682672343198398683E-1, 6.76795274409476084995E-1)
_I0E_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18,
          4.46562142029675999901E-17, 3.46122286769746109310E-17,
          -2.82762398051658348494E-16, -3.42548561967721913462E-16,
          1.77256013305652638360E-15, 3.81168066935262242075E-15,
          -9.55484669882830764870E-15, -4.15056934728722208663E-14,
          1.54008621752140982691E-14, 3.85277838274214270114E-13,
          7.18012445138366623367E-13, -1.79417853150680611778E-12,
          -1.32158118404477131188E-11, -3.14991652796324136454E-11,
          1.18891471078464383424E-11, 4.94060238822496958910E-10,
          3.39623202570838634515E-9, 2.26666899049817806459E-8,
          2.04891858946906374183E-7, 2.89137052083475648297E-6,
          6.88975834691682398426E-5, 3.36911647825569408990E-3,
          8.04490411014108831608E-1)
_I1E_A = (2.77791411276104639959E-18, -2.11142121435816608115E-17,
          1.55363195773620046921E-16, -1.10559694773538630805E-15,
          7.60068429473540693410E-15, -5.04218550472791168711E-14,
          3.22379336594557470981E-13, -1.98397439776494371520E-12,
          1.17361862988909016308E-11, -6.66348972350202774223E-11,
          3.62559028155211703701E-10, -1.88724975172282928790E-9,
          9.38153738649577178388E-9, -4.44505912879632808065E-8,
          2.00329475355213526229E-7, -8.56872026469545474066E-7,
          3.47025130813767847674E-6, -1.32731636560394358279E-5,
          4.78156510755005422638E-5, -1.61760815825896745588E-4,
          5.12285956168575772895E-4, -1.51357245063125314899E-3,
          4.15642294431288815669E-3, -1.05640848946261981558E-2,
          2.47264490306265168283E-2, -5.29459812080949914269E-2,
          1.02643658689847095384E-1, -1.76416518357834055153E-1,
          2.52587186443633654823E-1)
_I1E_B = (7.51729631084210481353E-18, 4.41434832307170791151E-18,
          -4.65030536848935832153E-17, -3.20952592199342395980E-17,
          2.96262899764595013876E-16, 3.30820231092092828324E-16,
          -1.88035477551078244854E-15, -3.81440307243700780478E-15,
          1.04202769841288027642E-14, 4.27244001671195135429E-14,
          -2.10154184277266431302E-14, -4.08355111109219731823E-13,
          -7.19855177624590851209E-13, 2.03562854414708950722E-12,
          1.41258074366137813316E-11, 3.25260358301548823856E-11,
          -1.89749581235054123450E-11, -5.58974346219658380687E-10,
          -3.83538038596423702205E-9, -2.63146884688951950684E-8,
          -2.51223623787020892529E-7, -3.88256480887769039346E-6,
          -1.10588938762623716291E-4, -9.76109749136146840777E-3,
          7.78576235018280120474E-1)


def _chebyshev(y: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
    """Cephes' `chbevl`: the series at y by Clenshaw's recurrence."""
    b0, b1, b2 = torch.full_like(y, coefficients[0]), torch.zeros_like(y), None
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _bessel(first_order: bool, scaled: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """eager's `calc_i0`, `calc_i0e`, `calc_i1`, `calc_i1e`: I0 or I1 at x (times
    exp(-|x|) when `scaled`), the series of [0, 8] or of [8, inf) by |x|."""
    @_computed
    def bessel(x: torch.Tensor) -> torch.Tensor:
        magnitude = x.abs()
        if first_order:
            near, far = (_I1E_A, _I1E_B) if x.dtype == torch.float64 else \
                (_I1E_A[-17:], _I1E_B[-7:])
        else:
            near, far = _I0E_A, _I0E_B
        below = _chebyshev(magnitude / 2 - 2, near)
        if first_order:
            below = below * magnitude
        above = _chebyshev(32 / magnitude - 2, far) / torch.sqrt(magnitude)
        value = torch.where(magnitude <= 8, below, above)
        if not scaled:
            value = torch.exp(magnitude) * value
        return torch.where(x < 0, -value, value) if first_order else value
    return bessel


def _hypot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """eager's `hypot` (C's): sqrt(x^2 + y^2) without overflow, infinite where either
    is (a NaN beside an infinity too). In float64 for narrower dtypes, rounded once."""
    if x.dtype != torch.float64:
        wide = torch.sqrt(x.double() * x.double() + y.double() * y.double())
        return wide.to(x.dtype)
    larger = torch.maximum(x.abs(), y.abs())
    smaller = torch.minimum(x.abs(), y.abs())
    ratio = smaller / torch.where(larger == 0, torch.ones_like(larger), larger)
    value = larger * torch.sqrt(1 + ratio * ratio)
    return torch.where(torch.isinf(x) | torch.isinf(y), torch.full_like(x, math.inf), value)


def _elementwise(fn: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    def rewrite(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
        return inline_call(graph, node, fn, *node.args)
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
    **{op: _elementwise(_bessel(False, False)) for op in (torch.ops.prims.bessel_i0.default,
                                                          torch.ops.aten.i0.default)},
    **{op: _elementwise(_bessel(False, True)) for op in (torch.ops.prims.bessel_i0e.default,
                                                         torch.ops.aten.special_i0e.default)},
    **{op: _elementwise(_bessel(True, False)) for op in (torch.ops.prims.bessel_i1.default,
                                                         torch.ops.aten.special_i1.default)},
    **{op: _elementwise(_bessel(True, True)) for op in (torch.ops.prims.bessel_i1e.default,
                                                        torch.ops.aten.special_i1e.default)},
    **{op: _elementwise(_hypot) for op in (torch.ops.prims.hypot.default,
                                           torch.ops.aten.hypot.default)},
}
