"""Multi30k sentence pairs: reading line-aligned files, the corpus and its splits.

The translation chapters train on **Multi30k** task 1 (Elliott et al., 2016): English image
captions with German and French translations. The registry entry ``"multi30k"`` of
:data:`drillbook.data.CORPORA` knows its files and checksums (one file per split *and*
language, keyed ``"<split>.<lang>"``); :func:`load_parallel` turns them into sentence pairs
of the release's lowercased, normalised, Moses-tokenized text (``tok/*.lc.norm.tok.*``;
a sentence is ``line.split()``, Moses' XML escapes undone by
:func:`~drillbook.nmt.text.moses_unescape`). ``train`` has 29,000 pairs, ``valid`` (the
release's ``val``) 1,014 and ``test`` (``test_2016_flickr``, the papers' test set) 1,000;
:attr:`ParallelCorpus.extra_tests` holds the later test sets.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from ..data import DATA_ENV, check_sha256, corpus_file, corpus_spec, read_lines
from ..errors import ConfigError, DataError, MissingFileError
from .text import moses_unescape
from .vocab import NMTVocab

__all__ = [
    "EXTRA_TESTS",
    "MULTI30K_SIZES",
    "PAIRS",
    "Pair",
    "ParallelCorpus",
    "load_parallel",
    "load_parallel_from_files",
    "load_raw_sentences",
    "read_parallel_files",
]

#: The registry entry the translation data comes from.
CORPUS = "multi30k"
#: The registry entry of the same sentences untokenised and cased (the BLEU references).
RAW_CORPUS = "multi30k-raw"

#: Supported (source, target) language pairs.
PAIRS: tuple[tuple[str, str], ...] = (("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en"))

#: Our split name -> the release's file stem.
_MAIN_SPLITS: Mapping[str, str] = MappingProxyType(
    {"train": "train", "valid": "val", "test": "test_2016_flickr"})

#: The further test sets, in :attr:`ParallelCorpus.extra_tests` when both languages have them.
EXTRA_TESTS: tuple[str, ...] = ("test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")

#: Sentence pairs per split of the published release (checked by :func:`load_parallel`).
MULTI30K_SIZES: Mapping[str, int] = MappingProxyType({
    "train": 29_000, "valid": 1_014, "test": 1_000,
    "test_2017_flickr": 1_000, "test_2017_mscoco": 461, "test_2018_flickr": 1_071,
})

#: One sentence pair: source tokens, target tokens.
Pair = tuple[list[str], list[str]]



def _read_sentences(path: Path, unescape: bool) -> list[list[str]]:
    """Token lists of a file, one per line; an empty line is an error."""
    sentences = []
    for line_no, line in enumerate(read_lines(path), start=1):
        tokens = (moses_unescape(line) if unescape else line).split()
        if not tokens:
            raise DataError(
                f"{path}, line {line_no}: empty sentence (no tokens). A parallel corpus has "
                f"one sentence per line on both sides; remove the line from both files, or "
                f"re-download the corpus if it is a published one."
            )
        sentences.append(tokens)
    return sentences


def read_parallel_files(
    src_path: str | os.PathLike,
    tgt_path: str | os.PathLike,
    *,
    unescape: bool = True,
) -> list[Pair]:
    """Sentence pairs from two line-aligned files (line ``i`` of one translates line ``i``).

    Args:
        src_path, tgt_path: UTF-8 text, one tokenized sentence per line.
        unescape: undo Moses' XML escapes (:func:`moses_unescape`) before splitting.

    Returns:
        ``[(src_tokens, tgt_tokens), ...]`` in file order.

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: the files have different numbers of lines (the message names both
            files and counts), a line has no tokens (file and line number), or a file is
            empty or not UTF-8.
    """
    src_path, tgt_path = Path(src_path).expanduser(), Path(tgt_path).expanduser()
    for path in (src_path, tgt_path):
        if not path.is_file():
            raise MissingFileError(f"parallel corpus file not found: {path}")
    src = _read_sentences(src_path, unescape)
    tgt = _read_sentences(tgt_path, unescape)
    if len(src) != len(tgt):
        raise DataError(
            f"the two sides of a parallel corpus must have one line per sentence pair, but "
            f"{src_path} has {len(src):,} lines and {tgt_path} has {len(tgt):,}. Use the "
            f"files of the same split, or re-download them (drillbook.data.download)."
        )
    return list(zip(src, tgt, strict=True))


@dataclass(frozen=True, eq=False)
class ParallelCorpus:
    """A translation corpus: sentence pairs per split.

    Attributes:
        src_lang, tgt_lang: language codes, e.g. ``"de"``, ``"en"``.
        train, valid, test: ``[(src_tokens, tgt_tokens), ...]``.
        extra_tests: further test sets by name (for Multi30k ``test_2017_flickr``,
            ``test_2017_mscoco``, ``test_2018_flickr``); may be empty.
        paths: split name -> ``(source file, target file)`` it was read from.
        name: a label (the registry name for :func:`load_parallel`).
    """

    src_lang: str
    tgt_lang: str
    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    extra_tests: Mapping[str, list[Pair]]
    paths: Mapping[str, tuple[Path, Path]]
    name: str = "custom"

    @property
    def splits(self) -> tuple[str, ...]:
        """All split names: ``train``, ``valid``, ``test``, then the extra tests."""
        return ("train", "valid", "test", *self.extra_tests)

    def split(self, name: str) -> list[Pair]:
        """The pairs of split ``name`` (a main split or an extra test set)."""
        if name in ("train", "valid", "test"):
            return getattr(self, name)
        if name in self.extra_tests:
            return self.extra_tests[name]
        raise ValueError(f"unknown split {name!r}; valid splits: {', '.join(self.splits)}")

    def sizes(self) -> dict[str, int]:
        """split -> number of sentence pairs."""
        return {s: len(self.split(s)) for s in self.splits}

    def build_vocabs(
        self, *, min_freq: int = 1, max_size: int | None = None
    ) -> tuple[NMTVocab, NMTVocab]:
        """Source and target :class:`NMTVocab` of the training split (:meth:`NMTVocab.build`)."""
        return (NMTVocab.build((s for s, _ in self.train), min_freq=min_freq, max_size=max_size),
                NMTVocab.build((t for _, t in self.train), min_freq=min_freq, max_size=max_size))

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={n:,}" for s, n in self.sizes().items())
        return f"ParallelCorpus({self.name!r}, {self.src_lang}->{self.tgt_lang}, {sizes})"


def _check_pair(src_lang: str, tgt_lang: str) -> None:
    if (src_lang, tgt_lang) not in PAIRS:
        valid = ", ".join(f"{s}->{t}" for s, t in PAIRS)
        raise ConfigError(
            f"unsupported language pair {src_lang!r} -> {tgt_lang!r}; valid pairs: {valid}"
        )


def load_parallel(
    src: str,
    tgt: str,
    root: str | os.PathLike | None = None,
    download: bool = False,
    *,
    unescape: bool = True,
    check: bool = True,
) -> ParallelCorpus:
    """Multi30k sentence pairs for the language pair ``src -> tgt``.

    Args:
        src, tgt: a pair in :data:`PAIRS` (``"en"``/``"de"``/``"fr"`` with English on
            one side).
        root: data root; default ``$DRILLBOOK_DATA``, else the user cache folder (see
            :func:`drillbook.data.data_root`). Files are ``<root>/multi30k/tok/...``.
        download: fetch missing files first (checksum-verified, the whole corpus).
        unescape: undo Moses' XML escapes (``&apos;`` -> ``'``; see the module notes).
        check: compare every file's sha256 with the registry and every split's number of
            pairs with :data:`MULTI30K_SIZES`.

    Returns:
        a :class:`ParallelCorpus` with ``train``, ``valid`` (``val``), ``test``
        (``test_2016_flickr``) and the ``extra_tests`` both languages have.

    Raises:
        ValueError: unsupported pair (the message lists the valid ones), misaligned or
            malformed files, or (with ``check``) split sizes that differ from the release.
        FileNotFoundError: a file is missing and ``download=False`` (the message says
            where it looked and how to get it).
    """
    _check_pair(src, tgt)
    spec = corpus_spec(CORPUS)
    wanted = dict(_MAIN_SPLITS)
    wanted.update({t: t for t in EXTRA_TESTS
                   if f"{t}.{src}" in spec.files and f"{t}.{tgt}" in spec.files})
    paths = {
        split: (corpus_file(CORPUS, f"{stem}.{src}", root, download=download),
                corpus_file(CORPUS, f"{stem}.{tgt}", root, download=download))
        for split, stem in wanted.items()
    }
    if check:  # the bytes first: a changed word keeps the counts but not the sha256
        check_sha256(CORPUS, {f"{stem}.{lang}": path for split, stem in wanted.items()
                              for lang, path in zip((src, tgt), paths[split], strict=True)})
    corpus = load_parallel_from_files(paths, src, tgt, unescape=unescape, name=CORPUS)
    if check:
        wrong = {s: (n, MULTI30K_SIZES[s]) for s, n in corpus.sizes().items()
                 if n != MULTI30K_SIZES[s]}
        if wrong:
            detail = "; ".join(f"{s}: {n:,} pairs (expected {e:,})" for s, (n, e) in wrong.items())
            raise DataError(
                f"the Multi30k files under {paths['train'][0].parent} are not the published "
                f"release: {detail}. Check them with drillbook.data.verify({CORPUS!r}), "
                f"replace them with drillbook.data.download({CORPUS!r}, force=True), or "
                f"point ${DATA_ENV} at a verified copy; pass check=False to load them anyway."
            )
    return corpus


def load_raw_sentences(
    split: str,
    lang: str,
    root: str | os.PathLike | None = None,
    download: bool = False,
    *,
    check: bool = True,
) -> list[str]:
    """The untokenised, cased Multi30k sentences of one split and language, in corpus order.

    Line ``i`` is the original of line ``i`` of the tokenised split that
    :func:`load_parallel` reads (the release's ``raw/<stem>.<lang>.gz``): these are the
    references of the reported, detokenised BLEU (:func:`drillbook.nmt.bleu.multi30k_bleu`).
    Lines are returned as they are in the file (a few French ones start with a space).

    Args:
        split: ``"train"``, ``"valid"``, ``"test"`` or an extra test set
            (:data:`EXTRA_TESTS`).
        lang: ``"en"``, ``"de"`` or ``"fr"``.
        root, download: as for :func:`load_parallel` (the raw files are the registry
            entry ``"multi30k-raw"``, under ``<root>/multi30k/raw/``).
        check: compare the file's sha256 with the registry and its number of lines with
            :data:`MULTI30K_SIZES`.

    Raises:
        DataError: unknown split or language (the message lists the valid ones), or
            (with ``check``) a file that is not the published one.
        MissingFileError: the file is missing and ``download=False``.
    """
    stem = _MAIN_SPLITS.get(split, split if split in EXTRA_TESTS else None)
    if stem is None:
        raise DataError(f"unknown Multi30k split {split!r}; valid splits: "
                        f"{', '.join([*_MAIN_SPLITS, *EXTRA_TESTS])}")
    languages = corpus_spec(RAW_CORPUS).languages
    if lang not in languages:
        raise DataError(f"Multi30k has no language {lang!r}; valid: {', '.join(languages)}")
    path = corpus_file(RAW_CORPUS, f"{stem}.{lang}", root, download=download)
    if check:
        check_sha256(RAW_CORPUS, {f"{stem}.{lang}": path})
    text = gzip.decompress(path.read_bytes()).decode("utf-8")
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":  # the final newline ends the last line
        lines.pop()
    if check and len(lines) != MULTI30K_SIZES[split]:
        raise DataError(f"{path} has {len(lines):,} lines, expected {MULTI30K_SIZES[split]:,}; "
                        f"replace it with drillbook.data.download({RAW_CORPUS!r}, force=True)")
    return lines


def load_parallel_from_files(
    paths: Mapping[str, tuple[str | os.PathLike, str | os.PathLike]],
    src_lang: str = "src",
    tgt_lang: str = "tgt",
    *,
    unescape: bool = True,
    name: str = "custom",
) -> ParallelCorpus:
    """A :class:`ParallelCorpus` from any line-aligned files (e.g. the tests' tiny samples).

    Args:
        paths: split -> ``(source file, target file)``; ``"train"``, ``"valid"`` and
            ``"test"`` are required, any other key becomes an extra test set.
        src_lang, tgt_lang: labels for the two sides (not checked against :data:`PAIRS`).
        unescape: see :func:`read_parallel_files`.
        name: a label for the corpus.

    Raises:
        ValueError: a main split is missing, or a file is malformed (see
            :func:`read_parallel_files`).
    """
    missing = [s for s in _MAIN_SPLITS if s not in paths]
    if missing:
        raise ValueError(
            f"paths must give at least the splits train, valid, test; missing: {missing}"
        )
    files = {s: (Path(a).expanduser(), Path(b).expanduser()) for s, (a, b) in paths.items()}
    data = {s: read_parallel_files(a, b, unescape=unescape) for s, (a, b) in files.items()}
    extra = {s: pairs for s, pairs in data.items() if s not in _MAIN_SPLITS}
    return ParallelCorpus(src_lang=src_lang, tgt_lang=tgt_lang, train=data["train"],
                          valid=data["valid"], test=data["test"], extra_tests=extra,
                          paths=files, name=name)
