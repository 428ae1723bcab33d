"""What a result file carries for the chapters beyond the metrics: the ``analyses``
block (:data:`~drillbook.experiments.results.schema.ANALYSES`), computed from a trained run
by its task's function (:data:`TASK_ANALYSES`, :func:`result_analyses`). They live with the
result files, above the trainers: the trainers train, and what a result file shows of a
trained model is read here with :mod:`drillbook.analysis`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from ...analysis import loss_by_band, loss_by_word, mixture_diagnostics, rare_word_f1, token_nll
from ...configs import LANGUAGE_MODEL, TRANSLATION
from ...data import Corpus
from ...nmt.corpus import ParallelCorpus
from ...nmt.decode import translate_pairs
from ...train.lm import split_stream
from ...train.run_files import LoadedRun
from ...train.tasks import task_of

__all__ = ["TASK_ANALYSES", "lm_analyses", "result_analyses", "translation_analyses"]


def result_analyses(run: LoadedRun, split: str, *, data: Any,
                    max_items: int | None = None) -> dict[str, Any]:
    """The ``analyses`` block of a result file: what the function of the run's task
    (:data:`TASK_ANALYSES`) finds on a split of ``data`` (its first ``max_items`` tokens or
    sentences, if given)."""
    return TASK_ANALYSES[task_of(run.config).name](run, split, data=data, max_items=max_items)


def lm_analyses(run: LoadedRun, split: str, *, data: Corpus,
                max_items: int | None = None) -> dict[str, Any]:
    """What a language model's result file carries for the chapters, on a split of
    ``data`` (about ``max_items`` tokens of it, if given):

    * ``frequency_bands``: the loss per band of the target word's training count, in DRILL
      Fig. 3's bins (:func:`~drillbook.analysis.loss_by_band`);
    * ``word_nll``: word id (a string, as JSON keys are) -> ``[summed NLL, tokens]`` of
      every word that occurs, rounded to 1e-4, from which DRILL Fig. 3's relative
      difference of any two rows follows (:func:`~drillbook.analysis.compare_by_frequency`);
    * for a mixture head, ``mixture``: ``usage`` per component, ``entropy`` and
      ``max_entropy`` (nats), ``cv`` (DOC Table 4's coefficient of variation),
      ``usage_by_layer`` (DOC's share of each layer) and ``positions``
      (:func:`~drillbook.analysis.mixture_diagnostics`).
    """
    model, bptt = run.model, run.config.train.bptt
    stream = split_stream(run.config, data, split).to(next(model.parameters()).device)
    nll, target = token_nll(model, stream, bptt, max_items)
    sums, tokens = loss_by_word(nll, target, len(data.vocab))
    out: dict[str, Any] = {
        "frequency_bands": loss_by_band(sums, tokens, data.vocab.counts),
        "word_nll": {str(w): [round(float(sums[w]), 4), int(tokens[w])]
                     for w in torch.nonzero(tokens).flatten().tolist()},
    }
    if model.head.is_mixture:
        d = mixture_diagnostics(model, stream, bptt, max_items)
        out["mixture"] = {"usage": [round(float(u), 6) for u in d.usage],
                          "entropy": d.entropy, "max_entropy": d.max_entropy, "cv": d.cv,
                          "usage_by_layer": {str(k): v for k, v in d.usage_by_layer.items()},
                          "positions": d.n_positions}
    return out


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


#: task name -> ``(run, split, *, data, max_items) -> dict``: the analyses of its runs
TASK_ANALYSES: dict[str, Callable[..., dict[str, Any]]] = {
    LANGUAGE_MODEL: lm_analyses, TRANSLATION: translation_analyses}
