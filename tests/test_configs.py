"""Named configs, overrides, and parameter counts against the papers' tables."""

from __future__ import annotations

import math

import pytest

from drillbook.configs import (
    LANGUAGE_MODEL,
    TRANSLATION,
    Config,
    ConfigError,
    apply_overrides,
    config_from_dict,
    get_config,
    list_configs,
    paper_millions,
)
from drillbook.experiments import TABLES
from drillbook.models import param_report
from drillbook.papers import paper_value

V_PTB, V_WT2 = 10_000, 33_278


def total(name: str, *overrides: str, vocab: int = V_PTB) -> int:
    return param_report(apply_overrides(get_config(name), list(overrides)), vocab)["total"]


def test_every_named_config_builds_and_round_trips():
    for name in list_configs():
        cfg = get_config(name)
        assert config_from_dict(cfg.to_dict()) == cfg
        assert type(cfg).from_dict(cfg.to_dict()) == cfg
        if cfg.task == LANGUAGE_MODEL:
            assert param_report(cfg, 50)["total"] > 0


def test_awd_lstm_ptb_is_24_2m_exactly_as_computed():
    # 4.0M embedding + LSTMs (7,139,200 + 10,589,200 + 2,483,200) + 10k bias
    assert total("ptb/awd-lstm") == 24_221_600


@pytest.mark.parametrize("row", TABLES["drill-table4"][:8], ids=lambda r: r.name)
def test_drill_table_4_parameter_counts(row):
    """DRILL Table 4 prints counts truncated to 0.1M; each row's count is in its record."""
    printed = paper_value(row.paper_finetuned, "params_m")
    assert printed == {"full-softmax": 43.8, "tied": 24.2, "bilinear": 24.3, "dual": 24.5,
                       "drill-1": 24.3, "drill-2": 24.5, "drill-3": 24.7,
                       "drill-4": 24.8}[row.name]  # as printed, read off the table by hand
    assert paper_millions(total(row.config, *row.overrides)) == printed


def test_main_tables_parameter_counts():
    """DRILL Tables 1-2 print whole millions (truncated): 24M PTB, 33M/34M WT2."""
    assert math.floor(total("ptb/awd-lstm-drill") / 1e6) == 24 == paper_value(
        "drill:table1:awd-lstm-drill", "params_m")
    assert math.floor(total("wt2/awd-lstm", vocab=V_WT2) / 1e6) == 33 == paper_value(
        "drill:table2:awd-lstm", "params_m")
    assert math.floor(total("wt2/awd-lstm-drill", vocab=V_WT2) / 1e6) == 34 == paper_value(
        "drill:table2:awd-lstm-drill", "params_m")


def test_configs_name_their_paper_record():
    assert get_config("ptb/awd-lstm-drill").paper == "drill:table1:awd-lstm-drill"
    assert paper_value(get_config("ptb/awd-lstm").paper, "test_ppl") == 57.3
    assert get_config("tutorial/ptb-tied").paper is None


def test_overrides_are_typed_and_unknown_keys_list_valid_ones():
    cfg = apply_overrides(get_config("ptb/awd-lstm"),
                          ["train.lr=20", "model.d_out=null", "train.amp=true",
                           "head.options.depth=3", "head.kind=drill"])
    assert cfg.train.lr == 20.0 and isinstance(cfg.train.lr, float)
    assert cfg.model.d_out is None and cfg.train.amp == "bf16"  # old boolean: bf16
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
    # refused where it enters, by the override, before any model is built
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['deep'\]"):
        apply_overrides(get_config("tutorial/ptb-drill"), ["head.options.deep=3"])


def test_hash_ignores_names_and_paper_but_not_hyperparameters():
    a = get_config("ptb/awd-lstm")
    b = a.copy()
    b.name, b.description, b.paper = "renamed", "...", "drill:table4:dual"
    assert a.hash() == b.hash() and a.resume_key() == b.resume_key()
    assert apply_overrides(a, ["train.lr=1"]).hash() != a.hash()
    # a run folder written when configs carried the numbers themselves still loads
    old = {**a.to_dict(), "paper": {"valid_ppl": 60.0, "test_ppl": 57.3}}
    assert Config.from_dict(old).paper is None and Config.from_dict(old).hash() == a.hash()


def test_params_report_finds_the_paper_rows_of_the_same_model():
    from drillbook.experiments import paper_params

    drill = get_config("ptb/awd-lstm-drill")
    report = {"paper": paper_params(apply_overrides(drill, ["head.options.depth=2",
                                                            "train.epochs=3"]))}
    assert report["paper"] == {"drill:table4:drill-2-layers": 24.5}
    assert paper_params(apply_overrides(drill, ["head.options.depth=7"])) == {}
    assert paper_params(get_config("ptb/awd-lstm")) == {
        "drill:table1:awd-lstm-wo-finetune": 24, "drill:table4:weight-tying": 24.2,
        "drill:table1:awd-lstm": 24, "drill:table1:awd-lstm-dynamic-eval": 24}


