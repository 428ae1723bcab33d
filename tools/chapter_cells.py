"""Run a chapter's code cells in order, as a learner's kernel would, timing each: what a GPU
window checks of the chapters without Jupyter (a GPU machine may not have it).

    python tools/chapter_cells.py notebooks/02_tied_joint_drill.py --profile t4

Reads the chapter's ``.py`` source (jupytext's percent format: a cell starts at a line
``# %%``; markdown cells are skipped) and executes each code cell in one namespace, with
``DRILLBOOK_PROFILE`` set to ``--profile`` and figures drawn off screen (Agg). Prints one
line per cell, ``CELL i SECONDS ok`` or ``CELL i SECONDS error: ...`` (the traceback
follows), and a last line with the total; stops at the first error, or before a cell that
would start after ``--seconds``. Exits 0 when every cell ran, 1 otherwise. ``--cells N``
runs only the first N code cells (a rehearsal).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def code_cells(source: str) -> list[str]:
    """The code cells of a percent-format source, in order (the header before the first
    ``# %%`` and markdown cells left out)."""
    cells, current, kind = [], None, None
    for line in source.splitlines(keepends=True):
        if line.startswith("# %%"):
            if current is not None and kind == "code":
                cells.append("".join(current))
            kind = "markdown" if "[markdown]" in line else "code"
            current = []
        elif current is not None:
            current.append(line)
    if current is not None and kind == "code":
        cells.append("".join(current))
    return [c for c in cells if c.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", type=Path, help="notebooks/NN_name.py")
    parser.add_argument("--profile", default="small", help="DRILLBOOK_PROFILE")
    parser.add_argument("--cells", type=int, help="only the first N code cells")
    parser.add_argument("--seconds", type=float, help="start no cell after this many")
    args = parser.parse_args(argv)
    if not args.chapter.is_file():
        parser.error(f"{args.chapter}: no such chapter source (notebooks/NN_name.py)")
    os.environ["DRILLBOOK_PROFILE"] = args.profile
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, str(ROOT))
    cells = code_cells(args.chapter.read_text(encoding="utf-8"))[:args.cells]
    os.chdir(args.chapter.resolve().parent)  # where the notebook runs in the book build
    namespace = {"__name__": "__main__"}
    began = time.monotonic()
    for i, cell in enumerate(cells):
        if args.seconds is not None and time.monotonic() - began > args.seconds:
            print(f"STOPPED before cell {i} of {len(cells)}: {args.seconds:g} s spent",
                  flush=True)
            return 1
        start = time.monotonic()
        try:
            exec(compile(cell, f"{args.chapter.name}:cell{i}", "exec"), namespace)
        except BaseException as err:  # the chapter's failure is the result
            print(f"CELL {i} {time.monotonic() - start:.1f}s error: "
                  f"{type(err).__name__}: {err}"[:300], flush=True)
            traceback.print_exc()
            return 1
        print(f"CELL {i} {time.monotonic() - start:.1f}s ok", flush=True)
    print(f"{args.chapter.name}: {len(cells)} cell(s) in {time.monotonic() - began:.1f} s "
          f"(profile {args.profile})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
