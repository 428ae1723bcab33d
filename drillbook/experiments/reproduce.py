"""Reproduce the papers' tables row by row, at a stated budget, resumably.

``drillbook reproduce TABLE`` trains every row of a table (each row is a named config plus
overrides) into ``runs/<table>/<row>/`` and writes ``results/<table>/<row>.json`` (see
:mod:`drillbook.experiments.results`) when the row finishes or its budget runs out. Run it
again and every interrupted row resumes from its last checkpoint: a Colab session that
disconnects loses at most a checkpoint interval. ``drillbook report`` turns the result
files into the Markdown tables the book shows.

The full-length runs the papers made take hundreds of epochs; a budget in minutes per row
makes a table fit a GPU session. The result files say which budget was used and how far
each row got, and keep the learning curve.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..configs import apply_overrides, get_config, paper_row
from ..errors import ConfigError
from .bench import git_state
from .results import RESULT_FORMAT, load_results, write_result

__all__ = ["TABLES", "Row", "baseline_row", "render_report", "reproduce"]


@dataclass(frozen=True)
class Row:
    """One row of a paper table: a named config and the overrides that make the row."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()

    @property
    def translation(self) -> bool:
        """A Multi30k translation row (BLEU) rather than a language-model row."""
        return self.config.startswith("multi30k/")

    def resolve(self, extra: Sequence[str] = ()):
        """The row's config: the named config, the row's overrides, then ``extra``."""
        if self.translation:
            from ..nmt.config import get_nmt_config

            base = get_nmt_config(self.config)
        else:
            base = get_config(self.config)
        return apply_overrides(base, [*self.overrides, *extra])

    def paper(self, config) -> dict:
        """What the papers report for this row (``config`` from :meth:`resolve`)."""
        return dict(config.paper) if self.translation else paper_row(config)


def _table4() -> list[Row]:
    drill = "ptb/awd-lstm-drill"
    return [Row("full-softmax", "ptb/awd-lstm-full-softmax"), Row("tied", "ptb/awd-lstm"),
            Row("bilinear", "ptb/awd-lstm-bilinear"), Row("dual", "ptb/awd-lstm-dual"),
            *[Row(f"drill-{k}", drill, (f"head.options.depth={k}",)) for k in (1, 2, 3, 4)],
            Row("drill-4-residual-previous", drill, ("head.options.residual_previous=true",)),
            Row("drill-4-standard-dropout", drill, ("head.options.dropout_kind=standard",))]


#: epochs of 150 updates each for every row of the ``cpu-scale`` table: 900 updates of
#: 32 x 35 tokens, about one pass over PTB's training text
CPU_SCALE_EPOCHS = 6


def _cpu_scale() -> list[Row]:
    budget = (f"train.epochs={CPU_SCALE_EPOCHS}",)
    rows = [Row(h, f"tutorial/ptb-{h}", budget) for h in ("softmax", "tied", "bilinear", "dual")]
    rows += [Row(f"drill-{k}", "tutorial/ptb-drill", (*budget, f"head.options.depth={k}"))
             for k in (1, 2, 4)]
    return rows + [Row(h, f"tutorial/ptb-{h}", budget) for h in ("mos", "doc", "sigsoftmax")]


