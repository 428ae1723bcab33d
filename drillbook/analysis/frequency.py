"""Loss by word-frequency band (the DRILL paper's Fig. 3).

Rare words are where sharing between output labels should help: a word seen ten times
cannot learn its own output vector well, but it can borrow from similar words through a
shared label encoder. To see it, split the test tokens by how often their *target* word
occurs in the training data and compare two models band by band.

We report, per band ``b``, the relative difference of mean cross-entropies

.. math::  \\Delta_b = 100 \\cdot \\frac{\\overline{\\mathrm{CE}}_B - \\overline{\\mathrm{CE}}_A}
           {\\overline{\\mathrm{CE}}_B} \\ \\%,

positive when model A (e.g. DRILL) is better than baseline B on the words of that band.
The paper does not spell out whether it averages ratios or takes the ratio of averages;
we take the ratio of averages, which cannot be dominated by a few near-zero losses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["DEFAULT_BANDS", "FrequencyBand", "band_of", "compare_by_frequency",
           "token_nll"]

#: training-count intervals ``[lo, hi)``: 1-9, 10-99, 100-999, 1000-9999, 10000+
DEFAULT_BANDS: tuple[tuple[int, int | None], ...] = (
    (1, 10), (10, 100), (100, 1000), (1000, 10_000), (10_000, None))


@dataclass(frozen=True)
class FrequencyBand:
    """One row of the comparison.

    Attributes:
        low, high: training-count interval ``[low, high)`` (``high=None``: no bound).
        n_types: distinct target words of the band that occur in the evaluation data.
        n_tokens: evaluation tokens whose target falls in the band.
        ce_a, ce_b: mean cross-entropy (nats) of model A and baseline B on them.
        rel_diff_percent: ``100 (ce_b - ce_a) / ce_b``.
    """

    low: int
    high: int | None
    n_types: int
    n_tokens: int
    ce_a: float
    ce_b: float
    rel_diff_percent: float

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


def compare_by_frequency(nll_a: Tensor, nll_b: Tensor, target: Tensor, train_counts: Tensor,
                         bands: Sequence[tuple[int, int | None]] = DEFAULT_BANDS
                         ) -> list[FrequencyBand]:
    """Compare two models' per-token losses on the same tokens, by frequency band.

    Args:
        nll_a, nll_b: ``(N,)`` per-token losses of model A and baseline B.
        target: ``(N,)`` the target word ids (the same for both).
        train_counts: ``(V,)`` training-set count of every word id.
        bands: ``[low, high)`` intervals of training counts.
    """
    if not (nll_a.shape == nll_b.shape == target.shape) or nll_a.dim() != 1:
        raise ValueError(f"nll_a, nll_b and target must be 1-d and equal in shape, got "
                         f"{tuple(nll_a.shape)}, {tuple(nll_b.shape)}, {tuple(target.shape)}")
    band = band_of(train_counts.cpu(), bands)[target.cpu()]
    rows = []
    for i, (lo, hi) in enumerate(bands):
        sel = band == i
        n = int(sel.sum())
        if n == 0:
            rows.append(FrequencyBand(lo, hi, 0, 0, float("nan"), float("nan"), float("nan")))
            continue
        ce_a, ce_b = float(nll_a[sel].double().mean()), float(nll_b[sel].double().mean())
        rows.append(FrequencyBand(lo, hi, int(target[sel].unique().numel()), n, ce_a, ce_b,
                                  100.0 * (ce_b - ce_a) / ce_b))
    return rows
