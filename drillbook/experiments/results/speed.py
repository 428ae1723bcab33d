"""DRILL's Table 3 on a GPU window: seconds per epoch of the ``speed`` table's rows as the
package measured them there, beside the paper's, the authors' logs of their own runs on
GTX 1080 Ti GPUs, and the authors' code timed on the same GPU (:func:`speed_rows`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...papers import RECORD
from ..tables import TABLES
from .authors_code import PACKAGE_ROWS, authors_code_timings

__all__ = ["first_epochs", "speed_rows"]


def first_epochs(window: str | Path | None) -> dict[str, dict[str, float]]:
    """Row -> its first epoch's training ``seconds`` and ``updates`` in a GPU window's
    results folder: from the row's ``logs/<row>.log.jsonl`` (one line per epoch), else
    from its ``speed/<row>.json`` result file; empty for ``None``."""
    window = Path(window) if window is not None else None
    out = {}
    for path in sorted(window.glob("logs/*.log.jsonl")) if window is not None else []:
        record = json.loads(path.read_text().splitlines()[0])
        out[path.name.removesuffix(".log.jsonl")] = {"seconds": record["epoch_seconds"],
                                                     "updates": record["batches"]}
    for path in sorted(window.glob("speed/*.json")) if window is not None else []:
        doc = json.loads(path.read_text())
        out.setdefault(doc["row"], {"seconds": doc["metrics"]["seconds_per_epoch"],
                                    "updates": doc["steps_done"] // max(doc["epochs_done"], 1)})
    return out


def speed_rows(fp32: str | Path, bf16: str | Path | None = None) -> list[dict[str, Any]]:
    """One dict per row of the ``speed`` table that the window measured in float32
    (``fp32``, a window's results folder; its ``logs/`` hold each row's first epoch).

    Keys: ``row``; ``seconds_per_epoch`` (training only), ``updates``, ``ms_per_update``
    and ``ratio`` (to the AWD-LSTM row of its corpus) in float32; ``bf16_seconds_per_epoch``
    where ``bf16`` measured it; the paper's ``paper_seconds_per_epoch`` and
    ``paper_ratio`` (DRILL Sec. 4.1.1, from the record); ``repo_seconds_per_epoch`` and
    ``repo_ratio``, the means of the authors' own logs on GTX 1080 Ti GPUs (training and
    validation); and, where the authors' code was timed on the same GPU,
    ``authors_ms_per_batch`` (steady median) and ``ms_per_update / authors``.
    """
    fp32 = Path(fp32)
    ours, half = first_epochs(fp32), first_epochs(bf16)
    authors = {PACKAGE_ROWS.get(r["run"]): r for r in authors_code_timings(
        fp32 / "authors-code")}
    rows, table = [], TABLES["speed"]
    for spec in table:
        if spec.name not in ours:
            continue
        baseline = table.baseline_of(spec.name)
        mine, base = ours[spec.name], ours.get(baseline)
        paper = RECORD[f"drill:sec4.1.1:{spec.name}-speed"].values
        repo = RECORD[f"drill-repo:speed:{spec.name}"]["seconds_per_epoch"]
        repo_base = RECORD[f"drill-repo:speed:{baseline}"]["seconds_per_epoch"]
        paper_base = RECORD[f"drill:sec4.1.1:{baseline}-speed"].values
        ms = 1000 * mine["seconds"] / mine["updates"]
        theirs = authors.get(spec.name, {}).get("steady_ms_per_batch")
        rows.append({
            "row": spec.name, "seconds_per_epoch": mine["seconds"],
            "updates": mine["updates"], "ms_per_update": ms,
            "ratio": mine["seconds"] / base["seconds"] if base else None,
            "bf16_seconds_per_epoch": half.get(spec.name, {}).get("seconds"),
            "paper_seconds_per_epoch": paper.get("seconds_per_epoch"),
            "paper_ratio": paper.get("ratio_to_tied") or (
                paper["seconds_per_epoch"] / paper_base["seconds_per_epoch"]
                if "seconds_per_epoch" in paper and "seconds_per_epoch" in paper_base
                and spec.name != baseline else None),
            "repo_seconds_per_epoch": repo, "repo_ratio": repo / repo_base,
            "authors_ms_per_batch": theirs,
            "ratio_to_authors": ms / theirs if theirs else None,
        })
    return rows
