"""The ``drillbook`` command.

``drillbook --help`` lists the commands and ``drillbook COMMAND --help`` describes each
(the book's command-line reference shows every one of these texts, generated from
:func:`build_parser`). ``--set KEY=VALUE`` may be given several times; the values add up
and a later value of the same key wins.

Exit status: 0 done; 1 ``data verify`` found a missing or altered file; 2 bad input or
environment, reported in one line ``drillbook: error: ...`` (set ``DRILLBOOK_DEBUG=1`` for
the traceback instead), or a usage error; 130 interrupted (Ctrl-C); 141 the reader of the
output went away (``drillbook configs --json | head -1``): output stops quietly with the
status a shell gives a program that a closed pipe stopped (128 + SIGPIPE). Only the
package's own errors (:mod:`drillbook.errors`) are reported in one line: any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import (
    DrillbookError,
    MissingFileError,
    MissingPackageError,
    ResultFileError,
)
from .metrics import perplexity

__all__ = ["DEBUG_ENV", "EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED", "EXIT_USER_ERROR",
           "CommandError", "build_parser", "main"]

#: Set to anything but ``""`` or ``"0"`` to see a user error's traceback.
DEBUG_ENV = "DRILLBOOK_DEBUG"
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE


class CommandError(DrillbookError):
    """A command-line combination that cannot work: ``drillbook: error: ...``, exit 2."""


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2))


def _emit(args: argparse.Namespace, result: dict, text: str) -> int:
    """Print ``result`` as JSON with ``--json``, else the human-readable ``text``."""
    if args.json:
        _print_json(result)
    else:
        print(text)
    return 0


# ------------------------------------------------------------------ info, heads
def _cmd_info(args: argparse.Namespace) -> int:
    import torch

    from . import __version__
    from .data import DATA_ENV, data_root
    from .runtime import default_device, resolve_profile

    dev = default_device()
    info = {
        "drillbook": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(dev),
        "profile": resolve_profile(dev).name,
        "data_root": str(data_root()),
        "data_root_from": DATA_ENV if DATA_ENV in os.environ else "cache dir",
    }
    if args.json:
        _print_json(info)
    else:
        for k, v in info.items():
            print(f"{k:>15}: {v}")
    return 0


def _cmd_heads(args: argparse.Namespace) -> int:
    from .heads import HEADS

    for kind, cls in HEADS.items():
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        print(f"{kind:>10}  {doc}")
    return 0


# ------------------------------------------------------------------ configs, params
def _resolve_config(name: str, overrides: list[str] | None):
    """A language-model or translation (``multi30k/...``) config with overrides."""
    from .configs import apply_overrides, get_config

    if name.startswith("multi30k/"):
        from .nmt.config import get_nmt_config

        return apply_overrides(get_nmt_config(name), overrides or [])
    return apply_overrides(get_config(name), overrides or [])


def _is_nmt_run(run_dir: Path) -> bool:
    """Whether a run folder holds a translation run (its ``config.json`` is read with
    :func:`drillbook.train.runs.read_run_dict`, which names a missing or garbled file)."""
    from .train.runs import read_run_dict

    return str(read_run_dict(run_dir).get("name", "")).startswith("multi30k/")


def _language_model_run(run_dir: Path, command: str) -> None:
    """A CommandError if ``run_dir`` holds a translation run (``command`` reads LM runs)."""
    if _is_nmt_run(run_dir):
        raise CommandError(f"{command} works on language-model runs; {run_dir} is a "
                           f"translation run (use `drillbook eval` or `drillbook translate`)")


def _cmd_configs(args: argparse.Namespace) -> int:
    from .configs import get_config, list_configs
    from .nmt.config import get_nmt_config, list_nmt_configs

    rows = [(n, get_config(n).description) for n in list_configs()]
    rows += [(n, get_nmt_config(n).description) for n in list_nmt_configs()]
    if args.json:
        _print_json(dict(rows))
        return 0
    width = max(len(n) for n, _ in rows)
    for name, desc in rows:
        print(f"{name:<{width}}  {desc}")
    return 0


def param_report(config, vocab_size: int | None = None) -> dict:
    """Parameter counts of a config's model (built on the meta device: no memory), and
    ``paper``: record key -> millions as printed, for every paper row of this model."""
    import torch

    from .configs import paper_millions
    from .data import corpus_spec
    from .experiments.reproduce import records_for
    from .models import build_model
    from .papers import paper_number

    vocab_size = vocab_size or corpus_spec(config.data.corpus).vocab_size
    with torch.device("meta"):
        model = build_model(config, vocab_size)
    total = sum(p.numel() for p in model.parameters())  # shared tensors counted once
    head = model.head.param_counts()
    return {
        "config": config.name, "vocab_size": vocab_size, "total": total,
        "total_m_as_printed_in_drill": paper_millions(total),
        "encoder": total - head.dedicated, "output_layer_dedicated": head.dedicated,
        "output_layer_shared": head.shared,
        "paper": {k: paper_number(k)["params_m"] for k in records_for(config)
                  if "params_m" in paper_number(k).values},
    }


def _cmd_params(args: argparse.Namespace) -> int:
    config = _resolve_config(args.config, args.set)
    if config.name.startswith("multi30k/"):
        raise CommandError(f"params counts language-model configs; {config.name} is a "
                           f"translation config, whose vocabulary sizes come from its "
                           f"training data")
    report = param_report(config)
    if args.json:
        _print_json(report)
        return 0
    print(f"{report['config']} (V = {report['vocab_size']:,})")
    print(f"  total parameters           {report['total']:>12,}  "
          f"({report['total_m_as_printed_in_drill']}M as the DRILL paper prints it)")
    print(f"  output layer, dedicated    {report['output_layer_dedicated']:>12,}")
    print(f"  output layer, shared       {report['output_layer_shared']:>12,}  "
          f"(the input embedding)")
    for key, millions in report["paper"].items():
        print(f"  paper                      {millions:>11}M  ({key})")
    return 0


# ------------------------------------------------------------------ training
def _cmd_train(args: argparse.Namespace) -> int:
    config = _resolve_config(args.config, args.set)
    out = Path(args.out or Path("runs") / config.name.replace("/", "_"))
    if config.name.startswith("multi30k/"):
        from .nmt.train import NMTTrainer

        trainer = NMTTrainer(config, out, device=args.device, resume=args.resume,
                             progress=not args.quiet)
        record = trainer.fit(max_epochs=args.max_epochs, max_minutes=args.max_minutes)
        print(f"{config.name}: stopped after epoch {trainer.epoch - 1}; best valid BLEU "
              f"{trainer.best_bleu:.2f}; last record {json.dumps(record)}; run folder {out}")
        return 0
    from .train import Trainer

    trainer = Trainer(config, out, device=args.device, resume=args.resume,
                      progress=not args.quiet)
    status = trainer.fit(max_epochs=args.max_epochs, max_minutes=args.max_minutes)
    print(f"{config.name}: stopped ({status.reason}) after {status.epoch} epoch(s); "
          f"best valid ppl {perplexity(status.best_val_loss):.2f}; run folder {out}")
    return 0


def _cmd_finetune(args: argparse.Namespace) -> int:
    from .train import finetune

    _language_model_run(args.run_dir, "finetune")
    status, out = finetune(args.run_dir, out=args.out, device=args.device, resume=args.resume,
                           max_epochs=args.max_epochs, max_minutes=args.max_minutes,
                           progress=not args.quiet, lr=args.lr)
    print(f"finetune: stopped ({status.reason}) after {status.epoch} epoch(s); best valid "
          f"ppl {perplexity(status.best_val_loss):.2f}; run folder {out}")
    return 0


def _split_data(config, corpus, split: str):
    from .data import batchify

    t = config.train
    batch = {"valid": t.eval_batch_size, "test": t.test_batch_size,
             "train": t.eval_batch_size}[split]
    return batchify(getattr(corpus, split), batch)


def _cmd_eval(args: argparse.Namespace) -> int:
    if _is_nmt_run(args.run_dir):
        return _eval_nmt(args)
    from .train import evaluate, load_run

    config, model, corpus = load_run(args.run_dir, which=args.which, device=args.device)
    data = _split_data(config, corpus, args.split).to(next(model.parameters()).device)
    loss, n = evaluate(model, data, config.train.bptt, args.max_tokens)
    result = {"run": str(args.run_dir), "split": args.split, "which": args.which,
              "loss": loss, "ppl": perplexity(loss), "tokens": n}
    return _emit(args, result, f"{args.split} perplexity {result['ppl']:.2f} over {n:,} "
                               f"tokens ({args.which} weights of {args.run_dir})")


def _check_beam(model, beam: int) -> None:
    """A CommandError for ``--beam`` above 1 with a vMF run (it has no word distribution)."""
    if beam > 1 and model.is_continuous:
        raise CommandError(f"--beam {beam}: a vMF run decodes greedily by nearest neighbour "
                           f"(it has no distribution over words to search); drop --beam")


def _eval_nmt(args: argparse.Namespace) -> int:
    from .nmt.bleu import corpus_bleu
    from .nmt.config import NMTConfig
    from .nmt.data import load_parallel
    from .nmt.train import load_nmt_run, translate_pairs
    from .train.runs import read_run_config

    config = read_run_config(args.run_dir, NMTConfig)
    # the corpus first: a missing one is reported before any weights are read
    corpus = load_parallel(config.data.src, config.data.tgt, download=True)
    _, model, src_vocab, tgt_vocab = load_nmt_run(args.run_dir, which=args.which,
                                                  device=args.device)
    _check_beam(model, args.beam)
    pairs = corpus.split(args.split)[: args.max_tokens]  # --max-tokens caps sentences here
    device = next(model.parameters()).device
    hyps = translate_pairs(model, pairs, src_vocab, tgt_vocab, beam=args.beam,
                           max_len=config.train.max_len, device=device)
    result = {"run": str(args.run_dir), "split": args.split, "which": args.which,
              "beam": args.beam, "bleu": corpus_bleu(hyps, [t for _, t in pairs]),
              "sentences": len(pairs)}
    return _emit(args, result, f"{args.split} BLEU {result['bleu']:.2f} over "
                               f"{len(pairs):,} sentences (beam {args.beam}, {args.which} "
                               f"weights of {args.run_dir})")


def _cmd_translate(args: argparse.Namespace) -> int:
    from .nmt.train import load_nmt_run, translate_pairs

    if not _is_nmt_run(args.run_dir):
        raise CommandError(f"{args.run_dir} is not a translation run (train one with "
                           f"`drillbook train multi30k/de-en-softmax --out DIR`)")
    if args.input and not Path(args.input).is_file():
        raise MissingFileError(f"--input {args.input}: no such file; give a file of "
                               f"tokenised sentences, one per line, or pipe them in")
    _, model, src_vocab, tgt_vocab = load_nmt_run(args.run_dir, device=args.device)
    _check_beam(model, args.beam)
    stream = open(args.input, encoding="utf-8") if args.input else sys.stdin
    try:
        with stream:
            lines = [line.split() for line in stream]
    except UnicodeDecodeError as err:
        raise CommandError(f"{args.input or 'standard input'} is not UTF-8 text (byte "
                           f"{err.start}: {err.reason}); give tokenised UTF-8 sentences"
                           ) from None
    if not all(lines):
        raise CommandError("empty input line: give one tokenised sentence per line")
    device = next(model.parameters()).device
    for hyp in translate_pairs(model, [(tokens, []) for tokens in lines], src_vocab,
                               tgt_vocab, beam=args.beam, device=device):
        print(" ".join(hyp))
    return 0


def _cmd_rank(args: argparse.Namespace) -> int:

    from .analysis import DRILL_TOL, log_prob_chunks, singular_values
    from .train import load_run

    _language_model_run(args.run_dir, "rank")
    config, model, corpus = load_run(args.run_dir, which=args.which, device=args.device)
    device = next(model.parameters()).device
    data = _split_data(config, corpus, args.split).to(device)
    spec = singular_values(log_prob_chunks(model, data, config.train.bptt, args.max_tokens),
                           method="gram", device=device)
    result = {"run": str(args.run_dir), "split": args.split, "contexts": spec.n_rows,
              "vocab_size": spec.n_cols, "rank_tol_1": spec.rank(DRILL_TOL),
              "resolution": spec.resolution, "method": spec.method,
              "head": config.head.kind, "d_hidden": model.head.d_hidden}
    return _emit(args, result, (
        f"rank of the {spec.n_rows:,} x {spec.n_cols:,} log-probability matrix "
        f"({args.split}): {result['rank_tol_1']} with DRILL's tol = 1.0 (head "
        f"{config.head.kind}, d = {model.head.d_hidden}, so a softmax-family ceiling of "
        f"{model.head.d_hidden + 2})"))


# ------------------------------------------------------------------ reproduce, report
def _cmd_reproduce(args: argparse.Namespace) -> int:
    from .experiments import reproduce

    paths = reproduce(args.table, rows=args.rows, budget_minutes=args.budget_minutes,
                      out=args.out, runs=args.runs, device=args.device, overrides=args.set,
                      max_eval_tokens=args.max_eval_tokens, progress=not args.quiet,
                      seed=args.seed)
    for path in paths:
        doc = json.loads(Path(path).read_text())
        metrics = ", ".join(f"{k} {v:.2f}" for k, v in doc["metrics"].items()
                            if isinstance(v, float))
        print(f"{doc['row']}: {doc['status']} after {doc['epochs_done']} epoch(s); "
              f"{metrics or 'no finished epoch yet'} -> {path}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .experiments import load_results, render_report

    folder = Path(args.results)
    if not folder.is_dir():
        raise MissingFileError(f"--results {folder}: no such folder; write result files "
                               f"with `drillbook reproduce TABLE --out {folder}`, or pass "
                               f"--results FOLDER where they are")
    if not load_results(folder):  # also checks every file, naming a bad one
        raise ResultFileError(f"no result files under {folder} (expected "
                              f"{folder}/<table>/<row>.json); run `drillbook reproduce "
                              f"TABLE --out {folder}` first")
    text = render_report(folder)
    if args.out:
        Path(args.out).write_text(text + "\n")
        print(f"wrote {args.out}")
    else:
        print(text)
    if args.figures:
        for path in _curve_figures(args.results, Path(args.figures)):
            print(f"wrote {path}")
    return 0


def _curve_figures(results: str, folder: Path) -> list[Path]:
    """One PNG of validation curves per table that has result files."""
    try:
        import matplotlib
    except ImportError:
        raise MissingPackageError("--figures draws with matplotlib, which is not installed: "
                                  "`pip install matplotlib` (or drillbook[notebooks])"
                                  ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .experiments import TABLES, load_results, plot_curves, table_rows

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for table in sorted({d["table"] for d in load_results(results)} & set(TABLES)):
        rows = table_rows(table, results)
        bleu = any(p.get("val_bleu") is not None for r in rows for p in r["curve"])
        ax = plot_curves(rows, metric="val_bleu" if bleu else "val_ppl", title=table)
        path = folder / f"{table}.png"
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=120)
        plt.close(ax.figure)
        written.append(path)
    return written


# ------------------------------------------------------------------ bench
def _bench_conflicts(args: argparse.Namespace) -> None:
    """Flags that belong to another kind of benchmark: a CommandError naming them."""
    encoder = args.encoder != "none"
    modes = [flag for flag, on in (("--encoder", encoder), ("--sweep", args.sweep),
                                   ("--targets", args.targets)) if on]
    if len(modes) > 1:
        raise CommandError(f"{' and '.join(modes)} are separate benchmarks: choose one")
    given = [flag for flag, value in (("--set", args.set), ("--batch-size", args.batch_size),
                                      ("--bptt", args.bptt)) if value]
    if given and not (encoder or args.targets):
        raise CommandError(f"{', '.join(given)} configure an encoder: add --encoder CONFIG "
                           f"(e.g. --encoder ptb/awd-lstm) or --targets")
    given = [flag for flag, value in (("--d", args.d), ("--tokens", args.tokens))
             if value is not None]
    if given and encoder:
        raise CommandError(f"{', '.join(given)} size the head-alone benchmark; with --encoder "
                           f"the config decides: use --set model.emsize=N, --batch-size, --bptt")
    given = [flag for flag, value in (("--heads", args.heads), ("--sizes", args.sizes)) if value]
    if given and (args.sweep or args.targets):
        raise CommandError(f"{', '.join(given)} choose what the head-alone or --encoder "
                           f"benchmark measures; --sweep and --targets measure fixed heads")
    given = [flag for flag, value in (("--vocab-sizes", args.vocab_sizes),
                                      ("--decode-positions", args.decode_positions),
                                      ("--max-seconds", args.max_seconds)) if value]
    if given and not (args.sweep or args.targets):
        raise CommandError(f"{', '.join(given)} belong to --sweep (or --targets)")
    if args.vocab_sizes and args.targets:
        raise CommandError("--targets measures the sweep at V=50,000 only; drop --vocab-sizes")


def _cmd_bench(args: argparse.Namespace) -> int:
    from .experiments import (
        BENCH_HEADS,
        SWEEP_SIZES,
        format_report,
        run_bench,
        run_model_bench,
        run_targets,
        vocab_sweep,
        write_report,
    )

    _bench_conflicts(args)
    common = {"device": args.device or "cpu", "repeats": args.repeats, "warmup": args.warmup,
              "precision": args.precision}
    encoder = {"overrides": args.set or [], "batch_size": args.batch_size, "bptt": args.bptt}
    sweep = {"d": args.d or 1024, "tokens": args.tokens or 1400,
             "decode_positions": args.decode_positions, "max_seconds": args.max_seconds}
    if args.sweep:
        report = vocab_sweep(args.vocab_sizes or SWEEP_SIZES, **sweep, **common)
    elif args.targets:
        report = run_targets(**encoder, **sweep, **common)
    else:
        names = args.heads or list(BENCH_HEADS)
        if "tied" not in names:
            names = ["tied", *names]
        sizes = args.sizes or ["ptb"]
        if args.encoder != "none":
            report = run_model_bench(names, sizes, encoder_config=args.encoder, **encoder,
                                     **common)
        else:
            report = run_bench(names, sizes, d=args.d or 400, tokens=args.tokens or 1400,
                               **common)
    print(format_report(report))
    if args.out:
        print(f"wrote {write_report(report, args.out)}")
    return 0


# ------------------------------------------------------------------ data
def _cmd_data(args: argparse.Namespace) -> int:
    from .data import CORPORA, data_root, download, verify

    names = args.corpus or sorted(CORPORA)
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


# ------------------------------------------------------------------ synthetic
def _cmd_synthetic_rank(args: argparse.Namespace) -> int:
    import torch

    from .analysis import DRILL_TOL, SyntheticLanguage, fit_head, singular_values
    from .heads import build_head

    lang = SyntheticLanguage(args.contexts, args.vocab, args.logit_rank, seed=args.seed)
    true_rank = singular_values(lang.log_probs).rank()
    rows = []
    for d in args.dims:
        torch.manual_seed(args.seed)
        head = build_head("softmax", vocab_size=args.vocab, d_hidden=d).double()
        fit = fit_head(lang, head, steps=args.steps, seed=args.seed)
        with torch.no_grad():
            spec = singular_values(head.log_prob(fit.hidden))
        rows.append({"d": d, "kl": fit.kl, "rank_numpy_tol": spec.rank(),
                     "rank_drill_tol": spec.rank(DRILL_TOL)})
    if args.json:
        _print_json({"language": repr(lang), "true_rank": true_rank, "fits": rows})
        return 0
    print(f"{lang}\ntrue rank of A (numpy tol): {true_rank}")
    print(f"{'d':>6} {'KL (nats)':>12} {'rank':>6} {'rank@tol=1':>11}")
    for r in rows:
        print(f"{r['d']:>6} {r['kl']:>12.5f} {r['rank_numpy_tol']:>6} {r['rank_drill_tol']:>11}")
    return 0


# ------------------------------------------------------------------ parser
def _positive(kind: type, what: str):
    """An argparse type: a number of ``kind`` that must be > 0."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


