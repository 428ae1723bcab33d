"""von Mises-Fisher losses for continuous-output generation, with numerics that hold.

A continuous-output decoder (Kumar & Tsvetkov, 2019) does not score the ``V`` words: it
emits one vector ``ê in R^m`` per step and is trained to point it at the fixed, unit-length
embedding ``e(w)`` of the target word. The probabilistic loss reads ``ê`` as the mean
direction *and* concentration of a von Mises-Fisher density on the sphere ``S^{m-1}``:

.. math::

    p(e; \\mu, \\kappa) = C_m(\\kappa)\\, e^{\\kappa \\mu^\\top e}, \\qquad
    C_m(\\kappa) = \\frac{\\kappa^{m/2-1}}{(2\\pi)^{m/2}\\, I_{m/2-1}(\\kappa)}

with ``κ = ‖ê‖`` and ``μ = ê / κ`` (the paper's Eq. 2 is this density written in ``ê``), so
that the loss is its negative log at the target

.. math::

    \\mathrm{NLLvMF}(ê; e(w)) = -\\log C_m(\\lVert ê \\rVert) - ê^\\top e(w)

(paper Sec. 3; the paper numbers only the second regularised variant, Eq. 3). ``I_v`` is the
modified Bessel function of the first kind, of order ``v = m/2 - 1``: ``v = 149`` for 300-d
fastText vectors.

The numerics
------------
The authors' code evaluates ``log I_v(κ)`` as ``log(scipy.special.ive(v, κ)) + κ`` on the CPU.
For large orders ``I_v(κ)`` is astronomically small at moderate ``κ`` (``I_149(1) ≈ 4e-306``,
at the bottom of float64's range) and the logarithm becomes ``-inf``: with scipy 1.17, ``ive``
returns exactly 0 for ``m = 300`` below ``κ ≈ 1.02``, for ``m = 1024`` below ``κ ≈ 120``, for
``m = 2048`` below ``κ ≈ 656``, and subnormal, imprecise values just above (and every call
costs a device -> host -> device round trip). The value we need, ``log C_m``, is perfectly
ordinary there. This module never forms ``I_v`` itself; it evaluates

.. math::  L_v(x) = \\log I_v(x) - v \\log x,

which is finite at ``x = 0`` and makes the ``(m/2-1) \\log κ`` term of ``log C_m`` cancel
analytically: ``log C_m(κ) = -(m/2) \\log(2π) - L_{m/2-1}(κ)``. Three classic expansions
cover ``v >= 0`` and ``x >= 0`` (DLMF 10.25.2, 10.40.1 and 10.41.3), each used only where it is
accurate to a few units of float64 rounding:

=============================  ==========================================================
regime                         method
=============================  ==========================================================
``x <= 30`` and ``v < 12``     power series ``I_v(x) = (x/2)^v Σ_k (x²/4)^k / (k! Γ(v+k+1))``,
                               64 positive terms (no cancellation; exact at ``x = 0``)
``x > 30`` and ``v < 12``      Hankel's large-argument expansion ``I_v(x) ~ e^x / sqrt(2πx)
                               Σ_k (-1)^k a_k(v) / x^k``, 40 terms (the terms still decrease
                               there: the series only turns at ``k ≈ 2x``)
``x <= 1`` and ``v >= 12``     the power series, 12 terms
``x > 1`` and ``v >= 12``      Debye's uniform large-order expansion
                               ``I_v(v z) ~ e^{v η} / (sqrt(2πv) (1+z²)^{1/4}) Σ_k U_k(p)/v^k``,
                               ``p = (1+z²)^{-1/2}``, 18 correction terms
=============================  ==========================================================

Debye's expansion is uniform in ``z = x/v``, so once ``v`` is large enough it is accurate
for every ``x``, from ``κ → 0`` (where it reduces to Stirling's series) to ``κ = 1e5`` and
beyond. Its truncation error after ``K`` terms is about ``max_p |U_{K+1}(p)| / v^{K+1}``;
with ``K = 18`` that is ``≈ 2e-15`` at ``v = 12`` and falls fast with ``v``. Below ``v = 12``
the series and Hankel's expansion (whose terms at ``x > 30`` drop well below ``1e-16`` before
they diverge) take over. At ``v >= 12`` the series is kept for ``x <= 1`` only so that
``κ = 0`` is exact. All polynomial coefficients are exact rationals (Python ``Fraction``),
rounded once to float64. Why not something else: a continued fraction (Perron/Gauss) for the
ratio needs ``O(x)`` terms once ``x >> v`` (``κ`` reaches ``1e5``); Amos-type bounds are
tight only to ``O(1/v²)``; the series alone would need thousands of terms and overflow;
Hankel's expansion alone fails for ``x`` below ``≈ v²``.

The gradient ``d/dκ log C_m(κ) = -I_{m/2}(κ) / I_{m/2-1}(κ)`` (from ``(x^{-v} I_v)' =
x^{-v} I_{v+1}``) is computed directly as the ratio ``R_v = I_{v+1}/I_v``, never as the
difference of two large logarithms: in the series regime as a quotient of two series, in the
Hankel regime as a quotient of two Hankel sums, and in the Debye regime from the difference
of the two expansions written so that nothing large cancels (``sqrt((v+1)²+x²) - sqrt(v²+x²)
= (2v+1)/(...)``, a ``log1p`` for the logarithms). Measured against mpmath at 50 digits over
``m in [2, 2048]`` and ``κ in [0, 1e5]`` the relative errors are ``≈ 1e-15`` in float64
(see ``tests/test_vmf.py``).

Everything runs on the tensor's own device with elementwise torch ops: no scipy, no host
round trip, no Python loop over elements (only fixed loops over expansion terms). Work is
done in float64 and the result cast back to the input dtype, so float32 inputs get a result
rounded once to float32 (relative error ``≈ 6e-8``) at negligible cost (``κ`` is one scalar
per position). On devices without float64 (Apple MPS) the same code runs in float32 and is
then only accurate to float32 precision.

Other things here
-----------------
* :func:`vmf_pseudo_loss`: the paper appendix's surrogate ``A(κ)``. Its *derivative*
  approximates the Bessel ratio; its *value* is not ``-log C_m`` (the authors said so
  later), so it is labelled as a gradient surrogate.
* the paper's baselines: :func:`l2_loss` (its "Squared Error"), :func:`cosine_loss`,
  :func:`max_margin_loss`.
* :func:`nearest_neighbour`: batched, chunked decoding by cosine, vMF density or L2, and
  :data:`DECODE_METRICS`, the distance each loss decodes by (paper Sec. 4.3).

Losses take ``pred`` (``ê``, shape ``(..., m)``) and ``target`` (``e(w)``, shape ``(..., m)``,
unit rows) and return per-position losses ``(...)`` unless ``reduction`` is ``"mean"`` or
``"sum"``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import POSITIVE_INT

__all__ = [
    "DECODE_METRICS",
    "LOSSES",
    "bessel_ratio",
    "cosine_loss",
    "l2_loss",
    "log_bessel_iv",
    "log_cm",
    "max_margin_loss",
    "nearest_neighbour",
    "nll_vmf",
    "nll_vmf_reg1",
    "nll_vmf_reg2",
    "vmf_pseudo_loss",
]

# ----------------------------------------------------------------- regime boundaries
#: orders at or above this use Debye's expansion (outside the small-x series)
_V_DEBYE = 12.0
#: below ``_V_DEBYE``: power series for ``x <= _X_HANKEL``, Hankel's expansion above
_X_HANKEL = 30.0
#: at or above ``_V_DEBYE``: power series for ``x <= _X_SERIES_LARGE_V``
_X_SERIES_LARGE_V = 1.0
#: number of terms of each expansion (see the module docstring for the error bounds)
_N_SERIES_SMALL_V = 64
_N_SERIES_LARGE_V = 12
_N_HANKEL = 40
_N_DEBYE = 18

_LOG_2PI = math.log(2.0 * math.pi)


# ----------------------------------------------------------------- exact coefficients
@lru_cache(maxsize=1)
def _debye_polynomials(n: int = _N_DEBYE) -> tuple[tuple[Fraction, ...], ...]:
    """``U_0, ..., U_n`` of Debye's expansion as exact coefficient lists in ``p``.

    ``U_0 = 1``, ``U_{k+1}(p) = ½ p² (1 - p²) U_k'(p) + ⅛ ∫_0^p (1 - 5t²) U_k(t) dt``
    (DLMF 10.41.9); index ``j`` of each tuple is the coefficient of ``p^j``.
    """
    polys = [(Fraction(1),)]
    for _ in range(n):
        u = polys[-1]
        out = [Fraction(0)] * (len(u) + 3)
        for j, c in enumerate(u):
            if j:  # ½ p² (1 - p²) · j c p^(j-1)
                out[j + 1] += Fraction(j) * c / 2
                out[j + 3] -= Fraction(j) * c / 2
            # ⅛ ∫_0^p (1 - 5t²) c t^j dt
            out[j + 1] += c / (8 * (j + 1))
            out[j + 3] -= 5 * c / (8 * (j + 3))
        while len(out) > 1 and out[-1] == 0:
            out.pop()
        polys.append(tuple(out))
    return tuple(polys)


@lru_cache(maxsize=512)
def _debye_coefficients(v: float) -> tuple[float, ...]:
    """Coefficients in ``p`` of ``Σ_{k=0}^{K} U_k(p) / v^k`` for one order ``v`` (exact, then
    rounded once)."""
    fv = Fraction(v)
    polys = _debye_polynomials()
    out = [Fraction(0)] * max(len(u) for u in polys)
    for k, u in enumerate(polys):
        scale = fv ** -k
        for j, c in enumerate(u):
            out[j] += c * scale
    return tuple(float(c) for c in out)


@lru_cache(maxsize=512)
def _hankel_coefficients(v: float) -> tuple[float, ...]:
    """``(-1)^k a_k(v)`` with ``a_k(v) = Π_{j=1}^{k} (4v² - (2j-1)²) / (k! 8^k)`` (DLMF 10.40.1)."""
    mu = 4 * Fraction(v) ** 2
    out, a = [1.0], Fraction(1)
    for k in range(1, _N_HANKEL + 1):
        a = a * (mu - (2 * k - 1) ** 2) / (8 * k)
        out.append(float(-a if k % 2 else a))
    return tuple(out)


@lru_cache(maxsize=512)
def _series_coefficients(v: float, n: int) -> tuple[float, ...]:
    """``1 / (k! (v+1)_k)`` for ``k < n``: ``I_v(x) = (x/2)^v / Γ(v+1) Σ_k c_k (x²/4)^k``."""
    fv, c, out = Fraction(v), Fraction(1), [1.0]
    for k in range(1, n):
        c = c / (k * (fv + k))
        out.append(float(c))
    return tuple(out)


def _polyval(coefficients: tuple[float, ...], t: Tensor) -> Tensor:
    """Horner's rule, ``Σ_j c_j t^j``."""
    acc = torch.full_like(t, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = acc * t + c
    return acc


# ----------------------------------------------------------------- input handling
def _check_order(v: float) -> float:
    if isinstance(v, Tensor):
        if v.numel() != 1:
            raise ValueError(
                f"the Bessel order v must be one number, got a tensor of shape {tuple(v.shape)}; "
                f"call once per order (log C_m has a single order m/2 - 1)"
            )
        v = float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"the Bessel order v must be a finite real number >= 0, got {v!r}")
    return float(v)


