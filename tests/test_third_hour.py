"""What a researcher and a learner meet in the third hour (the Python API, the experiment
commands, the notebook helper): every bad value refused where it enters in one line that
names it, nothing misread, no option accepted and ignored, no stale or empty result
reported as fine, advice that works when followed, and checks before any work."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import pytest
import torch
from test_cli import needs_data
from torch import nn

from drillbook.cli import main
from drillbook.cli.app import build_parser
from drillbook.configs import apply_overrides, get_config
from drillbook.errors import CheckpointError, ConfigError, RunFolderError
from drillbook.heads import HEADS, build_head
from drillbook.validation import BOOLEAN, Rule, as_list, list_of

ROOT = Path(__file__).resolve().parent.parent
V, D = 12, 8


def refused(capsys, argv: list[str]) -> str:
    """Run ``drillbook ARGV``: it fails (exit status 2) with one line on stderr, returned."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def accepted_options(command: str) -> set[str]:
    """Every option string ``drillbook COMMAND`` accepts."""
    return {o for a in _subparsers()[command]._actions for o in a.option_strings}


def _options_in(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))


def assert_advice_fits(command: str, line: str) -> None:
    """Every option ``line`` suggests is one that ``command`` accepts; those inside a
    quoted command (`drillbook train ... --resume`) are checked against that command."""
    for other, quoted in re.findall(r"`drillbook ([a-z-]+)([^`]*)`", line):
        assert _options_in(quoted) <= accepted_options(other), (other, quoted)
    rest = re.sub(r"`drillbook [^`]*`", "", line)
    named = _options_in(rest)
    assert named <= accepted_options(command), (command, named - accepted_options(command))


# ------------------------------------------------------------------ 1, 2: values
#: values that are wrong for some rule: a word for a boolean, a fraction for an integer,
#: non-finite numbers, a boolean for a number, a negative, a list with a fraction
_BAD = ["no", 1.5, math.nan, math.inf, True, -1, [0, 2.7], "x"]


def _declared() -> list[tuple[str, str, Rule]]:
    return [(kind, name, rule) for kind, cls in HEADS.items()
            for name, rule in cls.options.items()]


def test_every_head_option_declares_its_rule():
    assert _declared() and all(isinstance(rule, Rule) for _, _, rule in _declared())
    for kind, cls in HEADS.items():  # each head's own small options pass its rules
        for name, value in cls.tiny_options().items():
            assert cls.options[name](value), (kind, name, value)


@pytest.mark.parametrize(("kind", "name", "rule"), _declared(),
                         ids=[f"{k}.{n}" for k, n, _ in _declared()])
def test_a_bad_head_option_is_refused_by_build_head_naming_it(kind, name, rule):
    emb = nn.Embedding(V, D)
    for value in _BAD:
        if rule(value):
            continue
        with pytest.raises(ConfigError) as err:
            build_head(kind, vocab_size=V, d_hidden=D, embedding=emb, **{name: value})
        message = str(err.value)
        assert name in message and "\n" not in message, message


@pytest.mark.parametrize(("kind", "options", "words"), [
    ("drill", {"residual": "no"}, "residual must be true or false, got 'no'"),
    ("dual", {"residual_label": 1}, "residual_label must be true or false, got 1"),
    ("bilinear", {"residual": "false"}, "residual must be true or false"),
    ("tied", {"bias": "no"}, "bias must be true or false"),
    ("mos", {"n_experts": 1.5}, "n_experts must be a positive integer, got 1.5"),
    ("doc", {"vectors_per_layer": [0, 2.7]}, "vectors_per_layer must be a non-empty list"),
    ("doc", {"vectors_per_layer": [0, 0]}, "needs at least one vector"),
    ("doc", {"cv_weight": math.inf}, "cv_weight must be a finite number >= 0"),
    ("vmf", {"margin": math.nan, "dim": 4}, "margin must be a finite number >= 0"),
    ("vmf", {"lambda1": "0.1", "dim": 4}, "lambda1 must be a finite number >= 0"),
])
def test_the_constructors_check_too(kind, options, words):
    cls = HEADS[kind]
    args = (nn.Embedding(V, D),) if cls.shares_embedding else ()
    with pytest.raises(ConfigError, match=re.escape(words)):
        cls(V, D, *args, **options)


def test_a_boolean_is_only_true_or_false():
    assert BOOLEAN(True) and BOOLEAN(False) and BOOLEAN(torch.tensor(True).numpy()[()])
    assert not any(BOOLEAN(v) for v in ("no", "false", 0, 1, None, "True"))
    # the parameter count shows it: bias=false drops V parameters, bias="no" is refused
    plain = build_head("tied", vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D))
    none = build_head("tied", vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D),
                      bias=False)
    assert sum(p.numel() for p in plain.parameters()) - sum(
        p.numel() for p in none.parameters()) == V


