"""Nearest neighbours of words in an embedding table (joint-embedding paper, Table 1).

Comparing a word's neighbours under the *input* embedding with its neighbours under the
*output* representation a head actually scores against (``head.output_embeddings()``)
shows what each output layer learns: with weight tying the two tables are one and the
same; a joint or DRILL head can make the output side organise words differently.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["nearest_neighbours"]


@torch.no_grad()
def nearest_neighbours(table: Tensor, queries: Sequence[int], k: int = 5,
                       metric: str = "cosine") -> list[list[tuple[int, float]]]:
    """The ``k`` nearest rows to each query row, excluding the query itself.

    Args:
        table: ``(V, d)`` one vector per word.
        queries: word ids.
        k: neighbours per query.
        metric: ``"cosine"`` (similarity, larger is closer) or ``"l2"`` (distance).

    Returns:
        for every query, ``k`` pairs ``(word id, similarity or distance)``, closest first.
    """
    if table.dim() != 2:
        raise ValueError(f"table must be (V, d), got shape {tuple(table.shape)}")
    if metric not in ("cosine", "l2"):
        raise ValueError(f"metric must be 'cosine' or 'l2', got {metric!r}")
    v = table.shape[0]
    if not 1 <= k < v:
        raise ValueError(f"k must lie in [1, {v - 1}] for a table of {v} words, got {k}")
    q = torch.as_tensor(list(queries), dtype=torch.long, device=table.device)
    if q.numel() and (int(q.min()) < 0 or int(q.max()) >= v):
        raise ValueError(f"query ids must lie in [0, {v}), got {list(queries)}")
    x = table.double()
    if metric == "cosine":
        x = F.normalize(x, dim=-1)
        scores = x[q] @ x.T
    else:
        scores = -torch.cdist(x[q], x)
    scores[torch.arange(len(q)), q] = -torch.inf  # never your own neighbour
    top, idx = scores.topk(k, dim=-1)
    sign = 1.0 if metric == "cosine" else -1.0
    return [[(int(i), sign * float(s)) for i, s in zip(ids, vals, strict=True)]
            for ids, vals in zip(idx.cpu(), top.cpu(), strict=True)]