def _as_float_tensor(x: Tensor | float, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        return torch.as_tensor(x, dtype=torch.float64)
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {x.dtype}; convert it with "
            f"{name}.double() (or .float())"
        )
    return x


def _work_dtype(x: Tensor) -> torch.dtype:
    """float64 everywhere it exists (MPS has no float64)."""
    return torch.float32 if x.device.type == "mps" else torch.float64


# ----------------------------------------------------------------- the three regimes
def _log_series_sum(v: float, x: Tensor, n: int) -> Tensor:
    """``log Σ_k (x²/4)^k / (k! (v+1)_k)`` as ``log1p`` of the ``k >= 1`` terms (accurate
    relative to its own small size when ``x → 0``)."""
    y = 0.25 * x * x
    return torch.log1p(y * _polyval(_series_coefficients(v, n)[1:], y))


def _series_l(v: float, x: Tensor, n: int) -> Tensor:
    """``L_v(x) = log I_v(x) - v log x`` from the power series (any ``x``, ``n`` terms)."""
    return _log_series_sum(v, x, n) - (v * math.log(2.0) + math.lgamma(v + 1.0))


def _series_ratio(v: float, x: Tensor, n: int) -> Tensor:
    y = 0.25 * x * x
    s0 = _polyval(_series_coefficients(v, n), y)
    s1 = _polyval(_series_coefficients(v + 1.0, n), y)
    return (0.5 * x / (v + 1.0)) * (s1 / s0)


