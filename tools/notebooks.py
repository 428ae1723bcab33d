"""Keep the notebook pairs honest.

    python tools/notebooks.py check   every .py has its .ipynb (and back), their inputs
                                      agree cell by cell (type, source, tags), the Colab
                                      badge and install cell name the repository of
                                      _config.yml, every nbval-checked cell has a
                                      stored output to compare with, and the outputs
                                      were produced by the package source checked out
    python tools/notebooks.py times   write each chapter's recorded execution time near its
                                      top and into the README's chapter table
    python tools/notebooks.py sync [NB ...]
                                      rewrite the badge/install URLs from _config.yml,
                                      update each .ipynb's inputs from its .py, then
                                      execute it in place (all notebooks, or those named)

The check compares contents, not modification times, so it means the same in a fresh
clone as on the author's machine.

Provenance: when sync executes a notebook, it asks the kernel, after the last cell, which
``drillbook`` modules it imported, and records in the notebook's metadata
(``metadata.drillbook.sources``) the sha256 of each module's file, keyed by its path from
the repository root, and the kernel's torch version (``metadata.drillbook.torch``). The
check hashes those files again: a package file that changed (a ``show_source`` output is
one of its outputs), was renamed or deleted since, or a notebook with nothing recorded,
means the outputs on the page may not be what today's code gives, and the notebook must be
executed again. Only the modules the notebook imported count, so editing a head that one
chapter never imports leaves the other chapters current.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import yaml
from jupytext.cli import jupytext as jupytext_cli
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
CHECK_TAG = "nbval-check-output"
CHECK_COMMENT = "# NBVAL_CHECK_OUTPUT"
PACKAGE = "drillbook"
#: the seconds one cell may run before sync gives up
CELL_TIMEOUT = 900
#: torch's CPU threads (``OMP_NUM_THREADS``) in the kernel that records the outputs; `make
#: test` checks them with another count (the Makefile's ``CHECK_THREADS``), so that every
#: test run executes the checked cells under a second summation order
RECORD_THREADS = 2
#: run in the kernel after the notebook's last cell (never stored in the notebook): the
#: files of the package's modules it imported, and torch's version if it imported torch
PROBE = """\
import json as _json, sys as _sys
_files = {getattr(m, "__file__", None) for n, m in list(_sys.modules.items())
          if n == "drillbook" or n.startswith("drillbook.")}
print(_json.dumps({"files": sorted(f for f in _files if f),
                   "torch": getattr(_sys.modules.get("torch"), "__version__", None)}))
"""


def repository(root: Path) -> tuple[str, str]:
    """(url, branch) of the repository, from _config.yml: the one place it is kept."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    repo = config.get("repository", {})
    url, branch = repo.get("url", "").rstrip("/"), repo.get("branch", "")
    if not url.startswith("https://github.com/") or not branch:
        raise SystemExit("_config.yml: repository.url must be a https://github.com/ URL "
                         "and repository.branch must be set")
    return url, branch


def expected_links(root: Path, nb_path: Path) -> dict[str, str]:
    url, branch = repository(root)
    slug = url.removeprefix("https://github.com/")
    rel = nb_path.relative_to(root).with_suffix(".ipynb").as_posix()
    return {
        "badge": f"https://colab.research.google.com/github/{slug}/blob/{branch}/{rel}",
        "install": f"git+{url}@{branch}",
    }


_BADGE = re.compile(r"https://colab\.research\.google\.com/github/[^)\s]+\.ipynb")
_INSTALL = re.compile(r"git\+https://github\.com/[^\"'\s]+@[\w.\-/]+")


def rewrite_links(text: str, links: dict[str, str]) -> str:
    text = _BADGE.sub(links["badge"], text)
    return _INSTALL.sub(links["install"], text)


def _cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(sorted(c.metadata.get("tags", []))))
            for c in nb.cells]


