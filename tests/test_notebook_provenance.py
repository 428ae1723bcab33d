"""A notebook's outputs name the package sources that produced them, and the check notices
when the checkout's sources differ (tools/notebooks.py: sync records, check compares)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "notebooks.py"
CONFIG = "repository:\n  url: https://github.com/example/toy\n  branch: main\n"


def load_tool():
    spec = importlib.util.spec_from_file_location("notebooks_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = load_tool()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A tiny repository layout: _config.yml, notebooks/ and a two-module drillbook/."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "drillbook" / "heads").mkdir(parents=True)
    (root / "_config.yml").write_text(CONFIG)
    (root / "drillbook" / "__init__.py").write_text('"""toy"""\n')
    (root / "drillbook" / "heads" / "drill.py").write_text("DEPTH = 2\n")
    return root


def recorded(root: Path, *files: str):
    nb = nbformat.v4.new_notebook()
    nb.metadata["drillbook"] = {"sources": {f: digest(root / f) for f in files},
                                "torch": "2.13.0"}
    return nb


def problems(root: Path, nb) -> list[str]:
    return tool.check_provenance(root, root / "notebooks" / "02_drill.ipynb", nb)


FIX = "; run make sync NB=notebooks/02_drill.py"


def test_unchanged_sources_pass(repo):
    assert problems(repo, recorded(repo, "drillbook/__init__.py",
                                   "drillbook/heads/drill.py")) == []


def test_an_edited_source_is_named(repo):
    nb = recorded(repo, "drillbook/__init__.py", "drillbook/heads/drill.py")
    (repo / "drillbook" / "heads" / "drill.py").write_text("DEPTH = 4\n")
    assert problems(repo, nb) == [
        "notebooks/02_drill.ipynb: outputs were produced with a different "
        "drillbook/heads/drill.py" + FIX]


def test_a_removed_or_renamed_source_is_named(repo):
    nb = recorded(repo, "drillbook/__init__.py", "drillbook/heads/drill.py")
    drill = repo / "drillbook" / "heads" / "drill.py"
    drill.rename(drill.with_name("deep.py"))  # same bytes, another name
    assert problems(repo, nb) == [
        "notebooks/02_drill.ipynb: outputs were produced with drillbook/heads/drill.py, "
        "which no longer exists" + FIX]


def test_a_notebook_without_a_record_is_of_unknown_provenance(repo):
    nb = nbformat.v4.new_notebook()
    expected = ["notebooks/02_drill.ipynb: outputs of unknown provenance (no drillbook "
                "sources recorded)" + FIX]
    assert problems(repo, nb) == expected
    nb.metadata["drillbook"] = {"torch": "2.13.0"}  # a record without its sources
    assert problems(repo, nb) == expected


def test_sources_must_come_from_the_checkout(repo, tmp_path):
    inside = repo / "drillbook" / "heads" / "drill.py"
    assert tool.record_sources(repo, [str(inside)]) == {
        "drillbook/heads/drill.py": digest(inside)}
    other = tmp_path / "site-packages" / "drillbook" / "__init__.py"
    other.parent.mkdir(parents=True)
    other.write_text("")
    with pytest.raises(SystemExit, match=r"the kernel imported drillbook from .*site-packages"
                                         r"/drillbook, not from .*repo/drillbook"):
        tool.record_sources(repo, [str(inside), str(other)])


TOY_NOTEBOOK = """\
# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %%
# https://colab.research.google.com/github/someone/else/blob/dev/notebooks/00_toy.ipynb
# git+https://github.com/someone/else@dev
import drillbook.used