def _hankel_l(v: float, x: Tensor) -> Tensor:
    h = _polyval(_hankel_coefficients(v), 1.0 / x)
    return x - 0.5 * torch.log(2.0 * math.pi * x) - v * torch.log(x) + torch.log(h)


def _hankel_ratio(v: float, x: Tensor) -> Tensor:
    w = 1.0 / x
    return _polyval(_hankel_coefficients(v + 1.0), w) / _polyval(_hankel_coefficients(v), w)


def _debye_l(v: float, x: Tensor) -> Tensor:
    """``L_v(x) = r - v log(v + r) - ½ log(2π r) + log Σ_k U_k(v/r) / v^k``, ``r = sqrt(v²+x²)``.

    (Debye's ``v η - ½ log(2πv) - ¼ log(1+z²)`` with ``z = x/v`` rewritten minus ``v log x``.)
    """
    r = torch.sqrt(x * x + v * v)
    poly = _polyval(_debye_coefficients(v), v / r)
    return r - v * torch.log(r + v) - 0.5 * torch.log(2.0 * math.pi * r) + torch.log(poly)


def _debye_log_iv(v: float, x: Tensor) -> Tensor:
    """``log I_v(x) = r - v asinh(v/x) - ½ log(2π r) + log Σ_k U_k(v/r) / v^k`` for ``x > 0``:
    the same expansion as :func:`_debye_l` plus ``v log x``, with the two large terms
    ``v log(v + r)`` and ``v log x`` merged before they can cancel."""
    r = torch.sqrt(x * x + v * v)
    poly = _polyval(_debye_coefficients(v), v / r)
    return r - v * torch.asinh(v / x) - 0.5 * torch.log(2.0 * math.pi * r) + torch.log(poly)


def _debye_ratio(v: float, x: Tensor) -> Tensor:
    """``I_{v+1}/I_v`` from Debye's expansion, as ``exp(L_{v+1} - L_v + log x)`` arranged so that
    no two large terms cancel."""
    r0 = torch.sqrt(x * x + v * v)
    r1 = torch.sqrt(x * x + (v + 1.0) ** 2)
    d = (2.0 * v + 1.0) / (r1 + r0)  # = r1 - r0
    log_r = (
        d
        - torch.asinh((v + 1.0) / x)
        - v * torch.log1p((1.0 + d) / (v + r0))
        - 0.25 * torch.log1p((2.0 * v + 1.0) / (r0 * r0))
        + torch.log(_polyval(_debye_coefficients(v + 1.0), (v + 1.0) / r1))
        - torch.log(_polyval(_debye_coefficients(v), v / r0))
    )
    return torch.exp(log_r)


