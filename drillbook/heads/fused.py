"""The fused output loss: cross-entropy of a matrix-product head without its score matrix.

Every softmax head but one scores words by a matrix product, ``s = x W^T + b``, with a
context ``x`` ``(n, d')`` and word vectors ``W`` ``(V, d')`` that depend on the head (the
hidden state and ``E`` for a tied head, ``W h`` and ``E`` for a bilinear one, ``g_in(h)`` and
``g_out(E)`` for the dual and DRILL heads). The plain loss forms all ``n x V`` scores, their
softmax and, in the backward pass, a gradient of the same size: at a small model's sizes
(2,240 positions x 10,000 words) that is a 90 MB matrix allocated, written, read and freed
several times per step, and on a CPU the step is bound by that memory traffic, not by its
arithmetic.

The fused loss walks the positions in chunks small enough to stay in the cache. For each
chunk it forms the scores, their log-normaliser ``log Z = logsumexp(s)``, the target's
score and, when a gradient is needed, the gradient of the summed loss with respect to the
scores, which for a softmax is

.. math::  \\frac{\\partial\\, (\\log Z - s_y)}{\\partial s} = \\operatorname{softmax}(s) - e_y ,

and folds it into the gradients of ``x``, ``W`` and ``b`` at once (``G W``, ``G^T x``,
``sum G``), all in the forward pass. No ``n x V`` matrix exists at any time; the backward
pass only scales the stored gradients by the incoming one. This is what the fused linear
cross-entropy kernels of Liger-Kernel and Cut Cross-Entropy do on a GPU, written with plain
tensor operations so that it runs on any device.

Two extensions cover the package's other softmax heads:

* an elementwise map of the scores before the softmax, with its derivative (sigsoftmax's
  ``z + log sigmoid(z)``, derivative ``2 - sigmoid(z)``), by the chain rule per entry;
* a mixture of ``J`` softmaxes mixed in log space (MoS, DOC's Eq. 9): each position's
  ``J`` score rows are chunked together, the loss is
  ``-log sum_j pi_j p_j(y)`` and the gradient of row ``j`` is
  ``r_j (softmax(s_j) - e_y)`` with the posterior responsibility
  ``r_j = pi_j p_j(y) / sum_k pi_k p_k(y)``, and that of ``log pi_j`` is ``-r_j``.

The plain path stays the reference: the tests compare loss and every gradient with it for
every head of the registry. What computes in which precision: float32 and float64 inputs
are fused in their own dtype; lower precisions and autocast take the plain path
(:func:`fusable`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from .autocast import autocast_dtype

__all__ = [
    "CHUNK_BYTES",
    "SIGSOFTMAX",
    "ScoreFactors",
    "ScoreMap",
    "Workspace",
    "chunk_rows",
    "fusable",
    "fused_cross_entropy",
    "fused_mixture_nll",
]

#: bytes of scores one chunk holds, by device type. On a CPU a few times one core's L2
#: cache: on the machine the book was made on (2 MiB of L2 a core), a tied loss over 2,240
#: positions x 10,000 words at d = 32 took the same time with chunks of 2 to 16 MiB and 30%
#: longer with 0.5 MiB; at d = 128 (1,120 positions) 16 MiB took 133 ms, 8 MiB 145, 4 MiB
#: 151, 2 MiB 180 (the products are faster on more rows). On a GPU large enough that a
#: chunk is thousands of positions and its launches are few.
CHUNK_BYTES = {"cpu": 8 * 2**20, "cuda": 256 * 2**20}
_DEFAULT_CHUNK_BYTES = 64 * 2**20


def chunk_rows(device: torch.device, rows_width: int, dtype: torch.dtype,
               chunk_bytes: int | None = None) -> int:
    """Positions per chunk: the most whose ``rows_width`` scores each fit in
    ``chunk_bytes`` (default :data:`CHUNK_BYTES` of the device type), at least 1."""
    budget = chunk_bytes or CHUNK_BYTES.get(device.type, _DEFAULT_CHUNK_BYTES)
    per_row = rows_width * torch.finfo(dtype).bits // 8
    return max(1, int(budget // max(per_row, 1)))


def fusable(*tensors: Tensor) -> bool:
    """Whether the fused loss computes what the plain path would: float32 or float64
    tensors of one dtype, and autocast off on their device."""
    dtype = tensors[0].dtype
    if dtype not in (torch.float32, torch.float64):
        return False
    if any(t.dtype != dtype for t in tensors):
        return False
    return autocast_dtype(tensors[0].device.type) is None


class Workspace:
    """Chunk buffers a head keeps between steps, so that a training step reuses memory it
    has touched before instead of asking the allocator (on a CPU: mapping and faulting in
    fresh pages) for megabytes at every step.

    Not part of a head's state: it is empty after ``copy.deepcopy``, pickling or
    ``.to()``, and one buffer per (device, dtype) is kept, grown when a larger chunk asks.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype], Tensor] = {}

    def get(self, rows: int, cols: int, like: Tensor) -> Tensor:
        """A ``(rows, cols)`` tensor of ``like``'s dtype and device, contents undefined."""
        key = (str(like.device), like.dtype)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < rows * cols:
            buf = like.new_empty(rows * cols)
            self._buffers[key] = buf
        return buf[: rows * cols].view(rows, cols)

    def clear(self) -> None:
        self._buffers.clear()

    def __getstate__(self) -> dict:
        return {"_buffers": {}}

    def __setstate__(self, state: dict) -> None:
        self._buffers = {}

    def __deepcopy__(self, memo: dict) -> Workspace:
        return Workspace()

    def __repr__(self) -> str:
        held = sum(b.numel() * b.element_size() for b in self._buffers.values())
        return f"Workspace({held / 2**20:.1f} MiB held)"


