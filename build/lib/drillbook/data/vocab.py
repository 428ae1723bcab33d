"""Tokenisation and the word vocabulary, exactly as the AWD-LSTM / DRILL code does it.

The corpora come already tokenised, one sentence (PTB) or paragraph (WikiText) per line,
with rare words replaced by ``<unk>``. The papers' code (``data.py`` of awd-lstm-lm, which
MoS, DOC and DRILL copy) turns a file into tokens like this::

    for line in open(path, encoding="utf8"):
        words = line.split() + ["<eos>"]

so every line, even an empty one, ends with one :data:`EOS` token, and tokens are the
whitespace-separated pieces (``str.split()`` with no argument: any Unicode whitespace).
Word ids are given in order of first appearance while scanning train, then valid, then
test. That order is what makes checkpoints and published embeddings line up, so it is
kept here even though a frequency order would be tidier.

:class:`Vocabulary` also stores the **train-split frequency** of every word
(:attr:`Vocabulary.counts`), which the frequency-band analyses need; words seen only in
valid or test have count 0. (The original ``Dictionary`` counted all three splits; the
train-only count is the one that does not leak evaluation data.)
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from ..errors import DataError

__all__ = ["EOS", "UNK", "Vocabulary", "read_lines", "read_tokens", "tokenize_line"]

#: End-of-line token appended to every line.
EOS = "<eos>"
#: The corpora's own unknown-word token (an ordinary word as far as the vocabulary goes).
UNK = "<unk>"


def tokenize_line(line: str) -> list[str]:
    """``line.split() + ["<eos>"]``: whitespace tokens plus one end-of-line token."""
    words = line.split()
    words.append(EOS)
    return words


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file, as ``for line in open(path)`` would give them.

    Line ends are ``\\n``, ``\\r\\n`` or ``\\r`` (Python's universal newlines); a last line
    without a line end still counts; the file's final line end does not start a new line.

    Raises:
        ValueError: the file is not valid UTF-8 (the message gives the byte offset and
            line number), or it has no lines at all.
    """
    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(
            f"corpus file {path} is not valid UTF-8: byte {raw[exc.start]:#04x} at byte "
            f"offset {exc.start} (line {line_no}) cannot be decoded ({exc.reason}). The "
            f"corpora are UTF-8 text; re-download the file or convert it with "
            f"`iconv -t UTF-8`."
        ) from None
    if not text:
        raise DataError(f"corpus file {path} is empty; expected one sentence per line")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":  # the final newline ends the last line; it does not open one
        lines.pop()
    return lines


def read_tokens(path: str | os.PathLike) -> list[str]:
    """All tokens of a corpus file: :func:`tokenize_line` of every line, concatenated.

    Raises:
        ValueError: see :func:`read_lines`.
    """
    tokens: list[str] = []
    for line in read_lines(path):
        tokens += line.split()
        tokens.append(EOS)
    return tokens


