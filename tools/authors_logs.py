"""The DRILL authors' published measurements as a data file of the package.

    python tools/authors_logs.py SOURCE [--commit REV] [--out FILE]

``SOURCE`` is a copy of the authors' repository (github.com/idiap/drill): a checkout or a
bare git directory, read at ``--commit`` (default ``HEAD``, recorded as its full hash), or
a plain folder without git, whose commit ``--commit`` must then state. Three things of its
``analysis/`` folder are measurements and carry over as data (their code and prose do not):

* ``speed/penn/*.txt`` and ``speed/wiki2/*.txt``: one AWD-LSTM "end of epoch" line per
  epoch of the tied AWD-LSTM (``*-base``), DRILL (``*-ours``) and MoS (``*-mos``), on
  Penn Treebank and WikiText-2: the epoch, its wall-clock seconds on a GTX 1080 Ti
  (training and the validation pass), the validation loss and perplexity as printed;
* ``rank/rank_results.txt``: the rank of the log-probability matrix, validation and test;
* ``lowfreq/penn/*.pkl``: for the tied, bilinear, dual and DRILL models, every test
  token's cross-entropy grouped by target word, and the training count of every word; and
  ``lowfreq/{1-base,2-bilinear,3-dual}.txt``, the numbers their script printed from them.
  The pickles hold only dictionaries, lists, numbers and strings; they are read with an
  unpickler that refuses every class or function a pickle could name, so reading them runs
  none of their code. The per-band numbers are computed from them with
  :func:`drillbook.analysis.compare_by_frequency` (both of its averages), and the printed
  ones are kept beside them as printed.

Each curve also records the batch size and BPTT length of the package config that trains
the same model (``ptb/awd-lstm-mos``: batch 12), and the corpus's training tokens, from which
:mod:`drillbook.authors` counts the updates of an epoch. The output names the repository,
the commit and every file it read. Bad input (no such folder, a file missing at that
commit, a line that is not an epoch line, a pickle that names a class) stops with one line
naming the file and what to do; nothing is written then.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from drillbook.analysis.frequency import DRILL_BANDS, band_label, compare_by_frequency  # noqa: E402
from drillbook.atomic import write_atomic  # noqa: E402
from drillbook.authors import AUTHORS_FORMAT, default_path  # noqa: E402
from drillbook.configs import get_config  # noqa: E402
from drillbook.data import corpus_spec  # noqa: E402
from drillbook.errors import DataError, DrillbookError, MissingFileError  # noqa: E402

REPOSITORY = "idiap/drill"
URL = "https://github.com/idiap/drill"
#: where the repository's README says its experiments ran
DEVICE = "NVIDIA GTX 1080 Ti, CUDA 8.0, cuDNN 5110 (the repository's README)"

#: the logs: one per corpus (its folder, its name) and model (file suffix, config suffix,
#: what it is), named like the ``speed`` table's rows
_CORPORA = {"ptb": ("penn", "Penn Treebank"), "wt2": ("wiki2", "WikiText-2")}
_MODELS = {"awd-lstm": ("base", "", "AWD-LSTM (tied softmax)"),
           "drill": ("ours", "-drill", "AWD-LSTM-DRILL (4 layers)"),
           "mos": ("mos", "-mos", "AWD-LSTM-MoS (15 components)")}
#: curve name -> (file, the package config that trains the same model, label)
LOGS = {f"{c}-{m}": (f"analysis/speed/{folder}/{folder}-{suffix}.txt", f"{c}/awd-lstm{cfg}",
                     f"{label} on {corpus}")
        for c, (folder, corpus) in _CORPORA.items()
        for m, (suffix, cfg, label) in _MODELS.items()}
RANKS = "analysis/rank/rank_results.txt"
#: the per-word test losses behind DRILL Fig. 3: model -> (pickle, printed output, label)
BANDS = {
    "tied": ("analysis/lowfreq/penn/penn-base.pkl", "analysis/lowfreq/1-base.txt",
             "weight tying (AWD-LSTM)"),
    "bilinear": ("analysis/lowfreq/penn/penn-bilinear.pkl", "analysis/lowfreq/2-bilinear.txt",
                 "bilinear mapping"),
    "dual": ("analysis/lowfreq/penn/penn-dual.pkl", "analysis/lowfreq/3-dual.txt",
             "dual nonlinear mapping"),
    "drill": ("analysis/lowfreq/penn/penn-ours.pkl", None, "DRILL (4 layers)"),
}
BAND_VOCAB = "analysis/lowfreq/penn/penn-vocab.pkl"

_EPOCH = re.compile(r"^\| end of epoch\s+(\d+) \| time:\s*([\d.]+)s \| valid loss\s+([\d.]+)"
                    r" \| valid ppl\s+([\d.]+)")

COLUMNS = {
    "epoch": "epochs since the start of the log; a segment whose printed epochs start again "
             "at 1 (wt2-mos: a second run that resumed from the first, its perplexity "
             "continuing where the first stopped) is numbered on from the first's last",
    "seconds": "the epoch's wall-clock seconds as printed: training and the validation "
               "pass (GTX 1080 Ti)",
    "val_loss": "validation cross-entropy in nats as printed (2 decimals)",
    "val_ppl": "validation perplexity as printed (2 decimals)",
}


class Source:
    """The files of one commit of a copy of the repository: a git directory (checkout or
    bare) read with ``git show``, or a plain folder whose commit the caller states."""

    def __init__(self, path: Path, commit: str | None) -> None:
        if not path.is_dir():
            raise MissingFileError(f"{path}: no such folder; give a checkout or a bare git "
                                   f"directory of {URL}")
        self.path = path
        probe = subprocess.run(["git", "-C", str(path), "rev-parse", "--git-dir"],
                               capture_output=True, text=True)
        self.git = probe.returncode == 0
        if self.git:
            rev = subprocess.run(["git", "-C", str(path), "rev-parse", "--verify",
                                  f"{commit or 'HEAD'}^{{commit}}"], capture_output=True,
                                 text=True)
            if rev.returncode != 0:
                raise DataError(f"{path}: no commit {commit or 'HEAD'!r} there; give "
                                f"--commit with a commit of {URL} that the copy holds")
            self.commit = rev.stdout.strip()
        elif commit is None or not re.fullmatch(r"[0-9a-f]{40}", commit):
            raise DataError(f"{path} is not a git directory, so its commit cannot be read; "
                            f"state it with --commit (40 hex digits)")
        else:
            self.commit = commit

    def read(self, name: str) -> bytes:
        if self.git:
            out = subprocess.run(["git", "-C", str(self.path), "show",
                                  f"{self.commit}:{name}"], capture_output=True)
            if out.returncode == 0:
                return out.stdout
        elif (self.path / name).is_file():
            return (self.path / name).read_bytes()
        raise MissingFileError(f"{name}: not in {self.path} at commit {self.commit[:12]}; "
                               f"is this a copy of {URL}?")


def parse_log(text: str, name: str) -> dict:
    """The columns of one "end of epoch" log (:data:`COLUMNS`), and where a segment
    whose printed epochs restart at 1 begins (``restarts``: its first epoch as numbered)."""
    epochs, seconds, losses, ppls, restarts = [], [], [], [], []
    printed_before = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _EPOCH.match(line)
        if match is None:
            raise DataError(f"{name}, line {number}: not an AWD-LSTM 'end of epoch' line: "
                            f"{line[:60]!r}; is the file complete?")
        printed = int(match.group(1))
        if epochs and printed != printed_before + 1:
            if printed != 1:
                raise DataError(f"{name}, line {number}: epoch {printed} follows epoch "
                                f"{printed_before}; a log's epochs count on, or start a new "
                                f"segment at 1")
            restarts.append(len(epochs) + 1)
        printed_before = printed
        loss, ppl = float(match.group(3)), float(match.group(4))
        if abs(math.log(ppl) - loss) > 0.0051:  # both printed rounded: 0.005 + a hair
            raise DataError(f"{name}, line {number}: valid loss {loss} is not log({ppl}); "
                            f"the line is corrupt")
        epochs.append(len(epochs) + 1)
        seconds.append(float(match.group(2)))
        losses.append(loss)
        ppls.append(ppl)
    if not epochs:
        raise DataError(f"{name}: no 'end of epoch' lines")
    return {"epoch": epochs, "seconds": seconds, "val_loss": losses, "val_ppl": ppls,
            "restarts": restarts}


def parse_ranks(text: str, name: str) -> dict[str, dict[str, int]]:
    """``model -> {"valid": rank, "test": rank}`` from the results table (a header line
    ``#val #test``, then one line per model)."""
    rows = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 3 or not (words[1].isdigit() and words[2].isdigit()):
            raise DataError(f"{name}, line {number}: expected 'MODEL VALID TEST', got "
                            f"{line.strip()!r}")
        rows[words[0]] = {"valid": int(words[1]), "test": int(words[2])}
    if not rows:
        raise DataError(f"{name}: no rank rows")
    return rows


class _DataOnly(pickle.Unpickler):
    """An unpickler for pickles of plain data: any class or function is refused, so loading
    runs no code of the pickle's author."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def load_data_pickle(raw: bytes, name: str):
    """A pickle of dictionaries, lists, numbers and strings (Python 2's ``str`` read as
    UTF-8); anything else is refused in one line."""
    try:
        return _DataOnly(io.BytesIO(raw), encoding="utf-8").load()
    except (pickle.UnpicklingError, EOFError, ValueError, UnicodeDecodeError) as err:
        raise DataError(f"{name}: not a pickle of plain data ({err}); it is not read, "
                        f"since loading it would run code") from None


def parse_printed_bands(text: str, name: str) -> list[tuple[float, int]]:
    """``(value, word types)`` per line of the band script's printed output."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        try:
            rows.append((float(words[0]), int(words[1])))
        except (ValueError, IndexError):
            raise DataError(f"{name}, line {number}: expected 'VALUE TYPES', got "
                            f"{line.strip()!r}") from None
    return rows


def _number(x: float, digits: int = 8) -> float | None:
    """``x`` rounded for the file, None for NaN (an empty band)."""
    return None if math.isnan(x) else round(x, digits)


def parse_bands(source: Source) -> dict:
    """DRILL Fig. 3's data: per band of training counts, every model's mean test loss and
    each baseline's relative difference to DRILL, both averages (per word, the authors';
    per token), and the printed numbers."""
    vocab = load_data_pickle(source.read(BAND_VOCAB), BAND_VOCAB)
    losses = {model: load_data_pickle(source.read(pkl), pkl)
              for model, (pkl, _, _) in BANDS.items()}
    words = sorted(losses["drill"])
    for model, table in losses.items():
        if sorted(table) != words or any(len(table[w]) != len(losses["drill"][w])
                                         for w in words):
            raise DataError(f"{BANDS[model][0]}: its words or token counts differ from "
                            f"{BANDS['drill'][0]}'s; the files are not from one test text")
    index = {w: i for i, w in enumerate(words)}
    target = torch.tensor([index[w] for w in words for _ in losses["drill"][w]])
    nll = {model: torch.tensor([x for w in words for x in table[w]], dtype=torch.float64)
           for model, table in losses.items()}
    # training counts; a word the counts lack (<eos>) is left out of every band
    counts = torch.tensor([int(vocab.get(w, 0)) for w in words])
    missing = [i for i, w in enumerate(words) if w not in vocab]
    bands = [{"band": band_label(lo, hi), "low": lo, "high": hi} for lo, hi in DRILL_BANDS]
    for model in ("tied", "bilinear", "dual"):
        printed = parse_printed_bands(source.read(BANDS[model][1]).decode(), BANDS[model][1])
        for average in ("word", "token"):
            rows = compare_by_frequency(nll["drill"], nll[model], target, counts,
                                        average=average, exclude=missing)
            for band, row in zip(bands, rows, strict=True):
                band.update(types=row.n_types, tokens=row.n_tokens)
                band.setdefault("mean_nll", {})["drill"] = _number(row.ce_a)
                band["mean_nll"][model] = _number(row.ce_b)
                band.setdefault(f"relative_percent_{average}", {})[model] = _number(
                    row.rel_diff_percent)
        if len(printed) != len(bands):
            raise DataError(f"{BANDS[model][1]}: {len(printed)} lines, not one per band "
                            f"({len(bands)})")
        for band, (value, types) in zip(bands, printed, strict=True):
            band.setdefault("printed", {})[model] = _number(value, 12)
            if types != band["types"]:
                raise DataError(f"{BANDS[model][1]}: band {band['band']} has {types} word "
                                f"types there and {band['types']} in the pickles")
    return {
        "corpus": "ptb", "split": "test", "reference": "drill",
        "files": {model: pkl for model, (pkl, _, _) in BANDS.items()} | {"vocab": BAND_VOCAB},
        "printed_files": {m: printed for m, (_, printed, _) in BANDS.items() if printed},
        "models": {model: label for model, (_, _, label) in BANDS.items()},
        "what": "test cross-entropy (nats) of every test token of Penn Treebank, grouped by "
                "target word, for four fine-tuned models (their test perplexities are "
                "DRILL Table 4's); bands of the target word's training count as in "
                "DRILL Fig. 3, <eos> left out",
        "columns": {
            "types": "word types of the band that occur in the test text",
            "tokens": "test tokens whose target is in the band",
            "mean_nll": "each model's mean cross-entropy per token of the band (nats)",
            "relative_percent_word": "per baseline, the mean over the band's words of "
                                     "100 (CE_baseline(w) - CE_drill(w)) / CE_drill(w), "
                                     "each word's CE summed over its test tokens: DRILL "
                                     "Fig. 3's quantity, positive where DRILL is better",
            "relative_percent_token": "per baseline, 100 (CE_baseline - CE_drill) / "
                                      "CE_drill of the band's mean losses",
            "printed": "the number the authors' band script printed for the band, as "
                       "printed: the opposite sign of relative_percent_word (their "
                       "notebook multiplies it by -1 before drawing Fig. 3)",
        },
        "test_tokens": int(target.numel()),
        "test_ppl": {model: round(math.exp(float(x.mean())), 4) for model, x in nll.items()},
        "bands": bands,
    }


def parse(source: Source) -> dict:
    """The whole data file (without writing it)."""
    curves = {}
    for name, (path, config_name, label) in LOGS.items():
        config = get_config(config_name)
        corpus = config.data.corpus
        curves[name] = {
            "label": label, "file": path, "corpus": corpus, "head": config.head.kind,
            "config": config_name, "batch_size": config.train.batch_size,
            "bptt": config.train.bptt, "train_tokens": corpus_spec(corpus).tokens["train"],
            **parse_log(source.read(path).decode(), path)}
    return {
        "format": AUTHORS_FORMAT,
        "source": {"repository": REPOSITORY, "url": URL, "commit": source.commit,
                   "device": DEVICE, "parsed_by": "tools/authors_logs.py"},
        "columns": COLUMNS,
        "curves": curves,
        "ranks": {"file": RANKS, "corpus": "ptb",
                  "what": "rank of the log-probability matrix of the validation and the "
                          "test text, singular values above 1 counted (the repository's "
                          "analysis/rank/compute_rank.py)",
                  "rows": parse_ranks(source.read(RANKS).decode(), RANKS)},
        "bands": parse_bands(source),
    }


def dumps(doc: dict) -> str:
    """Indented JSON with every list of numbers on one line (a curve is one line)."""
    text = json.dumps(doc, indent=1)
    numbers = re.compile(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]")
    return numbers.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(","))
                       + "]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path,
                        help="a checkout, a bare git directory or a plain copy of idiap/drill")
    parser.add_argument("--commit", help="the commit to read (default HEAD; required for a "
                                         "plain copy without git)")
    parser.add_argument("--out", type=Path, default=default_path(),
                        help="the data file to write (default: the package's)")
    args = parser.parse_args(argv)
    try:
        if args.out.is_dir():
            raise MissingFileError(f"--out {args.out} is a folder; name the JSON file")
        doc = parse(Source(args.source, args.commit))
    except DrillbookError as err:
        if os.environ.get("DRILLBOOK_DEBUG", "") not in ("", "0"):
            raise
        print(f"authors_logs: error: {err}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, dumps(doc))
    curves = doc["curves"]
    for name, c in curves.items():
        print(f"{name:<13} {len(c['epoch']):>4} epochs, final validation perplexity "
              f"{c['val_ppl'][-1]:6.2f}, mean {sum(c['seconds']) / len(c['seconds']):6.2f} s "
              f"per epoch" + (f" (segments restart at {c['restarts']})" if c["restarts"]
                              else ""))
    print("ranks:", doc["ranks"]["rows"])
    print("band test perplexities:", doc["bands"]["test_ppl"])
    print(f"written: {args.out} (commit {doc['source']['commit'][:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
