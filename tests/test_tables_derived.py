"""The tables as the registry derives them: every table's settings, plans and rows, in
order, are those recorded in ``tests/data/tables.jsonl`` (one JSON object a line: a
table's settings and plans, then each of its rows), so that a change to how the tables are
built is seen to change none of them. A table changed on purpose is recorded again with
``python tests/test_tables_derived.py > tests/data/tables.jsonl``, and the diff read."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from drillbook.experiments import TABLES

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


if __name__ == "__main__":
    print("\n".join(listing()))