def check_pair(root: Path, py: Path, readme: str = "") -> list[str]:
    """The pair ``py``/``.ipynb`` agrees (inputs, links, kernelspec, stored outputs of
    checked cells), its outputs come from today's sources, and its time is stated as
    recorded (in the chapter and in ``readme``, the README's text)."""
    problems = []
    ipynb = py.with_suffix(".ipynb")
    if not ipynb.exists():
        return [f"{py.relative_to(root)}: no paired {ipynb.name}"]
    text_nb, json_nb = jupytext.read(py), nbformat.read(ipynb, as_version=4)
    a, b = _cells(text_nb), _cells(json_nb)
    if len(a) != len(b):
        problems.append(f"{py.name}: {len(a)} cells but {ipynb.name} has {len(b)}; "
                        f"run `make sync`")
    for i, (ca, cb) in enumerate(zip(a, b, strict=False)):
        if ca != cb:
            problems.append(f"{py.name}: cell {i} differs from {ipynb.name} "
                            f"({ca[0]}, tags {list(ca[2])}): run `make sync`")
            break
    links = expected_links(root, py)
    first_text = "\n".join(c.source for c in text_nb.cells[:4])
    for key, link in links.items():
        if link not in first_text:
            problems.append(f"{py.name}: the Colab {key} link must be {link} (from "
                            f"_config.yml); run `make sync`")
    if json_nb.metadata.get("kernelspec", {}).get("name") != "python3":
        problems.append(f"{ipynb.name}: kernelspec python3 missing (Colab needs it)")
    for i, cell in enumerate(json_nb.cells):
        checked = CHECK_TAG in cell.metadata.get("tags", []) or CHECK_COMMENT in cell.source
        if checked and (cell.cell_type != "code" or not cell.get("outputs")):
            problems.append(f"{ipynb.name}: cell {i} is nbval-checked but has no stored "
                            f"output; run `make sync`")
    return (problems + check_figures(ipynb, json_nb) + check_lines(py)
            + check_provenance(root, ipynb, json_nb)
            + check_time(root, ipynb, json_nb, readme))


#: the longest line of a chapter's ``.py`` (ruff's limit), cell headers apart: a figure's
#: caption and alt text live in its ``# %% mystnb={...}`` header, on one line
MAX_LINE = 100


def check_lines(py: Path) -> list[str]:
    """One line for each line of ``py`` longer than :data:`MAX_LINE` that is not a cell
    header nor ends in a URL that starts within the limit (ruff leaves the chapters' line
    lengths to this check)."""
    def long(line: str) -> bool:
        url = line.find("http")  # as ruff: a line may end in a URL that starts in time
        ends_in_url = -1 < url < MAX_LINE and not line[url:].split(maxsplit=1)[1:]
        return len(line) > MAX_LINE and not line.startswith("# %%") and not ends_in_url

    return [f"{py.name}:{n}: line of {len(line)} characters (at most {MAX_LINE})"
            for n, line in enumerate(py.read_text(encoding="utf-8").splitlines(), 1)
            if long(line)]


