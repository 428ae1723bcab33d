"""What a translation run's result file carries for the chapters beyond its metrics (the
``analyses`` block, its keys the task's :attr:`~drillbook.train.tasks.registry.Task.analyses_keys`),
read from greedy decoding with :mod:`drillbook.analysis`, and the split's BLEU under beam
search."""

from __future__ import annotations

import time
from typing import Any

import torch

from ....analysis import rare_word_f1
from ....nmt.bleu import multi30k_bleu
from ....nmt.corpus import ParallelCorpus
from ....nmt.decode import translate_pairs
from ...run_files import LoadedRun

__all__ = ["BEAM", "translation_analyses"]

#: the beam width of the ``beam`` analysis (the vMF paper's and the usual width)
BEAM = 5


def translation_analyses(run: LoadedRun, split: str, *, data: ParallelCorpus,
                         max_items: int | None = None, examples: int = 3) -> dict[str, Any]:
    """What a translation run's result file carries for the chapters, from greedy decoding
    of a split of ``data`` (its first ``max_items`` sentences, if given):

    * ``rare_word_f1``: word F1 of the decoded output by the word's training count (vMF
      Table 5's analysis; :func:`~drillbook.analysis.rare_word_f1`);
    * ``sentences_per_second`` of decoding (the device synchronised around it);
    * ``examples``: the first ``examples`` pairs of at most 12 words each way, with the
      model's translation (tokens joined by spaces);
    * ``beam``: the split decoded with a beam of :data:`BEAM` (``beam``, ``bleu``, its
      ``bleu_signature``, ``sentences_per_second``), as the result's greedy test BLEU is
      computed; a head without a distribution over words (vMF) has none.
    """
    tgt_vocab = run.data[1]
    pairs = data.split(split)[:max_items]
    hyps, seconds = _decoded(run, pairs, beam=1)
    counts = dict(zip(tgt_vocab.words, tgt_vocab.counts.tolist(), strict=True))
    short = [i for i, (s, g) in enumerate(pairs) if len(s) <= 12 and len(g) <= 12][:examples]
    out = {
        "rare_word_f1": rare_word_f1(hyps, [g for _, g in pairs], counts),
        "sentences_per_second": len(pairs) / seconds if seconds > 0 else None,
        "examples": [{"source": " ".join(pairs[i][0]), "reference": " ".join(pairs[i][1]),
                      "hypothesis": " ".join(hyps[i])} for i in short],
    }
    if run.model.head.is_distribution:
        beamed, seconds = _decoded(run, pairs, beam=BEAM)
        bleu = multi30k_bleu(beamed, split=split, lang=run.config.data.tgt, download=True)
        out["beam"] = {"beam": BEAM, "bleu": bleu.score, "bleu_signature": bleu.signature,
                       "sentences_per_second": len(pairs) / seconds if seconds > 0 else None}
    return out


def _decoded(run: LoadedRun, pairs, *, beam: int) -> tuple[list[list[str]], float]:
    """The translations of ``pairs`` with a ``beam`` (1: greedy), and the seconds they took
    (the device synchronised around them)."""
    src_vocab, tgt_vocab = run.data
    device = next(run.model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    hyps = translate_pairs(run.model, pairs, src_vocab, tgt_vocab, beam=beam,
                           max_len=run.config.train.max_len, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return hyps, time.perf_counter() - start