# %%
print(drillbook.used.VALUE)
"""


def test_sync_records_exactly_the_modules_the_kernel_imported(repo, monkeypatch):
    """Execute a two-cell notebook through sync, with a toy drillbook (and a toy torch, for
    its version) in the repository: the record lists the imported modules, not the one
    never imported, and the check then passes until an imported module changes."""
    package = repo / "drillbook"
    (package / "used.py").write_text("import torch\n\nVALUE = 6 * 7\n")
    (package / "unused.py").write_text("VALUE = 0\n")
    (repo / "torch").mkdir()
    (repo / "torch" / "__init__.py").write_text('__version__ = "0.0+toy"\n')
    py = repo / "notebooks" / "00_toy.py"
    py.write_text(TOY_NOTEBOOK)
    # the venv's python3 kernel, as the Makefile sets it up; sync itself puts the
    # repository first on the kernel's path
    jupyter_path = [str(Path(sys.prefix) / "share" / "jupyter"), os.environ.get("JUPYTER_PATH")]
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, jupyter_path)))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    tool.sync(repo, only=[py])

    nb = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
    record = nb.metadata["drillbook"]
    assert record.pop("seconds") > 0 and record.pop("cpus") == os.cpu_count()
    assert record.pop("threads") == tool.RECORD_THREADS
    assert record.pop("profile") == os.environ.get("DRILLBOOK_PROFILE", "auto")
    assert record == {
        "sources": {"drillbook/__init__.py": digest(package / "__init__.py"),
                    "drillbook/used.py": digest(package / "used.py")},
        "torch": "0.0+toy"}
    assert [c.cell_type for c in nb.cells] == ["code", "code"]  # the probe is not kept
    assert nb.cells[1].outputs[0]["text"] == "42\n"
    assert not any("execution" in c.metadata for c in nb.cells)  # no timestamps
    assert "github.com/example/toy" in nb.cells[0].source  # links from _config.yml
    monkeypatch.setattr(tool, "check_time", lambda *args: [])  # tested on its own below
    assert tool.check(repo) == []

    (package / "unused.py").write_text("VALUE = 1\n")  # never imported: still current
    assert tool.check(repo) == []
    (package / "used.py").write_text("import torch\n\nVALUE = 43\n")
    assert tool.check(repo) == ["notebooks/00_toy.ipynb: outputs were produced with a "
                                "different drillbook/used.py; run make sync "
                                "NB=notebooks/00_toy.py"]


def timed(seconds: float, cpus: int, statement: str | None):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\n" + (statement or "no time here"))]
    nb.metadata["drillbook"] = {"sources": {}, "seconds": seconds, "cpus": cpus}
    return nb


def time_problems(root: Path, nb, readme: str) -> list[str]:
    return tool.check_time(root, root / "notebooks" / "02_drill.ipynb", nb, readme)


def test_the_stated_time_follows_the_recorded_one(repo):
    readme = "| notebooks/02_drill.ipynb | about 90 s |"
    ok = timed(84.0, 2, "Runs in about 90 s on a 2-core CPU.")
    assert time_problems(repo, ok, readme) == []
    assert tool.rounded_time(84.0) == 80 and tool.rounded_time(23) == 25
    # never stated: the message gives the sentence to write
    (missing,) = time_problems(repo, timed(84.0, 2, None), readme)
    assert "state the measured time" in missing and "'about 80 s on a 2-core CPU'" in missing
    # the chapter got slower (or faster) than it says
    (stale,) = time_problems(repo, timed(150.0, 2, "about 90 s on a 2-core CPU"), readme)
    assert "states about 90 s" in stale and "took 150 s on 2 cores" in stale
    assert time_problems(repo, timed(61.0, 2, "about 90 s on a 2-core CPU"), readme) == []
    # over the chapter budget on the CI machine's core count
    slow = time_problems(repo, timed(200.0, 2, "about 200 s on a 2-core CPU"),
                         "| notebooks/02_drill.ipynb | about 200 s |")
    assert slow == [f"notebooks/02_drill.ipynb: its CPU profile took 200 s on 2 cores, over "
                    f"the {tool.CHAPTER_SECONDS} s a chapter may take; shrink the small profile"]
    # the README must say what the chapter says
    (readme_problem,) = time_problems(repo, ok, "| notebooks/02_drill.ipynb | about 60 s |")
    assert "README.md's chapter table must say '02_drill.ipynb | about 90 s'" in readme_problem
