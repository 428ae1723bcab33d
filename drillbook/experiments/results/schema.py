"""The schema of a result file (``drillbook-result/3``): the fields every document has
(:data:`REQUIRED`), may have (:data:`OPTIONAL`) and carries in its blocks (execution,
fingerprint, plateau, analyses, fine-tuned and dynamic stages), the statuses a row ends with,
and :func:`validate_result`, which lists every way a document breaks it.
:mod:`drillbook.experiments.results.files` writes and reads the files.
"""

from __future__ import annotations

from typing import Any

from ...precision import PRECISIONS, canonical_precision
from ...train.tasks import TASKS

__all__ = ["DYNAMIC_METRICS", "DYNAMIC_REQUIRED", "FINAL_STATUSES",
           "FINETUNED_REQUIRED", "OPTIONAL", "PLATEAU", "READABLE_FORMATS", "REQUIRED",
           "RESULT_FORMAT", "SITTING", "validate_result"]

RESULT_FORMAT = "drillbook-result/3"
#: formats :func:`~drillbook.experiments.results.files.load_results` reads (the first one
#: also carried the paper's numbers; the third added the ``analyses`` block, ``error`` and
#: the statuses of a row that failed)
READABLE_FORMATS = ("drillbook-result/1", "drillbook-result/2", RESULT_FORMAT)

#: field -> allowed Python types (None allowed where listed)
REQUIRED: dict[str, tuple[type, ...]] = {
    "format": (str,),
    "table": (str,),
    "row": (str,),
    "config_name": (str,),
    "config": (dict,),
    "config_hash": (str,),
    "seed": (int,),
    "git_commit": (str, type(None)),
    "device": (str,),
    "torch": (str,),
    "cuda": (str, type(None)),
    "status": (str,),
    "epochs_done": (int,),
    "steps_done": (int,),
    "wall_seconds": (int, float),
    "budget_minutes": (int, float, type(None)),
    "metrics": (dict,),
    "curve": (list,),
}

#: fields a document may lack, checked when present: field -> allowed Python types
OPTIONAL: dict[str, tuple[type, ...]] = {
    "bleu_signature": (str,),  # sacrebleu's signature of a translation row's test_bleu
    "precision": (str,),  # fp32, bf16, fp16 or tf32 (old files: their labels)
    "world_size": (int,),  # processes that trained together
    "error": (str,),  # why a row failed (status failed, out-of-memory or deadline)
    # what the chapters draw beyond the metrics (the keys the tasks declare,
    # drillbook.train.tasks.registry.Task.analyses_keys)
    "analyses": (dict,),
    # what a row was still measuring (rank, analyses) when it wrote this file: the file
    # of a row that the deadline stopped after its test metric and before the rest
    "pending": (list,),
    # a row trained to its plateau (train.plateau_epochs): the rule and whether it was
    # reached (PLATEAU), or whether the row stopped first (its epochs, its budget, the
    # deadline)
    "plateau": (dict,),
    # how the row was run (EXECUTION): alone or beside other rows, as a process or in one
    # process with them, graphed or eager; files written before it was recorded lack it
    "execution": (dict,),
    # the GPU window (or other run) that wrote it: results of successive windows
    # accumulate into one table (drillbook.experiments.results.union)
    "window": (str,),
    # the numerical fingerprint of the training code (FINGERPRINT; drillbook.experiments.
    # results.fingerprint): rows of one table are comparable when their digests agree
    "fingerprint": (dict,),
    # where and with which code each stretch of the row's training ran (SITTING), oldest
    # first: a row continued from its checkpoint keeps its earlier sittings; files
    # written before it was recorded lack it
    "sittings": (list,),
}

#: the fields of an ``execution`` block
EXECUTION: dict[str, tuple[type, ...]] = {
    "way": (str,),  # process, process-mps, graphs-on-streams, interleaved-eager
    "rows": (int,),  # rows sharing the device, itself included
    "graphed": (bool,),  # its steps replayed from CUDA graphs
}

#: the fields of each of a ``sittings`` list's entries (each may also have ``execution``,
#: and ``partial``: true where it stands for the sittings of a file written before the list
#: existed, which kept only its last sitting's provenance)
SITTING: dict[str, tuple[type, ...]] = {
    "git_commit": (str, type(None)),
    "git_dirty": (bool, type(None)),
    "device": (str, type(None)),
    "epochs": (list,),  # [first, last]: the epochs it trained (last < first: none)
    "budget_minutes": (int, float, type(None)),
}

