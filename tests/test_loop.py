"""The one training loop: precision, gradient accumulation, compile, the console line."""

from __future__ import annotations

import os

import pytest
import torch
from test_nmt import small
from test_nmt import tiny_corpus as tiny_parallel
from test_train import make, tiny_config, tiny_corpus

from drillbook.cli import main
from drillbook.configs import Config, HeadConfig, NMTConfig, apply_overrides
from drillbook.errors import ConfigError
from drillbook.heads import HEADS
from drillbook.precision import precision_label, resolve_precision
from drillbook.train import LanguageModelTrainer, NMTTrainer, load_checkpoint, read_log

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def lm(run_dir, config=None, **kw) -> LanguageModelTrainer:
    return LanguageModelTrainer(config or tiny_config(), run_dir, device="cpu",
                                corpus=tiny_corpus(), progress=False, **kw)


def no_dropout(**train) -> Config:
    config = tiny_config(**train)
    m = config.model
    m.dropout = m.dropouth = m.dropouti = m.dropoute = m.wdrop = 0.0
    return config


def transformer(**train) -> Config:
    """The tiny LM with a transformer encoder: no LSTM, so fp16 autocast runs on the CPU."""
    config = tiny_config(**train)
    config.model.encoder, config.model.nhead, config.model.d_ff = "transformer", 2, 16
    config.model.max_len = 64
    return config


# ------------------------------------------------------------------ precision
def test_precision_resolves_per_device_and_names_itself_in_results():
    assert [resolve_precision(a, "cpu") for a in ("fp32", "bf16", "fp16", "auto", "off")] == \
        ["fp32", "bf16", "fp16", "fp32", "fp32"]  # auto: no bf16 arithmetic on most CPUs
    assert [precision_label(p) for p in ("fp32", "bf16", "fp16", "tf32", "bf16-autocast")] == \
        ["fp32", "bf16", "fp16", "tf32", "bf16"]  # one name everywhere; old labels read
    with pytest.raises(ConfigError, match=r"train\.amp='half'.*fp32, bf16, fp16, tf32, auto"):
        resolve_precision("half", "cpu")
    with pytest.raises(ConfigError, match=r"fp16 needs a gradient scaler.*not meta"):
        resolve_precision("fp16", "meta")


def test_tf32_is_refused_where_there_is_no_tf32(monkeypatch):
    """``tf32`` on a CPU, or on a GPU older than compute capability 8.0 (a T4 is 7.5),
    would train float32 under a ``tf32`` label: refused, naming the device."""
    with pytest.raises(ConfigError, match=r"tf32 needs an NVIDIA GPU of compute "
                                          r"capability 8\.0.*not the cpu; use train\.amp=fp32"):
        resolve_precision("tf32", "cpu")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(ConfigError, match=r"not Tesla T4 \(7\.5\)"):
        resolve_precision("tf32", "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert resolve_precision("tf32", "cuda") == "tf32"
    assert resolve_precision("auto", "cuda") == "fp32"  # offered, never chosen for you


def test_tf32_covers_the_whole_step_and_nothing_after(tmp_path, monkeypatch):
    """TF32 products in the forward pass, the backward pass and the update, and float32
    again once the step is over (evaluation, other code in the process). The flag is
    torch's, per process; a CPU ignores it, so here it is read, not measured."""
    import drillbook.train.loop as loop

    monkeypatch.setattr(loop, "resolve_precision", lambda amp, device, mixture=False: "tf32")
    trainer = make(tmp_path / "run", tiny_config(epochs=1, max_batches_per_epoch=2))
    flag = torch.backends.cuda.matmul
    assert flag.allow_tf32 is False
    seen = []
    head_loss = trainer.model.head.loss

    def loss(*args, **kwargs):
        out = head_loss(*args, **kwargs)
        seen.append(("forward", flag.allow_tf32))
        if out.requires_grad:
            out.register_hook(lambda grad: seen.append(("backward", flag.allow_tf32)))
        return out

    monkeypatch.setattr(trainer.model.head, "loss", loss)
    trainer.train_step(next(iter(trainer.batches())))
    assert seen == [("forward", True), ("backward", True)]
    assert flag.allow_tf32 is False
    seen.clear()
    trainer._validate()
    assert seen == [("forward", False)] * len(seen) and seen


def test_auto_precision_is_bf16_only_for_mixtures_on_a_bf16_gpu(monkeypatch):
    """The measured rule: bf16 helped only the mixture head (H200), so ``auto`` is
    float32 for every other head, on every device, and for mixtures without bf16."""
    for bf16 in (True, False):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda b=bf16: b)
        assert resolve_precision("auto", "cuda", mixture=True) == ("bf16" if bf16 else "fp32")
        assert resolve_precision("auto", "cuda") == "fp32"
    assert resolve_precision("auto", "cpu", mixture=True) == "fp32"


