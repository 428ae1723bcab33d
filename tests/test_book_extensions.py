"""The book's own Sphinx extensions (tools/sphinx_*.py) and its bibliography file.

The book build (``make book-check``, warnings as errors) runs the extensions on the real
pages; these tests pin the parts whose mistakes a build would not report: the labels of the
bibliography, help texts that must not depend on the terminal, and which name a
cross-reference lands on.
"""

from __future__ import annotations

import importlib.util
import pkgutil
import re
from pathlib import Path

import pytest

import drillbook

pytest.importorskip("sphinx")  # the ``book`` extra
from pybtex.database import Entry, Person, parse_file

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


authoryear = _load("sphinx_authoryear")
reference = _load("sphinx_reference")


def _entry(year: str, *authors: str) -> Entry:
    return Entry("article", fields={"title": "t", "year": year},
                 persons={"author": [Person(a) for a in authors]})


def test_labels_cite_like_the_text():
    entries = [
        _entry("2019", "Pappas, Nikolaos", "Henderson, James"),
        _entry("2018", "Yang, Zhilin", "Dai, Zihang", "Salakhutdinov, Ruslan"),
        _entry("2018", "Post, Matt"),
        _entry("2016", "Ruiz-Antol{\\'\\i}n, Diego", "Segura, Javier"),
        _entry("2017", "van den Oord, Aaron"),
    ]
    labels = list(authoryear.AuthorYearLabelStyle().format_labels(entries))
    assert labels == ["Pappas and Henderson, 2019", "Yang et al., 2018", "Post, 2018",
                      "Ruiz-Antolín and Segura, 2016", "van den Oord, 2017"]


def test_equal_labels_get_letters_in_order():
    entries = [_entry("2018", "Merity, S.", "Keskar, N."), _entry("2017", "Merity, S."),
               _entry("2018", "Merity, S.", "Xiong, C.")]
    entries[2].persons["author"] = entries[0].persons["author"]  # same authors, same year
    labels = list(authoryear.AuthorYearLabelStyle().format_labels(entries))
    assert labels == ["Merity and Keskar, 2018a", "Merity, 2017", "Merity and Keskar, 2018b"]


def test_every_bibliography_entry_has_a_doi_or_a_url():
    bib = parse_file(ROOT / "book" / "references.bib")
    assert len(bib.entries) >= 27
    for key, entry in bib.entries.items():
        doi, url = entry.fields.get("doi"), entry.fields.get("url")
        assert doi or url, key
        assert doi is None or doi.startswith("10."), (key, doi)  # a DOI, not a link
        assert url is None or url.startswith("https://"), (key, url)


def _all_parsers(parser):
    """``parser`` and every subcommand's parser under it, depth first."""
    yield parser
    for _, _, sub in reference._subcommands(parser):
        yield from _all_parsers(sub)


def test_help_texts_do_not_depend_on_the_terminal(monkeypatch):
    from drillbook.cli import build_parser

    texts = []
    for columns in ("40", "300"):
        monkeypatch.setenv("COLUMNS", columns)
        texts.append([reference._help_text(p) for p in _all_parsers(build_parser())])
    assert texts[0] == texts[1]
    lines = [line for text in texts[0] for line in text.splitlines()]
    assert max(map(len, lines)) <= reference.HELP_WIDTH


def test_every_command_has_its_section():
    from drillbook.cli import build_parser

    parser = build_parser()
    commands = reference._subcommands(parser)
    names = [name for name, _, _ in commands]
    assert {"train", "reproduce", "bench", "synthetic-rank"} <= set(names)
    for name, summary, sub in commands:
        assert summary, name  # the one line --help lists
        assert reference._help_text(sub).startswith(f"usage: drillbook {name} ")
    bench = dict((name, sub) for name, _, sub in commands)["bench"]  # its modes: sections too
    modes = reference._subcommands(bench)
    assert [name for name, _, _ in modes] == ["heads", "model", "step", "sweep", "targets"]
    for name, summary, sub in modes:
        assert summary, name
        assert reference._help_text(sub).startswith(f"usage: drillbook bench {name} ")


def test_references_land_where_the_object_is_documented():
    from drillbook.analysis import DRILL_TOL
    from drillbook.heads import DrillHead

    documented = {"drillbook.heads.drill.DrillHead", "drillbook.heads.base.OutputHead.log_prob",
                  "drillbook.analysis.rank.DRILL_TOL", "drillbook.analysis.rank.Spectrum"}
    name = reference._documented_name
    # a re-exported class, by its public path
    assert name(documented, DrillHead, "drillbook.heads.DrillHead") == \
        "drillbook.heads.drill.DrillHead"
    # an override without a docstring: the definition that is documented, up the hierarchy
    assert name(documented, DrillHead.log_prob, "drillbook.heads.drill.DrillHead.log_prob") == \
        "drillbook.heads.base.OutputHead.log_prob"
    # a re-exported number has no name of its own: found by identity
    assert name(documented, DRILL_TOL, "drillbook.analysis.DRILL_TOL") == \
        "drillbook.analysis.rank.DRILL_TOL"
    assert name(documented, DrillHead.param_counts,
                "drillbook.heads.drill.DrillHead.param_counts") is None


def test_every_module_has_a_place_in_the_reference():
    pages = "".join(p.read_text() for p in (ROOT / "book" / "reference").glob("*.md"))
    documented = set(re.findall(r"automodule:: (drillbook[\w.]*)", pages))
    for registry in re.findall(r"drillbook-registry-modules:: (drillbook[\w.]*)", pages):
        documented |= {m for m, _ in reference.registry_modules(reference._import_object(
            registry))}  # the sections the directive generates
    modules = {m.name for m in pkgutil.walk_packages(drillbook.__path__, "drillbook.")
               if not m.name.endswith(".__main__")}  # `python -m` entry: nothing to document
    assert modules - documented == set()  # a new module needs its automodule
    assert documented - modules == set()


def test_the_heads_page_has_a_section_per_head_module_in_registry_order():
    from drillbook.heads import HEADS

    modules = reference.registry_modules(HEADS)
    assert modules[0] == ("drillbook.heads.softmax", ["softmax", "tied"])
    assert ("drillbook.heads.mixture", ["mos", "doc"]) in modules
    assert [k for _, kinds in modules for k in kinds] == list(HEADS)
    assert reference._and(["mos", "doc"]) == "mos and doc"
    assert reference._and(["a", "b", "c"]) == "a, b and c"
    rows = reference.registry_rows(HEADS, ["reads_layers"], "kind")
    assert rows[0] == ["kind", "object", "``reads_layers``"]
    assert rows[7] == ["``doc``", ":py:class:`~drillbook.heads.mixture.DOCHead`", "yes"]