#: the fields of a ``fingerprint`` block
FINGERPRINT: dict[str, tuple[type, ...]] = {
    "digest": (str,),  # 16 hex digits
    "losses": (list,),  # the tiny run's losses, rounded
    "loss_path": (str,),  # fused or plain
    "version": (int,),  # what the tiny run is
}

#: the fields of a ``plateau`` block
PLATEAU: dict[str, tuple[type, ...]] = {
    "epochs": (int,),  # the rule's window E
    "tolerance": (int, float),  # its relative improvement
    "rule": (str,),  # the rule in words
    "reached": (bool,),  # the rule ended the row (status "plateau")
}

#: fields of the optional ``finetuned`` block
FINETUNED_REQUIRED: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "epochs_done": (int,),
    "steps_done": (int,),
    "wall_seconds": (int, float),
    "lr": (int, float),
    "metrics": (dict,),
    "curve": (list,),
}

#: fields of the optional ``dynamic`` block
DYNAMIC_REQUIRED: dict[str, tuple[type, ...]] = {
    "lr": (int, float),
    "lamb": (int, float),
    "eps": (int, float),
    "bptt": (int,),
    "grad_batches": (int, type(None)),
    "finished": (bool,),
    "metrics": (dict,),
}
#: the metrics a ``dynamic`` block must have (the report reads them)
DYNAMIC_METRICS = ("val_ppl", "test_ppl", "test_tokens", "static_test_ppl")

#: a finished or stopped row's statuses, then those of a row that could not end normally:
#: an error, the device's memory, or the deadline of ``reproduce --deadline-minutes``
STATUSES = ("done", "plateau", "budget", "epochs", "failed", "out-of-memory", "deadline")
#: the statuses of a row whose training is over: every epoch, or its stopping rule
FINAL_STATUSES = ("done", "plateau")
FINETUNED_STATUSES = ("converged", *STATUSES)


def validate_result(doc: Any) -> list[str]:
    """Every way ``doc`` breaks the schema (an empty list when it is valid).

    A result file is a small JSON document, ``results/<table>/<row>.json``, written by
    :func:`drillbook.experiments.run.reproduce.reproduce` when a row finishes or stops at its
    budget. It records what was run (the full resolved config and its hash, the seed), where
    and with what (git commit, device, torch and CUDA versions), how far it got (epochs,
    steps, wall seconds, the budget), what it measured and the learning curve.

    A row whose paper number is after AWD-LSTM's fine-tuning also has a ``finetuned`` block,
    once its main run is done: the same measurements for the fine-tuning stage (``status``,
    ``epochs_done``, ``steps_done``, ``wall_seconds``, ``lr``, ``metrics``, ``curve``; its
    status may also be ``converged``, stopped at its non-monotone trigger). A row compared
    with dynamic evaluation (Krause et al., 2018) then has a ``dynamic`` block too, written by
    :func:`drillbook.experiments.run.reproduce.reproduce` once fine-tuning has ended: the pair
    ``lr``, ``lamb`` chosen on the validation split, ``eps``, ``bptt``, ``grad_batches``
    (``None``: all of them), ``finished`` and ``metrics`` (``val_ppl``, ``test_ppl``,
    ``test_tokens``, ``static_test_ppl``).

    A translation row also has ``bleu_signature``: sacrebleu's signature of its ``test_bleu``
    (:func:`drillbook.nmt.bleu.multi30k_bleu`); files written before it existed, without it,
    stay valid.

    The papers' numbers are not stored: the report and the book look them up in
    :mod:`drillbook.papers` when they display a row, so a corrected paper number never leaves
    a stale copy behind. Files of the first format (``drillbook-result/1``) still load; their
    ``paper`` field is ignored.

    The book's own result files ship inside the package, in ``drillbook/results/``
    (:func:`~drillbook.experiments.results.files.book_results`), so a chapter finds them
    wherever the package is installed; new runs write to a folder of the user's
    (``results/`` in the current directory by default).
    """
    if not isinstance(doc, dict):
        return [f"expected a JSON object, got {type(doc).__name__}"]
    problems = _check_fields(doc, REQUIRED, "", STATUSES)
    problems += _check_types(doc, {k: t for k, t in OPTIONAL.items() if k in doc}, "")
    if isinstance(doc.get("precision"), str) and canonical_precision(
            doc["precision"]) not in PRECISIONS:
        problems.append(f"precision {doc['precision']!r} is not one of {list(PRECISIONS)}")
    if doc.get("format") not in (None, *READABLE_FORMATS):
        problems.append(f"format {doc.get('format')!r} is not one of {READABLE_FORMATS}")
    if "finetuned" in doc:
        block = doc["finetuned"]
        if isinstance(block, dict):
            problems += _check_fields(block, FINETUNED_REQUIRED, "finetuned.",
                                      FINETUNED_STATUSES)
        else:
            problems.append(f"field 'finetuned' must be a dict, got {block!r}")
    if "dynamic" in doc:
        problems += _check_dynamic(doc["dynamic"])
    for name, fields in (("plateau", PLATEAU), ("execution", EXECUTION),
                         ("fingerprint", FINGERPRINT)):
        if isinstance(doc.get(name), dict):
            problems += _check_block(doc[name], fields, f"{name}.")
    if isinstance(doc.get("analyses"), dict):
        problems += _check_analyses(doc)
    if isinstance(doc.get("sittings"), list):
        for i, sitting in enumerate(doc["sittings"]):
            where = f"sittings[{i}]"
            if not isinstance(sitting, dict):
                problems.append(f"field '{where}' must be a dict, got {sitting!r}")
                continue
            problems += _check_block(sitting, SITTING, f"{where}.")
    return problems


