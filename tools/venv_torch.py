"""Lend this interpreter's torch to a fresh virtual environment, linked, not installed.

    python tools/venv_torch.py VENV LINKS

``make package`` installs the built wheel into a fresh environment that holds only torch,
so that the wheel's own requirements are what pip installs there. Installing torch a second
time (after the development environment's) unpacks about a gigabyte; instead this links
torch and the distributions it requires, as this interpreter has them, into the folder
LINKS, and puts LINKS on VENV's path (a ``.pth`` file). LINKS lies outside VENV: pip
treats what it finds there as installed and never changes it (it uninstalls only inside
the environment), so the environment the links point into is left as it is.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(name: str) -> list[metadata.Distribution]:
    """``name``'s distribution and every one it requires here (markers evaluated for this
    interpreter, no extras), each once."""
    found: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = canonical(todo.pop())
        if key in found:
            continue
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue  # not needed on this platform, or not installed: pip decides there
        found[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(found.values())


def top_level(dist: metadata.Distribution) -> set[Path]:
    """The entries of site-packages that ``dist`` installed (packages, modules, its
    .dist-info folder), as paths: what to link."""
    entries = set()
    for file in dist.files or []:
        first = file.parts[0]
        if first in ("..", "__pycache__") or first.endswith(".pth"):
            continue
        entries.add(Path(dist.locate_file(first)))
    return entries


def lend(venv: Path, links: Path, name: str = "torch") -> list[str]:
    """Link ``name`` and what it requires into ``links`` and put ``links`` on ``venv``'s
    path; returns the distributions linked."""
    links.mkdir(parents=True, exist_ok=True)
    dists = closure(name)
    if not dists:
        raise SystemExit(f"{name} is not installed in {sys.prefix}: install it there first")
    for dist in dists:
        for entry in top_level(dist):
            link = links / entry.name
            if not link.exists():
                link.symlink_to(entry, target_is_directory=entry.is_dir())
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / f"lent-{name}.pth").write_text(f"{links.resolve()}\n")
    return sorted(d.metadata["Name"] for d in dists)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("venv", type=Path, help="the fresh virtual environment")
    parser.add_argument("links", type=Path, help="a folder outside it for the links")
    args = parser.parse_args(argv)
    if args.links.resolve().is_relative_to(args.venv.resolve()):
        parser.error("LINKS must lie outside VENV (pip would then treat them as its own)")
    print("lent:", ", ".join(lend(args.venv, args.links)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
