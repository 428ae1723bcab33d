"""Loss by word-frequency band (the DRILL paper's Fig. 3): the evaluation tokens split by how
often their target word occurs in the training data, two models compared band by band
(:func:`compare_by_frequency` gives the measure as the authors computed it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError
from ..validation import check_choice

__all__ = ["AVERAGES", "DECADE_BANDS", "DEFAULT_BANDS", "DRILL_BANDS", "FrequencyBand",
           "band_label", "band_of", "compare_by_frequency", "loss_by_band", "loss_by_word",
           "token_nll", "unigram_nll"]

#: DRILL Fig. 3's training-count bins ``[lo, hi)`` (the authors' analysis script)
DRILL_BANDS: tuple[tuple[int, int | None], ...] = (
    (1, 50), (50, 100), (100, 250), (250, 500), (500, 1000), (1000, 2500), (2500, 5000),
    (5000, None))

#: training-count decades ``[lo, hi)``: 1-9, 10-99, 100-999, 1000-9999, 10000+
DECADE_BANDS: tuple[tuple[int, int | None], ...] = (
    (1, 10), (10, 100), (100, 1000), (1000, 10_000), (10_000, None))

#: :func:`band_of`'s default (the decades; the translation analysis uses them too)
DEFAULT_BANDS = DECADE_BANDS

#: how :func:`compare_by_frequency` averages within a band
AVERAGES = ("word", "token")


@dataclass(frozen=True)
class FrequencyBand:
    """One row of the comparison.

    Attributes:
        low, high: training-count interval ``[low, high)`` (``high=None``: no bound).
        n_types: distinct target words of the band that occur in the evaluation data.
        n_tokens: evaluation tokens whose target falls in the band.
        ce_a, ce_b: mean cross-entropy per token (nats) of model A and baseline B on them.
        rel_diff_percent: with ``average="word"`` the mean over the band's words of
            ``100 (CE_B(w) - CE_A(w)) / CE_A(w)`` (DRILL Fig. 3); with ``"token"``
            ``100 (ce_b - ce_a) / ce_a``. Positive when A is better.
        average: ``"word"`` or ``"token"``.
    """

    low: int
    high: int | None
    n_types: int
    n_tokens: int
    ce_a: float
    ce_b: float
    rel_diff_percent: float
    average: str = "word"

    @property
    def label(self) -> str:
        return f"{self.low}+" if self.high is None else f"{self.low}-{self.high - 1}"


def band_of(counts: Tensor, bands: Sequence[tuple[int, int | None]] = DEFAULT_BANDS) -> Tensor:
    """Band index of every word id, ``-1`` for words outside all bands (e.g. count 0)."""
    out = torch.full_like(counts, -1, dtype=torch.long)
    for i, (lo, hi) in enumerate(bands):
        inside = counts >= lo
        if hi is not None:
            inside &= counts < hi
        out[inside] = i
    return out


@torch.no_grad()
def token_nll(model, data: Tensor, bptt: int, max_tokens: int | None = None
              ) -> tuple[Tensor, Tensor]:
    """Per-token NLL of a language model on a batchified ``(T, B)`` stream.

    Returns ``(nll, target)``, two 1-d tensors on the CPU in stream order, the state
    carried across windows as in evaluation.
    """
    from ..models import eval_windows

    nlls, targets = [], []
    for out, y in eval_windows(model, data, bptt, max_tokens):
        logp = model.head.log_prob(out.features)
        nlls.append(-logp.gather(-1, y.unsqueeze(-1)).squeeze(-1).reshape(-1).float().cpu())
        targets.append(y.reshape(-1).cpu())
    return torch.cat(nlls), torch.cat(targets)


def unigram_nll(train_counts: Tensor, target: Tensor, *, alpha: float = 0.0) -> Tensor:
    """Per-token NLL (nats) of the unigram model of the training data, the baseline any
    language model has to beat before its context counts for anything.

    .. math::  -\\log p(w) = -\\log \\frac{n_w + \\alpha}{N + \\alpha V},

    with ``n_w`` the training count of word ``w``, ``N`` the training tokens and ``V`` the
    vocabulary size (``alpha = 0``: the maximum-likelihood unigram).

    Args:
        train_counts: ``(V,)`` training-set count of every word id.
        target: ``(...)`` target word ids, e.g. the second output of :func:`token_nll`.
        alpha: add-``alpha`` smoothing, needed when a target word never occurs in training.

    Returns:
        a float64 tensor of ``target``'s shape.

    Raises:
        ConfigError: ``alpha < 0``, or a target word whose probability is 0 (count 0 and
            ``alpha = 0``).
    """
    if alpha < 0:
        raise ConfigError(f"alpha must be >= 0 (add-alpha smoothing), got {alpha}")
    counts = train_counts.detach().double().cpu()
    probs = (counts + alpha) / (counts.sum() + alpha * counts.numel())
    p = probs[target.detach().cpu().long()]
    if (p == 0).any():
        missing = int(target.reshape(-1)[(p == 0).reshape(-1)][0])
        raise ConfigError(f"word id {missing} never occurs in training, so the unigram gives "
                          f"it probability 0: pass alpha > 0 (add-alpha smoothing)")
    return -p.log()


def compare_by_frequency(nll_a: Tensor, nll_b: Tensor, target: Tensor, train_counts: Tensor,
                         bands: Sequence[tuple[int, int | None]] = DRILL_BANDS, *,
                         average: str = "word", exclude: Sequence[int] = ()
                         ) -> list[FrequencyBand]:
    """Compare two models' per-token losses on the same tokens, by frequency band.

    Rare words are where sharing between output labels should help: a word seen ten times
    cannot learn its own output vector well, but it can borrow from similar words through a
    shared label encoder. To see it, split the evaluation tokens by how often their *target*
    word occurs in the training data and compare two models band by band.

    DRILL's Fig. 3, as the authors computed it (``analysis/lowfreq/cediff.py`` of idiap/drill):

    * bins of training counts :data:`DRILL_BANDS`: ``[1, 50), [50, 100), [100, 250),
      [250, 500), [500, 1000), [1000, 2500), [2500, 5000), [5000, ∞)``, over the word types
      that occur in the evaluation data (``<eos>`` left out: their training counts have no
      entry for it). On PTB's test set these hold 4,116 / 861 / 649 / 243 / 91 / 50 / 22 / 16
      types, the "4116 unique words" of the lowest band in the paper's text;
    * per word ``w``, the relative difference of the two models' cross-entropies summed over
      its evaluation tokens, ``r_w = (CE_B(w) - CE_A(w)) / CE_A(w)`` (A = "ours", e.g. DRILL;
      B = the baseline); per bin, the mean of ``r_w`` over its word types, in percent:

    .. math::  \\Delta_b = \\frac{100}{|W_b|} \\sum_{w \\in W_b}
               \\frac{\\mathrm{CE}_B(w) - \\mathrm{CE}_A(w)}{\\mathrm{CE}_A(w)} \\ \\%,

    positive when model A is better (:func:`compare_by_frequency` with ``average="word"``, the
    default). Every word counts once however rare, and a word on which A's loss is small
    weighs a lot (the denominator): on the authors' published per-word PTB losses (tied vs.
    DRILL) the lowest band's mean is +17.5 % while its median word is +2.2 % and the ratio of
    the band's total losses +2.3 %. ``average="token"`` gives that ratio of totals,
    ``100 (CE_B - CE_A) / CE_A`` over all tokens of the band, which no single word dominates.
    :data:`DECADE_BANDS` (1-9, 10-99, ...) are a coarser alternative to the paper's bins.

    Args:
        nll_a, nll_b: ``(N,)`` per-token losses of model A ("ours") and baseline B.
        target: ``(N,)`` the target word ids (the same for both).
        train_counts: ``(V,)`` training-set count of every word id.
        bands: ``[low, high)`` intervals of training counts (default DRILL Fig. 3's bins).
        average: ``"word"`` (default, the authors' per-word mean of relative differences)
            or ``"token"`` (the relative difference of the band's mean losses); see the
            module docstring.
        exclude: word ids left out of every band (DRILL Fig. 3: ``<eos>``).
    """
    if not (nll_a.shape == nll_b.shape == target.shape) or nll_a.dim() != 1:
        raise ValueError(f"nll_a, nll_b and target must be 1-d and equal in shape, got "
                         f"{tuple(nll_a.shape)}, {tuple(nll_b.shape)}, {tuple(target.shape)}")
    check_choice(average, AVERAGES, "average")
    target = target.cpu().long()
    word_band = band_of(train_counts.cpu(), bands)
    if len(exclude):
        word_band[torch.as_tensor(list(exclude), dtype=torch.long)] = -1
    n_words = word_band.numel()
    # per word: summed losses of A and B over its tokens, and how many tokens it has
    sum_a = torch.zeros(n_words, dtype=torch.float64).index_add_(0, target, nll_a.cpu().double())
    sum_b = torch.zeros(n_words, dtype=torch.float64).index_add_(0, target, nll_b.cpu().double())
    tokens = torch.bincount(target, minlength=n_words)
    rows = []
    for i, (lo, hi) in enumerate(bands):
        words = (word_band == i) & (tokens > 0)
        n = int(tokens[words].sum())
        if n == 0:
            rows.append(FrequencyBand(lo, hi, 0, 0, float("nan"), float("nan"), float("nan"),
                                      average))
            continue
        total_a, total_b = float(sum_a[words].sum()), float(sum_b[words].sum())
        if average == "word":
            rel = float(((sum_b[words] - sum_a[words]) / sum_a[words]).mean())
        else:
            rel = (total_b - total_a) / total_a
        rows.append(FrequencyBand(lo, hi, int(words.sum()), n, total_a / n, total_b / n,
                                  100.0 * rel, average))
    return rows


def band_label(lo: int, hi: int | None) -> str:
    """A band ``[lo, hi)`` as a label: ``"50-99"``, ``"4"`` (one count), ``"5000+"``."""
    if hi is None:
        return f"{lo}+"
    return str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}"


def loss_by_word(nll: Tensor, target: Tensor, vocab_size: int) -> tuple[Tensor, Tensor]:
    """``(summed NLL, tokens)`` of every word id, ``(V,)`` each, from per-token losses
    (:func:`token_nll`): what DRILL Fig. 3's per-word cross-entropies are made of."""
    sums = torch.zeros(vocab_size, dtype=torch.float64).index_add_(
        0, target.cpu(), nll.double().cpu())
    tokens = torch.zeros(vocab_size, dtype=torch.long).index_add_(
        0, target.cpu(), torch.ones_like(target.cpu()))
    return sums, tokens


def loss_by_band(sums: Tensor, tokens: Tensor, train_counts: Tensor,
                 bands: Sequence[tuple[int, int | None]] = DRILL_BANDS) -> list[dict]:
    """One model's loss per training-frequency band of the target word, from
    :func:`loss_by_word`: per band its ``band`` label, bounds ``low``/``high``, the
    ``types`` that occur in the evaluation data, their ``tokens`` and ``mean_nll`` (nats per
    token; None for an empty band). Words outside every band (count 0) are left out."""
    band = band_of(train_counts.cpu(), bands)
    rows = []
    for i, (lo, hi) in enumerate(bands):
        words = (band == i) & (tokens > 0)
        n = int(tokens[words].sum())
        rows.append({"band": band_label(lo, hi), "low": lo, "high": hi,
                     "types": int(words.sum()), "tokens": n,
                     "mean_nll": float(sums[words].sum() / n) if n else None})
    return rows
