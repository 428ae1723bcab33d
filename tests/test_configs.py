"""Named configs, overrides, and parameter counts against the papers' tables."""

from __future__ import annotations

import math

import pytest

from drillbook.cli import param_report
from drillbook.configs import (
    Config,
    ConfigError,
    apply_overrides,
    get_config,
    list_configs,
    paper_millions,
)

V_PTB, V_WT2 = 10_000, 33_278


def total(name: str, *overrides: str, vocab: int = V_PTB) -> int:
    return param_report(apply_overrides(get_config(name), list(overrides)), vocab)["total"]


def test_every_named_config_builds_and_round_trips():
    for name in list_configs():
        cfg = get_config(name)
        assert Config.from_dict(cfg.to_dict()) == cfg
        assert param_report(cfg, 50)["total"] > 0


def test_awd_lstm_ptb_is_24_2m_exactly_as_computed():
    # 4.0M embedding + LSTMs (7,139,200 + 10,589,200 + 2,483,200) + 10k bias
    assert total("ptb/awd-lstm") == 24_221_600


@pytest.mark.parametrize(("name", "overrides", "paper"), [
    ("ptb/awd-lstm-full-softmax", (), 43.8),
    ("ptb/awd-lstm", (), 24.2),
    ("ptb/awd-lstm-bilinear", (), 24.3),
    ("ptb/awd-lstm-dual", (), 24.5),
    ("ptb/awd-lstm-drill", ("head.options.depth=1",), 24.3),
    ("ptb/awd-lstm-drill", ("head.options.depth=2",), 24.5),
    ("ptb/awd-lstm-drill", ("head.options.depth=3",), 24.7),
    ("ptb/awd-lstm-drill", (), 24.8),
])
def test_drill_table_4_parameter_counts(name, overrides, paper):
    """DRILL Table 4 prints counts truncated to 0.1M."""
    assert paper_millions(total(name, *overrides)) == paper


def test_main_tables_parameter_counts():
    """DRILL Tables 1-2 print whole millions (truncated): 24M PTB, 33M/34M WT2."""
    assert math.floor(total("ptb/awd-lstm-drill") / 1e6) == 24
    assert math.floor(total("wt2/awd-lstm", vocab=V_WT2) / 1e6) == 33
    assert math.floor(total("wt2/awd-lstm-drill", vocab=V_WT2) / 1e6) == 34


def test_paper_numbers_recorded_for_the_table_configs():
    assert get_config("ptb/awd-lstm-drill").paper["test_ppl"] == 55.7
    assert get_config("ptb/awd-lstm").paper["params_m"] == 24.2


def test_overrides_are_typed_and_unknown_keys_list_valid_ones():
    cfg = apply_overrides(get_config("ptb/awd-lstm"),
                          ["train.lr=20", "model.d_out=null", "train.amp=true",
                           "head.options.depth=3", "head.kind=drill"])
    assert cfg.train.lr == 20.0 and isinstance(cfg.train.lr, float)
    assert cfg.model.d_out is None and cfg.train.amp is True
    assert cfg.head.kind == "drill" and cfg.head.options == {"depth": 3}
    with pytest.raises(ConfigError, match=r"valid keys in train: \[.*'lr'"):
        apply_overrides(cfg, ["train.learning_rate=1"])
    with pytest.raises(ConfigError, match="must be an integer"):
        apply_overrides(cfg, ["train.batch_size=2.5"])
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides(cfg, ["train.lr"])
    with pytest.raises(ConfigError, match=r"section\.field"):
        apply_overrides(cfg, ["lr=3"])
    with pytest.raises(ConfigError, match=r"unknown config 'ptb/nope'.*'ptb/awd-lstm'"):
        get_config("ptb/nope")


def test_a_bad_head_option_is_a_config_error():
    cfg = apply_overrides(get_config("tutorial/ptb-drill"), ["head.options.deep=3"])
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['deep'\]"):
        param_report(cfg, 100)


def test_hash_ignores_names_but_not_hyperparameters():
    a = get_config("ptb/awd-lstm")
    b = a.copy()
    b.name, b.description = "renamed", "..."
    assert a.hash() == b.hash()
    assert apply_overrides(a, ["train.lr=1"]).hash() != a.hash()


def test_paper_row_follows_the_depth_override():
    from drillbook.configs import paper_row

    drill = get_config("ptb/awd-lstm-drill")
    assert paper_row(drill)["test_ppl"] == 55.7
    assert paper_row(apply_overrides(drill, ["head.options.depth=2"]))["params_m"] == 24.5
    assert paper_row(apply_overrides(drill, ["head.options.depth=7"])) == {}
    assert paper_row(get_config("ptb/awd-lstm"))["params_m"] == 24.2
