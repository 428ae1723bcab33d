"""What follows a job's training (:func:`finish_job`): its test evaluation, rank and
analyses, and where its row has them its fine-tuning and dynamic evaluation, each stage's
metrics read from its run folder (:func:`stage_metrics`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ...analysis import rank_of
from ...configs import finetune_lr
from ...provenance import device_name
from ...train.loop import RunStatus, TrainingLoop
from ...train.run_files import BEST, LOG, has_checkpoint, read_log
from ...train.tasks import Task, task_of
from ..results.analyses import result_analyses
from ..results.files import FINAL_STATUSES
from ..tables import Row
from .documents import (
    earlier_finetuned,
    record_sittings,
    result_doc,
    result_status,
    sittings,
    write_doc,
)
from .jobs import NO_RANK, Job

__all__ = ["finish_job", "keep_sitting", "stage_metrics"]


def finish_job(job: Job, trainer: TrainingLoop, status: RunStatus, path: Path, source: dict,
               *, name: str, device, data, progress, budget_minutes, max_eval_tokens,
               rank_cap, execution: dict, started: float) -> dict:
    """What follows a job's training (its ``trainer`` ended with ``status``): its test
    evaluation, rank and analyses, its fine-tuning and dynamic evaluation where its row
    has them (within what is left of ``budget_minutes`` since ``started``); its result
    document. A file with the test metric is written as soon as it is known."""
    config, row, task = job.config, job.row, task_of(job.config)
    run_dir = trainer.run_dir
    # read before this sitting writes its own file (its test metric comes early)
    stretches = keep_sitting(job, trainer, path, source, last_epoch=status.epoch,
                             budget_minutes=budget_minutes, execution=execution)

    def document(metrics: dict, curve: list, extra: dict) -> dict:
        doc = result_doc(job.table, row, config, trainer, source,
                          status=result_status(status.reason), epochs_done=status.epoch,
                          budget_minutes=budget_minutes, metrics=metrics, curve=curve)
        doc.update(extra)
        doc["execution"] = execution
        doc["sittings"] = stretches
        return doc

    def early(metrics: dict, curve: list, extra: dict, pending: list[str]) -> None:
        finetuned = earlier_finetuned(path) if row.finetunes else None
        write_doc(path, {**document(metrics, curve, extra), "pending": pending,
                      **({"finetuned": finetuned} if finetuned is not None else {})})

    metrics, curve, extra = stage_metrics(task, trainer, status, data, max_eval_tokens,
                                           rank_cap, analyses=True, early=early)
    doc = document(metrics, curve, extra)
    if row.finetunes and status.reason in FINAL_STATUSES:
        left = (None if budget_minutes is None
                else budget_minutes - (time.monotonic() - started) / 60)
        block = (finetune_stage(task, row, run_dir, data, device, progress, left,
                                 max_eval_tokens, f"{name} finetune")
                 if left is None or left > 0
                 else earlier_finetuned(path))  # no time left: keep what was recorded
        if block is not None:
            doc["finetuned"] = block
            if row.paper_dynamic and block["status"] != "budget":
                doc["dynamic"] = dynamic_stage(run_dir / "finetune", data, device,
                                                max_eval_tokens)
    return doc


def keep_sitting(job: Job, trainer: TrainingLoop, path: Path, source: dict, *,
                 last_epoch: int, budget_minutes, execution: dict) -> list[dict]:
    """The row's :func:`~.documents.sittings` with this one last (the epochs it completed,
    to ``last_epoch``), recorded in its run folder beside the checkpoint: at the end of a
    sitting, and when a signal stops one (its step is saved, and so is where and with
    which code it trained, for the sitting that continues it)."""
    stretches = sittings(path, job, {
        "git_commit": source["commit"], "git_dirty": source["dirty"],
        "device": device_name(trainer.device),
        "epochs": [trainer.epochs_before + 1, last_epoch],
        "budget_minutes": budget_minutes, "execution": execution}, trainer.run_dir)
    if has_checkpoint(trainer.run_dir):  # a run that saved nothing keeps no folder
        record_sittings(trainer.run_dir, job, stretches)
    return stretches


def stage_metrics(task: Task, trainer: TrainingLoop, status: RunStatus, data,
                   max_eval_tokens: int | None, rank_cap: int | None = NO_RANK,
                   analyses: bool = False,
                   early: Callable[[dict, list, dict, list[str]], None] | None = None
                   ) -> tuple[dict[str, float], list[dict], dict[str, Any]]:
    """What one training stage (a run folder) measured: seconds per epoch (and per step)
    and the learning curve from its log; the best validation metric and the test metric of
    its ``best.pt`` with the size of its output layer; and the rank of a language model's
    test log-probabilities on ``rank_cap`` positions (None: all the test evaluation reads;
    :data:`NO_RANK`: no rank), with the device's peak memory on CUDA. Returns ``(metrics,
    curve, extra)``, ``extra`` the result's top-level fields (a translation's
    ``bleu_signature``, and with ``analyses`` the task's ``analyses`` block of the test
    split, :func:`~drillbook.experiments.results.analyses.result_analyses`).

    ``early(metrics, curve, extra, pending)`` is called once the test metric is known and
    before the rank and the analyses (``pending`` names them), which can take long (a
    float64 SVD): a row stopped at a deadline meanwhile keeps its test metric."""
    run_dir, config, key = trainer.run_dir, trainer.config, task.metric_key
    log = read_log(run_dir) if (run_dir / LOG).exists() else []
    metrics: dict[str, float] = {}
    extra: dict[str, Any] = {}
    if log:
        metrics["seconds_per_epoch"] = sum(r["epoch_seconds"] for r in log) / len(log)
    steps = [r["seconds_per_step"] for r in log if r.get("seconds_per_step")]
    if steps:
        metrics["seconds_per_step"] = sum(steps) / len(steps)
    if (run_dir / BEST).exists():
        metrics[f"val_{key}"] = task.best_value(status)
        run = task.load_run(run_dir, config, device=str(trainer.device), corpus=data)
        result = task.evaluate(run, "test", data=data, max_items=max_eval_tokens)
        metrics[f"test_{key}"] = result[key]
        metrics.update({f"test_{n}": result[n] for n in ("tokens", "sentences") if n in result})
        metrics["output_layer_params"] = run.model.head.param_counts().dedicated
        signature = task.signature
        if signature is not None and signature.key in result:  # how it was computed
            extra[signature.key] = result[signature.key]
        pending = [name for name, due in (("rank", rank_cap != NO_RANK),
                                          ("analyses", analyses)) if due]
        if early is not None and pending:
            early(dict(metrics), task.curve(log), dict(extra), pending)
        if rank_cap != NO_RANK:  # a table that ranks streams (checked by table_jobs)
            test = task.split_stream(config, data, "test").to(trainer.device)
            metrics.update(rank_of(run.model, test, config.train.bptt, rank_cap))
        if analyses:
            extra["analyses"] = result_analyses(run, "test", data=data,
                                                max_items=max_eval_tokens)
    if trainer.device.type == "cuda":
        metrics["peak_gpu_memory_bytes"] = torch.cuda.max_memory_allocated(trainer.device)
    return metrics, task.curve(log), extra


def finetune_stage(task: Task, row: Row, run_dir: Path, corpus, device, progress,
                    minutes: float | None, max_eval_tokens: int | None,
                    label: str = "") -> dict:
    """Fine-tune a finished row (or resume its fine-tuning) for at most ``minutes`` and
    return the result file's ``finetuned`` block."""
    out = run_dir / "finetune"
    trainer = task.finetune_trainer(run_dir, out=out, device=device, corpus=corpus,
                                    progress=progress, resume=has_checkpoint(out),
                                    lr=finetune_lr(row.config))
    trainer.label = label
    status = trainer.fit(max_minutes=minutes)
    metrics, curve, _ = stage_metrics(task, trainer, status, corpus, max_eval_tokens)
    return {"status": result_status(status.reason), "epochs_done": status.epoch,
            "steps_done": trainer.step, "wall_seconds": round(trainer.elapsed, 1),
            "lr": trainer.config.train.lr, "metrics": metrics, "curve": curve}


def dynamic_stage(run_dir: Path, corpus, device, max_eval_tokens: int | None) -> dict:
    """Dynamic evaluation of a stage's ``best.pt`` (the result file's ``dynamic`` block):
    the authors' grid on the validation split, the test split with the best pair, both
    capped at ``max_eval_tokens``. Resumable: the state file stays in the stage's folder,
    and a finished one is read back, not evaluated again."""
    from ...train.dynamic import evaluate_run

    state = run_dir / "dynamic-eval-best-test.pt"
    r = evaluate_run(run_dir, split="test", do_search=True, search_tokens=max_eval_tokens,
                     max_tokens=max_eval_tokens, state_path=state, resume=state.exists(),
                     device=device, corpus=corpus)
    return {"lr": r["lr"], "lamb": r["lamb"], "eps": r["eps"], "bptt": r["bptt"],
            "grad_batches": r["grad_batches"], "finished": r["finished"],
            "metrics": {"val_ppl": r["search"]["valid_ppl"], "test_ppl": r["ppl"],
                        "test_tokens": r["tokens"], "static_test_ppl": r["static_ppl"]}}


