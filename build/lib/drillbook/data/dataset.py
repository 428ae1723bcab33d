"""A corpus as tensors: vocabulary plus one long stream of word ids per split.

>>> corpus = load_corpus("ptb")                       # doctest: +SKIP
>>> len(corpus.vocab), corpus.train.shape              # doctest: +SKIP
(10000, torch.Size([929589]))

:func:`load_corpus` finds a registered corpus with the location rule of
:mod:`drillbook.data.corpora`; :func:`load_corpus_from_files` reads any three files in the
same format (one tokenised sentence per line), e.g. the tiny samples the tests use. Each
split becomes a 1-d ``LongTensor`` of ids, lines concatenated, each ending in ``<eos>``;
:func:`drillbook.data.batchify` then cuts it into parallel streams.

A registered corpus is checked against the registry after loading (vocabulary size and
token count per split, then each file's sha256): if a file was swapped for a different
version, or a single word in it changed, loading fails loudly rather than producing
numbers that cannot be compared with the papers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from ..errors import DataError, MissingFileError
from .corpora import DATA_ENV, SPLITS, check_sha256, corpus_file, corpus_spec
from .vocab import Vocabulary, read_tokens

__all__ = ["Corpus", "load_corpus", "load_corpus_from_files"]


@dataclass(frozen=True, eq=False)
class Corpus:
    """A tokenised corpus.

    Attributes:
        name: the registry name, or the name given to :func:`load_corpus_from_files`.
        vocab: the :class:`Vocabulary` (ids by first appearance in train, valid, test;
            counts from train).
        train, valid, test: word ids, ``LongTensor (N_split,)``, one ``<eos>`` per line.
        paths: split -> the file each split was read from.
    """

    name: str
    vocab: Vocabulary
    train: Tensor
    valid: Tensor
    test: Tensor
    paths: Mapping[str, Path]

    def split(self, split: str) -> Tensor:
        """The ids of ``split`` (``"train"``, ``"valid"`` or ``"test"``)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        return getattr(self, split)

    def num_tokens(self) -> dict[str, int]:
        """split -> number of tokens (``<eos>`` included)."""
        return {s: int(self.split(s).numel()) for s in SPLITS}

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={n:,}" for s, n in self.num_tokens().items())
        return f"Corpus({self.name!r}, vocab={len(self.vocab):,}, {sizes})"


def load_corpus_from_files(
    paths: Mapping[str, str | os.PathLike],
    name: str = "custom",
) -> Corpus:
    """Read a corpus from three files in the PTB/WikiText format.

    Args:
        paths: ``{"train": ..., "valid": ..., "test": ...}``, all three required.
        name: a label for the corpus.

    Raises:
        ValueError: a split is missing or unknown, a file is empty, or a file is not
            valid UTF-8 (the message names the file and the byte offset).
        FileNotFoundError: a file does not exist.
    """
    keys = set(paths)
    if keys != set(SPLITS):
        raise ValueError(
            f"paths must give exactly the splits {', '.join(SPLITS)}; missing: "
            f"{sorted(set(SPLITS) - keys)}, unknown: {sorted(keys - set(SPLITS))}"
        )
    files = {s: Path(paths[s]).expanduser() for s in SPLITS}
    for split, path in files.items():
        if not path.is_file():
            raise MissingFileError(f"{split} file of corpus {name!r} not found: {path}")
    tokens = {s: read_tokens(files[s]) for s in SPLITS}
    vocab = Vocabulary.build(tokens["train"], tokens["valid"], tokens["test"])
    ids = {s: vocab.encode(tokens[s]) for s in SPLITS}
    return Corpus(name=name, vocab=vocab, paths=files, **ids)


def load_corpus(
    name: str,
    root: str | os.PathLike | None = None,
    download: bool = False,
    *,
    check: bool = True,
) -> Corpus:
    """Load a registered corpus (``"ptb"``, ``"wikitext-2"``) from the data root.

    Args:
        name: a key of :data:`drillbook.data.CORPORA`.
        root: data root; default ``$DRILLBOOK_DATA``, else the user cache folder
            (:func:`drillbook.data.data_root`).
        download: fetch missing files first (checksum-verified).
        check: compare the vocabulary size and per-split token counts, then each file's
            sha256 (:func:`~drillbook.data.check_sha256`), with the registry and raise
            if they differ. Turn off only for a deliberately modified copy;
            :func:`load_corpus_from_files` is the usual route for those.

    Raises:
        FileNotFoundError: a file is missing and ``download=False`` (the message says
            where it looked and how to get it).
        ValueError: unknown corpus, bad file (empty, not UTF-8), or, with ``check``, a
            corpus whose counts do not match the registry.
        ChecksumError: with ``check``, a file whose bytes differ from the published
            ones although the counts match (e.g. one word replaced by another).
    """
    spec = corpus_spec(name)
    paths = {s: corpus_file(name, s, root, download=download) for s in SPLITS}
    corpus = load_corpus_from_files(paths, name=spec.name)
    if check:
        found = {"vocabulary": len(corpus.vocab), **corpus.num_tokens()}
        expected = {"vocabulary": spec.vocab_size, **spec.tokens}
        wrong = {k: (found[k], v) for k, v in expected.items() if v is not None and found[k] != v}
        if wrong:
            detail = "; ".join(f"{k}: {f:,} (expected {e:,})" for k, (f, e) in wrong.items())
            folder = paths["train"].parent
            raise DataError(
                f"the {spec.name} files in {folder} are not the published corpus: {detail}. "
                f"Check them with drillbook.data.verify({spec.name!r}), replace them with "
                f"drillbook.data.download({spec.name!r}, force=True), or point ${DATA_ENV} "
                f"at a verified copy; pass check=False to load them anyway."
            )
        check_sha256(spec.name, paths)
    return corpus
