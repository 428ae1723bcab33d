"""Dynamic evaluation: the update rule by hand, the stream against a float64 reference,
learning from repeated text, lr = 0 as static evaluation, resume, every language-model
head, the label caches, and ``drillbook eval --dynamic``."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from test_cli import MICRO, needs_data
from test_reproduce import TINY_LM, tiny_reproduce
from test_train import tiny_corpus
from torch import nn

from drillbook.configs import Config, DataConfig, HeadConfig, ModelConfig, TrainConfig
from drillbook.data import batchify, get_batch
from drillbook.errors import CheckpointError, ConfigError
from drillbook.heads import HEADS, build_head
from drillbook.models import AWDLSTM, LanguageModel
from drillbook.models.base import lm_head_problem
from drillbook.train import LanguageModelTrainer, evaluate, load_run
from drillbook.train.dynamic import (
    DynamicUpdate,
    GradientStats,
    dynamic_evaluate,
    gradient_statistics,
    old_hyperparameters,
    search,
    search_grid,
)

pytestmark = pytest.mark.usefixtures("one_thread")

V, E, H = 30, 8, 12


def encoder(wdrop: float = 0.2) -> AWDLSTM:
    return AWDLSTM(V, E, H, 2, dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0,
                   wdrop=wdrop)


def head_for(kind: str, enc: AWDLSTM):
    options = HEADS[kind].tiny_options()  # what shrinks the paper-sized defaults
    if HEADS[kind].reads_layers:
        options["layer_sizes"] = enc.layer_sizes
    return build_head(kind, vocab_size=V, d_hidden=enc.d_out, embedding=enc.embedding,
                      **options)


def model(kind: str = "tied", seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    enc = encoder()
    return LanguageModel(enc, head_for(kind, enc))


def streams(repeats: int = 4, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A random training text and a test text made of one phrase said ``repeats`` times."""
    g = torch.Generator().manual_seed(seed)
    train = torch.randint(0, V, (400,), generator=g)
    phrase = torch.randint(0, V, (30,), generator=g)
    return batchify(train, 4), batchify(phrase.repeat(repeats), 1)


# ------------------------------------------------------------------ the update rule
class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(1.0, dtype=torch.float64))
        self.b = nn.Parameter(torch.tensor(-1.0, dtype=torch.float64))


def test_the_update_rule_by_hand():
    toy = Toy()
    # sqrt(MS_g) = 2 and 0.5: avg = 1.25, RMS_norm = 1.6 and 0.4
    stats = GradientStats({"a": torch.tensor(2.0, dtype=torch.float64),
                           "b": torch.tensor(0.5, dtype=torch.float64)}, batches=1)
    # lambda = 0.75: a's decay rate 0.75 * 1.6 = 1.2 is capped at 1, b's is 0.3
    update = DynamicUpdate(toy, stats, lr=0.1, lamb=0.75, eps=0.1)  # theta_g = (1, -1)
    with torch.no_grad():
        toy.a.fill_(1.5)
        toy.b.fill_(-0.5)
    toy.a.grad = torch.tensor(0.4, dtype=torch.float64)
    toy.b.grad = torch.tensor(-0.2, dtype=torch.float64)
    update.step()
    assert toy.a.item() == pytest.approx(1.5 - 0.1 * 0.4 / (2.0 + 0.1) + 1.0 * (1.0 - 1.5),
                                         abs=1e-15)
    assert toy.b.item() == pytest.approx(-0.5 + 0.1 * 0.2 / (0.5 + 0.1) + 0.3 * (-1.0 + 0.5),
                                         abs=1e-15)
    update.reset()
    assert (toy.a.item(), toy.b.item()) == (1.0, -1.0)


