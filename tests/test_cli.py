from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drillbook.cli import main


def test_console_script_prints_usage():
    out = subprocess.run([sys.executable, "-m", "drillbook.cli", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("usage: drillbook") and "synthetic-rank" in out


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "usage: drillbook" in capsys.readouterr().out


def test_heads_lists_every_kind(capsys):
    main(["heads"])
    out = capsys.readouterr().out
    assert "softmax" in out and "tied" in out and "Eq. 2" in out


def test_synthetic_rank_json(capsys):
    assert main(["synthetic-rank", "--contexts", "60", "--vocab", "16", "--logit-rank", "16",
                 "--dims", "2", "4", "--steps", "50", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["true_rank"] == 16
    assert [f["rank_numpy_tol"] for f in report["fits"]] == [4, 6]


def test_bad_arguments_exit_2_with_a_message(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["synthetic-rank", "--vocab", "8", "--logit-rank", "9"])
    assert exc.value.code == 2
    assert "cannot exceed --vocab" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["synthetic-rank", "--dims", "0"])
    assert "positive integer" in capsys.readouterr().err


# ---------------------------------------------------------------- engine commands
needs_data = pytest.mark.skipif(
    not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir(),
    reason="needs the corpora: set DRILLBOOK_DATA (make test points it at ../shared/data)")

MICRO = ["model.emsize=16", "model.nhid=16", "train.max_batches_per_epoch=3",
         "train.epochs=1", "train.max_eval_tokens=300", "train.batch_size=8",
         "train.eval_batch_size=4", "train.test_batch_size=4"]


def test_configs_lists_the_paper_setups(capsys):
    assert main(["configs"]) == 0
    out = capsys.readouterr().out
    for name in ("ptb/awd-lstm", "ptb/awd-lstm-drill", "wt2/awd-lstm-dual", "tutorial/ptb-tied"):
        assert name in out


def test_params_json_matches_the_paper(capsys):
    assert main(["params", "ptb/awd-lstm-drill", "--set", "head.options.depth=2",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total_m_as_printed_in_drill"] == 24.5
    assert report["output_layer_dedicated"] == 2 * (400 * 400 + 400) + 10_000
    assert report["output_layer_shared"] == 10_000 * 400


def test_unknown_config_and_key_are_errors_that_list_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["params", "ptb/awd-lstn"])
    assert exc.value.code == 2
    assert "choose one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["params", "ptb/awd-lstm", "--set", "train.nope=1"])
    assert "valid keys in train" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["params", "ptb/awd-lstm", "--set", "head.kind=mystery"])
    assert "unknown head kind 'mystery'" in capsys.readouterr().err


@needs_data
def test_data_verify_passes_on_the_shared_copy(capsys):
    assert main(["data", "verify", "ptb", "wikitext-2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all(line.startswith("ok ") for line in lines)


def test_data_verify_reports_missing_files(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DRILLBOOK_DATA", str(tmp_path))
    assert main(["data", "verify", "ptb"]) == 1
    captured = capsys.readouterr()
    assert "MISSING" in captured.out and "drillbook data download" in captured.err


@needs_data
def test_train_eval_rank_resume_round_trip(capsys, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "tutorial/ptb-drill", "--set", *MICRO, "--out", str(run),
                 "--quiet"]) == 0
    assert "stopped (done) after 1 epoch" in capsys.readouterr().out
    assert {p.name for p in run.iterdir()} >= {"config.json", "log.jsonl", "last.pt",
                                               "best.pt"}
    with pytest.raises(SystemExit):  # the folder is taken
        main(["train", "tutorial/ptb-drill", "--set", *MICRO, "--out", str(run)])
    assert "--resume" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # another window length: refused
        main(["train", "tutorial/ptb-drill", "--set", *MICRO, "train.bptt=7",
              "--out", str(run), "--resume"])
    assert "different config" in capsys.readouterr().err
    assert main(["train", "tutorial/ptb-drill", "--set", *MICRO, "train.epochs=2",
                 "--out", str(run), "--resume", "--quiet"]) == 0  # more epochs: fine
    assert "stopped (done) after 2 epoch" in capsys.readouterr().out
    assert main(["eval", str(run), "--split", "valid", "--max-tokens", "300", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokens"] >= 300 and 1 < result["ppl"] < 20_000
    assert main(["rank", str(run), "--max-tokens", "200", "--json"]) == 0
    rank = json.loads(capsys.readouterr().out)
    assert rank["vocab_size"] == 10_000 and rank["rank_tol_1"] <= 16 + 2


def test_eval_of_a_folder_that_is_not_a_run(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(tmp_path)])
    assert exc.value.code == 2 and "not a drillbook run folder" in capsys.readouterr().err


def test_debug_variable_shows_the_traceback(monkeypatch):
    monkeypatch.setenv("DRILLBOOK_DEBUG", "1")
    with pytest.raises(Exception, match="unknown config"):
        main(["params", "ptb/awd-lstn"])


# ---------------------------------------------------------------- config files
@pytest.fixture
def captured_configs(use_trainer):
    """Trainers that only record the config they are given."""
    seen = []

    class Recorder:
        epoch, best_bleu = 1, 0.0

        def __init__(self, config, run_dir, **kwargs):
            seen.append(config)
            self.task = config.task

        def fit(self, **kwargs):
            from drillbook.train import RunStatus

            return RunStatus(reason="done", epoch=1, best_val_loss=1.0, best_val_bleu=1.0)

    use_trainer("language-model", Recorder)
    use_trainer("translation", Recorder)
    return seen


@pytest.mark.parametrize(("name", "fmt"), [("tutorial/ptb-doc", "json"),
                                           ("tutorial/ptb-doc", "yaml"),
                                           ("multi30k/de-en-drill", "json")])
def test_show_then_train_from_the_file_builds_the_same_config(
        capsys, tmp_path, captured_configs, name, fmt):
    from drillbook.configs import apply_overrides, get_config

    if fmt == "yaml":
        pytest.importorskip("yaml")
    overrides = ["train.epochs=3", "head.options.depth=3" if "drill" in name else
                 "head.options.latent_dropout=0.1"]
    assert main(["configs", "--show", name, "--set", *overrides, "--format", fmt]) == 0
    path = tmp_path / f"run.{fmt}"
    path.write_text(capsys.readouterr().out)
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "run")]) == 0
    assert str(tmp_path / "run") in capsys.readouterr().out
    expected = apply_overrides(get_config(name), overrides)
    assert captured_configs == [expected] and captured_configs[0].hash() == expected.hash()
    # --set applies on top of the file, as on top of a name
    assert main(["train", "--config", str(path), "--set", "train.seed=7", "--out",
                 str(tmp_path / "run2")]) == 0
    assert captured_configs[1].train.seed == 7


def test_show_prints_json_by_default_and_params_reads_a_file(capsys, tmp_path):
    assert main(["configs", "--show", "tutorial/ptb-tied"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "tutorial/ptb-tied" and shown["task"] == "language-model"
    shown["model"]["emsize"] = shown["model"]["nhid"] = 16
    (tmp_path / "small.json").write_text(json.dumps(shown))
    assert main(["params", "--config", str(tmp_path / "small.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 174_352  # as with --set


def test_param_report_moved_to_the_library_and_the_old_import_still_works():
    from drillbook.cli import param_report
    from drillbook.models import param_report as in_the_library

    assert param_report is in_the_library


def test_a_name_and_a_file_together_or_neither_are_usage_errors(capsys, tmp_path):
    for argv in (["train"], ["train", "tutorial/ptb-tied", "--config", "x.json"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert "not allowed with" in capsys.readouterr().err
