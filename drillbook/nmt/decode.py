"""Greedy and beam-search decoding for the translation models
(:class:`~drillbook.nmt.model.Seq2Seq`, :class:`~drillbook.nmt.transformer.TransformerSeq2Seq`).

A head that is a distribution over words (its class declares ``is_distribution``) picks
the most probable word (greedy) or keeps the ``K`` most probable prefixes (beam search).
A continuous (vMF) head has no distribution over words: greedy decoding then picks the
word whose embedding is nearest to the predicted vector by the distance its loss defines
(vMF paper Sec. 4.3; ``VMFHead.scores``): the highest vMF density for NLLvMF, which is also
the nearest by cosine (the normaliser ``C_m(||e||)`` does not depend on the word), cosine
for the cosine and max-margin losses, Euclidean distance for the squared error.

Both decoders run all sentences of a batch together; a finished hypothesis keeps its
score and emits padding. ``<pad>`` and ``<bos>`` can never be generated.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError
from .batching import make_batches
from .model import TranslationModel
from .vocab import NMTVocab

__all__ = ["beam_search", "greedy_decode", "strip_at_eos", "translate_pairs"]


def strip_at_eos(ids: list[int], eos: int) -> list[int]:
    """The tokens before the first ``eos``."""
    return ids[: ids.index(eos)] if eos in ids else ids


def _forbid(scores: Tensor, ids: tuple[int, ...]) -> Tensor:
    scores[..., list(ids)] = float("-inf")
    return scores


@torch.no_grad()
def greedy_decode(model: TranslationModel, src: Tensor, src_lengths: Tensor, *, bos: int,
                  eos: int, max_len: int = 80) -> list[list[int]]:
    """Greedy decoding of a batch ``src (S, B)``: one list of target ids per sentence
    (without ``<bos>``/``<eos>``)."""
    model.eval()
    state = model.encode(src, src_lengths)
    batch = src.shape[1]
    token = torch.full((1, batch), bos, dtype=torch.long, device=src.device)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    steps = []
    for _ in range(max_len):
        features, state = model.decode(token, state)
        scores = _forbid(model.next_token_scores(features[-1]), (model.pad_id, bos))
        nxt = scores.argmax(-1).masked_fill(done, model.pad_id)
        steps.append(nxt)
        done |= nxt == eos
        if bool(done.all()):
            break
        token = nxt[None]
    out = torch.stack(steps, dim=1).tolist()
    return [strip_at_eos([t for t in row if t != model.pad_id], eos) for row in out]


@torch.no_grad()
def beam_search(model: TranslationModel, src: Tensor, src_lengths: Tensor, *, bos: int,
                eos: int, beam: int = 5, max_len: int = 80, length_penalty: float = 0.0
                ) -> list[list[int]]:
    """Beam search, for a head that is a distribution over words.

    Keeps the ``beam`` highest-scoring prefixes (sum of log-probabilities) per sentence.
    A prefix that has emitted ``<eos>`` stays in the beam with its score frozen. The
    final choice divides scores by ``length ** length_penalty`` (0: plain sum). With
    ``beam=1`` this is exactly :func:`greedy_decode`.

    Raises:
        ConfigError: a continuous (vMF) head, which has no distribution to search; a
            ``beam`` below 1.
    """
    if model.is_continuous:
        raise ConfigError(f"beam search needs a distribution over words; the "
                          f"{model.head.kind!r} head predicts vectors and decodes greedily "
                          f"by nearest neighbour: use beam 1 (greedy_decode)")
    if beam < 1:
        raise ConfigError(f"beam must be >= 1, got {beam}")
    model.eval()
    batch, k = src.shape[1], beam
    device = src.device
    state = model.encode(src, src_lengths).index_select(
        torch.arange(batch, device=device).repeat_interleave(k))
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live hypothesis to start with
    seqs = torch.full((batch * k, 0), model.pad_id, dtype=torch.long, device=device)
    lengths = torch.zeros(batch * k, device=device)
    finished = torch.zeros(batch * k, dtype=torch.bool, device=device)
    token = torch.full((1, batch * k), bos, dtype=torch.long, device=device)
    for _ in range(max_len):
        features, state = model.decode(token, state)
        logp = _forbid(model.next_token_scores(features[-1]).float(), (model.pad_id, bos))
        # a finished hypothesis can only continue with padding, at no cost
        logp[finished] = float("-inf")
        logp[finished, model.pad_id] = 0.0
        vocab = logp.shape[-1]
        cand = (scores.reshape(-1, 1) + logp).reshape(batch, k * vocab)
        scores, flat = cand.topk(k, dim=-1)  # (B, K)
        origin = (flat // vocab + torch.arange(batch, device=device)[:, None] * k).reshape(-1)
        nxt = (flat % vocab).reshape(-1)
        state = state.index_select(origin)
        seqs = torch.cat([seqs[origin], nxt[:, None]], dim=1)
        was_done = finished[origin]
        lengths = lengths[origin] + (~was_done).float()
        finished = was_done | (nxt == eos)
        if bool(finished.all()):
            break
        token = nxt[None]
    final = scores.reshape(-1) / lengths.clamp_min(1.0) ** length_penalty
    best = final.reshape(batch, k).argmax(-1) + torch.arange(batch, device=device) * k
    out = seqs[best].tolist()
    return [strip_at_eos([t for t in row if t != model.pad_id], eos) for row in out]


@torch.no_grad()
def translate_pairs(model: TranslationModel, pairs, src_vocab: NMTVocab,
                    tgt_vocab: NMTVocab, *, beam: int = 1, max_len: int = 60, batch_size: int = 64,
                    device: torch.device | str = "cpu") -> list[list[str]]:
    """Translate the source side of ``pairs``, in order (a target side may be empty)."""
    pairs = [(src, tgt or ["."]) for src, tgt in pairs]
    out: list[list[str]] = [[] for _ in pairs]
    decode = dict(bos=tgt_vocab.bos_id, eos=tgt_vocab.eos_id, max_len=max_len)
    for batch in make_batches(pairs, src_vocab, tgt_vocab, batch_size=batch_size,
                              shuffle=False):
        src, lengths = batch.src.to(device), batch.src_lengths.to(device)
        ids = (greedy_decode(model, src, lengths, **decode) if beam == 1
               else beam_search(model, src, lengths, beam=beam, **decode))
        for i, hyp in zip(batch.pair_ids.tolist(), ids, strict=True):
            out[i] = tgt_vocab.decode(hyp)
    return out
