"""The definitions page (book/glossary.md): its labels, the settings and paper numbers it
states, and the links to it from the chapters.

The page is Markdown, not a notebook, so nothing on it is executed; what it states as a
number is checked here against the package: the PTB recipe against the ``ptb/awd-lstm``
config, the papers' perplexities against the record (:mod:`drillbook.papers`), the chance
of a false "resolved" against a count.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import yaml

from drillbook.configs import get_config
from drillbook.papers import paper_value

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "book" / "glossary.md"
#: the labels every chapter links at first use (the book's shared conventions)
LABELS = ["perplexity", "bleu", "awd-lstm", "weight-drop", "dropouts", "ar-tar", "nt-asgd",
          "finetune", "dynamic-eval", "rank", "seeds"]


@pytest.fixture(scope="module")
def text() -> str:
    return GLOSSARY.read_text()


def test_every_shared_label_is_defined_once(text):
    for label in LABELS:
        assert text.count(f"(glossary-{label})=\n") == 1, label


def test_the_page_follows_notation_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    first = toc["parts"][0]
    assert first["caption"] == "Before you start"
    assert [c["file"] for c in first["chapters"]] == ["book/notation", "book/glossary"]


def test_every_link_to_the_page_names_a_label_it_defines(text):
    defined = set(re.findall(r"^\((glossary-[\w-]+)\)=$", text, re.M))
    pages = [*(ROOT / "notebooks").glob("*.py"), *(ROOT / "book").glob("*.md")]
    used = {label for page in pages
            for label in re.findall(r"<(glossary-[\w-]+)>", page.read_text())}
    assert used, "no page links the definitions"
    assert used <= defined, used - defined


@pytest.mark.parametrize("page", ["book/intro.md", "book/notation.md",
                                  "notebooks/04_vmf_continuous_outputs.py",
                                  "notebooks/05_joint_embeddings_nmt.py",
                                  "notebooks/07_cost_of_output_layers.py"])
def test_pages_link_the_definitions(page):
    assert "<glossary-" in (ROOT / page).read_text(), page


def _recipe_rows(text: str) -> dict[str, str]:
    """config key -> value as written, from the rows of the recipe's settings table."""
    return dict(re.findall(r"^\| [^|]+ \| `((?:model|train)\.\w+)` \| ([\d.]+) \|$", text,
                           re.M))


def test_the_recipe_table_is_the_ptb_config(text):
    rows = _recipe_rows(text)
    assert len(rows) == 16
    config = get_config("ptb/awd-lstm")
    for key, written in rows.items():
        section, field = key.split(".")
        assert float(written) == getattr(getattr(config, section), field), key


# (record key, metric, the number as the page writes it)
QUOTED = [("drill:table1:awd-lstm-wo-finetune", "test_ppl", "58.8"),
          ("drill:table1:awd-lstm", "test_ppl", "57.3"),
          ("drill:table1:awd-lstm-drill-wo-finetune", "test_ppl", "57.0"),
          ("drill:table1:awd-lstm-drill", "test_ppl", "55.7"),
          ("drill:table1:awd-lstm-dynamic-eval", "test_ppl", "51.1"),
          ("drill:table1:awd-lstm-drill-dynamic-eval", "test_ppl", "49.4")]


@pytest.mark.parametrize(("key", "metric", "written"), QUOTED)
def test_quoted_paper_numbers_are_the_record(text, key, metric, written):
    assert paper_value(key, metric) == float(written)
    assert f" {written} " in text or f" {written}." in text or f" {written}," in text


def test_the_chance_that_three_seeds_apart_are_luck(text):
    """Two equally good rows, three i.i.d. runs each: every order of the six results is
    equally likely, and in 2 of the 20 ways to place one row's runs among them the two
    ranges do not overlap."""
    placements = list(itertools.combinations(range(6), 3))
    apart = sum(p in ((0, 1, 2), (3, 4, 5)) for p in placements)
    assert (apart, len(placements)) == (2, 20)
    assert "one time in ten" in text
