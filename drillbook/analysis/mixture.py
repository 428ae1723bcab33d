"""Diagnostics of a trained mixture head (MoS, DOC): who gets the weight, and how evenly.

For every position the prior ``pi`` (``J`` weights summing to one) says how much each
component contributes. Three summaries:

* **usage**: the mean of ``pi`` over all positions, one number per component; a
  component with usage near 0 is dead weight;
* **coefficient of variation** ``sqrt(beta) = std(B) / avg(B)`` with ``B = sum_t pi_t``
  (DOC Eqs. 12-13; DOC's Table 4 reports it): 0 when all components carry the same total
  weight, growing as the usage concentrates;
* **entropy of pi**, averaged over positions, in nats (at most ``log J``): low when each
  position leans on one or two components, whatever the overall balance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..heads.mixture import MixtureHead, coefficient_of_variation

__all__ = ["MixtureDiagnostics", "mixture_diagnostics"]


@dataclass(frozen=True)
class MixtureDiagnostics:
    """Summaries of the mixture weights over an evaluation stream.

    Attributes:
        usage: ``(J,)`` mean weight of each component over the positions.
        cv: ``sqrt(beta)`` over the whole stream (DOC Table 4's quantity).
        cv_batch_mean: ``sqrt(beta)`` averaged over the evaluation windows.
        entropy: mean entropy of ``pi`` per position, nats.
        max_entropy: ``log J``.
        usage_by_layer: for DOC, the summed usage of the vectors read from each layer
            (``{layer: usage}``); for MoS ``{last layer: 1.0}``.
        n_positions: positions summarised.
    """

    usage: Tensor
    cv: float
    cv_batch_mean: float
    entropy: float
    max_entropy: float
    usage_by_layer: dict[int, float]
    n_positions: int


def _layer_of_component(head: MixtureHead) -> list[int]:
    if not head.reads_layers:  # MoS: every component reads the last layer
        return [-1] * head.n_vectors
    counts = head.vectors_per_layer
    # DOC orders its components from the last layer down (see DOCHead.components)
    return [n for n in reversed(range(len(counts))) for _ in range(counts[n])]


@torch.no_grad()
def mixture_diagnostics(model, data: Tensor, bptt: int,
                        max_tokens: int | None = None) -> MixtureDiagnostics:
    """Run a language model with a mixture head over a batchified ``(T, B)`` stream."""
    from ..models import eval_windows

    head = model.head
    if not isinstance(head, MixtureHead):
        raise TypeError(f"mixture diagnostics need a MoS or DOC head, got "
                        f"{type(head).__name__}")
    priors, cvs = [], []
    for out, _ in eval_windows(model, data, bptt, max_tokens):
        pi = head.mixture_weights(out.features).reshape(-1, head.n_vectors).double().cpu()
        priors.append(pi)
        cvs.append(float(coefficient_of_variation(pi)))
    pi = torch.cat(priors)
    usage = pi.mean(0)
    entropy = float(-(pi * pi.clamp_min(1e-300).log()).sum(-1).mean())
    by_layer: dict[int, float] = {}
    for j, layer in enumerate(_layer_of_component(head)):
        by_layer[layer] = by_layer.get(layer, 0.0) + float(usage[j])
    return MixtureDiagnostics(usage=usage, cv=float(coefficient_of_variation(pi)),
                              cv_batch_mean=sum(cvs) / len(cvs), entropy=entropy,
                              max_entropy=math.log(head.n_vectors), usage_by_layer=by_layer,
                              n_positions=pi.shape[0])
