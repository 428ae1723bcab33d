"""What a translation run's result file carries for the chapters beyond its metrics (the
``analyses`` block, its keys the task's :attr:`~drillbook.train.tasks.registry.Task.analyses_keys`),
read from greedy decoding with :mod:`drillbook.analysis`."""

from __future__ import annotations

import time
from typing import Any

import torch

from ....analysis import rare_word_f1
from ....nmt.corpus import ParallelCorpus
from ....nmt.decode import translate_pairs
from ...run_files import LoadedRun

__all__ = ["translation_analyses"]


def translation_analyses(run: LoadedRun, split: str, *, data: ParallelCorpus,
                         max_items: int | None = None, examples: int = 3) -> dict[str, Any]:
    """What a translation run's result file carries for the chapters, from greedy decoding
    of a split of ``data`` (its first ``max_items`` sentences, if given):

    * ``rare_word_f1``: word F1 of the decoded output by the word's training count (vMF
      Table 5's analysis; :func:`~drillbook.analysis.rare_word_f1`);
    * ``sentences_per_second`` of decoding (the device synchronised around it);
    * ``examples``: the first ``examples`` pairs of at most 12 words each way, with the
      model's translation (tokens joined by spaces).
    """
    src_vocab, tgt_vocab = run.data
    pairs = data.split(split)[:max_items]
    device = next(run.model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    hyps = translate_pairs(run.model, pairs, src_vocab, tgt_vocab,
                           max_len=run.config.train.max_len, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    counts = dict(zip(tgt_vocab.words, tgt_vocab.counts.tolist(), strict=True))
    short = [i for i, (s, g) in enumerate(pairs) if len(s) <= 12 and len(g) <= 12][:examples]
    return {
        "rare_word_f1": rare_word_f1(hyps, [g for _, g in pairs], counts),
        "sentences_per_second": len(pairs) / seconds if seconds > 0 else None,
        "examples": [{"source": " ".join(pairs[i][0]), "reference": " ".join(pairs[i][1]),
                      "hypothesis": " ".join(hyps[i])} for i in short],
    }