_positive_int = _positive(int, "a positive integer")
_positive_float = _positive(float, "a positive number")


def _add_overrides(p: argparse.ArgumentParser, what: str) -> None:
    """``--set KEY=VALUE ...``, repeatable: the values add up, a later key wins."""
    p.add_argument("--set", nargs="+", action="extend", metavar="KEY=VALUE",
                   help=f"{what}; may be repeated (a later value of a key wins)")


def _add_run_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resume", action="store_true", help="continue from the run's last.pt")
    p.add_argument("--max-epochs", type=_positive_int, help="stop after N completed epochs")
    p.add_argument("--max-minutes", type=_positive_float,
                   help="wall-clock budget; the run checkpoints and stops (resume later)")
    p.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: CUDA if available)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_run_reader(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, help="a folder written by `drillbook train`")
    p.add_argument("--split", choices=["valid", "test", "train"], default="test")
    p.add_argument("--which", choices=["best", "last"], default="best",
                   help="best.pt (default) or last.pt")
    p.add_argument("--max-tokens", type=_positive_int, help="stop after about N tokens")
    p.add_argument("--device")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``drillbook`` command, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="drillbook",
        description="Output layers for neural language generation: tied, bilinear, joint, "
                    "DRILL, MoS, DOC and vMF heads, and the tools of the drillbook textbook.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("configs", help="list the named configs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_configs)

    p = sub.add_parser("params", help="parameter counts of a config's model",
                       description="Total and output-layer parameter counts of a config's "
                                   "model (built without allocating memory).")
    p.add_argument("config", help="a name from `drillbook configs`")
    _add_overrides(p, "override config values")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_params)

    p = sub.add_parser("train", help="train a config",
                       description="Train a named config into a run folder (config.json, "
                                   "log.jsonl, last.pt, best.pt). Resumable with --resume.")
    p.add_argument("config", help="a name from `drillbook configs`")
    _add_overrides(p, "override config values, e.g. train.lr=20 head.options.depth=2")
    p.add_argument("--out", help="run folder (default runs/<config name>)")
    _add_run_limits(p)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("finetune", help="AWD-LSTM's fine-tuning stage on a trained run",
                       description="Restart from a run's best weights with averaged SGD and "
                                   "stop at the first non-monotone validation epoch; the "
                                   "loaded model is the best to beat (never saved worse).")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, help="run folder (default RUN_DIR/finetune)")
    p.add_argument("--lr", type=_positive_float,
                   help="learning rate (default: the run's train.lr; MoS's README uses 25 "
                        "on PTB, 20 on WikiText-2)")
    _add_run_limits(p)
    p.set_defaults(func=_cmd_finetune)

    p = sub.add_parser("eval", help="perplexity (language models) or BLEU (translation)")
    _add_run_reader(p)
    p.add_argument("--beam", type=_positive_int, default=1, help="translation: beam size")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("translate", help="translate tokenised sentences with a trained run",
                       description="Read one tokenised, lowercased source sentence per line "
                                   "(stdin or --input) and print its translation.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--input", help="a file (default: standard input)")
    p.add_argument("--beam", type=_positive_int, default=1)
    p.add_argument("--device")
    p.set_defaults(func=_cmd_translate)

    p = sub.add_parser("rank", help="rank of a trained run's log-probability matrix",
                       description="Rank (DRILL's absolute tol = 1.0) of the contexts x "
                                   "vocabulary matrix of log-probabilities on a split.")
    _add_run_reader(p)
    p.set_defaults(func=_cmd_rank)

    p = sub.add_parser("data", help="verify, download or locate the corpora")
    p.add_argument("action", choices=["verify", "download", "where"])
    p.add_argument("corpus", nargs="*", help="corpus names (default: all)")
    p.add_argument("--force", action="store_true", help="download even if present")
    p.set_defaults(func=_cmd_data)

    p = sub.add_parser("reproduce", help="train the rows of a paper table at a budget",
                       description="Train (or resume) each row of a paper table into "
                                   "RUNS/<table>/<row>/ and write OUT/<table>/<row>.json "
                                   "with config, seed, commit, device, time and metrics.")
    p.add_argument("table", help="a paper table, e.g. drill-main (an unknown name lists "
                                 "them all)")
    p.add_argument("--rows", nargs="+", help="only these rows")
    p.add_argument("--budget-minutes", type=_positive_float,
                   help="minutes per row for this call (rerun to continue)")
    p.add_argument("--out", default="results", help="results folder (default results)")
    p.add_argument("--runs", default="runs", help="run folders (default runs; not committed)")
    _add_overrides(p, "overrides for every row")
    p.add_argument("--max-eval-tokens", type=_positive_int, help="cap the test evaluation")
    p.add_argument("--seed", type=int,
                   help="train with this seed; a seed other than the config's writes "
                        "OUT/<table>/seed-<N>/<row>.json (the spread across seeds)")
    p.add_argument("--device")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("report", help="Markdown tables from the result files")
    p.add_argument("--results", default="results")
    p.add_argument("--out", help="write here instead of printing (e.g. results/REPORT.md)")
    p.add_argument("--figures", help="also write one learning-curve PNG per table here")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser(
        "bench", help="time output heads against a tied head",
        description="Median forward+backward step time and evaluation time per token of each "
                    "output head, alone (default) or behind an encoder (--encoder CONFIG), at "
                    "PTB / WikiText-2 / 50k vocabulary sizes, as ratios to a tied head "
                    "measured in the same process; memory autograd saves for backward (every "
                    "device) and peak CUDA memory. --sweep: vMF vs softmax as the vocabulary "
                    "grows. --targets: measure and check the cost targets.")
    p.add_argument("--heads", nargs="+", help="names (default: all); see the code's "
                                              "BENCH_HEADS")
    p.add_argument("--sizes", nargs="+", help="ptb (default), wt2, 50k")
    p.add_argument("--encoder", default="none", metavar="none|CONFIG",
                   help="none (default): the head alone on random features; a config name "
                        "(ptb/awd-lstm, tutorial/ptb-tied, ...): behind its encoder")
    _add_overrides(p, "overrides of the encoder config (e.g. model.nhid=16)")
    p.add_argument("--batch-size", type=_positive_int, help="encoder mode (default: config)")
    p.add_argument("--bptt", type=_positive_int, help="encoder mode (default: config)")
    p.add_argument("--d", type=_positive_int,
                   help="feature size: head alone (default 400) or sweep (default 1024)")
    p.add_argument("--tokens", type=_positive_int,
                   help="positions per step, head alone or sweep (default 1400 = 20 x 70)")
    p.add_argument("--sweep", action="store_true",
                   help="vMF vs softmax at --vocab-sizes: train step, decoding, memory")
    p.add_argument("--vocab-sizes", type=_positive_int, nargs="+",
                   help="sweep sizes (default 10000 25000 50000 ... 800000)")
    p.add_argument("--decode-positions", type=_positive_int,
                   help="sweep: positions per decoding call (default --tokens)")
    p.add_argument("--max-seconds", type=_positive_float,
                   help="sweep: skip a head from the size where one step takes longer")
    p.add_argument("--targets", action="store_true",
                   help="measure what the cost targets need and print whether each is met")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: autocast around forward and loss (default fp32)")
    p.add_argument("--repeats", type=_positive_int, default=5)
    p.add_argument("--warmup", type=_positive_int, default=2)
    p.add_argument("--device", help="cpu (default) or cuda")
    p.add_argument("--out", help="write the JSON report here (e.g. results/bench/cpu.json)")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("info", help="print versions, device, profile and data folder")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("heads", help="list the output heads")
    p.set_defaults(func=_cmd_heads)

    p = sub.add_parser(
        "synthetic-rank",
        help="fit softmax heads of growing size to a synthetic language (chapter 1)",
        description="Fit softmax heads of dimension d to a synthetic language with a known "
                    "log-probability matrix; print the KL gap and the rank of each fit.",
    )
    p.add_argument("--contexts", type=_positive_int, default=256, help="U (default 256)")
    p.add_argument("--vocab", type=_positive_int, default=64, help="V (default 64)")
    p.add_argument("--logit-rank", type=_positive_int, default=64,
                   help="rank r of the true logits (default 64)")
    p.add_argument("--dims", type=_positive_int, nargs="+", default=[2, 8, 32],
                   help="head dimensions d to fit (default 2 8 32)")
    p.add_argument("--steps", type=_positive_int, default=300, help="Adam steps per fit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_synthetic_rank)
    return parser


def _one_line(err: BaseException) -> str:
    """The error's message on one line (the class name if it has none)."""
    return " ".join(str(err).split()) or type(err).__name__


_RESUME_HINT = {  # what Ctrl-C leaves: the checkpoints written so far, never a half one
    "train": "; continue from the run's last checkpoint with --resume",
    "finetune": "; continue from the run's last checkpoint with --resume",
    "reproduce": "; run the same command again to continue each row from its last "
                 "checkpoint",
}


def _run(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse, dispatch, and turn the package's own errors into one line on stderr."""
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "synthetic-rank" and args.logit_rank > args.vocab:
        parser.error(f"--logit-rank ({args.logit_rank}) cannot exceed --vocab ({args.vocab})")
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        if getattr(args, "device", None) is not None:
            from .runtime import resolve_device

            args.device = str(resolve_device(args.device))  # checked before any work
        return args.func(args)
    except DrillbookError as err:  # bad input or environment; anything else is a bug
        if debug:
            raise
        parser.exit(EXIT_USER_ERROR, f"drillbook: error: {_one_line(err)}\n")
    except KeyboardInterrupt:
        if debug:
            raise
        parser.exit(EXIT_INTERRUPTED,
                    f"drillbook: interrupted{_RESUME_HINT.get(args.command, '')}\n")


def main(argv: list[str] | None = None) -> int:
    """Run ``drillbook ARGS``; returns the exit status (a user error exits with status 2
    through ``SystemExit``). See the module notes for every status."""
    parser = build_parser()
    try:
        try:
            return _run(parser, argv)
        finally:
            sys.stdout.flush()  # a reader that closed the pipe shows up here, not at exit
    except BrokenPipeError:
        # the Python documentation's recipe: point stdout at devnull so that the flush at
        # interpreter exit has nowhere to fail, and stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
