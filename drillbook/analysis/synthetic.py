"""A synthetic language whose true log-probability matrix is known exactly.

Real corpora never show us the matrix ``A`` of true log-probabilities, so the
softmax-bottleneck argument (Yang et al., 2018; DOC paper, Sec. 3) is usually argued,
not seen. Here we *choose* ``A``:

.. math::

    Z = \\frac{s}{\\sqrt{r}} F G^\\top + \\mathbf{1} \\log u^\\top, \\qquad
    A = \\operatorname{log\\_softmax}_{\\text{rows}}(Z),

with ``F in R^{U x r}``, ``G in R^{V x r}`` standard normal, a sharpness ``s`` and a
Zipfian unigram ``u_w \\propto w^{-a}``. Context ``c`` has next-word distribution
``P*(. | c) = exp(A_c)``. The logit rank ``r`` is the knob: ``A`` differs from ``Z``
by a per-row shift, so ``rank(A) <= r + 2`` (``r`` from ``F G^T``, one for the unigram
column, one for the row normaliser), capped at ``min(U, V)``.

:func:`fit_head` then asks how close a given output head can get to ``A`` when the
encoder is as strong as it can possibly be: every context gets a free vector ``h_c``.
Whatever remains of the KL divergence is the head's fault alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from ..heads.base import Features, OutputHead
from ..heads.families import DistributionHead
from ..validation import POSITIVE_INT, SEED, Rule, integer, is_integer, number

__all__ = ["FitResult", "SyntheticLanguage", "fit_head"]


class SyntheticLanguage:
    """A finite language of ``U`` contexts over ``V`` words with a known ``A``.

    Args:
        n_contexts: ``U``.
        vocab_size: ``V``.
        logit_rank: ``r``, rank of the context-word interaction ``F G^T`` (1 .. V).
        sharpness: ``s``; larger makes each context's distribution more peaked.
        zipf: exponent ``a`` of the unigram prior (0 gives a uniform prior).
        seed: seed of the private generator (no global RNG is touched).
        dtype: floating dtype of :attr:`log_probs` (default float64).

    Attributes:
        log_probs: ``A``, shape ``(U, V)``; each row log-normalised.
        context_prior: ``(U,)`` probabilities of the contexts (uniform).
    """

    def __init__(
        self,
        n_contexts: int = 512,
        vocab_size: int = 128,
        logit_rank: int = 128,
        *,
        sharpness: float = 3.0,
        zipf: float = 1.0,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        n_contexts = POSITIVE_INT.check(n_contexts, "n_contexts")
        vocab_size = integer(minimum=2).saying("an integer >= 2 (one word is no choice)"
                                               ).check(vocab_size, "vocab_size")
        logit_rank = Rule(lambda r: is_integer(r) and 1 <= r <= vocab_size,
                          f"an integer in [1, vocab_size={vocab_size}]").check(
                              logit_rank, "logit_rank")
        sharpness = number(above=0).check(sharpness, "sharpness")
        zipf = number(minimum=0).check(zipf, "zipf")
        seed = SEED.check(seed, "seed")
        self.n_contexts, self.vocab_size, self.logit_rank = n_contexts, vocab_size, logit_rank
        self.sharpness, self.zipf, self.seed = sharpness, zipf, seed
        gen = torch.Generator().manual_seed(seed)
        f = torch.randn(n_contexts, logit_rank, generator=gen, dtype=torch.float64)
        g = torch.randn(vocab_size, logit_rank, generator=gen, dtype=torch.float64)
        ranks = torch.arange(1, vocab_size + 1, dtype=torch.float64)
        log_unigram = torch.log_softmax(-zipf * ranks.log(), dim=0)
        logits = sharpness / math.sqrt(logit_rank) * f @ g.T + log_unigram
        self.log_probs = torch.log_softmax(logits, dim=-1).to(dtype)
        self.context_prior = torch.full((n_contexts,), 1.0 / n_contexts, dtype=dtype)

    def __repr__(self) -> str:
        return (f"SyntheticLanguage(n_contexts={self.n_contexts}, vocab_size="
                f"{self.vocab_size}, logit_rank={self.logit_rank}, sharpness="
                f"{self.sharpness}, zipf={self.zipf}, seed={self.seed})")

    @property
    def probs(self) -> Tensor:
        """``P*``, shape ``(U, V)``."""
        return self.log_probs.exp()

    def entropy(self) -> Tensor:
        """Mean conditional entropy ``H(W | C)`` in nats (the best achievable loss)."""
        return -(self.context_prior * (self.probs * self.log_probs).sum(-1)).sum()

    def kl(self, log_q: Tensor) -> Tensor:
        """Mean KL divergence ``E_c KL(P*(.|c) || Q(.|c))`` in nats.

        Args:
            log_q: model log-probabilities, shape ``(U, V)``, on any device.

        Returns:
            a differentiable scalar; 0 exactly when ``Q = P*``.
        """
        if tuple(log_q.shape) != (self.n_contexts, self.vocab_size):
            raise ValueError(f"log_q must have shape ({self.n_contexts}, "
                             f"{self.vocab_size}), got {tuple(log_q.shape)}")
        log_p = self.log_probs.to(log_q.device, log_q.dtype)
        prior = self.context_prior.to(log_q.device, log_q.dtype)
        return (prior * (log_p.exp() * (log_p - log_q)).sum(-1)).sum()

    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``n`` (context, next word) pairs: two ``(n,)`` int64 tensors."""
        ctx = torch.multinomial(self.context_prior.double(), n, replacement=True,
                                generator=generator)
        words = torch.multinomial(self.probs[ctx].double(), 1, generator=generator)
        return ctx, words.squeeze(1)