def check_figures(ipynb: Path, nb) -> list[str]:
    """One line for each code cell with an image output that is not a numbered figure
    with alt text: its ``mystnb`` metadata must give ``figure.name`` (for ``{numref}``),
    ``figure.caption`` and ``image.alt`` (the website's figure, its caption and the text a
    screen reader speaks), and the figure must be the cell's only displayed output."""
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not any(
                "image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            continue
        meta = cell.metadata.get("mystnb", {})
        missing = [key for key, value in (
            ("figure.name", meta.get("figure", {}).get("name")),
            ("figure.caption", meta.get("figure", {}).get("caption")),
            ("image.alt", meta.get("image", {}).get("alt"))) if not value]
        rich = [o for o in cell.get("outputs", [])
                if o.get("output_type") in ("display_data", "execute_result")]
        if len(rich) > 1:  # the figure's caption would wrap every one of them
            problems.append(f"{ipynb.name}: cell {i} draws a figure and displays "
                            f"{len(rich) - 1} more output(s); move the table or second "
                            f"figure into a cell of its own")
        if missing:
            problems.append(f"{ipynb.name}: cell {i} draws a figure without "
                            f"{', '.join(missing)} in its mystnb metadata; give its "
                            f"'# %%' line mystnb={{\"figure\": {{\"name\": ..., "
                            f"\"caption\": ...}}, \"image\": {{\"alt\": ...}}}}")
    return problems


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_provenance(root: Path, ipynb: Path, nb) -> list[str]:
    """One line for each package file whose recorded hash no longer matches the file on
    disk (changed, renamed or deleted), or one line if the notebook has no record."""
    name = ipynb.relative_to(root).as_posix()
    fix = f"run make sync NB={ipynb.with_suffix('.py').relative_to(root).as_posix()}"
    sources = nb.metadata.get(PACKAGE, {}).get("sources")
    if not isinstance(sources, dict):
        return [f"{name}: outputs of unknown provenance (no {PACKAGE} sources recorded); "
                f"{fix}"]
    problems = []
    for rel, digest in sorted(sources.items()):
        path = root / rel
        if not path.is_file():
            problems.append(f"{name}: outputs were produced with {rel}, which no longer "
                            f"exists; {fix}")
        elif sha256(path) != digest:
            problems.append(f"{name}: outputs were produced with a different {rel}; {fix}")
    return problems


#: how a chapter states its measured CPU time, near its top: "about 90 s on a 2-core CPU"
_STATED = re.compile(r"about (\d+) s on a (\d+)-core CPU")
#: a stated time may differ from the recorded one by this factor (machines and load vary)
TIME_SLACK = 1.5
#: the most a chapter's CPU profile may take on the 2-core CI machine
CHAPTER_SECONDS = 180


def stated_time(nb) -> tuple[int, int] | None:
    """(seconds, cores) stated in the first markdown cells, or None."""
    text = "\n".join(c.source for c in nb.cells[:4] if c.cell_type == "markdown")
    found = _STATED.search(text)
    return (int(found[1]), int(found[2])) if found else None


def rounded_time(seconds: float) -> int:
    """How a measured time is stated: to 5 s below a minute, else to 10 s."""
    step = 5 if seconds < 60 else 10
    return max(step, int(round(seconds / step) * step))


def check_time(root: Path, ipynb: Path, nb, readme: str) -> list[str]:
    """The chapter states its recorded CPU time near its top and in the README (within
    :data:`TIME_SLACK`), and that time is under :data:`CHAPTER_SECONDS`."""
    name = ipynb.relative_to(root).as_posix()
    record = nb.metadata.get(PACKAGE, {})
    seconds, cpus = record.get("seconds"), record.get("cpus")
    if seconds is None:
        return []  # no record: check_provenance already asks for an execution
    suggestion = f"about {rounded_time(seconds)} s on a {cpus}-core CPU"
    stated = stated_time(nb)
    problems = []
    if stated is None:
        return [f"{name}: state the measured time near the top ('{suggestion}', measured "
                f"{seconds:.0f} s); run make sync NB=... after editing the .py"]
    said, cores = stated
    if cores != cpus or not seconds / TIME_SLACK <= said <= seconds * TIME_SLACK:
        problems.append(f"{name}: states about {said} s on a {cores}-core CPU but its last "
                        f"execution took {seconds:.0f} s on {cpus} cores; say '{suggestion}'")
    if cpus == 2 and seconds > CHAPTER_SECONDS:
        problems.append(f"{name}: its CPU profile took {seconds:.0f} s on 2 cores, over the "
                        f"{CHAPTER_SECONDS} s a chapter may take; shrink the small profile")
    if f"{ipynb.name} | about {said} s" not in readme:
        problems.append(f"{name}: README.md's chapter table must say "
                        f"'{ipynb.name} | about {said} s' as the chapter does")
    return problems


README_TIMES = ("<!-- chapter-times: written by `python tools/notebooks.py times` -->",
                "<!-- /chapter-times -->")


def write_times(root: Path) -> list[str]:
    """State each executed chapter's recorded time near its top (in its .py, replacing the
    number of the statement there) and in the README's chapter table; return the table."""
    rows = ["| chapter | small profile |", "|---|---|"]
    for py in sorted((root / "notebooks").glob("*.py")):
        ipynb = py.with_suffix(".ipynb")
        record = nbformat.read(ipynb, as_version=4).metadata.get(PACKAGE, {})
        if record.get("seconds") is None:
            continue
        said = f"about {rounded_time(record['seconds'])} s on a {record['cpus']}-core CPU"
        text = py.read_text()
        new = _STATED.sub(said, text, count=1)
        if new == text and not _STATED.search(text):
            raise SystemExit(f"{py.name}: no 'about N s on a K-core CPU' statement near its "
                             f"top to update; write one in its first markdown cell")
        py.write_text(new)
        rows.append(f"| {ipynb.name} | about {rounded_time(record['seconds'])} s |")
    readme = root / "README.md"
    text = readme.read_text()
    start, end = (text.find(marker) for marker in README_TIMES)
    if start < 0 or end < start:
        raise SystemExit(f"README.md: put the two markers {README_TIMES} where the chapter "
                         f"table goes")
    readme.write_text(text[:start + len(README_TIMES[0])] + "\n" + "\n".join(rows) + "\n"
                      + text[end:])
    return rows


def check(root: Path) -> list[str]:
    folder = root / "notebooks"
    problems = []
    for ipynb in sorted(folder.glob("*.ipynb")):
        if not ipynb.with_suffix(".py").exists():
            problems.append(f"{ipynb.relative_to(root)}: no paired .py:percent file")
    readme = (root / "README.md").read_text() if (root / "README.md").exists() else ""
    for py in sorted(folder.glob("*.py")):
        problems += check_pair(root, py, readme)
    return problems


def record_sources(root: Path, files: list[str]) -> dict[str, str]:
    """sha256 of each file, keyed by its path from ``root``; every file must be the
    checkout's own package (a kernel that imported another copy would record outputs of
    code that is not the one checked out)."""
    package = (root / PACKAGE).resolve()
    sources = {}
    for file in files:
        path = Path(file).resolve()
        if not path.is_relative_to(package):
            raise SystemExit(f"the kernel imported {PACKAGE} from {path.parent}, not from "
                             f"{package}: install this checkout (pip install -e .) or put "
                             f"{root} first on PYTHONPATH")
        sources[path.relative_to(root.resolve()).as_posix()] = sha256(path)
    return dict(sorted(sources.items()))


def execute(root: Path, ipynb: Path) -> None:
    """Execute ``ipynb`` in place, from its own folder, with this checkout's package first
    on the kernel's path, and record which package sources produced its outputs."""
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root.resolve()), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(RECORD_THREADS)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, record_timing=False,
                            resources={"metadata": {"path": str(ipynb.parent)}})
    started = time.monotonic()
    client.execute(env=env)
    seconds = time.monotonic() - started  # kernel start-up included, as a reader sees it
    probe = nb.cells.pop()
    text = "".join(o.get("text", "") for o in probe.outputs if o.get("name") == "stdout")
    found = json.loads(text.strip().splitlines()[-1])
    for cell in nb.cells:  # no per-cell timestamps: they change on every run
        cell.metadata.pop("execution", None)
    nb.metadata[PACKAGE] = {"sources": record_sources(root, found["files"]),
                            "torch": found["torch"], "seconds": round(seconds, 1),
                            "cpus": os.cpu_count(), "threads": RECORD_THREADS,
                            "profile": os.environ.get("DRILLBOOK_PROFILE", "auto")}
    nbformat.write(nb, ipynb)


