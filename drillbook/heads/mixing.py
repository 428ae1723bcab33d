"""How a mixture head mixes its ``J`` components, as functions of tensors: the log-space
mixture of softmaxes (:func:`mixture_log_prob`) and its probability-space reference, the
low-rank mixture of contexts (:func:`context_mixture_log_prob`), the chunk of positions a
memory budget allows (:func:`chunk_for_budget`) and DOC's coefficient of variation
(:func:`coefficient_of_variation`). The heads themselves are in :mod:`drillbook.heads.mixture`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import POSITIVE_NUMBER, check_choice

__all__ = ["CV_FORMS", "MIX_MODES", "SCORE_COPIES", "chunk_for_budget",
           "coefficient_of_variation", "context_mixture_log_prob", "mixture_log_prob",
           "mixture_log_prob_reference"]


#: float32 copies of one chunk's ``J x n x V`` scores alive at once in training: the scores,
#: their normaliser's exponentials and, in the backward pass (the chunk recomputed), the
#: softmax that is their gradient
SCORE_COPIES = 3


def chunk_for_budget(budget_mb: float, n_softmaxes: int, vocab_size: int) -> int:
    """The most positions a mixture head may score at once within ``budget_mb`` megabytes
    (``2**20`` bytes) of scores: ``floor(budget / (SCORE_COPIES x J x V x 4 bytes))``, at
    least 1. WikiText-2's MoS-15 (``J = 15``, ``V = 33,278``) gets 179 positions from
    1,024 MB, where the whole batch of 80 x 70 positions would need about 31 GiB.

    Raises:
        ConfigError: a budget that is not a positive number.
    """
    budget_mb = POSITIVE_NUMBER.saying("a positive number of megabytes").check(
        budget_mb, "chunk_mb")
    per_position = SCORE_COPIES * n_softmaxes * vocab_size * 4
    return max(1, int(budget_mb * 2**20 // per_position))


def mixture_log_prob(vectors: Tensor, log_prior: Tensor, weight: Tensor,
                     bias: Tensor | None) -> Tensor:
    """``log sum_j pi_j softmax(E k_j + b)``, computed in log space.

    Shapes: vectors ``(n, J, d)``, log_prior ``(n, J)``, weight ``(V, d)`` -> ``(n, V)``.
    Under bf16 autocast the product runs in bf16 and the normalisers in float32.
    """
    scores = _at_least_float32(F.linear(vectors, weight, bias))  # (n, J, V)
    log_prior = _at_least_float32(log_prior)
    return torch.logsumexp(scores.log_softmax(-1) + log_prior.unsqueeze(-1), dim=1)


def _at_least_float32(x: Tensor) -> Tensor:
    """Upcast bf16/fp16 (autocast outputs) to float32; float64 stays float64. CUDA autocast
    keeps ``logsumexp`` in the low precision, which would cost the mixture its exactness."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _mixture_nll(vectors: Tensor, log_prior: Tensor, weight: Tensor, bias: Tensor | None,
                 target: Tensor) -> Tensor:
    """Per-position ``-log p(target)`` without forming the ``(n, V)`` mixture."""
    scores = _at_least_float32(F.linear(vectors, weight, bias))  # (n, J, V)
    log_prior = _at_least_float32(log_prior)
    picked = scores.gather(-1, target[:, None, None].expand(-1, scores.shape[1], 1))
    log_comp = picked.squeeze(-1) - torch.logsumexp(scores, dim=-1)  # (n, J)
    return -torch.logsumexp(log_comp + log_prior, dim=1)


def _mean_context(vectors: Tensor, log_prior: Tensor) -> Tensor:
    """``sum_j pi_j k_j``: ``(n, J, d)`` and ``(n, J)`` -> ``(n, d)``."""
    return (log_prior.exp().unsqueeze(-1) * vectors).sum(-2)


def context_mixture_log_prob(vectors: Tensor, log_prior: Tensor, weight: Tensor,
                             bias: Tensor | None) -> Tensor:
    """The mixture of contexts, ``log softmax(sum_j pi_j (E k_j + b))``.

    The logits are linear in the context and ``sum_j pi_j = 1``, so averaging them is
    scoring the average context:

    .. math::  \\sum_j \\pi_j (E k_j + b) = E \\bar k + b, \\qquad
               \\bar k = \\sum_j \\pi_j k_j ,

    and this computes one softmax over ``E k_bar + b`` (one ``(n, V)`` score matrix, not
    ``J``). Whatever ``pi`` and the ``k_j``, the log-probabilities of ``U`` contexts form
    ``K_bar E^T + 1 b^T - Z 1^T``, of rank at most ``d + 2``.

    Shapes: as :func:`mixture_log_prob`: vectors ``(n, J, d)``, log_prior ``(n, J)``,
    weight ``(V, d)`` -> ``(n, V)``.
    """
    scores = F.linear(_mean_context(vectors, log_prior), weight, bias)
    return _at_least_float32(scores).log_softmax(-1)


