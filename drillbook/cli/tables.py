"""``drillbook reproduce`` and ``report``: train the rows of a paper table at a budget, and
turn the result files into Markdown tables and learning-curve figures."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from ..errors import MissingFileError, MissingPackageError, ResultFileError
from .common import (
    CommandError,
    add_overrides,
    check_output,
    list_in_help,
    positive_float,
    positive_int,
    seed,
    writing,
)

#: what ``reproduce --pack`` writes and ``report --results`` unpacks
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")

__all__ = ["add_commands"]


def _check_reproduce(args: argparse.Namespace) -> None:
    """Refuse what ``reproduce`` would ignore or could not write, before any row runs."""
    side_by_side = (args.parallel or args.deadline_minutes or args.devices
                    or args.launcher != "local")
    _check_continue_from(args)
    if args.dry_run:
        from ..experiments.tables import PLANS

        on_cpu = args.dry_run == "cpu"
        ignored = {"--rows": args.rows, "--budget-minutes": args.budget_minutes,
                   "--out": args.out != "results" and args.out,
                   "--runs": not on_cpu and args.runs != "runs" and args.runs,
                   "--set": args.set,
                   "--max-eval-tokens": args.max_eval_tokens, "--device": args.device,
                   "--devices": args.devices, "--quiet": args.quiet,
                   "--keep-going": args.keep_going, "--reserve-minutes": args.reserve_minutes,
                   "--pack": args.pack, "--launcher": args.launcher != "local",
                   "--cluster": args.cluster, "--executor": args.executor,
                   "--seed": args.table in PLANS and args.seed,
                   "--together": args.together}
        given = [flag for flag, value in ignored.items() if value]
        if given:
            raise CommandError(f"--dry-run trains nothing and reads only --parallel, "
                               f"--deadline-minutes, --sharing, --continue-from, (for a "
                               f"table that is no plan) --seed and (on the CPU) --runs; "
                               f"drop {', '.join(given)}")
        return
    if args.sharing:
        raise CommandError("--sharing says how --dry-run predicts the rows share the GPU; "
                           "rows that train share it the way --together says: add --dry-run "
                           "or drop --sharing")
    if args.reserve_minutes and not side_by_side:
        raise CommandError("--reserve-minutes applies to rows run side by side: add "
                           "--deadline-minutes or --parallel (or drop it)")
    if (args.cluster or args.executor) and args.launcher != "submitit":
        raise CommandError("--cluster and --executor are for --launcher submitit")
    check_output(args.out, "--out", folder=True)
    check_output(args.runs, "--runs", folder=True)
    if args.pack:
        if not args.pack.endswith(ARCHIVE_SUFFIXES):
            raise CommandError(f"--pack {args.pack}: name it *.tar.gz, the archive `drillbook "
                               f"report --results` reads")
        check_output(args.pack, "--pack", folder=False)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    _check_reproduce(args)
    if args.dry_run:
        return _dry_run(args)
    if _continuing_plan(args.table) is not None:
        paths = _reproduce_side_by_side(args, plan=_continuing_plan(args.table))
    elif (args.parallel or args.deadline_minutes or args.devices or args.together
          or args.launcher != "local"):
        paths = _reproduce_side_by_side(args)
    else:
        paths = _reproduce_in_process(args)
    if paths is None:  # a process of several under torchrun: rank 0 reports
        return 0
    for path in paths:
        doc = json.loads(Path(path).read_text())
        metrics = ", ".join(f"{k} {v:.2f}" for k, v in doc["metrics"].items()
                            if isinstance(v, float))
        what = doc.get("error") or metrics or "no finished epoch yet"
        print(f"{doc['row']}: {doc['status']} after {doc['epochs_done']} epoch(s); "
              f"{what} -> {path}")
    if args.pack:
        from ..experiments.results import pack_results

        print(f"wrote {pack_results(args.out, args.pack, tables=[args.table])}")
    return 0


def _reproduce_in_process(args: argparse.Namespace) -> list[Path] | None:
    from ..experiments import reproduce
    from ..train.distributed import distributed

    with distributed() as rank:  # under torchrun: this is one process of several
        paths = reproduce(args.table, rows=args.rows, budget_minutes=args.budget_minutes,
                          out=args.out, runs=args.runs, device=args.device,
                          overrides=args.set, max_eval_tokens=args.max_eval_tokens,
                          progress=False if args.quiet else None, seed=args.seed,
                          keep_going=args.keep_going)
    return None if rank else paths


def _continuing_plan(name: str):
    """The plan ``name`` if it trains its rows to their plateau (it then continues from
    window to window), else None."""
    from ..experiments.tables import PLANS, to_plateau

    plan = PLANS.get(name)
    return plan if plan is not None and to_plateau(plan) else None


def _reproduce_side_by_side(args: argparse.Namespace, plan=None) -> list[Path]:
    from ..experiments.run.launchers import LAUNCHERS
    from ..experiments.run.scheduler import run_table
    from ..train.distributed import rank_and_world_size
    from ..validation import check_choice

    check_choice(args.launcher, LAUNCHERS, "--launcher")
    if rank_and_world_size()[1] > 1 or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise CommandError("--parallel, --devices, --deadline-minutes and --launcher start "
                           "their own workers; run them without torchrun")
    if args.device and args.devices:
        raise CommandError("give --device or --devices, not both")
    executor, devices, parallel = _executor(args)
    common = dict(out=args.out, runs=args.runs, devices=devices, overrides=args.set or [],
                  reserve_minutes=args.reserve_minutes, max_eval_tokens=args.max_eval_tokens,
                  quiet=args.quiet)
    if plan is not None:
        from ..experiments.run.plan_runner import run_plan

        if args.rows:
            raise CommandError(f"{plan.name} is a plan that continues from window to window: "
                               f"it runs what is left of its rows; drop --rows")
        return run_plan(plan, executor, deadline_minutes=args.deadline_minutes,
                        parallel=args.parallel, seeds=args.seed,
                        results=args.continue_from, **common)
    return run_table(args.table, executor, rows=args.rows, seeds=args.seed, parallel=parallel,
                     deadline_minutes=args.deadline_minutes,
                     budget_minutes=args.budget_minutes, **common)


def _executor(args: argparse.Namespace) -> tuple[Any, list, int | None]:
    """What runs the rows for ``--launcher``, ``--together`` and the devices: the executor,
    the devices the rows are spread over, and how many run at once (None: a cluster's queue
    decides)."""
    from ..experiments.run.launchers import SubmititLauncher, executor_parameters
    from ..runtime import resolve_device
    from ..train.ways import Way

    if args.launcher == "submitit":
        # the jobs run elsewhere: each device is resolved by its worker, where it runs
        devices = args.devices or [args.device]
        launcher = SubmititLauncher(Path(args.runs) / "submitit", cluster=args.cluster,
                                    parameters=executor_parameters(args.executor))
        _together(args.together, devices, launcher=args.launcher)
        return launcher, devices, args.parallel  # None: every job at once, the queue deciding
    # (--cluster and --executor without submitit: refused by _check_reproduce)
    devices = [str(resolve_device(d)) for d in (args.devices or [args.device or None])]
    way = _together(args.together, devices, launcher=args.launcher)
    if way is Way.IN_PROCESS:
        from ..experiments.run.interleaved import Interleaved

        return Interleaved(devices[0], quiet=args.quiet), devices, args.parallel or len(devices)
    from ..experiments.run.launchers import ProcessLauncher

    return ProcessLauncher(way=way), devices, args.parallel or len(devices)


def _together(together: str | None, devices: list, *, launcher: str) -> Any:
    """The way the rows run for ``--together`` (:class:`~drillbook.train.ways.Way`):
    ``processes`` (a process per row), ``mps`` (processes served by an MPS daemon the
    caller started, as the window script's concurrency part does: its pipe folder in
    ``CUDA_MPS_PIPE_DIRECTORY``), ``in-process`` (the rows in this process, each row's
    steps on a CUDA stream of its own, graphed where its config allows; eager in turn on a
    CPU). Without ``--together``: on one CUDA device of this machine, the way the newest
    committed window measured best (:func:`~drillbook.experiments.run.executors.
    default_way`), else processes."""
    from ..train.ways import Way
    from ..validation import check_choice

    cuda = bool(devices) and all(str(d).startswith("cuda") for d in devices)
    if together is None:
        if launcher == "local" and cuda and len(devices) == 1:
            from ..experiments.run.executors import default_way

            together = default_way()
        else:
            together = Way.PROCESS.option
    way = Way.of_option(check_choice(together, Way.options(), "--together"))
    if way is Way.IN_PROCESS:
        if launcher != "local" or len(devices) != 1:
            raise CommandError("--together in-process trains the rows in this process, on "
                               "one device: give one --device (or --devices DEVICE) and "
                               "--launcher local, or use --together processes")
    elif way is Way.PROCESS_MPS:
        if launcher != "local" or not cuda:
            raise CommandError("--together mps is for processes on this machine's CUDA "
                               "devices (--launcher local, --devices cuda...)")
        if not os.environ.get("CUDA_MPS_PIPE_DIRECTORY"):
            raise CommandError("--together mps needs an MPS daemon started as this user, "
                               "its pipe folder in CUDA_MPS_PIPE_DIRECTORY (the window "
                               "script's concurrency part starts one); or use --together "
                               "processes")
    return way


def _check_continue_from(args: argparse.Namespace) -> None:
    """Refuse a ``--continue-from`` that names no results folder, or a table that is not
    a plan trained to its plateau (the training and the dry run read it alike)."""
    if args.continue_from is None:
        return
    if _continuing_plan(args.table) is None:
        raise CommandError(f"--continue-from is for a plan trained to its plateau, which "
                           f"continues from window to window; {args.table} is not one: "
                           f"drop --continue-from")
    if not Path(args.continue_from).is_dir():
        raise CommandError(f"--continue-from {args.continue_from}: no such folder; give "
                           f"the results folder that holds gpu/<window>-<precision>/ "
                           f"(or drop it: the book's committed windows)")


def _dry_run(args: argparse.Namespace) -> int:
    from ..experiments.run.cost_model import fit_models
    from ..experiments.run.dry_run import format_predictions
    from ..experiments.run.plans import predict
    from ..experiments.tables import PLANS, Plan, to_plateau

    plan = PLANS.get(args.table) or Plan(args.table, args.table, seeds=tuple(args.seed or ()))
    parallel = args.parallel or plan.parallel
    minutes = args.deadline_minutes or plan.deadline_minutes
    model = fit_models()
    skip = _final_rows(plan, args) if to_plateau(plan) else set()
    # on the CPU, rows with a checkpoint in --runs resume there: count what is left
    runs = args.runs if args.dry_run == "cpu" and to_plateau(plan) else None
    predictions = predict(plan, device_class=args.dry_run, deadline_minutes=minutes,
                          parallel=parallel, sharing=args.sharing, model=model, skip=skip,
                          results=args.continue_from, runs=runs)
    print(format_predictions(plan, predictions, device_class=args.dry_run,
                             deadline_minutes=minutes, parallel=parallel,
                             sharing=args.sharing, results=args.continue_from, model=model))
    return 0


def _final_rows(plan, args: argparse.Namespace) -> set[tuple[str, int]]:
    """``(row, seed)`` of a continuing plan's rows that are final already (in the committed
    results, or ``--continue-from``'s): what the dry run leaves out."""
    from ..experiments.run.jobs import table_jobs
    from ..experiments.run.plan_runner import final_jobs

    jobs = table_jobs(plan.table, seeds=plan.seeds or None)
    return final_jobs(jobs, "fp32", results=args.continue_from)


