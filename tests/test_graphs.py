"""The graph-ready training step: the foreach optimisers equal torch's bit for bit, the
step dispatches the same operations at every call and reads nothing back, everything it
touches stays at its address, and a trainer that takes it trains bit-identically on the
CPU; captured as CUDA graphs (CUDA only), it trains as eagerly within a stated tolerance."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from test_loop import no_dropout
from test_sync import Recorder
from test_train import tiny_config, tiny_corpus
from torch.utils._pytree import tree_flatten

from drillbook.configs import HeadConfig
from drillbook.data import Batch
from drillbook.errors import ConfigError
from drillbook.heads import HEADS
from drillbook.models import build_model
from drillbook.train import LanguageModelTrainer, read_log, training_loss
from drillbook.train.graphs import GraphedForward, GraphedStep
from drillbook.train.lm import evaluate
from drillbook.train.optimizers import GraphASGD, GraphSGD

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
LM_HEADS = [kind for kind, cls in HEADS.items() if cls.is_distribution]


def config_for(kind: str = "tied", **train):
    config = tiny_config(**train)
    config.head = HeadConfig(kind, HEADS[kind].tiny_options())
    return config


def trainer(run, config=None, device="cpu", **kw) -> LanguageModelTrainer:
    return LanguageModelTrainer(config or config_for(), run, device=device, corpus=tiny_corpus(),
                                progress=False, **kw)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                 b.state_dict().values(), strict=True))


@pytest.fixture(autouse=True)
def device_path(monkeypatch):
    """Heads check target ids as on an accelerator (no reading back)."""
    monkeypatch.setattr("drillbook.heads.base.reads_back", lambda target: False)


# ------------------------------------------------------------------ the optimisers
@pytest.mark.parametrize("kind", ["sgd", "asgd"])
@pytest.mark.parametrize("clip", [0.01, 1e6], ids=["clipping", "not-clipping"])
def test_the_graph_ready_optimisers_equal_torchs_bit_for_bit(kind, clip):
    """Six steps of a tiny language model, each at its own rate (``lr x seq_len / bptt``),
    weight decay on: the weights and the whole optimiser state equal torch's after every
    step, with the clipping active (gradient norm above the bound) and inactive."""
    config = tiny_config()
    model = build_model(config, 30)
    models = [model, copy.deepcopy(model)]
    lr, decay = 7.5, 1.2e-3
    theirs = (torch.optim.SGD(models[0].parameters(), lr=lr, weight_decay=decay)
              if kind == "sgd" else
              torch.optim.ASGD(models[0].parameters(), lr=lr, t0=0, lambd=0.0,
                               weight_decay=decay))
    ours = (GraphSGD if kind == "sgd" else GraphASGD)(models[1].parameters(), lr, decay)
    gen = torch.Generator().manual_seed(5)
    for step in range(6):
        ids = torch.randint(0, 30, (5 + step, 4), generator=gen)
        norms = []
        for m, optimizer in zip(models, (theirs, ours), strict=True):
            torch.manual_seed(step)  # the same dropout masks
            optimizer.zero_grad(set_to_none=optimizer is theirs)  # ours: zeroed in place
            loss, _, _ = training_loss(m, ids[:-1], ids[1:], None, alpha=2.0, beta=1.0)
            loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(m.parameters(), clip))
            group = optimizer.param_groups[0]
            group["lr"] = lr * (4 + step) / 6
            optimizer.step()
            group["lr"] = lr
        assert torch.equal(norms[0], norms[1]) and (norms[0] > clip) == (clip < 1)
        assert same_weights(*models)
        for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
            assert theirs.state[p].keys() == ours.state[q].keys()
            for key in theirs.state[p]:
                assert torch.equal(theirs.state[p][key], ours.state[q][key]), key
    if kind == "asgd":
        assert theirs.state_dict()["state"][0]["step"] == 6


# ------------------------------------------------------------------ the trainer
@pytest.mark.parametrize("kind", LM_HEADS)
def test_a_trainer_with_the_graph_ready_step_trains_bit_identically(tmp_path, kind):
    """Dropout on, three epochs, the last two in averaged SGD (switched to as NT-ASGD
    switches, after the first, whatever its trigger would say for this head): the same
    weights, the same log, as the plain step's."""
    runs = {}
    for graphs in (False, True):
        t = trainer(tmp_path / str(graphs), config_for(kind, epochs=3), graphs=graphs)
        t.fit(max_epochs=1)
        if t.averaging is False:
            t.optimizer = t._make_optimizer("asgd")
        t.fit()
        runs[graphs] = (t, read_log(tmp_path / str(graphs)))
    (plain, log), (graphed, glog) = runs[False], runs[True]
    assert isinstance(graphed.stepper, GraphedStep) and isinstance(graphed.eval_model,
                                                                   GraphedForward)
    assert [r["optimizer"] for r in glog] == [r["optimizer"] for r in log]
    assert "asgd" in [r["optimizer"] for r in glog]
    assert isinstance(graphed.optimizer, GraphASGD)
    assert same_weights(plain.model, graphed.model)
    for key in ("train_loss", "val_loss"):
        assert [r[key] for r in glog] == [r[key] for r in log]


