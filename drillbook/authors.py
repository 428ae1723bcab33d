"""The DRILL authors' published runs as data: whole training curves, ranks, per-band losses.

The authors of DRILL (Pappas & Henderson, 2019) published, beside their code, what their
runs measured (``analysis/`` of github.com/idiap/drill): the validation perplexity and the
seconds of every epoch of six 600-epoch runs (the tied AWD-LSTM, DRILL and MoS on Penn
Treebank and WikiText-2, on a GTX 1080 Ti), the rank of the PTB log-probability matrix, and
every PTB test token's loss under four fine-tuned models (the data of their Fig. 3).
``tools/authors_logs.py`` parses a copy of that repository into one data file shipped with
the package, ``drillbook/results/authors/drill-logs.json``, which names the repository, the
commit and the file of every number, and says what each column is. This module reads it:

* :func:`authors_curves`: one :class:`AuthorsCurve` per run, with the updates of an epoch
  counted from the batch size and the corpus (:func:`expected_updates`), so a curve can be
  read against epochs or against updates (MoS trains PTB at batch 12, 1.67 times the
  updates per epoch of the others at batch 20);
* :func:`authors_ranks`: the rank results (singular values above 1);
* :func:`authors_bands`: DRILL Fig. 3 per band of training counts (:class:`AuthorsBand`).

It is a record of measurements, like :mod:`drillbook.papers` is of printed numbers: the
tests check it against what the paper prints (``tests/test_authors.py``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .errors import DataError, MissingFileError
from .metrics import log_interpolate

__all__ = ["AUTHORS_FORMAT", "AuthorsBand", "AuthorsCurve", "authors_bands", "authors_curve",
           "authors_curves", "authors_data", "authors_ranks", "authors_source", "default_path",
           "expected_updates", "expected_window"]

#: the data file's format; ``tools/authors_logs.py`` writes it
AUTHORS_FORMAT = "drillbook-authors/1"


def default_path() -> Path:
    """The data file shipped with the package: ``drillbook/results/authors/drill-logs.json``."""
    from importlib.resources import files

    return Path(str(files("drillbook") / "results" / "authors" / "drill-logs.json"))


def authors_data(path: str | Path | None = None) -> dict[str, Any]:
    """The data file as a dict (default: the package's), its format checked.

    Raises:
        MissingFileError: no such file.
        DataError: not UTF-8 JSON of this format.
    """
    path = Path(path) if path is not None else default_path()
    fix = "rewrite it with tools/authors_logs.py from a copy of github.com/idiap/drill"
    if not path.is_file():
        raise MissingFileError(f"{path}: the authors' data file is missing; {fix}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{path} is not UTF-8 JSON ({err}); {fix}") from None
    if not isinstance(doc, dict) or doc.get("format") != AUTHORS_FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise DataError(f"{path} is not a {AUTHORS_FORMAT} file (format {found!r}); {fix}")
    return doc


def authors_source(path: str | Path | None = None) -> dict[str, str]:
    """Where the numbers come from: ``repository``, ``url``, ``commit``, ``device``."""
    return dict(authors_data(path)["source"])


# ------------------------------------------------------------------ updates per epoch
def expected_window(bptt: int, *, p_full: float = 0.95, std: float = 5.0,
                    min_len: int = 5) -> float:
    """The mean length of AWD-LSTM's variable BPTT window: ``bptt`` w.p. ``p_full``, else
    ``bptt / 2``, as the mean of a normal of deviation ``std`` whose draw is truncated to
    an integer and floored at ``min_len``: ``E[max(min_len, int(N(mean, std)))]`` (67.75
    for ``bptt = 70``; :class:`drillbook.data.BPTTSampler` draws the same way)."""
    def truncated(mean: float) -> float:
        cdf = [0.5 * (1 + math.erf((k - mean) / (std * math.sqrt(2))))
               for k in range(int(mean + 12 * std) + 2)]
        below = cdf[min_len]  # P(X < min_len): the window is min_len long
        return min_len * below + sum(k * (cdf[k + 1] - cdf[k])
                                     for k in range(min_len, len(cdf) - 1))

    return p_full * truncated(bptt) + (1 - p_full) * truncated(bptt / 2)


def expected_updates(train_tokens: int, batch_size: int, bptt: int) -> float:
    """The updates of one epoch: the training text cut into ``batch_size`` columns of
    ``train_tokens // batch_size`` rows, walked by windows of :func:`expected_window`
    rows (the last row has no target). PTB at batch 20: 686 (the authors' log prints
    ``rows // bptt = 663`` batches, the count at a fixed window of 70); at batch 12, 1,143."""
    rows = train_tokens // batch_size
    return (rows - 1) / expected_window(bptt)


# ------------------------------------------------------------------------ curves
@dataclass(frozen=True)
class AuthorsCurve:
    """One of the authors' training runs, epoch by epoch.

    Attributes:
        name: ``<corpus>-<model>``, the name of the ``speed`` table's row (``ptb-drill``).
        label: what was trained, in words.
        file: the log's path in the authors' repository.
        corpus, head: the corpus (``ptb``, ``wt2``) and the head (``tied``, ``drill``,
            ``mos``).
        config: the package config that trains the same model (``ptb/awd-lstm-mos``).
        batch_size, bptt, train_tokens: what an epoch is made of (:attr:`updates_per_epoch`).
        epochs: 1, 2, ... (a segment whose printed epochs restart is numbered on).
        seconds: each epoch's seconds on a GTX 1080 Ti, training and validation.
        val_loss, val_ppl: the validation loss (nats) and perplexity after each epoch, as
            printed (2 decimals).
        restarts: the epochs (as numbered here) at which a segment restarts its count.
    """

    name: str
    label: str
    file: str
    corpus: str
    head: str
    config: str
    batch_size: int
    bptt: int
    train_tokens: int
    epochs: tuple[int, ...]
    seconds: tuple[float, ...]
    val_loss: tuple[float, ...]
    val_ppl: tuple[float, ...]
    restarts: tuple[int, ...] = ()

    @property
    def updates_per_epoch(self) -> float:
        """:func:`expected_updates` at this run's batch size, BPTT and corpus."""
        return expected_updates(self.train_tokens, self.batch_size, self.bptt)

    @property
    def printed_batches(self) -> int:
        """The batches per epoch the authors' log prints: rows // bptt (663 on PTB at 20)."""
        return (self.train_tokens // self.batch_size) // self.bptt

    @property
    def updates(self) -> tuple[float, ...]:
        """The updates done after each epoch."""
        return tuple(e * self.updates_per_epoch for e in self.epochs)

    @property
    def mean_seconds(self) -> float:
        """Mean seconds per epoch over the whole log (what the paper's Table 3 reports)."""
        return statistics.fmean(self.seconds)

    @property
    def final_val_ppl(self) -> float:
        return self.val_ppl[-1]

    def val_ppl_at(self, epoch: float) -> float | None:
        """The validation perplexity after ``epoch`` epochs: as logged at a whole epoch,
        interpolated linearly in log perplexity between two (a fractional epoch: the same
        number of updates as a run of another batch size); None before the first logged
        epoch or after the last."""
        return log_interpolate(self.epochs, self.val_ppl, epoch)

    def val_ppl_after_updates(self, updates: float) -> float | None:
        """:meth:`val_ppl_at` the epoch at which this run had done ``updates`` updates."""
        return self.val_ppl_at(updates / self.updates_per_epoch)


def _curve(name: str, c: Mapping[str, Any]) -> AuthorsCurve:
    return AuthorsCurve(name, c["label"], c["file"], c["corpus"], c["head"], c["config"],
                        c["batch_size"], c["bptt"], c["train_tokens"], tuple(c["epoch"]),
                        tuple(c["seconds"]), tuple(c["val_loss"]), tuple(c["val_ppl"]),
                        tuple(c["restarts"]))


def authors_curves(path: str | Path | None = None) -> dict[str, AuthorsCurve]:
    """Every logged run, by name (``ptb-awd-lstm``, ``ptb-drill``, ``ptb-mos``, and the
    same on ``wt2``)."""
    return {name: _curve(name, c) for name, c in authors_data(path)["curves"].items()}


def authors_curve(name: str, path: str | Path | None = None) -> AuthorsCurve:
    """One run by name.

    Raises:
        DataError: no such run (the message lists them).
    """
    curves = authors_curves(path)
    if name not in curves:
        raise DataError(f"no logged run {name!r} of the DRILL authors; runs: {sorted(curves)}")
    return curves[name]


def authors_ranks(path: str | Path | None = None) -> dict[str, dict[str, int]]:
    """Model (``Softmax``, ``DRILL``, ``MoS``) -> ``{"valid": rank, "test": rank}``, with
    singular values above 1 counted, on Penn Treebank."""
    return {row: dict(r) for row, r in authors_data(path)["ranks"]["rows"].items()}


# ------------------------------------------------------------------------- bands
@dataclass(frozen=True)
class AuthorsBand:
    """One band of DRILL Fig. 3, from the authors' per-token test losses of four fine-tuned
    PTB models (``tied``, ``bilinear``, ``dual``, ``drill``).

    Attributes:
        band, low, high: the label and ``[low, high)`` of training counts (``high`` None:
            no bound).
        types, tokens: the band's word types in the test text and their test tokens.
        mean_nll: model -> mean cross-entropy per token of the band (nats).
        relative_word: baseline -> Fig. 3's quantity, the mean over the band's words of
            ``100 (CE_baseline(w) - CE_drill(w)) / CE_drill(w)`` (positive: DRILL better).
        relative_token: baseline -> ``100 (CE_baseline - CE_drill) / CE_drill`` of the
            band's mean losses.
        printed: baseline -> what the authors' script printed for the band (the opposite
            sign of ``relative_word``).
    """

    band: str
    low: int
    high: int | None
    types: int
    tokens: int
    mean_nll: Mapping[str, float]
    relative_word: Mapping[str, float]
    relative_token: Mapping[str, float]
    printed: Mapping[str, float]

    def __post_init__(self) -> None:
        for name in ("mean_nll", "relative_word", "relative_token", "printed"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))


def authors_bands(path: str | Path | None = None) -> list[AuthorsBand]:
    """DRILL Fig. 3's eight bands, rarest first (:class:`AuthorsBand`)."""
    return [AuthorsBand(b["band"], b["low"], b["high"], b["types"], b["tokens"],
                        b["mean_nll"], b["relative_percent_word"],
                        b["relative_percent_token"], b["printed"])
            for b in authors_data(path)["bands"]["bands"]]
