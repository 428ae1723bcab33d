"""vMF numerics against mpmath, the continuous-output losses, decoding and VMFHead.

Tolerances: ``log C_m`` crosses zero (for ``m = 300`` between ``κ = 149`` and ``κ = 300``),
where a *relative* error is ill-conditioned, so values are checked as
``|err| <= tol * max(1, |reference|)``; the Bessel ratio is positive for ``κ > 0`` and is
checked relatively. ``tol`` is 1e-10 in float64 and 1e-5 in float32 (references are
computed at the float32-rounded ``κ``). References come from mpmath at 50 digits, computed
once per ``(m, κ)`` (``functools.cache``).
"""

from __future__ import annotations

import functools
import io
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from drillbook.errors import DataError
from drillbook.heads import VMFHead, build_head
from drillbook.losses import (
    DECODE_METRICS,
    LOSSES,
    bessel_ratio,
    cosine_loss,
    l2_loss,
    log_bessel_iv,
    log_cm,
    max_margin_loss,
    nearest_neighbour,
    nll_vmf,
    nll_vmf_reg1,
    nll_vmf_reg2,
    vmf_pseudo_loss,
)

mpmath = pytest.importorskip("mpmath")
scipy_special = pytest.importorskip("scipy.special")

MS = (2, 3, 5, 10, 50, 100, 300, 301, 1024, 2048)
KAPPAS = (0.0, 1e-8, 1e-3, 0.1, 1.0, 5.0, 10.0, 50.0, 149.0, 300.0, 500.0, 1000.0, 5000.0,
          1e4, 1e5)
#: a few off-grid points: (m, κ) with κ log-uniform in [1e-6, 1e5] (fixed seed)
_rng = np.random.default_rng(20190101)
RANDOM_POINTS = tuple(zip((int(m) for m in _rng.integers(2, 2049, size=12)),
                          (float(k) for k in 10.0 ** _rng.uniform(-6, 5, size=12)), strict=True))
#: (m, κ) where log(scipy.special.ive(m/2 - 1, κ)) + κ is -inf
UNDERFLOW = ((300, 1e-3), (300, 1.0), (1024, 1.0), (1024, 50.0), (1024, 100.0),
             (2048, 149.0), (2048, 500.0))

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@functools.cache
def reference(m: int, kappa: float) -> tuple[float, float]:
    """``(log C_m(κ), I_{m/2}(κ) / I_{m/2-1}(κ))`` at 50 significant digits."""
    with mpmath.workdps(50):
        half = mpmath.mpf(m) / 2
        if kappa == 0:
            return float(mpmath.loggamma(half) - mpmath.log(2) - half * mpmath.log(mpmath.pi)), 0.0
        k = mpmath.mpf(kappa)
        i_v, i_v1 = mpmath.besseli(half - 1, k), mpmath.besseli(half, k)
        log_c = (half - 1) * mpmath.log(k) - half * mpmath.log(2 * mpmath.pi) - mpmath.log(i_v)
        return float(log_c), float(i_v1 / i_v)


@functools.cache
def bessel_reference(v: float, x: float) -> tuple[float, float]:
    """``(log I_v(x), I_{v+1}(x) / I_v(x))`` at 50 digits (``v + 1`` formed exactly)."""
    with mpmath.workdps(50):
        if x == 0:
            return (0.0 if v == 0 else -math.inf), 0.0
        i_v = mpmath.besseli(mpmath.mpf(v), x)
        i_v1 = mpmath.besseli(mpmath.mpf(v) + 1, x)
        return float(mpmath.log(i_v)), float(i_v1 / i_v)


def check_against_reference(m: int, kappas, dtype: torch.dtype,
                            device: str = "cpu") -> tuple[float, float]:
    """Assert log C_m and its gradient against mpmath; return the worst (value, ratio) error."""
    kappa = torch.tensor(kappas, dtype=dtype, device=device, requires_grad=True)
    value = log_cm(kappa, m)
    (grad,) = torch.autograd.grad(value.sum(), kappa)
    assert value.dtype == dtype and grad.dtype == dtype
    assert value.device == grad.device == kappa.device
    worst_value = worst_ratio = 0.0
    for k, got, slope in zip(kappa.detach().tolist(), value.tolist(), grad.tolist(), strict=True):
        ref_value, ref_ratio = reference(m, k)
        err_value = abs(got - ref_value) / max(1.0, abs(ref_value))
        err_ratio = abs(-slope - ref_ratio) / ref_ratio if ref_ratio else abs(slope)
        assert err_value <= TOL[dtype], (m, k, got, ref_value)
        assert err_ratio <= TOL[dtype], (m, k, -slope, ref_ratio)
        worst_value, worst_ratio = max(worst_value, err_value), max(worst_ratio, err_ratio)
    return worst_value, worst_ratio


