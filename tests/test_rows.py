"""Many runs in one process, one step of each in turn: on the CPU every row ends
bit-identical to its trainer's ``fit()`` alone (resumed too); a row that fails ends alone;
on CUDA (only there) the rows' graphs replayed on their own streams train as eager
steps do, within the tolerance of ``tests/test_graphs.py``."""

from __future__ import annotations

import pytest
import torch
from test_graphs import LOSS_RTOL, WEIGHT_ATOL, config_for, same_weights
from test_loop import no_dropout
from test_nmt import small
from test_nmt import tiny_corpus as tiny_parallel
from test_train import tiny_config, tiny_corpus

from drillbook.configs import HeadConfig
from drillbook.errors import ConfigError, TrainingDiverged
from drillbook.heads import HEADS
from drillbook.train import LanguageModelTrainer, NMTTrainer, read_log
from drillbook.train.graphs import GraphedStep
from drillbook.train.interleaver import EXECUTIONS, open_rows, train_together
from drillbook.train.step import OptimizerStep

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
KINDS = ["tied", "mos", "drill"]


def test_rows_interleaved_step_by_step_end_as_each_alone(tmp_path):
    """Three rows of three heads (one taking the graph-ready step), dropout on, stopped
    after 7 steps and resumed together: each ends bit-identical to its run alone, log
    and weights, though their steps alternated and shared torch's generators."""
    alone = {}
    for kind in KINDS:
        t = LanguageModelTrainer(config_for(kind), tmp_path / f"alone-{kind}", device="cpu",
                                 corpus=tiny_corpus(), progress=False)
        t.fit()
        alone[kind] = t
    jobs = [(config_for(kind), tmp_path / f"row-{kind}") for kind in KINDS]
    rows = [LanguageModelTrainer(config, run, device="cpu", corpus=tiny_corpus(), progress=False,
                                 graphs=kind == "mos") for (config, run), kind in zip(jobs, KINDS,
                                                                           strict=True)]
    first = train_together(rows, max_steps=7)
    assert [(o.status.reason, o.steps, o.error) for o in first] == [("steps", 7, None)] * 3
    assert {o.execution for o in first} == {"interleaved-eager"} <= set(EXECUTIONS)
    resumed = open_rows(jobs, device="cpu", corpus=tiny_corpus())  # each from last.pt
    assert all(t.step == 7 for t in resumed)
    second = train_together(resumed)
    assert [o.status.reason for o in second] == ["done"] * 3
    for kind, row in zip(KINDS, resumed, strict=True):
        assert same_weights(alone[kind].model, row.model), kind
        a, b = read_log(tmp_path / f"alone-{kind}"), read_log(tmp_path / f"row-{kind}")
        assert [r["val_loss"] for r in a] == [r["val_loss"] for r in b]
        assert [r["train_loss"] for r in a] == [r["train_loss"] for r in b]


def test_a_row_that_diverges_ends_alone_and_the_others_finish(tmp_path):
    rows = open_rows([(tiny_config(epochs=2, lr=1e6, clip=0), tmp_path / "bad"),
                      (tiny_config(epochs=2), tmp_path / "good")], device="cpu",
                     corpus=tiny_corpus())
    bad, good = train_together(rows)
    assert isinstance(bad.error, TrainingDiverged) and bad.status is None
    assert "no checkpoint was written yet" in str(bad.error)
    assert not (tmp_path / "bad").exists()  # a new run that saved nothing leaves nothing
    assert good.error is None and good.status.reason == "done" and good.status.epoch == 2
    assert not (tmp_path / "good" / ".lock").exists()


def test_open_rows_takes_the_graphed_step_where_asked_and_where_it_applies(tmp_path):
    plain, graphed = open_rows([(tiny_config(), tmp_path / "a"),
                                (tiny_config(), tmp_path / "b")], device="cpu",
                               corpus=tiny_corpus(), graphs=None)  # a CPU: not there
    assert type(plain.stepper) is OptimizerStep and type(graphed.stepper) is OptimizerStep
    for t in (plain, graphed):
        t.close()
    [graphed] = open_rows([(tiny_config(), tmp_path / "c")], device="cpu",
                          corpus=tiny_corpus(), graphs=True)  # eager on the CPU
    assert isinstance(graphed.stepper, GraphedStep) and not graphed.stepper.capture
    graphed.close()
    nmt = small("multi30k/de-en-softmax")
    [translation] = open_rows([(nmt, tmp_path / "d")], device="cpu", corpus=tiny_parallel(),
                              graphs=None)
    assert isinstance(translation, NMTTrainer)
    translation.close()
    with pytest.raises(ConfigError, match="graphed step is a language model's"):
        open_rows([(nmt, tmp_path / "e")], device="cpu", corpus=tiny_parallel(),
                  graphs=True)
    assert not (tmp_path / "e").exists()


@CUDA
def test_graphs_on_streams_train_each_row_as_it_trains_alone(tmp_path):
    """Dropout off: two rows' captured steps replayed round-robin on two streams give
    each row's eager run alone, within the stated tolerance."""
    configs = []
    for kind in ("tied", "mos"):
        config = no_dropout(epochs=2)
        config.head = HeadConfig(kind, HEADS[kind].tiny_options())
        configs.append(config)
    alone = []
    for i, config in enumerate(configs):
        t = LanguageModelTrainer(config, tmp_path / f"alone{i}", device="cuda",
                                 corpus=tiny_corpus(), progress=False)
        t.fit()
        alone.append(t)
    rows = open_rows([(c, tmp_path / f"row{i}") for i, c in enumerate(configs)],
                     device="cuda", corpus=tiny_corpus(), graphs=True)
    outcomes = train_together(rows)
    assert [o.execution for o in outcomes] == ["graphs-on-streams"] * 2
    for i, (a, row) in enumerate(zip(alone, rows, strict=True)):
        assert row.stepper.replays > 0
        la, lb = read_log(tmp_path / f"alone{i}"), read_log(tmp_path / f"row{i}")
        for x, y in zip(la, lb, strict=True):
            assert y["val_loss"] == pytest.approx(x["val_loss"], rel=LOSS_RTOL)
        for x, y in zip(a.model.state_dict().values(), row.model.state_dict().values(),
                        strict=True):
            torch.testing.assert_close(y, x, rtol=0, atol=WEIGHT_ATOL)
