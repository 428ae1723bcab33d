"""Which target words a translation model gets right, by how often they occur in the
training data (the vMF paper's Table 5 analysis): word F1 of the decoded output
(:func:`rare_word_f1`, the paper's measure), and the teacher-forced accuracy of the model's
next-word choice (:func:`accuracy_by_frequency`), which judges every model on the same
contexts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from ..nmt.batching import make_batches
from ..nmt.model import TranslationModel
from ..nmt.vocab import NMTVocab
from .frequency import DEFAULT_BANDS, band_label, band_of

__all__ = ["F1_BANDS", "accuracy_by_frequency", "rare_word_f1"]

#: training-count bins ``[lo, hi)`` of :func:`rare_word_f1`: compare-mt's, the rows of vMF
#: Table 5 (1, 2, 3, 4, then 5-9, ...), with unseen words (count 0) first
F1_BANDS: tuple[tuple[int, int | None], ...] = (
    (0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 10), (10, 100), (100, 1000), (1000, None))


@torch.no_grad()
def accuracy_by_frequency(model: TranslationModel, pairs, src_vocab: NMTVocab,
                          tgt_vocab: NMTVocab, *,
                          bands: Sequence[tuple[int, int | None]] = DEFAULT_BANDS,
                          batch_size: int = 64, device: torch.device | str = "cpu"
                          ) -> list[dict]:
    """Teacher-forced word accuracy per training-frequency band of the reference word.

    Returns one dict per band: ``band`` (label), ``tokens``, ``types``, ``accuracy``.
    ``<eos>`` and ``<unk>`` targets are left out (they have no training frequency).
    """
    model.eval()
    counts = tgt_vocab.counts
    band_ids = band_of(counts, bands)
    hits = torch.zeros(len(bands))
    totals = torch.zeros(len(bands))
    types: list[set[int]] = [set() for _ in bands]
    for batch in make_batches(pairs, src_vocab, tgt_vocab, batch_size=batch_size,
                              shuffle=False):
        features = model(batch.src.to(device), batch.src_lengths.to(device),
                         batch.tgt_in.to(device))
        choice = model.next_token_scores(features).argmax(-1).cpu()
        gold = batch.tgt_out
        keep = (gold != tgt_vocab.pad_id) & (gold != tgt_vocab.eos_id) & (
            gold != tgt_vocab.unk_id)
        band = band_ids[gold[keep]]
        right = (choice[keep] == gold[keep]).float()
        inside = band >= 0
        hits.index_add_(0, band[inside], right[inside])
        totals.index_add_(0, band[inside], torch.ones_like(right[inside]))
        for b, w in zip(band[inside].tolist(), gold[keep][inside].tolist(), strict=True):
            types[b].add(w)
    rows = []
    for i, (lo, hi) in enumerate(bands):
        label = f"{lo}+" if hi is None else f"{lo}-{hi - 1}"
        rows.append({"band": label, "tokens": int(totals[i]), "types": len(types[i]),
                     "accuracy": float(hits[i] / totals[i]) if totals[i] else float("nan")})
    return rows


def rare_word_f1(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
                 train_counts: dict[str, int],
                 bands: Sequence[tuple[int, int | None]] = F1_BANDS) -> list[dict[str, Any]]:
    """Word F1 of decoded output by the training frequency of the word (vMF Table 5).

    As compare-mt computes it: in each sentence a word is matched ``min(count in the
    hypothesis, count in the reference)`` times; over the corpus, a bin's precision is its
    words' matches over their occurrences in the hypotheses, its recall the matches over
    their occurrences in the references, and F1 their harmonic mean. A word's bin is its
    count in ``train_counts`` (the training targets; a word not in it counts 0).

    Returns:
        one dict per bin: ``band``, ``low``, ``high``, ``reference_tokens``,
        ``hypothesis_tokens``, ``matches``, ``precision`` and ``recall`` (None where the
        bin has no occurrences on that side), ``f1`` (None for a bin without reference
        words; 0 when the translations produce none of its words correctly, precision
        undefined included, as compare-mt scores it).

    Raises:
        ValueError: different numbers of hypotheses and references.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    matched: Counter[str] = Counter()
    in_hyp: Counter[str] = Counter()
    in_ref: Counter[str] = Counter()
    for hyp, ref in zip(hypotheses, references, strict=True):
        h, r = Counter(hyp), Counter(ref)
        in_hyp.update(h)
        in_ref.update(r)
        matched.update({w: min(c, r[w]) for w, c in h.items() if w in r})
    totals = [[0, 0, 0] for _ in bands]  # matches, hypothesis tokens, reference tokens
    for word in set(in_hyp) | set(in_ref):
        count = train_counts.get(word, 0)
        for i, (lo, hi) in enumerate(bands):
            if count >= lo and (hi is None or count < hi):
                totals[i][0] += matched[word]
                totals[i][1] += in_hyp[word]
                totals[i][2] += in_ref[word]
                break
    rows = []
    for (lo, hi), (m, n_hyp, n_ref) in zip(bands, totals, strict=True):
        p = m / n_hyp if n_hyp else None
        r = m / n_ref if n_ref else None
        # no reference word in the bin: nothing to score; none produced: F1 0, as compare-mt
        f1 = None if r is None else (2 * p * r / (p + r) if p and r else 0.0)
        rows.append({"band": band_label(lo, hi), "low": lo, "high": hi,
                     "reference_tokens": n_ref, "hypothesis_tokens": n_hyp, "matches": m,
                     "precision": p, "recall": r, "f1": f1})
    return rows
