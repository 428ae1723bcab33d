"""The notebook pairs agree, and the checker really notices when they do not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "notebooks.py"


def run_check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "check", "--root", str(root)],
                          capture_output=True, text=True)


def test_repository_pairs_agree():
    result = run_check(ROOT)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The notebooks and _config.yml, each notebook marked as produced by no package file:
    these tests are about the pairs (tests/test_notebook_provenance.py tests the record;
    test_repository_pairs_agree, the repository's own notebooks)."""
    shutil.copy(ROOT / "_config.yml", tmp_path)
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    for ipynb in (tmp_path / "notebooks").glob("*.ipynb"):
        nb = nbformat.read(ipynb, as_version=4)
        nb.metadata["drillbook"] = {"sources": {}, "torch": None}
        nbformat.write(nb, ipynb)
    result = run_check(tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path


def first_py(root: Path) -> Path:
    return sorted((root / "notebooks").glob("*.py"))[0]


def test_edited_py_is_caught(copy):
    py = first_py(copy)
    text = py.read_text()
    assert "nb = setup(seed=0" in text  # the edit below must change something
    py.write_text(text.replace("nb = setup(seed=0", "nb = setup(seed=1"))
    result = run_check(copy)
    assert result.returncode == 1 and "differs from" in result.stderr


def test_dropped_tag_is_caught(copy):
    py = first_py(copy)
    py.write_text(py.read_text().replace('tags=["nbval-check-output"]', "", 1))
    assert "differs from" in run_check(copy).stderr


def test_missing_twin_is_caught(copy):
    first_py(copy).with_suffix(".ipynb").unlink()
    assert "no paired" in run_check(copy).stderr


def test_outputs_without_a_record_are_caught(copy):
    ipynb = first_py(copy).with_suffix(".ipynb")
    nb = nbformat.read(ipynb, as_version=4)
    del nb.metadata["drillbook"]
    nbformat.write(nb, ipynb)
    result = run_check(copy)
    assert result.returncode == 1
    assert f"notebooks/{ipynb.name}: outputs of unknown provenance" in result.stderr


def test_repository_url_comes_from_config(copy):
    cfg = copy / "_config.yml"
    cfg.write_text(cfg.read_text().replace("github.com/drillbook/drillbook",
                                           "github.com/someone/else"))
    result = run_check(copy)
    assert result.returncode == 1 and "github.com/someone/else" in result.stderr


def test_make_test_checks_the_outputs_under_another_thread_count_than_sync_records():
    """``make test`` runs nbval with ``CHECK_THREADS`` of torch's threads, sync records the
    outputs with ``RECORD_THREADS``: two counts, so that a checked output depending on the
    summation order fails every test run, not only on another machine."""
    import re

    sys.path.insert(0, str(ROOT / "tools"))
    import notebooks as tool

    make = (ROOT / "Makefile").read_text()
    check = int(re.search(r"^CHECK_THREADS\s*:?=\s*(\d+)\s*$", make, re.M).group(1))
    assert check != tool.RECORD_THREADS
    pytest_line = re.search(r"^PYTEST\s*:=(.*(?:\\\n.*)*)", make, re.M).group(1)
    assert "OMP_NUM_THREADS=$(CHECK_THREADS)" in pytest_line
    recipe = make.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^\t(\w+=\S+ )*\$\(PYTEST\) .*\bnotebooks\b.*\$\(NBVAL\)", recipe, re.M)