def test_old_hyperparameters_give_the_first_scripts_update():
    """The first script: sqrt of the summed squares, decay divided by the summed means."""
    toy = Toy()
    sums = {"a": torch.tensor(36.0, dtype=torch.float64),  # N_b = 4 batches
            "b": torch.tensor(1.0, dtype=torch.float64)}
    old = {n: s.sqrt() for n, s in sums.items()}  # 6 and 1
    gsum = sum(float(t) for t in old.values())  # 7
    lr, lamb, eps = 0.2, 0.5, 0.4
    theta_g = {"a": 1.0, "b": -1.0}
    theta, grad = {"a": 1.5, "b": -0.5}, {"a": 0.4, "b": -0.2}
    want = {n: theta[n] - lr * grad[n] / (float(old[n]) + eps)
            + lamb * min(float(old[n]) / gsum, 1 / lamb) * (theta_g[n] - theta[n])
            for n in theta}
    new = old_hyperparameters(lr, lamb, eps, tensors=2, batches=4)
    assert new == pytest.approx((0.1, 0.25, 0.2))
    stats = GradientStats({n: (s / 4).sqrt() for n, s in sums.items()}, batches=4)
    update = DynamicUpdate(toy, stats, lr=new[0], lamb=new[1], eps=new[2])
    with torch.no_grad():
        for n, p in toy.named_parameters():
            p.fill_(theta[n])
            p.grad = torch.tensor(grad[n], dtype=torch.float64)
    update.step()
    assert {n: p.item() for n, p in toy.named_parameters()} == pytest.approx(want, abs=1e-15)


def test_bad_settings_are_one_line_config_errors():
    toy = Toy()
    stats = GradientStats({"a": torch.tensor(1.0), "b": torch.tensor(1.0)}, batches=1)
    for kw in ({"lr": -1.0, "lamb": 0.0}, {"lr": 0.1, "lamb": math.nan},
               {"lr": 0.1, "lamb": 0.0, "eps": 0.0}):
        with pytest.raises(ConfigError) as err:
            DynamicUpdate(toy, stats, **kw)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="other parameters"):
        DynamicUpdate(toy, GradientStats({"a": torch.tensor(1.0)}, 1), lr=0.1, lamb=0.0)


def test_gradient_statistics_of_one_batch_are_its_absolute_gradient():
    m = model()
    train, _ = streams()
    stats = gradient_statistics(m, train, bptt=5, max_batches=1)
    x, y = get_batch(train, 0, 5)
    m.eval()  # no dropout, as the statistics are measured
    m.zero_grad()
    out = m(x, m.init_hidden(train.shape[1]))
    m.head.loss(out.features, y).backward()
    assert stats.batches == 1
    for name, p in m.named_parameters():
        torch.testing.assert_close(stats.rms[name], p.grad.abs())
    two = gradient_statistics(m, train, bptt=5, max_batches=2)
    assert two.batches == 2 and not torch.equal(two.rms["head.bias"], stats.rms["head.bias"])


# ------------------------------------------------------------------ the stream
def test_the_stream_matches_a_float64_reference_step_by_step():
    """Three segments by hand: score with theta_0, step, score with theta_1 (the state
    carried), step (now the decay acts too), score with theta_2."""
    m = model("drill").double()
    train, test = streams(repeats=1)
    stats = gradient_statistics(m, train, bptt=5, max_batches=3)
    test = test[:16]  # three segments of 5 targets
    lr, lamb, eps = 0.05, 0.3, 1e-3
    got = dynamic_evaluate(m, test, stats, lr=lr, lamb=lamb, eps=eps, bptt=5)

    class Scorer(nn.Module):  # the segment's loss as one call, for functional_call
        def __init__(self) -> None:
            super().__init__()
            self.m = m

        def forward(self, x, y, hidden):
            out = self.m(x, hidden)
            return self.m.head.loss(out.features, y), out.hidden

    names = [n for n, _ in m.named_parameters()]
    theta0 = {n: p.detach().clone() for n, p in m.named_parameters()}
    avg = sum(float(stats.rms[n].mean()) for n in names) / len(names)
    m.eval()
    theta, hidden, losses = dict(theta0), m.init_hidden(1), []
    for row in (0, 5, 10):
        x, y = get_batch(test, row, 5)
        leaves = {n: t.detach().requires_grad_(True) for n, t in theta.items()}
        loss, hidden = torch.func.functional_call(
            Scorer(), {f"m.{n}": t for n, t in leaves.items()}, (x, y, hidden))
        grads = torch.autograd.grad(loss, [leaves[n] for n in names])
        losses.append(float(loss.detach()))
        hidden = [tuple(h.detach() for h in pair) for pair in hidden]
        theta = {n: theta[n] - lr * g / (stats.rms[n] + eps)
                 + torch.clamp(lamb * stats.rms[n] / avg, max=1.0) * (theta0[n] - theta[n])
                 for n, g in zip(names, grads, strict=True)}
    assert got.windows == 3 and got.tokens == 15
    assert got.loss == pytest.approx(sum(losses) / 3, abs=1e-12)
    assert len(set(losses)) == 3
    # the model was handed back with its trained weights
    assert all(torch.equal(p, theta0[n]) for n, p in m.named_parameters())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_with_lr_zero_it_is_static_evaluation(dtype):
    """The same windows, state and token weighting; the segments are scored with autograd
    on, which may round differently (float32: ~1e-8), hence float64 for the tight check."""
    m = model("drill").to(dtype)
    train, test = streams()
    stats = gradient_statistics(m, train, bptt=5)
    static, n = evaluate(m, test, 5)
    got = dynamic_evaluate(m, test, stats, lr=0.0, lamb=0.01, bptt=5)
    assert got.tokens == n and got.windows == math.ceil(n / 5)
    assert got.loss == pytest.approx(static, rel=1e-14 if dtype == torch.float64 else 1e-6)