def test_a_lone_string_is_never_read_as_a_list():
    from drillbook.experiments.run.jobs import table_jobs

    with pytest.raises(ConfigError, match=r"must be a list, got the string 'train.lr=5'; "
                                          r"wrap it in a list: \['train.lr=5'\]"):
        apply_overrides(get_config("tutorial/ptb-tied"), "train.lr=5")
    with pytest.raises(ConfigError, match=r"rows must be a list, got the string 'tied'"):
        table_jobs("tutorial", rows="tied")
    with pytest.raises(ConfigError, match=r"overrides must be a list, got the string"):
        table_jobs("tutorial", overrides="train.lr=5")
    assert as_list(("a", "b"), "x") == ["a", "b"]
    assert list_of(BOOLEAN, "booleans").check((True, False), "x") == [True, False]
    assert not list_of(BOOLEAN, "booleans")("tf")


def test_overrides_check_head_options_where_they_enter(capsys):
    line = refused(capsys, ["params", "tutorial/ptb-mos", "--set",
                            "head.options.n_experts=1.5"])
    assert "n_experts must be a positive integer, got 1.5" in line
    line = refused(capsys, ["params", "tutorial/ptb-drill", "--set", "head.options.bias=no"])
    assert "bias must be true or false, got 'no'" in line
    line = refused(capsys, ["params", "tutorial/ptb-tied", "--set", "data.corpus=multi30k"])
    assert "parallel corpus" in line and "ptb" in line


@pytest.mark.parametrize("seed", ["3", 1.5, 2**64, None, True])
def test_the_notebook_seed_is_an_integer(seed):
    from drillbook.notebook import setup
    from drillbook.runtime import seed_everything

    for call in (lambda: setup(seed=seed, quiet=True, device="cpu"),
                 lambda: seed_everything(seed)):
        with pytest.raises(ConfigError, match=r"seed must be an integer in \[-2\*\*63"):
            call()


