"""Keep the notebook pairs honest.

    python tools/notebooks.py check   every .py has its .ipynb (and back), their inputs
                                      agree cell by cell (type, source, tags), the Colab
                                      badge and install cell name the repository of
                                      _config.yml, and every nbval-checked cell has a
                                      stored output to compare with
    python tools/notebooks.py sync [NB ...]
                                      rewrite the badge/install URLs from _config.yml,
                                      update each .ipynb's inputs from its .py, then
                                      execute it in place (all notebooks, or those named)

The check compares contents, not modification times, so it means the same in a fresh
clone as on the author's machine.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHECK_TAG = "nbval-check-output"
CHECK_COMMENT = "# NBVAL_CHECK_OUTPUT"


def repository(root: Path) -> tuple[str, str]:
    """(url, branch) of the repository, from _config.yml: the one place it is kept."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    repo = config.get("repository", {})
    url, branch = repo.get("url", "").rstrip("/"), repo.get("branch", "")
    if not url.startswith("https://github.com/") or not branch:
        raise SystemExit("_config.yml: repository.url must be a https://github.com/ URL "
                         "and repository.branch must be set")
    return url, branch


def expected_links(root: Path, nb_path: Path) -> dict[str, str]:
    url, branch = repository(root)
    slug = url.removeprefix("https://github.com/")
    rel = nb_path.relative_to(root).with_suffix(".ipynb").as_posix()
    return {
        "badge": f"https://colab.research.google.com/github/{slug}/blob/{branch}/{rel}",
        "install": f"git+{url}@{branch}",
    }


_BADGE = re.compile(r"https://colab\.research\.google\.com/github/[^)\s]+\.ipynb")
_INSTALL = re.compile(r"git\+https://github\.com/[^\"'\s]+@[\w.\-/]+")


def rewrite_links(text: str, links: dict[str, str]) -> str:
    text = _BADGE.sub(links["badge"], text)
    return _INSTALL.sub(links["install"], text)


def _cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip(), tuple(sorted(c.metadata.get("tags", []))))
            for c in nb.cells]


def check_pair(root: Path, py: Path) -> list[str]:
    problems = []
    ipynb = py.with_suffix(".ipynb")
    if not ipynb.exists():
        return [f"{py.relative_to(root)}: no paired {ipynb.name}"]
    text_nb, json_nb = jupytext.read(py), nbformat.read(ipynb, as_version=4)
    a, b = _cells(text_nb), _cells(json_nb)
    if len(a) != len(b):
        problems.append(f"{py.name}: {len(a)} cells but {ipynb.name} has {len(b)}; "
                        f"run `make sync`")
    for i, (ca, cb) in enumerate(zip(a, b, strict=False)):
        if ca != cb:
            problems.append(f"{py.name}: cell {i} differs from {ipynb.name} "
                            f"({ca[0]}, tags {list(ca[2])}): run `make sync`")
            break
    links = expected_links(root, py)
    first_text = "\n".join(c.source for c in text_nb.cells[:4])
    for key, link in links.items():
        if link not in first_text:
            problems.append(f"{py.name}: the Colab {key} link must be {link} (from "
                            f"_config.yml); run `make sync`")
    if json_nb.metadata.get("kernelspec", {}).get("name") != "python3":
        problems.append(f"{ipynb.name}: kernelspec python3 missing (Colab needs it)")
    for i, cell in enumerate(json_nb.cells):
        checked = CHECK_TAG in cell.metadata.get("tags", []) or CHECK_COMMENT in cell.source
        if checked and (cell.cell_type != "code" or not cell.get("outputs")):
            problems.append(f"{ipynb.name}: cell {i} is nbval-checked but has no stored "
                            f"output; run `make sync`")
    return problems


def check(root: Path) -> list[str]:
    folder = root / "notebooks"
    problems = []
    for ipynb in sorted(folder.glob("*.ipynb")):
        if not ipynb.with_suffix(".py").exists():
            problems.append(f"{ipynb.relative_to(root)}: no paired .py:percent file")
    for py in sorted(folder.glob("*.py")):
        problems += check_pair(root, py)
    return problems


def _strip_timings(ipynb: Path) -> None:
    """Drop per-cell execution timestamps: they change on every run and bloat diffs."""
    nb = nbformat.read(ipynb, as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, ipynb)


def sync(root: Path, execute: bool = True, only: list[Path] | None = None) -> None:
    chosen = {p.resolve().with_suffix(".py") for p in only or []}
    for py in sorted((root / "notebooks").glob("*.py")):
        if chosen and py.resolve() not in chosen:
            continue
        text = py.read_text()
        new = rewrite_links(text, expected_links(root, py))
        if new != text:
            py.write_text(new)
        ipynb = py.with_suffix(".ipynb")
        cmd = [sys.executable, "-m", "jupytext", "--to", "ipynb", str(py)]
        if ipynb.exists():  # new inputs, old outputs
            cmd.insert(-1, "--update")
        print(" ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True, cwd=py.parent)
        if execute:  # then fresh outputs
            cmd = [sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                   "--inplace", "--ExecutePreprocessor.timeout=900", str(ipynb)]
            print(" ".join(cmd[2:]), flush=True)
            subprocess.run(cmd, check=True, cwd=py.parent)
            _strip_timings(ipynb)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["check", "sync"])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    parser.add_argument("--no-execute", action="store_true", help="sync inputs only")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="sync only these (.py or .ipynb); default: all")
    args = parser.parse_intermixed_args(argv)
    if args.command == "sync":
        sync(args.root, execute=not args.no_execute, only=args.notebooks)
    problems = check(args.root)
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"notebooks: {len(list((args.root / 'notebooks').glob('*.py')))} pairs agree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
