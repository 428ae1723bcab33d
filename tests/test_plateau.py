"""The stopping rule of a run trained to its plateau: the rule on its own, in the training
loop (a run stops, says so, and a resumed run that had reached it trains no further), and
in the result file a row writes."""

from __future__ import annotations

import math

import pytest
from test_train import make, tiny_config

from drillbook.configs import apply_overrides
from drillbook.errors import ConfigError
from drillbook.experiments.results import validate_result
from drillbook.experiments.run.documents import plateau_block
from drillbook.train import read_log
from drillbook.train.plateau import PlateauRule, plateau_epoch, reached_plateau

PPL = PlateauRule(epochs=2, tolerance=0.005)
BLEU = PlateauRule(epochs=2, tolerance=0.01, higher_is_better=True)


def test_the_rule_compares_the_best_of_the_last_epochs_with_the_best_before_them():
    assert not reached_plateau([300.0, 200.0], PPL)  # no more than E epochs: never
    assert not reached_plateau([300.0, 200.0, 150.0], PPL)
    # 100 -> 99.6 over the last two epochs is 0.4%: under 0.5%
    assert reached_plateau([300.0, 100.0, 99.8, 99.6], PPL)
    # 100 -> 99.4 is 0.6%: not yet
    assert not reached_plateau([300.0, 100.0, 101.0, 99.4], PPL)
    # worse than before (the NT-ASGD switch's epochs) is a plateau too
    assert reached_plateau([100.0, 110.0, 105.0], PPL)
    assert reached_plateau([100.0, 90.0, math.inf, math.nan], PPL)
    # BLEU: higher is better, the same rule
    assert not reached_plateau([10.0, 20.0, 22.0], BLEU)
    assert reached_plateau([10.0, 20.0, 20.1, 20.15], BLEU)
    assert plateau_epoch([300.0, 100.0, 99.8, 99.6, 50.0], PPL) == 4
    assert plateau_epoch([300.0, 200.0, 100.0], PPL) is None
    assert PPL.describe() == ("validation perplexity fell by less than 0.5% over the last "
                              "2 epochs")
    assert "BLEU rose" in BLEU.describe()


def test_the_rule_is_validated_and_may_change_on_resume():
    with pytest.raises(ConfigError, match="plateau_epochs"):
        apply_overrides(tiny_config(), ["train.plateau_epochs=0"])
    with pytest.raises(ConfigError, match="plateau_tolerance"):
        apply_overrides(tiny_config(), ["train.plateau_tolerance=1.5"])
    a = tiny_config()
    b = apply_overrides(a, ["train.plateau_epochs=3", "train.plateau_tolerance=0.01"])
    assert a.resume_key() == b.resume_key() and a.hash() != b.hash()


def test_a_run_stops_at_its_plateau_says_so_and_does_not_train_again(tmp_path):
    # a tolerance no epoch can beat: the rule holds after E + 1 epochs
    config = tiny_config(epochs=6, plateau_epochs=1, plateau_tolerance=0.99)
    status = make(tmp_path / "run", config).fit()
    assert status.reason == "plateau" and status.epoch == 2
    assert len(read_log(tmp_path / "run")) == 2
    again = make(tmp_path / "run", config, resume=True)
    step = again.step
    status = again.fit()
    assert status.reason == "plateau" and again.step == step  # not one step more
    # without the rule the same run trains every epoch
    status = make(tmp_path / "plain", tiny_config(epochs=3)).fit()
    assert status.reason == "done" and status.epoch == 3


def test_the_result_file_says_whether_the_plateau_was_reached():
    config = tiny_config(plateau_epochs=3)
    block = plateau_block(config, reached=True)["plateau"]
    assert block == {"epochs": 3, "tolerance": 0.005, "reached": True,
                     "rule": "validation perplexity fell by less than 0.5% over the last "
                             "3 epochs"}
    assert plateau_block(tiny_config(), reached=False) == {}
    doc = {"format": "drillbook-result/3", "table": "t", "row": "r", "config_name": "c",
           "config": {}, "config_hash": "0", "seed": 1, "git_commit": None, "device": "cpu",
           "torch": "2", "cuda": None, "status": "plateau", "epochs_done": 4,
           "steps_done": 8, "wall_seconds": 1.0, "budget_minutes": None, "metrics": {},
           "curve": [], "plateau": block}
    assert validate_result(doc) == []
    assert validate_result({**doc, "plateau": {"epochs": 3}}) == [
        "missing field 'plateau.tolerance'", "missing field 'plateau.rule'",
        "missing field 'plateau.reached'"]