def test_a_graphed_run_resumes_as_a_plain_one_and_back(tmp_path):
    """The optimisers keep torch's state: a run stopped with one step resumes with the
    other, and ends bit-identical to an uninterrupted plain run."""
    ref = trainer(tmp_path / "ref", config_for(epochs=3))
    ref.fit()
    run = tmp_path / "run"
    trainer(run, config_for(epochs=3), graphs=True).fit(max_steps=5)
    trainer(run, config_for(epochs=3), resume=True).fit(max_steps=13)  # into averaged SGD
    last = trainer(run, config_for(epochs=3), resume=True, graphs=True)
    last.fit()
    assert same_weights(ref.model, last.model)
    assert [r["val_loss"] for r in read_log(run)] == \
        [r["val_loss"] for r in read_log(tmp_path / "ref")]


def fixed_batches(t: LanguageModelTrainer, length: int, n: int) -> list[Batch]:
    data = t.train_data
    return [Batch(data[i:i + length], data[i + 1:i + 1 + length], length, length / 6, i)
            for i in range(n)]


@pytest.mark.parametrize("kind", ["sgd", "asgd"])
def test_the_step_dispatches_the_same_operations_and_reads_nothing_back(tmp_path, kind):
    """The CPU stands in for the GPU: every operation a step dispatches is recorded. At
    one window length the calls dispatch the same operations, the update among them as
    multi-tensor operations, and none that reads a value back to the host."""
    t = trainer(tmp_path / "run", config_for("drill", log_interval=1000), graphs=True)
    if kind == "asgd":
        t.optimizer = t._make_optimizer("asgd")  # NT-ASGD's switch
    warm, *batches = fixed_batches(t, 5, 4)
    t.train_step(warm)  # the first: gradients (and averaged SGD's state) made
    operations = []
    for batch in batches:
        with Recorder() as reads, _Operations() as ops:
            t.train_step(batch)
        assert reads.read_back == []
        operations.append(ops.names)
    assert operations[0] == operations[1] == operations[2]
    assert "_foreach_addcmul_" in operations[0] and "_foreach_zero_" in operations[0]
    assert t.check_steps() is not None  # what the loop reads, at its logging points