def test_learning_from_text_that_repeats_lowers_perplexity():
    m = model()
    train, _ = streams()
    stats = gradient_statistics(m, train, bptt=5)
    gains = []
    for repeats in (2, 4):
        _, test = streams(repeats)
        static = evaluate(m, test, 5)[0]
        got = dynamic_evaluate(m, test, stats, lr=0.02, lamb=0.0, eps=1e-3, bptt=5)
        gains.append(static - got.loss)
    # the more often the phrase comes back, the more there is to gain
    assert gains[0] > 0.04 and gains[1] > 0.12 and gains[1] > 2 * gains[0]


def test_the_search_keeps_the_best_pair_and_leaves_the_model_as_it_was():
    m = model()
    train, test = streams()
    stats = gradient_statistics(m, train, bptt=5)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    found = search(m, test, stats, lrs=[0.0, 0.02], lambdas=[0.0, 0.5], eps=1e-3, bptt=5)
    assert [(r["lr"], r["lamb"]) for r in found.table] == [(0.0, 0.0), (0.02, 0.0),
                                                           (0.0, 0.5), (0.02, 0.5)]
    assert (found.lr, found.lamb) == (0.02, 0.0)  # decaying back forgets what was learnt
    assert found.best["loss"] == min(r["loss"] for r in found.table)
    assert found.table[0]["loss"] == found.table[2]["loss"]  # lr = 0: lambda does nothing
    assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())
    lrs, lambdas = search_grid(20)  # the authors' grid, scaled by bptt / 5
    assert lrs[2] == pytest.approx(4 * 5e-5) and lambdas[1] == pytest.approx(4 * 2e-3)


# ------------------------------------------------------------------ resume
def test_a_resumed_evaluation_ends_at_the_uninterrupted_number(tmp_path):
    m = model("dual")
    train, test = streams()
    stats = gradient_statistics(m, train, bptt=5)
    kw = dict(lr=0.02, lamb=0.01, eps=1e-3, bptt=5)
    whole = dynamic_evaluate(m, test, stats, **kw)
    state = tmp_path / "dyn.pt"
    part = dynamic_evaluate(m, test, stats, **kw, state_path=state, save_every=2,
                            max_windows=7)
    assert not part.finished and part.windows == 7 and state.exists()
    with pytest.raises(CheckpointError, match=re.escape("lr=0.02 (now 0.03)")):
        dynamic_evaluate(m, test, **{**kw, "lr": 0.03}, state_path=state, resume=True)
    fresh = model("dual")  # a new process: the trained weights, nothing else
    done = dynamic_evaluate(fresh, test, **kw, state_path=state, resume=True)
    assert done.finished and (done.loss, done.tokens, done.windows) == (
        whole.loss, whole.tokens, whole.windows)
    again = dynamic_evaluate(fresh, test, **kw, state_path=state, resume=True)
    assert (again.loss, again.windows) == (done.loss, done.windows)  # finished: read back


