"""The training-code fingerprint: the same for every seed of a row and for arithmetic that
changes no number, another for a change in the loss path or the head; a seed spread whose
runs differ in it is refused unless the book names the difference."""

from __future__ import annotations

import json

import pytest
import torch

from drillbook.errors import ResultFileError
from drillbook.experiments.results import book_results
from drillbook.experiments.results.fingerprint import fingerprint_of, training_fingerprint
from drillbook.experiments.results.seeds import (
    NAMED_CODE_DIFFERENCES,
    code_difference,
    seed_runs,
)
from drillbook.experiments.tables import TABLES
from drillbook.heads import SoftmaxFamilyHead

LAPTOP = TABLES["laptop-lm"]


def _fresh(config) -> dict:
    from drillbook.experiments.results import fingerprint

    fingerprint._CACHE.clear()
    return training_fingerprint(config)


def test_every_seed_of_a_row_shares_its_fingerprint_and_rows_differ():
    tied = LAPTOP.row("tied").resolve()
    other_seed = tied.copy()
    other_seed.train.seed = 143
    first = _fresh(tied)
    assert first == _fresh(other_seed)
    assert first["loss_path"] == "fused" and len(first["digest"]) == 16
    assert _fresh(LAPTOP.row("drill-4").resolve())["digest"] != first["digest"]
    # a recipe change (the learning rate) is another arithmetic
    faster = tied.copy()
    faster.train.lr = 10.0
    assert _fresh(faster)["digest"] != first["digest"]


@pytest.mark.parametrize("table", ["laptop-lm", "laptop-nmt", "laptop-nmt-vmf",
                                   "first-updates-nmt", "tutorial", "cpu-scale"])
def test_every_row_a_cpu_trains_has_a_fingerprint(table):
    """Each row of the tables a CPU trains computes its fingerprint (a row whose tiny run
    could not be built, DRILL's dual head with residuals, wrote no result file)."""
    digests = {row.name: _fresh(row.resolve())["digest"] for row in TABLES[table]}
    assert all(len(d) == 16 for d in digests.values())


def test_the_fingerprint_ignores_the_thread_count_and_sees_the_loss_path(monkeypatch):
    """Two threads sum in another order (the 16th digit), which the rounding absorbs; the
    plain loss path is another arithmetic in float32 and another digest."""
    config = LAPTOP.row("mos").resolve()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _fresh(config)
        torch.set_num_threads(2)
        two = _fresh(config)
    finally:
        torch.set_num_threads(threads)
    assert one == two
    monkeypatch.setattr(SoftmaxFamilyHead, "fused_loss", False)
    from drillbook.heads import MixtureHead
    monkeypatch.setattr(MixtureHead, "fused_loss", False)
    plain = _fresh(config)
    assert plain["loss_path"] == "plain" and plain["digest"] != one["digest"]


def test_translation_rows_have_one_too():
    row = TABLES["gpu-multi30k"].row("softmax").resolve()
    vmf = TABLES["gpu-multi30k"].row("vmf-nllvmf").resolve()
    a, b = _fresh(row), _fresh(vmf)
    assert a["loss_path"] == "fused" and b["loss_path"] == "plain"
    assert a["digest"] != b["digest"]


def _seed_file(folder, seed: int, **extra) -> None:
    doc = {"format": "drillbook-result/3", "table": "cpu-scale", "row": "tied",
           "config_name": "tutorial/ptb-tied", "config": {"train": {"seed": seed}},
           "config_hash": "0", "seed": seed, "git_commit": "abc", "device": "cpu",
           "torch": "x", "cuda": None, "status": "budget", "epochs_done": 2,
           "steps_done": 9, "wall_seconds": 1.0, "budget_minutes": 5, "precision": "fp32",
           "metrics": {"test_ppl": 100.0 + seed}, "curve": [], **extra}
    path = folder / "cpu-scale" / (f"seed-{seed}" if seed != 141 else "") / "tied.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def _fp(digest: str) -> dict:
    return {"fingerprint": {"digest": digest, "losses": [], "loss_path": "fused",
                            "version": 1}}