# ------------------------------------------------------------------ log C_m
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("m", MS)
def test_log_cm_and_its_gradient_match_mpmath_on_the_grid(m, dtype):
    check_against_reference(m, KAPPAS, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_log_cm_matches_mpmath_off_the_grid(dtype):
    for m, k in RANDOM_POINTS:
        check_against_reference(m, (k,), dtype)


def test_float64_errors_are_near_machine_precision():
    """Much tighter than the 1e-10 target: a few units of float64 rounding."""
    worst = [check_against_reference(m, KAPPAS, torch.float64) for m in (2, 50, 300, 2048)]
    assert max(max(w) for w in worst) < 1e-13


def test_log_cm_at_zero_is_the_uniform_density_exactly():
    for m in MS:
        expected = math.lgamma(m / 2) - math.log(2) - (m / 2) * math.log(math.pi)
        kappa = torch.zeros(1, dtype=torch.float64, requires_grad=True)
        value = log_cm(kappa, m)
        assert value.item() == pytest.approx(expected, rel=1e-15, abs=1e-13)
        (grad,) = torch.autograd.grad(value.sum(), kappa)
        assert grad.item() == 0.0
    # m = 2: the circle has length 2π; m = 3: the sphere has area 4π
    assert log_cm(torch.zeros(1, dtype=torch.float64), 2).item() == pytest.approx(
        -math.log(2 * math.pi), rel=1e-15)
    assert log_cm(torch.zeros(1, dtype=torch.float64), 3).item() == pytest.approx(
        -math.log(4 * math.pi), rel=1e-15)


@pytest.mark.parametrize(("m", "kappa"), UNDERFLOW)
def test_scipy_reference_underflows_where_log_cm_stays_exact(m, kappa):
    v = m / 2 - 1
    with np.errstate(divide="ignore"):
        naive_log_iv = np.log(scipy_special.ive(v, kappa)) + kappa
    assert naive_log_iv == -np.inf
    naive_log_c = v * math.log(kappa) - (m / 2) * math.log(2 * math.pi) - naive_log_iv
    assert naive_log_c == np.inf  # the authors' route: an infinite loss
    value = log_cm(torch.tensor([kappa], dtype=torch.float64), m)
    assert torch.isfinite(value).all()
    check_against_reference(m, (kappa,), torch.float64)
    check_against_reference(m, (kappa,), torch.float32)


def test_log_cm_shapes_dtypes_and_bad_inputs():
    kappa = torch.rand(3, 4, dtype=torch.float32) * 100
    assert log_cm(kappa, 300).shape == (3, 4)
    assert log_cm(kappa, 300).dtype == torch.float32
    assert torch.isnan(log_cm(torch.tensor([-1.0]), 300)).all()
    with pytest.raises(ValueError, match="integer >= 2"):
        log_cm(kappa, 1)
    with pytest.raises(ValueError, match="integer >= 2"):
        log_cm(kappa, 300.0)
    with pytest.raises(TypeError, match="floating-point"):
        log_cm(torch.tensor([1, 2]), 300)


def test_log_cm_gradcheck_and_gradgradcheck():
    kappa = torch.tensor([1e-3, 0.7, 3.0, 29.0, 31.0, 150.0, 2e3], dtype=torch.float64,
                         requires_grad=True)
    for m in (2, 5, 24, 26, 300):
        assert torch.autograd.gradcheck(lambda k, m=m: log_cm(k, m), (kappa,))
        assert torch.autograd.gradgradcheck(lambda k, m=m: log_cm(k, m), (kappa,))


# ------------------------------------------------------------------ Bessel functions
ORDERS = (0.0, 0.3, 0.5, 2.5, 11.5, 11.99, 12.0, 40.7, 149.0, 511.73494684955205)
ARGS = (0.0, 1e-6, 0.5, 1.0, 1.5, 3.0, 29.9, 30.1, 200.0, 1e4)


@pytest.mark.parametrize("v", ORDERS)
def test_log_bessel_iv_and_ratio_match_mpmath(v):
    x = torch.tensor(ARGS, dtype=torch.float64)
    log_iv, ratio = log_bessel_iv(v, x), bessel_ratio(v, x)
    for xi, got, r in zip(ARGS, log_iv.tolist(), ratio.tolist(), strict=True):
        ref, ref_ratio = bessel_reference(v, xi)
        if math.isinf(ref):
            assert got == ref
        else:
            assert abs(got - ref) <= 1e-10 * max(1.0, abs(ref)), (v, xi, got, ref)
        if ref_ratio == 0:
            assert r == 0
        else:
            assert abs(r - ref_ratio) <= 1e-10 * ref_ratio, (v, xi, r, ref_ratio)


def test_bessel_functions_gradcheck():
    x = torch.tensor([1e-3, 0.7, 3.0, 29.0, 31.0, 150.0, 2e3], dtype=torch.float64,
                     requires_grad=True)
    for v in (0.0, 2.5, 11.5, 12.0, 149.0):
        assert torch.autograd.gradcheck(lambda t, v=v: log_bessel_iv(v, t), (x,))
        assert torch.autograd.gradcheck(lambda t, v=v: bessel_ratio(v, t), (x,))


def test_bessel_functions_reject_bad_orders():
    with pytest.raises(ValueError, match="order v"):
        log_bessel_iv(-1.0, torch.ones(2))
    with pytest.raises(ValueError, match="one number"):
        bessel_ratio(torch.tensor([1.0, 2.0]), torch.ones(2))


# ------------------------------------------------------------------ losses
def unit(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1)


def test_nll_vmf_in_the_underflow_region_matches_mpmath():
    m = 300
    target = unit(torch.randn(m, dtype=torch.float64))
    pred = 2.0 * unit(torch.randn(m, dtype=torch.float64))  # κ = 2: below scipy's range
    ref_log_c, _ = reference(m, float(torch.linalg.vector_norm(pred)))
    expected = -ref_log_c - float(pred @ target)
    assert nll_vmf(pred, target).item() == pytest.approx(expected, rel=1e-12)


def test_regularised_variants_and_reductions():
    pred = torch.randn(3, 4, 20, dtype=torch.float64) * 3
    target = unit(torch.randn(3, 4, 20, dtype=torch.float64))
    kappa = torch.linalg.vector_norm(pred, dim=-1)
    dot = (pred * target).sum(-1)
    torch.testing.assert_close(nll_vmf(pred, target), -log_cm(kappa, 20) - dot)
    torch.testing.assert_close(nll_vmf_reg1(pred, target, 0.02),
                               nll_vmf(pred, target) + 0.02 * kappa)
    torch.testing.assert_close(nll_vmf_reg2(pred, target, 0.1), -log_cm(kappa, 20) - 0.1 * dot)
    # the squared error (paper Sec. 4.2, "Squared Error"), summed over dimensions
    torch.testing.assert_close(l2_loss(pred, target), ((pred - target) ** 2).sum(-1))
    cos = dot / kappa
    torch.testing.assert_close(cosine_loss(pred, target), 1 - cos)
    per = nll_vmf(pred, target)
    assert per.shape == (3, 4)
    torch.testing.assert_close(nll_vmf(pred, target, reduction="mean"), per.mean())
    torch.testing.assert_close(nll_vmf(pred, target, reduction="sum"), per.sum())
    with pytest.raises(ValueError, match="reduction"):
        nll_vmf(pred, target, reduction="max")
    with pytest.raises(ValueError, match=r"\(3, 4, 20\) and \(3, 4, 19\)"):
        nll_vmf(pred, target[..., :19])


def brute_max_margin(pred, ids, table, margin):
    pred, table = pred.numpy(), table.numpy()
    table = table / np.linalg.norm(table, axis=1, keepdims=True)
    out = []
    for p, w in zip(pred, ids.tolist(), strict=True):
        cos_p = table @ (p / np.linalg.norm(p))
        score = cos_p - table @ table[w]
        score[w] = -np.inf
        j = int(np.argmax(score))
        out.append(max(0.0, margin + cos_p[j] - cos_p[w]))
    return np.array(out)


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_max_margin_uses_the_most_informative_negative(chunk_size):
    table = torch.randn(50, 8, dtype=torch.float64)
    pred = torch.randn(10, 8, dtype=torch.float64)
    ids = torch.randint(0, 50, (10,))
    got = max_margin_loss(pred, ids, table, margin=0.5, chunk_size=chunk_size)
    np.testing.assert_allclose(got.numpy(), brute_max_margin(pred, ids, table, 0.5), rtol=1e-12)
    batched = max_margin_loss(pred.reshape(2, 5, 8), ids.reshape(2, 5), table, 0.5)
    torch.testing.assert_close(batched.reshape(-1), got)


def _gradcheck_cases():
    """``fn(pred) -> per-position losses`` for every loss, one test id each."""
    table = unit(torch.randn(30, 20, dtype=torch.float64))
    ids = torch.tensor([3, 7, 11, 29])

    def mm(p):
        return max_margin_loss(p, ids, table, margin=3.0)  # margin 3: the hinge is active

    return [
        pytest.param(lambda p: nll_vmf(p, table[ids]), id="nllvmf"),
        pytest.param(lambda p: nll_vmf_reg1(p, table[ids]), id="reg1"),
        pytest.param(lambda p: nll_vmf_reg2(p, table[ids]), id="reg2"),
        pytest.param(lambda p: vmf_pseudo_loss(p, table[ids]), id="pseudo"),
        pytest.param(lambda p: l2_loss(p, table[ids]), id="l2"),
        pytest.param(lambda p: cosine_loss(p, table[ids]), id="cosine"),
        pytest.param(mm, id="maxmargin"),
    ]


@pytest.mark.parametrize("fn", _gradcheck_cases())
def test_every_loss_passes_gradcheck(fn):
    # norms 0.5, 5, 40 and 200 cross the series/Hankel boundary (m = 20, v = 9)
    pred = unit(torch.randn(4, 20, dtype=torch.float64)) * torch.tensor(
        [[0.5], [5.0], [40.0], [200.0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(fn, (pred.requires_grad_(True),))


def test_nll_vmf_gradcheck_in_the_debye_regime():
    target = unit(torch.randn(3, 40, dtype=torch.float64))
    pred = unit(torch.randn(3, 40, dtype=torch.float64)) * torch.tensor(
        [[0.3], [7.0], [500.0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda p: nll_vmf(p, target), (pred.requires_grad_(True),))


def test_loss_names_cover_the_head_choices():
    assert set(LOSSES) == {"nllvmf", "reg1", "reg2", "pseudo", "l2", "cosine", "maxmargin"}
    # paper Sec. 4.3: each empirical loss decodes by its own distance, NLLvMF by density
    assert DECODE_METRICS == {"nllvmf": "vmf", "reg1": "vmf", "reg2": "vmf", "pseudo": "vmf",
                              "l2": "l2", "cosine": "cosine", "maxmargin": "cosine"}


def test_l2_loss_is_the_squared_error_by_hand():
    pred = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]])
    target = torch.tensor([[0.0, 1.0, 0.0], [0.6, 0.8, 0.0]])
    # (1 + 1 + 0) and (0.36 + 0.64 + 0); the mean over the two positions is 1.5
    torch.testing.assert_close(l2_loss(pred, target), torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(l2_loss(pred, target, reduction="mean"), torch.tensor(1.5))


@pytest.mark.parametrize("m", [300, 1024, 2048])
def test_pseudo_loss_gradient_approximates_the_bessel_ratio(m):
    """A'(κ) = κ / (v - 1 + sqrt((v+1)² + κ²)) is within 1/v (relative) of I_{v+1}/I_v."""
    v = m / 2 - 1
    kappa = torch.logspace(-6, 5, 60, dtype=torch.float64, requires_grad=True)
    direction = torch.zeros(m, dtype=torch.float64)
    direction[0] = 1.0
    pred = kappa[:, None] * direction
    zero_target = torch.zeros_like(pred)  # isolates A(κ): the alignment term is 0
    (slope,) = torch.autograd.grad(vmf_pseudo_loss(pred, zero_target).sum(), kappa)
    ratio = bessel_ratio(v, kappa.detach())
    assert ((slope - ratio).abs() / ratio).max() <= 1.0 / v + 1e-12


def test_pseudo_loss_value_is_not_minus_log_cm():
    m = 300
    kappa = torch.tensor([0.0, 1.0, 10.0, 100.0, 1000.0], dtype=torch.float64)
    pred = torch.zeros(5, m, dtype=torch.float64)
    pred[:, 0] = kappa
    zero_target = torch.zeros_like(pred)
    pseudo = vmf_pseudo_loss(pred, zero_target)
    exact = -log_cm(kappa, m)
    gap = pseudo - exact
    assert gap.abs().min() > 1.0            # not the value of -log C_m ...
    assert gap.max() - gap.min() > 1.0      # ... nor that value plus a constant
    with pytest.raises(ValueError, match="m >= 4"):
        vmf_pseudo_loss(torch.randn(2, 3), torch.randn(2, 3))


# ------------------------------------------------------------------ decoding
def brute_neighbours(pred: np.ndarray, table: np.ndarray, metric: str, k: int):
    if metric == "l2":
        score = -np.linalg.norm(pred[:, None, :] - table[None], axis=-1)
    else:
        unit_table = table / np.linalg.norm(table, axis=1, keepdims=True)
        score = pred @ unit_table.T
        if metric == "cosine":
            score = score / np.linalg.norm(pred, axis=1, keepdims=True)
    ids = np.argsort(-score, axis=1, kind="stable")[:, :k]
    return ids, np.take_along_axis(score, ids, axis=1)


@pytest.mark.parametrize("chunk_size", [None, 17])
@pytest.mark.parametrize("metric", ["cosine", "vmf", "l2"])
def test_nearest_neighbour_is_the_true_nearest_neighbour(metric, chunk_size):
    table = torch.randn(200, 16, dtype=torch.float64)
    pred = torch.randn(5, 7, 16, dtype=torch.float64) * 4
    ids, scores = nearest_neighbour(pred, table, metric=metric, k=3, chunk_size=chunk_size)
    assert ids.shape == scores.shape == (5, 7, 3)
    assert ids.dtype == torch.int64
    want_ids, want_scores = brute_neighbours(pred.reshape(-1, 16).numpy(), table.numpy(),
                                             metric, 3)
    np.testing.assert_array_equal(ids.reshape(-1, 3).numpy(), want_ids)
    if metric == "vmf":  # log densities: log C_m(‖ê‖) + ê^T e_j
        want_scores = want_scores + log_cm(pred.norm(dim=-1), 16).reshape(-1, 1).numpy()
    np.testing.assert_allclose(scores.reshape(-1, 3).numpy(), want_scores, rtol=1e-10)


def test_vmf_ranking_equals_cosine_ranking():
    table = torch.randn(500, 32)
    pred = torch.randn(64, 32) * torch.rand(64, 1) * 50  # κ varies per position
    cos_ids, _ = nearest_neighbour(pred, table, metric="cosine", k=5)
    vmf_ids, _ = nearest_neighbour(pred, table, metric="vmf", k=5, chunk_size=64)
    torch.testing.assert_close(vmf_ids, cos_ids)


@pytest.mark.parametrize("metric", ["cosine", "vmf"])
def test_the_unit_rows_fast_path_equals_normalising_every_call(metric):
    table = torch.randn(300, 24, dtype=torch.float64)
    table[7] = 0.0  # a zero row stays zero either way
    pred = torch.randn(40, 24, dtype=torch.float64) * 3
    unit = torch.nn.functional.normalize(table, dim=-1)
    plain = nearest_neighbour(pred, table, metric=metric, k=4)
    fast = nearest_neighbour(pred, unit, metric=metric, k=4, unit_rows=True, chunk_size=50)
    torch.testing.assert_close(fast[0], plain[0])
    torch.testing.assert_close(fast[1], plain[1], rtol=1e-12, atol=1e-12)


def test_nearest_neighbour_rejects_bad_arguments():
    table, pred = torch.randn(10, 4), torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"unknown metric 'dot'.*'cosine'"):
        nearest_neighbour(pred, table, metric="dot")
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, V = 10\]"):
        nearest_neighbour(pred, table, k=11)
    with pytest.raises(ValueError, match="size 5 but the predictions have size 4"):
        nearest_neighbour(pred, torch.randn(10, 5))


# ------------------------------------------------------------------ VMFHead
VOCAB, HIDDEN, DIM = 23, 6, 10


def make_head(**options) -> VMFHead:
    table = torch.randn(VOCAB, DIM)
    return VMFHead(VOCAB, HIDDEN, target_embeddings=table, **options)


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_head_shapes_and_decoding(loss):
    head = make_head(loss=loss)
    assert head.decode_metric == DECODE_METRICS[loss]
    h = torch.randn(3, 4, HIDDEN)
    assert head.predict_vectors(h).shape == (3, 4, DIM)
    scores = head.scores(h)
    assert scores.shape == (3, 4, VOCAB)
    ids = head.decode(h)
    assert ids.shape == (3, 4)
    torch.testing.assert_close(ids, scores.argmax(-1))
    # every metric ranks the unit rows alike (no zero row here): the cosine's choice
    torch.testing.assert_close(ids, head.decode(h, metric="cosine"))
    torch.testing.assert_close(head.output_embeddings().norm(dim=-1), torch.ones(VOCAB))
    assert build_head("vmf", vocab_size=VOCAB, d_hidden=HIDDEN, dim=DIM).dim == DIM


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_head_loss_is_the_mean_functional_loss_over_kept_positions(loss):
    head = make_head(loss=loss)
    h = torch.randn(4, 5, HIDDEN)
    y = torch.randint(0, VOCAB, (4, 5))
    y[0, :2] = -1
    keep = y != -1
    pred, table = head.predict_vectors(h)[keep], head.target_embeddings
    if loss == "maxmargin":
        expected = max_margin_loss(pred, y[keep], table, 0.5).mean()
    else:
        expected = LOSSES[loss](pred, table[y[keep]]).mean()
    torch.testing.assert_close(head.loss(h, y, ignore_index=-1), expected)


def test_head_log_prob_refuses_with_an_explanation():
    head = make_head()
    with pytest.raises(NotImplementedError,
                       match=r"density on the unit sphere.*not a distribution over the "
                             r"vocabulary.*scores\(features\).*decode\(features\)"):
        head.log_prob(torch.randn(2, HIDDEN))


def test_head_state_dict_round_trip_with_weights_only():
    head = make_head()
    with torch.no_grad():
        for p in head.parameters():
            p.normal_()
    buf = io.BytesIO()
    torch.save(head.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True, map_location="cpu")
    assert "target_embeddings" in state
    fresh = make_head()  # a different random table until the state is loaded
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh.target_embeddings, head.target_embeddings)
    h = torch.randn(2, HIDDEN)
    torch.testing.assert_close(fresh.scores(h), head.scores(h))


def test_head_table_is_a_frozen_buffer_and_counts_are_right():
    head = make_head()
    assert "target_embeddings" in dict(head.named_buffers())
    assert all(p is not head.target_embeddings for p in head.parameters())
    assert not head.target_embeddings.requires_grad
    counts = head.param_counts()
    assert counts.dedicated == HIDDEN * DIM + DIM
    assert counts.shared == 0
    assert head.frozen_count() == VOCAB * DIM
    assert head.double().target_embeddings.dtype == torch.float64  # moves with the module
    # paper Table 4: a 1,024-d decoder state into m = 300, no bias: 307.2K, for any V
    # (the softmax output layer is 50,000 x 1,024 = 51.2M)
    paper = VMFHead(10, 1024, dim=300, bias=False)
    assert paper.param_counts().dedicated == 307_200 == 1024 * 300
    assert 50_000 * 1024 == 51_200_000


def test_head_rejects_mismatched_tables_and_unknown_losses():
    with pytest.raises(ValueError, match=r"shape \(24, 10\).*\(23, m\)"):
        VMFHead(VOCAB, HIDDEN, target_embeddings=torch.randn(VOCAB + 1, DIM))
    with pytest.raises(ValueError, match=r"shape \(23, 10\).*\(23, 8\).*dim=8"):
        VMFHead(VOCAB, HIDDEN, target_embeddings=torch.randn(VOCAB, DIM), dim=8)
    with pytest.raises(ValueError, match=r"unknown vMF head loss 'ce'.*'nllvmf'.*'maxmargin'"):
        make_head(loss="ce")
    with pytest.raises(ValueError, match="d_hidden=6"):
        make_head().loss(torch.randn(4, 7), torch.zeros(4, dtype=torch.long))


def test_head_scores_follow_the_loss_distance():
    head = make_head(loss="l2").double()
    h = torch.randn(5, HIDDEN, dtype=torch.float64)
    pred, table = head.predict_vectors(h), head.target_embeddings
    torch.testing.assert_close(head.scores(h), -torch.cdist(pred, table) ** 2)
    head = make_head(loss="maxmargin").double()
    pred = head.predict_vectors(h)
    torch.testing.assert_close(head.scores(h), F.cosine_similarity(
        pred[:, None, :], head.target_embeddings[None], dim=-1))
    head = make_head(loss="reg2").double()
    pred = head.predict_vectors(h)
    torch.testing.assert_close(head.scores(h), log_cm(pred.norm(dim=-1, keepdim=True), DIM)
                               + pred @ head.target_embeddings.T)


def test_l2_head_decodes_by_euclidean_distance_where_cosine_disagrees():
    """On unit rows Euclidean and cosine rankings agree, except against a zero row: it is
    at distance ``‖ê‖`` from every prediction, so a short ``ê`` whose best dot product is
    below 1/2 is nearer to it than to any unit row (``‖ê - e‖² = ‖ê‖² - 2 ê^T e + 1``)."""
    table = torch.randn(VOCAB, DIM, dtype=torch.float64)
    table[:, 5] = -table[:, 5].abs()  # every row points away from e_5 ...
    table[5] = torch.eye(DIM, dtype=torch.float64)[5]  # ... except word 5, which is e_5
    table[3] = 0.0  # a word without a vector
    heads = {loss: VMFHead(VOCAB, HIDDEN, target_embeddings=table, loss=loss,
                           bias=False).double() for loss in ("l2", "cosine", "nllvmf")}
    with torch.no_grad():
        for head in heads.values():
            head.proj.weight.zero_()
            head.proj.weight[5, 0] = 1.0  # ê = h_0 e_5
    h = torch.zeros(2, HIDDEN, dtype=torch.float64)
    h[:, 0] = torch.tensor([0.2, 2.0])  # ê = 0.2 e_5 (short) and 2 e_5 (long)
    pred = heads["l2"].predict_vectors(h)
    euclid = torch.cdist(pred, heads["l2"].target_embeddings).argmin(-1)
    assert euclid.tolist() == [3, 5]  # the zero row is nearest to the short prediction
    assert heads["l2"].decode(h).tolist() == [3, 5]
    assert heads["l2"].scores(h).argmax(-1).tolist() == [3, 5]
    for loss in ("cosine", "nllvmf"):  # by cosine (or vMF density) e_5 wins both times
        assert heads[loss].decode(h).tolist() == [5, 5]
        assert heads[loss].scores(h).argmax(-1).tolist() == [5, 5]
    assert heads["cosine"].decode(h, metric="l2").tolist() == [3, 5]


def test_head_refuses_non_finite_rows_at_construction_set_and_load():
    table = torch.randn(VOCAB, DIM)
    table[4, 1] = float("nan")
    table[9, 0] = float("inf")
    with pytest.raises(DataError, match=r"rows \[4, 9\] hold NaN or infinite values"):
        VMFHead(VOCAB, HIDDEN, target_embeddings=table)
    head = make_head()
    before = head.target_embeddings.clone()
    with pytest.raises(DataError, match=r"rows \[4, 9\]"):
        head.set_target_embeddings(table)
    state = head.state_dict()
    state["target_embeddings"] = table
    with pytest.raises(DataError, match=r"rows \[4, 9\]"):
        head.load_state_dict(state)
    torch.testing.assert_close(head.target_embeddings, before)  # nothing was changed
    many = torch.full((VOCAB, DIM), float("nan"))
    with pytest.raises(DataError, match=r"rows \[0, 1, .*, 9, \.\.\. \(23 rows\)\]"):
        VMFHead(VOCAB, HIDDEN, target_embeddings=many)


def test_set_target_embeddings_normalises_and_keeps_dtype():
    head = make_head().double()
    new = torch.randn(VOCAB, DIM) * 5
    head.set_target_embeddings(new)
    assert head.target_embeddings.dtype == torch.float64
    assert "target_embeddings" in dict(head.named_buffers())
    torch.testing.assert_close(head.target_embeddings, F.normalize(new.double(), dim=-1))
    with pytest.raises(ValueError, match=r"\(23, 10\)"):
        head.set_target_embeddings(torch.randn(VOCAB, DIM + 1))


def test_head_leaves_zero_rows_at_zero():
    table = torch.randn(VOCAB, DIM)
    table[3] = 0
    head = VMFHead(VOCAB, HIDDEN, target_embeddings=table)
    assert torch.isfinite(head.target_embeddings).all()
    assert head.target_embeddings[3].abs().sum() == 0
    assert torch.isfinite(head.scores(torch.randn(2, HIDDEN))).all()


def test_head_default_table_is_300_d_and_unit():
    head = VMFHead(VOCAB, HIDDEN)
    assert head.target_embeddings.shape == (VOCAB, 300)
    torch.testing.assert_close(head.target_embeddings.norm(dim=-1), torch.ones(VOCAB))


class _LossOf(nn.Module):
    """Wraps ``head.loss`` as ``forward`` so ``functional_call`` can vary the parameters."""

    def __init__(self, head: VMFHead, target: torch.Tensor) -> None:
        super().__init__()
        self.head, self.target = head, target

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head.loss(h, self.target, ignore_index=-1)


@pytest.mark.parametrize("loss", ["nllvmf", "reg1", "maxmargin"])
def test_head_gradcheck_float64(loss):
    head = make_head(loss=loss, margin=3.0).double()
    wrapper = _LossOf(head, torch.tensor([0, 5, -1, VOCAB - 1]))
    names = [n for n, _ in wrapper.named_parameters()]
    params = tuple(torch.randn_like(p).requires_grad_(True) for _, p in wrapper.named_parameters())
    h = torch.randn(4, HIDDEN, dtype=torch.float64, requires_grad=True)

    def fn(x, *ps):
        return torch.func.functional_call(wrapper, dict(zip(names, ps, strict=True)), (x,))

    assert torch.autograd.gradcheck(fn, (h, *params))


# ------------------------------------------------------------------ CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("m", [2, 5, 50, 300, 1024, 2048])
def test_log_cm_on_cuda_matches_cpu(m, dtype):
    kappa = torch.tensor(KAPPAS, dtype=dtype)
    rtol = 1e-13 if dtype == torch.float64 else 1e-6
    cpu_k, gpu_k = kappa.clone().requires_grad_(True), kappa.cuda().requires_grad_(True)
    cpu, gpu = log_cm(cpu_k, m), log_cm(gpu_k, m)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=rtol, atol=rtol)
    (g_cpu,) = torch.autograd.grad(cpu.sum(), cpu_k)
    (g_gpu,) = torch.autograd.grad(gpu.sum(), gpu_k)
    torch.testing.assert_close(g_gpu.cpu(), g_cpu, rtol=rtol, atol=0.0)
    check_against_reference(m, KAPPAS, dtype, device="cuda")