def test_a_trainer_refuses_what_is_not_its_config(tmp_path):
    from drillbook.train import LanguageModelTrainer, NMTTrainer

    for trainer, config, words in [
            (LanguageModelTrainer, "tutorial/ptb-tied", "get_config('tutorial/ptb-tied')"),
            (LanguageModelTrainer, {"name": "x"}, "config_from_dict"),
            (LanguageModelTrainer, get_config("multi30k/de-en-softmax-tutorial"),
             "task_of(config)"),
            (NMTTrainer, get_config("tutorial/ptb-tied"), "is a language-model config")]:
        with pytest.raises(ConfigError, match=re.escape(words)):
            trainer(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_step_function_of_another_signature_is_refused():
    from drillbook.experiments.bench.step import check_step, trainer_step

    assert check_step(trainer_step, "trainer") is trainer_step
    with pytest.raises(ConfigError, match=r"step 'two' takes \(model, x\); a step function "
                                          r"takes the six arguments"):
        check_step(lambda model, x: None, "two")
    with pytest.raises(ConfigError, match="not callable"):
        check_step(3, "three")


def test_synthetic_rank_refuses_degenerate_sizes(capsys):
    with pytest.raises(SystemExit):  # (argparse prints its usage first)
        main(["synthetic-rank", "--vocab", "1", "--logit-rank", "1"])
    assert "--vocab: expected an integer >= 2, got '1'" in capsys.readouterr().err
    line = refused(capsys, ["synthetic-rank", "--contexts", "1"])
    assert "--logit-rank (64) cannot exceed --contexts (1)" in line
    assert_advice_fits("synthetic-rank", line)


# ------------------------------------------------------------------ 3: options
def test_every_option_of_every_command_is_read():
    """An option no command reads is accepted and ignored: each one's ``dest`` appears in
    the command line's code (read as ``args.DEST`` or by name)."""
    source = "\n".join(p.read_text() for p in (ROOT / "drillbook" / "cli").glob("*.py"))
    unread = []
    for command, parser in _subparsers().items():
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            if not re.search(rf"args\.{action.dest}\b|['\"]{action.dest}['\"]", source):
                unread.append(f"{command} {action.option_strings[0]}")
    assert not unread


@pytest.mark.parametrize(("argv", "words"), [
    (["reproduce", "tutorial", "--sharing", "mps"], "add --dry-run or drop --sharing"),
    (["reproduce", "tutorial", "--dry-run", "--together", "processes"], "drop --together"),
    (["reproduce", "tutorial", "--continue-from", "nowhere"], "tutorial is not one"),
    (["reproduce", "gpu-small", "--continue-from", "nowhere"], "no such folder"),
])
def test_reproduce_refuses_what_it_would_ignore(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, argv)
    assert words in line
    assert_advice_fits("reproduce", line)
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.fixture
def lm_run(tmp_path, monkeypatch) -> Path:
    """A run folder with a config and no data behind it: a command that reads more than
    its options fails on the data, so a refusal of its options proves they came first."""
    monkeypatch.setenv("DRILLBOOK_DATA", str(tmp_path / "no-data"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(get_config("tutorial/ptb-tied").to_dict()))
    return run


@pytest.mark.parametrize(("extra", "words"), [
    (["--dyn-search-tokens", "5"], "add --dyn-search (or drop --dyn-search-tokens)"),
    (["--dyn-search", "--dyn-lr", "0.001"], "give either the search or the two values"),
    (["--dyn-old-hyper", "--dyn-lr", "0.001"], "give both, and no search"),
])
def test_dynamic_evaluation_refuses_its_combinations_before_loading(capsys, lm_run, extra,
                                                                    words):
    line = refused(capsys, ["eval", str(lm_run), "--dynamic", *extra])
    assert words in line
    assert_advice_fits("eval", line)


# ------------------------------------------------------------------ 4: stale or empty
def test_a_dynamic_state_is_refused_for_other_weights(tmp_path):
    from test_dynamic_eval import model, streams

    from drillbook.train.dynamic import dynamic_evaluate, gradient_statistics

    m = model("tied")
    train, test = streams()
    stats = gradient_statistics(m, train, bptt=5)
    kw = dict(lr=0.02, lamb=0.01, eps=1e-3, bptt=5, state_path=tmp_path / "dyn.pt")
    done = dynamic_evaluate(m, test, stats, **kw)
    assert done.finished
    again = dynamic_evaluate(model("tied"), test, **kw, resume=True)  # the same weights
    assert again.loss == done.loss
    trained_further = model("tied", seed=1)
    with pytest.raises(CheckpointError, match="was made from other weights than these"):
        dynamic_evaluate(trained_further, test, **kw, resume=True)


def test_a_plain_file_is_not_called_a_dynamic_evaluation(tmp_path):
    from drillbook.train.dynamic import check_request

    notes = tmp_path / "notes.txt"
    notes.write_text("not a state file\n")
    with pytest.raises(RunFolderError, match="is not the state file of a dynamic evaluation; "
                                             "give --dyn-state a path that is free"):
        check_request(state_path=notes, resume=True)
    check_request(state_path=tmp_path / "free.pt")  # the advice followed: accepted


def test_a_translation_run_that_keeps_no_word_is_refused_before_it_starts(tmp_path):
    from test_nmt import small, tiny_corpus

    from drillbook.train import NMTTrainer

    config = small("multi30k/de-en-softmax", "data.min_freq=1000")
    with pytest.raises(ConfigError, match=r"data.min_freq=1000 keeps no word of the source "
                                          r"side.*lower data.min_freq to at most \d+"):
        NMTTrainer(config, tmp_path / "run", device="cpu", corpus=tiny_corpus(),
                   progress=False)
    assert not (tmp_path / "run" / "config.json").exists()


def test_params_never_prints_zero_gibibytes(capsys):
    from drillbook.cli.configs import _memory

    assert [_memory(n) for n in (512, 3 * 2**20, 2.5 * 2**30)] == [
        "512 bytes", "3.0 MiB", "2.5 GiB"]
    assert main(["params", "tutorial/ptb-tied"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "to train" in x)
    assert "MiB" in line and "0.0 GiB" not in line


def test_each_seed_trains_once():
    from drillbook.experiments.run.jobs import table_jobs

    own = get_config("tutorial/ptb-tied").train.seed
    jobs = table_jobs("tutorial", rows=["tied"], seeds=[7, 7, None, own])
    assert [job.seed for job in jobs] == [7, own]
    with pytest.raises(ConfigError, match="seed must be an integer"):
        table_jobs("tutorial", rows=["tied"], seeds=[1.5])


def test_report_finds_rows_run_only_under_another_seed(capsys, tmp_path):
    from drillbook.experiments import render_report

    shipped = ROOT / "drillbook" / "results" / "cpu-scale" / "bilinear.json"
    doc = json.loads(shipped.read_text())
    doc["seed"] = 7
    (tmp_path / "cpu-scale" / "seed-7").mkdir(parents=True)
    (tmp_path / "cpu-scale" / "seed-7" / "bilinear.json").write_text(json.dumps(doc))
    assert "| bilinear |" in render_report(tmp_path)
    assert main(["report", "--results", str(tmp_path)]) == 0
    assert "| bilinear |" in capsys.readouterr().out


def test_an_empty_data_variable_is_unset(capsys, monkeypatch):
    monkeypatch.setenv("DRILLBOOK_DATA", "")
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["data_root_from"].startswith("the default cache folder")


# ------------------------------------------------------------------ 5: advice
def test_changing_the_head_on_the_command_line_follows_the_advice(capsys):
    line = refused(capsys, ["params", "tutorial/ptb-drill", "--set", "head.kind=tied"])
    assert "drop them with the override head.options={}" in line
    assert main(["params", "tutorial/ptb-drill", "--set", "head.kind=tied", "--set",
                 "head.options={}"]) == 0  # the advice followed
    assert "tutorial/ptb-drill" in capsys.readouterr().out
    line = refused(capsys, ["params", "tutorial/ptb-drill", "--set", "head.options=3"])
    assert "head.options must be an object" in line


def test_a_run_of_an_unregistered_head_says_how_to_register_it(tmp_path):
    from drillbook.heads import TiedHead, register_head, unregister_head
    from drillbook.train.run_files import read_run_config

    config = apply_overrides(get_config("tutorial/ptb-tied"), ["head.options={}"]).to_dict()
    config["head"]["kind"] = "third-hour"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(RunFolderError, match=r"head 'third-hour', which is not registered "
                                             r"in this process.*register_head"):
        read_run_config(tmp_path)

    class ThirdHourHead(TiedHead):
        kind = "third-hour"

    register_head(ThirdHourHead)  # the advice followed
    try:
        assert read_run_config(tmp_path).head.kind == "third-hour"
    finally:
        unregister_head("third-hour")


def test_a_busy_run_folder_under_reproduce_names_runs(tmp_path, monkeypatch):
    import importlib

    r = importlib.import_module("drillbook.experiments.run.reproduce")  # the module

    monkeypatch.setattr(r, "in_use", lambda run_dir: "pid 1")
    job = r.table_jobs("tutorial", rows=["tied"])[0]
    with pytest.raises(RunFolderError, match=r"another runs folder \(--runs\)"):
        r._run_job(job, tmp_path / "run", tmp_path / "out.json", {}, name="tied",
                   device="cpu", corpus=None, loaded={}, progress=False,
                   budget_minutes=None, max_eval_tokens=None, rank_cap=None, execution={})
    assert not (tmp_path / "run").exists()


@needs_data
@pytest.mark.parametrize(("command", "config"), [
    ("eval", "tutorial/ptb-tied"), ("rank", "tutorial/ptb-tied"),
    ("translate", "multi30k/de-en-softmax-tutorial")])
def test_a_run_without_a_finished_epoch_advises_what_the_command_takes(
        capsys, tmp_path, monkeypatch, command, config):
    import io
    import sys

    def sentence() -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ein hund\n")))

    sentence()
    (tmp_path / "config.json").write_text(json.dumps(get_config(config).to_dict()))
    line = refused(capsys, [command, str(tmp_path)])
    assert "no best.pt yet" in line and "--which last" in line
    assert_advice_fits(command, line)
    # the advice followed: --which last is taken (and finds no last.pt either)
    sentence()
    line = refused(capsys, [command, str(tmp_path), "--which", "last"])
    assert "no last.pt yet" in line


# ------------------------------------------------------------------ 6: checks first
def test_a_refused_submitit_start_leaves_nothing(tmp_path):
    pytest.importorskip("submitit")
    from drillbook.experiments.run.launchers import SubmititLauncher

    with pytest.raises(ConfigError, match="submitit refuses --executor"):
        SubmititLauncher(tmp_path / "RUNS" / "submitit", parameters={"bogus_key": 3})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("argv", "words"), [
    (["configs", "--show", "tutorial/ptb-tied", "--set", "model.d_out=64"],
     "tied head needs an embedding of shape (10000, 64)"),
    (["configs", "--show", "multi30k/de-en-softmax-tutorial", "--set", "head.kind=doc",
      "--set", "head.options={}"], "the 'doc' head reads an encoder's middle layers"),
])
def test_configs_show_refuses_what_train_refuses(capsys, argv, words):
    assert words in refused(capsys, argv)


@pytest.mark.slow
def test_every_named_config_is_shown():
    from drillbook.configs import list_configs
    from drillbook.models import check_buildable

    for name in list_configs():
        check_buildable(get_config(name))



def test_the_vmf_losses_refuse_non_finite_weights():
    from drillbook.losses import max_margin_loss, nll_vmf_reg1, nll_vmf_reg2

    pred, target = torch.randn(3, 4), torch.nn.functional.normalize(torch.randn(3, 4), dim=-1)
    assert torch.isfinite(nll_vmf_reg1(pred, target, 0.02)).all()
    for call, name in [(lambda w: nll_vmf_reg1(pred, target, w), "lambda1"),
                       (lambda w: nll_vmf_reg2(pred, target, w), "lambda2"),
                       (lambda w: max_margin_loss(pred, torch.tensor([0, 1, 2]),
                                                  torch.randn(5, 4), w), "margin")]:
        for bad in (math.nan, math.inf, -0.5, "0.1"):
            with pytest.raises(ConfigError, match=f"{name} must be a finite number >= 0"):
                call(bad)