#: table name -> rows. The paper numbers come from each config's ``paper`` record.
TABLES: dict[str, list[Row]] = {
    "drill-table4": _table4(),
    "drill-main": [Row("ptb-awd-lstm", "ptb/awd-lstm"), Row("ptb-drill", "ptb/awd-lstm-drill"),
                   Row("wt2-awd-lstm", "wt2/awd-lstm"), Row("wt2-drill", "wt2/awd-lstm-drill")],
    "mos-doc": [Row("ptb-mos", "ptb/awd-lstm-mos"), Row("ptb-doc", "ptb/awd-lstm-doc"),
                Row("ptb-doc-i3-20", "ptb/awd-lstm-doc",
                    ("head.options.vectors_per_layer=[0,0,0,20]",)),
                Row("ptb-doc-lambda-0", "ptb/awd-lstm-doc", ("head.options.cv_weight=0.0",)),
                Row("wt2-mos", "wt2/awd-lstm-mos"), Row("wt2-doc", "wt2/awd-lstm-doc")],
    "rank": [Row("tied", "ptb/awd-lstm"), Row("drill", "ptb/awd-lstm-drill"),
             Row("mos", "ptb/awd-lstm-mos"), Row("doc", "ptb/awd-lstm-doc")],
    # DRILL Table 3: seconds per epoch (every LM row records it; this table needs 1 epoch)
    "speed": [Row(f"{c}-{h}", f"{c}/awd-lstm{s}") for c in ("ptb", "wt2")
              for h, s in (("awd-lstm", ""), ("drill", "-drill"), ("mos", "-mos"))],
    # vMF Table 1 and joint-embedding Table 3 analogues on Multi30k (de->en)
    "multi30k-vmf": [Row("softmax", "multi30k/de-en-softmax"),
                     Row("softmax-tied", "multi30k/de-en-softmax-tied"),
                     Row("vmf-nllvmf", "multi30k/de-en-vmf"),
                     *[Row(f"vmf-{loss}", f"multi30k/de-en-vmf-{loss}")
                       for loss in ("reg1", "reg2", "l2", "cosine", "maxmargin")],
                     *[Row(f"vmf-{loss}-tied", f"multi30k/de-en-vmf-{loss}-tied")
                       for loss in ("reg1", "reg2", "maxmargin")]],
    "multi30k-joint": [Row(h, f"multi30k/de-en-{c}") for h, c in (
        ("softmax", "softmax"), ("tied", "softmax-tied"), ("bilinear", "bilinear"),
        ("dual", "dual"), ("drill", "drill"))],
    # a CPU-sized table: the tests and a first look
    "tutorial": [Row("tied", "tutorial/ptb-tied"), Row("drill", "tutorial/ptb-drill")],
    # every head at CPU scale, one budget for all: Table 4's ordering, the mixtures' rank
    # and Table 3's speed ratios, small enough for a laptop (see CPU_SCALE_EPOCHS)
    "cpu-scale": _cpu_scale(),
}

#: tables whose rows also measure the rank of the test log-probability matrix, and how many
#: test positions the matrix has (None: as many as the test evaluation reads)
RANK_TABLES: dict[str, int | None] = {"rank": None, "cpu-scale": 2000}


def reproduce(table: str, *, rows: list[str] | None = None,
              budget_minutes: float | None = None, out: str | Path = "results",
              runs: str | Path = "runs", device: str | None = None,
              overrides: list[str] | None = None, max_eval_tokens: int | None = None,
              corpus=None, progress: bool | None = None) -> list[Path]:
    """Train (or resume) the rows of ``table`` and write one result file per row.

    Args:
        table: a key of :data:`TABLES`.
        rows: row names to run (default: all).
        budget_minutes: wall-clock minutes per row *per call* (None: train to the end).
        out: the results folder (``<out>/<table>/<row>.json``).
        runs: where run folders (checkpoints, logs; never committed) live.
        overrides: ``key=value`` applied to every row after its own.
        max_eval_tokens: cap the test evaluation (CPU tests); None evaluates it all.
    """
    from ..train import Trainer, evaluate, load_run, read_log

    if table not in TABLES:
        raise ConfigError(f"unknown table {table!r}; choose one of {sorted(TABLES)}")
    source = git_state()  # the code this call runs, read before training starts
    chosen = TABLES[table]
    if rows:
        names = {r.name for r in chosen}
        unknown = sorted(set(rows) - names)
        if unknown:
            raise ConfigError(f"unknown row(s) {unknown} in {table!r}; rows: {sorted(names)}")
        chosen = [r for r in chosen if r.name in rows]
    written = []
    for row in chosen:
        config = row.resolve(overrides or [])
        run_dir = Path(runs) / table / row.name
        if row.translation:
            written.append(_reproduce_nmt(table, row, config, run_dir, out, budget_minutes,
                                          device, progress, source))
            continue
        resume = (run_dir / "last.pt").exists()
        trainer = Trainer(config, run_dir, device=device, corpus=corpus, resume=resume,
                          progress=progress)
        corpus = trainer.corpus if corpus is None else corpus
        status = trainer.fit(max_minutes=budget_minutes)
        log = read_log(run_dir) if (run_dir / "log.jsonl").exists() else []
        metrics: dict[str, float] = {}
        if log:
            metrics["seconds_per_epoch"] = sum(r["epoch_seconds"] for r in log) / len(log)
        if (run_dir / "best.pt").exists():
            metrics["val_ppl"] = math.exp(trainer.best_val_loss)
            _, model, _ = load_run(run_dir, corpus=corpus, device=str(trainer.device))
            from ..data import batchify

            test = batchify(corpus.test, config.train.test_batch_size).to(trainer.device)
            loss, tokens = evaluate(model, test, config.train.bptt, max_eval_tokens)
            metrics["test_ppl"] = math.exp(loss)
            metrics["test_tokens"] = tokens
            if table in RANK_TABLES:
                cap = RANK_TABLES[table] or max_eval_tokens
                metrics.update(_rank(model, test, config.train.bptt, cap))
        doc = _result_doc(
            table, row, config, trainer, source,
            status="budget" if status.reason in ("budget", "steps") else status.reason,
            epochs_done=status.epoch, budget_minutes=budget_minutes,
            precision=_precision(config.train.amp, trainer.device), metrics=metrics,
            curve=[{"epoch": r["epoch"], "val_ppl": r["val_ppl"], "train_ppl": r["train_ppl"],
                    "elapsed_seconds": r["elapsed_seconds"]} for r in log])
        written.append(write_result(Path(out) / table / f"{row.name}.json", doc))
    return written