def _check_analyses(doc: dict[str, Any]) -> list[str]:
    """The problems of an ``analyses`` block: keys no task declares
    (:attr:`~drillbook.train.tasks.registry.Task.analyses_keys`), values of other types."""
    block = doc["analyses"]
    known = {k: types for task in TASKS.values() for k, types in task.analyses_keys.items()}
    return ([f"unknown analysis 'analyses.{k}'" for k in block if k not in known]
            + _check_types(block, {k: known[k] for k in block if k in known}, "analyses."))


def _check_dynamic(block: Any) -> list[str]:
    """The problems of a ``dynamic`` block: its fields, their types and its metrics."""
    if not isinstance(block, dict):
        return [f"field 'dynamic' must be a dict, got {block!r}"]
    problems = _check_block(block, DYNAMIC_REQUIRED, "dynamic.")
    metrics = block.get("metrics")
    if isinstance(metrics, dict):
        problems += [f"missing metric 'dynamic.metrics.{name}'" for name in DYNAMIC_METRICS
                     if name not in metrics]
        problems += [f"dynamic.metric {name!r} must be a number, got {value!r}"
                     for name, value in metrics.items()
                     if not isinstance(value, (int, float)) or isinstance(value, bool)]
    return problems


def _check_fields(doc: dict[str, Any], required: dict[str, tuple[type, ...]], where: str,
                  statuses: tuple[str, ...]) -> list[str]:
    """The problems of one level of a result document: its required fields and types, its
    status, its metrics (numbers) and its curve (dicts with an epoch)."""
    problems = _check_block(doc, required, where)
    if "status" in doc and doc["status"] not in statuses:
        problems.append(f"{where}status {doc['status']!r} is not one of {statuses}")
    metrics, curve = doc.get("metrics"), doc.get("curve")
    for name, value in (metrics.items() if isinstance(metrics, dict) else ()):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            problems.append(f"{where}metric {name!r} must be a number, got {value!r}")
    for point in (curve if isinstance(curve, list) else ()):
        if not isinstance(point, dict) or "epoch" not in point:
            problems.append(f"{where}curve points must be dicts with an 'epoch', got {point!r}")
            break
    return problems


def _check_block(block: dict[str, Any], fields: dict[str, tuple[type, ...]],
                 where: str) -> list[str]:
    """The problems of ``block``'s ``fields`` (named ``where`` + field): each one missing,
    and each one of another type (:func:`_check_types`)."""
    return ([f"missing field {where + key!r}" for key in fields if key not in block]
            + _check_types(block, {k: t for k, t in fields.items() if k in block}, where))


def _check_types(doc: dict[str, Any], fields: dict[str, tuple[type, ...]],
                 where: str) -> list[str]:
    """The fields of ``doc`` (all present) whose value has none of the allowed types (a
    bool is no int here)."""
    return [f"field {where + key!r} has type {type(doc[key]).__name__}, expected "
            f"{' or '.join(t.__name__ for t in types)}"
            for key, types in fields.items()
            if not isinstance(doc[key], types) or (isinstance(doc[key], bool)
                                                    and bool not in types)]