def sync(root: Path, run: bool = True, only: list[Path] | None = None) -> None:
    chosen = {p.resolve().with_suffix(".py") for p in only or []}
    for py in sorted((root / "notebooks").glob("*.py")):
        if chosen and py.resolve() not in chosen:
            continue
        text = py.read_text()
        new = rewrite_links(text, expected_links(root, py))
        if new != text:
            py.write_text(new)
        ipynb = py.with_suffix(".ipynb")
        args = ["--to", "ipynb", *(["--update"] if ipynb.exists() else []), str(py)]
        print("jupytext", *args, flush=True)  # --update: new inputs, old outputs
        jupytext_cli(args)
        if run:  # then fresh outputs, and the package sources that produced them
            print(f"execute {ipynb.relative_to(root)}", flush=True)
            execute(root, ipynb)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["check", "sync", "times"])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    parser.add_argument("--no-execute", action="store_true", help="sync inputs only")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="sync only these (.py or .ipynb); default: all")
    args = parser.parse_intermixed_args(argv)
    if args.command == "sync":
        sync(args.root, run=not args.no_execute, only=args.notebooks)
    if args.command == "times":  # then the .ipynb inputs follow the edited .py files
        print("\n".join(write_times(args.root)))
        sync(args.root, run=False)
    problems = check(args.root)
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"notebooks: {len(list((args.root / 'notebooks').glob('*.py')))} pairs agree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
