"""The order ``make test`` hands its files to the workers: the longest measured first."""

from __future__ import annotations

import json
from types import SimpleNamespace

import conftest
from conftest import longest_files_first


def items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_files_go_longest_first_each_keeping_its_own_order():
    given = items("tests/a.py::one", "tests/a.py::two", "tests/b.py::one",
                  "notebooks/c.ipynb::Cell 0", "notebooks/c.ipynb::Cell 1", "tests/b.py::two")
    longest_files_first(given, {"tests/a.py": 1.0, "tests/b.py": 30.0,
                                "notebooks/c.ipynb": 200.0})
    assert [i.nodeid for i in given] == [
        "notebooks/c.ipynb::Cell 0", "notebooks/c.ipynb::Cell 1", "tests/b.py::one",
        "tests/b.py::two", "tests/a.py::one", "tests/a.py::two"]


def test_a_file_not_measured_counts_as_the_median_and_no_record_changes_nothing():
    given = items("tests/new.py::t", "tests/short.py::t", "tests/mid.py::t", "tests/long.py::t")
    longest_files_first(given, {"tests/short.py": 1.0, "tests/mid.py": 5.0,
                                "tests/long.py": 9.0})
    # the median is 5: the new file ties with mid.py and keeps its place before it
    assert [i.nodeid.split("::")[0] for i in given] == [
        "tests/long.py", "tests/new.py", "tests/mid.py", "tests/short.py"]
    unchanged = items("tests/z.py::t", "tests/a.py::t")
    longest_files_first(unchanged, {})
    assert [i.nodeid for i in unchanged] == ["tests/z.py::t", "tests/a.py::t"]


def test_the_committed_record_names_files_that_exist(tmp_path, monkeypatch):
    root = conftest.DURATIONS.parent.parent
    seconds = conftest.file_seconds()
    assert seconds and all(v >= 0 for v in seconds.values())
    assert all((root / name).is_file() for name in seconds), "make durations rewrites it"
    monkeypatch.setattr(conftest, "DURATIONS", tmp_path / "durations.json")
    assert conftest.file_seconds() == {}  # missing: the default order
    (tmp_path / "durations.json").write_text(json.dumps({"files": [1, 2]}))
    assert conftest.file_seconds() == {}  # unreadable: the default order
