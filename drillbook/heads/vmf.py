"""Continuous outputs (Kumar & Tsvetkov, 2019): a head that predicts a word vector
``ê = W h + b_w`` in a fixed, pretrained embedding space instead of scoring the
vocabulary, trained with the losses of :mod:`drillbook.losses` and decoded by nearest
neighbour. Nothing is normalised over the ``V`` words, so training cost does not grow with
the vocabulary (:class:`VMFHead`; chapter 4 of the book).
"""

from __future__ import annotations

import sys
import warnings
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import DataError
from ..losses import DECODE_METRICS, LOSSES, log_cm, max_margin_loss, nearest_neighbour
from ..validation import BOOLEAN, Rule, check_choice, integer, number, one_of
from .families import VectorHead
from .features import Features
from .flops import FlopSize, HeadFlops

__all__ = ["VMFHead"]

#: embedding size of the random stand-in table (fastText's and the paper's m)
DEFAULT_DIM = 300


class VMFHead(VectorHead):
    """Continuous-output layer with a frozen target embedding table (Kumar & Tsvetkov, 2019).

    ``ê = W h + b_w`` (``W`` is ``proj``, a ``nn.Linear(d_hidden, m)``) against the
    frozen, unit-normalised table ``E`` (``target_embeddings``, ``(V, m)``, a buffer: saved
    in ``state_dict`` and moved by ``.to()``, but not trained and not in ``param_counts``;
    see :meth:`frozen_count`).

    It is the one :class:`~drillbook.heads.OutputHead` that is **not** a distribution over
    the vocabulary: ``log_prob`` raises, and ``loss`` is the chosen continuous loss rather
    than a cross-entropy. ``scores`` rates every word by the distance the loss defines and
    ``decode`` picks the best one (paper Sec. 4.3; :data:`drillbook.losses.DECODE_METRICS`).

    **Parameter counts (paper Table 4).** The only trained parameters are ``W`` (``m x
    d_h``) and, optionally, ``b_w``. In the paper's IWSLT models (decoder state 1,024-d,
    input embeddings 512-d, ``V = 50,000``, ``m = 300``) the output layer is ``50,000 x
    1,024 = 51.2M`` for a softmax against ``1,024 x 300 = 307.2K`` here
    (``VMFHead(50_000, 1024, dim=300, bias=False)``; 307,500 with the bias), and the decoder
    *input* layer ``50,000 x 512 = 25.6M`` for a trained embedding against ``300 x 512 =
    153.6K`` when the frozen table is tied to the input (a ``Linear(300, 512)`` in the
    model, not in this head). So the often-quoted "25.6M vs 307.2K" pairs the softmax
    model's input embedding with the vMF model's output layer; the like-for-like output-layer
    ratio is 51.2M / 307.2K ≈ 167.

    Args:
        vocab_size: ``V``.
        d_hidden: ``d_h``.
        embedding: the encoder's input embedding; accepted so that ``build_head`` can pass
            it to every head, and ignored (the output space is the pretrained table).
        target_embeddings: the pretrained ``(V, m)`` word vectors of the output vocabulary
            (fastText/word2vec in the paper). Rows are normalised to unit length; all-zero
            rows are left at zero (no NaN): such a word scores ``cos = 0`` against every
            prediction and, as a target, makes the vMF losses favour ``κ → 0`` (the
            translation tables give ``<pad>`` and ``<bos>`` zero rows: never targets, never
            decoded). A row with a NaN or infinite entry is refused (it would silently
            become a zero target). ``None``
            draws a random unit table: **only for tests and shape checks** - a head trained
            against random vectors learns nothing transferable; real use passes pretrained
            vectors.
        dim: ``m``. With ``target_embeddings`` it must equal the table's width (checked);
            without, it is the random table's width (default 300).
        loss: ``"nllvmf"`` (NLLvMF), ``"reg1"`` (+ ``λ1 ‖ê‖``), ``"reg2"`` (``λ2``-weighted
            alignment), ``"pseudo"`` (the appendix's gradient surrogate), ``"l2"`` (the
            squared error ``‖ê - e(w)‖²``), ``"cosine"`` or ``"maxmargin"``. It also fixes
            the decoding distance, :attr:`decode_metric`.
        lambda1, lambda2, margin: the paper's 0.02, 0.1 and 0.5.
        bias: learn ``b_w`` (the paper's count of 307.2K has no bias).

    Raises:
        ValueError: unknown loss; a table whose shape does not match ``(vocab_size, dim)``
            (the message shows both); a table that is not a 2-d floating tensor.
        DataError: a table with non-finite rows (the message names them), here, in
            :meth:`set_target_embeddings` and in ``load_state_dict``.

    Shapes:
        hidden ``(..., d_h)`` -> predicted vectors ``(..., m)``, scores ``(..., V)``,
        decoded ids ``(...)``.
    """

    kind = "vmf"
    options: ClassVar[dict] = {
        "target_embeddings": Rule(lambda v: v is None or isinstance(v, Tensor),
                                  "null (a random table: tests only) or a (V, m) tensor of "
                                  "word vectors"),
        "dim": integer(minimum=2).or_none("the table's width"),
        "loss": one_of(*LOSSES), "lambda1": number(minimum=0), "lambda2": number(minimum=0),
        "margin": number(minimum=0), "bias": BOOLEAN}
    color = "#cc3399"  # magenta

    tiny: ClassVar[dict] = {"dim": 4}
    bench: ClassVar[dict] = {"-300": {"dim": 300}}

    @classmethod
    def stand_in_options(cls, vocab_size: int, options: dict) -> dict:
        """A random ``(V, m)`` table when ``options`` give none."""
        if "target_embeddings" in options:
            return options
        dim = options.get("dim") or DEFAULT_DIM
        return {**options, "target_embeddings": torch.randn(vocab_size, dim)}

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        """``W h`` only in training (the loss reads the target's vector); decoding by
        nearest neighbour scores every word, ``2 n V m``."""
        table, dim = options["target_embeddings"], options["dim"]
        m = int(table.shape[1] if table is not None else dim or DEFAULT_DIM)
        n = size.tokens
        return HeadFlops(label=0, context=2 * n * size.d_hidden * m, scores=0, eval_label=0,
                         decode=2 * n * size.vocab_size * m, score_values=0)

    def __init__(
        self,
        vocab_size: int,
        d_hidden: int,
        embedding: nn.Embedding | nn.Parameter | None = None,
        *,
        target_embeddings: Tensor | None = None,
        dim: int | None = None,
        loss: str = "nllvmf",
        lambda1: float = 0.02,
        lambda2: float = 0.1,
        margin: float = 0.5,
        bias: bool = True,
    ) -> None:
        super().__init__(vocab_size, d_hidden)
        check_choice(loss, LOSSES, "vMF head loss")
        dim = self.check_option("dim", dim)
        lambda1, lambda2, margin, bias = (self.check_option(name, value) for name, value in (
            ("lambda1", lambda1), ("lambda2", lambda2), ("margin", margin), ("bias", bias)))
        if target_embeddings is None:  # (once per calling line: Python's default filter)
            warnings.warn("a vmf head built without target_embeddings scores against a "
                          "random table; pass the pretrained word vectors "
                          "(target_embeddings=...) or set them with set_target_embeddings() "
                          "before training", UserWarning, stacklevel=_caller_level())
        table = self._unit_table(target_embeddings, dim)
        self.dim = int(table.shape[1])
        self.loss_name = loss
        #: the :func:`~drillbook.losses.nearest_neighbour` metric of this loss
        self.decode_metric = DECODE_METRICS[loss]
        self.lambda1 = float(lambda1)
        self.lambda2 = float(lambda2)
        self.margin = float(margin)
        self.proj = nn.Linear(d_hidden, self.dim, bias=bias)
        self.register_buffer("target_embeddings", table)

    def _unit_table(self, table: Tensor | None, dim: int | None) -> Tensor:
        """The checked, unit-normalised ``(V, m)`` table (zero rows stay zero)."""
        if table is None:
            table = torch.randn(self.vocab_size, DEFAULT_DIM if dim is None else dim)
        if not isinstance(table, Tensor) or table.dim() != 2 or not table.is_floating_point():
            raise ValueError(
                f"target_embeddings must be a floating (V, m) tensor of word vectors, got "
                f"{getattr(table, 'shape', type(table).__name__)}"
            )
        width = int(table.shape[1]) if dim is None else dim
        if tuple(table.shape) != (self.vocab_size, width):
            expected = f"({self.vocab_size}, {'m' if dim is None else dim})"
            raise ValueError(
                f"target_embeddings of shape {tuple(table.shape)} do not match the model, which "
                f"expects {expected} (vocab_size={self.vocab_size}, dim={dim}): a dimension "
                f"mismatch between embeddings and model is an error; pass the table of this "
                f"output vocabulary, with dim equal to its width (or dim=None)"
            )
        _check_finite_rows(table)
        table = table.detach().to(device="cpu", dtype=torch.get_default_dtype())
        norms = torch.linalg.vector_norm(table, dim=-1, keepdim=True)
        return torch.where(norms > 0, table / norms.clamp_min(torch.finfo(table.dtype).tiny),
                           torch.zeros_like(table))

    def reset_parameters(self) -> None:
        """Re-draw ``W`` and ``b_w`` (``nn.Linear``'s init); the frozen table is kept."""
        self.proj.reset_parameters()

    def set_target_embeddings(self, table: Tensor) -> None:
        """Replace the frozen table by ``table`` ``(V, m)``, checked and unit-normalised as
        at construction; it keeps the current table's device and dtype."""
        if table is None:
            raise ValueError("set_target_embeddings needs a (V, m) tensor of word vectors")
        unit = self._unit_table(table, self.dim)
        self.target_embeddings = unit.to(self.target_embeddings)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        table = state_dict.get(prefix + "target_embeddings")
        if isinstance(table, Tensor):
            _check_finite_rows(table)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # --------------------------------------------------------------- outputs
    def predict_vectors(self, features: Tensor | Features) -> Tensor:
        """``ê = W h + b_w``, shape ``(..., m)``."""
        return self.proj(self._hidden(features))

    def _log_prob(self, features: Tensor | Features) -> Tensor:
        raise NotImplementedError(
            "VMFHead has no log_prob: a vMF head defines a density on the unit sphere of "
            "embedding vectors, not a distribution over the vocabulary, so there are no "
            "normalised log p(w | context) to return. Use head.scores(features) for the vMF "
            "log-density of each word's embedding (shape (..., V), not normalised over words), "
            "head.decode(features) for nearest-neighbour word ids, and head.loss(features, "
            "target) for training."
        )

    def scores(self, features: Tensor | Features) -> Tensor:
        """Every word's score by this loss's decoding distance, ``(..., V)``, higher is
        better (:attr:`decode_metric`; paper Sec. 4.3):

        * ``"vmf"`` (NLLvMF and variants): the vMF log-density ``log C_m(‖ê‖) + ê^T e_j`` of
          each word's unit vector. Per position it ranks the words exactly as cosine does
          (``C_m`` depends only on ``‖ê‖``); the values do not sum to one over words
          (densities on the sphere at ``V`` points, not a distribution over the vocabulary);
        * ``"cosine"`` (cosine, max-margin): ``cos(ê, e_j)`` (0 against a zero row);
        * ``"l2"`` (squared error): ``-‖ê - e_j‖²``, minus the loss each word would incur.

        Differentiable.
        """
        pred = self.predict_vectors(features)
        table = self.target_embeddings
        if self.decode_metric == "vmf":
            kappa = torch.linalg.vector_norm(pred, dim=-1, keepdim=True)
            return log_cm(kappa, self.dim) + pred @ table.T
        if self.decode_metric == "cosine":  # the rows are unit (or zero) already
            return F.normalize(pred, dim=-1, eps=1e-12) @ table.T
        squared = (pred.square().sum(-1, keepdim=True) - 2.0 * pred @ table.T
                   + table.square().sum(-1))
        return -squared.clamp_min(0.0)

    def decode(self, features: Tensor | Features, metric: str | None = None,
               chunk_size: int | None = None) -> Tensor:
        """Nearest-neighbour word ids ``(...)`` (greedy decoding) by ``metric``, default
        this loss's own :attr:`decode_metric`; see :func:`drillbook.losses.nearest_neighbour`
        for the metrics (``"cosine"``, ``"vmf"``: the same ranking, ``"l2"``). The table is
        stored unit-normalised, so it is not normalised again per call."""
        ids, _ = nearest_neighbour(self.predict_vectors(features), self.target_embeddings,
                                   metric=metric or self.decode_metric, k=1,
                                   chunk_size=chunk_size, unit_rows=True)
        return ids.squeeze(-1)

    def output_embeddings(self) -> Tensor:
        return self.target_embeddings

    # --------------------------------------------------------------- training
    def position_losses(self, pred: Tensor, ids: Tensor) -> Tensor:
        """The chosen loss per position, for predicted vectors ``(N, m)`` and ids ``(N,)``."""
        table = self.target_embeddings
        if self.loss_name == "maxmargin":
            return max_margin_loss(pred, ids, table, self.margin)
        fn = LOSSES[self.loss_name]
        target = table[ids]
        if self.loss_name == "reg1":
            return fn(pred, target, self.lambda1)
        if self.loss_name == "reg2":
            return fn(pred, target, self.lambda2)
        return fn(pred, target)

    def _mean_nll(self, features: Tensor | Features, flat_target: Tensor,
                  ignore_index: int) -> Tensor:
        """Mean of the chosen loss over kept positions (``nan`` when none is kept, as for
        the other heads). Every position is projected and scored, the ignored ones against
        word 0, and masked out of the mean: selecting the kept ones first (``x[keep]``)
        would give a tensor whose size depends on the targets' values, which a GPU stops
        to compute on every step."""
        hidden = self._hidden(features).reshape(-1, self.d_hidden)
        keep = flat_target != ignore_index
        ids = torch.where(keep, flat_target, torch.zeros_like(flat_target))
        losses = self.position_losses(self.proj(hidden), ids)
        return torch.where(keep, losses, torch.zeros_like(losses)).sum() / keep.sum()

    # --------------------------------------------------------------- counts
    def frozen_count(self) -> int:
        """Entries of the frozen target table, ``V m``: stored, never trained, and not part of
        :meth:`param_counts` (``dedicated = d_h m + m``, ``shared = 0``)."""
        return self.target_embeddings.numel()

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, d_hidden={self.d_hidden}, dim={self.dim}, "
                f"loss={self.loss_name!r}, decode_metric={self.decode_metric!r}")


def _check_finite_rows(table: Tensor) -> None:
    """DataError naming the rows of ``(V, m)`` ``table`` that hold a NaN or an infinity."""
    bad = (~torch.isfinite(table.detach())).any(-1).nonzero().flatten().tolist()
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (f", ... ({len(bad)} rows)" if len(bad) > 10
                                                 else "")
        raise DataError(
            f"target_embeddings rows [{shown}] hold NaN or infinite values (those words "
            f"would be trained towards a zero vector); repair or replace those vectors "
            f"(e.g. with the <unk> vector) before building the vMF head")


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning raised in ``__init__`` at the first frame
    outside :mod:`drillbook.heads` (the user's line, not :func:`build_head`'s)."""
    frame, level = sys._getframe(2), 2  # 1: __init__, 2: whoever called it
    while frame is not None and frame.f_globals.get("__name__", "").startswith(
            "drillbook.heads"):
        frame, level = frame.f_back, level + 1
    return level