@pytest.mark.parametrize("kind", sorted(k for k, c in HEADS.items() if c.is_distribution))
def test_a_run_resolves_auto_by_its_head(tmp_path, monkeypatch, kind):
    """The trainer asks the registry whether its head is a mixture; on a CPU the answer
    is float32 for all, so only what the trainer passes on is checked here."""
    seen = {}
    import drillbook.train.loop as loop

    def spy(amp, device, *, mixture=False):
        seen["mixture"] = mixture
        return "fp32"

    monkeypatch.setattr(loop, "resolve_precision", spy)
    config = tiny_config(amp="auto")
    config.head = HeadConfig(kind, HEADS[kind].tiny_options())
    make(tmp_path / "run", config)
    assert seen["mixture"] is HEADS[kind].is_mixture


def test_old_boolean_amp_values_still_load_and_hash_as_today():
    old = tiny_config().to_dict()
    for value, now in [(False, "fp32"), (True, "bf16"), ("off", "fp32")]:
        old["train"]["amp"] = value
        assert Config.from_dict(old).train.amp == now
    old["train"]["amp"] = False
    del old["train"]["accum_steps"], old["train"]["compile"]  # a run folder of before
    assert Config.from_dict(old).hash() == tiny_config().hash()
    nmt = small("multi30k/de-en-softmax").to_dict()
    nmt["train"]["amp"] = True
    assert NMTConfig.from_dict(nmt).train.amp == "bf16"
    assert apply_overrides(tiny_config(), ["train.amp=fp16"]).train.amp == "fp16"
    with pytest.raises(ConfigError, match=r"invalid train\.amp='fast'"):
        apply_overrides(tiny_config(), ["train.amp=fast"])


def test_bf16_autocast_trains_on_the_cpu_and_every_record_names_it(tmp_path):
    short = dict(epochs=1, max_batches_per_epoch=3, max_eval_tokens=40)  # bf16 is slow here
    fp32 = lm(tmp_path / "fp32", tiny_config(**short))
    fp32.fit()
    bf16 = lm(tmp_path / "bf16", tiny_config(**short, amp="bf16"))
    bf16.fit()
    a, b = read_log(tmp_path / "fp32")[0], read_log(tmp_path / "bf16")[0]
    assert (a["precision"], b["precision"]) == ("fp32", "bf16")
    assert a["train_loss"] != b["train_loss"]  # the step really ran in bf16
    assert abs(a["train_loss"] - b["train_loss"]) < 0.1
    assert bf16.scaler is None


def test_fp16_checkpoints_its_gradient_scaler_and_resumes_to_the_bit(tmp_path):
    config = transformer(epochs=2, amp="fp16", checkpoint_steps=1)
    whole = lm(tmp_path / "whole", config)
    whole.fit()
    assert whole.scaler is not None and read_log(tmp_path / "whole")[0]["precision"] == \
        "fp16"
    part = lm(tmp_path / "part", config)
    part.fit(max_steps=11)  # stops mid-epoch 2
    saved = load_checkpoint(tmp_path / "part" / "last.pt")
    assert saved["step"] == 11 and saved["scaler"] == part.scaler.state_dict()
    assert saved["scaler"]["_growth_tracker"] == 11  # one per finite step
    resumed = lm(tmp_path / "part", config, resume=True)
    assert resumed.scaler.state_dict() == saved["scaler"]
    resumed.fit()
    for (name, w), v in zip(whole.model.state_dict().items(),
                            resumed.model.state_dict().values(), strict=True):
        assert torch.equal(w, v), name
    assert [r["train_loss"] for r in read_log(tmp_path / "whole")] == \
        [r["train_loss"] for r in read_log(tmp_path / "part")]


def test_fp16_with_an_lstm_on_the_cpu_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match=r"fp16 on the CPU.*no float16 kernel.*bf16"):
        lm(tmp_path / "run", tiny_config(amp="fp16"))
    assert not (tmp_path / "run" / "config.json").exists()


def test_translation_trains_in_bf16_on_the_cpu_and_refuses_fp16_there(tmp_path):
    config = small("multi30k/de-en-softmax", "train.amp=bf16", "train.epochs=1",
                   "train.max_batches_per_epoch=2", "train.max_eval_pairs=4")
    NMTTrainer(config, tmp_path / "bf16", device="cpu", corpus=tiny_parallel(),
               progress=False).fit()
    assert read_log(tmp_path / "bf16")[0]["precision"] == "bf16"
    with pytest.raises(ConfigError, match=r"fp16 on the CPU"):
        NMTTrainer(small("multi30k/de-en-softmax", "train.amp=fp16"), tmp_path / "fp16",
                   device="cpu", corpus=tiny_parallel(), progress=False)


