"""The record of the papers' numbers: against the paper texts, and as the tables use it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from drillbook.configs import ConfigError, finetune_lr, get_config, list_configs
from drillbook.experiments import TABLES
from drillbook.papers import (
    DOCUMENTS,
    RECORD,
    find_in_text,
    paper_number,
    paper_rows,
    paper_value,
    paper_values,
    table_block,
)

ROOT = Path(__file__).resolve().parent.parent


def _papers_folder() -> Path | None:
    """``../shared/papers`` beside the repository, or beside ``$DRILLBOOK_DATA``."""
    candidates = [ROOT.parent / "shared" / "papers"]
    if os.environ.get("DRILLBOOK_DATA"):
        candidates.append(Path(os.environ["DRILLBOOK_DATA"]).parent / "papers")
    return next((c for c in candidates if c.is_dir()), None)


PAPERS = _papers_folder()
needs_papers = pytest.mark.skipif(PAPERS is None, reason="the paper texts (../shared/papers) "
                                                         "are not on this machine")
CHECKABLE = [k for k, e in RECORD.items() if e.document is not None]


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return {k: (PAPERS / d.filename).read_text() for k, d in DOCUMENTS.items()}


@needs_papers
@pytest.mark.parametrize("key", CHECKABLE)
def test_every_checkable_entry_is_printed_in_its_paper(key, texts):
    entry = RECORD[key]
    assert find_in_text(entry, texts[entry.document]) is not None, (
        f"{key}: {entry.row!r} with {dict(entry.values)} not found in {entry.document}")


@needs_papers
def test_the_text_check_rejects_a_wrong_value_label_or_table(texts):
    """Each value changed by one printed unit is no longer found: the check can fail."""
    for key in CHECKABLE:
        entry = RECORD[key]
        text = texts[entry.document]
        for metric, value in entry.values.items():
            step = 1 if isinstance(value, int) else 0.1
            wrong = dataclasses.replace(entry, values={**entry.values, metric: value + step})
            assert find_in_text(wrong, text) is None, (key, metric)
        if entry.quote is None:
            assert find_in_text(dataclasses.replace(entry, row=entry.row + " x"), text) is None
    # Table 1's AWD-LSTM row printed in Table 2's block is not found there
    t1 = RECORD["drill:table1:awd-lstm"]
    assert find_in_text(dataclasses.replace(t1, table="Table 2"), texts["drill"]) is None
    block = table_block(texts["drill"], "Table 4")
    assert block[-1].startswith("Table 4.") and any("DRILL 4-layers" in x for x in block)


def test_every_entry_is_checkable_or_says_why_not():
    unchecked = {k: e.unchecked for k, e in RECORD.items() if e.document is None}
    # the DRILL authors' repository: its rank results file (402 with tol = 1)
    assert set(unchecked) == {"drill-repo:rank:softmax", "drill-repo:rank:drill",
                              "drill-repo:rank:mos", *[f"drill-repo:speed:{c}-{h}" for c in (
                                  "ptb", "wt2") for h in ("awd-lstm", "drill", "mos")]}
    assert all("repository" in reason for reason in unchecked.values())
    for key, entry in RECORD.items():
        assert entry.document in (None, *DOCUMENTS), key
        assert bool(entry.unchecked) == (entry.document is None), key
        assert entry.key == key and entry.values, key
        if entry.quote is not None:
            entry.quote.format(**entry.values)  # every placeholder has a value


def test_the_numbers_the_issue_found_wrong_are_right_now():
    from drillbook.experiments import TABLES, book_results, table_rows

    t4 = {r["row"]: r for r in table_rows("drill-table4", book_results())}
    for row, numbers in [("drill-4-residual-previous", (59.6, 57.5)),
                         ("drill-4-standard-dropout", (63.4, 60.7)),
                         ("drill-4", (58.2, 55.7)), ("tied", (60.0, 57.3))]:
        assert (t4[row]["paper_finetuned_valid"], t4[row]["paper_finetuned_test"]) == numbers
    # DRILL Table 1's "w/o finetune" rows stand beside the main (not fine-tuned) runs
    assert (t4["tied"]["paper_valid"], t4["tied"]["paper_test"]) == (60.7, 58.8)
    assert (t4["drill-4"]["paper_valid"], t4["drill-4"]["paper_test"]) == (59.6, 57.0)
    assert t4["drill-2"]["paper_valid"] is None  # Table 4 has no number before fine-tuning
    main = {r["row"]: r for r in table_rows("drill-main", book_results())}
    assert [(main[r]["paper_valid"], main[r]["paper_test"]) for r in
            ("ptb-awd-lstm", "ptb-drill", "wt2-awd-lstm", "wt2-drill")] == [
        (60.7, 58.8), (59.6, 57.0), (69.1, 66.0), (65.7, 62.8)]
    # ... and dynamic evaluation's numbers beside the dynamic evaluation of a fine-tuned run
    assert [main[r]["paper_dynamic_test"] for r in main] == [
        paper_value(row.paper_dynamic, "test_ppl") if row.paper_dynamic else None
        for row in TABLES["drill-main"]]
    assert main["ptb-drill"]["paper_dynamic_test"] == 49.4
    assert main["ptb-drill"]["dynamic_test"] is None  # not run yet
    mix = {r["row"]: r for r in table_rows("mos-doc", book_results())}
    assert (mix["ptb-doc-i3-20"]["paper_finetuned_valid"],
            mix["ptb-doc-i3-20"]["paper_finetuned_test"]) == (56.88, 54.79)
    assert (mix["ptb-doc-lambda-0"]["paper_finetuned_valid"],
            mix["ptb-doc-lambda-0"]["paper_finetuned_test"]) == (54.87, 53.15)
    # rank: the paper's text says 400; 402 (tol = 1) is the authors' repository
    assert paper_value("drill:sec4.1.1:rank-drill", "rank") == 400
    assert paper_number("drill-repo:rank:drill").values == {"rank_tol_1": 402}
    assert paper_value("drill:sec4.1.1:ptb-mos-speed", "ratio_to_tied") == 3.0
    # 60.0/57.3: the AWD-LSTM paper as DRILL quotes it, not the AWD-LSTM README
    awd = paper_number("drill:table1:awd-lstm")
    assert "README" not in awd.source and "DRILL Table 1" in awd.source


def test_i3_20_is_the_mos_implementation_with_20_experts():
    """DOC Table 3's i3 = 20 row was trained with MoS's code and hyper-parameters."""
    row = next(r for r in TABLES["mos-doc"] if r.name == "ptb-doc-i3-20")
    config, mos = row.resolve(), get_config("ptb/awd-lstm-mos")
    assert config.head.kind == "mos" and config.head.options["n_experts"] == 20
    assert config.head.options["latent_dropout"] == mos.head.options["latent_dropout"] == 0.29
    assert config.train.nonmono == 5 and "cv_weight" not in config.head.options
    lam0 = next(r for r in TABLES["mos-doc"] if r.name == "ptb-doc-lambda-0").resolve()
    assert lam0.head.kind == "doc" and lam0.head.options["cv_weight"] == 0.0
    assert lam0.train.nonmono == 60 and lam0.head.options["latent_dropout"] == 0.6


def test_every_row_names_its_own_records_and_stages_match():
    # rows of one table that deliberately share a record: Table 4's bilinear and dual rows
    # with and without footnote 6's dropout and residual connections
    shared_ok = {("drill-table4", "drill:table4:bilinear"), ("drill-table4", "drill:table4:dual")}
    for table, rows in TABLES.items():
        seen: dict[str, str] = {}
        for row in rows:
            for key in (*row.paper_keys("main"), *row.paper_keys("finetuned")):
                paper_number(key)  # exists
                if key in seen and seen[key] != row.name:
                    assert (table, key) in shared_ok, f"{table}: {row.name} and {seen[key]}"
                seen[key] = row.name
            row.paper_values("main")  # no two main records give the same metric
            for key in row.paper_keys("main"):
                assert paper_number(key).finetuned is not True, (table, row.name, key)
            if row.finetunes:
                assert paper_number(row.paper_finetuned).finetuned is True, (table, row.name)
            for key in row.paper_keys("dynamic"):  # dynamic evaluation of the fine-tuned run
                entry = paper_number(key)
                assert entry.dynamic_eval and entry.finetuned and row.finetunes, (table, key)
    # every paper table names records on every row; the CPU tables on none
    for table in ("drill-table4", "drill-main", "mos-doc", "rank", "speed"):
        assert all(r.paper or r.paper_finetuned for r in TABLES[table]), table
    for table in ("tutorial", "cpu-scale"):
        assert not any(r.paper or r.paper_finetuned for r in TABLES[table]), table
    assert all(r.finetunes for t in ("drill-table4", "drill-main", "mos-doc")
               for r in TABLES[t])
    assert not any(r.finetunes for t in ("rank", "speed") for r in TABLES[t])


def test_configs_name_the_authors_final_result_and_a_row_compares_with_it():
    named = {n: get_config(n).paper for n in list_configs() if get_config(n).paper}
    assert named["ptb/awd-lstm-drill"] == "drill:table1:awd-lstm-drill"
    for name, key in named.items():
        assert paper_number(key).finetuned is True, name
        assert any(r.config == name and not r.overrides and r.paper_finetuned == key
                   for rows in TABLES.values() for r in rows), name


def test_lookup_errors_name_the_problem():
    with pytest.raises(ConfigError, match=r"unknown paper record 'drill:table9:x'.*drill:"):
        paper_number("drill:table9:x")
    with pytest.raises(ConfigError, match="has no 'bleu'"):
        paper_value("drill:table4:dual", "bleu")
    with pytest.raises(ConfigError, match="both give 'params_m'"):
        paper_values(["drill:table4:dual", "drill:table4:bilinear"])
    assert [e.key for e in paper_rows(document="drill", table="Table 4")][-2:] == [
        "drill:table4:residuals-between-layers", "drill:table4:no-variational-dropout"]
    assert {e.key for e in paper_rows(document="drill", finetuned=False)} == {
        "drill:table1:awd-lstm-wo-finetune", "drill:table1:awd-lstm-drill-wo-finetune",
        "drill:table2:awd-lstm-wo-finetune", "drill:table2:awd-lstm-drill-wo-finetune"}


@pytest.mark.parametrize(("name", "seed"), [
    # the --seed of each README command (salesforce/awd-lstm-lm, idiap/drill,
    # zihangdai/mos, nttcslab-nlp/doc_lm)
    ("ptb/awd-lstm", 141), ("wt2/awd-lstm", 1882), ("ptb/awd-lstm-drill", 28),
    ("wt2/awd-lstm-drill", 1882), ("ptb/awd-lstm-mos", 28), ("wt2/awd-lstm-mos", 1882),
    ("ptb/awd-lstm-doc", 28), ("wt2/awd-lstm-doc", 1882)])
def test_paper_configs_use_the_seed_of_the_authors_command(name, seed):
    assert get_config(name).train.seed == seed


def test_fine_tuning_learning_rates_follow_the_readmes():
    assert finetune_lr("ptb/awd-lstm-mos") == 25.0 and finetune_lr("wt2/awd-lstm-mos") == 20.0
    for name in ("ptb/awd-lstm", "ptb/awd-lstm-drill", "ptb/awd-lstm-doc", "wt2/awd-lstm-doc"):
        assert finetune_lr(name) is None  # their fine-tuning commands repeat train.lr


def test_assert_quoted_checks_prose_against_the_record():
    from drillbook.papers import assert_quoted

    listing = assert_quoted({"drill:table4:dual": {"test_ppl": 56.4, "params_m": 24.5},
                             "drill-repo:rank:drill": {"rank_tol_1": 402}})
    assert listing.splitlines()[0].split()[:2] == ["56.4", "test_ppl"]
    assert "DRILL Table 4, Dual nonlinear map. [PH18]" in listing
    assert len(listing.splitlines()) == 3
    with pytest.raises(AssertionError, match=r"drill:table4:dual test_ppl: quoted 56\.5, "
                                             r"recorded 56\.4"):
        assert_quoted({"drill:table4:dual": {"test_ppl": 56.5}})
    with pytest.raises(ConfigError, match="has no 'rank'"):
        assert_quoted({"drill:table4:dual": {"rank": 400}})
