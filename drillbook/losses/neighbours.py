"""Greedy decoding of continuous outputs: the words whose embeddings best match a
predicted vector, by the distance each loss defines (vMF paper Sec. 4.3)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import POSITIVE_INT, check_choice
from .bessel import log_cm
from .vmf import check_table

__all__ = ["DECODE_METRICS", "nearest_neighbour"]

_METRICS = ("cosine", "vmf", "l2")

#: loss name -> the :func:`nearest_neighbour` metric a model trained with it decodes by.
#: Paper Sec. 4.3: for the empirical losses "the nearest neighbour ... in terms of the
#: distance (loss) defined", for NLLvMF the word of highest vMF density. So: the squared
#: error decodes by Euclidean distance; the cosine and max-margin losses (both defined on
#: cosines) by cosine; NLLvMF and its variants by vMF density, which ranks the words of
#: one position exactly as cosine does (``C_m`` depends on ``‖ê‖`` only). On a table of
#: unit rows Euclidean distance ranks like cosine too (``‖ê - e‖² = ‖ê‖² - 2 ‖ê‖ cos + 1``)
#: except against zero rows, which are at distance ``‖ê‖`` from every prediction.
DECODE_METRICS: dict[str, str] = {
    "nllvmf": "vmf",
    "reg1": "vmf",
    "reg2": "vmf",
    "pseudo": "vmf",
    "l2": "l2",
    "cosine": "cosine",
    "maxmargin": "cosine",
}


def nearest_neighbour(pred: Tensor, table: Tensor, *, metric: str = "cosine", k: int = 1,
                      chunk_size: int | None = None,
                      unit_rows: bool = False) -> tuple[Tensor, Tensor]:
    """The ``k`` words whose embeddings best match each predicted vector (greedy decoding).

    Scores (higher is better):

    * ``"cosine"``: ``cos(ê, e_j)``, the cosine and max-margin models' rule;
    * ``"vmf"``: the vMF log-density of each (unit) word vector,
      ``log C_m(‖ê‖) + ê^T e_j / ‖e_j‖``. Since ``C_m`` depends only on ``‖ê‖``, this ranks the
      words exactly as ``"cosine"`` does: for greedy decoding the density adds nothing but a
      per-position constant (it matters when comparing positions or hypotheses);
    * ``"l2"``: ``-‖ê - e_j‖``, the negative Euclidean distance to the raw table rows (the
      squared-error models' rule). The returned scores are recomputed exactly for the chosen
      words; the ranking uses the expanded ``‖ê‖² - 2 ê^T e_j + ‖e_j‖²``.

    Cosine and vMF scores use unit-normalised table rows (a zero row scores 0 / ``log C_m``).
    Runs without autograd on the tensors' device; ``chunk_size`` words at a time bound the
    memory to ``positions x chunk_size`` scores. No Python loop over positions.

    Args:
        pred: ``(..., m)`` predicted vectors.
        table: ``(V, m)`` word embeddings.
        metric: ``"cosine"``, ``"vmf"`` or ``"l2"``.
        k: how many words per position, ``1 <= k <= V``.
        chunk_size: vocabulary block size (``None``: the whole table at once).
        unit_rows: the table's rows already have unit length (or are zero), so the cosine
            and vMF metrics skip normalising them: a ``V x m`` pass saved on every call,
            which is most of the work when few positions are decoded at a time (one
            decoder step). The :class:`~drillbook.heads.VMFHead` table is stored unit.

    Returns:
        ``(ids, scores)``, shapes ``(..., k)``, best first; ids are ``int64``.
    """
    check_choice(metric, _METRICS, "metric")
    if not isinstance(pred, Tensor) or pred.dim() == 0 or not pred.is_floating_point():
        raise TypeError("nearest_neighbour expects a floating tensor pred of shape (..., m)")
    m = int(pred.shape[-1])
    check_table(table, m, "nearest_neighbour")
    n_words = int(table.shape[0])
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_words:
        raise ValueError(f"k must be an integer in [1, V = {n_words}], got {k!r}")
    chunk_size = POSITIVE_INT.or_none("all at once").check(chunk_size, "chunk_size")
    step = n_words if chunk_size is None else int(chunk_size)
    lead = pred.shape[:-1]
    with torch.no_grad():
        flat = pred.reshape(-1, m)
        table = table.to(flat.dtype)
        if metric == "cosine":
            query, offset = F.normalize(flat, dim=-1), None
        elif metric == "vmf":
            query = flat
            offset = log_cm(torch.linalg.vector_norm(flat, dim=-1), m)[:, None]
        else:
            query, offset = flat, flat.square().sum(-1, keepdim=True)
        best_s = flat.new_full((flat.shape[0], 0), -math.inf)
        best_i = torch.empty(flat.shape[0], 0, dtype=torch.long, device=flat.device)
        for start in range(0, n_words, step):
            block = table[start:start + step]
            if metric == "l2":
                s = -(offset - 2.0 * query @ block.T + block.square().sum(-1)).clamp_min(0)
            else:
                s = query @ (block if unit_rows else F.normalize(block, dim=-1)).T
                if offset is not None:
                    s = s + offset
            s, i = s.topk(min(k, s.shape[1]), dim=-1)
            best_s, order = torch.cat([best_s, s], -1).topk(min(k, best_s.shape[1] + s.shape[1]),
                                                           dim=-1)
            best_i = torch.cat([best_i, i + start], -1).gather(-1, order)
        if metric == "l2":
            best_s = -torch.linalg.vector_norm(flat[:, None, :] - table[best_i], dim=-1)
    return best_i.reshape(*lead, k), best_s.reshape(*lead, k)