def test_a_spread_of_runs_by_different_code_is_refused_unless_named(tmp_path, monkeypatch):
    monkeypatch.delitem(NAMED_CODE_DIFFERENCES, ("cpu-scale", "tied"))
    _seed_file(tmp_path, 141, **_fp("a" * 16))
    _seed_file(tmp_path, 142, **_fp("a" * 16), git_commit="def")  # same arithmetic
    assert len(seed_runs(tmp_path, "cpu-scale")["tied"]) == 2
    _seed_file(tmp_path, 143, **_fp("b" * 16))
    with pytest.raises(ResultFileError, match=r"the training code \(fingerprint a+ vs b+"):
        seed_runs(tmp_path, "cpu-scale")
    # files without a fingerprint: their commits decide
    _seed_file(tmp_path, 143, git_commit="def")
    with pytest.raises(ResultFileError, match="commits abc vs def, and no fingerprint"):
        seed_runs(tmp_path, "cpu-scale")
    monkeypatch.setitem(NAMED_CODE_DIFFERENCES, ("cpu-scale", "tied"), "named")
    assert len(seed_runs(tmp_path, "cpu-scale")["tied"]) == 3


def test_the_committed_cpu_scale_spreads_are_the_named_ones():
    """Every row of the committed cpu-scale table whose seeds came from different commits
    is named (the chapters say what the spread is), and no other."""
    runs = seed_runs(book_results(), "cpu-scale")
    mixed = {row for row, docs in runs.items()
             if len({d["git_commit"] for d in docs}) > 1}
    assert mixed == {row for table, row in NAMED_CODE_DIFFERENCES if table == "cpu-scale"}
    for row in mixed:
        a, b = runs[row][0], runs[row][-1]
        assert fingerprint_of(a) is None and code_difference("cpu-scale", row, a, b) == ""


def test_a_table_mixing_todays_arithmetic_with_another_is_refused(tmp_path, monkeypatch):
    """report and the chapters' loaders refuse a table whose fingerprinted rows split
    between today's arithmetic and another, unless the book names the difference."""
    from drillbook.experiments.results.evidence import table_results
    from drillbook.experiments.results.seeds import check_same_code

    docs = []
    for name in ("tied", "drill-4"):
        config = LAPTOP.row(name).resolve()
        docs.append({"row": name, "seed": 141, "config": config.to_dict(),
                     "fingerprint": _fresh(config)})
    check_same_code("laptop-lm", docs)  # both today's
    docs[1] = {**docs[1], "fingerprint": {**docs[1]["fingerprint"], "digest": "0" * 16}}
    with pytest.raises(ResultFileError, match=r"rows \['drill-4'\] were trained by code "
                                              r".*--rows drill-4"):
        check_same_code("laptop-lm", docs)
    monkeypatch.setitem(NAMED_CODE_DIFFERENCES, ("laptop-lm", "drill-4"), "named")
    check_same_code("laptop-lm", docs)
    assert table_results("laptop-lm", tmp_path) == []  # nothing trained: nothing refused


def test_seeds_that_their_plateau_rule_ended_may_differ_in_epochs(tmp_path, monkeypatch):
    """The rule decides when each seed stops, so two plateau runs of a row are comparable
    at different epochs; runs stopped otherwise must match (a budget is one point)."""
    monkeypatch.delitem(NAMED_CODE_DIFFERENCES, ("cpu-scale", "tied"))
    _seed_file(tmp_path, 141, status="plateau", epochs_done=21, **_fp("a" * 16))
    _seed_file(tmp_path, 142, status="plateau", epochs_done=17, **_fp("a" * 16))
    assert [d["epochs_done"] for d in seed_runs(tmp_path, "cpu-scale")["tied"]] == [21, 17]
    _seed_file(tmp_path, 142, status="budget", epochs_done=17, **_fp("a" * 16))
    with pytest.raises(ResultFileError, match="differ in status"):
        seed_runs(tmp_path, "cpu-scale")
