"""Errors of a log-probability matrix split by the true probability of each entry."""

from __future__ import annotations

import math

import pytest
import torch

from drillbook.analysis import (
    SyntheticLanguage,
    errors_by_probability,
    singular_values,
)


def _log(rows):
    return torch.tensor(rows, dtype=torch.float64).log()


def test_hand_computed_two_by_three():
    # true probabilities: two entries below 0.1, four at or above it
    true = _log([[0.5, 0.45, 0.05], [0.02, 0.9, 0.08]])
    error = torch.tensor([[0.1, -0.2, 2.0], [-3.0, 0.0, 1.0]], dtype=torch.float64)
    low, high = errors_by_probability(true + error, true, edges=(0.1,))
    # errors 2.0, -3.0, 1.0 on P* = 0.05, 0.02, 0.08
    assert (low.low, low.high) == (0.0, 0.1)
    assert low.entries == pytest.approx(3 / 6)
    assert low.mass == pytest.approx((0.05 + 0.02 + 0.08) / 2)
    assert low.rms_error == pytest.approx(math.sqrt((4 + 9 + 1) / 3))
    total = 0.01 + 0.04 + 4 + 9 + 0 + 1
    assert low.sq_error_share == pytest.approx(14 / total)
    assert high.high == float("inf") and high.entries == pytest.approx(3 / 6)
    assert high.mass == pytest.approx((0.5 + 0.45 + 0.9) / 2)
    assert high.rms_error == pytest.approx(math.sqrt(0.05 / 3))
    assert low.label == "P* < 1e-01" and high.label == "P* >= 1e-01"


def test_shares_sum_to_one_and_an_exact_model_has_no_error():
    lang = SyntheticLanguage(40, 30, 5, seed=2)
    noisy = lang.log_probs + 0.1 * torch.randn(40, 30, dtype=torch.float64,
                                               generator=torch.Generator().manual_seed(0))
    bands = errors_by_probability(noisy, lang.log_probs)
    assert len(bands) == 4 and bands[1].label == "1e-06 <= P* < 1e-04"
    assert sum(b.entries for b in bands) == pytest.approx(1.0)
    assert sum(b.mass for b in bands) == pytest.approx(1.0)
    assert sum(b.sq_error_share for b in bands) == pytest.approx(1.0)
    exact = errors_by_probability(lang.log_probs, lang.log_probs)
    assert all(b.sq_error_share == 0.0 for b in exact)
    assert all(b.rms_error == 0.0 or math.isnan(b.rms_error) for b in exact)


def test_energy_beyond_the_true_rank_is_bounded_by_the_squared_error():
    """Eckart-Young, as the module docstring states it."""
    lang = SyntheticLanguage(60, 25, 3, seed=1)  # rank r + 2 = 5
    model = lang.log_probs + 0.3 * torch.randn(60, 25, dtype=torch.float64,
                                               generator=torch.Generator().manual_seed(1))
    beyond = float((singular_values(model).values[5:] ** 2).sum())
    assert 0 < beyond <= float((model - lang.log_probs).square().sum())


def test_bad_arguments():
    a = torch.zeros(3, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="one shape"):
        errors_by_probability(a, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="increase strictly"):
        errors_by_probability(a, a, edges=(1e-2, 1e-4))
    with pytest.raises(ValueError, match="increase strictly"):
        errors_by_probability(a, a, edges=(0.0, 0.5))