class _Operations(Recorder):
    """Every operation's name, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def addresses(t: LanguageModelTrainer) -> dict[str, list[int]]:
    params = list(t.model.parameters())
    state = [v for p in params for v in t.optimizer.state[p].values()]
    return {"params": [p.data_ptr() for p in params],
            "grads": [p.grad.data_ptr() for p in params],
            "optimizer": [v.data_ptr() for v in state] + [t.optimizer.lr_now.data_ptr()],
            "hidden": [h.data_ptr() for h in tree_flatten(t.hidden)[0]],
            "numbers": [t.stepper.numbers.data_ptr()]}


def test_everything_the_step_touches_stays_at_its_address(tmp_path):
    """Parameters, gradients, the optimiser's state, the carried state and the step's
    numbers: the same storage across steps and epochs, and, once averaged SGD has taken
    over (a new optimiser, whose state the graphs are captured again with), across its
    steps and epochs too."""
    t = trainer(tmp_path / "run", config_for(epochs=5), graphs=True)
    t.fit(max_steps=2)
    first = addresses(t)
    assert first["optimizer"] == [t.optimizer.lr_now.data_ptr()]  # SGD keeps no state
    t.fit(max_epochs=2)
    assert addresses(t) == first and t.hidden is t.stepper.hidden
    t.fit(max_epochs=3)  # NT-ASGD switches to averaged SGD after epoch 3
    assert isinstance(t.optimizer, GraphASGD)
    t.fit(max_epochs=4)
    averaging = addresses(t)
    assert len(averaging["optimizer"]) == 4 * len(first["params"]) + 1
    assert {k: v for k, v in averaging.items() if k != "optimizer"} == \
        {k: v for k, v in first.items() if k != "optimizer"}
    t.fit()
    assert addresses(t) == averaging and read_log(tmp_path / "run")[-1]["epoch"] == 5


@pytest.mark.parametrize(("setting", "why"), [
    ("train.accum_steps=2", "leave train.accum_steps at 1"),
    ("train.optimizer=adam", "use train.optimizer=sgd"),
    ("train.amp=fp16", "use train.amp=bf16 or fp32"),
    ("train.compile=true", "set train.compile=false"),
])
def test_what_the_graph_ready_step_cannot_take_is_refused_before_anything_is_written(
        tmp_path, setting, why):
    from drillbook.configs import apply_overrides

    with pytest.raises(ConfigError, match=f"graph-ready training step does not apply: .*{why}"):
        trainer(tmp_path / "run", apply_overrides(config_for(), [setting]), graphs=True)
    assert not (tmp_path / "run").exists()


def test_train_refuses_cuda_graphs_off_cuda_in_one_line(capsys, tmp_path):
    from test_cli_errors import user_error

    line = user_error(capsys, ["train", "tutorial/ptb-tied", "--cuda-graphs", "--device",
                               "cpu", "--out", str(tmp_path / "run")])
    assert "CUDA graphs need a CUDA device (this run trains on cpu)" in line
    assert "drop --cuda-graphs" in line and not (tmp_path / "run").exists()
    line = user_error(capsys, ["train", "multi30k/de-en-softmax-tutorial", "--cuda-graphs",
                               "--out", str(tmp_path / "nmt")])
    assert "--cuda-graphs is for language models" in line


# ------------------------------------------------------------------ CUDA graphs
#: graphs replay the eager step's kernels; what may differ is the order of floating-point
#: sums inside cuDNN and cuBLAS between calls: losses within 1e-4 relative, weights after
#: two epochs within 1e-3 (dropout off, so that no random mask differs)
LOSS_RTOL, WEIGHT_ATOL = 1e-4, 1e-3


@CUDA
@pytest.mark.parametrize("kind", ["tied", "mos"])
def test_captured_steps_train_as_the_eager_step_does(tmp_path, kind):
    runs = {}
    for graphs in (False, True):
        config = no_dropout(epochs=3)
        config.head = HeadConfig(kind, HEADS[kind].tiny_options())
        t = trainer(tmp_path / str(graphs), config, device="cuda", graphs=graphs)
        t.fit()
        runs[graphs] = (t, read_log(tmp_path / str(graphs)))
    (eager, log), (graphed, glog) = runs[False], runs[True]
    assert graphed.stepper.capture and graphed.stepper.replays > 0 and graphed.stepper.graphs
    assert graphed.eval_model.graphs  # evaluation windows were captured too
    for a, b in zip(log, glog, strict=True):
        assert b["optimizer"] == a["optimizer"]
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=LOSS_RTOL)
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=LOSS_RTOL)
    for x, y in zip(eager.model.state_dict().values(), graphed.model.state_dict().values(),
                    strict=True):
        torch.testing.assert_close(y, x, rtol=0, atol=WEIGHT_ATOL)


@CUDA
def test_captured_evaluation_windows_give_the_eager_loss(tmp_path):
    t = trainer(tmp_path / "run", no_dropout(epochs=1), device="cuda")
    data = t.valid_data
    eager, n = evaluate(t.model, data, 6)
    forward = GraphedForward(t.model)
    first, m = evaluate(forward, data, 6)  # warm-up: eager
    second, _ = evaluate(forward, data, 6)  # captured
    assert forward.graphs and n == m
    assert first == pytest.approx(eager, rel=LOSS_RTOL)
    assert second == pytest.approx(eager, rel=LOSS_RTOL) and math.isfinite(second)


# ------------------------------------------------------------------ one step body
class _Regression:
    """A task that carries nothing between steps and whose batch is a pair of tensors: a
    linear model's mean squared error, each batch at its own learning-rate factor."""

    def __init__(self, graph_ready: bool) -> None:
        torch.manual_seed(3)
        self.model = torch.nn.Linear(4, 2)
        params = self.model.parameters()
        self.optimizer = (GraphSGD(params, 0.3, 0.01) if graph_ready
                          else torch.optim.SGD(params, lr=0.3, weight_decay=0.01))

    def tokens(self, batch) -> int:
        return batch[1].numel()

    def lr_scale(self, batch) -> float:
        return batch[0].shape[0] / 4

    def loss(self, piece, part):
        from drillbook.train.step import StepLoss

        error = (self.model(piece[0]) - piece[1]).pow(2).mean()
        return StepLoss(error * 1.5, error)

    def carried_state(self):
        return None

    def carry_state(self, state) -> None:
        assert state is None


