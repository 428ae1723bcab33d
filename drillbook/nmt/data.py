"""Parallel data for translation: Multi30k sentence pairs, vocabularies, length-bucketed batches.

The translation chapters train on **Multi30k** task 1 (Elliott et al., 2016): English image
captions with German and French translations. The registry entry ``"multi30k"`` of
:data:`drillbook.data.CORPORA` knows its files and checksums (one file per split *and*
language, keyed ``"<split>.<lang>"``); this module turns them into sentence pairs::

    corpus = load_parallel("de", "en")                 # $DRILLBOOK_DATA or ~/.cache/drillbook
    src_vocab, tgt_vocab = corpus.build_vocabs(min_freq=2)
    for batch in make_batches(corpus.train, src_vocab, tgt_vocab, batch_size=64,
                              shuffle=True, seed=epoch):
        batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out   # (S, B) (B,) (T, B) (T, B)

**Text.** The files read are the release's own lowercased, normalised, Moses-tokenized
text (``tok/*.lc.norm.tok.{en,de,fr}``); a sentence is ``line.split()``. Moses escapes
``'``, ``"``, ``&`` (and ``<``, ``>``, ``[``, ``]``, ``|``) as XML entities, so the
files say ``man &apos;s`` and ``&quot;``. By default (``unescape=True``) those entities
are turned back into the characters: pretrained word vectors (GloVe has ``'s``, not
``&apos;s``) then cover these very frequent tokens, and printed translations read
normally. The mapping is one-to-one on tokens, so BLEU on the tokens is unchanged.

**Splits.** ``train`` (29,000 pairs), ``valid`` (the release's ``val``, 1,014) and
``test`` (``test_2016_flickr``, 1,000, the test set the papers report), plus
:attr:`ParallelCorpus.extra_tests`: ``test_2017_flickr`` (1,000), ``test_2017_mscoco``
(461) and ``test_2018_flickr`` (1,071).

**Vocabulary.** :class:`NMTVocab` reserves ``<pad>`` = 0, ``<unk>`` = 1, ``<bos>`` = 2,
``<eos>`` = 3, then lists the training words by decreasing frequency (ties
alphabetically), so ids are deterministic and a ``max_size`` cut keeps the most
frequent words.

**Batches.** :func:`make_batches` groups sentences of similar source length so that
little of each ``(S, B)`` tensor is padding: pairs are (optionally) shuffled, cut into
pools of ``sort_within * batch_size`` pairs, each pool is sorted by length and cut into
batches, and the batch order is shuffled, all with a private ``torch.Generator`` (never
the global random state): the same seed gives the same batches.
"""

from __future__ import annotations

import gzip
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import torch
from torch import Tensor

from ..data import DATA_ENV, Vocabulary, check_sha256, corpus_file, corpus_spec, read_lines
from ..errors import ConfigError, DataError, MissingFileError
from ..validation import POSITIVE_INT

