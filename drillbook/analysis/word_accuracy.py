"""Which target words a translation model gets right, by training frequency.

The vMF paper (Table 5) splits target words by how often they occur in the training
data and reports how accurately each model produces them. Here the measurement is made
under teacher forcing, so every model is judged on the same contexts: at each reference
position the model's choice (the most probable word for a softmax head, the nearest
embedding for a continuous head) is compared with the reference word.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..nmt.batching import make_batches
from ..nmt.model import Seq2Seq
from ..nmt.vocab import NMTVocab
from .frequency import DEFAULT_BANDS, band_of

__all__ = ["accuracy_by_frequency"]


@torch.no_grad()
def accuracy_by_frequency(model: Seq2Seq, pairs, src_vocab: NMTVocab, tgt_vocab: NMTVocab,
                          *, bands: Sequence[tuple[int, int | None]] = DEFAULT_BANDS,
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
