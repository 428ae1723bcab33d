"""Where an output layer's arithmetic goes: matrix-product FLOPs and score memory by head.

Every head's forward pass is a few matrix products plus elementwise work. Counting the
products (``2 M N K`` floating-point operations for an ``(M, K) @ (K, N)`` product) splits
each head's cost into three parts that scale differently:

* **label** work depends on the vocabulary alone (``V``): the dual head's ``σ(E U)`` and
  DRILL's ``k`` residual layers. It does not grow with the batch, and at evaluation the
  label encoding is computed once and cached, so ``eval_label`` is 0;
* **context** work depends on the positions alone (``n``): projections of the hidden
  state (bilinear ``W h``, the mixtures' latent vectors and priors, vMF's ``W h``);
* **score** work is the ``n x V`` product with the output embeddings: ``2 n V d`` for a
  single softmax, ``J`` times that for a ``J``-component mixture, and none at all for
  vMF training (its loss reads only the target word's embedding; decoding by nearest
  neighbour pays the ``2 n V m`` instead).

The backward pass of a product costs twice its forward pass (one product per input that
needs a gradient), so a training step is about three times ``train_forward``.
:func:`head_flops` is checked against PyTorch's own ``FlopCounterMode`` in the tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..heads.mixture import MIX_MODES

__all__ = ["HeadFlops", "awd_lstm_flops", "head_flops"]


#: head options that change no matrix product of the forward pass
_NO_PRODUCTS = frozenset({"activation", "bias", "chunk_size", "cv_form", "cv_weight",
                          "dropout", "dropout_kind", "lambda1", "lambda2", "latent_dropout",
                          "loss", "margin", "residual", "residual_context", "residual_label",
                          "residual_previous", "target_embeddings"})


@dataclass(frozen=True)
class HeadFlops:
    """Matrix-product FLOPs of one forward pass of an output head over ``n`` positions.

    Attributes:
        label: vocabulary-only work per training step (label encoders).
        context: position-only work (projections of ``h``).
        scores: the ``n x V`` work (``J`` score matrices for a mixture).
        eval_label: label work at evaluation (0: the label encoding is cached).
        decode: work to pick one word per position (greedy argmax or nearest neighbour).
        score_values: how many ``n x V`` score values the forward pass materialises.
    """

    label: int
    context: int
    scores: int
    eval_label: int
    decode: int
    score_values: int

    @property
    def train_forward(self) -> int:
        """Forward FLOPs of a training step (the backward pass adds about twice this)."""
        return self.label + self.context + self.scores

    @property
    def eval_forward(self) -> int:
        """Forward FLOPs of an evaluation pass (label encoding cached)."""
        return self.eval_label + self.context + self.scores

    def to_dict(self) -> dict:
        return {**asdict(self), "train_forward": self.train_forward,
                "eval_forward": self.eval_forward}


def head_flops(kind: str, *, vocab_size: int, d: int, tokens: int, d_hidden: int | None = None,
               depth: int = 4, d_joint: int | None = None, n_experts: int = 15,
               vectors_per_layer: Sequence[int] | None = None,
               layer_sizes: Sequence[int] | None = None, dim: int = 300,
               mix: str = "probs", **options) -> HeadFlops:
    """Matrix-product FLOPs of ``kind``'s forward pass (see the module docstring).

    Args:
        kind: ``softmax``, ``tied``, ``bilinear``, ``dual``, ``drill``, ``sigsoftmax``,
            ``mos``, ``doc`` or ``vmf``.
        vocab_size, d: ``V`` and the embedding size.
        tokens: positions ``n`` in the step.
        d_hidden: the size of ``h`` (default ``d``).
        depth: DRILL's number of label-encoder layers.
        d_joint: the dual head's joint size (default ``d``).
        n_experts: MoS's ``J``.
        mix: MoS's mixing: ``"probs"`` scores ``J`` matrices, ``"logits"`` (the mixture
            of contexts) one, over the ``pi``-weighted mean context (a weighted sum, no
            matrix product).
        vectors_per_layer, layer_sizes: DOC's ``i_n`` per layer and the layers' sizes
            (embedding first; default: every vector from the last layer).
        dim: vMF's output embedding size ``m``.
        options: the head's other options, which change no product (dropouts,
            activations, biases, residual wiring, ``chunk_size``: chunks recompute in the
            backward pass, not the forward), so a head's options can be passed as they are.

    Raises:
        ValueError: an unknown kind, an option that is no head option, or ``mix`` for a
            head other than ``mos``.
    """
    unknown = sorted(set(options) - _NO_PRODUCTS)
    if unknown:
        raise ValueError(f"unknown head option(s) {unknown} for head_flops; the options that "
                         f"change no product count are {sorted(_NO_PRODUCTS)}")
    if mix not in MIX_MODES or (mix != "probs" and kind != "mos"):
        raise ValueError(f"mix={mix!r} for head {kind!r}: only the mos head takes mix, one "
                         f"of {list(MIX_MODES)}")
    v, n = int(vocab_size), int(tokens)
    dh = d if d_hidden is None else int(d_hidden)

    def scores(width: int, count: int = 1) -> dict:
        return {"scores": 2 * count * n * v * width, "decode": 2 * n * v * width,
                "score_values": count * n * v}

    if kind == "softmax":
        parts = {"label": 0, "context": 0, **scores(dh)}
    elif kind in ("tied", "sigsoftmax"):
        parts = {"label": 0, "context": 0, **scores(d)}
    elif kind == "bilinear":
        parts = {"label": 0, "context": 2 * n * dh * d, **scores(d)}
    elif kind == "dual":
        dj = d if d_joint is None else int(d_joint)
        parts = {"label": 2 * v * d * dj, "context": 2 * n * dh * dj, **scores(dj)}
    elif kind == "drill":
        parts = {"label": 2 * int(depth) * v * d * d, "context": 0, **scores(d)}
    elif kind == "mos":
        j = int(n_experts)
        parts = {"label": 0, "context": 2 * n * dh * j * d + 2 * n * dh * j,
                 **scores(d, j if mix == "probs" else 1)}
    elif kind == "doc":
        counts = list(vectors_per_layer) if vectors_per_layer is not None else [n_experts]
        sizes = list(layer_sizes) if layer_sizes is not None else [dh] * len(counts)
        if len(sizes) != len(counts):
            raise ValueError(f"vectors_per_layer has {len(counts)} entries but layer_sizes "
                             f"has {len(sizes)}")
        j = sum(counts)
        projections = sum(2 * n * s * i * d for s, i in zip(sizes, counts, strict=True))
        parts = {"label": 0, "context": projections + 2 * n * dh * j, **scores(d, j)}
    elif kind == "vmf":
        parts = {"label": 0, "context": 2 * n * dh * int(dim), "scores": 0,
                 "decode": 2 * n * v * int(dim), "score_values": 0}
    else:
        raise ValueError(f"no FLOP model for head kind {kind!r}; known: softmax, tied, "
                         f"bilinear, dual, drill, sigsoftmax, mos, doc, vmf")
    return HeadFlops(eval_label=0, **parts)


def awd_lstm_flops(*, emsize: int, nhid: int, nlayers: int, tokens: int,
                   d_out: int | None = None) -> int:
    """Matrix-product FLOPs of an AWD-LSTM encoder's forward pass over ``tokens`` positions.

    Layer ``l`` with input size ``a`` and hidden size ``h`` computes its four gates from
    ``[x_t, h_{t-1}]``: ``2 x 4h (a + h)`` FLOPs per position. The sizes follow
    :class:`drillbook.models.AWDLSTM`: ``emsize -> nhid -> ... -> d_out`` (default
    ``emsize``, so that a tied head fits). The embedding lookup is free.
    """
    sizes = [int(emsize)] + [int(nhid)] * (int(nlayers) - 1) + [
        int(emsize if d_out is None else d_out)]
    return sum(2 * 4 * h * (a + h) * int(tokens) for a, h in itertools.pairwise(sizes))
