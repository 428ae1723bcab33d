"""One result-file schema for every reproduced table row: a small JSON document,
``results/<table>/<row>.json``, that records what was run, where, with what code, how far
it got and what it measured (:mod:`~drillbook.experiments.results.schema` and
:func:`validate_result` give the fields; both are importable from here). The papers' numbers
are not stored: the report and the book look them up in :mod:`drillbook.papers`. The book's
own result files ship inside the package (:func:`book_results`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...atomic import write_atomic, write_json
from ...configs import task_named_by
from ...errors import MissingFileError, ResultFileError
from ...precision import canonical_precision
from ...provenance import device_kind
from ...train.tasks import Task, task_of
from .schema import DYNAMIC_METRICS as DYNAMIC_METRICS
from .schema import DYNAMIC_REQUIRED as DYNAMIC_REQUIRED
from .schema import FINAL_STATUSES, READABLE_FORMATS, RESULT_FORMAT, validate_result
from .schema import FINETUNED_REQUIRED as FINETUNED_REQUIRED
from .schema import OPTIONAL as OPTIONAL
from .schema import PLATEAU as PLATEAU
from .schema import REQUIRED as REQUIRED

__all__ = ["DYNAMIC_METRICS", "DYNAMIC_REQUIRED", "FINAL_STATUSES",
           "FINETUNED_REQUIRED", "OPTIONAL", "PACK_LIMIT_BYTES", "PLATEAU", "READABLE_FORMATS",
           "REQUIRED", "RESULT_FORMAT", "book_results", "gpu_results", "gpu_union",
           "gpu_windows", "is_final", "load_results", "pack_results", "read_result",
           "result_precision", "result_task", "trained_on", "unpack_results",
           "validate_result", "write_result"]


def write_result(path: str | Path, doc: dict[str, Any]) -> Path:
    """Validate and write ``doc`` atomically (:func:`drillbook.atomic.write_json`)."""
    problems = validate_result(doc)
    if problems:
        raise ValueError(f"not a valid result file ({path}): " + "; ".join(problems))
    return write_json(path, doc, sort_keys=True)


def book_results() -> Path:
    """The folder of result files the book reads, shipped with the package.

    ``drillbook/results/``: ``<table>/<row>.json`` (with ``<table>/seed-<N>/<row>.json``
    for further seeds), ``bench/*.json`` and ``REPORT.md``, the same in a checkout, an
    editable install and a wheel. Read it with :func:`load_results`,
    :func:`~drillbook.experiments.results.compare.table_rows` or
    :func:`~drillbook.experiments.results.report.render_report`; write new runs elsewhere.

    Raises:
        MissingFileError: the installed package lacks its result files.
    """
    from importlib.resources import files

    folder = Path(str(files("drillbook") / "results"))
    if not (folder / "REPORT.md").is_file():
        raise MissingFileError(f"{folder}: the package's result files are missing; "
                               f"reinstall drillbook (pip install --force-reinstall drillbook)")
    return folder


def _holds(folder: Path) -> bool:
    """Whether a table's folder holds a result file, in a seed folder (``seed-<N>/``) or
    not."""
    return any(folder.glob("*.json")) or any(folder.glob("seed-*/*.json"))


def _holds_results(window: Path, table: str | None) -> bool:
    """Whether a window holds result files of ``table``, or of any table (``None``; its
    ``bench/`` reports are not result files, as for :func:`load_results`)."""
    if table is not None:
        return _holds(window / table)
    return any(_holds(t) for t in window.iterdir() if t.is_dir() and t.name != "bench")


def gpu_results(precision: str = "fp32", window: str | None = None,
                table: str | None = None, results: str | Path | None = None) -> Path:
    """A results folder of a GPU window the package ships, ``drillbook/results/gpu/<window>-
    <precision>`` (``window`` like ``2026-11-26-h200``; default: the newest one, by name,
    that holds result files: of ``table`` when one is named, its seed folders included;
    a window of benchmark reports only is passed over),
    read like any results folder (:func:`load_results`, ``drillbook report --results``). A
    window's rows of one precision are kept apart from the other's: the same table and
    row, trained in float32 and in bfloat16, are two results. ``results``: another
    folder holding ``gpu/`` than the book's. The rows of a plan that several windows
    trained are read together with :func:`gpu_union`.

    Raises:
        MissingFileError: no such window.
    """
    root = (Path(results) if results is not None else book_results()) / "gpu"
    found = sorted(p for p in root.glob(f"*-{precision}") if p.is_dir()
                   and (window is None or p.name == f"{window}-{precision}")
                   and ((window is not None and table is None)
                        or _holds_results(p, table)))
    if not found:
        raise MissingFileError(f"no GPU results of precision {precision!r}"
                               + (f" from window {window!r}" if window else "")
                               + (f" with a {table!r} table" if table else "")
                               + f" under {root}; the windows there: "
                               f"{sorted(p.name for p in root.glob('*') if p.is_dir())}")
    return found[-1]