def _results_folder(results: Path, stack: contextlib.ExitStack) -> Path:
    """The results folder ``report --results`` names: the folder itself, or a ``--pack``
    archive unpacked into a temporary folder that ``stack`` removes."""
    if results.is_file():
        if results.name.endswith(ARCHIVE_SUFFIXES):  # a --pack archive
            import tempfile

            from ..experiments.results import unpack_results

            unpacked = stack.enter_context(tempfile.TemporaryDirectory(
                prefix="drillbook-results-"))
            return unpack_results(results, unpacked)
        if results.suffix == ".json":
            raise CommandError(f"--results {results} is one result file; give the folder "
                               f"that holds <table>/<row>.json: --results "
                               f"{results.parent.parent}")
        raise CommandError(f"--results {results} is a file, neither a results folder nor an "
                           f"archive of one (*.tar.gz, from `drillbook reproduce --pack`)")
    if not results.is_dir():
        raise MissingFileError(f"--results {results}: no such folder; write result files "
                               f"with `drillbook reproduce TABLE --out {results}`, or pass "
                               f"--results FOLDER where they are")
    return results


def _matplotlib_cache() -> None:
    """Give matplotlib a temporary cache folder (removed at exit) where its own, under the
    home folder, cannot be made: matplotlib would make one too, with two lines of warning
    on every call."""
    import atexit
    import shutil
    import tempfile

    if os.environ.get("MPLCONFIGDIR"):
        return
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    try:
        (config / "matplotlib").mkdir(parents=True, exist_ok=True)
        if os.access(config / "matplotlib", os.W_OK):
            return
    except OSError:
        pass
    folder = tempfile.mkdtemp(prefix="drillbook-matplotlib-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ["MPLCONFIGDIR"] = folder


def _pyplot():
    """matplotlib's pyplot on the Agg backend, or the MissingPackageError that says which
    extra brings it."""
    _matplotlib_cache()
    try:
        import matplotlib
    except ImportError:
        raise MissingPackageError("--figures draws with matplotlib, which is not installed: "
                                  "`pip install 'drillbook[notebooks]'` (or matplotlib)"
                                  ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cmd_report(args: argparse.Namespace) -> int:
    from ..experiments import load_results, render_report
    from ..experiments.results.seeds import SEED_FOLDER

    if args.out:
        check_output(args.out, "--out", folder=False)
    plt = None
    if args.figures:  # what --figures needs is checked before the report is computed
        check_output(args.figures, "--figures", folder=True)
        plt = _pyplot()
    with contextlib.ExitStack() as stack:
        folder = _results_folder(Path(args.results), stack)
        if not load_results(folder) and not any(  # also checks every file, naming a bad one
                folder.glob(f"*/{SEED_FOLDER}*/*.json")):
            raise ResultFileError(f"no result files under {folder} (expected "
                                  f"{folder}/<table>/<row>.json); run `drillbook reproduce "
                                  f"TABLE --out {folder}` first")
        text = render_report(folder)
        if args.out:
            from ..atomic import write_atomic

            with writing(args.out, "--out"):
                write_atomic(args.out, text + "\n")
            print(f"wrote {args.out}")
        else:
            print(text)
        if plt is not None:
            for path in _curve_figures(folder, Path(args.figures), plt):
                print(f"wrote {path}")
    return 0


def _curve_figures(results: Path, folder: Path, plt) -> list[Path]:
    """One PNG of validation curves per table that has result files."""
    from ..experiments import TABLES, load_results, plot_curves, table_rows
    from ..experiments.results import result_task

    written = []
    docs = {d["table"]: d for d in load_results(results)}
    for table in sorted(set(docs) & set(TABLES)):
        rows = table_rows(table, results)
        key = result_task(docs[table]).metric_key
        ax = plot_curves(rows, metric=f"val_{key}", title=table)
        path = folder / f"{table}.png"
        ax.figure.tight_layout()
        try:
            with writing(path, "--figures"):
                folder.mkdir(parents=True, exist_ok=True)
                ax.figure.savefig(path, dpi=120)
        finally:
            plt.close(ax.figure)
        written.append(path)
    return written


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``reproduce`` and ``report``."""
    p = sub.add_parser("reproduce", help="train the rows of a paper table at a budget",
                       description="Train (or resume) each row of a paper table into "
                                   "RUNS/<table>/<row>/ and write OUT/<table>/<row>.json "
                                   "with config, seed, commit, device, time and metrics.")
    list_in_help(p.add_argument("table", help="a paper table: %(names)s"),
                 "drillbook.experiments", "TABLES")
    p.add_argument("--rows", nargs="+", help="only these rows")
    p.add_argument("--budget-minutes", type=positive_float,
                   help="minutes per row for this call (rerun to continue)")
    p.add_argument("--out", default="results", help="results folder (default results)")
    p.add_argument("--runs", default="runs", help="run folders (default runs; not committed)")
    add_overrides(p, "overrides for every row")
    p.add_argument("--max-eval-tokens", type=positive_int, help="cap the test evaluation")
    p.add_argument("--seed", type=seed, nargs="+",
                   help="train with this seed (or each of these seeds); a seed other than "
                        "the config's writes OUT/<table>/seed-<N>/<row>.json (the spread "
                        "across seeds)")
    p.add_argument("--device")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--keep-going", action="store_true",
                   help="a row that fails or runs out of memory gets a result file that says "
                        "so, and the next row runs")
    g = p.add_argument_group(
        "side by side, within a deadline",
        "Rows run as worker processes, up to --parallel at once, spread over --devices; "
        "each stops training in time for its evaluation and result file, and the call "
        "ends within --deadline-minutes whatever happens (a row that fails, runs out of "
        "memory or is stopped at the deadline gets a result file that says so).")
    g.add_argument("--parallel", type=positive_int, metavar="N",
                   help="rows at once (default: one per device)")
    g.add_argument("--devices", nargs="+", metavar="DEVICE",
                   help="devices the rows are spread over in turn, e.g. cuda:0 cuda:1")
    g.add_argument("--deadline-minutes", type=positive_float, metavar="M",
                   help="the whole call ends within M minutes")
    g.add_argument("--reserve-minutes", type=positive_float, metavar="M",
                   help="what each row keeps for its evaluation and result file (default: "
                        "a fifth of its share, 10 s to 3 min)")
    g.add_argument("--together", metavar="WAY",
                   help="how the rows at once share a device: processes (a process per "
                        "row), mps (processes under an MPS daemon started beforehand, its "
                        "pipe folder in CUDA_MPS_PIPE_DIRECTORY), in-process (this "
                        "process, each row's steps on its own CUDA stream, graphed where "
                        "its config allows; eager in turn on a CPU). Default: on one CUDA "
                        "device, the way the newest committed GPU window measured best, "
                        "else processes; each result file records it (execution)")
    g.add_argument("--continue-from", metavar="DIR",
                   help="a plan trained to its plateau (gpu-small) continues from window to "
                        "window: rows final in DIR/gpu/<window>-<precision>/ (default: the "
                        "book's committed windows) or in --out are skipped, the rest start "
                        "largest predicted time first while they fit the deadline")
    g.add_argument("--pack", metavar="FILE.tar.gz",
                   help="also write every result file of the table into one archive (at "
                        "most 16 MiB; unpack it and `drillbook report --results DIR`)")
    list_in_help(g.add_argument(
        "--dry-run", nargs="?", const="h200", metavar="CLASS",
        help="train nothing: print each row's predicted seconds per epoch, epochs reached "
             "by the deadline and peak memory on a device class (%(names)s; default h200), "
             "and the model's assumptions; with --continue-from, only the rows not final "
             "there; on the CPU, a row with a checkpoint in --runs counts only the epochs "
             "after it"), "drillbook.experiments.run.plans", "DEVICE_CLASSES")
    list_in_help(g.add_argument(
        "--sharing", metavar="NAME",
        help="with --dry-run: how the rows share the GPU (%(names)s; default: the plan's)"),
        "drillbook.experiments.run.plans", "SHARINGS")
    _add_cluster_options(p)
    p.set_defaults(func=_cmd_reproduce,
                   interrupted="; run the same command again to continue each row from its "
                               "last checkpoint")

    _add_report(sub)


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    """``reproduce``'s options for submitting its rows through submitit."""
    g = p.add_argument_group(
        "on a cluster",
        "--launcher submitit submits each row as a job through submitit (pip install "
        "'drillbook[cluster]'): to Slurm's queue where there is one, or as processes on "
        "this machine (--cluster local). Console lines, the deadline, --pack and the "
        "result files are as above; a job that reaches its time limit is requeued and "
        "resumes from its last checkpoint. Leave --device out to train on each node's default "
        "device.")
    g.add_argument("--launcher", default="local", metavar="NAME",
                   help="where the workers run: local (the default: processes here) or "
                        "submitit")
    g.add_argument("--cluster", metavar="NAME",
                   help="submitit's engine: slurm or local (default: Slurm where sbatch "
                        "exists, else local)")
    g.add_argument("--executor", nargs="+", metavar="KEY=VALUE",
                   help="submitit's executor parameters, e.g. timeout_min=600 "
                        "gpus_per_node=1 cpus_per_task=8 slurm_partition=gpu (default "
                        "timeout: each job's budget and reserve, plus a minute)")


def _add_report(sub: argparse._SubParsersAction) -> None:
    """Add ``report``."""
    p = sub.add_parser("report", help="Markdown tables from the result files")
    p.add_argument("--results", default="results")
    p.add_argument("--out", help="write here instead of printing (e.g. results/REPORT.md)")
    p.add_argument("--figures", help="also write one learning-curve PNG per table here")
    p.set_defaults(func=_cmd_report)
