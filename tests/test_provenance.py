"""Where a result file's commit comes from, with git and in a copy without it."""

from __future__ import annotations

import json
import subprocess

import pytest

from drillbook import provenance


def test_a_device_is_named_by_its_kind(monkeypatch):
    """A CPU's name says so; a GPU's is its own; another accelerator (Apple's ``mps``) is
    not mistaken for the CPU, and :func:`device_kind` reads each back."""
    import torch

    cpu = provenance.device_name("cpu")
    assert cpu.startswith("cpu (") and cpu.endswith(f"{torch.get_num_threads()} threads)")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert provenance.device_name("cuda:0") == "NVIDIA H200"
    assert provenance.device_name("mps") == "mps"
    assert [provenance.device_kind(provenance.device_name(d)) for d in ("cpu", "cuda", "mps")
            ] == ["cpu", "gpu", "gpu"]


def test_this_checkout_names_its_commit():
    state = provenance.git_state()
    assert len(state["commit"]) == 40 and isinstance(state["dirty"], bool)


def test_a_result_file_written_in_the_package_leaves_it_clean(tmp_path, monkeypatch):
    """A run writes its result under ``drillbook/results``: that does not make the code of
    the runs still training dirty; a changed module does."""
    repo = tmp_path / "repo"
    package = repo / "drillbook"
    (package / "results").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "results" / "old.json").write_text("{}\n")

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    monkeypatch.setattr(provenance, "_PACKAGE", package)
    monkeypatch.setattr(provenance, "STAMP", package / "SOURCE.json")
    assert provenance.git_state()["dirty"] is False
    (package / "results" / "new.json").write_text("{}\n")
    (package / "results" / "old.json").write_text("{\"a\": 1}\n")
    assert provenance.git_state()["dirty"] is False
    (package / "b.py").write_text("y = 1\n")
    assert provenance.git_state()["dirty"] is True


def test_a_copy_without_git_reads_its_commit_from_the_stamp(tmp_path, monkeypatch):
    """Copied to a machine without git, the package reads the stamp written before the
    copy, and counts as dirty once its files differ from what was stamped."""
    package = tmp_path / "drillbook"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(provenance, "_PACKAGE", package)
    monkeypatch.setattr(provenance, "STAMP", package / "SOURCE.json")
    assert provenance.git_state() == {"commit": None, "dirty": None}
    with pytest.raises(RuntimeError, match="no git checkout here"):
        provenance.stamp_source()
    stamp = {"commit": "c" * 40, "dirty": False, "source_hash": provenance.source_hash()}
    (package / "SOURCE.json").write_text(json.dumps(stamp))
    assert provenance.git_state() == {"commit": "c" * 40, "dirty": False}
    (package / "a.py").write_text("x = 2\n")
    assert provenance.git_state() == {"commit": "c" * 40, "dirty": True}
    (package / "SOURCE.json").write_text("{not json")
    assert provenance.git_state() == {"commit": None, "dirty": None}


def test_a_matching_stamp_outranks_a_copied_git_that_disagrees(tmp_path, monkeypatch):
    """A copy that carries an older ``.git``: git names that HEAD, dirty. A stamp whose
    hash matches the files names the commit that is really there; one that does not
    match leaves git's answer."""
    package = tmp_path / "drillbook"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(provenance, "_PACKAGE", package)
    monkeypatch.setattr(provenance, "STAMP", package / "SOURCE.json")
    old = {"commit": "o" * 40, "dirty": True}

    def fake_git(args, **kwargs):
        out = "o" * 40 if "rev-parse" in args else " M drillbook/a.py"
        return subprocess.CompletedProcess(args, 0, stdout=out)

    monkeypatch.setattr(provenance.subprocess, "run", fake_git)
    assert provenance.git_state() == old
    stamp = {"commit": "n" * 40, "dirty": False, "source_hash": provenance.source_hash()}
    (package / "SOURCE.json").write_text(json.dumps(stamp))
    assert provenance.git_state() == {"commit": "n" * 40, "dirty": False}
    (package / "a.py").write_text("x = 2\n")
    assert provenance.git_state() == old