def test_the_graph_ready_step_is_the_plain_step_body_for_any_task():
    """The graphed step runs the plain step's own body (a captured graph records that
    function), for a task that carries no state and batches that are tuples of tensors:
    on the CPU, eagerly, the same weights and losses to the bit, one shape per batch
    size counted for capture."""
    from drillbook.train.step import LocalReducer, OptimizerStep

    assert GraphedStep._body is OptimizerStep._body
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(n, 4, generator=gen), torch.randn(n, 2, generator=gen))
               for n in (4, 3, 4, 4, 3)]
    runs = []
    for kind in (OptimizerStep, GraphedStep):
        task = _Regression(graph_ready=kind is GraphedStep)
        reducer = LocalReducer(task.model, math.inf, lambda *a: RuntimeError(a[0]))
        step = kind(task, task.model, clip=0.5, parts=1, precision="fp32",
                    device=torch.device("cpu"), scaler=None, reducer=reducer)
        losses = [float(step(batch, i)) for i, batch in enumerate(batches)]
        checked = [(c.step, c.tokens, c.loss) for c in reducer.check()]
        runs.append((task.model.state_dict(), losses, checked, step))
    (plain, losses, checked, _), (graphed, glosses, gchecked, gstep) = runs
    assert all(torch.equal(plain[k], graphed[k]) for k in plain)
    assert losses == glosses and checked == gchecked and len(checked) == len(batches)
    assert gstep.eager_steps == len(batches) and not gstep.capture
    assert sorted(n for shape, n in gstep.seen.items()) == [2, 3]


def test_a_precision_says_what_it_needs_and_the_benchmarks_take_what_needs_nothing():
    from drillbook.experiments.bench.measure import PRECISIONS as BENCH
    from drillbook.precision import PRECISIONS, amp_precisions

    needs = {p.name: (p.dtype, p.scaler, p.tf32, p.capturable) for p in PRECISIONS.values()}
    assert needs == {"fp32": (None, False, False, True),
                     "bf16": (torch.bfloat16, False, False, True),
                     "fp16": (torch.float16, True, False, False),
                     "tf32": (None, False, True, True)}
    assert BENCH == ("fp32", "bf16")
    assert [p.name for p in amp_precisions("auto")] == ["fp32", "bf16"]
    assert [p.name for p in amp_precisions("off")] == ["fp32"]
    assert amp_precisions("half") == []
