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

Compare like with like: the papers' main perplexities are after AWD-LSTM's fine-tuning
stage. A row that names a fine-tuned paper number (:attr:`Row.paper_finetuned`) is
fine-tuned once its main run is done, in ``runs/<table>/<row>/finetune/``, within the same
budget, and its result file records both stages; the report shows each beside its own
paper number (DRILL's "w/o finetune" rows for the main run where the paper has them).
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..configs import TRANSLATION, apply_overrides, finetune_lr, get_config
from ..errors import ConfigError, ResultFileError
from ..metrics import perplexity
from ..papers import paper_number, paper_values
from ..train.loop import precision_label, rank_and_world_size
from ..train.runs import has_checkpoint
from .bench import git_state
from .results import RESULT_FORMAT, load_results, write_result
from .seeds import SEED_FOLDER, chance_separated, resolved_pairs, seed_spread, spread_table

__all__ = ["RANK_TABLES", "TABLES", "Row", "baseline_row", "find_row", "records_for",
           "render_report", "reproduce"]


#: the stages a row's paper numbers belong to: the main run, fine-tuning, and dynamic
#: evaluation of the fine-tuned run
_STAGES = ("main", "finetuned", "dynamic")


@dataclass(frozen=True)
class Row:
    """One row of a paper table: a named config, the overrides that make the row, and the
    keys in :data:`drillbook.papers.RECORD` of the papers' numbers it is compared with.

    Attributes:
        paper: the records compared with the main run (before fine-tuning): DRILL's
            "w/o finetune" rows, speeds, ranks. Several records may be named when they
            give different metrics.
        paper_finetuned: the record compared with the fine-tuned run. A row that names one
            is fine-tuned after its main run, as the papers' authors did.
        paper_dynamic: the record compared with dynamic evaluation (Krause et al., 2018) of
            the fine-tuned run. A row that names one evaluates its fine-tuned ``best.pt``
            dynamically once fine-tuning has ended: the authors' grid searched on the
            validation split, the test split read with the best pair
            (:func:`drillbook.train.dynamic.evaluate_run`).
    """

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    paper: tuple[str, ...] = ()
    paper_finetuned: str | None = None
    paper_dynamic: str | None = None

    @property
    def finetunes(self) -> bool:
        """The paper's number for this row is after fine-tuning, so the row fine-tunes."""
        return self.paper_finetuned is not None

    def paper_keys(self, stage: str = "main") -> tuple[str, ...]:
        """The record keys of one stage, ``"main"``, ``"finetuned"`` or ``"dynamic"``."""
        if stage not in _STAGES:
            raise ValueError(f"stage must be one of {_STAGES}, got {stage!r}")
        if stage == "main":
            return self.paper
        key = self.paper_finetuned if stage == "finetuned" else self.paper_dynamic
        return (key,) if key else ()

    def paper_values(self, stage: str = "main") -> dict[str, float]:
        """The papers' values for one stage, read from the record now (never stored)."""
        return paper_values(self.paper_keys(stage))

    def paper_sources(self) -> list[str]:
        """Where the row's paper numbers are printed, main run first."""
        keys = [k for stage in _STAGES for k in self.paper_keys(stage)]
        return list(dict.fromkeys(paper_number(k).source for k in keys))

    @property
    def translation(self) -> bool:
        """A translation row (BLEU) rather than a language-model row: its config's task."""
        return get_config(self.config).task == TRANSLATION

    def resolve(self, extra: Sequence[str] = ()):
        """The row's config: the named config, the row's overrides, then ``extra``."""
        return apply_overrides(get_config(self.config), [*self.overrides, *extra])



def _table4() -> list[Row]:
    """DRILL Table 4. Its numbers are after fine-tuning; Table 1 gives the tied and the
    4-layer DRILL models before it too."""
    drill, t4 = "ptb/awd-lstm-drill", "drill:table4:"
    layers = {1: "drill-1-layer", 2: "drill-2-layers", 3: "drill-3-layers", 4: "drill-4-layers"}
    return [
        Row("full-softmax", "ptb/awd-lstm-full-softmax", paper_finetuned=t4 + "full-softmax"),
        Row("tied", "ptb/awd-lstm", paper=("drill:table1:awd-lstm-wo-finetune",),
            paper_finetuned=t4 + "weight-tying"),
        Row("bilinear", "ptb/awd-lstm-bilinear", paper_finetuned=t4 + "bilinear"),
        Row("dual", "ptb/awd-lstm-dual", paper_finetuned=t4 + "dual"),
        *[Row(f"drill-{k}", drill, (f"head.options.depth={k}",),
              paper=("drill:table1:awd-lstm-drill-wo-finetune",) if k == 4 else (),
              paper_finetuned=t4 + layers[k]) for k in (1, 2, 3, 4)],
        Row("drill-4-residual-previous", drill, ("head.options.residual_previous=true",),
            paper_finetuned=t4 + "residuals-between-layers"),
        Row("drill-4-standard-dropout", drill, ("head.options.dropout_kind=standard",),
            paper_finetuned=t4 + "no-variational-dropout"),
    ]


def _drill_main() -> list[Row]:
    """DRILL Tables 1 (PTB) and 2 (WikiText-2): before and after fine-tuning, and with
    dynamic evaluation (AWD-LSTM's dynamic-evaluation row is Krause et al.'s)."""
    rows = []
    for corpus, table in (("ptb", "table1"), ("wt2", "table2")):
        for head, suffix in (("awd-lstm", ""), ("drill", "-drill")):
            key = f"drill:{table}:awd-lstm{suffix}"
            rows.append(Row(f"{corpus}-{head}", f"{corpus}/awd-lstm{suffix}",
                            paper=(f"{key}-wo-finetune",), paper_finetuned=key,
                            paper_dynamic=f"{key}-dynamic-eval"))
    return rows


def _mixtures() -> list[Row]:
    """MoS and DOC (DOC Tables 7 and 8), and two rows of DOC's Table 3 ablation."""
    return [
        Row("ptb-mos", "ptb/awd-lstm-mos", paper_finetuned="doc:table7:awd-lstm-mos",
            paper_dynamic="drill:table1:awd-lstm-mos-dynamic-eval"),
        Row("ptb-doc", "ptb/awd-lstm-doc", paper_finetuned="doc:table7:awd-lstm-doc"),
        # "the implementation of Yang et al. (2018) with identical hyperparameters except
        # for i3": MoS with 20 experts from the last layer, not DOC's settings
        Row("ptb-doc-i3-20", "ptb/awd-lstm-mos", ("head.options.n_experts=20",),
            paper_finetuned="doc:table3:i3-20"),
        Row("ptb-doc-lambda-0", "ptb/awd-lstm-doc", ("head.options.cv_weight=0.0",),
            paper_finetuned="doc:table3:i3-15-i2-5-lambda-0"),
        Row("wt2-mos", "wt2/awd-lstm-mos", paper_finetuned="doc:table8:awd-lstm-mos",
            paper_dynamic="drill:table2:awd-lstm-mos-dynamic-eval"),
        Row("wt2-doc", "wt2/awd-lstm-doc", paper_finetuned="doc:table8:awd-lstm-doc"),
    ]


def _rank() -> list[Row]:
    """The rank of the PTB test log-probability matrix (main runs; not fine-tuned): the
    DRILL authors' code (tol = 1), the DRILL paper's text, DOC Table 5."""
    return [
        Row("tied", "ptb/awd-lstm", paper=("drill-repo:rank:softmax",
                                           "drill:sec4.1.1:rank-awd-lstm",
                                           "doc:table5:awd-lstm")),
        Row("drill", "ptb/awd-lstm-drill", paper=("drill-repo:rank:drill",
                                                  "drill:sec4.1.1:rank-drill")),
        Row("mos", "ptb/awd-lstm-mos", paper=("drill-repo:rank:mos", "drill:sec4.1.1:rank-mos",
                                              "doc:table5:awd-lstm-mos")),
        Row("doc", "ptb/awd-lstm-doc", paper=("doc:table5:awd-lstm-doc",)),
    ]


#: epochs of 150 updates each for every row of the ``cpu-scale`` table: 900 updates of
#: 32 x 35 tokens, about one pass over PTB's training text
CPU_SCALE_EPOCHS = 6


def _cpu_scale() -> list[Row]:
    budget = (f"train.epochs={CPU_SCALE_EPOCHS}",)
    rows = [Row(h, f"tutorial/ptb-{h}", budget) for h in ("softmax", "tied", "bilinear", "dual")]
    rows += [Row(f"drill-{k}", "tutorial/ptb-drill", (*budget, f"head.options.depth={k}"))
             for k in (1, 2, 4)]
    return rows + [Row(h, f"tutorial/ptb-{h}", budget) for h in ("mos", "doc", "sigsoftmax")]


#: table name -> rows. Each row names its own paper records (:mod:`drillbook.papers`).
TABLES: dict[str, list[Row]] = {
    "drill-table4": _table4(),
    "drill-main": _drill_main(),
    "mos-doc": _mixtures(),
    "rank": _rank(),
    # DRILL Table 3 as its Sec. 4.1.1 states it: seconds per epoch (every LM row records
    # them; this table needs one epoch per row)
    "speed": [Row(f"{c}-{h}", f"{c}/awd-lstm{s}", paper=(f"drill:sec4.1.1:{c}-{h}-speed",))
              for c in ("ptb", "wt2")
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


def records_for(config) -> list[str]:
    """The record keys of every table row that trains the same model on the same corpus as
    ``config`` (equal data, model and head sections; the training recipe may differ), in
    table order: what the papers print for this setup. ``ptb/awd-lstm-drill`` with
    ``head.options.depth=2`` finds DRILL Table 4's 2-layer row."""
    def model_of(c) -> tuple:
        d = c.to_dict()
        return type(c), *(d[k] for k in ("data", "model", "head"))

    wanted, keys = model_of(config), []
    for rows in TABLES.values():
        for row in rows:
            if model_of(row.resolve()) == wanted:
                keys += [k for stage in _STAGES for k in row.paper_keys(stage)
                         if k not in keys]
    return keys


def find_row(table: str, name: str) -> Row | None:
    """The row ``name`` of ``table`` (None when the table or the row no longer exists: a
    result file may outlive the row that wrote it)."""
    return next((r for r in TABLES.get(table, []) if r.name == name), None)


def reproduce(table: str, *, rows: list[str] | None = None,
              budget_minutes: float | None = None, out: str | Path = "results",
              runs: str | Path = "runs", device: str | None = None,
              overrides: list[str] | None = None, max_eval_tokens: int | None = None,
              corpus=None, progress: bool | None = None,
              seed: int | None = None) -> list[Path]:
    """Train (or resume) the rows of ``table`` and write one result file per row.

    A row with a fine-tuned paper number (:attr:`Row.finetunes`) is fine-tuned once its
    main run is done (``status: done``), in ``<runs>/<table>/<row>/finetune``, at the
    authors' fine-tuning learning rate (:func:`drillbook.configs.finetune_lr`). The budget
    covers both stages: fine-tuning gets what the main run left of this call's minutes,
    and resumes at the next call when none was left.

    Args:
        table: a key of :data:`TABLES`.
        rows: row names to run (default: all).
        budget_minutes: wall-clock minutes per row *per call* (None: train to the end).
        out: the results folder (``<out>/<table>/<row>.json``).
        runs: where run folders (checkpoints, logs; never committed) live.
        overrides: ``key=value`` applied to every row after its own.
        max_eval_tokens: cap the test evaluation (CPU tests); None evaluates it all.
        seed: train every row with this seed instead of its config's. A seed other than
            the config's writes ``<out>/<table>/seed-<seed>/<row>.json`` (run folders
            ``<runs>/<table>/seed-<seed>/<row>``), beside the row's own file, so repeated
            runs of one table give the spread across seeds
            (:func:`~drillbook.experiments.seeds.seed_spread`).
    """
    from ..train import Trainer

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
    ranked = table in RANK_TABLES
    rank_cap = RANK_TABLES.get(table) or max_eval_tokens
    written = []
    for index, row in enumerate(chosen, 1):
        label = f"row {index}/{len(chosen)} {row.name}"  # the trainers' console lines
        config = row.resolve(overrides or [])
        folder = table
        if seed is not None and seed != config.train.seed:
            config = row.resolve([*(overrides or []), f"train.seed={seed}"])
            folder = f"{table}/{SEED_FOLDER}{seed}"
        run_dir = Path(runs) / folder / row.name
        # the row's first line (then its epochs, one line each), from rank 0 alone
        if progress is not False and rank_and_world_size()[0] == 0:
            again = " (resuming)" if has_checkpoint(run_dir) else ""
            print(f"{label}: {config.name} in {run_dir}{again}", file=sys.stderr, flush=True)
        if row.translation:
            written.append(_reproduce_nmt(table, row, config, run_dir,
                                          Path(out) / folder / f"{row.name}.json",
                                          budget_minutes, device, progress, source, label))
            continue
        started = time.monotonic()
        trainer = Trainer(config, run_dir, device=device, corpus=corpus,
                          resume=has_checkpoint(run_dir), progress=progress)
        trainer.label = label
        corpus = trainer.corpus if corpus is None else corpus
        status = trainer.fit(max_minutes=budget_minutes)
        metrics, curve = _lm_stage(trainer, corpus, max_eval_tokens,
                                   rank_cap if ranked else _NO_RANK)
        doc = _result_doc(
            table, row, config, trainer, source, status=_status(status.reason),
            epochs_done=status.epoch, budget_minutes=budget_minutes,
            precision=precision_label(trainer.precision), metrics=metrics,
            curve=curve)
        path = Path(out) / folder / f"{row.name}.json"
        if row.finetunes and status.reason == "done":
            left = (None if budget_minutes is None
                    else budget_minutes - (time.monotonic() - started) / 60)
            block = (_finetune_stage(row, run_dir, corpus, device, progress, left,
                                     max_eval_tokens, f"{label} finetune")
                     if left is None or left > 0
                     else _earlier_finetuned(path))  # no time left: keep what was recorded
            if block is not None:
                doc["finetuned"] = block
                if row.paper_dynamic and block["status"] != "budget":
                    doc["dynamic"] = _dynamic_stage(run_dir / "finetune", corpus, device,
                                                    max_eval_tokens)
        written.append(_write(path, doc))
    return written


def _status(reason: str) -> str:
    """A result file's status for a :class:`~drillbook.train.RunStatus` reason."""
    return "budget" if reason in ("budget", "steps") else reason


#: ``_lm_stage(rank_cap=_NO_RANK)``: measure no rank
_NO_RANK = -1


def _lm_stage(trainer, corpus, max_eval_tokens: int | None,
              rank_cap: int | None = _NO_RANK) -> tuple[dict[str, float], list[dict]]:
    """What one training stage (a run folder) measured: seconds per epoch and the learning
    curve from its log; the best validation perplexity and test perplexity of its
    ``best.pt``, and the rank of its test log-probabilities on ``rank_cap`` positions
    (None: all the test evaluation reads; :data:`_NO_RANK`: no rank)."""
    from ..data import batchify
    from ..train import evaluate, load_run, read_log

    run_dir, config = trainer.run_dir, trainer.config
    log = read_log(run_dir) if (run_dir / "log.jsonl").exists() else []
    metrics: dict[str, float] = {}
    if log:
        metrics["seconds_per_epoch"] = sum(r["epoch_seconds"] for r in log) / len(log)
    if (run_dir / "best.pt").exists():
        metrics["val_ppl"] = perplexity(trainer.best_val_loss)
        _, model, _ = load_run(run_dir, corpus=corpus, device=str(trainer.device))
        test = batchify(corpus.test, config.train.test_batch_size).to(trainer.device)
        loss, tokens = evaluate(model, test, config.train.bptt, max_eval_tokens)
        metrics["test_ppl"] = perplexity(loss)
        metrics["test_tokens"] = tokens
        if rank_cap != _NO_RANK:
            metrics.update(_rank(model, test, config.train.bptt, rank_cap))
    curve = [{"epoch": r["epoch"], "val_ppl": r["val_ppl"], "train_ppl": r["train_ppl"],
              "elapsed_seconds": r["elapsed_seconds"]} for r in log]
    return metrics, curve


def _finetune_stage(row: Row, run_dir: Path, corpus, device, progress,
                    minutes: float | None, max_eval_tokens: int | None,
                    label: str = "") -> dict:
    """Fine-tune a finished row (or resume its fine-tuning) for at most ``minutes`` and
    return the result file's ``finetuned`` block."""
    from ..train.lm import finetune_trainer

    out = run_dir / "finetune"
    trainer = finetune_trainer(run_dir, out=out, device=device, corpus=corpus,
                               progress=progress, resume=has_checkpoint(out),
                               lr=finetune_lr(row.config))
    trainer.label = label
    status = trainer.fit(max_minutes=minutes)
    metrics, curve = _lm_stage(trainer, corpus, max_eval_tokens)
    return {"status": _status(status.reason), "epochs_done": status.epoch,
            "steps_done": trainer.step, "wall_seconds": round(trainer.elapsed, 1),
            "lr": trainer.config.train.lr, "metrics": metrics, "curve": curve}


def _dynamic_stage(run_dir: Path, corpus, device, max_eval_tokens: int | None) -> dict:
    """Dynamic evaluation of a stage's ``best.pt`` (the result file's ``dynamic`` block):
    the authors' grid on the validation split, the test split with the best pair, both
    capped at ``max_eval_tokens``. Resumable: the state file stays in the stage's folder,
    and a finished one is read back, not evaluated again."""
    from ..train.dynamic import evaluate_run

    state = run_dir / "dynamic-eval-best-test.pt"
    r = evaluate_run(run_dir, split="test", do_search=True, search_tokens=max_eval_tokens,
                     max_tokens=max_eval_tokens, state_path=state, resume=state.exists(),
                     device=device, corpus=corpus)
    return {"lr": r["lr"], "lamb": r["lamb"], "eps": r["eps"], "bptt": r["bptt"],
            "grad_batches": r["grad_batches"], "finished": r["finished"],
            "metrics": {"val_ppl": r["search"]["valid_ppl"], "test_ppl": r["ppl"],
                        "test_tokens": r["tokens"], "static_test_ppl": r["static_ppl"]}}


def _earlier_finetuned(path: Path) -> dict | None:
    """The ``finetuned`` block an earlier call wrote to ``path``, if any."""
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("finetuned")


def _result_doc(table: str, row: Row, config, trainer, source: dict, *, status: str,
                epochs_done: int, budget_minutes: float | None, precision: str,
                metrics: dict, curve: list) -> dict:
    """The result document of one row (:mod:`.results`): what was run, where, with which
    code, how far it got and what it measured. The papers' numbers are not copied in: the
    report reads them from the record when it shows the row."""
    return {
        "format": RESULT_FORMAT, "table": table, "row": row.name,
        "config_name": config.name, "config": config.to_dict(), "config_hash": config.hash(),
        "seed": config.train.seed, "git_commit": source["commit"],
        "git_dirty": source["dirty"], "device": _device_name(trainer.device),
        "torch": torch.__version__, "cuda": torch.version.cuda, "status": status,
        "epochs_done": epochs_done, "steps_done": trainer.step,
        "wall_seconds": round(trainer.elapsed, 1), "budget_minutes": budget_minutes,
        "precision": precision, "world_size": trainer.world_size,
        "metrics": metrics, "curve": curve,
    }


def _reproduce_nmt(table: str, row: Row, config, run_dir: Path, path: Path,
                   budget_minutes, device, progress, source: dict, label: str = "") -> Path:
    """A translation row: BLEU on the validation and test sets (greedy).

    ``val_bleu`` is the trainer's best validation BLEU on the tokenised text (what selects
    the checkpoint); ``test_bleu`` is the reported, detokenised sacreBLEU
    (:func:`~drillbook.nmt.bleu.multi30k_bleu`), its signature in ``bleu_signature``.
    """
    from ..nmt.bleu import multi30k_bleu
    from ..nmt.train import NMTTrainer, load_nmt_run, translate_pairs
    from ..train import read_log

    resume = has_checkpoint(run_dir)
    trainer = NMTTrainer(config, run_dir, device=device, resume=resume, progress=progress)
    trainer.label = label
    last = trainer.fit(max_minutes=budget_minutes)
    log = read_log(run_dir) if (run_dir / "log.jsonl").exists() else []
    metrics: dict[str, float] = {}
    signature = None
    if (run_dir / "best.pt").exists():
        metrics["val_bleu"] = trainer.best_bleu
        _, model, src_vocab, tgt_vocab = load_nmt_run(run_dir, device=str(trainer.device))
        hyps = translate_pairs(model, trainer.corpus.test, src_vocab, tgt_vocab,
                               device=trainer.device, max_len=config.train.max_len)
        bleu = multi30k_bleu(hyps, split="test", lang=config.data.tgt, download=True)
        metrics["test_bleu"], signature = bleu.score, bleu.signature
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
        precision=precision_label(trainer.precision),
        metrics=metrics,
        curve=[{"epoch": r["epoch"], "val_bleu": r["val_bleu"], "val_loss": r["val_loss"],
                "elapsed_seconds": r["elapsed_seconds"]} for r in log])
    if signature is not None:
        doc["bleu_signature"] = signature
    return _write(path, doc)


def _write(path: Path, doc: dict) -> Path:
    """:func:`write_result`, by rank 0 alone when ``torchrun`` started several
    processes (the others trained beside it)."""
    if rank_and_world_size()[0] != 0:
        return Path(path)
    return write_result(path, doc)


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


def baseline_row(row: str) -> str:
    """The row a speed ratio divides by: ``tied``, or ``<corpus>-awd-lstm`` in the tables
    whose rows are named ``<corpus>-<head>``."""
    for prefix in ("ptb-", "wt2-"):
        if row.startswith(prefix):
            return f"{prefix}awd-lstm"
    return "tied"


#: paper rank columns of the report: metric in the record -> column header
_PAPER_RANKS = {"rank_tol_1": "authors' code (tol 1)", "rank": "DRILL Sec. 4.1.1",
                "rank_test": "DOC Table 5 (test)"}


def render_report(folder: str | Path) -> str:
    """Markdown tables of every result under ``folder``, ours next to the papers'.

    The papers' numbers are read from :mod:`drillbook.papers` now, through the keys of the
    row's :class:`Row` (a ``paper`` field of an old result file is ignored). Rows whose
    paper number is after fine-tuning get fine-tuning columns: our fine-tuned run next to
    that number, our main run next to the paper's before fine-tuning (a dash where the
    paper gives none). Speed ratios divide each row's seconds per epoch by its
    :func:`baseline_row` in the same table; rank columns appear for tables that measured a
    rank. A table with a row run under two or more seeds gets a table across seeds
    (:mod:`drillbook.experiments.seeds`), and the benchmark reports in ``folder/bench``
    give a section on the cost targets
    (:func:`~drillbook.experiments.bench_report.render_targets`).
    Deterministic: the same files give the same bytes (tests check it).
    """
    from .compare import fmt

    docs = load_results(folder)
    by_table: dict[str, list[dict]] = {}
    for doc in docs:
        by_table.setdefault(doc["table"], []).append(doc)
    lines = ["# Reproduction results", "",
             "Generated by `drillbook report` from the result files; do not edit by hand.",
             "The papers' numbers come from `drillbook/papers.py`.", ""]
    for table in sorted(by_table):
        order = [r.name for r in TABLES.get(table, [])]
        rows = sorted(by_table[table], key=lambda d: (order.index(d["row"])
                                                     if d["row"] in order else len(order),
                                                     d["row"]))
        spec = {d["row"]: find_row(table, d["row"]) for d in rows}
        paper = {name: r.paper_values("main") if r else {} for name, r in spec.items()}
        tuned = {name: r.paper_values("finetuned") if r else {} for name, r in spec.items()}
        dyn = {name: r.paper_values("dynamic") if r else {} for name, r in spec.items()}
        has_dyn = any(dyn.values()) or any("dynamic" in d for d in rows)
        unit = "BLEU" if any("val_bleu" in d["metrics"] for d in rows) else "perplexity"
        seconds = {d["row"]: d["metrics"].get("seconds_per_epoch") for d in rows}
        has_ft = any(r and r.finetunes for r in spec.values()) or any(
            "finetuned" in d for d in rows)
        paper_speed = any("seconds_per_epoch" in p or "ratio_to_tied" in p
                          for p in paper.values())
        ranks = [m for m in _PAPER_RANKS if any(m in p for p in paper.values())]
        ranked = bool(ranks) or any("rank_tol_1" in d["metrics"] for d in rows)
        header = ["row", "config", "budget (min)", "status", "epochs", "valid", "test",
                  "paper valid", "paper test"]
        if has_ft:
            header += ["ft status", "ft epochs", "ft valid", "ft test", "paper ft valid",
                       "paper ft test"]
        if has_dyn:
            header += ["dyn valid", "dyn test", "paper dyn valid", "paper dyn test"]
        header += ["s/epoch", "x baseline"]
        if paper_speed:
            header += ["paper s/epoch", "paper x baseline"]
        if ranked:
            header += ["rank (tol 1)", "rank (numpy tol)", "positions",
                       *[_PAPER_RANKS[m] for m in ranks]]
        intro = (f"Metric: {unit}. `paper valid`/`paper test`: the paper's number for the "
                 "main run (before fine-tuning), a dash where the paper gives none.")
        signatures = sorted({d["bleu_signature"] for d in rows if "bleu_signature" in d})
        if signatures:
            intro += (" `valid`: BLEU of the tokenised text (it selects the checkpoint); "
                      "`test`: sacreBLEU of the detokenised translations against the raw "
                      "references, signature " + ", ".join(f"`{s}`" for s in signatures)
                      + ".")
        if has_ft:
            intro += (" `ft`: after AWD-LSTM's fine-tuning stage, our run next to the "
                      "paper's (the papers' headline numbers are after it).")
        if has_dyn:
            intro += (" `dyn`: the fine-tuned run with dynamic evaluation (Krause et al., "
                      "2018; learning rate and lambda searched on the validation split).")
        intro += (" The speed ratio divides by the `tied` (or `<corpus>-awd-lstm`) row of "
                  "the same table. Seconds per epoch are each row's own wall-clock time: "
                  "rows run at different times on a shared machine are not a speed "
                  "comparison (`drillbook bench` measures ratios in one process).")
        lines += [f"## {table}", "", intro, "",
                  "| " + " | ".join([*header, "device"]) + " |",
                  "|" + "---|" * (len(header) + 1)]
        for d in rows:
            m, p, t = d["metrics"], paper[d["row"]], tuned[d["row"]]
            bleu = "val_bleu" in m  # translation rows report BLEU, LM rows perplexity
            valid, test = (("val_bleu", "test_bleu") if bleu else ("val_ppl", "test_ppl"))
            base = seconds.get(baseline_row(d["row"]))
            own = m.get("seconds_per_epoch")
            cells = [d["row"], f"`{d['config_name']}`", fmt(d["budget_minutes"], 0),
                     d["status"], str(d["epochs_done"]), fmt(m.get(valid)),
                     fmt(m.get(test)), fmt(p.get(valid)), fmt(p.get(test))]
            if has_ft:
                ft = d.get("finetuned") or {}
                fm = ft.get("metrics", {})
                cells += [fmt(ft.get("status")), fmt(ft.get("epochs_done")),
                          fmt(fm.get(valid)), fmt(fm.get(test)), fmt(t.get(valid)),
                          fmt(t.get(test))]
            if has_dyn:
                dm, dp = (d.get("dynamic") or {}).get("metrics", {}), dyn[d["row"]]
                cells += [fmt(dm.get(valid)), fmt(dm.get(test)), fmt(dp.get(valid)),
                          fmt(dp.get(test))]
            cells += [fmt(own, 1), fmt(own / base if own and base else None)]
            if paper_speed:
                cells += [fmt(p.get("seconds_per_epoch"), 0), fmt(p.get("ratio_to_tied"), 1)]
            if ranked:
                cells += [fmt(m.get("rank_tol_1")), fmt(m.get("rank_numpy_tol")),
                          fmt(m.get("rank_positions")), *[fmt(p.get(r)) for r in ranks]]
            lines.append("| " + " | ".join([*cells, d["device"]]) + " |")
        lines.append("")
        lines += _seeds_section(folder, table, "test_bleu" if unit == "BLEU" else "test_ppl")
    bench = sorted((Path(folder) / "bench").glob("*.json"))
    if bench:
        from .bench_report import render_targets

        lines += render_targets([_read_bench(path) for path in bench]).splitlines()
    return "\n".join(lines)


def _read_bench(path: Path) -> dict:
    """One benchmark report (``drillbook bench --out``), or a ResultFileError naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(f"benchmark report {path} is not UTF-8 JSON ({err}); rewrite "
                              f"it with `drillbook bench ... --out {path}`") from None


def _seeds_section(folder: str | Path, table: str, metric: str) -> list[str]:
    """The report's lines on ``table`` across seeds (none while no row has two seeds)."""
    spreads = seed_spread(folder, table, metric)
    if not any(s.n >= 2 for s in spreads):
        return []
    name = {"test_ppl": "test perplexity", "test_bleu": "test BLEU"}.get(metric, metric)
    lines = [f"### {table} across seeds", "",
             f"{name.capitalize()} of every seed of a row (`drillbook reproduce {table} "
             f"--rows ROW --seed N` writes `{table}/{SEED_FOLDER}N/ROW.json` beside the "
             "row's own file): mean, sample standard deviation and range. A row with one "
             "seed has no measured spread (a dash). Two rows are resolved when their ranges "
             "do not overlap; two equally good rows of three seeds each are resolved by "
             f"chance with probability {chance_separated(3, 3):.2f}.", "",
             "| row | n | seeds | mean | std | low | high |", "|---|---|---|---|---|---|---|"]
    for r in spread_table(spreads, digits=2):
        lines.append("| " + " | ".join(r[k] for k in ("row", "n", "seeds", "mean", "std",
                                                       "low", "high")) + " |")
    pairs = resolved_pairs(spreads)
    told = [f"{p['lower']} < {p['higher']}" for p in pairs if p["resolved"]]
    lines += ["", f"Pairs of rows with at least two seeds each: {len(pairs)}; resolved "
              f"(ranges do not overlap): {', '.join(told) if told else 'none'}.", ""]
    return lines