def _result_doc(table: str, row: Row, config, trainer, source: dict, *, status: str,
                epochs_done: int, budget_minutes: float | None, precision: str,
                metrics: dict, curve: list) -> dict:
    """The result document of one row (:mod:`.results`): what was run, where, with which
    code, how far it got, what it measured, and the paper's numbers for the row."""
    return {
        "format": RESULT_FORMAT, "table": table, "row": row.name,
        "config_name": config.name, "config": config.to_dict(), "config_hash": config.hash(),
        "seed": config.train.seed, "git_commit": source["commit"],
        "git_dirty": source["dirty"], "device": _device_name(trainer.device),
        "torch": torch.__version__, "cuda": torch.version.cuda, "status": status,
        "epochs_done": epochs_done, "steps_done": trainer.step,
        "wall_seconds": round(trainer.elapsed, 1), "budget_minutes": budget_minutes,
        "precision": precision, "metrics": metrics, "curve": curve,
        "paper": {k: v for k, v in row.paper(config).items() if isinstance(v, (int, float))},
    }


def _reproduce_nmt(table: str, row: Row, config, run_dir: Path, out, budget_minutes,
                   device, progress, source: dict) -> Path:
    """A translation row: BLEU on the validation and test sets (greedy)."""
    from ..nmt.bleu import corpus_bleu
    from ..nmt.train import NMTTrainer, load_nmt_run, translate_pairs
    from ..train import read_log

    resume = (run_dir / "last.pt").exists()
    trainer = NMTTrainer(config, run_dir, device=device, resume=resume, progress=progress)
    last = trainer.fit(max_minutes=budget_minutes)
    log = read_log(run_dir) if (run_dir / "log.jsonl").exists() else []
    metrics: dict[str, float] = {}
    if (run_dir / "best.pt").exists():
        metrics["val_bleu"] = trainer.best_bleu
        _, model, src_vocab, tgt_vocab = load_nmt_run(run_dir, device=str(trainer.device))
        test = trainer.corpus.test
        hyps = translate_pairs(model, test, src_vocab, tgt_vocab, device=trainer.device,
                               max_len=config.train.max_len)
        metrics["test_bleu"] = corpus_bleu(hyps, [t for _, t in test])
        metrics["output_layer_params"] = model.head.param_counts().dedicated
    steps = [r["seconds_per_step"] for r in log if r.get("seconds_per_step")]
    if steps:
        metrics["seconds_per_step"] = sum(steps) / len(steps)
    epochs_done = trainer.epoch - 1
    doc = _result_doc(
        table, row, config, trainer, source,
        status="budget" if last.get("reason") == "budget" else (
            "done" if epochs_done >= config.train.epochs else "epochs"),
        epochs_done=epochs_done, budget_minutes=budget_minutes,
        precision="fp32",  # the translation trainer has no autocast
        metrics=metrics,
        curve=[{"epoch": r["epoch"], "val_bleu": r["val_bleu"], "val_loss": r["val_loss"],
                "elapsed_seconds": r["elapsed_seconds"]} for r in log])
    return write_result(Path(out) / table / f"{row.name}.json", doc)


def _precision(amp: bool, device: torch.device) -> str:
    """What the training step ran in (bf16 autocast only ever runs on CUDA)."""
    return "bf16-autocast" if amp and device.type == "cuda" else "fp32"


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"