def gpu_windows(precision: str = "fp32", results: str | Path | None = None) -> list[Path]:
    """Every GPU window of ``precision`` the results folder holds (default: the book's),
    oldest first (by name: ``<date>-<device>[-<name>]-<precision>``)."""
    root = (Path(results) if results is not None else book_results()) / "gpu"
    return sorted(p for p in root.glob(f"*-{precision}") if p.is_dir())


def is_final(doc: dict[str, Any]) -> bool:
    """Whether a result file's row is over: it trained every epoch or reached its plateau
    (:data:`FINAL_STATUSES`), nothing is pending, and a row that fine-tunes has a
    fine-tuned block that ended too."""
    if doc.get("status") not in FINAL_STATUSES or doc.get("pending"):
        return False
    block = doc.get("finetuned")
    return block is None or block.get("status") in ("converged", *FINAL_STATUSES)


def gpu_union(table: str, precision: str = "fp32", results: str | Path | None = None,
              extra: Sequence[str | Path] = ()) -> list[dict[str, Any]]:
    """The rows of ``table`` that successive GPU windows of ``precision`` trained, as one
    table: for each row and seed, the newest window's file that is final
    (:func:`is_final`), else the newest window's file; each document's ``window`` names
    the window that wrote it (its folder's name without the precision, where the file
    does not say). ``extra``: further results folders read after the windows (the folder
    a running window writes to), named as their folder. Sorted by row (the table's order)
    and seed.

    Raises:
        ResultFileError: a file breaks the schema.
    """
    from ..tables import table_of

    folders = [*gpu_windows(precision, results), *map(Path, extra)]
    chosen: dict[tuple[str, int], dict[str, Any]] = {}
    for folder in folders:
        base = folder / table
        paths = sorted(base.glob("*.json")) + sorted(base.glob("seed-*/*.json"))
        for path in paths:
            doc = read_result(path)
            if result_precision(doc) != canonical_precision(precision) and folder in extra:
                continue
            doc.setdefault("window", folder.name.removesuffix(f"-{precision}"))
            key = (doc["row"], doc["seed"])
            old = chosen.get(key)
            if old is None or is_final(doc) or not is_final(old):
                chosen[key] = doc
    order = table_of(table).order
    return sorted(chosen.values(), key=lambda d: (order(d["row"]), d["row"], d["seed"]))


#: the largest archive :func:`pack_results` writes (the evidence of a GPU window must
#: travel as one small file)
PACK_LIMIT_BYTES = 16 * 2**20