@dataclass
class FitResult:
    """Outcome of :func:`fit_head`.

    Attributes:
        kl: final mean KL divergence to the true distribution (nats).
        history: KL after every step.
        hidden: the fitted context vectors ``H``, ``(U, d_hidden)`` (detached).
        features: what to feed the head to get the fitted distributions: ``hidden``, or
            for heads that read several layers a :class:`~drillbook.heads.Features`.
        context_dims: free numbers per context that the fit optimised (``d_hidden``, plus
            the sizes of the middle layers a head such as DOC reads): compare heads at
            equal ``context_dims``.
    """

    kl: float
    history: list[float] = field(repr=False)
    hidden: Tensor = field(repr=False)
    features: Tensor | Features | None = field(default=None, repr=False)
    context_dims: int = 0


def fit_head(
    language: SyntheticLanguage,
    head: OutputHead,
    *,
    steps: int = 500,
    lr: float = 0.05,
    init_scale: float = 0.5,
    seed: int = 0,
) -> FitResult:
    """Fit ``head`` (in place) and free context vectors to a synthetic language.

    Minimises the exact expected KL divergence ``E_c KL(P*(.|c) || p_head(.|h_c))``
    over ``H = [h_1 ... h_U]`` and the head's parameters with full-batch Adam. The
    context vectors stand for a perfect encoder, so the KL left at the end measures
    what the output layer cannot express. A head that reads several layers (DOC) gets a
    free vector per context for each of its layers, and a head with a training
    regulariser (DOC's ``lambda beta``) has it added to the objective (``history`` and
    ``kl`` report the KL alone).

    The free vectors are parameters of the fit too: a DOC head reading two layers of size
    ``d`` gets ``2 d`` free numbers per context where a MoS head reading one layer of size
    ``d`` gets ``d``, and with twice the freedom a lower KL says nothing about reading
    middle layers. :attr:`FitResult.context_dims` reports the count; compare heads where
    it is equal (e.g. DOC with ``layer_sizes=[d // 2, d // 2]`` against MoS with
    ``d_hidden=d``).

    Args:
        language: the target.
        head: a :class:`~drillbook.heads.DistributionHead` (a distribution over words),
            with ``vocab_size == V``; its parameters, device and
            dtype are used as they are.
        steps: Adam steps.
        lr: Adam learning rate.
        init_scale: standard deviation of the initial context vectors.
        seed: seeds the initial context vectors (private generator).
    """
    if not isinstance(head, DistributionHead):
        raise ConfigError(f"fit_head fits a distribution over words, and the {head.kind!r} "
                          f"head predicts vectors (no log_prob); fit a distribution head "
                          f"such as 'softmax'")
    if head.vocab_size != language.vocab_size:
        raise ValueError(f"head has vocab_size={head.vocab_size} but the language has "
                         f"{language.vocab_size} words")
    ref = next(head.parameters())
    gen = torch.Generator().manual_seed(seed)

    def free(size: int) -> nn.Parameter:
        x = init_scale * torch.randn(language.n_contexts, size, generator=gen, dtype=ref.dtype)
        return nn.Parameter(x.to(ref.device))

    hidden = free(head.d_hidden)
    # heads that read several layers (DOC) get a free vector per context for each
    sizes = list(head.layer_sizes) if head.reads_layers else []
    layers = [free(s) if s > 0 else None for s in sizes[:-1]]

    def features() -> Tensor | Features:
        return Features(hidden, (*layers, hidden)) if sizes else hidden

    opt = torch.optim.Adam([hidden, *(p for p in layers if p is not None),
                            *head.parameters()], lr=lr)
    history = []
    head.train()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        feats = features()
        kl = language.kl(head.log_prob(feats))
        extra = head.regularizer(feats)  # e.g. DOC's lambda * beta
        (kl if extra is None else kl + extra).backward()
        opt.step()
        history.append(float(kl.detach()))
    head.eval()
    with torch.no_grad():
        final = float(language.kl(head.log_prob(features())))
    return FitResult(kl=final, history=history, hidden=hidden.detach(),
                     features=Features(hidden.detach(), tuple(
                         None if p is None else p.detach() for p in (*layers, hidden)))
                     if sizes else hidden.detach(),
                     context_dims=hidden.shape[1] + sum(
                         p.shape[1] for p in layers if p is not None))
