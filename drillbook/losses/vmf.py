"""Training losses for continuous outputs (Kumar & Tsvetkov, 2019): the von Mises-Fisher
negative log-likelihood and its regularised variants, the paper's appendix surrogate, and
its baselines (squared error, cosine, max-margin).

A continuous-output decoder emits one vector ``ê in R^m`` per step and is trained to point
it at the fixed unit embedding ``e(w)`` of the target word; NLLvMF reads ``ê`` as the mean
direction and concentration ``κ = ‖ê‖`` of a vMF density, ``NLLvMF(ê; e(w)) = -log C_m(‖ê‖)
- ê^T e(w)`` (paper Sec. 3), with ``log C_m`` from :mod:`drillbook.losses.bessel`. Losses take
``pred`` (``ê``, shape ``(..., m)``) and ``target`` (``e(w)``, shape ``(..., m)``, unit rows)
and return per-position losses ``(...)`` unless ``reduction`` is ``"mean"`` or ``"sum"``.
Chapter 4 derives them and compares them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import POSITIVE_INT, number
from .bessel import log_cm

__all__ = [
    "LOSSES",
    "check_table",
    "cosine_loss",
    "l2_loss",
    "max_margin_loss",
    "nll_vmf",
    "nll_vmf_reg1",
    "nll_vmf_reg2",
    "vmf_pseudo_loss",
]

#: the losses' weights and margin: finite and not negative (a NaN would make every loss NaN)
_WEIGHT = number(minimum=0)


# ----------------------------------------------------------------- losses
def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"reduction must be one of 'none', 'mean', 'sum', got {reduction!r}")


def _check_pair(pred: Tensor, target: Tensor, name: str) -> int:
    if not isinstance(pred, Tensor) or not isinstance(target, Tensor):
        raise TypeError(f"{name} expects tensors pred (..., m) and target (..., m)")
    if not pred.is_floating_point() or not target.is_floating_point():
        raise TypeError(
            f"{name} expects floating-point pred and target, got {pred.dtype} and {target.dtype}; "
            f"the target is the word's embedding vector, not its id (look it up in the table)"
        )
    if pred.dim() == 0 or tuple(pred.shape) != tuple(target.shape):
        raise ValueError(
            f"{name} expects pred and target of the same shape (..., m), got "
            f"{tuple(pred.shape)} and {tuple(target.shape)}; look the target ids up in the "
            f"(V, m) embedding table first"
        )
    m = int(pred.shape[-1])
    if m < 2:
        raise ValueError(f"{name} needs vectors of dimension m >= 2, got m = {m}")
    return m


def _nll_parts(pred: Tensor, target: Tensor, name: str) -> tuple[Tensor, Tensor, int]:
    """``(-log C_m(‖ê‖), ê^T e(w), m)``."""
    m = _check_pair(pred, target, name)
    kappa = torch.linalg.vector_norm(pred, dim=-1)
    return -log_cm(kappa, m), (pred * target).sum(-1), m


def nll_vmf(pred: Tensor, target: Tensor, *, reduction: str = "none") -> Tensor:
    """NLLvMF (paper Sec. 3, the negative log of Eq. 2): ``-log C_m(‖ê‖) - ê^T e(w)``.

    The negative log-density of the unit target ``e(w)`` under ``vMF(μ = ê/‖ê‖, κ = ‖ê‖)``.
    The first term pushes ``κ`` down, the second rewards alignment; the minimiser over ``κ``
    for a fixed angle solves ``R_{m/2-1}(κ) = cos(ê, e(w))``.

    Args:
        pred: ``ê``, shape ``(..., m)``.
        target: ``e(w)``, shape ``(..., m)``, unit rows.
        reduction: ``"none"`` (per position, shape ``(...)``), ``"mean"`` or ``"sum"``.
    """
    neg_log_c, dot, _ = _nll_parts(pred, target, "nll_vmf")
    return _reduce(neg_log_c - dot, reduction)


def nll_vmf_reg1(pred: Tensor, target: Tensor, lambda1: float = 0.02, *,
                 reduction: str = "none") -> Tensor:
    """NLLvMF with a norm penalty (paper Sec. 3, first variant, unnumbered):
    ``-log C_m(‖ê‖) - ê^T e(w) + λ1 ‖ê‖``.

    Args:
        pred, target, reduction: as for :func:`nll_vmf`.
        lambda1: ``λ1`` (the paper uses 0.02).
    """
    lambda1 = _WEIGHT.check(lambda1, "nll_vmf_reg1: lambda1")
    neg_log_c, dot, _ = _nll_parts(pred, target, "nll_vmf_reg1")
    kappa = torch.linalg.vector_norm(pred, dim=-1)
    return _reduce(neg_log_c - dot + lambda1 * kappa, reduction)


def nll_vmf_reg2(pred: Tensor, target: Tensor, lambda2: float = 0.1, *,
                 reduction: str = "none") -> Tensor:
    """NLLvMF with a down-weighted alignment term (paper Eq. 3):
    ``-log C_m(‖ê‖) - λ2 ê^T e(w)``.

    Args:
        pred, target, reduction: as for :func:`nll_vmf`.
        lambda2: ``λ2`` (the paper uses 0.1).
    """
    lambda2 = _WEIGHT.check(lambda2, "nll_vmf_reg2: lambda2")
    neg_log_c, dot, _ = _nll_parts(pred, target, "nll_vmf_reg2")
    return _reduce(neg_log_c - lambda2 * dot, reduction)


def vmf_pseudo_loss(pred: Tensor, target: Tensor, *, reduction: str = "none") -> Tensor:
    """The paper appendix's surrogate: ``A(‖ê‖) - ê^T e(w)``, a *gradient* surrogate of NLLvMF.

    .. math::

        A(\\kappa) = s - (v-1)\\log(v - 1 + s), \\quad
        s = \\sqrt{(v+1)^2 + \\kappa^2}, \\quad v = m/2 - 1

    (paper appendix 8.2).

    ``A'(κ) = κ / (v - 1 + sqrt((v+1)² + κ²))``, which approximates the Bessel ratio
    ``I_{v+1}(κ)/I_v(κ) = -d/dκ log C_m(κ)`` (to ``O(1/v)`` relatively; it comes from a bound
    on the ratio), so this loss has roughly the gradients of :func:`nll_vmf`. Its *value* is
    **not** ``-log C_m(κ) - ê^T e(w)``: ``A(κ) + log C_m(κ)`` is neither zero nor constant in
    ``κ``. Do not report it as a negative log-likelihood or compare its values with NLLvMF.

    Needs ``m >= 4`` (``v >= 1``): below that the bound behind ``A`` is not a useful
    approximation (for ``m = 2`` its derivative is unbounded at ``κ → 0`` while the ratio is
    ``≤ 1``); the exact :func:`nll_vmf` is cheap there anyway.
    """
    m = _check_pair(pred, target, "vmf_pseudo_loss")
    if m < 4:
        raise ValueError(
            f"vmf_pseudo_loss needs m >= 4 (order v = m/2 - 1 >= 1), got m = {m}; use nll_vmf"
        )
    v = m / 2.0 - 1.0
    kappa = torch.linalg.vector_norm(pred, dim=-1)
    s = torch.sqrt((v + 1.0) ** 2 + kappa * kappa)
    a = s - (v - 1.0) * torch.log(v - 1.0 + s)
    return _reduce(a - (pred * target).sum(-1), reduction)


def l2_loss(pred: Tensor, target: Tensor, *, reduction: str = "none") -> Tensor:
    """The paper's "Squared Error" baseline (Sec. 4.2): ``‖ê - e(w)‖² = Σ_i (ê_i - e_i)²``.

    Summed over the ``m`` dimensions, one value per position; ``reduction="mean"`` (and
    :class:`~drillbook.heads.VMFHead`) average over positions. (The authors' code sums it
    over the tokens of a batch and divides by the number of sentences, a different
    constant scale.) Unlike the unsquared distance it is smooth at ``ê = e(w)``. Models
    trained with it decode by Euclidean distance
    (:data:`~drillbook.losses.neighbours.DECODE_METRICS`).
    """
    _check_pair(pred, target, "l2_loss")
    return _reduce((pred - target).square().sum(-1), reduction)


def cosine_loss(pred: Tensor, target: Tensor, *, reduction: str = "none") -> Tensor:
    """The cosine baseline: ``1 - cos(ê, e(w))`` (insensitive to ``‖ê‖``)."""
    _check_pair(pred, target, "cosine_loss")
    return _reduce(1.0 - F.cosine_similarity(pred, target, dim=-1, eps=1e-12), reduction)


def check_table(table: Tensor, m: int, name: str) -> None:
    """Raise a ValueError naming ``name`` unless ``table`` is a floating ``(V, m)``
    embedding table."""
    if not isinstance(table, Tensor) or table.dim() != 2 or not table.is_floating_point():
        raise ValueError(
            f"{name} expects a floating (V, m) embedding table, got "
            f"{getattr(table, 'shape', type(table).__name__)}"
        )
    if int(table.shape[1]) != m:
        raise ValueError(
            f"{name}: the table has vectors of size {int(table.shape[1])} but the predictions "
            f"have size {m}; the output layer must predict vectors of the table's dimension"
        )


def max_margin_loss(pred: Tensor, target_ids: Tensor, table: Tensor, margin: float = 0.5, *,
                    chunk_size: int | None = None, reduction: str = "none") -> Tensor:
    """Max-margin ranking baseline (Lazaridou et al., 2015) with one informative negative.

    .. math::

        \\max\\big(0,\\ \\gamma + \\cos(ê, e_{j^*}) - \\cos(ê, e(w))\\big), \\qquad
        j^* = \\arg\\max_{j \\ne w}\\ \\cos(ê, e_j) - \\cos(e(w), e_j)

    The negative ``j*`` is close to the prediction and far from the target. Finding it
    scores the whole vocabulary (``O(V m)`` per position, as the paper notes); the search runs
    without autograd, batched over positions (``chunk_size`` positions at a time bound the
    ``(positions, V)`` score matrix), and the loss is then differentiable in ``pred`` (and in
    ``table``, if it requires grad).

    Args:
        pred: ``ê``, shape ``(..., m)``.
        target_ids: target word ids, shape ``(...)``, in ``[0, V)``.
        table: the ``(V, m)`` target embeddings (rows are normalised here for the cosines).
        margin: ``γ`` (the paper uses 0.5).
        chunk_size: positions per block in the negative search (``None``: all at once).
        reduction: ``"none"``, ``"mean"`` or ``"sum"``.
    """
    margin = _WEIGHT.check(margin, "max_margin_loss: margin")
    if not isinstance(pred, Tensor) or pred.dim() == 0 or not pred.is_floating_point():
        raise TypeError("max_margin_loss expects a floating tensor pred of shape (..., m)")
    m = int(pred.shape[-1])
    check_table(table, m, "max_margin_loss")
    if tuple(target_ids.shape) != tuple(pred.shape[:-1]):
        raise ValueError(
            f"max_margin_loss: target_ids shape {tuple(target_ids.shape)} does not match pred "
            f"shape {tuple(pred.shape)}; expected target_ids of shape {tuple(pred.shape[:-1])}"
        )
    if target_ids.is_floating_point() or target_ids.is_complex():
        raise TypeError(f"target_ids must hold integer word ids, got dtype {target_ids.dtype}")
    n_words = int(table.shape[0])
    if n_words < 2:
        raise ValueError("max_margin_loss needs a table with at least 2 words (one negative)")
    chunk_size = POSITIVE_INT.or_none("all at once").check(chunk_size, "chunk_size")
    flat = pred.reshape(-1, m)
    ids = target_ids.reshape(-1).long()
    unit_table = F.normalize(table, dim=-1)
    with torch.no_grad():
        negatives = torch.empty_like(ids)
        step = max(flat.shape[0], 1) if chunk_size is None else int(chunk_size)
        ut = unit_table.detach()
        for start in range(0, flat.shape[0], step):
            p = F.normalize(flat[start:start + step].detach(), dim=-1)
            t = ids[start:start + step]
            score = (p - ut[t]) @ ut.T  # cos(ê, e_j) - cos(e(w), e_j), rows unit
            score.scatter_(1, t[:, None], -math.inf)
            negatives[start:start + step] = score.argmax(-1)
    pos = F.cosine_similarity(flat, unit_table[ids], dim=-1, eps=1e-12)
    neg = F.cosine_similarity(flat, unit_table[negatives], dim=-1, eps=1e-12)
    loss = torch.clamp(margin + neg - pos, min=0.0)
    return _reduce(loss.reshape(pred.shape[:-1]), reduction)


#: loss name (as :class:`drillbook.heads.VMFHead` spells it) -> function
LOSSES = {
    "nllvmf": nll_vmf,
    "reg1": nll_vmf_reg1,
    "reg2": nll_vmf_reg2,
    "pseudo": vmf_pseudo_loss,
    "l2": l2_loss,
    "cosine": cosine_loss,
    "maxmargin": max_margin_loss,
}
