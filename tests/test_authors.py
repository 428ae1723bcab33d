"""The DRILL authors' published runs (drillbook.authors): the data file against what the
paper prints, the updates it counts against drillbook's own runs, and the tool that writes
it (tools/authors_logs.py) on a small copy of the repository."""

from __future__ import annotations

import importlib.util
import json
import math
import pickle
import subprocess
from pathlib import Path

import pytest

from drillbook.authors import (
    authors_bands,
    authors_curve,
    authors_curves,
    authors_data,
    authors_ranks,
    authors_source,
    expected_updates,
    expected_window,
)
from drillbook.errors import DataError, MissingFileError
from drillbook.experiments import book_results, load_results
from drillbook.papers import paper_value

ROOT = Path(__file__).resolve().parent.parent
CURVES = authors_curves()


def test_the_data_file_names_its_source_and_every_file():
    source = authors_source()
    assert source["repository"] == "idiap/drill" and len(source["commit"]) == 40
    assert "GTX 1080 Ti" in source["device"]
    doc = authors_data()
    assert set(doc["columns"]) == {"epoch", "seconds", "val_loss", "val_ppl"}
    for curve in CURVES.values():
        assert curve.file.startswith("analysis/speed/") and curve.file.endswith(".txt")
    assert doc["ranks"]["file"] == "analysis/rank/rank_results.txt"
    assert all(f.startswith("analysis/lowfreq/") for f in doc["bands"]["files"].values())
    # the package's own result folders are not confused by it
    assert all(d["table"] != "authors" for d in load_results(book_results()))


def test_six_runs_of_600_epochs_and_wikitext_mos_in_two_segments():
    assert sorted(CURVES) == sorted(f"{c}-{h}" for c in ("ptb", "wt2")
                                    for h in ("awd-lstm", "drill", "mos"))
    for name, curve in CURVES.items():
        n = 683 if name == "wt2-mos" else 600
        assert curve.epochs == tuple(range(1, n + 1)), name
        assert len(curve.seconds) == len(curve.val_ppl) == len(curve.val_loss) == n
        # the printed loss is the log of the printed perplexity (both rounded)
        assert all(abs(math.log(p) - loss) <= 0.0051
                   for p, loss in zip(curve.val_ppl, curve.val_loss, strict=True))
    # a second run resumed from the first: its count restarts, its perplexity continues
    mos = CURVES["wt2-mos"]
    assert mos.restarts == (391,)
    assert abs(mos.val_ppl[390] - mos.val_ppl[389]) < 0.1


def test_final_validation_perplexities_against_the_papers_rows_before_fine_tuning():
    """DRILL Tables 1 and 2 print "w/o finetune" rows for AWD-LSTM and DRILL only.

    Tolerances, and why: DRILL on PTB is the authors' own run, its log ends at the printed
    value (0.05: the printing). The AWD-LSTM rows quote the AWD-LSTM paper's own runs, not
    these logs, so they agree only within 1.5%. DRILL on WikiText-2 trained 2,000 epochs
    (the README's command) and its log keeps the first 600, so the log ends above the
    paper's number and within 2% of it. MoS has no such row: its logs end above its
    fine-tuned numbers (fine-tuning lowers them), within 4%."""
    wo = "drill:table{}:awd-lstm{}-wo-finetune"
    assert abs(CURVES["ptb-drill"].final_val_ppl
               - paper_value(wo.format(1, "-drill"), "val_ppl")) <= 0.05
    for name, table in (("ptb-awd-lstm", 1), ("wt2-awd-lstm", 2)):
        paper = paper_value(wo.format(table, ""), "val_ppl")
        assert abs(CURVES[name].final_val_ppl / paper - 1) <= 0.015, name
    wt2 = paper_value(wo.format(2, "-drill"), "val_ppl")
    assert wt2 <= CURVES["wt2-drill"].final_val_ppl <= 1.02 * wt2
    for name, table in (("ptb-mos", 1), ("wt2-mos", 2)):
        finetuned = paper_value(f"drill:table{table}:awd-lstm-mos", "val_ppl")
        assert finetuned < CURVES[name].final_val_ppl <= 1.04 * finetuned, name


