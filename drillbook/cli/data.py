"""``drillbook data``: verify, download or locate the corpora."""

from __future__ import annotations

import argparse
import sys

from .common import CommandError, list_in_help

__all__ = ["add_commands"]


def _cmd_data(args: argparse.Namespace) -> int:
    from ..data import CORPORA, data_root, download, verify

    names = args.corpus or sorted(CORPORA)
    if args.force and args.action != "download":
        raise CommandError(f"--force goes with `drillbook data download`; `data {args.action}` "
                           f"does not download (drop --force)")
    if args.corpus and args.action == "where":
        raise CommandError("`drillbook data where` prints the one folder that holds every "
                           "corpus; drop the corpus names")
    if args.action == "where":
        print(data_root())
        return 0
    if args.action == "download":
        for name in names:
            for path in download(name, force=args.force):
                print(f"ok  {path}")
        return 0
    bad = 0
    for name in names:
        for check in verify(name):
            status = "ok" if check.ok else ("MISSING" if check.actual is None else "MISMATCH")
            bad += not check.ok
            print(f"{status:<8} {check.path}")
            if check.actual is not None and not check.ok:
                print(f"         expected sha256 {check.expected}\n         actual   sha256 "
                      f"{check.actual}")
    if bad:
        print(f"{bad} file(s) missing or wrong; fetch them with `drillbook data download` or "
              f"point DRILLBOOK_DATA at a folder that has them", file=sys.stderr)
    return 1 if bad else 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``data``."""
    p = sub.add_parser("data", help="verify, download or locate the corpora")
    p.add_argument("action", choices=["verify", "download", "where"])
    list_in_help(p.add_argument("corpus", nargs="*",
                                help="corpus names (default: all): %(names)s"),
                 "drillbook.data", "CORPORA")
    p.add_argument("--force", action="store_true", help="download even if present")
    p.set_defaults(func=_cmd_data)