@CUDA
def test_fp16_on_cuda_trains_with_a_scaler(tmp_path):
    trainer = LanguageModelTrainer(tiny_config(epochs=1, amp="fp16"), tmp_path / "run",
                                   device="cuda", corpus=tiny_corpus(), progress=False)
    trainer.fit()
    assert trainer.scaler is not None and trainer.scaler.get_scale() > 0
    assert read_log(tmp_path / "run")[0]["precision"] == "fp16"


@CUDA
def test_tf32_on_cuda_trains_names_itself_and_leaves_float32_behind(tmp_path):
    """On a GPU with TF32 (compute capability 8.0 or newer; skipped on older ones): the
    run trains, every record says ``tf32``, its validation loss is a float32
    evaluation's (the same weights evaluated again outside the run agree), and the
    process's matmul setting is float32 again afterwards."""
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("this GPU has no TF32")
    trainer = LanguageModelTrainer(no_dropout(epochs=1, amp="tf32"), tmp_path / "run",
                                   device="cuda", corpus=tiny_corpus(), progress=False)
    trainer.fit()
    record = read_log(tmp_path / "run")[0]
    assert record["precision"] == "tf32"
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert trainer._validate() == record["val_loss"]


# ------------------------------------------------------------------ accumulation
def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_two_accumulated_column_slices_make_the_same_language_model_step(tmp_path):
    """Dropout off: two slices of B/2 columns give the one-batch loss and gradients, and,
    with the state carried per slice, the same weights three steps later."""
    runs = {}
    for k in (1, 2):
        trainer = lm(tmp_path / str(k), no_dropout(accum_steps=k))
        trainer.fit(max_steps=1)
        runs[k] = (trainer.epoch_loss, grads(trainer.model))
        trainer.fit(max_steps=3)
        runs[k] += (trainer.model.state_dict(),)
    (loss1, g1, w1), (loss2, g2, w2) = runs[1], runs[2]
    assert loss2 == pytest.approx(loss1, rel=1e-6)
    assert g1.keys() == g2.keys() and len(g1) > 0
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], rtol=1e-5, atol=1e-7)
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=1e-5, atol=1e-6)


def test_accumulation_must_divide_the_language_model_batch():
    with pytest.raises(ConfigError, match=r"accum_steps=3: it must divide "
                                          r"train\.batch_size=4"):
        apply_overrides(tiny_config(), ["train.accum_steps=3"])


def test_two_accumulated_pieces_make_the_same_translation_step(tmp_path):
    losses, gradients = [], []
    for k in (1, 2):
        config = small("multi30k/de-en-softmax", "model.dropout=0", f"train.accum_steps={k}")
        trainer = NMTTrainer(config, tmp_path / str(k), device="cpu", corpus=tiny_parallel(),
                             progress=False)
        batch = trainer._epoch_batch_list()[0]
        losses.append(float(trainer.train_step(batch)))  # a device tensor: no wait
        gradients.append(grads(trainer.model))
        trainer.close()
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
    for name in gradients[0]:
        torch.testing.assert_close(gradients[1][name], gradients[0][name], rtol=1e-5,
                                   atol=1e-7)
    with pytest.raises(ConfigError, match=r"accum_steps=5.*batch_size=4 sentences"):
        small("multi30k/de-en-softmax", "train.accum_steps=5")


# ------------------------------------------------------------------ compile
def test_compile_is_a_recorded_flag_that_compiles_the_model_in_place(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, *a, **k: calls.append(self))
    config = apply_overrides(tiny_config(epochs=1), ["train.compile=true"])
    trainer = lm(tmp_path / "run", config)
    assert calls == [trainer.model]  # in place: the state_dict keys stay the model's
    trainer.fit()
    assert Config.from_dict(config.to_dict()).train.compile is True
    assert '"compile": true' in (tmp_path / "run" / "config.json").read_text()
    assert tiny_config().train.compile is False


@pytest.mark.skipif(not os.environ.get("DRILLBOOK_TEST_COMPILE"),
                    reason="torch.compile takes long on a CPU: set DRILLBOOK_TEST_COMPILE=1")
def test_a_compiled_model_trains_to_the_same_losses_within_tolerance(tmp_path):
    plain = lm(tmp_path / "plain", no_dropout(epochs=1))
    plain.fit()
    compiled = lm(tmp_path / "compiled", no_dropout(epochs=1, compile=True))
    compiled.fit()
    a, b = read_log(tmp_path / "plain")[0], read_log(tmp_path / "compiled")[0]
    assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)


