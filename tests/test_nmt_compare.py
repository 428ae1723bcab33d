"""Side-by-side helpers for translation models: the trainer's loss of one batch, step
times measured round-robin, short example pairs and example translations."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from drillbook.errors import ConfigError
from drillbook.nmt import NMTVocab, make_batches
from drillbook.nmt.compare import (
    example_translations,
    format_examples,
    repeats_a_word,
    short_pairs,
    stuck_translations,
    time_training_steps,
)
from drillbook.nmt.model import Seq2Seq
from drillbook.train import translation_loss

PAIRS = [("ein hund".split(), "a dog".split()),
         ("ein sehr großer roter hund läuft".split(), "a very big red dog runs".split()),
         ("zwei katzen".split(), "two cats".split())]


def vocabs() -> tuple[NMTVocab, NMTVocab]:
    return (NMTVocab.build([s for s, _ in PAIRS], min_freq=1),
            NMTVocab.build([t for _, t in PAIRS], min_freq=1))


def test_translation_loss_is_the_full_loss_or_an_exact_sampled_softmax():
    torch.manual_seed(0)
    src_vocab, tgt_vocab = vocabs()
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), emb_size=8, hidden=8).eval()
    batch = make_batches(PAIRS, src_vocab, tgt_vocab, batch_size=3, shuffle=False)[0]
    full = translation_loss(model, batch)
    torch.testing.assert_close(full, model.loss(batch.src, batch.src_lengths, batch.tgt_in,
                                                batch.tgt_out))
    # every word a candidate: the same cross-entropy, over the words in another order
    everything = translation_loss(model, batch, negative_sampling=100.0)
    torch.testing.assert_close(everything, full)
    # a small sample leaves words out of the normaliser: a smaller loss
    gen = torch.Generator().manual_seed(0)
    sampled = translation_loss(model, batch, negative_sampling=1.0,
                               exclude=(tgt_vocab.pad_id, tgt_vocab.bos_id), generator=gen)
    assert sampled < full


def test_steps_are_timed_round_robin_and_each_gets_its_own_median():
    calls: list[str] = []
    module = nn.Linear(3, 1)
    x = torch.ones(2, 3)

    def step(name: str, pause: float):
        def loss():
            calls.append(name)
            time.sleep(pause)
            return module(x).sum()
        return loss

    times = time_training_steps({"slow": (module, step("slow", 0.03)),
                                 "fast": (module, step("fast", 0.0))},
                                repeats=3, warmup=1)
    assert calls == ["slow", "fast"] * 4  # one warm-up round, then three timed rounds
    assert list(times) == ["slow", "fast"]
    assert times["slow"] >= 0.03 > times["fast"]
    assert module.weight.grad is None  # the gradients are not left behind
    with pytest.raises(ConfigError, match="no steps"):
        time_training_steps({})
    with pytest.raises(ConfigError, match="repeats >= 1"):
        time_training_steps({"a": (module, step("a", 0.0))}, repeats=0)


def test_short_pairs_keeps_corpus_order_and_both_limits():
    assert short_pairs(PAIRS, 5, max_words=2) == [PAIRS[0], PAIRS[2]]
    assert short_pairs(PAIRS, 1, max_words=2) == [PAIRS[0]]
    assert short_pairs(PAIRS, 5, max_words=6) == PAIRS
    with pytest.raises(ConfigError, match="n >= 1"):
        short_pairs(PAIRS, 0)


def test_example_translations_of_a_model_that_always_says_dog():
    torch.manual_seed(0)
    src_vocab, tgt_vocab = vocabs()
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), emb_size=8, hidden=8)
    with torch.no_grad():  # scores: only the bias counts, and "dog" has the largest
        model.head.weight.zero_()
        model.head.bias.zero_()
        model.head.bias[tgt_vocab.index("dog")] = 5.0
    rows = example_translations({"dog model": (model, src_vocab, tgt_vocab)}, PAIRS,
                                max_len=3)
    assert [r["source"] for r in rows] == [" ".join(s) for s, _ in PAIRS]
    assert [r["reference"] for r in rows] == [" ".join(t) for _, t in PAIRS]
    assert [r["dog model"] for r in rows] == ["dog dog dog"] * 3
    assert format_examples(rows[:2]).splitlines() == [
        "source:    ein hund", "reference: a dog", "dog model: dog dog dog", "",
        "source:    ein sehr großer roter hund läuft",
        "reference: a very big red dog runs", "dog model: dog dog dog"]
    assert format_examples([]) == ""


def test_a_word_repeated_four_times_in_a_row_is_stuck():
    assert repeats_a_word("a a a a .".split())
    assert not repeats_a_word("a a a . a".split())  # three in a row, then a break
    assert not repeats_a_word("a man in a red shirt".split())  # frequent, not in a row
    assert repeats_a_word("two young young young".split(), times=3)
    assert not repeats_a_word([])
    with pytest.raises(ConfigError, match="times >= 2"):
        repeats_a_word(["a"], times=1)


def test_stuck_translations_counts_per_model_and_skips_source_and_reference():
    rows = [{"source": "x x x x", "reference": "y y y y", "tied": "a a a a a .",
             "dual": "a man ."},
            {"source": "z", "reference": "w", "tied": "a a a a", "dual": "two two two two"}]
    assert stuck_translations(rows) == {"tied": 2, "dual": 1}
    assert stuck_translations([]) == {}
