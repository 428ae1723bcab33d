"""The cost benchmark: head alone, behind an encoder, the vMF sweep, the targets, memory,
and the optimised paths it times agreeing with the plain ones."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
import torch
from torch import nn

from drillbook.cli import main
from drillbook.errors import ConfigError
from drillbook.experiments import (
    BENCH_FORMAT,
    evaluate_targets,
    format_report,
    greedy_decode,
    head_cost,
    run_targets,
    saved_bytes,
    time_call,
    vocab_sweep,
    write_report,
)
from drillbook.experiments.bench import report as bench_report
from drillbook.experiments.bench import sweep as bench_sweep
from drillbook.experiments.bench import time_once
from drillbook.experiments.bench.step import (
    compare_train_steps,
    load_step,
    make_train_step,
    trainer_step,
)
from drillbook.heads import DrillHead, Features, build_head
from drillbook.losses import nearest_neighbour

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--repeats", "1", "--warmup", "1"]
#: a CPU-sized AWD-LSTM (the tutorial config, shrunk further)
TINY_ENCODER = ["model", "tutorial/ptb-tied", "--set", "model.emsize=8", "model.nhid=16",
                "--batch-size", "2", "--bptt", "4"]


# ------------------------------------------------------------------ end to end
def test_bench_cli_writes_a_report(tmp_path, capsys):
    out = tmp_path / "bench" / "cpu.json"
    assert main(["bench", "heads", "--heads", "drill-1", "vmf-300", "--d", "8", "--tokens", "16",
                 "--precision", "bf16", *TINY, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["format"] == BENCH_FORMAT and report["mode"] == "heads"
    assert report["settings"]["baseline"] == "tied" and report["settings"]["precision"] == "bf16"
    assert [r["name"] for r in report["rows"]] == ["tied", "drill-1", "vmf-300"]
    assert all(r["saved_bytes"] > 0 and r["param_bytes"] >= 0 for r in report["rows"])
    assert report["rows"][2]["buffer_bytes"] == 10_000 * 300 * 4  # vMF's frozen table
    captured = capsys.readouterr()
    assert report["environment"]["torch"] and "train x" in captured.out
    # stderr says what is being measured, one plain line each (no bars, no carriage returns)
    assert captured.err.splitlines() == [
        "bench heads: tied (baseline) at vocab_size=10000, d=8, tokens=16",
        "bench heads: drill {'depth': 1, 'dropout': 0.6} at vocab_size=10000, d=8, "
        "tokens=16 [2/3]",
        "bench heads: vmf {'dim': 300} at vocab_size=10000, d=8, tokens=16 [3/3]",
        "bench heads: tied (baseline) again at vocab_size=10000, d=8, tokens=16"]
    assert [p.name for p in out.parent.iterdir()] == ["cpu.json"]  # no temporary left
    with pytest.raises(SystemExit):
        main(["bench", "heads", "--heads", "nope"])


def test_encoder_mode_runs_end_to_end_and_writes_a_valid_file(tmp_path, capsys):
    out = tmp_path / "model.json"
    assert main(["bench", *TINY_ENCODER, "--heads", "drill-4", "mos-15", "doc-15+5", *TINY,
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["format"] == BENCH_FORMAT and report["mode"] == "model"
    s = report["settings"]
    assert (s["encoder"], s["overrides"]) == ("tutorial/ptb-tied",
                                              ["model.emsize=8", "model.nhid=16"])
    assert (s["batch_size"], s["bptt"], s["precision"]) == (2, 4, "fp32")
    rows = report["rows"]
    assert [r["name"] for r in rows] == ["tied", "drill-4", "mos-15", "doc-15+5"]
    assert rows[0]["train_ratio"] == rows[0]["eval_ratio"] == 1.0
    for r in rows:
        assert r["train_step_s"] > 0 and r["eval_token_s"] > 0 and r["saved_bytes"] > 0
        assert r["tokens_per_s"] == pytest.approx(2 * 4 / r["train_step_s"])
        assert r["vocab_size"] == 10_000 and r["peak_bytes"] is None
    assert rows[3]["options"]["vectors_per_layer"] == [0, 5, 15]  # fitted to 2 LSTM layers
    captured = capsys.readouterr()
    printed = captured.out
    assert "tutorial/ptb-tied" in printed and "tok/s" in printed and "train x" in printed
    assert captured.err.splitlines() == [  # tied first and last: the ratios' baseline
        f"bench model: {name} behind tutorial/ptb-tied at ptb (V=10,000)"
        for name in ("tied", "drill-4", "mos-15", "doc-15+5", "tied")]


@pytest.mark.parametrize("argv", [
    ["sweep", "--heads", "tied"],  # the sweep measures fixed heads
    ["heads", "--set", "model.nhid=16"],  # an encoder's override without an encoder
    ["heads", "--batch-size", "4"],
    ["model", "ptb/awd-lstm", "--d", "8"],  # the config sizes the features
    ["heads", "--vocab-sizes", "100"],
    ["targets", "--vocab-sizes", "100"],  # the targets measure V = 50,000 only
    ["targets", "--heads", "tied"],
    ["model"],  # no config
    [],  # no mode
])
def test_each_mode_takes_only_its_own_flags(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("usage: drillbook "), err
    assert "unrecognized arguments" in err or "required" in err


def test_every_mode_is_documented_with_its_report_mode():
    from drillbook.cli import build_parser

    bench = next(a for a in build_parser()._subparsers._group_actions[0].choices.items()
                 if a[0] == "bench")[1]
    modes = bench._subparsers._group_actions[0].choices
    assert list(modes) == ["heads", "model", "step", "sweep", "targets"]  # = reports' "mode"
    for mode, parser in modes.items():
        text = parser.format_help()
        assert text.startswith(f"usage: drillbook bench {mode} ")
        assert "--precision" in text and "--out" in text
    assert "vmf-300" in modes["heads"].format_help()  # from BENCH_HEADS, not by hand


# ------------------------------------------------------------------ whole training step
TINY_STEP = ["--set", "model.emsize=8", "model.nhid=16", "--batch-size", "2", "--bptt", "4"]


def test_step_mode_times_configs_interleaved_and_writes_ratios(tmp_path, capsys):
    out = tmp_path / "step.json"
    assert main(["bench", "step", "tutorial/ptb-tied", "ptb/awd-lstm-drill", *TINY_STEP,
                 "--size", "ptb", "--rounds", "2", "--clock", "cpu", *TINY,
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["format"] == BENCH_FORMAT and report["mode"] == "step"
    s = report["settings"]
    assert (s["configs"], s["steps"], s["rounds"], s["clock"]) == (
        ["tutorial/ptb-tied", "ptb/awd-lstm-drill"], ["trainer"], 2, "cpu")
    assert "optimiser step" in s["timed"] and "clipping" in s["timed"]
    rows = report["rows"]
    assert [(r["config"], r["head"], r["step"]) for r in rows] == [
        ("tutorial/ptb-tied", "tied", "trainer"), ("ptb/awd-lstm-drill", "drill", "trainer")]
    assert rows[0]["ratio"] == rows[0]["ratio_min"] == rows[0]["ratio_max"] == 1.0
    for r in rows:
        assert len(r["rounds_s"]) == 2 and r["train_step_s"] == pytest.approx(
            sum(r["rounds_s"]) / 2)
        assert r["tokens_per_s"] == pytest.approx(2 * 4 / r["train_step_s"])
        assert (r["vocab_size"], r["batch_size"], r["bptt"]) == (10_000, 2, 4)
    # a ratio of two sums lies between the smallest and largest ratio of their terms
    assert rows[1]["ratio_min"] <= rows[1]["ratio"] * (1 + 1e-12)
    assert rows[1]["ratio"] <= rows[1]["ratio_max"] * (1 + 1e-12)
    assert rows[1]["ratio"] == pytest.approx(rows[1]["train_step_s"] / rows[0]["train_step_s"])
    printed = capsys.readouterr().out
    assert "ptb/awd-lstm-drill" in printed and "tok/s" in printed and "optimiser" in printed


def test_compare_train_steps_interleaves_rounds_of_every_step_function():
    calls = []

    def recording(name):
        def step(model, optimizer, x, y, train, amp):
            assert x.shape == y.shape == (4, 2) and torch.equal(x[1:], y[:-1])
            with amp():
                calls.append(name)
        return step

    rows = compare_train_steps(["tutorial/ptb-tied"], {"a": recording("a"),
                                                       "b": recording("b")},
                               rounds=2, repeats=1, warmup=1, size=50,
                               overrides=["model.emsize=8", "model.nhid=16"],
                               batch_size=2, bptt=4)
    runs = [name for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name]
    assert runs == ["a", "b"] * 3  # warm-up, then two rounds, each of a then b
    assert [r["step"] for r in rows] == ["a", "b"] and rows[0]["vocab_size"] == 50


def test_trainer_step_is_loss_backward_clip_and_sgd_by_hand():
    from drillbook.configs import apply_overrides, get_config
    from drillbook.train import training_loss

    config = apply_overrides(get_config("tutorial/ptb-tied"), [
        "model.emsize=8", "model.nhid=16", "train.lr=2", "train.clip=0.01",
        "train.wdecay=0.1"])
    seen = {}

    def capture(model, optimizer, x, y, train, amp):  # what make_train_step binds
        seen.update(model=model, x=x, y=y, train=train)
    call, info = make_train_step(config, size=30, batch_size=3, bptt=5, step=capture)
    call()
    model, x, y, t = seen["model"], seen["x"], seen["y"], seen["train"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(3)
    trainer_step(model, torch.optim.SGD(model.parameters(), lr=t.lr, weight_decay=t.wdecay),
                 x, y, t, contextlib.nullcontext)
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():  # back to the start, and the same step by hand
        for n, p in model.named_parameters():
            p.copy_(before[n])
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)  # the same dropout masks
    loss, _, _ = training_loss(model, x, y, model.init_hidden(3), alpha=t.alpha, beta=t.beta)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    norm = torch.sqrt(sum(g.pow(2).sum() for g in grads.values()))
    assert norm > t.clip  # the clipping is exercised
    for n, p0 in before.items():
        expected = p0 - t.lr * (grads[n] * (t.clip / (norm + 1e-6)) + t.wdecay * p0)
        torch.testing.assert_close(after[n], expected, rtol=1e-5, atol=1e-7)
    assert info["head"] == "tied" and info["vocab_size"] == 30


@pytest.mark.parametrize("spec, message", [
    ("trainer_step", "must look like module:function"),
    ("no_such_module_here:step", "cannot import"),
    ("drillbook.experiments.bench.step:no_such_step", "has no function"),
])
def test_a_step_function_that_cannot_be_loaded_is_a_config_error(spec, message):
    with pytest.raises(ConfigError, match=message):
        load_step(spec)
    assert load_step("drillbook.experiments.bench.step:trainer_step") is trainer_step


# ------------------------------------------------------------------ vMF sweep
def test_sweep_runs_end_to_end_with_decode_columns(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert main(["bench", "sweep", "--vocab-sizes", "100", "50", "--d", "8", "--tokens", "16",
                 "--decode-positions", "4", *TINY, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["format"] == BENCH_FORMAT and report["mode"] == "sweep"
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [  # what is being measured, one line each
        f"bench sweep: {name} at V={v}, d=8, 16 positions"
        for v in (50, 100) for name in ("softmax", "vmf-300")]
    assert report["settings"]["vocab_sizes"] == [50, 100]
    assert report["settings"]["decode_positions"] == 4
    rows = report["rows"]
    assert [(r["vocab_size"], r["name"]) for r in rows] == [
        (50, "softmax"), (50, "vmf-300"), (100, "softmax"), (100, "vmf-300")]
    for r in rows:
        assert r["train_step_s"] > 0 and r["decode_token_s"] > 0 and r["saved_bytes"] > 0
        base = next(b for b in rows if b["vocab_size"] == r["vocab_size"]
                    and b["name"] == "softmax")
        assert r["decode_speedup"] == pytest.approx(base["decode_token_s"] / r["decode_token_s"])
        assert r["train_speedup"] == pytest.approx(base["train_step_s"] / r["train_step_s"])
    assert rows[1]["param_bytes"] == (8 * 300 + 300) * 4  # W and b_w
    assert rows[1]["buffer_bytes"] == 50 * 300 * 4  # the frozen table
    assert rows[0]["param_bytes"] == (50 * 8 + 50) * 4
    assert "decode speedup" in captured.out


def test_sweep_skips_sizes_that_do_not_fit_and_goes_on(monkeypatch):
    measure = bench_sweep._measure

    def failing(head, *args, **kwargs):
        if head.kind == "softmax" and head.vocab_size >= 60:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9 GiB")
        return measure(head, *args, **kwargs)

    monkeypatch.setattr(bench_sweep, "_measure", failing)
    rows = vocab_sweep((50, 60, 70), d=8, dim=6, tokens=8, repeats=1, warmup=1)["rows"]
    by = {(r["vocab_size"], r["name"]): r for r in rows}
    assert "skipped" not in by[50, "softmax"] and by[50, "vmf-6"]["train_speedup"] > 0
    assert by[60, "softmax"]["skipped"].startswith("out of memory: CUDA out of memory")
    assert by[70, "softmax"]["skipped"] == "V=60 ran out of memory"
    assert by[70, "vmf-6"]["train_step_s"] > 0 and by[70, "vmf-6"]["train_speedup"] is None
    # a step slower than max_seconds stops that head from that size on
    rows = vocab_sweep((50, 60), d=8, dim=6, tokens=8, repeats=1, warmup=1,
                       max_seconds=1e-9)["rows"]
    assert "max_seconds" in rows[0]["skipped"] and all("skipped" in r for r in rows)


def test_a_compiled_sweep_compiles_both_losses_and_counts_for_no_target(monkeypatch):
    """``compile=True`` sends each head's loss through ``torch.compile`` (stood in for
    here: compiling takes minutes on a CPU), says so in its settings and rows, and the
    cost targets, stated for the heads as they are, do not read it."""
    compiled = []

    def fake_compile(fn):
        compiled.append(fn.__self__.kind)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    report = vocab_sweep((40,), d=8, dim=6, tokens=8, repeats=1, warmup=1, compile=True)
    assert compiled == ["softmax", "vmf"]
    assert report["settings"]["compile"] is True
    assert all(r["compiled"] is True for r in report["rows"])
    report["settings"].update(d=1024, dim=300)
    for r in report["rows"]:
        r.update(vocab_size=50_000, name=r["name"].replace("vmf-6", "vmf-300"))
    vmf = next(t for t in evaluate_targets([report]) if t["target"].startswith("vMF-300 train"))
    assert vmf["met"] is None and "only with compile=True" in vmf["note"]
    report["settings"]["compile"] = False
    vmf = next(t for t in evaluate_targets([report]) if t["target"].startswith("vMF-300 train"))
    assert vmf["measured"] is not None


def test_vmf_decode_in_the_sweep_is_nearest_neighbour(monkeypatch):
    calls = []

    def recording(head, hidden):
        ids = greedy_decode(head, hidden)
        calls.append((head, hidden, ids))
        return ids

    monkeypatch.setattr(bench_sweep, "greedy_decode", recording)
    vocab_sweep((40,), d=8, dim=6, tokens=8, decode_positions=5, repeats=1, warmup=1)
    vmf = [c for c in calls if c[0].kind == "vmf"]
    assert vmf and any(c[0].kind == "softmax" for c in calls)
    head, hidden, ids = vmf[-1]
    assert hidden.shape == (5, 8)
    expected, _ = nearest_neighbour(head.proj(hidden), head.target_embeddings)
    torch.testing.assert_close(ids, expected.squeeze(-1))
    softmax = next(c for c in calls if c[0].kind == "softmax")
    torch.testing.assert_close(softmax[2], softmax[0].logits(softmax[1]).argmax(-1))


# ------------------------------------------------------------------ targets
def model_report(rows, encoder="ptb/awd-lstm", overrides=()):
    return {"format": BENCH_FORMAT, "mode": "model",
            "settings": {"encoder": encoder, "overrides": list(overrides), "batch_size": 20,
                         "bptt": 70, "precision": "fp32", "device": "cuda"}, "rows": rows}


def model_row(name, size="ptb", device="cuda:0", **fields):
    return {"name": name, "size": size, "device": device, "encoder": "ptb/awd-lstm",
            "batch_size": 20, "bptt": 70, "precision": "fp32", "train_step_s": 0.1, **fields}


def sweep_row(name, **fields):
    return {"name": name, "vocab_size": 50_000, "device": "cuda:0", "d": 1024, "tokens": 1400,
            "decode_positions": 1400, "precision": "fp32", "train_step_s": 0.01,
            "decode_token_s": 1e-6, **fields}


def test_targets_compare_thresholds_and_leave_the_unmeasured_as_none():
    ptb = model_report([
        model_row("tied", train_ratio=1.0, eval_ratio=1.0, tokens_per_s=14_000.0),
        model_row("drill-4", train_ratio=1.10, eval_ratio=1.03),  # == bound: met
        {"name": "mos-15", "size": "ptb", "device": "cuda:0", "skipped": "out of memory: x"},
    ])
    overridden = model_report([model_row("mos-15", size="wt2", train_ratio=1.2)],
                              encoder="wt2/awd-lstm", overrides=["model.nhid=16"])
    sweep = {"format": BENCH_FORMAT, "mode": "sweep", "settings": {"d": 1024, "dim": 300},
             "rows": [sweep_row("softmax", train_speedup=1.0, decode_speedup=1.0),
                      sweep_row("vmf-300", train_speedup=2.5, decode_speedup=1.0)]}
    rows = {r["target"]: r for r in evaluate_targets([ptb, overridden, sweep])}
    assert len(rows) == len(bench_report.TARGETS)

    def get(prefix):
        return next(r for t, r in rows.items() if t.startswith(prefix))

    assert get("DRILL-4 train")["met"] is True and get("DRILL-4 train")["measured"] == 1.10
    assert get("DRILL-4 eval")["met"] is False and get("DRILL-4 eval")["threshold"] == 1.02
    mos_ptb = get("MoS-15 train step / tied (AWD-LSTM, PTB)")
    mos_wt2 = get("MoS-15 train step / tied (AWD-LSTM, WikiText-2)")
    assert mos_ptb["met"] is None and mos_ptb["measured"] is None
    assert "out of memory" in mos_ptb["note"]
    assert mos_wt2["met"] is None and "overrides" in mos_wt2["note"]
    assert get("vMF-300 train")["met"] is False and get("vMF-300 train")["measured"] == 2.5
    assert get("vMF-300 decoding")["met"] is True  # == 1: no slower than softmax
    assert get("ptb/awd-lstm")["measured"] == 14_000.0 and get("ptb/awd-lstm")["met"] is True
    # nothing measured: every target is None, never a guess
    assert all(r["met"] is None and r["measured"] is None for r in evaluate_targets([]))
    # a later report wins; a CPU measurement of a GPU target says so
    cpu = model_report([model_row("drill-4", device="cpu", train_ratio=1.5, eval_ratio=1.0)])
    drill = evaluate_targets([ptb, cpu])[0]
    assert drill["met"] is False and "GPU" in drill["note"]
    # a sweep at another width is not the target's setting
    small = {**sweep, "settings": {"d": 8, "dim": 300}}
    assert evaluate_targets([small])[4]["met"] is None


def test_the_targets_render_as_markdown_and_join_the_results_report(tmp_path):
    from drillbook.experiments import render_report

    ptb = model_report([model_row("tied", train_ratio=1.0, eval_ratio=1.0,
                                  tokens_per_s=14_000.0),
                        model_row("drill-4", train_ratio=1.25, eval_ratio=1.0)])
    text = bench_report.render_targets([ptb])
    lines = text.splitlines()
    assert lines[0] == "## Cost targets"
    assert "| target | measured | threshold | met | device | note |" in lines
    assert ("| DRILL-4 train step / tied (AWD-LSTM, PTB) | 1.25 | <= 1.1 | NO | cuda:0 | "
            "100.0 ms/step, ptb/awd-lstm, batch 20 x bptt 70, fp32 |") in lines
    assert ("| MoS-15 train step / tied (AWD-LSTM, PTB) | - | <= 1.8 | not measured | - | "
            "not measured |") in lines
    assert sum(line.startswith("| ") for line in lines) == 1 + len(bench_report.TARGETS)
    # the results report gains the section once results/bench holds a report
    assert "## Cost targets" not in render_report(tmp_path)
    write_report(ptb, tmp_path / "bench" / "gpu.json")
    # ... one section per kind of device, under its own heading
    on_cuda = bench_report.render_targets([ptb], heading="## Cost targets on cuda")
    assert on_cuda.splitlines()[1:] == lines[1:]
    assert render_report(tmp_path).endswith(on_cuda.rstrip("\n"))


def test_run_targets_measures_what_the_targets_need(monkeypatch):
    calls = []

    def fake_model(names, sizes, *, encoder_config, **kw):
        calls.append((encoder_config, tuple(names), tuple(sizes), kw["overrides"]))
        return model_report([model_row(n, size=sizes[0], train_ratio=1.0, eval_ratio=1.0,
                                       tokens_per_s=1.0, peak_bytes=peak)
                             for n in names], encoder_config)

    def fake_sweep(vocab_sizes, **kw):
        calls.append(("sweep", tuple(vocab_sizes), kw["d"]))
        return {"format": BENCH_FORMAT, "mode": "sweep", "settings": {"d": kw["d"], "dim": 300},
                "rows": [sweep_row("vmf-300", train_speedup=4.0, decode_speedup=2.0)]}

    monkeypatch.setattr(bench_report, "run_model_bench", fake_model)
    monkeypatch.setattr(bench_report, "vocab_sweep", fake_sweep)
    peak = 14 * 10**9
    report = run_targets()
    assert calls == [("ptb/awd-lstm", ("tied", "drill-4", "mos-15"), ("ptb",), []),
                     ("wt2/awd-lstm", ("tied", "mos-15", "mos-15-chunk256",
                                       "doc-15+5-chunk256"), ("wt2",), []),
                     ("sweep", (50_000,), 1024)]
    assert report["mode"] == "targets" and len(report["reports"]) == 3
    assert all(t["met"] is True for t in report["targets"])
    assert "met" in format_report(report) and "yes" in format_report(report)
    memory = [t for t in report["targets"] if "15 GB" in t["target"]]
    assert [t["measured"] for t in memory] == [peak, peak]  # the chunked WikiText-2 configs
    peak = 16 * 10**9  # over a T4's memory: not met
    assert [t["met"] for t in run_targets()["targets"] if "15 GB" in t["target"]] == \
        [False, False]
    peak = None  # a CPU has no peak: not measured, and saying why
    assert {t["note"] for t in run_targets()["targets"] if "15 GB" in t["target"]} == \
        {"not measured: peak memory is measured on CUDA only"}


def test_format_report_and_write_report_refuse_what_they_cannot_handle(tmp_path):
    with pytest.raises(ValueError, match="drillbook bench"):
        format_report({"format": "drillbook-bench/1", "rows": []})
    path = tmp_path / "r.json"
    write_report({"a": 1}, path)
    with pytest.raises(TypeError):
        write_report({"a": object()}, path)
    assert json.loads(path.read_text()) == {"a": 1}  # the old file survives a failed write
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


# ------------------------------------------------------------------ timing
def test_time_call_warms_up_then_times_a_block_with_the_callers_threads():
    """torch.utils.benchmark.Timer under the hood: ``warmup`` untimed calls (at least the
    Timer's own two), ``repeats`` timed ones, at the caller's thread count (the Timer's
    default would be one thread)."""
    calls: list[int] = []
    cpu = torch.device("cpu")

    def step() -> None:
        calls.append(torch.get_num_threads())
        time.sleep(0.002)

    torch.set_num_threads(2)  # the one_thread fixture sets 1 back afterwards
    [seconds] = time_call(step, cpu, repeats=4, warmup=5)
    assert calls == [2] * 9 and 0.002 <= seconds < 0.5
    calls.clear()
    time_call(step, cpu, repeats=3, warmup=0)
    assert len(calls) == 2 + 3  # Timer.timeit always warms up with two calls
    calls.clear()
    assert 0.002 <= time_once(step, cpu) < 0.5 and len(calls) == 1
    with pytest.raises(ConfigError, match="repeats must be >= 1"):
        time_call(step, cpu, repeats=0)


def test_the_cpu_clock_counts_work_not_waiting():
    cpu = torch.device("cpu")

    def wait() -> None:
        time.sleep(0.02)

    [wall] = time_call(wait, cpu, repeats=2, warmup=0)
    [busy] = time_call(wait, cpu, repeats=2, warmup=0, clock="cpu")
    assert wall >= 0.02 and busy < 0.01  # sleeping takes time and no CPU
    x = torch.randn(200, 200)
    [work] = time_call(lambda: [x @ x for _ in range(20)], cpu, repeats=2, warmup=0,
                       clock="cpu")
    assert work > 0
    with pytest.raises(ConfigError, match="unknown clock 'gpu'"):
        time_call(wait, cpu, clock="gpu")
    with pytest.raises(ConfigError, match="cannot time work on cuda"):
        time_call(wait, torch.device("cuda"), clock="cpu")


# ------------------------------------------------------------------ memory
def test_saved_bytes_of_a_softmax_head_hold_its_logits():
    head = build_head("softmax", vocab_size=50, d_hidden=8)
    head.fused_loss = False  # the plain path keeps the (n, V) scores
    h = torch.randn(16, 8, requires_grad=True)
    y = torch.randint(0, 50, (16,))
    logits = 16 * 50 * 4
    saved = saved_bytes(lambda: head.loss(h, y), exclude=head.parameters())
    # the log-softmax of the logits, the features and the targets; not the weights
    assert logits <= saved <= logits + h.nbytes + y.nbytes + 64
    assert saved_bytes(lambda: head.loss(h, y)) >= saved + head.weight.nbytes  # params count
    assert head_cost("softmax", vocab_size=50, d=8, tokens=16, repeats=1,
                     warmup=1).saved_bytes >= logits
    # the fused loss keeps the gradients it formed (features, W, b), not the scores
    head.fused_loss = None
    fused = saved_bytes(lambda: head.loss(h, y), exclude=head.parameters())
    assert fused <= h.nbytes + head.weight.nbytes + head.bias.nbytes + y.nbytes + 64 < logits
    assert head_cost("softmax", vocab_size=50, d=8, tokens=16, repeats=1, warmup=1,
                     fused=True).saved_bytes < logits


def test_chunked_mos_saves_fewer_bytes_than_unchunked():
    size = {"vocab_size": 50, "d": 8, "tokens": 16, "repeats": 1, "warmup": 1}
    whole = head_cost("mos", n_experts=3, **size)
    chunked = head_cost("mos", n_experts=3, chunk_size=4, **size)
    scores = 3 * 16 * 50 * 4
    assert whole.saved_bytes >= scores > chunked.saved_bytes
    # what checkpointing keeps: the components (16 positions x 3 vectors x 8), not scores
    assert chunked.saved_bytes >= 16 * 3 * 8 * 4


# ------------------------------------------------------------------ optimised == plain
def test_drill_eval_log_prob_from_the_label_cache_equals_recomputed_labels():
    emb = nn.Embedding(30, 6).double()
    head = DrillHead(30, 6, embedding=emb, depth=4, dropout=0.6).double().eval()
    for layer in head.layers:
        nn.init.normal_(layer.bias)
    h = torch.randn(5, 2, 6, dtype=torch.float64)
    y = torch.randint(0, 30, (5, 2))
    with torch.no_grad():
        cached = [head.log_prob(h), head.log_prob(h), head.loss(h, y)]
    assert head._label_cache.misses == 1 and head._label_cache.hits == 2
    plain = torch.log_softmax(h @ head._encode_labels().T + head.bias, -1)  # grad on: no cache
    torch.testing.assert_close(cached[0], plain)
    torch.testing.assert_close(cached[1], plain)
    torch.testing.assert_close(cached[2], -plain.gather(-1, y[..., None]).mean())


@pytest.mark.parametrize("chunk_size", [None, 4])
@pytest.mark.parametrize("kind", ["mos", "doc"])
def test_mixtures_under_bf16_autocast_agree_with_fp32_within_bf16_resolution(kind, chunk_size):
    """Under bf16 autocast only the products run in bfloat16: the log-space mixing
    (log_softmax, logsumexp) is upcast to float32, and the results agree with fp32 to
    within two bf16 steps (2 * 2^-8 relative)."""
    emb = nn.Embedding(50, 8)
    opts = ({"n_experts": 4} if kind == "mos"
            else {"vectors_per_layer": [1, 3], "layer_sizes": [8, 12]})
    head = build_head(kind, vocab_size=50, d_hidden=12, embedding=emb, chunk_size=chunk_size,
                      **opts).eval()
    h = torch.randn(5, 3, 12)
    feats = Features(h, (torch.randn(5, 3, 8), h))
    y = torch.randint(0, 50, (5, 3))
    with torch.no_grad():
        logp, loss = head.log_prob(feats), head.loss(feats, y)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logp16, loss16 = head.log_prob(feats), head.loss(feats, y)
    step = 2 * 2.0 ** -8
    assert logp16.dtype == loss16.dtype == torch.float32 and logp16.isfinite().all()
    torch.testing.assert_close(logp16.float(), logp, rtol=0, atol=step * float(logp.abs().max()))
    torch.testing.assert_close(loss16.float(), loss, rtol=step, atol=0)


def test_ratios_divide_by_the_mean_of_the_baselines_two_measurements():
    from drillbook.experiments.bench import add_ratios

    base = {"name": "tied", "train_step_s": 2.0, "eval_token_s": 1.0}
    again = {"name": "tied", "train_step_s": 1.0, "eval_token_s": 1.5}
    rows = [base, {"name": "drill-4", "train_step_s": 1.8, "eval_token_s": 1.0},
            {"name": "mos-15", "skipped": "out of memory"}]
    add_ratios(rows, base, again)
    assert (base["train_step_s"], base["first_train_step_s"], base["last_train_step_s"]) == (
        1.5, 2.0, 1.0)
    assert base["train_ratio"] == base["eval_ratio"] == 1.0
    assert rows[1]["train_ratio"] == pytest.approx(1.2) and rows[1]["eval_ratio"] == 0.8
    assert "train_ratio" not in rows[2]


def test_score_bytes_count_the_score_tensors_a_head_builds_in_training():
    from drillbook.experiments import head_cost

    size = {"vocab_size": 100, "d": 8, "tokens": 16, "repeats": 1, "warmup": 0}
    assert head_cost("tied", **size).score_bytes == 16 * 100 * 4
    assert head_cost("mos", n_experts=3, **size).score_bytes == 3 * 16 * 100 * 4
    assert head_cost("mos", n_experts=3, chunk_size=4, **size).score_bytes == 3 * 4 * 100 * 4
    assert head_cost("vmf", dim=10, **size).score_bytes == 0  # vMF scores no words


def test_committed_bench_reports_are_valid_and_name_their_machine():
    import json

    from drillbook.experiments import book_results, evaluate_targets, format_report

    folder = book_results() / "bench"
    reports = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    for report in reports:
        assert format_report(report)  # raises on a wrong format or mode
        env = report["environment"]
        assert env["device_name"] and env["torch"] and "commit" in env
        # a targets report holds the reports it measured; the others hold rows
        assert all(r["rows"] for r in report["reports"]) if report["mode"] == "targets" \
            else report["rows"]
    by_device = {}
    for report in reports:
        by_device.setdefault(report["settings"]["device"], []).append(report)
    assert sorted(by_device) == ["cpu", "cuda"]  # the CPU's and the H200's
    assert all(len(evaluate_targets(r)) == len(bench_report.TARGETS)
               for r in by_device.values())


def test_peak_memory_counts_only_what_the_measurement_allocated(monkeypatch):
    """A measurement's peak leaves out what was already allocated when it began (an
    earlier measurement's leftovers, the weights), and what was left behind is freed
    first. The CUDA counters are stood in for: an allocator holding 18 GB of old tensors
    whose step reaches 18.5 GB reports 0.5 GB."""
    from drillbook.experiments.bench import measure

    gb = 1 << 30
    state = {"allocated": 18 * gb, "peak": 30 * gb, "freed": 0}
    monkeypatch.setattr(measure, "free_memory", lambda device: state.update(
        freed=state["freed"] + 1))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device: state.update(peak=state["allocated"]))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: state["peak"])
    with measure.PeakMemory(torch.device("cuda")) as peak:
        state["peak"] = state["allocated"] + gb // 2  # the step
    assert (peak.bytes, peak.resident, state["freed"]) == (gb // 2, 18 * gb, 1)
    with measure.PeakMemory(torch.device("cpu")) as peak:
        pass
    assert peak.bytes is None


def test_the_fused_against_plain_tool_records_both_paths_and_an_out_of_memory(tmp_path):
    """``tools/fused_gpu.py`` (a GPU window's measurement) at tiny sizes on the CPU: each
    whole step is measured both ways and its ratio is fused over plain; a path that runs
    out of the device's memory is recorded as such, not as a number."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / "fused_gpu.py"
    spec = importlib.util.spec_from_file_location("fused_gpu", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / "fused.json"
    assert tool.main(["--tiny", "--device", "cpu", "--parts", "steps", "--rounds", "1",
                      "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [(r["name"], r["size"], r["what"]) for r in report["rows"]] == [
        ("tied", "ptb", "step"), ("mos-15", "wt2", "step")]
    for r in report["rows"]:
        assert r["time_ratio"] == pytest.approx(r["fused_ms"] / r["plain_ms"])
        assert r["plain_peak_bytes"] is None and r["memory_ratio"] is None  # no CUDA peak

    def plain_runs_out(fused):
        if not fused:
            raise torch.OutOfMemoryError("no memory left")
        return {"train_step_s": 0.5, "peak_bytes": 7}

    best = tool._best(plain_runs_out, rounds=2)
    row = tool._record("step", "mos-15", "wt2", 5600, best)
    assert (row["plain_ms"], row["fused_ms"], row["time_ratio"]) == (None, 500.0, None)
    assert "OOM" in tool._line(row)