# ------------------------------------------------------------------ the console
def test_a_run_off_a_terminal_prints_one_plain_line_per_epoch(tmp_path, capsys):
    trainer = LanguageModelTrainer(tiny_config(epochs=3, checkpoint_steps=4), tmp_path / "run",
                                   device="cpu", corpus=tiny_corpus())  # progress=None: the default
    trainer.fit()
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 3
    for epoch, (line, record) in enumerate(zip(lines, read_log(tmp_path / "run"),
                                               strict=True), 1):
        assert line.startswith(f"epoch {epoch}/3 | {record['step']} updates | train loss "
                               f"{record['train_loss']:.3f} | val ppl {record['val_ppl']:.2f}"
                               f" | lr 5 | ")
        assert line.endswith("checkpoint") and "tok/s" in line
        assert ("switched to averaged SGD" in line) == record["switched_to_asgd"]
        assert "mid-epoch checkpoint" in line  # every 4 steps
    assert any("saved best" in line for line in lines)


def test_a_translation_run_says_its_bleu_and_quiet_is_silent(tmp_path, capsys):
    trainer = NMTTrainer(small("multi30k/de-en-softmax", "train.epochs=2"), tmp_path / "run",
                         device="cpu", corpus=tiny_parallel())
    trainer.label = "row 2/5 softmax"  # what reproduce sets
    trainer.fit()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["row 2/5 softmax: epoch 1/2",
                                                         "row 2/5 softmax: epoch 2/2"]
    assert all(" | val BLEU " in line for line in lines)
    lm(tmp_path / "quiet", tiny_config(epochs=1)).fit()  # progress=False
    assert capsys.readouterr().err == ""


def test_the_cli_leaves_bars_to_terminals_and_quiet_silences_them(tmp_path, use_trainer):
    seen = []

    class Recorder:
        def __init__(self, config, run_dir, **kwargs):
            seen.append(kwargs["progress"])

        def fit(self, **kwargs):
            from drillbook.train import RunStatus

            return RunStatus(reason="done", epoch=1, best_val_loss=1.0)

    use_trainer("language-model", Recorder)
    for extra in ([], ["--quiet"]):
        assert main(["train", "tutorial/ptb-tied", "--out", str(tmp_path / "r"),
                     *extra]) == 0
    assert seen == [None, False]


def test_checkpoints_written_before_the_loop_still_resume(tmp_path):
    """A translation last.pt of before (no CUDA RNG, no scaler, a two-number epoch_acc)
    and a language-model one (no scaler) resume and finish."""
    from drillbook.train import save_atomic

    nmt = small("multi30k/de-en-softmax", "train.max_batches_per_epoch=2",
                "train.max_eval_pairs=4")
    NMTTrainer(nmt, tmp_path / "nmt", device="cpu", corpus=tiny_parallel(),
               progress=False).fit(max_epochs=1)
    state = load_checkpoint(tmp_path / "nmt" / "last.pt")
    for key in ("rng_cuda", "scaler"):
        del state[key]
    state["epoch_acc"] = state["epoch_acc"][:2]
    save_atomic(state, tmp_path / "nmt" / "last.pt")
    resumed = NMTTrainer(nmt, tmp_path / "nmt", device="cpu", corpus=tiny_parallel(),
                         resume=True, progress=False)
    assert resumed.epoch == 2 and resumed.fit().record["epoch"] == 2

    config = tiny_config(epochs=2, max_batches_per_epoch=4, max_eval_tokens=40)
    lm(tmp_path / "lm", config).fit(max_steps=3)
    state = load_checkpoint(tmp_path / "lm" / "last.pt")
    del state["scaler"]
    save_atomic(state, tmp_path / "lm" / "last.pt")
    finished = lm(tmp_path / "lm", config, resume=True)
    assert finished.step == 3 and finished.fit().reason == "done"


def test_the_largest_weight_is_finite_exactly_when_every_weight_is(monkeypatch):
    """The step's weight check: NaN and inf anywhere are seen, huge finite weights are
    not mistaken for them (no sum to overflow), on torch with and without
    ``get_total_norm`` (2.6+)."""
    from drillbook.train.loop import largest_weight

    def weights(*bad):
        ws = [torch.randn(3, 4), torch.full((5,), 3e38), torch.randn(2)]
        for i, value in bad:
            ws[i][0] = value
        return ws

    for fallback in (False, True):
        if fallback:
            monkeypatch.delattr(torch.nn.utils, "get_total_norm")
        assert largest_weight(weights()) == 3e38
        assert torch.isfinite(largest_weight(weights()))
        assert not torch.isfinite(largest_weight(weights((0, float("nan")))))
        assert not torch.isfinite(largest_weight(weights((2, -float("inf")))))