@dataclass(frozen=True)
class ScoreFactors:
    """A head's scores as a matrix product: ``s = context @ words^T + bias``, then
    ``score_map`` elementwise (None: the identity).

    Attributes:
        context: ``(..., d')``, the context side (dropout already applied).
        words: ``(V, d')``, the word side.
        bias: ``(V,)`` or None.
        score_map: a :class:`ScoreMap` or None.
    """

    context: Tensor
    words: Tensor
    bias: Tensor | None
    score_map: ScoreMap | None = None


@dataclass(frozen=True)
class ScoreMap:
    """An elementwise map of the scores before the softmax, ``z -> f(z)``, written in place
    into ``z``'s buffer, and the factor ``f'(z)`` that turns a gradient with respect to
    ``f(z)`` into one with respect to ``z``.

    ``apply(z)`` returns ``f'(z)`` (a new tensor of ``z``'s shape) after overwriting ``z``
    with ``f(z)``; ``name`` says which map it is.
    """

    name: str
    apply: Callable[[Tensor], Tensor]


def _sigsoftmax_apply(z: Tensor) -> Tensor:
    """``z <- z + log sigmoid(z)``; returns ``d/dz = 2 - sigmoid(z)``."""
    log_sig = F.logsigmoid(z)
    slope = torch.exp(log_sig).neg_().add_(2.0)
    z.add_(log_sig)
    return slope


#: sigsoftmax's score map (Kanai et al., 2018): ``z + log sigmoid(z)``
SIGSOFTMAX = ScoreMap("sigsoftmax", _sigsoftmax_apply)


