"""What a language model's result file carries for the chapters beyond its metrics (the
``analyses`` block, its keys the task's :attr:`~drillbook.train.tasks.registry.Task.analyses_keys`),
read from a trained run with :mod:`drillbook.analysis`."""

from __future__ import annotations

from typing import Any

import torch

from ....analysis import loss_by_band, loss_by_word, mixture_diagnostics, token_nll
from ....data import Corpus
from ...lm import split_stream
from ...run_files import LoadedRun

__all__ = ["lm_analyses"]


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