def test_mean_seconds_per_epoch_against_table3_and_the_record():
    """The means are what the record's drill-repo:speed rows hold (to their 2 decimals).
    Against the paper's account of Table 3 (Sec. 4.1.1, "about 46 seconds"): seconds
    within 2% (the text rounds, 46.75 to 46 and 861.94 to 865), ratios to the AWD-LSTM
    within 0.05, except DRILL on PTB: the paper gives 1.2 for both corpora, the PTB logs
    give 1.14."""
    for name, curve in CURVES.items():
        repo = paper_value(f"drill-repo:speed:{name}", "seconds_per_epoch")
        assert round(curve.mean_seconds, 2) == repo, name
    for corpus in ("ptb", "wt2"):
        base = CURVES[f"{corpus}-awd-lstm"].mean_seconds
        for head in ("awd-lstm", "mos"):
            paper = paper_value(f"drill:sec4.1.1:{corpus}-{head}-speed", "seconds_per_epoch")
            assert abs(CURVES[f"{corpus}-{head}"].mean_seconds / paper - 1) <= 0.02
        for head in ("drill", "mos"):
            ratio = CURVES[f"{corpus}-{head}"].mean_seconds / base
            paper = paper_value(f"drill:sec4.1.1:{corpus}-{head}-speed", "ratio_to_tied")
            if (corpus, head) == ("ptb", "drill"):
                assert round(ratio, 2) == 1.14 and paper == 1.2  # the one disagreement
            else:
                assert abs(ratio - paper) <= 0.05, (corpus, head, ratio)


def test_ranks_against_the_record_and_the_papers_text():
    """The results file is the record's drill-repo:rank rows; the paper's text says 400
    for the single softmaxes (no tolerance stated), 2 below d + 2 = 402, and 9,981 for MoS."""
    ranks = authors_ranks()
    for model, key in (("Softmax", "softmax"), ("DRILL", "drill"), ("MoS", "mos")):
        expected = paper_value(f"drill-repo:rank:{key}", "rank_tol_1")
        assert ranks[model] == {"valid": expected, "test": expected}
    assert ranks["MoS"]["test"] == paper_value("drill:sec4.1.1:rank-mos", "rank")
    for model, key in (("Softmax", "awd-lstm"), ("DRILL", "drill")):
        assert ranks[model]["test"] - paper_value(f"drill:sec4.1.1:rank-{key}", "rank") == 2


def test_band_data_against_table4_fig3_and_the_authors_printout():
    """The per-token losses give the four models' test perplexities of Table 4 (within
    0.15: the tied row of Table 4 is the AWD-LSTM paper's run, 57.3, where this one gives
    57.18); the bands hold the text's 4,116 and 16 word types; Fig. 3's quantity computed
    here is the opposite of what the authors' script printed, to its printed digits."""
    data = authors_data()["bands"]
    for model, key in (("tied", "weight-tying"), ("bilinear", "bilinear"), ("dual", "dual"),
                       ("drill", "drill-4-layers")):
        assert abs(data["test_ppl"][model] - paper_value(f"drill:table4:{key}", "test_ppl")
                   ) <= 0.15, model
    bands = authors_bands()
    assert [b.band for b in bands] == ["1-49", "50-99", "100-249", "250-499", "500-999",
                                       "1000-2499", "2500-4999", "5000+"]
    assert bands[0].types == paper_value("drill:sec4.1.2:fig3-band-types", "lowest_band_types")
    assert bands[-1].types == paper_value("drill:sec4.1.2:fig3-band-types",
                                          "highest_band_types")
    assert sum(b.tokens for b in bands) + 3761 == data["test_tokens"]  # + the <eos> targets
    for band in bands:
        for model in ("tied", "bilinear", "dual"):
            assert band.relative_word[model] == pytest.approx(-band.printed[model], abs=1e-6)
            token = 100 * (band.mean_nll[model] / band.mean_nll["drill"] - 1)
            assert band.relative_token[model] == pytest.approx(token, abs=1e-5)
    # the text: gains "between 5% to 17.5%" in the rarest band (dual 4.8, tied 17.5), and
    # DRILL "2.5% higher" than the bilinear map on the most frequent band, where these
    # losses give 2.05%: the one number of the text they do not give
    rarest = bands[0].relative_word
    assert round(rarest["tied"], 1) == paper_value("drill:sec4.1.2:fig3-gain-range",
                                                   "high_percent")
    assert round(rarest["dual"]) == paper_value("drill:sec4.1.2:fig3-gain-range",
                                                "low_percent")
    assert round(-bands[-1].relative_word["bilinear"], 2) == 2.05
    assert paper_value("drill:sec4.1.2:fig3-highest-band-bilinear", "percent") == 2.5