# ------------------------------------------------------------------ one registry, two tasks
def test_one_registry_holds_both_tasks_and_each_config_names_its_task():
    from drillbook.configs import NMTConfig, list_nmt_configs
    from drillbook.experiments import Row

    lm, mt = list_configs(LANGUAGE_MODEL), list_configs(TRANSLATION)
    assert mt == list_nmt_configs() and "multi30k/de-en-vmf" in mt
    assert "ptb/awd-lstm" in lm and not set(lm) & set(mt)
    assert list_configs() == sorted(lm + mt)
    assert isinstance(get_config("multi30k/de-en-vmf"), NMTConfig)
    assert get_config("multi30k/de-en-vmf").task == TRANSLATION == NMTConfig.task
    assert get_config("tutorial/ptb-tied").task == LANGUAGE_MODEL == Config.task
    # a table row asks its config, whatever its name looks like
    assert Row("x", "multi30k/de-en-softmax").task.name == TRANSLATION
    assert Row("x", "tutorial/ptb-tied").task.name == LANGUAGE_MODEL
    with pytest.raises(ConfigError, match="unknown task 'speech'"):
        list_configs("speech")


def test_a_dict_says_its_task_and_an_old_one_is_read_by_its_sections():
    from drillbook.configs import NMTConfig

    nmt = get_config("multi30k/de-en-drill")
    d = nmt.to_dict()
    assert list(d)[:2] == ["name", "task"] and d["task"] == TRANSLATION
    old = {k: v for k, v in d.items() if k != "task"}  # written before configs named it
    assert config_from_dict(old) == nmt and NMTConfig.from_dict(old) == nmt
    lm = get_config("tutorial/ptb-tied").to_dict()
    assert config_from_dict({k: v for k, v in lm.items() if k != "task"}).task == LANGUAGE_MODEL
    with pytest.raises(ConfigError, match="'translation' config cannot be read as a "
                                          "'language-model' config"):
        Config.from_dict(d)
    with pytest.raises(ConfigError, match="unknown task 'speech'"):
        config_from_dict({**lm, "task": "speech"})
    # the task is not a hyper-parameter: the hash (run folders, result files) ignores it
    assert nmt.hash() == NMTConfig.from_dict(old).hash()


def test_param_report_refuses_a_translation_config():
    with pytest.raises(ConfigError, match="multi30k/de-en-softmax is a translation config"):
        param_report(get_config("multi30k/de-en-softmax"))


# ------------------------------------------------------------------ config files
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_a_dumped_config_loads_back_equal(tmp_path, fmt):
    from drillbook.configs import dump_config, load_config

    if fmt == "yaml":
        pytest.importorskip("yaml")
    for name in ("ptb/awd-lstm-doc", "wt2/awd-lstm-mos", "multi30k/de-en-vmf-reg1-tied"):
        cfg = apply_overrides(get_config(name), [
            "train.lr=0.5", "head.options.vectors_per_layer=[0, 0, 4, 16]"]
            if name.startswith("ptb") else [])
        path = tmp_path / f"run.{fmt}"
        path.write_text(dump_config(cfg, fmt))
        loaded = load_config(path)
        assert loaded == cfg and type(loaded) is type(cfg) and loaded.hash() == cfg.hash()


def test_hand_written_yaml_and_toml_files(tmp_path):
    from drillbook.configs import load_config

    pytest.importorskip("yaml")
    (tmp_path / "a.yml").write_text("name: mine\ntrain:\n  lr: 1e-3\n  epochs: 3\n"
                                    "head:\n  kind: drill\n  options: {depth: 2}\n")
    # a section left out would be the papers' full-size defaults, silently: refused
    with pytest.raises(ConfigError, match=r"a\.yml has no 'data', 'model' sections: .*"
                                          r"configs --show tutorial/ptb-tied > a\.yml"):
        load_config(tmp_path / "a.yml")
    (tmp_path / "a.yml").write_text("name: mine\ndata: {corpus: ptb}\nmodel: {nhid: 64}\n"
                                    "train:\n  lr: 1e-3\n  epochs: 3\n"
                                    "head:\n  kind: drill\n  options: {depth: 2}\n")
    cfg = load_config(tmp_path / "a.yml")  # 1e-3 is a number here, as in JSON
    assert cfg.train.lr == 0.001 and cfg.train.epochs == 3 and cfg.head.options == {"depth": 2}
    assert cfg.task == LANGUAGE_MODEL and cfg.model.nhid == 64  # each section given
    assert cfg.model.emsize == Config("x").model.emsize  # ... its unset keys its defaults
    (tmp_path / "b.toml").write_text('name = "mt"\ntask = "translation"\n'
                                     '[head]\nkind = "vmf"\noptions = { loss = "l2" }\n'
                                     '[data]\ntarget_embeddings = "glove-50d"\n'
                                     '[model]\nhidden = 64\n[train]\nepochs = 2\n')
    mt = load_config(tmp_path / "b.toml")
    assert mt.task == TRANSLATION and mt.head.options == {"loss": "l2"}
