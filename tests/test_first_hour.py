"""What a new user meets in the first hour: every failure one line naming the problem and
the fix, advice that leads somewhere, and the small conveniences (--version, suggestions,
a translation config sized for a laptop)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_cli import needs_data
from test_train import make, tiny_config, tiny_corpus

from drillbook.cli import main
from drillbook.errors import ResourceError

ROOT = Path(__file__).resolve().parent.parent


def one_line(capsys, argv: list[str], status: int = 2) -> str:
    """Run ``drillbook ARGV``; it exits with ``status`` and one line on stderr."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == status and err.count("\n") == 1, err
    return err.strip()


# ------------------------------------------------------------------ memory
@needs_data
def test_a_model_too_large_for_the_machine_is_refused_before_allocating(capsys, tmp_path):
    run = tmp_path / "run"
    line = one_line(capsys, ["train", "tutorial/ptb-tied", "--set", "model.nhid=200000",
                             "--out", str(run)])
    assert "160,207,756,560 parameters" in line and "GiB free" in line
    assert "make the model smaller (model.nhid" in line
    assert not run.exists()


def test_params_says_what_training_the_model_needs(capsys):
    assert main(["params", "tutorial/ptb-tied", "--set", "model.nhid=200000"]) == 0
    out = capsys.readouterr().out
    assert "to train, at least" in out and "will refuse it here" in out
    assert main(["params", "tutorial/ptb-tied"]) == 0
    assert "will refuse" not in capsys.readouterr().out


def test_running_out_of_memory_while_training_is_one_line(tmp_path, monkeypatch):
    trainer = make(tmp_path / "run", tiny_config())
    real = trainer.train_step

    def oom(batch):
        if trainer.step == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(batch)

    monkeypatch.setattr(trainer, "train_step", oom)
    with pytest.raises(ResourceError, match=r"ran out of memory at epoch 1, step 2 \(CUDA "
                                            r"out of memory.*lower train\.batch_size") as exc:
        trainer.fit()
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "run").exists()  # nothing was saved: nothing is left


@needs_data
def test_a_batch_larger_than_the_text_is_one_line(capsys, tmp_path):
    line = one_line(capsys, ["train", "tutorial/ptb-tied", "--set",
                             "train.batch_size=100000000", "--out", str(tmp_path / "run")])
    assert "train.batch_size=100000000 leaves no batch: the train text has" in line
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ advice that leads
def test_resuming_a_run_of_the_other_task_says_so(capsys, tmp_path):
    run = tmp_path / "run"
    make(run, tiny_config(epochs=1)).fit()
    line = one_line(capsys, ["train", "multi30k/de-en-softmax", "--out", str(run),
                             "--resume"])
    assert "holds a language-model run, and a translation config cannot continue it" in line


def test_eval_of_a_run_without_a_finished_epoch_names_which_last(capsys, tmp_path):
    run = tmp_path / "run"
    make(run, tiny_config(epochs=1, checkpoint_steps=1)).fit(max_steps=1)
    assert not (run / "best.pt").exists()
    from drillbook.errors import MissingFileError
    from drillbook.train import load_run

    with pytest.raises(MissingFileError, match=r"no best\.pt yet \(no epoch finished\).*"
                                               r"--which last"):
        load_run(run, which="best", corpus=tiny_corpus())


def test_ctrl_c_in_a_plain_eval_promises_no_resume(capsys, tmp_path, monkeypatch):
    from drillbook.train import TASKS

    run = tmp_path / "run"
    make(run, tiny_config(epochs=1)).fit()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    task = TASKS["language-model"]
    monkeypatch.setitem(TASKS, "language-model", dataclasses.replace(
        task, load_data=lambda config: None, load_run=interrupted))
    line = one_line(capsys, ["eval", str(run)], status=130)
    assert line == "drillbook: interrupted"


