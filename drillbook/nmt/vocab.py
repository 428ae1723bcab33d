"""The vocabulary of one side of a translation corpus: four reserved ids, then the training
words by decreasing frequency (ties alphabetically), so ids are deterministic and a
``max_size`` cut keeps the most frequent words."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from ..data import Vocabulary

__all__ = ["BOS", "EOS", "PAD", "SPECIALS", "UNK", "NMTVocab"]

#: Special tokens and their fixed ids.
PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
#: The special tokens in id order, the first words of every :class:`NMTVocab`.
SPECIALS: tuple[str, ...] = (PAD, UNK, BOS, EOS)


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
