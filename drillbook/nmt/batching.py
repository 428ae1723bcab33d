"""Length-bucketed, padded batches of sentence pairs, time-major, from a private generator:
the same seed gives the same batches (:func:`make_batches`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from ..validation import POSITIVE_INT
from .corpus import Pair
from .vocab import NMTVocab

__all__ = ["TranslationBatch", "make_batches", "padding_fraction"]

class TranslationBatch(NamedTuple):
    """One batch of sentence pairs, time-major, padded with ``<pad>`` (id 0).

    Attributes:
        src: source ids ``(S, B)``, ``S`` the longest source in the batch; no
            ``<bos>``/``<eos>``. Columns are in order of decreasing source length.
        src_lengths: source lengths ``(B,)`` (CPU, as ``pack_padded_sequence`` wants).
        tgt_in: decoder inputs ``(T, B)``: ``<bos>`` then the target ids.
        tgt_out: decoder targets ``(T, B)``: the target ids then ``<eos>``.
        tgt_lengths: real positions of ``tgt_in``/``tgt_out`` per column ``(B,)``
            (target length + 1).
        pair_ids: ``(B,)`` position of each column's pair in the list given to
            :func:`make_batches` (to put outputs back in corpus order).
    """

    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    tgt_lengths: Tensor
    pair_ids: Tensor

    @property
    def batch_size(self) -> int:
        return self.src.shape[1]

    @property
    def src_mask(self) -> Tensor:
        """``(S, B)`` bool, True at real source tokens."""
        steps = torch.arange(self.src.shape[0], device=self.src.device)
        return steps[:, None] < self.src_lengths.to(self.src.device)[None, :]

    @property
    def tgt_mask(self) -> Tensor:
        """``(T, B)`` bool, True at real ``tgt_in``/``tgt_out`` positions."""
        steps = torch.arange(self.tgt_out.shape[0], device=self.tgt_out.device)
        return steps[:, None] < self.tgt_lengths.to(self.tgt_out.device)[None, :]

    @property
    def num_tgt_tokens(self) -> int:
        """Number of real target positions (words + one ``<eos>`` each)."""
        return int(self.tgt_lengths.sum())

    def to(self, device: torch.device | str) -> TranslationBatch:
        """The id tensors on ``device``; lengths and ``pair_ids`` stay on the CPU."""
        return self._replace(src=self.src.to(device), tgt_in=self.tgt_in.to(device),
                             tgt_out=self.tgt_out.to(device))


def _pad(columns: list[list[int]], pad: int) -> Tensor:
    """``(max_len, B)`` tensor with column ``b`` = ``columns[b]``, padded with ``pad``."""
    length = max(len(c) for c in columns)
    rows = [c + [pad] * (length - len(c)) for c in columns]
    return torch.tensor(rows, dtype=torch.long).t().contiguous()


def make_batches(
    pairs: Sequence[Pair],
    src_vocab: NMTVocab,
    tgt_vocab: NMTVocab,
    *,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    sort_within: int | None = 100,
) -> list[TranslationBatch]:
    """Cut sentence pairs into padded batches of similar source length.

    1. ``shuffle``: the pairs are put in a random order (``torch.randperm`` with a
       private generator seeded with ``seed``); otherwise they keep corpus order.
    2. Pools of ``sort_within * batch_size`` consecutive pairs are each sorted by source
       length, then target length (longest first; ties keep the step-1 order), and cut
       into batches of ``batch_size`` (only one batch, the end of the last pool, may be
       smaller).
    3. ``shuffle``: the batch order is shuffled with the same generator.

    Pass ``seed=epoch`` (or ``base_seed + epoch``) for new batches every epoch. Larger
    pools pad less but vary less between epochs; ``sort_within=None`` does no sorting
    (plain random batches, the baseline :func:`padding_fraction` compares with);
    ``sort_within=len(pairs)`` sorts everything (e.g. for fast evaluation, with
    :attr:`TranslationBatch.pair_ids` to restore the corpus order).

    Args:
        pairs: ``[(src_tokens, tgt_tokens), ...]``, every sentence non-empty.
        src_vocab, tgt_vocab: unknown words become ``<unk>``.
        batch_size: pairs per batch, ``>= 1``.
        shuffle: randomise (training) or not (evaluation).
        seed: seed of the private generator; the global random state is not used.
        sort_within: pool size in batches (``>= 1``), or ``None`` for no sorting.

    Returns:
        :class:`TranslationBatch` list; every pair appears in exactly one batch.

    Raises:
        ValueError: ``batch_size < 1``, ``sort_within < 1``, no pairs, or an empty
            sentence (the message gives the pair's position).
    """
    batch_size = POSITIVE_INT.check(batch_size, "batch_size")
    sort_within = POSITIVE_INT.saying("a number of batches per sorting pool").or_none(
        "no sorting").check(sort_within, "sort_within")
    if len(pairs) == 0:
        raise ValueError("make_batches got no sentence pairs; pass a non-empty split")
    src_ids, tgt_ids = _pair_ids(pairs, src_vocab, tgt_vocab)
    groups = _groups(src_ids, tgt_ids, batch_size=int(batch_size), shuffle=shuffle,
                     seed=seed, sort_within=sort_within)
    return [_batch(group, src_ids, tgt_ids, src_vocab, tgt_vocab) for group in groups]


def _pair_ids(pairs: Sequence[Pair], src_vocab: NMTVocab, tgt_vocab: NMTVocab
              ) -> tuple[list[list[int]], list[list[int]]]:
    """The source and the target ids of every pair.

    Raises:
        ValueError: a sentence is empty (the message gives the pair's position).
    """
    src_ids = [src_vocab.ids(s) for s, _ in pairs]
    tgt_ids = [tgt_vocab.ids(t) for _, t in pairs]
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        if not s or not t:
            side = "source" if not s else "target"
            raise ValueError(
                f"pair {i} has an empty {side} sentence; every sentence needs at least one "
                f"token (drop the pair, or read the files with read_parallel_files, which "
                f"reports the line)"
            )
    return src_ids, tgt_ids


def _groups(src_ids: list[list[int]], tgt_ids: list[list[int]], *, batch_size: int,
            shuffle: bool, seed: int, sort_within: int | None) -> list[list[int]]:
    """The pairs' positions cut into batches (steps 1 to 3 of :func:`make_batches`)."""
    n = len(src_ids)
    gen = torch.Generator().manual_seed(int(seed))
    order = torch.randperm(n, generator=gen).tolist() if shuffle else list(range(n))
    groups: list[list[int]] = []
    pool = n if sort_within is None else int(sort_within) * batch_size
    for start in range(0, n, pool):
        chunk = order[start: start + pool]
        if sort_within is not None:
            chunk.sort(key=lambda i: (-len(src_ids[i]), -len(tgt_ids[i])))  # stable
        groups += [chunk[j: j + batch_size] for j in range(0, len(chunk), batch_size)]
    if shuffle:
        groups = [groups[k] for k in torch.randperm(len(groups), generator=gen).tolist()]
    return groups


def _batch(group: list[int], src_ids: list[list[int]], tgt_ids: list[list[int]],
           src_vocab: NMTVocab, tgt_vocab: NMTVocab) -> TranslationBatch:
    """The padded batch of the pairs at positions ``group``, longest source first."""
    bos, eos, pad = tgt_vocab.bos_id, tgt_vocab.eos_id, tgt_vocab.pad_id
    group = sorted(group, key=lambda i: -len(src_ids[i]))  # stable: longest first
    return TranslationBatch(
        src=_pad([src_ids[i] for i in group], src_vocab.pad_id),
        src_lengths=torch.tensor([len(src_ids[i]) for i in group], dtype=torch.long),
        tgt_in=_pad([[bos, *tgt_ids[i]] for i in group], pad),
        tgt_out=_pad([[*tgt_ids[i], eos] for i in group], pad),
        tgt_lengths=torch.tensor([len(tgt_ids[i]) + 1 for i in group], dtype=torch.long),
        pair_ids=torch.tensor(group, dtype=torch.long),
    )


def padding_fraction(batches: Iterable[TranslationBatch]) -> float:
    """Fraction of the cells of all ``src`` and ``tgt_out`` tensors that are padding.

    0 means no padding at all. On Multi30k's training split with ``batch_size=64``,
    random batches (``sort_within=None``) are about 49% padding, the default pools of
    100 batches about 7%, and sorting the whole split about 3%.
    """
    pads = cells = 0
    for b in batches:
        cells += b.src.numel() + b.tgt_out.numel()
        pads += (b.src.numel() - int(b.src_lengths.sum())
                 + b.tgt_out.numel() - int(b.tgt_lengths.sum()))
    if cells == 0:
        raise ValueError("padding_fraction got no batches")
    return pads / cells