# ------------------------------------------------------------------ updates per epoch
def test_expected_window_is_the_samplers_mean():
    import torch

    from drillbook.data import BPTTSampler

    assert expected_window(70) == pytest.approx(67.75, abs=1e-6)
    sampler = BPTTSampler(torch.zeros(200_001, 1, dtype=torch.long), bptt=70, seed=0)
    lengths = [b.seq_len for b in sampler.iter_epoch()][:-1]  # the last one is cut short
    assert sum(lengths) / len(lengths) == pytest.approx(expected_window(70), rel=0.003)


def test_updates_per_epoch_against_drillbooks_own_runs_of_the_same_models():
    """Every committed GPU run of the authors' models counted its updates; the expected
    count is within 1.5% of each epoch's (the window lengths are random)."""
    checked = set()
    gpu = book_results() / "gpu"
    for window in sorted(p for p in gpu.iterdir() if p.is_dir()):
        for doc in load_results(window):
            curve = next((c for c in CURVES.values() if c.config == doc["config_name"]), None)
            if curve is None or doc["config"]["train"]["max_batches_per_epoch"] is not None:
                continue
            assert doc["config"]["train"]["batch_size"] == curve.batch_size
            # updates after each epoch (a one-epoch row records its total only)
            steps = [p.get("step") for p in doc["curve"]]
            steps = steps if None not in steps else [doc["steps_done"]]
            for before, after in zip([0, *steps], steps, strict=False):
                assert abs((after - before) / curve.updates_per_epoch - 1) < 0.015, doc["row"]
            checked.add(curve.name)
    assert {"ptb-awd-lstm", "ptb-drill", "ptb-mos", "wt2-awd-lstm", "wt2-drill"} <= checked
    # MoS's batch of 12 against 20: 1.67 times the updates of an epoch
    ratio = CURVES["ptb-mos"].updates_per_epoch / CURVES["ptb-awd-lstm"].updates_per_epoch
    assert ratio == pytest.approx(20 / 12, rel=0.002)
    assert (CURVES["ptb-awd-lstm"].printed_batches, CURVES["ptb-mos"].printed_batches) == (
        663, 1106)
    assert expected_updates(929_589, 20, 70) == pytest.approx(686.0, abs=0.1)


def test_a_curve_read_between_epochs_and_after_updates():
    tied, mos = CURVES["ptb-awd-lstm"], CURVES["ptb-mos"]
    assert tied.val_ppl_at(2) == tied.val_ppl[1] == 224.26
    between = tied.val_ppl_at(2.5)
    assert between == pytest.approx(math.sqrt(tied.val_ppl[1] * tied.val_ppl[2]))
    assert tied.val_ppl_at(0.5) is None and tied.val_ppl_at(601) is None
    # MoS after as many updates as two epochs of the tied model: 1.2 of its epochs
    at = mos.val_ppl_after_updates(2 * tied.updates_per_epoch)
    assert mos.val_ppl[0] > at > mos.val_ppl[1]
    with pytest.raises(DataError, match="ptb-drill"):
        authors_curve("ptb-drill-4")