def pack_results(folder: str | Path, archive: str | Path,
                 tables: Sequence[str] | None = None) -> Path:
    """Every result file under ``folder`` (of ``tables`` only, if given; their seed
    folders included) and its benchmark reports, in one ``.tar.gz`` whose paths are those
    under ``folder``: unpacked into a folder, it reads as a results folder
    (``drillbook report --results``). Written atomically; the same files give the same
    bytes.

    Raises:
        ResultFileError: the archive would exceed :data:`PACK_LIMIT_BYTES` (nothing is
            written), or there is nothing to pack.
    """
    import gzip
    import io
    import tarfile

    folder = Path(folder)
    names = sorted({p.relative_to(folder).as_posix() for pattern in ("*/*.json", "*/*/*.json")
                    for p in folder.glob(pattern)
                    if tables is None or p.relative_to(folder).parts[0] in (*tables, "bench")})
    if not names:
        raise ResultFileError(f"no result files under {folder} to pack; run `drillbook "
                              f"reproduce TABLE --out {folder}` first")
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            data = (folder / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    if buffer.tell() > PACK_LIMIT_BYTES:
        raise ResultFileError(f"the result files under {folder} pack to "
                              f"{buffer.tell() / 2**20:.1f} MiB, over the "
                              f"{PACK_LIMIT_BYTES // 2**20} MiB an archive may hold; pack "
                              f"fewer tables (--pack with fewer rows)")
    try:
        return write_atomic(archive, buffer.getvalue())
    except OSError as err:
        raise ResultFileError(f"could not write the archive {archive} "
                              f"({err.strerror or err}); the result files under {folder} "
                              f"are kept: pack them into another --pack FILE.tar.gz") from None


def unpack_results(archive: str | Path, folder: str | Path) -> Path:
    """Unpack a :func:`pack_results` archive into ``folder``, a results folder; only plain
    files under it are written (an entry that points elsewhere is refused)."""
    import tarfile
    import zlib

    folder = Path(folder)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                target = (folder / member.name).resolve()
                if not member.isfile() or folder.resolve() not in target.parents:
                    raise ResultFileError(f"{archive}: {member.name!r} is not a result file "
                                          f"of the archive's folder; pack results with "
                                          f"`drillbook reproduce ... --pack`")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        if isinstance(err, OSError) and not isinstance(err, tarfile.TarError | EOFError) \
                and err.errno is not None:  # the disk, not the archive
            raise
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ResultFileError(f"{archive} is not a readable results archive ({reason}); "
                              f"pack one again with `drillbook reproduce TABLE --pack "
                              f"FILE.tar.gz`, or give --results the folder it came "
                              f"from") from None
    return folder


def load_results(folder: str | Path) -> list[dict[str, Any]]:
    """Every ``<table>/<row>.json`` under ``folder`` (sorted), each validated.

    A folder that does not exist, or holds no result files, gives an empty list.

    Raises:
        ResultFileError: a file is not UTF-8 JSON or breaks the schema; the one-line
            message names the file, what is wrong and how to rewrite it. (A ``ValueError``.)
    """
    docs = []
    for path in sorted(Path(folder).glob("*/*.json")):
        if path.parent.name in ("bench", "authors"):
            continue  # benchmark reports and the authors' data (drillbook.authors) have theirs
        docs.append(read_result(path))
    return docs


def read_result(path: str | Path) -> dict[str, Any]:
    """One result file, parsed and validated (:class:`ResultFileError` naming it if not)."""
    path = Path(path)
    fix = (f"rewrite it with `drillbook reproduce {path.parent.name} --rows {path.stem}`, "
           f"or move it out of the results folder")
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as err:
        raise ResultFileError(f"result file {path} is not UTF-8 text (byte {err.start}: "
                              f"{err.reason}); {fix}") from None
    except json.JSONDecodeError as err:
        raise ResultFileError(f"result file {path} is not valid JSON ({err.msg} at line "
                              f"{err.lineno}, column {err.colno}); {fix}") from None
    problems = validate_result(doc)
    if problems:
        raise ResultFileError(f"result file {path} is not a valid {RESULT_FORMAT} document: "
                              + "; ".join(problems) + f"; {fix}")
    return doc


def result_task(doc: dict[str, Any]) -> Task:
    """The task a result file's row trained (:class:`~drillbook.train.tasks.Task`): the
    ``task`` its stored config names (:func:`~drillbook.configs.task_named_by`; a file of
    a failed row may store an empty config, a language model's). What a reader asks of it
    instead of guessing from the metrics: the metric's name and key, whether the row
    fine-tunes, ranks or decodes."""
    return task_of(task_named_by(doc.get("config") or {}))


def trained_on(doc: dict[str, Any]) -> str:
    """Where a result file's row trained: ``cpu`` or ``gpu``
    (:func:`drillbook.provenance.device_kind`) over all its sittings, ``cpu+gpu`` for one
    that moved between them; a file without sittings by its own ``device``."""
    names = [s["device"] for s in doc.get("sittings") or ()] or [doc["device"]]
    return "+".join(sorted({device_kind(name) for name in names}))


def result_precision(doc: dict[str, Any]) -> str:
    """The precision a result file's row trained in, by its one name
    (:data:`drillbook.precision.PRECISIONS`): an old file's label (``bf16-autocast``) read
    as its name, a file written before precisions were recorded as ``fp32``."""
    return canonical_precision(doc.get("precision") or "fp32")