class Vocabulary:
    """Word <-> id map with train-split frequencies.

    Args:
        words: the words, ``words[i]`` having id ``i``; no duplicates.
        counts: per-id frequency, a sequence or 1-d integer tensor of ``len(words)``;
            default all zeros.

    Build one from token lists with :meth:`build`; store one in a checkpoint with
    :meth:`state_dict` (plain lists, safe for ``torch.load(..., weights_only=True)``).
    """

    def __init__(self, words: Iterable[str], counts: Sequence[int] | Tensor | None = None):
        self._words: list[str] = [str(w) for w in words]
        self._index: dict[str, int] = {w: i for i, w in enumerate(self._words)}
        if len(self._index) != len(self._words):
            dupes = sorted(w for w, n in Counter(self._words).items() if n > 1)
            raise ValueError(
                f"a vocabulary lists each word once; duplicated: {dupes[:10]}"
                f"{' ...' if len(dupes) > 10 else ''}"
            )
        if counts is None:
            self._counts = torch.zeros(len(self._words), dtype=torch.long)
        else:
            self._counts = torch.as_tensor(counts, dtype=torch.long).clone()
            if self._counts.shape != (len(self._words),):
                raise ValueError(
                    f"counts must have one entry per word: expected shape "
                    f"({len(self._words)},), got {tuple(self._counts.shape)}"
                )

    @classmethod
    def build(cls, train: Sequence[str], *others: Iterable[str]) -> Vocabulary:
        """Vocabulary of ``train`` followed by ``others``, ids in order of first appearance.

        Args:
            train: the training tokens; :attr:`counts` are their frequencies.
            others: further token streams (valid, test) whose new words are appended
                after the training words, with count 0 unless they also occur in train.
        """
        order: dict[str, None] = dict.fromkeys(train)  # insertion order = first appearance
        for tokens in others:
            order.update(dict.fromkeys(tokens))
        vocab = cls(order)
        ids = vocab.encode(train)
        vocab._counts = torch.bincount(ids, minlength=len(vocab))
        return vocab

    # ------------------------------------------------------------------- lookups
    @property
    def words(self) -> list[str]:
        """The words by id (a copy)."""
        return list(self._words)

    @property
    def counts(self) -> Tensor:
        """Train-split frequency of each id, ``LongTensor (V,)``."""
        return self._counts

    def __len__(self) -> int:
        return len(self._words)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    def __iter__(self):
        return iter(self._words)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self._words == other._words and torch.equal(self._counts, other._counts)

    def __repr__(self) -> str:
        head = ", ".join(repr(w) for w in self._words[:5])
        return f"Vocabulary({len(self)} words: {head}{', ...' if len(self) > 5 else ''})"

    def index(self, word: str) -> int:
        """The id of ``word``; :class:`KeyError` with an explanation if it is unknown."""
        try:
            return self._index[word]
        except KeyError:
            raise KeyError(self._unknown(word)) from None

    def _unknown(self, word: str) -> str:
        hint = (f"; map unknown words to {UNK!r} with encode(..., unk={UNK!r})"
                if UNK in self._index else "")
        return f"word {word!r} is not in the vocabulary ({len(self)} words){hint}"

    def encode(self, tokens: Iterable[str], *, unk: str | None = None) -> Tensor:
        """Ids of ``tokens``, ``LongTensor (len(tokens),)``.

        Args:
            tokens: words (use :func:`tokenize_line` to split a sentence).
            unk: if given, words not in the vocabulary get this word's id instead of
                raising (``unk="<unk>"`` for PTB and WikiText).

        Raises:
            KeyError: a token is not in the vocabulary and ``unk`` is ``None``.
        """
        index = self._index
        if unk is None:
            try:
                ids = [index[t] for t in tokens]
            except KeyError as exc:
                raise KeyError(self._unknown(exc.args[0])) from None
        else:
            unk_id = self.index(unk)
            ids = [index.get(t, unk_id) for t in tokens]
        return torch.tensor(ids, dtype=torch.long)

    def decode(self, ids: Tensor | Iterable[int]) -> list[str]:
        """Words of a 1-d sequence of ids (a tensor or any iterable of ints).

        Raises:
            ValueError: ``ids`` is not 1-d (decode a ``(T, B)`` batch column by column,
                ``vocab.decode(batch[:, b])``), or holds an id outside ``[0, V)``.
        """
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"decode takes a 1-d sequence of ids, got shape {tuple(ids.shape)}; "
                    f"for a (T, B) batch decode each column: vocab.decode(batch[:, b])"
                )
            ids = ids.tolist()
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self._words):
                raise ValueError(f"id {i} is outside the vocabulary's range [0, {len(self)})")
            out.append(self._words[i])
        return out

    # --------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, list]:
        """``{"words": [...], "counts": [...]}``: plain lists of str and int.

        Safe inside a checkpoint read back with ``torch.load(..., weights_only=True)``.
        """
        return {"words": list(self._words), "counts": self._counts.tolist()}

    @classmethod
    def from_state_dict(cls, state: dict) -> Vocabulary:
        """Inverse of :meth:`state_dict`."""
        if not isinstance(state, dict) or "words" not in state:
            raise ValueError(
                "not a vocabulary state: expected a dict with 'words' (and 'counts') as "
                "written by Vocabulary.state_dict()"
            )
        return cls(state["words"], state.get("counts"))