# ------------------------------------------------------------------ the tool
def _tool():
    spec = importlib.util.spec_from_file_location("authors_logs",
                                                  ROOT / "tools" / "authors_logs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _epoch_lines(ppls, restart_at=None):
    lines = []
    for i, ppl in enumerate(ppls, 1):
        epoch = i if restart_at is None or i < restart_at else i - restart_at + 1
        lines.append(f"| end of epoch {epoch:3d} | time: {40 + i:.2f}s | valid loss "
                     f"{math.log(ppl):5.2f} | valid ppl {ppl:8.2f}")
    return "\n".join(lines) + "\n"


def _fake_repository(folder: Path) -> Path:
    """A git repository with the files the tool reads, small and made up."""
    tool = _tool()
    for path, _, _ in tool.LOGS.values():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(_epoch_lines([300.0, 200.0, 150.0, 120.0]))
    mos = tool.LOGS["wt2-mos"][0]
    (folder / mos).write_text(_epoch_lines([300.0, 200.0, 150.0, 149.0], restart_at=3))
    (folder / tool.RANKS).parent.mkdir(parents=True)
    (folder / tool.RANKS).write_text("      #val  #test\nSoftmax  402 402\nMoS 9981 9981\n")
    # two words seen 10 and 60 times in training, <eos> not in the counts
    losses = {"tied": [2.0, 4.0, 1.0], "bilinear": [3.0, 4.0, 1.0], "dual": [2.0, 2.0, 1.0],
              "drill": [1.0, 2.0, 1.0]}
    (folder / tool.BAND_VOCAB).parent.mkdir(parents=True)
    (folder / tool.BAND_VOCAB).write_bytes(pickle.dumps({"rare": 10, "common": 60},
                                                        protocol=0))
    for model, (pkl, printed, _) in tool.BANDS.items():
        x = losses[model]
        (folder / pkl).write_bytes(pickle.dumps({"rare": [x[0]], "common": [x[1]],
                                                 "<eos>": [x[2]]}, protocol=3))
        if printed:
            d = losses["drill"]
            lines = [f"{-100 * (x[i] - d[i]) / d[i]} {int(i < 2)}" for i in (0, 1)]
            lines += ["nan 0"] * 6
            (folder / printed).write_text("\n".join(lines) + "\n")
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run(["git", "-C", str(folder), "add", "."], check=True)
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-m", "logs"], check=True)
    return folder


def test_the_tool_parses_a_copy_into_a_file_this_module_reads(tmp_path, capsys):
    repo = _fake_repository(tmp_path / "drill")
    out = tmp_path / "out" / "logs.json"
    assert _tool().main([str(repo), "--out", str(out)]) == 0
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert authors_source(out)["commit"] == commit
    curves = authors_curves(out)
    assert curves["ptb-drill"].val_ppl == (300.0, 200.0, 150.0, 120.0)
    assert curves["ptb-drill"].seconds == (41.0, 42.0, 43.0, 44.0)
    assert curves["wt2-mos"].restarts == (3,) and curves["wt2-mos"].epochs == (1, 2, 3, 4)
    assert curves["ptb-mos"].batch_size == 12 and curves["ptb-drill"].batch_size == 20
    assert authors_ranks(out)["MoS"] == {"valid": 9981, "test": 9981}
    rare, common, *empty = authors_bands(out)
    assert (rare.types, rare.tokens, common.types) == (1, 1, 1)
    assert rare.relative_word["tied"] == pytest.approx(100.0)  # (2 - 1) / 1
    assert common.relative_word["dual"] == pytest.approx(0.0)
    assert rare.relative_word["bilinear"] == pytest.approx(-rare.printed["bilinear"])
    assert all(b.types == 0 for b in empty)
    assert json.loads(out.read_text())["bands"]["test_tokens"] == 3
    assert "written" in capsys.readouterr().out


def test_the_tool_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path, capsys):
    tool = _tool()
    out = tmp_path / "logs.json"
    assert tool.main([str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "no such folder" in capsys.readouterr().err
    plain = tmp_path / "plain"
    plain.mkdir()
    assert tool.main([str(plain), "--out", str(out)]) == 2
    assert "--commit" in capsys.readouterr().err
    repo = _fake_repository(tmp_path / "drill")
    log = repo / tool.LOGS["ptb-drill"][0]
    log.write_text(log.read_text() + "| end of epoch   9 | time: 1.00s | oops\n")
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-am", "broken"], check=True)
    assert tool.main([str(repo), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "penn-ours.txt, line 5" in err and len(err.strip().splitlines()) == 1
    # a pickle that names a class is refused, not loaded (loading would run its code)
    subprocess.run(["git", "-C", str(repo), "reset", "-q", "--hard", "HEAD~1"], check=True)
    vocab = repo / tool.BAND_VOCAB
    vocab.write_bytes(pickle.dumps(__import__("collections").Counter(rare=10)))
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-am", "a class"], check=True)
    assert tool.main([str(repo), "--out", str(out)]) == 2
    assert "collections.Counter" in capsys.readouterr().err
    assert tool.main([str(repo), "--commit", "0" * 40, "--out", str(out)]) == 2
    assert "no commit" in capsys.readouterr().err
    assert not out.exists()


def test_a_missing_or_foreign_data_file_is_one_clear_error(tmp_path):
    with pytest.raises(MissingFileError, match=r"tools/authors_logs\.py"):
        authors_data(tmp_path / "none.json")
    other = tmp_path / "other.json"
    other.write_text('{"format": "drillbook-result/3"}')
    with pytest.raises(DataError, match="drillbook-authors/1"):
        authors_data(other)
