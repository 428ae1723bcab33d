"""The three dropouts of AWD-LSTM (Merity et al., 2018), as small modules.

* :class:`LockedDropout`: one mask per sequence, shared over time (variational dropout,
  Gal & Ghahramani, 2016), for embeddings, between layers and on the output.
* :func:`embedding_dropout`: drops whole words (rows of the embedding matrix).
* :class:`DropConnect`: drops individual recurrent weights ``W_hh``, one mask per
  forward pass (drawn once under :func:`~torch.nn.utils.parametrize.cached`). It is a
  :mod:`torch.nn.utils.parametrize` parametrization, so ``nn.LSTM`` itself runs (cuDNN
  on a GPU) on the dropped weights; no parameter is deleted or re-registered, which is
  what broke the original implementation on every PyTorch release.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..validation import PROBABILITY

__all__ = ["DropConnect", "LockedDropout", "check_p", "embedding_dropout"]


def check_p(p: float, name: str = "dropout") -> float:
    """A dropout probability in ``[0, 1)`` as a float, or a ConfigError (a ValueError)
    naming it (:data:`drillbook.validation.PROBABILITY`)."""
    return float(PROBABILITY.check(p, name))


class LockedDropout(nn.Module):
    """Dropout with one mask per sequence, shared across time steps.

    Shapes:
        x ``(T, B, F)`` -> same; the mask has shape ``(1, B, F)`` and is scaled by
        ``1 / (1 - p)``. Identity in eval mode or with ``p = 0``.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = check_p(p)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        mask = x.new_empty(1, *x.shape[1:]).bernoulli_(1 - self.p) / (1 - self.p)
        return x * mask

    def extra_repr(self) -> str:
        return f"p={self.p}"


def embedding_dropout(embed: nn.Embedding, words: Tensor, p: float, training: bool) -> Tensor:
    """Look up ``words`` with whole rows of the embedding dropped (AWD-LSTM ``dropoute``).

    A dropped word is zero everywhere it occurs in the batch; kept rows are scaled by
    ``1 / (1 - p)``. Shapes: words ``(...)`` -> ``(..., d)``.
    """
    weight = embed.weight
    if training and p > 0:
        mask = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)
        weight = weight * mask
    return F.embedding(words, weight, embed.padding_idx, embed.max_norm, embed.norm_type,
                       embed.scale_grad_by_freq, embed.sparse)


class DropConnect(nn.Module):
    """Parametrization ``W -> dropout(W)``: DropConnect on a weight matrix.

    Register it with ``torch.nn.utils.parametrize.register_parametrization(lstm,
    "weight_hh_l0", DropConnect(p))``; every access to ``lstm.weight_hh_l0`` in training
    mode then samples a fresh element-wise mask (scaled by ``1 / (1 - p)``). One call of
    ``nn.LSTM.forward`` runs every time step on the weights it collected, so one mask
    serves a whole batch, as in AWD-LSTM's ``WeightDrop``; but it reads the weight four
    times while collecting it. Call the LSTM inside
    :func:`torch.nn.utils.parametrize.cached` (as :class:`~drillbook.models.AWDLSTM`
    does) so the mask is drawn once, not four times of which three are discarded.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = check_p(p, "weight dropout")

    def forward(self, weight: Tensor) -> Tensor:
        return F.dropout(weight, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


