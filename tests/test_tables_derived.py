"""The tables as the registry derives them: every table's settings, plans and rows, in
order, are those recorded in ``tests/data/tables.jsonl`` (one JSON object a line: a
table's settings and plans, then each of its rows), so that a change to how the tables are
built is seen to change none of them. A table changed on purpose is recorded again with
``python tests/test_tables_derived.py > tests/data/tables.jsonl``, and the diff read."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from drillbook.experiments import TABLES, Table
from drillbook.heads import TiedHead, register_head, unregister_head

LISTING = Path(__file__).parent / "data" / "tables.jsonl"


def listing() -> list[str]:
    """Every table of :data:`TABLES` as lines of JSON: the table's settings and plans, then
    its rows (name, config, overrides, paper keys, baseline), in the tables' order."""
    lines = []
    for name, table in TABLES.items():
        settings = dataclasses.asdict(table)
        rows = settings.pop("rows")
        lines.append(json.dumps({"table": name, **settings}))
        lines += [json.dumps({"table": name, **row}) for row in rows]
    return lines


def test_every_table_lists_the_rows_recorded():
    assert listing() == LISTING.read_text().splitlines()  # pytest shows the first change


class _AnotherTied(TiedHead):
    """A second tied head under a kind of its own (what the registry holds is the point
    here, not the head)."""

    kind = "another-tied"


def _names(table: str) -> list[str]:
    return [r.name for r in TABLES[table]]


def test_a_table_set_is_as_set_and_derived_again_once_set_back():
    declared = TABLES["cpu-scale"]
    names = _names("cpu-scale")
    TABLES["cpu-scale"] = dataclasses.replace(declared, rows=declared.rows[:2])
    register_head(_AnotherTied)
    try:
        assert _names("cpu-scale") == names[:2]  # as set, whatever the registry holds
        TABLES["cpu-scale"] = declared  # set back: derived from the registry again
        assert _names("cpu-scale") == [*names, "another-tied"]
        assert _names("gpu-small")[-1] == _names("laptop-lm")[-3] == "another-tied"
    finally:
        unregister_head("another-tied")
    assert _names("cpu-scale") == names and TABLES["cpu-scale"] == declared


def test_tables_are_added_deleted_and_restored_by_name():
    order, tutorial = list(TABLES), TABLES["tutorial"]
    TABLES["tiny"] = Table("tiny", tutorial.rows[:1])
    del TABLES["tutorial"]
    try:
        assert "tutorial" not in TABLES and list(TABLES) == [
            *(n for n in order if n != "tutorial"), "tiny"]
        with pytest.raises(KeyError):
            TABLES["tutorial"]
        with pytest.raises(ValueError, match=r"TABLES\['x'\] must be a Table named 'x'"):
            TABLES["x"] = Table("tiny", ())
    finally:
        TABLES["tutorial"] = tutorial
        del TABLES["tiny"]
    assert list(TABLES) == order and len(TABLES) == len(order)


if __name__ == "__main__":
    print("\n".join(listing()))