def _regimes(v: float, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(use_series, x_series, x_asymptotic)``: where the series applies and inputs that are
    safe for each branch (every branch is evaluated everywhere, then one is selected)."""
    x_switch = _X_HANKEL if v < _V_DEBYE else _X_SERIES_LARGE_V
    use_series = x <= x_switch
    x_series = torch.where(use_series, x, torch.zeros_like(x))
    x_asymptotic = torch.where(use_series, torch.full_like(x, 2.0 * x_switch), x)
    return use_series, x_series, x_asymptotic


def _l_function(v: float, x: Tensor) -> Tensor:
    """``L_v(x) = log I_v(x) - v log x`` for ``x >= 0`` (float64 in, float64 out)."""
    use_series, xs, xa = _regimes(v, x)
    if v < _V_DEBYE:
        return torch.where(use_series, _series_l(v, xs, _N_SERIES_SMALL_V), _hankel_l(v, xa))
    return torch.where(use_series, _series_l(v, xs, _N_SERIES_LARGE_V), _debye_l(v, xa))


def _ratio(v: float, x: Tensor) -> Tensor:
    """``R_v(x) = I_{v+1}(x) / I_v(x)`` for ``x >= 0`` (float64 in, float64 out)."""
    use_series, xs, xa = _regimes(v, x)
    if v < _V_DEBYE:
        return torch.where(use_series, _series_ratio(v, xs, _N_SERIES_SMALL_V),
                           _hankel_ratio(v, xa))
    return torch.where(use_series, _series_ratio(v, xs, _N_SERIES_LARGE_V), _debye_ratio(v, xa))


def _with_nan_below_zero(x: Tensor, out: Tensor) -> Tensor:
    """Negative arguments are outside the domain: NaN, without a device sync to check."""
    return torch.where(x < 0, torch.full_like(out, math.nan), out)


# ----------------------------------------------------------------- autograd
class _BesselRatio(torch.autograd.Function):
    """``R_v(x)`` with ``R_v'(x) = 1 - (2v+1) R_v(x)/x - R_v(x)²`` (``1/(2v+2)`` at ``x = 0``),
    from ``I_v' = I_{v+1} + (v/x) I_v`` and ``I_{v+1}' = I_v - ((v+1)/x) I_{v+1}``. This makes
    :func:`log_cm` twice differentiable. (The formula cancels for ``x >> v``, where ``R_v'`` is
    ``≈ (2v+1)/(2x²)``: second derivatives there carry a relative error ``≈ 1e-16 x²/v``.)"""

    @staticmethod
    def forward(ctx, x: Tensor, v: float) -> Tensor:
        work = x.to(_work_dtype(x))
        out = _with_nan_below_zero(work, _ratio(v, work.clamp_min(0)))
        ctx.v = v
        ctx.save_for_backward(x)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        v = ctx.v
        work = x.to(_work_dtype(x))  # the formula cancels: evaluate it in float64
        r = bessel_ratio(v, work)
        safe = torch.where(work > 0, work, torch.ones_like(work))
        slope = torch.where(work > 0, 1.0 - (2.0 * v + 1.0) * r / safe - r * r,
                            torch.full_like(r, 1.0 / (2.0 * v + 2.0)))
        return grad * slope.to(x.dtype), None


class _LogCm(torch.autograd.Function):
    """``log C_m(κ)`` with the analytic derivative ``-I_{m/2}(κ) / I_{m/2-1}(κ)``."""

    @staticmethod
    def forward(ctx, kappa: Tensor, m: int) -> Tensor:
        v = m / 2.0 - 1.0
        work = kappa.to(_work_dtype(kappa))
        out = -(m / 2.0) * _LOG_2PI - _l_function(v, work.clamp_min(0))
        ctx.v = v
        ctx.save_for_backward(kappa)
        return _with_nan_below_zero(work, out).to(kappa.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (kappa,) = ctx.saved_tensors
        return -grad * bessel_ratio(ctx.v, kappa), None


# ----------------------------------------------------------------- public numerics
def _log_iv(v: float, x: Tensor) -> Tensor:
    """``log I_v(x)`` for ``x >= 0`` (float64 in, float64 out)."""
    use_series, xs, xa = _regimes(v, x)
    if v < _V_DEBYE:
        series, asymptotic = _series_l(v, xs, _N_SERIES_SMALL_V), _hankel_l(v, xa)
    else:
        series, asymptotic = _series_l(v, xs, _N_SERIES_LARGE_V), _debye_log_iv(v, xa)
    if v > 0:  # v log x, with log 0 = -inf: I_v(0) = 0 for v > 0 (and I_0(0) = 1)
        series = series + v * torch.log(xs)
        if v < _V_DEBYE:
            asymptotic = asymptotic + v * torch.log(xa)
    return torch.where(use_series, series, asymptotic)


class _LogBesselIv(torch.autograd.Function):
    """``log I_v(x)`` with ``d/dx log I_v(x) = R_v(x) + v/x`` (``I_v' = I_{v+1} + (v/x) I_v``)."""

    @staticmethod
    def forward(ctx, x: Tensor, v: float) -> Tensor:
        work = x.to(_work_dtype(x))
        out = _with_nan_below_zero(work, _log_iv(v, work.clamp_min(0)))
        ctx.v = v
        ctx.save_for_backward(x)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        v = ctx.v
        slope = bessel_ratio(v, x) + (v / x if v > 0 else torch.zeros_like(x))
        return grad * slope, None


def log_bessel_iv(v: float, x: Tensor | float) -> Tensor:
    """``log I_v(x)``, the log of the modified Bessel function of the first kind.

    Args:
        v: the order, a real number ``>= 0`` (one order per call).
        x: the argument, a floating tensor (any shape) with ``x >= 0``; negative entries
            give NaN.

    Returns:
        a tensor like ``x``: ``-inf`` at ``x = 0`` for ``v > 0`` (and ``0`` for ``v = 0``),
        finite everywhere else, accurate to ``≈ 1e-15`` relative in float64 where the value
        is not near zero (see the module docstring; where ``log I_v(x)`` crosses zero the
        absolute error is ``≈ 1e-16`` times the size of the terms that cancel, ``v`` and
        ``x``). Differentiable in ``x``: ``d/dx log I_v(x) = I_{v+1}(x)/I_v(x) + v/x``.
    """
    v = _check_order(v)
    return _LogBesselIv.apply(_as_float_tensor(x, "x"), v)


def bessel_ratio(v: float, x: Tensor | float) -> Tensor:
    """``R_v(x) = I_{v+1}(x) / I_v(x)``, computed directly (never as ``exp`` of a difference of
    two large logarithms); ``0`` at ``x = 0``, ``→ 1`` as ``x → ∞``.

    This is ``-d/dκ log C_m(κ)`` for ``v = m/2 - 1``. Differentiable in ``x`` (the derivative
    is ``1 - (2v+1) R_v(x)/x - R_v(x)²``).

    Args:
        v: the order, a real number ``>= 0``.
        x: a floating tensor with ``x >= 0`` (negative entries give NaN).
    """
    v = _check_order(v)
    return _BesselRatio.apply(_as_float_tensor(x, "x"), v)


def log_cm(kappa: Tensor, m: int) -> Tensor:
    """``log C_m(κ)``, the log normaliser of the von Mises-Fisher density on ``S^{m-1}``.

    .. math::

        \\log C_m(\\kappa) = (m/2 - 1)\\log\\kappa - (m/2)\\log(2\\pi) - \\log I_{m/2-1}(\\kappa)

    elementwise, with ``log C_m(0) = log Γ(m/2) - log 2 - (m/2) log π`` exactly (the uniform
    density, one over the area of the sphere). Differentiable: the backward pass is the exact
    ratio ``d/dκ log C_m(κ) = -I_{m/2}(κ) / I_{m/2-1}(κ)`` (``0`` at ``κ = 0``), and the
    backward itself is differentiable.

    Args:
        kappa: concentrations ``κ >= 0``, a float32 or float64 tensor of any shape on any
            device (negative entries give NaN).
        m: the dimension of the embedding space, an integer ``>= 2``.

    Returns:
        a tensor like ``kappa``. Accurate to ``≈ 1e-15`` relative in float64 and correctly
        rounded in float32 (computed in float64 internally), for every ``m`` and ``κ``,
        including where ``log(scipy.special.ive(m/2 - 1, κ)) + κ`` underflows to ``-inf``.
    """
    if isinstance(m, bool) or not isinstance(m, int) or m < 2:
        raise ValueError(
            f"m must be an integer >= 2 (the embedding dimension; the sphere is S^(m-1)), "
            f"got {m!r}"
        )
    kappa = _as_float_tensor(kappa, "kappa")
    return _LogCm.apply(kappa, m)


# ----------------------------------------------------------------- losses
def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"reduction must be one of 'none', 'mean', 'sum', got {reduction!r}")


def _check_pair(pred: Tensor, target: Tensor, name: str) -> int:
    if not isinstance(pred, Tensor) or not isinstance(target, Tensor):
        raise TypeError(f"{name} expects tensors pred (..., m) and target (..., m)")
    if not pred.is_floating_point() or not target.is_floating_point():
        raise TypeError(
            f"{name} expects floating-point pred and target, got {pred.dtype} and {target.dtype}; "
            f"the target is the word's embedding vector, not its id (look it up in the table)"
        )
    if pred.dim() == 0 or tuple(pred.shape) != tuple(target.shape):
        raise ValueError(
            f"{name} expects pred and target of the same shape (..., m), got "
            f"{tuple(pred.shape)} and {tuple(target.shape)}; look the target ids up in the "
            f"(V, m) embedding table first"
        )
    m = int(pred.shape[-1])
    if m < 2:
        raise ValueError(f"{name} needs vectors of dimension m >= 2, got m = {m}")
    return m


def _nll_parts(pred: Tensor, target: Tensor, name: str) -> tuple[Tensor, Tensor, int]:
    """``(-log C_m(‖ê‖), ê^T e(w), m)``."""
    m = _check_pair(pred, target, name)
    kappa = torch.linalg.vector_norm(pred, dim=-1)
    return -log_cm(kappa, m), (pred * target).sum(-1), m


def nll_vmf(pred: Tensor, target: Tensor, *, reduction: str = "none") -> Tensor:
    """NLLvMF (paper Sec. 3, the negative log of Eq. 2): ``-log C_m(‖ê‖) - ê^T e(w)``.

    The negative log-density of the unit target ``e(w)`` under ``vMF(μ = ê/‖ê‖, κ = ‖ê‖)``.
    The first term pushes ``κ`` down, the second rewards alignment; the minimiser over ``κ``
    for a fixed angle solves ``R_{m/2-1}(κ) = cos(ê, e(w))``.

    Args:
        pred: ``ê``, shape ``(..., m)``.
        target: ``e(w)``, shape ``(..., m)``, unit rows.
        reduction: ``"none"`` (per position, shape ``(...)``), ``"mean"`` or ``"sum"``.
    """
    neg_log_c, dot, _ = _nll_parts(pred, target, "nll_vmf")
    return _reduce(neg_log_c - dot, reduction)


def nll_vmf_reg1(pred: Tensor, target: Tensor, lambda1: float = 0.02, *,
                 reduction: str = "none") -> Tensor:
    """NLLvMF with a norm penalty (paper Sec. 3, first variant, unnumbered):
    ``-log C_m(‖ê‖) - ê^T e(w) + λ1 ‖ê‖``.

    Args:
        pred, target, reduction: as for :func:`nll_vmf`.
        lambda1: ``λ1`` (the paper uses 0.02).
    """
    neg_log_c, dot, _ = _nll_parts(pred, target, "nll_vmf_reg1")
    kappa = torch.linalg.vector_norm(pred, dim=-1)
    return _reduce(neg_log_c - dot + lambda1 * kappa, reduction)


def nll_vmf_reg2(pred: Tensor, target: Tensor, lambda2: float = 0.1, *,
                 reduction: str = "none") -> Tensor:
    """NLLvMF with a down-weighted alignment term (paper Eq. 3):
    ``-log C_m(‖ê‖) - λ2 ê^T e(w)``.

    Args:
        pred, target, reduction: as for :func:`nll_vmf`.
        lambda2: ``λ2`` (the paper uses 0.1).
    """
    neg_log_c, dot, _ = _nll_parts(pred, target, "nll_vmf_reg2")
    return _reduce(neg_log_c - lambda2 * dot, reduction)


def vmf_pseudo_loss(pred: Tensor, target: Tensor, *, reduction: str = "none") -> Tensor:
    """The paper appendix's surrogate: ``A(‖ê‖) - ê^T e(w)``, a *gradient* surrogate of NLLvMF.

    .. math::

        A(\\kappa) = s - (v-1)\\log(v - 1 + s), \\quad
        s = \\sqrt{(v+1)^2 + \\kappa^2}, \\quad v = m/2 - 1

    (paper appendix 8.2).

    ``A'(κ) = κ / (v - 1 + sqrt((v+1)² + κ²))``, which approximates the Bessel ratio
    ``I_{v+1}(κ)/I_v(κ) = -d/dκ log C_m(κ)`` (to ``O(1/v)`` relatively; it comes from a bound
    on the ratio), so this loss has roughly the gradients of :func:`nll_vmf`. Its *value* is
    **not** ``-log C_m(κ) - ê^T e(w)``: ``A(κ) + log C_m(κ)`` is neither zero nor constant in
    ``κ``. Do not report it as a negative log-likelihood or compare its values with NLLvMF.

    Needs ``m >= 4`` (``v >= 1``): below that the bound behind ``A`` is not a useful
    approximation (for ``m = 2`` its derivative is unbounded at ``κ → 0`` while the ratio is
    ``≤ 1``); the exact :func:`nll_vmf` is cheap there anyway.
    """
    m = _check_pair(pred, target, "vmf_pseudo_loss")
    if m < 4:
        raise ValueError(
            f"vmf_pseudo_loss needs m >= 4 (order v = m/2 - 1 >= 1), got m = {m}; use nll_vmf"
        )
    v = m / 2.0 - 1.0
    kappa = torch.linalg.vector_norm(pred, dim=-1)
    s = torch.sqrt((v + 1.0) ** 2 + kappa * kappa)
    a = s - (v - 1.0) * torch.log(v - 1.0 + s)
    return _reduce(a - (pred * target).sum(-1), reduction)


def l2_loss(pred: Tensor, target: Tensor, *, reduction: str = "none") -> Tensor:
    """The paper's "Squared Error" baseline (Sec. 4.2): ``‖ê - e(w)‖² = Σ_i (ê_i - e_i)²``.

    Summed over the ``m`` dimensions, one value per position; ``reduction="mean"`` (and
    :class:`~drillbook.heads.VMFHead`) average over positions. (The authors' code sums it
    over the tokens of a batch and divides by the number of sentences, a different
    constant scale.) Unlike the unsquared distance it is smooth at ``ê = e(w)``. Models
    trained with it decode by Euclidean distance (:data:`DECODE_METRICS`).
    """
    _check_pair(pred, target, "l2_loss")
    return _reduce((pred - target).square().sum(-1), reduction)


def cosine_loss(pred: Tensor, target: Tensor, *, reduction: str = "none") -> Tensor:
    """The cosine baseline: ``1 - cos(ê, e(w))`` (insensitive to ``‖ê‖``)."""
    _check_pair(pred, target, "cosine_loss")
    return _reduce(1.0 - F.cosine_similarity(pred, target, dim=-1, eps=1e-12), reduction)


def _check_table(table: Tensor, m: int, name: str) -> None:
    if not isinstance(table, Tensor) or table.dim() != 2 or not table.is_floating_point():
        raise ValueError(
            f"{name} expects a floating (V, m) embedding table, got "
            f"{getattr(table, 'shape', type(table).__name__)}"
        )
    if int(table.shape[1]) != m:
        raise ValueError(
            f"{name}: the table has vectors of size {int(table.shape[1])} but the predictions "
            f"have size {m}; the output layer must predict vectors of the table's dimension"
        )


def max_margin_loss(pred: Tensor, target_ids: Tensor, table: Tensor, margin: float = 0.5, *,
                    chunk_size: int | None = None, reduction: str = "none") -> Tensor:
    """Max-margin ranking baseline (Lazaridou et al., 2015) with one informative negative.

    .. math::

        \\max\\big(0,\\ \\gamma + \\cos(ê, e_{j^*}) - \\cos(ê, e(w))\\big), \\qquad
        j^* = \\arg\\max_{j \\ne w}\\ \\cos(ê, e_j) - \\cos(e(w), e_j)

    The negative ``j*`` is close to the prediction and far from the target. Finding it
    scores the whole vocabulary (``O(V m)`` per position, as the paper notes); the search runs
    without autograd, batched over positions (``chunk_size`` positions at a time bound the
    ``(positions, V)`` score matrix), and the loss is then differentiable in ``pred`` (and in
    ``table``, if it requires grad).

    Args:
        pred: ``ê``, shape ``(..., m)``.
        target_ids: target word ids, shape ``(...)``, in ``[0, V)``.
        table: the ``(V, m)`` target embeddings (rows are normalised here for the cosines).
        margin: ``γ`` (the paper uses 0.5).
        chunk_size: positions per block in the negative search (``None``: all at once).
        reduction: ``"none"``, ``"mean"`` or ``"sum"``.
    """
    if not isinstance(pred, Tensor) or pred.dim() == 0 or not pred.is_floating_point():
        raise TypeError("max_margin_loss expects a floating tensor pred of shape (..., m)")
    m = int(pred.shape[-1])
    _check_table(table, m, "max_margin_loss")
    if tuple(target_ids.shape) != tuple(pred.shape[:-1]):
        raise ValueError(
            f"max_margin_loss: target_ids shape {tuple(target_ids.shape)} does not match pred "
            f"shape {tuple(pred.shape)}; expected target_ids of shape {tuple(pred.shape[:-1])}"
        )
    if target_ids.is_floating_point() or target_ids.is_complex():
        raise TypeError(f"target_ids must hold integer word ids, got dtype {target_ids.dtype}")
    n_words = int(table.shape[0])
    if n_words < 2:
        raise ValueError("max_margin_loss needs a table with at least 2 words (one negative)")
    chunk_size = POSITIVE_INT.or_none("all at once").check(chunk_size, "chunk_size")
    flat = pred.reshape(-1, m)
    ids = target_ids.reshape(-1).long()
    unit_table = F.normalize(table, dim=-1)
    with torch.no_grad():
        negatives = torch.empty_like(ids)
        step = max(flat.shape[0], 1) if chunk_size is None else int(chunk_size)
        ut = unit_table.detach()
        for start in range(0, flat.shape[0], step):
            p = F.normalize(flat[start:start + step].detach(), dim=-1)
            t = ids[start:start + step]
            score = (p - ut[t]) @ ut.T  # cos(ê, e_j) - cos(e(w), e_j), rows unit
            score.scatter_(1, t[:, None], -math.inf)
            negatives[start:start + step] = score.argmax(-1)
    pos = F.cosine_similarity(flat, unit_table[ids], dim=-1, eps=1e-12)
    neg = F.cosine_similarity(flat, unit_table[negatives], dim=-1, eps=1e-12)
    loss = torch.clamp(margin + neg - pos, min=0.0)
    return _reduce(loss.reshape(pred.shape[:-1]), reduction)


#: loss name (as :class:`drillbook.heads.VMFHead` spells it) -> function
LOSSES = {
    "nllvmf": nll_vmf,
    "reg1": nll_vmf_reg1,
    "reg2": nll_vmf_reg2,
    "pseudo": vmf_pseudo_loss,
    "l2": l2_loss,
    "cosine": cosine_loss,
    "maxmargin": max_margin_loss,
}


# ----------------------------------------------------------------- decoding
_METRICS = ("cosine", "vmf", "l2")

#: loss name -> the :func:`nearest_neighbour` metric a model trained with it decodes by.
#: Paper Sec. 4.3: for the empirical losses "the nearest neighbour ... in terms of the
#: distance (loss) defined", for NLLvMF the word of highest vMF density. So: the squared
#: error decodes by Euclidean distance; the cosine and max-margin losses (both defined on
#: cosines) by cosine; NLLvMF and its variants by vMF density, which ranks the words of
#: one position exactly as cosine does (``C_m`` depends on ``‖ê‖`` only). On a table of
#: unit rows Euclidean distance ranks like cosine too (``‖ê - e‖² = ‖ê‖² - 2 ‖ê‖ cos + 1``)
#: except against zero rows, which are at distance ``‖ê‖`` from every prediction.
DECODE_METRICS: dict[str, str] = {
    "nllvmf": "vmf",
    "reg1": "vmf",
    "reg2": "vmf",
    "pseudo": "vmf",
    "l2": "l2",
    "cosine": "cosine",
    "maxmargin": "cosine",
}


def nearest_neighbour(pred: Tensor, table: Tensor, *, metric: str = "cosine", k: int = 1,
                      chunk_size: int | None = None,
                      unit_rows: bool = False) -> tuple[Tensor, Tensor]:
    """The ``k`` words whose embeddings best match each predicted vector (greedy decoding).

    Scores (higher is better):

    * ``"cosine"``: ``cos(ê, e_j)``, the cosine and max-margin models' rule;
    * ``"vmf"``: the vMF log-density of each (unit) word vector,
      ``log C_m(‖ê‖) + ê^T e_j / ‖e_j‖``. Since ``C_m`` depends only on ``‖ê‖``, this ranks the
      words exactly as ``"cosine"`` does: for greedy decoding the density adds nothing but a
      per-position constant (it matters when comparing positions or hypotheses);
    * ``"l2"``: ``-‖ê - e_j‖``, the negative Euclidean distance to the raw table rows (the
      squared-error models' rule). The returned scores are recomputed exactly for the chosen
      words; the ranking uses the expanded ``‖ê‖² - 2 ê^T e_j + ‖e_j‖²``.

    Cosine and vMF scores use unit-normalised table rows (a zero row scores 0 / ``log C_m``).
    Runs without autograd on the tensors' device; ``chunk_size`` words at a time bound the
    memory to ``positions x chunk_size`` scores. No Python loop over positions.

    Args:
        pred: ``(..., m)`` predicted vectors.
        table: ``(V, m)`` word embeddings.
        metric: ``"cosine"``, ``"vmf"`` or ``"l2"``.
        k: how many words per position, ``1 <= k <= V``.
        chunk_size: vocabulary block size (``None``: the whole table at once).
        unit_rows: the table's rows already have unit length (or are zero), so the cosine
            and vMF metrics skip normalising them: a ``V x m`` pass saved on every call,
            which is most of the work when few positions are decoded at a time (one
            decoder step). The :class:`~drillbook.heads.VMFHead` table is stored unit.

    Returns:
        ``(ids, scores)``, shapes ``(..., k)``, best first; ids are ``int64``.
    """
    if metric not in _METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {list(_METRICS)}")
    if not isinstance(pred, Tensor) or pred.dim() == 0 or not pred.is_floating_point():
        raise TypeError("nearest_neighbour expects a floating tensor pred of shape (..., m)")
    m = int(pred.shape[-1])
    _check_table(table, m, "nearest_neighbour")
    n_words = int(table.shape[0])
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_words:
        raise ValueError(f"k must be an integer in [1, V = {n_words}], got {k!r}")
    chunk_size = POSITIVE_INT.or_none("all at once").check(chunk_size, "chunk_size")
    step = n_words if chunk_size is None else int(chunk_size)
    lead = pred.shape[:-1]
    with torch.no_grad():
        flat = pred.reshape(-1, m)
        table = table.to(flat.dtype)
        if metric == "cosine":
            query, offset = F.normalize(flat, dim=-1), None
        elif metric == "vmf":
            query = flat
            offset = log_cm(torch.linalg.vector_norm(flat, dim=-1), m)[:, None]
        else:
            query, offset = flat, flat.square().sum(-1, keepdim=True)
        best_s = flat.new_full((flat.shape[0], 0), -math.inf)
        best_i = torch.empty(flat.shape[0], 0, dtype=torch.long, device=flat.device)
        for start in range(0, n_words, step):
            block = table[start:start + step]
            if metric == "l2":
                s = -(offset - 2.0 * query @ block.T + block.square().sum(-1)).clamp_min(0)
            else:
                s = query @ (block if unit_rows else F.normalize(block, dim=-1)).T
                if offset is not None:
                    s = s + offset
            s, i = s.topk(min(k, s.shape[1]), dim=-1)
            best_s, order = torch.cat([best_s, s], -1).topk(min(k, best_s.shape[1] + s.shape[1]),
                                                           dim=-1)
            best_i = torch.cat([best_i, i + start], -1).gather(-1, order)
        if metric == "l2":
            best_s = -torch.linalg.vector_norm(flat[:, None, :] - table[best_i], dim=-1)
    return best_i.reshape(*lead, k), best_s.reshape(*lead, k)
