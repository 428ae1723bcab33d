"""The chapters' evidence sections, run as they will run once a GPU window is committed.

Each chapter reads its paper's central result from a GPU plan's result files when a window
has produced them, and prints the command that would otherwise. CI has no such files, so
the notebooks' own execution only ever takes the second branch. Here every cell marked
``# from a GPU window's result files`` is executed, after the chapter's import cell,
against a synthetic window holding result files of the plans' tables with every analysis
a real row writes: the first branch runs, draws its figure and prints its table.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jupytext
import matplotlib
import pytest

from drillbook.experiments import validate_result
from drillbook.experiments.results.evidence import table_results
from drillbook.experiments.tables import TABLES

ROOT = Path(__file__).resolve().parent.parent
MARK = "# from a GPU window's result files"
CHAPTERS = [p for p in sorted((ROOT / "notebooks").glob("0*.py")) if MARK in p.read_text()]
BANDS = [("1-49", 1, 50), ("50-99", 50, 100), ("5000+", 5000, None)]


def _row(template: dict, table: str, row: str, task: str, seed: int | None = None) -> dict:
    doc = copy.deepcopy(template)
    doc.update(format="drillbook-result/3", table=table, row=row, device="NVIDIA H100",
               precision="fp32")
    if seed is not None:
        doc["seed"] = seed
    shift = len(row) / 10  # rows differ a little
    if task == "lm":
        doc["metrics"].update(rank_tol_1=402, rank_numpy_tol=4000, rank_positions=4000)
        doc["analyses"] = {
            "frequency_bands": [{"band": b, "low": lo, "high": hi, "types": 30,
                                 "tokens": 500, "mean_nll": 5.0 + shift - i}
                                for i, (b, lo, hi) in enumerate(BANDS)],
            "word_nll": {"3": [12.5, 3]}}
        if row.startswith(("mos", "doc")):
            doc["analyses"]["mixture"] = {"usage": [0.5, 0.3, 0.2], "entropy": 0.9,
                                          "max_entropy": 1.0986, "cv": 0.4,
                                          "usage_by_layer": {"2": 1.0}, "positions": 4000}
    else:
        doc["metrics"] = {"val_bleu": 30 + shift, "test_bleu": 29 + shift}
        doc["curve"] = [{"epoch": e, "elapsed_seconds": 10.0 * e, "val_bleu": 10 * e + shift,
                         "train_loss": 3.0 / e} for e in (1, 2, 3)]
        doc["bleu_signature"] = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3"
        doc["analyses"] = {
            "rare_word_f1": [{"band": b, "low": lo, "high": hi, "reference_tokens": 40,
                              "hypothesis_tokens": 38, "matches": 20, "precision": 0.5,
                              "recall": 0.5, "f1": 0.1 * (i + 1)}
                             for i, (b, lo, hi) in enumerate(BANDS)],
            "sentences_per_second": 250.0,
            "examples": [{"source": "ein hund", "reference": "a dog", "hypothesis": "a dog"}]}
    assert validate_result(doc) == [], validate_result(doc)
    return doc


@pytest.fixture
def window(tmp_path, monkeypatch):
    """A results folder with one GPU window holding every row of the three plans."""
    template = table_results("cpu-scale")[0]
    folder = tmp_path / "gpu" / "2026-12-01-h100-fp32"
    for table, task in [("gpu-ptb", "lm"), ("gpu-multi30k", "translation"),
                        ("gpu-small", "lm")]:
        for spec in TABLES[table]:
            for seed, sub in [(None, ""), (142, "seed-142")]:
                doc = _row(template, table, spec.name, task, seed)
                (folder / table / sub).mkdir(parents=True, exist_ok=True)
                (folder / table / sub / f"{spec.name}.json").write_text(json.dumps(doc))
    for module in ("evidence", "files"):  # plan_folder finds windows through the files
        monkeypatch.setattr(f"drillbook.experiments.results.{module}.book_results",
                            lambda: tmp_path)
    return folder


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_a_chapter_reads_a_gpu_window_when_one_is_committed(chapter, window, capsys):
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    imports = next(c for c in cells if "from drillbook" in c.source)
    marked = [c for c in cells if c.source.startswith(MARK)]
    assert marked, f"{chapter.name} has no cell that reads a GPU window"
    namespace: dict = {}
    exec(compile(imports.source.replace("%matplotlib inline", ""), chapter.name, "exec"),
         namespace)
    before = plt.get_fignums()
    for cell in marked:
        exec(compile(cell.source, chapter.name, "exec"), namespace)
    out = capsys.readouterr().out
    assert "No GPU run" not in out  # the branch that reads the window ran
    drawn = set(plt.get_fignums()) - set(before)
    assert drawn or out.strip(), "the cells neither drew nor printed anything"
    plt.close("all")
