"""What a head's forward pass costs in matrix products: the record each head fills in.

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

Each head class writes its own count down (:meth:`~drillbook.heads.OutputHead.flops`, from
its options); :func:`drillbook.analysis.head_flops` looks the class up by kind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["FlopSize", "HeadFlops"]


@dataclass(frozen=True)
class FlopSize:
    """The sizes a FLOP count is taken at.

    Attributes:
        vocab_size: ``V``.
        d: the embedding size (the width a head that shares the embedding scores in).
        d_hidden: the size of ``h``, the feature the head reads.
        tokens: ``n``, the positions of the step.
    """

    vocab_size: int
    d: int
    d_hidden: int
    tokens: int

    def scores(self, width: int, count: int = 1, **parts: int) -> HeadFlops:
        """A :class:`HeadFlops` whose score work is ``count`` products of ``n`` contexts
        of size ``width`` with ``V`` output vectors (``count`` score matrices, one of them
        to decode), plus the ``label`` and ``context`` work given in ``parts``."""
        n, v = self.tokens, self.vocab_size
        return HeadFlops(label=parts.get("label", 0), context=parts.get("context", 0),
                         scores=2 * count * n * v * width, eval_label=0,
                         decode=2 * n * v * width, score_values=count * n * v)


@dataclass(frozen=True)
class HeadFlops:
    """Matrix-product FLOPs of one forward pass of an output head over ``n`` positions.

    The backward pass of a product costs twice its forward pass (one product per input
    that needs a gradient), so a training step is about three times ``train_forward``.

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
