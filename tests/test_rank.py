"""Rank and spectra, checked against numpy's SVD and matrix_rank."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drillbook.analysis import DRILL_TOL, matrix_rank, singular_values


def low_rank(n: int, v: int, r: int, seed: int = 0, offset: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, r)) @ rng.standard_normal((r, v)) + offset


@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (200, 25)])  # wide, square-ish, tall
def test_svd_values_match_numpy(shape):
    m = np.random.default_rng(1).standard_normal(shape)
    spec = singular_values(m, method="svd", device="cpu")
    np.testing.assert_allclose(spec.values, np.linalg.svd(m, compute_uv=False), rtol=1e-12)
    assert spec.rank() == np.linalg.matrix_rank(m)


@pytest.mark.parametrize("r", [1, 5, 17])
def test_rank_matches_numpy_default_and_drill_tolerance(r):
    m = low_rank(120, 50, r, seed=r)
    m[:, :3] *= 1e-3  # some small singular directions, so the two tolerances can differ
    assert matrix_rank(m, method="svd", device="cpu") == np.linalg.matrix_rank(m) == r
    assert (matrix_rank(m, tol=DRILL_TOL, method="svd", device="cpu")
            == np.linalg.matrix_rank(m, tol=1.0))


def test_gram_agrees_with_svd_and_streams_chunks():
    m = low_rank(3000, 60, 23, seed=2)
    svd = singular_values(m, method="svd", device="cpu")
    gram = singular_values(m, method="gram", device="cpu")
    chunks = singular_values((torch.as_tensor(c) for c in np.array_split(m, 7)),
                             method="gram", device="cpu")
    np.testing.assert_allclose(gram.values[:23], svd.values[:23], rtol=1e-9)
    np.testing.assert_allclose(chunks.values[:23], gram.values[:23], rtol=1e-9)
    assert (chunks.values[23:] < chunks.resolution).all()  # the zeros stay in the noise
    assert gram.rank(DRILL_TOL) == svd.rank(DRILL_TOL) == 23


def test_gram_uses_the_short_side_for_wide_matrices():
    m = low_rank(30, 400, 7, seed=8)  # 30 rows, 400 columns: a 30 x 30 Gram suffices
    wide = singular_values(m, method="gram", device="cpu")
    np.testing.assert_allclose(wide.values[:7], np.linalg.svd(m, compute_uv=False)[:7],
                               rtol=1e-9)
    assert wide.values.shape == (30,) and wide.rank(DRILL_TOL) == 7
    chunked = singular_values(iter(np.array_split(m, 4)), method="gram", device="cpu")
    np.testing.assert_allclose(chunked.values[:7], wide.values[:7], rtol=1e-9)


def test_gram_on_a_log_probability_like_matrix_with_drill_tolerance():
    """Log-probabilities sit around -10: one huge singular value. Gram still resolves
    DRILL's tol = 1 exactly as the SVD does."""
    logits = torch.as_tensor(low_rank(4000, 300, 40, seed=3)) * 0.5
    logp = torch.log_softmax(logits, dim=-1) - 5.0
    svd = singular_values(logp, method="svd", device="cpu")
    gram = singular_values(logp, method="gram", device="cpu")
    assert gram.resolution < DRILL_TOL
    assert gram.rank(DRILL_TOL) == svd.rank(DRILL_TOL) == np.linalg.matrix_rank(
        logp.numpy(), tol=1.0)


def test_gram_refuses_a_tolerance_below_its_resolution():
    m = low_rank(500, 40, 10, seed=4, offset=-10.0)
    gram = singular_values(m, method="gram", device="cpu")
    with pytest.raises(ValueError, match=r"below the 'gram' method's resolution.*method='svd'"):
        gram.rank()  # numpy's relative default is far below what squaring preserves


def test_auto_switches_to_gram_for_large_matrices():
    m = low_rank(500, 40, 10, seed=5)
    assert singular_values(m, device="cpu").method == "svd"
    assert singular_values(m, device="cpu", svd_max_elements=1000).method == "gram"
    assert singular_values(iter([torch.as_tensor(m)]), device="cpu").method == "gram"


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="2-d"):
        singular_values(torch.zeros(3, 4, 5))
    with pytest.raises(ValueError, match="inf or nan"):
        singular_values(torch.tensor([[0.0, -float("inf")], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="empty"):
        singular_values(iter([]), method="gram")
    with pytest.raises(ValueError, match="method must be"):
        singular_values(torch.zeros(2, 2), method="qr")
    with pytest.raises(ValueError, match=">= 0"):
        singular_values(torch.eye(3)).rank(-1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_spectrum_matches_cpu():
    """The devices agree down to each method's resolution and no further: below it the
    values are rounding noise on either (about 1e-5 of s_max for the Gram route here),
    so they are compared only as "at most the resolution". The ranks they give at any
    tolerance the spectrum accepts are the same."""
    m = low_rank(2000, 100, 30, seed=6)
    for method in ("svd", "gram"):
        gpu = singular_values(m, method=method, device="cuda")
        cpu = singular_values(m, method=method, device="cpu")
        floor = max(gpu.resolution, cpu.resolution)
        np.testing.assert_allclose(gpu.values, cpu.values, rtol=1e-7, atol=floor)
        assert gpu.rank(1.0) == cpu.rank(1.0) == 30