def _rank(model, data, bptt: int, max_tokens: int | None) -> dict[str, int]:
    """Rank of the test log-probability matrix: DRILL's ``tol = 1`` and, where the matrix is
    small enough for a plain SVD (a capped table), numpy's relative tolerance too."""
    from ..analysis import DRILL_TOL, log_prob_chunks, singular_values

    device = next(model.parameters()).device
    if max_tokens is not None and max_tokens * model.head.vocab_size <= 40_000_000:
        # small enough to compute in float64, where numpy's tolerance means something
        # (float32 rounding noise alone has full rank under it)
        import copy

        chunks = log_prob_chunks(copy.deepcopy(model).double(), data, bptt, max_tokens)
        spectrum = singular_values(torch.cat(list(chunks)).double(), method="svd",
                                   device=device)
        return {"rank_tol_1": spectrum.rank(DRILL_TOL), "rank_numpy_tol": spectrum.rank(),
                "rank_positions": spectrum.n_rows}
    spectrum = singular_values(log_prob_chunks(model, data, bptt, max_tokens), method="gram",
                               device=device)
    return {"rank_tol_1": spectrum.rank(DRILL_TOL), "rank_positions": spectrum.n_rows}


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def baseline_row(row: str) -> str:
    """The row a speed ratio divides by: ``tied``, or ``<corpus>-awd-lstm`` in the tables
    whose rows are named ``<corpus>-<head>``."""
    for prefix in ("ptb-", "wt2-"):
        if row.startswith(prefix):
            return f"{prefix}awd-lstm"
    return "tied"


def render_report(folder: str | Path) -> str:
    """Markdown tables of every result under ``folder``, ours next to the papers'.

    Speed ratios divide each row's seconds per epoch by its :func:`baseline_row` in the same
    table; rank columns appear for tables that measured a rank. Deterministic: the same
    files give the same bytes (tests check it).
    """
    from .compare import PAPER_EXTRAS

    docs = load_results(folder)
    by_table: dict[str, list[dict]] = {}
    for doc in docs:
        by_table.setdefault(doc["table"], []).append(doc)
    lines = ["# Reproduction results", "",
             "Generated by `drillbook report` from the result files; do not edit by hand.",
             ""]
    for table in sorted(by_table):
        order = [r.name for r in TABLES.get(table, [])]
        rows = sorted(by_table[table], key=lambda d: (order.index(d["row"])
                                                     if d["row"] in order else len(order),
                                                     d["row"]))
        unit = "BLEU" if any("val_bleu" in d["metrics"] for d in rows) else "perplexity"
        seconds = {d["row"]: d["metrics"].get("seconds_per_epoch") for d in rows}
        ranked = any("rank_tol_1" in d["metrics"] for d in rows)
        extras = PAPER_EXTRAS.get(table, {})
        header = ["row", "config", "budget (min)", "status", "epochs", "valid", "test",
                  "paper valid", "paper test", "s/epoch", "x baseline"]
        if ranked:
            header += ["rank (tol 1)", "rank (numpy tol)", "positions", "paper rank"]
        lines += [f"## {table}", "", f"Metric: {unit}. The speed ratio divides by the "
                  "`tied` (or `<corpus>-awd-lstm`) row of the same table. Seconds per "
                  "epoch are each row's own wall-clock time: rows run at different times "
                  "on a shared machine are not a speed comparison (`drillbook bench` "
                  "measures ratios in one process).", "",
                  "| " + " | ".join([*header, "device"]) + " |",
                  "|" + "---|" * (len(header) + 1)]
        for d in rows:
            m, p = d["metrics"], d["paper"]
            bleu = "val_bleu" in m  # translation rows report BLEU, LM rows perplexity
            valid, test = (("val_bleu", "test_bleu") if bleu else ("val_ppl", "test_ppl"))
            base = seconds.get(baseline_row(d["row"]))
            own = m.get("seconds_per_epoch")
            cells = [d["row"], f"`{d['config_name']}`", _fmt(d["budget_minutes"], 0),
                     d["status"], str(d["epochs_done"]), _fmt(m.get(valid)),
                     _fmt(m.get(test)), _fmt(p.get("valid_ppl")), _fmt(p.get("test_ppl")),
                     _fmt(own, 1), _fmt(own / base if own and base else None)]
            if ranked:
                cells += [_fmt(m.get("rank_tol_1")), _fmt(m.get("rank_numpy_tol")),
                          _fmt(m.get("rank_positions")),
                          _fmt(extras.get(d["row"], {}).get("rank"), 0)]
            lines.append("| " + " | ".join([*cells, d["device"]]) + " |")
        lines.append("")
    return "\n".join(lines)
