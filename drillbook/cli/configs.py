"""``drillbook configs``, ``params``, ``heads`` and ``info``: what the package holds and
where it runs, without training anything."""

from __future__ import annotations

import argparse
import sys

from ..configs import DUMP_FORMATS
from .common import (
    CommandError,
    add_config_source,
    add_overrides,
    print_json,
    resolve_config,
)

__all__ = ["add_commands"]


def _cmd_configs(args: argparse.Namespace) -> int:
    from ..configs import apply_overrides, dump_config, get_config, list_configs

    if args.show is None:
        given = [flag for flag, value in (("--set", args.set), ("--format", args.format))
                 if value]
        if given:
            raise CommandError(f"{' and '.join(given)} {'go' if len(given) > 1 else 'goes'} "
                               f"with --show NAME: add it, e.g. "
                               f"`drillbook configs --show tutorial/ptb-tied {given[0]} ...`")
        rows = [(name, get_config(name).description) for name in list_configs()]
        if args.json:
            print_json(dict(rows))
            return 0
        width = max(len(name) for name, _ in rows)
        for name, description in rows:
            print(f"{name:<{width}}  {description}")
        return 0
    from ..models import check_buildable

    config = apply_overrides(get_config(args.show), args.set or [])
    check_buildable(config)  # what train would refuse about the model, refused here too
    print(dump_config(config, args.format or "json"))
    return 0


def _cmd_params(args: argparse.Namespace) -> int:
    from ..experiments import paper_params
    from ..models import param_report
    from ..runtime import BYTES_TO_TRAIN_A_PARAMETER, available_memory, default_device

    config = resolve_config(args)
    counts = param_report(config)  # (which refuses a config of another task)
    report = {**counts, "paper": paper_params(config)}
    if args.json:
        print_json(report)
        return 0
    print(f"{report['config']} (V = {report['vocab_size']:,})")
    print(f"  total parameters           {report['total']:>12,}  "
          f"({report['total_m_as_printed_in_drill']}M as the DRILL paper prints it)")
    print(f"  output layer, dedicated    {report['output_layer_dedicated']:>12,}")
    print(f"  output layer, shared       {report['output_layer_shared']:>12,}  "
          f"(the input embedding)")
    for key, millions in report["paper"].items():
        print(f"  paper                      {millions:>11}M  ({key})")
    need = BYTES_TO_TRAIN_A_PARAMETER * report["total"]
    device = getattr(args, "device", None) or default_device()
    have = available_memory(device)
    print(f"  to train, at least         {_memory(need):>15}  (weights, gradients, "
          f"optimiser state; activations apart)")
    if have is not None and need > have:
        print(f"  more than the {have / 2**30:,.1f} GiB free on "
              f"{device}: `drillbook train` will refuse it here")
    return 0


def _memory(n: float) -> str:
    """``n`` bytes in the largest unit that leaves at least 1 of it, never "0.0 GiB"."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} bytes"


def _cmd_heads(args: argparse.Namespace) -> int:
    import textwrap

    from ..heads import HEADS

    for kind, cls in HEADS.items():  # each head's first paragraph, whole, wrapped
        first = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        lines = textwrap.wrap(first, width=78) or [""]
        print(f"{kind:>10}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':>10}  {line}")
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    import torch

    from .. import __version__
    from ..data import data_root, data_root_source
    from ..runtime import default_device, resolve_profile

    dev = default_device()
    info = {
        "drillbook": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(dev),
        "profile": resolve_profile(dev).name,
        "data_root": str(data_root()),
        "data_root_from": data_root_source(),
    }
    if args.json:
        print_json(info)
    else:
        for k, v in info.items():
            print(f"{k:>15}: {v}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``configs``, ``params``, ``heads`` and ``info`` to the ``drillbook`` parser."""
    p = sub.add_parser(
        "configs", help="list the named configs, or print one as a config file",
        description="List the named configs of both tasks (language models and "
                    "translation). With --show NAME, print that config resolved (--set "
                    "overrides applied) as a file `drillbook train --config FILE` reads "
                    "back: `drillbook configs --show tutorial/ptb-tied > run.json`.")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--show", metavar="NAME", help="print this config instead of the list")
    what.add_argument("--json", action="store_true", help="the list, machine-readable")
    add_overrides(p, "with --show: override config values")
    p.add_argument("--format", choices=DUMP_FORMATS,
                   help="with --show: one of %(choices)s (default json; yaml needs "
                        "PyYAML)")
    p.set_defaults(func=_cmd_configs)

    p = sub.add_parser("params", help="parameter counts of a config's model",
                       description="Total and output-layer parameter counts of a "
                                   "language-model config's model (built without allocating "
                                   "memory).")
    add_config_source(p)
    add_overrides(p, "override config values")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_params)

    p = sub.add_parser("heads", help="list the output heads")
    p.set_defaults(func=_cmd_heads)

    p = sub.add_parser("info", help="print versions, device, profile and data folder")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_info)
