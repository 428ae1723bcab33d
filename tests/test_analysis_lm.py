"""Frequency bands (DRILL Fig. 3) and nearest neighbours (joint-embedding Table 1)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from drillbook.analysis import (
    DRILL_BANDS,
    band_of,
    compare_by_frequency,
    nearest_neighbours,
    token_nll,
    unigram_nll,
)
from drillbook.data import EOS, Vocabulary, batchify, read_tokens
from drillbook.errors import ConfigError
from drillbook.heads import build_head
from drillbook.models import AWDLSTM, LanguageModel
from drillbook.train import evaluate


def test_band_of_assigns_half_open_intervals():
    counts = torch.tensor([0, 1, 9, 10, 99, 100, 5000, 20_000])
    assert band_of(counts).tolist() == [-1, 0, 0, 1, 1, 2, 3, 4]
    assert band_of(counts, [(1, 50), (50, None)]).tolist() == [-1, 0, 0, 0, 1, 1, 1, 1]


def test_compare_by_frequency_token_average_by_hand():
    counts = torch.tensor([5, 500, 0])  # word 0 rare, word 1 frequent
    target = torch.tensor([0, 0, 1, 1, 1])
    nll_a = torch.tensor([1.0, 3.0, 1.0, 1.0, 1.0])
    nll_b = torch.tensor([4.0, 4.0, 1.0, 1.0, 2.5])
    rows = compare_by_frequency(nll_a, nll_b, target, counts, [(1, 10), (10, 1000),
                                                               (1000, None)], average="token")
    rare, frequent, empty = rows
    assert (rare.n_types, rare.n_tokens, rare.ce_a, rare.ce_b) == (1, 2, 2.0, 4.0)
    assert rare.rel_diff_percent == pytest.approx(100.0)  # (4 - 2) / 2, relative to A
    assert frequent.ce_b == pytest.approx(1.5) and frequent.rel_diff_percent == \
        pytest.approx(100 * (1.5 - 1.0) / 1.0)
    assert empty.n_tokens == 0 and np.isnan(empty.rel_diff_percent)
    assert rare.label == "1-9" and empty.label == "1000+" and rare.average == "token"
    with pytest.raises(ValueError, match="equal in shape"):
        compare_by_frequency(nll_a, nll_b[:3], target, counts)
    with pytest.raises(ValueError, match="unknown average 'median'"):
        compare_by_frequency(nll_a, nll_b, target, counts, average="median")


def test_compare_by_frequency_per_word_mean_by_hand():
    """DRILL Fig. 3: per word, (CE_B - CE_A) / CE_A of its summed losses; per bin, the
    mean over words. Word 0: A 1 + 3 = 4, B 4 + 4 = 8, +100 %; word 1: A 2, B 1, -50 %;
    both in [1, 50): +25 %. The token average of the same bin: A 2, B 3, +50 %."""
    counts = torch.tensor([3, 40, 60, 7])  # word 3 occurs only in training
    target = torch.tensor([0, 1, 0, 2, 2])
    nll_a = torch.tensor([1.0, 2.0, 3.0, 1.0, 1.0])
    nll_b = torch.tensor([4.0, 1.0, 4.0, 1.5, 0.5])
    low, mid, *rest = compare_by_frequency(nll_a, nll_b, target, counts)  # DRILL bins
    assert (low.low, low.high, low.n_types, low.n_tokens) == (1, 50, 2, 3)
    assert low.rel_diff_percent == pytest.approx(25.0) and low.average == "word"
    assert (mid.low, mid.high, mid.n_types) == (50, 100, 1)
    assert mid.rel_diff_percent == pytest.approx(0.0)  # 2 vs 2 summed
    assert all(r.n_types == 0 for r in rest) and len(rest) == len(DRILL_BANDS) - 2
    token = compare_by_frequency(nll_a, nll_b, target, counts, average="token")[0]
    assert token.rel_diff_percent == pytest.approx(50.0)
    # an excluded id (DRILL leaves out <eos>) counts in no bin
    low = compare_by_frequency(nll_a, nll_b, target, counts, exclude=[1])[0]
    assert (low.n_types, low.n_tokens, low.rel_diff_percent) == (1, 2, pytest.approx(100.0))


PTB = Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb"


@pytest.mark.skipif(not (PTB / "ptb.test.txt").is_file() or not (PTB / "ptb.train.txt").is_file(),
                    reason="needs PTB: set DRILLBOOK_DATA (make test points it at ../shared/data)")
def test_drill_bins_hold_the_papers_word_counts_on_ptb():
    """DRILL's text: the lowest band "corresponds to 4116 unique words", the highest to 16
    (the authors' script also gives the bins between)."""
    train, test = read_tokens(PTB / "ptb.train.txt"), read_tokens(PTB / "ptb.test.txt")
    vocab = Vocabulary.build(train)
    target = vocab.encode(test)
    ones = torch.ones(target.shape)
    rows = compare_by_frequency(ones, ones, target, vocab.counts, exclude=[vocab.index(EOS)])
    assert [r.n_types for r in rows] == [4116, 861, 649, 243, 91, 50, 22, 16]
    assert sum(r.n_tokens for r in rows) == len(test) - test.count(EOS)


def test_token_nll_averages_to_the_evaluation_loss():
    torch.manual_seed(0)
    enc = AWDLSTM(25, emsize=8, nhid=10, nlayers=2)
    model = LanguageModel(enc, build_head("tied", vocab_size=25, d_hidden=8,
                                          embedding=enc.embedding)).eval()
    data = batchify(torch.randint(0, 25, (400,)), 4)
    nll, target = token_nll(model, data, bptt=7)
    loss, n = evaluate(model, data, bptt=7)
    assert nll.shape == target.shape == (n,)
    assert float(nll.double().mean()) == pytest.approx(loss, rel=1e-5)


def test_nearest_neighbours_match_brute_force():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((40, 6))
    got = nearest_neighbours(torch.as_tensor(table), [3, 17], k=4)
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    for q, row in zip([3, 17], got, strict=True):
        sims = unit @ unit[q]
        sims[q] = -np.inf
        order = np.argsort(-sims)[:4]
        assert [i for i, _ in row] == order.tolist()
        np.testing.assert_allclose([s for _, s in row], sims[order], rtol=1e-12)
    l2 = nearest_neighbours(torch.as_tensor(table), [5], k=2, metric="l2")[0]
    dists = np.linalg.norm(table - table[5], axis=1)
    dists[5] = np.inf
    assert [i for i, _ in l2] == np.argsort(dists)[:2].tolist()
    assert l2[0][1] == pytest.approx(dists.min())


def test_nearest_neighbours_bad_input():
    table = torch.randn(10, 3)
    with pytest.raises(ValueError, match=r"k must lie in \[1, 9\]"):
        nearest_neighbours(table, [0], k=10)
    with pytest.raises(ValueError, match=r"query ids must lie in \[0, 10\)"):
        nearest_neighbours(table, [10])
    with pytest.raises(ValueError, match="metric"):
        nearest_neighbours(table, [0], metric="dot")


def test_unigram_nll_by_hand():
    counts = torch.tensor([3, 1, 0])
    target = torch.tensor([[0, 1], [1, 0]])
    nll = unigram_nll(counts, target)
    expected = -torch.tensor([[3 / 4, 1 / 4], [1 / 4, 3 / 4]], dtype=torch.float64).log()
    assert nll.dtype == torch.float64 and nll.shape == (2, 2)
    torch.testing.assert_close(nll, expected)
    # add-one: (n + 1) / (N + V) = (n + 1) / 7, and the unseen word gets 1/7
    smoothed = unigram_nll(counts, torch.tensor([0, 2]), alpha=1.0)
    torch.testing.assert_close(smoothed, -torch.tensor([4 / 7, 1 / 7],
                                                       dtype=torch.float64).log())
    with pytest.raises(ConfigError, match="word id 2 never occurs"):
        unigram_nll(counts, torch.tensor([0, 2]))
    with pytest.raises(ConfigError, match="alpha must be"):
        unigram_nll(counts, target, alpha=-1.0)