def test_one_dynamic_option_without_dynamic_is_grammatical(capsys, tmp_path):
    run = tmp_path / "run"
    make(run, tiny_config(epochs=1)).fit()
    line = one_line(capsys, ["eval", str(run), "--dyn-lr", "0.1"])
    assert "--dyn-lr only applies to dynamic evaluation: add --dynamic (or drop it)" in line
    line = one_line(capsys, ["eval", str(run), "--dyn-lr", "0.1", "--dyn-bptt", "5"])
    assert "only apply to dynamic evaluation: add --dynamic (or drop them)" in line


def test_the_command_line_is_one_line_in_a_real_process(tmp_path):
    done = subprocess.run([sys.executable, "-m", "drillbook.cli", "train",
                           "tutorial/ptb-tied", "--out", str(tmp_path / "f.txt"), "--set",
                           "train.lr=-1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not done.stdout
    assert json.dumps(done.stderr)  # text, no traceback
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------ the first hour
def test_version(capsys):
    from drillbook import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"drillbook {__version__}\n"


@pytest.mark.parametrize(("argv", "hint"), [
    (["params", "tutorial/ptb-dril"], "(did you mean 'tutorial/ptb-drill'"),
    (["params", "tutorial/ptb-drill", "--set", "train.lrr=3"], "(did you mean 'train.lr'?)"),
    (["params", "tutorial/ptb-drill", "--set", "traim.lr=3"], "(did you mean 'train.lr'?)"),
    (["params", "tutorial/ptb-drill", "--set", "head.kind=dril"], "(did you mean 'drill'?)"),
])
def test_a_typo_gets_a_suggestion(capsys, argv, hint):
    assert hint in one_line(capsys, argv)


def test_heads_prints_whole_descriptions(capsys):
    assert main(["heads"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "or with ``mix=\"logits\"`` the mixture of contexts, its low-rank baseline." in out
    assert "mixture components from several layers (Takase et al., 2018, Eqs. 7-13)." in out


def test_a_run_without_a_finished_epoch_says_so(capsys, use_trainer):
    from drillbook.train import RunStatus

    class Stopped:
        def __init__(self, *args, **kwargs):
            pass

        def fit(self, **kwargs):
            return RunStatus(reason="budget", epoch=0)

    use_trainer("language-model", Stopped)
    assert main(["train", "tutorial/ptb-tied", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "no epoch finished" in out and "inf" not in out


def test_training_without_a_terminal_prints_a_line_within_the_epoch(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.setattr("drillbook.train.loop.LINE_SECONDS", 0.0)  # every update, here
    from drillbook.train import LanguageModelTrainer

    # progress=None: no bar off a terminal
    trainer = LanguageModelTrainer(tiny_config(epochs=1), tmp_path / "run", device="cpu",
                                   corpus=tiny_corpus(), progress=None)
    trainer.fit()
    err = capsys.readouterr().err
    assert "epoch 1: 1/" in err and "updates | loss" in err


def test_the_tutorial_translation_configs_are_cpu_sized(capsys):
    from drillbook.configs import get_config

    for name in ("multi30k/de-en-softmax-tutorial", "multi30k/de-en-drill-tutorial"):
        config = get_config(name)
        assert (config.model.hidden, config.train.epochs) == (128, 3)
    readme = (ROOT / "README.md").read_text()
    assert "drillbook train multi30k/de-en-drill-tutorial --out runs/nmt-drill" in readme
    assert 'pip install "drillbook[nmt,yaml] @' in readme


# ------------------------------------------------------------------ the library
V, D = 50, 8


def every_head():
    import warnings

    from drillbook.heads import HEADS, build_head

    for kind, cls in HEADS.items():
        options = cls.tiny_options()
        if cls.reads_layers:
            options["layer_sizes"] = [D, D, D]
        with warnings.catch_warnings():  # the vmf head's random table: said elsewhere
            warnings.simplefilter("ignore")
            yield kind, build_head(kind, vocab_size=V, d_hidden=D,
                                   embedding=torch.nn.Embedding(V, D), **options)


def test_every_head_takes_the_layers_in_the_same_call():
    from drillbook.heads import Features

    torch.manual_seed(0)
    h, y = torch.randn(5, 3, D), torch.randint(0, V, (5, 3))
    layers = (torch.randn(5, 3, D), torch.randn(5, 3, D), h)
    for _kind, head in every_head():
        head.eval()
        assert torch.equal(head.loss(h, y, layers=layers), head.loss(Features(h, layers), y))
        if head.is_distribution:
            assert torch.equal(head.log_prob(h, layers=layers),
                               head.log_prob(Features(h, layers)))
        with pytest.raises(ValueError, match="given twice"):
            head.loss(Features(h, layers), y, layers=layers)
        if head.reads_layers:
            with pytest.raises(ValueError, match="needs Features with all 3 layer outputs"):
                head.log_prob(h)


def test_regularize_adds_docs_balance_term_and_nothing_for_other_heads():
    torch.manual_seed(0)
    h, y = torch.randn(5, 3, D), torch.randint(0, V, (5, 3))
    layers = (torch.randn(5, 3, D), torch.randn(5, 3, D), h)
    for kind, head in every_head():
        head.eval()  # the same dropout masks (none) in both calls
        plain = head.loss(h, y, layers=layers)
        extra = head.regularizer(type_features(h, layers))
        with_term = head.loss(h, y, layers=layers, regularize=True)
        if kind == "doc":
            assert extra is not None and float(extra) > 0
            assert torch.allclose(with_term, plain + extra)
            with_term.backward()  # the balance term trains the mixture weights
            assert head.prior.weight.grad is not None
        else:
            assert extra is None and torch.equal(with_term, plain)


def type_features(h, layers):
    from drillbook.heads import Features

    return Features(h, layers)


def test_loss_checks_ids_without_waiting_for_an_accelerator(monkeypatch):
    """On an accelerator a head must not read values back to check the targets (each
    read stops the host until the device catches up). On the CPU that costs nothing, so
    the GPU path is forced here and every op the loss dispatches is recorded."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    sync = {"_local_scalar_dense", "nonzero", "masked_select", "item", "is_nonzero"}
    h, y = torch.randn(5, 3, D), torch.randint(0, V, (5, 3))
    layers = (torch.randn(5, 3, D), torch.randn(5, 3, D), h)
    for kind, head in every_head():
        monkeypatch.setattr("drillbook.heads.base.reads_back", lambda target: True)
        with Recorder() as on_cpu:
            head.loss(h, y, layers=layers)
        assert on_cpu.ops & sync, kind  # the CPU path reads the ids back (for free)
        monkeypatch.setattr("drillbook.heads.base.reads_back", lambda target: False)
        with Recorder() as on_device:
            head.loss(h, y, layers=layers, regularize=True).backward()
        assert not on_device.ops & sync, (kind, on_device.ops & sync)
        with pytest.raises(RuntimeError, match=r"target ids must lie in \[0, 50\)"):
            head.loss(h, torch.full((5, 3), V), layers=layers)  # still checked


def test_public_packages_export_only_their_api():
    import importlib
    import pkgutil

    import drillbook

    for info in pkgutil.iter_modules(drillbook.__path__):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"drillbook.{info.name}")
        public = {n for n in dir(module) if not n.startswith("_")}
        submodules = {m.name for m in pkgutil.iter_modules(module.__path__)}
        assert public - set(module.__all__) - submodules == set(), module.__name__


def test_a_vmf_head_without_target_vectors_warns_once():
    import warnings

    from drillbook.heads import build_head

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):  # one line builds three heads: one warning
            build_head("vmf", vocab_size=V, d_hidden=D, dim=4)
    assert len(caught) == 1 and "random table" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a table given: no warning at all
        build_head("vmf", vocab_size=V, d_hidden=D, target_embeddings=torch.randn(V, 4))