__all__ = [
    "BOS",
    "EOS",
    "EXTRA_TESTS",
    "MULTI30K_SIZES",
    "PAD",
    "PAIRS",
    "SPECIALS",
    "UNK",
    "NMTVocab",
    "Pair",
    "ParallelCorpus",
    "TranslationBatch",
    "load_parallel",
    "load_parallel_from_files",
    "load_raw_sentences",
    "make_batches",
    "moses_unescape",
    "padding_fraction",
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

#: Special tokens and their fixed ids.
PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
#: The special tokens in id order, the first words of every :class:`NMTVocab`.
SPECIALS: tuple[str, ...] = (PAD, UNK, BOS, EOS)

#: One sentence pair: source tokens, target tokens.
Pair = tuple[list[str], list[str]]


# ------------------------------------------------------------------------ reading
# Moses' escape-special-chars.perl writes these; one regex pass undoes them (so that
# "&amp;apos;" correctly becomes the literal text "&apos;").
_MOSES_ENTITIES: Mapping[str, str] = MappingProxyType({
    "&amp;": "&", "&apos;": "'", "&quot;": '"', "&lt;": "<", "&gt;": ">", "&#91;": "[",
    "&#93;": "]", "&#124;": "|"})
_MOSES_RE = re.compile("|".join(re.escape(e) for e in _MOSES_ENTITIES))


def moses_unescape(text: str) -> str:
    """Undo Moses' XML escaping: ``"man &apos;s"`` -> ``"man 's"``."""
    return _MOSES_RE.sub(lambda m: _MOSES_ENTITIES[m.group(0)], text)


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


# ------------------------------------------------------------------------ corpus
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


# ------------------------------------------------------------------------ vocabulary
class NMTVocab:
    """Word <-> id map for one side of a translation corpus, with four reserved ids.

    ``<pad>`` = 0, ``<unk>`` = 1, ``<bos>`` = 2, ``<eos>`` = 3, then the words. Build one
    from training sentences with :meth:`build`; store it in a checkpoint with
    :meth:`state_dict` (plain lists, safe for ``torch.load(..., weights_only=True)``).

    Args:
        words: all entries by id, starting with :data:`SPECIALS`; no duplicates.
        counts: per-id training frequency (sequence or 1-d integer tensor), default zeros.

    Special strings found in the text itself (a literal ``<unk>`` token) are not counted
    as words and encode to their reserved ids.
    """

    pad_id, unk_id, bos_id, eos_id = 0, 1, 2, 3

    def __init__(self, words: Iterable[str], counts: Sequence[int] | Tensor | None = None):
        self._vocab = Vocabulary(words, counts)  # checks duplicates and the counts' shape
        head = tuple(self._vocab.words[: len(SPECIALS)])
        if head != SPECIALS:
            raise ValueError(
                f"an NMT vocabulary starts with the specials {list(SPECIALS)} (ids 0-3); got "
                f"{list(head)}. Build one with NMTVocab.build(sentences)."
            )
        self._index = {w: i for i, w in enumerate(self._vocab.words)}

    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        *,
        min_freq: int = 1,
        max_size: int | None = None,
    ) -> NMTVocab:
        """Vocabulary of the words in ``sentences`` (token lists), most frequent first.

        Args:
            sentences: the training sentences of one side.
            min_freq: keep words seen at least this often (``>= 1``).
            max_size: at most this many entries *including* the four specials (so a
                model's output size is at most ``max_size``); ``None``: no limit.

        Words are ordered by decreasing frequency, ties alphabetically (deterministic).
        :attr:`counts` holds the training frequencies (0 for the specials).

        Raises:
            ValueError: ``min_freq < 1`` or ``max_size < 4``.
        """
        if int(min_freq) != min_freq or min_freq < 1:
            raise ValueError(f"min_freq must be an integer >= 1, got {min_freq!r}")
        if max_size is not None and (int(max_size) != max_size or max_size < len(SPECIALS)):
            raise ValueError(
                f"max_size counts the {len(SPECIALS)} specials too, so it must be an integer "
                f">= {len(SPECIALS)} (or None for no limit), got {max_size!r}"
            )
        counter: Counter[str] = Counter()
        for tokens in sentences:
            counter.update(tokens)
        for special in SPECIALS:
            counter.pop(special, None)
        ranked = sorted((item for item in counter.items() if item[1] >= min_freq),
                        key=lambda wc: (-wc[1], wc[0]))
        if max_size is not None:
            ranked = ranked[: max_size - len(SPECIALS)]
        return cls([*SPECIALS, *(w for w, _ in ranked)],
                   [0] * len(SPECIALS) + [c for _, c in ranked])

    # ------------------------------------------------------------------- lookups
    @property
    def words(self) -> list[str]:
        """All entries by id, specials first (a copy)."""
        return self._vocab.words

    @property
    def counts(self) -> Tensor:
        """Training frequency of each id, ``LongTensor (V,)``; 0 for the specials."""
        return self._vocab.counts

    def __len__(self) -> int:
        return len(self._vocab)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    def __iter__(self):
        return iter(self._vocab)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NMTVocab):
            return NotImplemented
        return self._vocab == other._vocab

    def __repr__(self) -> str:
        head = ", ".join(repr(w) for w in self.words[len(SPECIALS): len(SPECIALS) + 5])
        more = ", ..." if len(self) > len(SPECIALS) + 5 else ""
        return f"NMTVocab({len(self)} entries incl. 4 specials: {head}{more})"

    def index(self, word: str) -> int:
        """The id of ``word``; :class:`KeyError` if it is not in the vocabulary."""
        try:
            return self._index[word]
        except KeyError:
            raise KeyError(
                f"word {word!r} is not in the vocabulary ({len(self)} entries); encode() "
                f"maps unknown words to {UNK!r} (id {self.unk_id})"
            ) from None

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """Ids of ``tokens`` as a list; unknown words get ``unk_id``."""
        index, unk = self._index, self.unk_id
        return [index.get(t, unk) for t in tokens]

    def encode(self, tokens: Iterable[str], add_bos: bool = False,
               add_eos: bool = False) -> Tensor:
        """Ids of ``tokens``, ``LongTensor (n,)`` (``n + add_bos + add_eos`` long).

        Unknown words get ``<unk>``'s id; ``add_bos``/``add_eos`` put ``<bos>`` in front
        and ``<eos>`` at the end.
        """
        ids = self.ids(tokens)
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, ids: Tensor | Iterable[int], strip_specials: bool = True) -> list[str]:
        """Words of a 1-d sequence of ids.

        Args:
            ids: a 1-d tensor or any iterable of ints (decode a ``(T, B)`` batch column
                by column: ``vocab.decode(batch.tgt_out[:, b])``).
            strip_specials: stop at the first ``<eos>`` and drop ``<pad>`` and ``<bos>``
                (``<unk>`` is kept: it stands for a word). ``False``: every id's entry,
                nothing dropped.

        Raises:
            ValueError: ``ids`` is not 1-d, or holds an id outside ``[0, V)``.
        """
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"decode takes a 1-d sequence of ids, got shape {tuple(ids.shape)}; for "
                    f"a (T, B) batch decode each column: vocab.decode(ids[:, b])"
                )
            ids = ids.tolist()
        words = self._vocab.decode(ids)  # range-checks every id
        if not strip_specials:
            return words
        out = []
        for w in words:
            if w == EOS:
                break
            if w not in (PAD, BOS):
                out.append(w)
        return out

    # --------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, list]:
        """``{"words": [...], "counts": [...]}``: plain lists of str and int.

        Safe inside a checkpoint read back with ``torch.load(..., weights_only=True)``.
        """
        return self._vocab.state_dict()

    @classmethod
    def from_state_dict(cls, state: dict) -> NMTVocab:
        """Inverse of :meth:`state_dict`."""
        if not isinstance(state, dict) or "words" not in state:
            raise ValueError(
                "not a vocabulary state: expected a dict with 'words' and 'counts' as "
                "written by NMTVocab.state_dict()"
            )
        return cls(state["words"], state.get("counts"))


# ------------------------------------------------------------------------ batching
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

    n, batch_size = len(pairs), int(batch_size)
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

    batches = []
    bos, eos, pad = tgt_vocab.bos_id, tgt_vocab.eos_id, tgt_vocab.pad_id
    for group in groups:
        group = sorted(group, key=lambda i: -len(src_ids[i]))  # stable: longest first
        batches.append(TranslationBatch(
            src=_pad([src_ids[i] for i in group], src_vocab.pad_id),
            src_lengths=torch.tensor([len(src_ids[i]) for i in group], dtype=torch.long),
            tgt_in=_pad([[bos, *tgt_ids[i]] for i in group], pad),
            tgt_out=_pad([[*tgt_ids[i], eos] for i in group], pad),
            tgt_lengths=torch.tensor([len(tgt_ids[i]) + 1 for i in group], dtype=torch.long),
            pair_ids=torch.tensor(group, dtype=torch.long),
        ))
    return batches


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