def test_an_interrupted_evaluation_resumes_from_its_last_periodic_state(tmp_path,
                                                                        monkeypatch):
    m = model("tied")
    train, test = streams()
    stats = gradient_statistics(m, train, bptt=5)
    kw = dict(lr=0.02, lamb=0.01, eps=1e-3, bptt=5)
    whole = dynamic_evaluate(m, test, stats, **kw)
    trained = {n: p.detach().clone() for n, p in m.named_parameters()}
    state, steps = tmp_path / "dyn.pt", []
    real_step = DynamicUpdate.step

    def interrupted(self):
        steps.append(1)
        if len(steps) == 7:  # Ctrl-C during the 7th segment; the state holds 4 of them
            raise KeyboardInterrupt
        real_step(self)

    monkeypatch.setattr(DynamicUpdate, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dynamic_evaluate(m, test, stats, **kw, state_path=state, save_every=4)
    monkeypatch.undo()
    assert all(torch.equal(p, trained[n]) for n, p in m.named_parameters())  # put back
    assert torch.load(state, weights_only=True)["windows"] == 4
    done = dynamic_evaluate(model("tied"), test, **kw, state_path=state, resume=True)
    assert (done.loss, done.tokens, done.windows) == (whole.loss, whole.tokens, whole.windows)


# ------------------------------------------------------------------ every head
@pytest.mark.parametrize("kind", sorted(HEADS))
def test_every_language_model_head_evaluates_dynamically(kind):
    enc = encoder()
    if lm_head_problem(HEADS[kind], enc) is not None:  # not a language-model head (vMF)
        with pytest.raises(ConfigError):
            LanguageModel(enc, head_for(kind, enc))
        return
    m = model(kind)
    train, test = streams(repeats=2)
    stats = gradient_statistics(m, train, bptt=5, max_batches=4)
    static = evaluate(m, test, 5)[0]
    got = dynamic_evaluate(m, test, stats, lr=0.01, lamb=0.0, eps=1e-3, bptt=5)
    assert got.tokens == test.numel() - 1 and math.isfinite(got.loss)
    assert got.loss < static  # the phrase came back once: something was learnt
    assert evaluate(m, test, 5)[0] == static  # and the trained weights are back


def test_label_caches_see_every_update():
    m = model("drill")
    train, test = streams()
    stats = gradient_statistics(m, train, bptt=5, max_batches=2)
    evaluate(m, test, 5)  # fills the cache of g_out(E)
    cache = m.head._label_cache
    misses = cache.misses
    update = DynamicUpdate(m, stats, lr=0.05, lamb=0.0, eps=1e-3)
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    update.step()
    updated = evaluate(m, test, 5)[0]
    assert cache.misses == misses + 1  # recomputed for the new weights
    m.head.clear_cache()
    assert evaluate(m, test, 5)[0] == updated


# ------------------------------------------------------------------ a run folder
def tiny_run(tmp_path: Path):
    corpus = tiny_corpus()
    config = Config(name="test/tiny", data=DataConfig("tiny"),
                    model=ModelConfig(emsize=12, nhid=16, nlayers=2),
                    head=HeadConfig("drill", {"depth": 1}),
                    train=TrainConfig(batch_size=4, eval_batch_size=2, test_batch_size=2,
                                      bptt=6, lr=5.0, epochs=1, checkpoint_minutes=1e6))
    run = tmp_path / "run"
    LanguageModelTrainer(config, run, device="cpu", corpus=corpus, progress=False).fit(max_epochs=1)
    return run, corpus


def test_a_run_is_searched_evaluated_and_resumed(tmp_path, monkeypatch):
    from drillbook.errors import RunFolderError
    from drillbook.train import dynamic

    run, corpus = tiny_run(tmp_path)
    state = run / "dyn.pt"
    kw = dict(split="test", do_search=True, lrs=[0.0, 1e-3], lambdas=[0.0, 0.02], eps=1e-3,
              grad_batch_size=4, grad_batches=3, state_path=state, corpus=corpus,
              device="cpu")
    result = dynamic.evaluate_run(run, **kw)
    assert result["finished"] and result["grad_batches"] == 3
    assert len(result["search"]["table"]) == 4 and result["lr"] == result["search"]["best_lr"]
    assert result["tokens"] == corpus.test.numel() - 1
    static = result["search"]["table"][0]  # lr = 0 on the validation split: static
    assert static["ppl"] == pytest.approx(result["search"]["table"][2]["ppl"], rel=1e-12)
    assert result["static_ppl"] == pytest.approx(
        math.exp(evaluate(load_run(run, corpus=corpus, device="cpu")[1],
                          batchify(corpus.test, 1), 6)[0]))
    with pytest.raises(RunFolderError, match="--resume"):
        dynamic.evaluate_run(run, **kw)
    # the MoS README's PTB settings, in the first script's scaling
    mos = dynamic.evaluate_run(run, split="valid", lr=0.002, lamb=0.075, eps=0.001,
                               old_hyper=True, grad_batch_size=4, grad_batches=3,
                               corpus=corpus, device="cpu", static=False)
    tensors = len(list(load_run(run, corpus=corpus, device="cpu")[1].parameters()))
    assert (mos["lr"], mos["lamb"], mos["eps"]) == pytest.approx(
        (0.002 / math.sqrt(3), 0.075 / tensors, 0.001 / math.sqrt(3)))
    with pytest.raises(ConfigError, match="give both, and no search"):
        dynamic.evaluate_run(run, lr=0.002, old_hyper=True, corpus=corpus)

    def measured(*args, **kwargs):
        raise AssertionError("a resumed evaluation reads its statistics from the state file")

    monkeypatch.setattr(dynamic, "gradient_statistics", measured)
    monkeypatch.setattr(dynamic, "search", measured)
    again = dynamic.evaluate_run(run, **kw, resume=True)
    assert again == result


# ------------------------------------------------------------------ the command line
@needs_data
def test_eval_dynamic_on_the_command_line(capsys, tmp_path):
    from drillbook.cli import main

    run = tmp_path / "run"
    assert main(["train", "tutorial/ptb-tied", "--set", *MICRO, "--out", str(run),
                 "--quiet"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["eval", str(run), "--dyn-lr", "1e-4"])
    assert "add --dynamic" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", str(run), "--dynamic", "--dyn-search", "--dyn-lr", "1e-4"])
    assert "either the search or the two values" in capsys.readouterr().err
    args = ["eval", str(run), "--dynamic", "--split", "valid", "--max-tokens", "60",
            "--dyn-grad-batches", "2", "--dyn-search", "--dyn-search-tokens", "20", "--json"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["dynamic"] and result["tokens"] >= 60 and len(result["search"]["table"]) == 24
    assert (result["lr"], result["lamb"]) == (result["search"]["best_lr"],
                                              result["search"]["best_lamb"])
    assert (run / "dynamic-eval-best-valid.pt").exists()
    with pytest.raises(SystemExit):  # the state file is there: resume it or delete it
        main(args)
    assert "--resume" in capsys.readouterr().err


# ------------------------------------------------------------------ reproduce
def test_a_table_row_with_a_dynamic_paper_number_is_evaluated_dynamically(tmp_path,
                                                                           monkeypatch):
    from drillbook.experiments import TABLES, Row, Table, render_report, reproduce, validate_result

    assert {r.name: r.paper_keys("dynamic") for r in TABLES["drill-main"]} == {
        f"{c}-{h}": (f"drill:table{t}:awd-lstm{s}-dynamic-eval",)
        for c, t in (("ptb", 1), ("wt2", 2)) for h, s in (("awd-lstm", ""), ("drill", "-drill"))}
    monkeypatch.setitem(TABLES, "tiny-dyn", Table("tiny-dyn", (Row(
        "tied", "tutorial/ptb-tied", paper_finetuned="drill:table1:awd-lstm",
        paper_dynamic="drill:table1:awd-lstm-dynamic-eval"),)))
    kwargs = tiny_reproduce(tmp_path, [*TINY_LM, "train.epochs=1"])
    doc = json.loads(reproduce("tiny-dyn", **kwargs)[0].read_text())
    assert validate_result(doc) == []
    block = doc["dynamic"]
    assert block["finished"] and {"val_ppl", "test_ppl", "static_test_ppl"} <= set(
        block["metrics"])
    assert (tmp_path / "runs" / "tiny-dyn" / "tied" / "finetune" /
            "dynamic-eval-best-test.pt").exists()
    report = render_report(tmp_path / "r")
    assert "| dyn valid | dyn test | paper dyn valid | paper dyn test |" in report
    assert f"| {block['metrics']['val_ppl']:.2f} | {block['metrics']['test_ppl']:.2f} | " \
           "51.60 | 51.10 |" in report
