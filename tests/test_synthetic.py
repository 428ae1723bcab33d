"""The synthetic language, and the bottleneck it makes visible."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.special import rel_entr
from torch import nn

from drillbook.analysis import DRILL_TOL, SyntheticLanguage, fit_head, singular_values
from drillbook.heads import build_head


def test_rows_are_distributions_and_seed_makes_it_reproducible():
    lang = SyntheticLanguage(64, 20, 5, seed=3)
    torch.testing.assert_close(lang.probs.sum(-1), torch.ones(64, dtype=torch.float64))
    assert torch.equal(lang.log_probs, SyntheticLanguage(64, 20, 5, seed=3).log_probs)
    assert not torch.equal(lang.log_probs, SyntheticLanguage(64, 20, 5, seed=4).log_probs)


@pytest.mark.parametrize("r", [1, 4, 12])
def test_rank_of_A_is_logit_rank_plus_two(r):
    """r from F G^T, one for the unigram column, one for the row normaliser."""
    lang = SyntheticLanguage(200, 40, r, seed=r)
    assert singular_values(lang.log_probs).rank() == r + 2


def test_full_logit_rank_gives_a_full_rank_language():
    lang = SyntheticLanguage(200, 40, 40)
    assert singular_values(lang.log_probs).rank() == 40


def test_kl_and_entropy_match_scipy():
    lang = SyntheticLanguage(50, 12, 12, seed=1)
    q = torch.log_softmax(torch.randn(50, 12, dtype=torch.float64), -1)
    p = lang.probs.numpy()
    expected = rel_entr(p, np.exp(q.numpy())).sum(-1).mean()
    assert float(lang.kl(q)) == pytest.approx(expected, rel=1e-12)
    assert float(lang.kl(lang.log_probs)) == 0.0
    assert float(lang.entropy()) == pytest.approx(-(p * np.log(p)).sum(-1).mean(), rel=1e-12)


def test_samples_follow_the_distribution():
    lang = SyntheticLanguage(4, 6, 6, sharpness=1.0, seed=0)
    ctx, words = lang.sample(40_000, torch.Generator().manual_seed(0))
    assert ctx.shape == words.shape == (40_000,) and words.dtype == torch.int64
    joint = torch.zeros(4, 6, dtype=torch.float64)
    joint.index_put_((ctx, words), torch.ones(40_000, dtype=torch.float64), accumulate=True)
    expected = lang.context_prior[:, None] * lang.probs
    assert (joint / 40_000 - expected).abs().max() < 0.01


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"logit_rank must be an integer in \[1, vocab_size=5"):
        SyntheticLanguage(10, 5, 6)
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 2"):
        SyntheticLanguage(10, 1, 1)
    for bad in ({"n_contexts": 2.5}, {"logit_rank": 0}, {"sharpness": float("nan")},
                {"zipf": -1.0}, {"seed": "0"}):  # each refused in one line naming it
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be"):
            SyntheticLanguage(**{"n_contexts": 10, "vocab_size": 5, "logit_rank": 2, **bad})
    with pytest.raises(ValueError, match=r"shape \(10, 5\)"):
        SyntheticLanguage(10, 5, 2).kl(torch.zeros(5, 10))
    head = build_head("softmax", vocab_size=7, d_hidden=2)
    with pytest.raises(ValueError, match="vocab_size=7 but the language has 5"):
        fit_head(SyntheticLanguage(10, 5, 2), head, steps=1)


# ---------------------------------------------------------------- the bottleneck
V, U = 48, 240


@pytest.fixture(scope="module")
def high_rank():
    return SyntheticLanguage(U, V, V, seed=0)


def _fit(lang, d, kind="softmax", steps=300):
    torch.manual_seed(0)
    emb = nn.Embedding(V, d).double()
    head = build_head(kind, vocab_size=V, d_hidden=d, embedding=emb).double()
    fit = fit_head(lang, head, steps=steps, seed=0)
    with torch.no_grad():
        return fit, head.logits(fit.hidden), head.log_prob(fit.hidden)


@pytest.mark.parametrize("kind", ["softmax", "tied"])
@pytest.mark.parametrize("d", [2, 5, 11])
def test_fitted_head_has_rank_d_plus_1_logits_and_d_plus_2_log_probs(high_rank, kind, d):
    _, logits, logp = _fit(high_rank, d, kind)
    assert singular_values(logits).rank() == d + 1
    assert singular_values(logp).rank() == d + 2
    assert singular_values(logp).rank(DRILL_TOL) <= d + 2


def test_without_bias_the_log_prob_matrix_has_rank_d_plus_1(high_rank):
    d = 6
    head = build_head("softmax", vocab_size=V, d_hidden=d, bias=False).double()
    fit = fit_head(high_rank, head, steps=50)
    with torch.no_grad():
        assert singular_values(head.log_prob(fit.hidden)).rank() == d + 1


def test_kl_gap_shrinks_as_d_grows(high_rank):
    kls = [_fit(high_rank, d)[0].kl for d in (2, 4, 8, 16, 32)]
    assert all(b < a for a, b in itertools.pairwise(kls)), kls
    assert kls[0] > 0.5 and kls[-1] < 0.1 * kls[0]


def test_low_rank_language_is_fit_once_d_reaches_its_rank():
    lang = SyntheticLanguage(U, V, 6, seed=1)
    below, at = _fit(lang, 3, steps=600)[0].kl, _fit(lang, 6, steps=600)[0].kl
    assert below > 0.05
    assert at < 1e-3


def test_a_mixture_of_two_low_rank_softmaxes_is_not_low_rank(high_rank):
    _, _, logp = _fit(high_rank, 3)
    mix = torch.logaddexp(logp, logp.roll(1, dims=0)) - np.log(2.0)
    assert singular_values(mix).rank() > 3 * (3 + 2)


def test_fit_reports_the_free_numbers_per_context():
    """A head that reads two layers gets a free vector for each: DOC over layers of sizes
    3 and 4 optimises 7 numbers per context, MoS over one layer of 7 as many."""
    lang = SyntheticLanguage(20, 9, 9, seed=0)
    emb = nn.Embedding(9, 5).double()
    doc = build_head("doc", vocab_size=9, d_hidden=4, embedding=emb, vectors_per_layer=[1, 1],
                     layer_sizes=[3, 4], cv_weight=0.0).double()
    mos = build_head("mos", vocab_size=9, d_hidden=7, embedding=emb, n_experts=2).double()
    fit_doc, fit_mos = fit_head(lang, doc, steps=2), fit_head(lang, mos, steps=2)
    assert [t.shape for t in fit_doc.features.layers] == [(20, 3), (20, 4)]
    assert fit_doc.context_dims == 3 + 4 == fit_mos.context_dims == fit_mos.hidden.shape[1]