def _context_mixture_nll(vectors: Tensor, log_prior: Tensor, weight: Tensor,
                         bias: Tensor | None, target: Tensor) -> Tensor:
    """Per-position ``-log p(target)`` of the mixture of contexts (fused cross-entropy)."""
    scores = _at_least_float32(F.linear(_mean_context(vectors, log_prior), weight, bias))
    return F.cross_entropy(scores, target, reduction="none")


#: where a mixture head averages its ``J`` components: ``"probs"``, the probabilities (a
#: mixture of softmaxes, Eq. 9 of the DOC paper), or ``"logits"``, the scores (a mixture of
#: contexts: one softmax, low-rank)
MIX_MODES = ("probs", "logits")

#: mode -> (log-probabilities of a chunk, per-position NLL of a chunk)
_MIXERS = {"probs": (mixture_log_prob, _mixture_nll),
           "logits": (context_mixture_log_prob, _context_mixture_nll)}


def mixture_log_prob_reference(vectors: Tensor, log_prior: Tensor, weight: Tensor,
                               bias: Tensor | None) -> Tensor:
    """The probability-space form ``log(sum_j pi_j softmax_j)`` (for tests: it underflows
    to ``-inf`` where the log-space form stays finite)."""
    probs = F.linear(vectors, weight, bias).softmax(-1)
    return torch.log((log_prior.exp().unsqueeze(-1) * probs).sum(1))


#: the two forms of DOC's coefficient-of-variation regulariser (see
#: :func:`coefficient_of_variation`)
CV_FORMS = ("authors", "paper")


def coefficient_of_variation(prior: Tensor, form: str = "paper") -> Tensor:
    """DOC's ``sqrt(beta)``: the coefficient of variation of the summed mixture weights.

    Args:
        prior: mixture weights ``pi`` of one minibatch, ``(T, B, J)`` (time first, as the
            language models lay out a batch); a 2-d ``(T, J)`` is one sequence. Any further
            leading axes after the first count as sequences.
        form: which quantity (the regulariser is ``lambda_beta * cv ** 2``):

            * ``"paper"``, the paper's Eqs. 12-13: ``B = sum_t pi_t``, one total per
              component over every position of the minibatch (``J`` numbers), and

              .. math::  \\sqrt{\\beta} = \\operatorname{std}(B) / \\operatorname{avg}(B)

              with the population standard deviation over the ``J`` totals;
            * ``"authors"``, what the authors' code (``main.py`` of nttcslab-nlp/doc_lm)
              computes: ``S = sum_t pi_t`` per *sequence*, a ``(B, J)`` matrix, and

              .. math::  \\sqrt{\\beta} = \\sqrt{(J - 1)\\, \\operatorname{var}(S)}
                         / \\operatorname{mean}(S)

              with the unbiased variance and the mean over all ``B J`` entries of ``S``.

    Both are 0 when every entry they compare is equal. They differ in scale: the
    ``(J - 1)`` factor and the spread between sequences (which the paper's batch totals
    average away) make the authors' ``beta`` much larger: at DOC's PTB shape (``J = 20``,
    ``B = 20``) about ``J - 1 = 19`` times when every sequence has the same imbalance, and
    hundreds of times when sequences lean on different components. ``lambda_beta = 0.001``
    was tuned with the authors' form. For a single sequence (``B = 1``) the authors'
    ``beta`` is exactly ``J`` times the paper's.
    """
    check_choice(form, CV_FORMS, "coefficient-of-variation form")
    if prior.dim() < 2:  # one position
        prior = prior.unsqueeze(0)
    j = prior.shape[-1]
    if form == "paper":
        totals = prior.reshape(-1, j).sum(0)
        return totals.std(correction=0) / totals.mean()
    sums = prior.sum(0).reshape(-1, j)  # (B, J): each sequence's weight per component
    if j == 1:  # one component: nothing can be uneven ((J - 1) = 0)
        return sums.new_zeros(())
    return torch.sqrt((j - 1) * sums.var(correction=1)) / sums.mean()