def _exponentiate_chunk(scores: Tensor, target: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """In place: ``scores`` (m, V) become ``exp(s - max s)``, the softmax times its row sum.
    Returns the log-normaliser ``log Z`` (m,), the target's score ``s_y`` (m,), read before
    the scores change, and the row sums ``(m, 1)`` that normalise them."""
    picked = scores.gather(1, target[:, None]).squeeze(1)
    top = scores.amax(1, keepdim=True)
    scores.sub_(top).exp_()
    total = scores.sum(1, keepdim=True)
    return (top + total.log()).squeeze(1), picked, total


def _keep_gradients(ctx, grads: tuple[Tensor | None, ...]) -> None:
    """Store the gradients a fused forward pass formed (None: an input that needs none)."""
    ctx.save_for_backward(*(g for g in grads if g is not None))
    ctx.present = tuple(g is not None for g in grads)


def _scaled_gradients(ctx, grad_total: Tensor, *, inputs_without: int) -> tuple:
    """The backward pass of a fused loss: the stored gradients times the incoming one, then
    None for the ``inputs_without`` gradient-free inputs that follow them."""
    stored = iter(ctx.saved_tensors)
    out = [next(stored) * grad_total if present else None for present in ctx.present]
    return (*out, *[None] * inputs_without)


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of ``f(x W^T + b)`` over the kept positions, its gradients formed
    in the forward pass (see the module docstring). Returns ``(sum, kept)``: the summed
    loss and the number of kept positions (no gradient)."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Tensor | None, target: Tensor,
                keep: Tensor, chunk: int, score_map: ScoreMap | None,
                workspace: Workspace | None, want: bool):
        n, vocab = x.shape[0], w.shape[0]
        grad_x = grad_w = grad_b = None
        need = [want and wanted for wanted in ctx.needs_input_grad]
        if need[0]:
            grad_x = torch.empty_like(x)
        if need[1]:
            grad_w = torch.zeros_like(w)
        if b is not None and need[2]:
            grad_b = torch.zeros_like(b)
        grads = any(g is not None for g in (grad_x, grad_w, grad_b))
        weights = keep.to(x.dtype)
        total = x.new_zeros(())
        wt = w.t()
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            xs, ts, ks = x[start:stop], target[start:stop], weights[start:stop]
            scores = (workspace.get(stop - start, vocab, x) if workspace is not None
                      else x.new_empty(stop - start, vocab))
            if b is None:
                torch.mm(xs, wt, out=scores)
            else:
                torch.addmm(b, xs, wt, out=scores)
            slope = score_map.apply(scores) if score_map is not None else None
            log_z, picked, sums = _exponentiate_chunk(scores, ts)
            total = total + ((log_z - picked) * ks).sum()
            if not grads:
                continue
            # softmax - e_y on the kept rows, 0 on the ignored ones (one pass normalises
            # and masks)
            scores.mul_(ks[:, None] / sums)
            scores.scatter_add_(1, ts[:, None], -ks[:, None])
            if slope is not None:
                scores.mul_(slope)
            if grad_x is not None:
                torch.mm(scores, w, out=grad_x[start:stop])
            if grad_w is not None:  # (out=, not addmm_: FLOP counters see this form)
                torch.addmm(grad_w, scores.t(), xs, out=grad_w)
            if grad_b is not None:
                grad_b.add_(scores.sum(0))
        _keep_gradients(ctx, (grad_x, grad_w, grad_b))
        return total, weights.sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_total: Tensor, _grad_kept: Tensor):
        return _scaled_gradients(ctx, grad_total, inputs_without=6)


def fused_cross_entropy(factors: ScoreFactors, target: Tensor, ignore_index: int = -100,
                        *, chunk_bytes: int | None = None,
                        workspace: Workspace | None = None) -> Tensor:
    """Mean cross-entropy of the scores ``factors`` describe, without forming them whole.

    Equal to ``F.cross_entropy(f(context @ words.T + bias), target,
    ignore_index=ignore_index)`` (loss and gradients, to rounding).

    Args:
        factors: the head's :class:`ScoreFactors`; ``context`` ``(..., d')``.
        target: word ids of the context's leading shape, flattened or not.
        ignore_index: target value left out of the mean.
        chunk_bytes: bytes of scores per chunk (default :data:`CHUNK_BYTES`).
        workspace: a :class:`Workspace` whose buffer the chunks reuse (None: fresh).

    Returns:
        a scalar; ``nan`` when every target is ignored (as ``F.cross_entropy``).
    """
    x = factors.context.reshape(-1, factors.context.shape[-1])
    flat = target.reshape(-1)
    keep = flat != ignore_index
    safe = flat.masked_fill(~keep, 0)
    chunk = chunk_rows(x.device, factors.words.shape[0], x.dtype, chunk_bytes)
    total, kept = _FusedLinearCrossEntropy.apply(
        x, factors.words, factors.bias, safe, keep, chunk, factors.score_map, workspace,
        torch.is_grad_enabled())  # no gradient is formed under no_grad
    return total / kept