@cuda
def test_decoding_and_head_on_cuda_match_cpu():
    table, pred = torch.randn(300, 16), torch.randn(9, 16)
    for metric in ("cosine", "vmf", "l2"):
        ids, _ = nearest_neighbour(pred, table, metric=metric, k=2)
        gpu_ids, _ = nearest_neighbour(pred.cuda(), table.cuda(), metric=metric, k=2)
        torch.testing.assert_close(gpu_ids.cpu(), ids)
    head = make_head()
    h, y = torch.randn(4, HIDDEN), torch.randint(0, VOCAB, (4,))
    cpu = head.loss(h, y)
    gpu = head.to("cuda").loss(h.cuda(), y.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("m", "kappa"), [(3, 0.0), (3, 2.0), (3, 50.0), (10, 5.0), (300, 300.0)])
def test_vmf_samples_have_the_right_mean_resultant_length(m, kappa):
    from drillbook.losses import bessel_ratio, sample_vmf

    gen = torch.Generator().manual_seed(0)
    mu = torch.zeros(m, dtype=torch.float64)
    mu[0] = 2.0
    x = sample_vmf(mu, kappa, 20_000, generator=gen)
    torch.testing.assert_close(x.norm(dim=1), torch.ones(20_000, dtype=torch.float64))
    expected = float(bessel_ratio(m / 2 - 1, torch.tensor(kappa, dtype=torch.float64)))
    mean_w = float(x[:, 0].mean())
    assert abs(mean_w - expected) < 4 * float(x[:, 0].std()) / 20_000**0.5 + 1e-3
    with pytest.raises(ValueError, match="nonzero vector"):
        sample_vmf(torch.zeros(3), 1.0, 5)


def test_a_vmf_step_dispatches_few_operations():
    """On a GPU a vMF step is launch-bound: every operation is a kernel. The expansions
    behind ``log C_m`` are evaluated as powers times coefficients, a few operations each,
    not two per term (532 operations per step with Horner's rule, 156 now)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    table = torch.nn.functional.normalize(torch.randn(50, 300, dtype=torch.float64), dim=-1)
    head = build_head("vmf", vocab_size=50, d_hidden=16, target_embeddings=table).double()
    x = torch.randn(12, 16, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 50, (12,))
    head.loss(x, y).backward()  # warm-up
    with Count():
        head.loss(x, y).backward()
    assert Count.n < 200
