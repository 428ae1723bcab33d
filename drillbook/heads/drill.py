"""DRILL: a deep residual label encoder in front of the tied softmax."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from ..validation import BOOLEAN, NON_NEGATIVE_INT, one_of
from .flops import FlopSize, HeadFlops
from .label_encoder import (
    ACTIVATIONS,
    DROPOUT,
    DROPOUT_KIND,
    DROPOUT_KINDS,
    LabelEncoderHead,
    check_activation,
    check_dropout,
    label_dropout,
)

__all__ = ["DrillHead"]


class DrillHead(LabelEncoderHead):
    """Deep residual label-encoder output layer (DRILL paper, Eqs. 8-12).

    .. math::

        E^{(0)} &= E, \\qquad
        E^{(k)} = \\sigma\\big(\\delta(E^{(k-1)})\\, U_k^\\top + b_k\\big) + E
                  \\;[+\\, E^{(k-1)}], \\quad k = 1, \\dots, K \\\\
        p(y_t \\mid y_{1}^{t-1}) &\\propto \\exp(E^{(K)} h_t + b)

    (Pappas & Henderson, 2019). The label encoder ``g_out`` runs over the whole
    vocabulary: it starts from the shared input embedding ``E in R^{V x d}`` and stacks
    ``K = depth`` nonlinear layers (``layers``, each an ``nn.Linear(d, d)`` with
    ``weight = U_k`` and ``bias = b_k``; ``U_k`` is stored out x in, so the paper's
    ``U^{(k)}`` of Eq. 9 is ``U_k^T``), each with

    * a skip connection to the *undropped, unscaled* ``E`` (Eq. 10; ``residual=False``
      removes it, an ablation);
    * optionally a residual connection to the previous layer, ``+ E^{(k-1)}``
      (``residual_previous=True``). As in the authors' code it is added from layer 2 on:
      at layer 1, ``E^{(0)} = E`` already arrives through the skip connection;
    * dropout ``δ`` on the layer's *input*, ``E`` itself included at layer 1, where the
      authors' code applies it (the paper's Eq. 12 writes it on the layer's *output*,
      ``δ(f(E^{(k-1)})) ⊙ f(E^{(k-1)})``): ``"variational"`` draws one ``(1, d)`` mask over
      the embedding dimensions, shared by all ``V`` labels and resampled on every forward
      pass and layer; ``"standard"`` drops entries independently. Only in training mode.

    The context side is the identity (``g_in(h) = h``, paper Sec. 3.3), so the logits are
    ``h E^{(K)T} + b`` with a per-word bias ``b`` (``bias``). Because every layer
    adds ``E``, the joint space is the embedding space and ``d_h`` must equal ``d``.
    ``depth=0`` is the tied head exactly; ``depth=1`` with ``activation="identity"``,
    ``b_1 = 0``, ``residual=False`` and no dropout is the bilinear head with
    ``W = U_1^T``.

    At evaluation ``E^{(K)}`` is a constant. The authors' code recomputes it on every
    forward pass; here, in eval mode under ``torch.no_grad()``, it is computed once and
    cached until a weight changes, so evaluation costs what the tied head costs
    (:meth:`label_embeddings`, :meth:`clear_cache`).

    Init: ``U_k ~ U(-0.1, 0.1)``, ``b_k`` PyTorch's ``nn.Linear`` default
    (``U(-1/sqrt(d), 1/sqrt(d))``), ``b = 0``, as in the authors' code.

    Args:
        vocab_size: ``V``.
        d_hidden: ``d_h``; must equal the embedding size ``d``.
        embedding: the input ``nn.Embedding(V, d)`` (or its weight parameter); required.
        depth: ``K >= 0``, the number of label-encoder layers (default 4, the paper's
            PTB and WikiText-2 setting).
        activation: ``σ``: ``"sigmoid"`` (default, the PTB setting), ``"relu"`` (the
            WikiText-2 setting), ``"tanh"``, or ``"identity"`` (for analysis).
        dropout: ``p`` in ``[0, 1)`` (default 0; the paper uses 0.6).
        dropout_kind: ``"variational"`` (default, PTB) or ``"standard"`` (WikiText-2).
        residual: add the skip connection to ``E`` in every layer (default ``True``).
        residual_previous: also add ``E^{(k-1)}`` for ``k >= 2`` (default ``False``).
        bias: learn the per-word bias ``b`` (default ``True``).

    Shapes:
        hidden ``(..., d)`` -> logits ``(..., V)``; :meth:`label_embeddings` ``(V, d)``.

    Parameters:
        dedicated ``C_drill = K (d d + d) + V`` (Eq. 11 with the layer biases);
        shared ``V d`` (``E``).
    """

    kind = "drill"
    activations = ("sigmoid", "relu", "tanh", "identity")
    options: ClassVar[dict] = {
        "depth": NON_NEGATIVE_INT.saying("a non-negative integer (0 gives the tied head)"),
        "activation": one_of(*activations), "dropout": DROPOUT, "dropout_kind": DROPOUT_KIND,
        "residual": BOOLEAN, "residual_previous": BOOLEAN, "bias": BOOLEAN}
    dropout_kinds = DROPOUT_KINDS
    color = "#117733"  # green

    tiny: ClassVar[dict] = {"depth": 1}
    tutorial: ClassVar[dict] = {"depth": 2, "dropout": 0.3}
    cpu_scale: ClassVar[dict] = {f"-{k}": (f"head.options.depth={k}",) for k in (1, 2, 4)}
    # depths 1 to 4, with the paper's dropout
    bench: ClassVar[dict] = {f"-{k}": {"depth": k, "dropout": 0.6} for k in (1, 2, 3, 4)}

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        # K layers of (V, d) x (d, d) over the vocabulary; cached at evaluation
        return size.scores(size.d, label=2 * int(options["depth"]) * size.vocab_size
                           * size.d * size.d)

    def __init__(
        self,
        vocab_size: int,
        d_hidden: int,
        embedding: nn.Embedding | nn.Parameter | None = None,
        *,
        depth: int = 4,
        activation: str = "sigmoid",
        dropout: float = 0.0,
        dropout_kind: str = "variational",
        residual: bool = True,
        residual_previous: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__(
            vocab_size, d_hidden, embedding, bias=bias, need="d_hidden",
            why="every label-encoder layer adds the embedding E, so the joint space is the "
                "embedding space and d_hidden must equal the embedding dimension: size the "
                "encoder's last layer to the embedding dimension, or use kind='bilinear' or "
                "kind='dual'")
        depth = self.check_option("depth", depth)
        self.dropout, self.dropout_kind = check_dropout(dropout, dropout_kind, self.kind)
        self.activation = check_activation(activation, self.activations, self.kind)
        self.depth = depth
        self.residual = self.check_option("residual", residual)
        self.residual_previous = self.check_option("residual_previous", residual_previous)
        weight = self.embedding_weight
        factory = {"device": weight.device, "dtype": weight.dtype}
        self.layers = nn.ModuleList(nn.Linear(d_hidden, d_hidden, **factory)
                                    for _ in range(depth))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``U_k ~ U(-0.1, 0.1)``, ``b_k`` nn.Linear's default, ``b = 0``."""
        super().reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()  # bias: U(-1/sqrt(d), 1/sqrt(d))
            nn.init.uniform_(layer.weight, -0.1, 0.1)

    # ------------------------------------------------------------ label side
    def _drop(self, x: Tensor) -> Tensor:
        """Dropout ``δ`` on a layer input (identity in eval mode or with ``p = 0``)."""
        return label_dropout(x, self.dropout, self.dropout_kind, self.training)

    def _encode_labels(self, rows: Tensor | None = None) -> Tensor:
        """``E^{(K)}`` (of the given embedding rows, default all), always computed afresh
        (dropout sampled in training mode). Each label is encoded from its own row."""
        emb = self.embedding_weight if rows is None else rows
        act = ACTIVATIONS[self.activation]
        current = emb
        for k, layer in enumerate(self.layers, start=1):
            out = act(layer(self._drop(current)))
            if self.residual_previous and k > 1:
                out = out + current
            if self.residual:
                out = out + emb
            current = out
        return current

    def label_embeddings(self) -> Tensor:
        """``E^{(K)}``, shape ``(V, d)``: the label encoder's output word matrix.

        In training mode this samples dropout like a training step; for analysis (e.g.
        nearest neighbours) call it in eval mode under ``torch.no_grad()``, where it is
        cached: the result is then shared with the cache, so treat it as read-only
        (clone before editing in place). With ``depth=0`` it is ``E`` itself.
        """
        if self.depth == 0:
            return self.embedding_weight
        return super().label_embeddings()

    def _label_sources(self) -> list[Tensor]:
        return [self.embedding_weight, *(p for layer in self.layers for p in
                                         (layer.weight, layer.bias))]

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, depth={self.depth}, activation={self.activation!r}, "
                f"dropout={self.dropout}, dropout_kind={self.dropout_kind!r}, "
                f"residual={self.residual}, residual_previous={self.residual_previous}, "
                f"bias={self.bias is not None}")