class _FusedMixtureNLL(torch.autograd.Function):
    """Summed ``-log sum_j pi_j softmax(E k_j + b)_y`` over the kept positions, gradients
    formed in the forward pass. Returns ``(sum, kept)``."""

    @staticmethod
    def forward(ctx, vectors: Tensor, log_prior: Tensor, w: Tensor, b: Tensor | None,
                target: Tensor, keep: Tensor, chunk: int, workspace: Workspace | None,
                want: bool):
        n, j, d = vectors.shape
        vocab = w.shape[0]
        need = [want and wanted for wanted in ctx.needs_input_grad]
        grad_v = torch.empty_like(vectors) if need[0] else None
        grad_p = torch.empty_like(log_prior) if need[1] else None
        grad_w = torch.zeros_like(w) if need[2] else None
        grad_b = torch.zeros_like(b) if b is not None and need[3] else None
        grads = any(g is not None for g in (grad_v, grad_p, grad_w, grad_b))
        weights = keep.to(vectors.dtype)
        total = vectors.new_zeros(())
        wt = w.t()
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            m = stop - start
            ks = weights[start:stop]
            rows = vectors[start:stop].reshape(m * j, d)
            ts = target[start:stop].repeat_interleave(j)
            scores = (workspace.get(m * j, vocab, vectors) if workspace is not None
                      else vectors.new_empty(m * j, vocab))
            if b is None:
                torch.mm(rows, wt, out=scores)
            else:
                torch.addmm(b, rows, wt, out=scores)
            log_z, picked, sums = _exponentiate_chunk(scores, ts)
            joint = (picked - log_z).view(m, j) + log_prior[start:stop]  # log pi_j p_j(y)
            log_p = torch.logsumexp(joint, dim=1)
            total = total - (log_p * ks).sum()
            if not grads:
                continue
            resp = torch.exp(joint - log_p[:, None]) * ks[:, None]  # r_j, 0 when ignored
            if grad_p is not None:
                grad_p[start:stop] = -resp
            flat_resp = resp.reshape(m * j, 1)
            scores.mul_(flat_resp / sums)  # r_j softmax(s_j): 0 on ignored positions
            scores.scatter_add_(1, ts[:, None], -flat_resp)  # - r_j e_y
            if grad_v is not None:
                torch.mm(scores, w, out=grad_v[start:stop].view(m * j, d))
            if grad_w is not None:
                torch.addmm(grad_w, scores.t(), rows, out=grad_w)
            if grad_b is not None:
                grad_b.add_(scores.sum(0))
        _keep_gradients(ctx, (grad_v, grad_p, grad_w, grad_b))
        return total, weights.sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_total: Tensor, _grad_kept: Tensor):
        return _scaled_gradients(ctx, grad_total, inputs_without=5)


def fused_mixture_nll(vectors: Tensor, log_prior: Tensor, words: Tensor, bias: Tensor | None,
                      target: Tensor, ignore_index: int = -100, *,
                      chunk_bytes: int | None = None,
                      workspace: Workspace | None = None) -> Tensor:
    """Mean ``-log sum_j pi_j softmax(words k_j + bias)_y`` of a mixture of softmaxes.

    Shapes: vectors ``(n, J, d)``, log_prior ``(n, J)`` (normalised over ``J``), words
    ``(V, d)``, bias ``(V,)``, target ``(n,)``. Equal, with its gradients, to the mean of
    the per-position NLL of :func:`~drillbook.heads.mixing.mixture_log_prob`.
    """
    keep = target != ignore_index
    safe = target.masked_fill(~keep, 0)
    j = vectors.shape[1]
    chunk = chunk_rows(vectors.device, j * words.shape[0], vectors.dtype, chunk_bytes)
    total, kept = _FusedMixtureNLL.apply(vectors, log_prior, words, bias, safe, keep, chunk,
                                         workspace, torch.is_grad_enabled())
    return total / kept
