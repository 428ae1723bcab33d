"""``drillbook train``, ``finetune``, ``eval``, ``rank`` and ``translate``: train a config
into a run folder, and read trained runs back. A config's or run's ``task`` (language model
or translation) picks the trainer and the metric."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..validation import argument_type, number
from .common import (
    CommandError,
    add_config_source,
    add_overrides,
    add_run_limits,
    add_run_reader,
    add_which,
    check_output,
    emit,
    positive_float,
    positive_int,
    refuse_unless,
    resolve_config,
    run_config,
)

__all__ = ["add_commands"]

_RESUME = "; continue from the run's last checkpoint with --resume"


def _interrupted_hint(out: Path):
    """What Ctrl-C outside the training steps (loading data, building the model, a second
    Ctrl-C) leaves: a hint read when it happens, since a checkpoint may exist by then."""
    from ..train import has_checkpoint

    return lambda: (_RESUME if has_checkpoint(out)
                    else "; nothing of this run was saved: run the same command again")


#: rates that may be 0 (``--dyn-lr 0`` is static evaluation)
non_negative_float = argument_type(number(minimum=0), float)


def _stopped(what: str, status, task, out: Path, resumed: bool) -> str:
    """The line a finished ``train`` or ``finetune`` prints: why it stopped, its best
    validation metric, the folder, and how to go on where it stopped short of its
    epochs."""
    line = (f"{what}: stopped ({status.reason}) after {status.epoch} epoch(s); "
            f"{task.best(status)}; run folder {out}")
    if status.reason == "budget":  # --max-minutes: the same call again goes on
        line += ("; run the same command again to continue" if resumed
                 else "; continue with the same command plus --resume")
    elif status.reason == "epochs":  # --max-epochs counts the run's epochs, not the call's
        line += "; continue with --resume and a larger --max-epochs (or none)"
    return line


def _say_training_cost(config, args: argparse.Namespace) -> None:
    """On a CPU, what training ``config`` will take, if long (:mod:`.estimates`)."""
    from ..runtime import resolve_device
    from . import estimates

    device = resolve_device(args.device)
    if args.quiet or device.type != "cpu":
        return
    cost = estimates.train_cost(config, device, args.max_epochs)
    if cost is None:
        return
    epoch, total, how = cost
    epochs = min(config.train.epochs, args.max_epochs or config.train.epochs)
    stop = (f"; --max-minutes {args.max_minutes:g} stops it sooner" if args.max_minutes
            else "; --max-minutes stops it, --resume continues it")
    estimates.say(f"training {config.name} on the CPU", total,
                  f"{estimates.duration(epoch)} per epoch x {epochs} epoch(s): {how}{stop}")


# ------------------------------------------------------------------ train, finetune
def _cmd_train(args: argparse.Namespace) -> int:
    from ..train.distributed import distributed
    from ..train.graphs import takes_graphs
    from ..train.tasks import task_of

    config = resolve_config(args)
    out = check_output(args.out or Path("runs") / config.name.replace("/", "_"), "--out",
                       folder=True)
    args.interrupted = _interrupted_hint(out)
    task = task_of(config)
    graphs = ({"graphs": True} if takes_graphs(task.trainer, config, args.device,
                                               args.cuda_graphs or False,
                                               flag="--cuda-graphs") else {})
    with distributed() as rank:  # under torchrun: this is one process of several
        trainer = task.trainer(config, out, device=args.device, resume=args.resume,
                               progress=False if args.quiet else None, **graphs)
        if rank == 0:
            _say_training_cost(config, args)
        status = trainer.fit(max_epochs=args.max_epochs, max_minutes=args.max_minutes)
    if rank == 0:  # rank 0 reports for every process
        print(_stopped(config.name, status, task, out, args.resume))
    return 0


def _cmd_finetune(args: argparse.Namespace) -> int:
    from ..train.distributed import distributed
    from ..train.run_files import FINETUNE, in_use
    from ..train.tasks import task_of

    config = run_config(args.run_dir)
    task = task_of(config)
    refuse_unless(task, lambda t: t.finetunes, "finetune", str(args.run_dir),
                  "evaluate it with `drillbook eval`")
    holder = in_use(args.run_dir)
    if holder is not None:
        raise CommandError(f"{args.run_dir} is still training ({holder}): fine-tuning now "
                           f"would start from a snapshot of its best.pt; wait for the run "
                           f"to finish, or stop it, then fine-tune")
    out = check_output(args.out if args.out is not None else args.run_dir / FINETUNE,
                       "--out", folder=True)
    args.interrupted = _interrupted_hint(out)
    with distributed() as rank:  # under torchrun: one process of several
        trainer = task.finetune_trainer(args.run_dir, out=out, device=args.device,
                                        resume=args.resume,
                                        progress=False if args.quiet else None,
                                        corpus=None, lr=args.lr)
        status = trainer.fit(max_epochs=args.max_epochs, max_minutes=args.max_minutes)
    if rank == 0:
        print(_stopped("finetune", status, task, out, args.resume))
    return 0


# ------------------------------------------------------------------ eval, rank, translate
def _check_beam(model, beam: int) -> None:
    """A CommandError for ``--beam`` above 1 with a vMF run (it has no word distribution)."""
    if beam > 1 and not model.head.is_distribution:
        raise CommandError(f"--beam {beam}: a vMF run decodes greedily by nearest neighbour "
                           f"(it has no distribution over words to search); drop --beam")


#: ``drillbook eval`` options that only dynamic evaluation reads
_DYNAMIC_OPTIONS = ("dyn_lr", "dyn_lambda", "dyn_eps", "dyn_bptt", "dyn_search",
                    "dyn_search_tokens", "dyn_grad_batch_size", "dyn_grad_batches",
                    "dyn_state", "dyn_every", "dyn_old_hyper", "resume")


#: ``--dyn-every``'s default: segments between two writes of the state file
_DYN_EVERY = 500


def _eval_dynamic(args: argparse.Namespace, config, task) -> int:
    from ..train import dynamic as d

    def given(value, default):
        return default if value is None else value

    state = check_output(
        args.dyn_state or args.run_dir / f"dynamic-eval-{args.which}-{args.split}.pt",
        "--dyn-state", folder=False)
    d.check_request(do_search=args.dyn_search, lr=args.dyn_lr, lamb=args.dyn_lambda,
                    old_hyper=args.dyn_old_hyper, search_tokens=args.dyn_search_tokens,
                    state_path=state, resume=args.resume)  # before any loading or timing
    settings = {"bptt": given(args.dyn_bptt, d.DEFAULT_BPTT),
                "eps": given(args.dyn_eps, d.DEFAULT_EPS)}
    corpus = task.load_data(config)  # read once: the estimate's probe and the evaluation
    if not args.resume:
        _say_dynamic_cost(args, task, config, corpus, settings)
    result = d.evaluate_run(
        args.run_dir, split=args.split, which=args.which, lr=args.dyn_lr,
        lamb=args.dyn_lambda, eps=settings["eps"], bptt=settings["bptt"],
        do_search=args.dyn_search, search_tokens=args.dyn_search_tokens,
        grad_batch_size=given(args.dyn_grad_batch_size, d.DEFAULT_GRAD_BATCH_SIZE),
        grad_batches=args.dyn_grad_batches, max_tokens=args.max_tokens, state_path=state,
        save_every=given(args.dyn_every, _DYN_EVERY), resume=args.resume, device=args.device,
        corpus=corpus, old_hyper=args.dyn_old_hyper)
    text = (f"{args.split} perplexity {result['ppl']:.2f} with dynamic evaluation (static "
            f"{result['static_ppl']:.2f}) over {result['tokens']:,} tokens; lr "
            f"{result['lr']:g}, lambda {result['lamb']:g} ({args.which} weights of "
            f"{args.run_dir})")
    if "search" in result:
        text += (f"\nchosen on validation (perplexity {result['search']['valid_ppl']:.2f} "
                 f"over {result['search']['tokens']:,} tokens) among "
                 f"{len(result['search']['table'])} pairs")
    return emit(args, result, text)


def _say_dynamic_cost(args: argparse.Namespace, task, config, corpus,
                      settings: dict) -> None:
    """What the dynamic evaluation will take, if long, from a probe on a copy of the
    run's model (:func:`.estimates.dynamic_cost`)."""
    from ..train import dynamic as d
    from . import estimates

    run = task.load_run(args.run_dir, config, which=args.which, device=args.device,
                        corpus=corpus)
    seconds, how = estimates.dynamic_cost(
        run.model, corpus, split=args.split, bptt=settings["bptt"],
        grad_batch_size=args.dyn_grad_batch_size or d.DEFAULT_GRAD_BATCH_SIZE,
        grad_batches=args.dyn_grad_batches, search=args.dyn_search,
        search_tokens=args.dyn_search_tokens, max_tokens=args.max_tokens,
        lr=args.dyn_lr or d.DEFAULT_LR, lamb=args.dyn_lambda or d.DEFAULT_LAMBDA,
        eps=settings["eps"])
    cut = ("--dyn-search-tokens N and --dyn-grad-batches N do less" if args.dyn_search
           else "--dyn-grad-batches N and --max-tokens N do less")
    estimates.say(f"dynamic evaluation on {next(run.model.parameters()).device}", seconds,
                  f"{how}; {cut}")


def _cmd_eval(args: argparse.Namespace) -> int:
    from ..train.tasks import task_of

    config = run_config(args.run_dir)
    task = task_of(config)
    given = [f"--{o.replace('_', '-')}" for o in _DYNAMIC_OPTIONS
             if getattr(args, o) not in (None, False)]
    if args.dynamic:
        refuse_unless(task, lambda t: t.streams, "--dynamic", str(args.run_dir),
                      "drop --dynamic")
    if given and not args.dynamic:
        verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
        raise CommandError(f"{', '.join(given)} only {verb} to dynamic evaluation: add "
                           f"--dynamic (or drop {them})")
    if args.beam is not None:
        refuse_unless(task, lambda t: t.decodes, f"--beam {args.beam}", str(args.run_dir),
                      "drop --beam")
    if args.dynamic:
        args.interrupted = lambda: ("; continue the dynamic evaluation from its state file "
                                    "with --resume")
        return _eval_dynamic(args, config, task)
    beam = args.beam or 1
    data = task.load_data(config)  # a missing corpus is reported before any weights are read
    run = task.load_run(args.run_dir, config, which=args.which, device=args.device, corpus=data)
    _check_beam(run.model, beam)
    # --max-tokens caps a language model's tokens, a translation's sentences
    result = task.evaluate(run, args.split, data=data, max_items=args.max_tokens, beam=beam)
    result = {"run": str(args.run_dir), "split": args.split, "which": args.which, **result}
    text = f"{args.split} {task.describe(result)} ({args.which} weights of {args.run_dir})"
    signature = task.signature
    if signature is not None and signature.key in result:  # how the metric was computed
        text += f"\n{signature.name}: {result[signature.key]}"
    return emit(args, result, text)


def _source_lines(args: argparse.Namespace) -> tuple[list[str], str]:
    """The sentences ``translate`` reads (``--input`` or standard input) and where from,
    one per line: lines end at a line feed only (a carriage return before it is dropped),
    whatever else stands in a line, and a byte-order mark at the start is not a word."""
    if args.input and not Path(args.input).is_file():
        what = "a folder" if Path(args.input).is_dir() else "no such file"
        raise CommandError(f"--input {args.input}: {what}; give a file of sentences, one "
                           f"per line, or pipe them in")
    source = args.input or "standard input"
    stdin_bytes = getattr(sys.stdin, "buffer", None)  # (a text stream in tests and shells)
    try:
        data = (Path(args.input).read_bytes() if args.input
                else stdin_bytes.read() if stdin_bytes is not None
                else sys.stdin.read().encode("utf-8", "surrogateescape"))
    except OSError as err:
        raise CommandError(f"cannot read {source} ({err.strerror or err}); give a readable "
                           f"file of sentences") from None
    try:  # one rule for a file and for standard input: UTF-8, whatever the locale
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise CommandError(f"{source}, line {line}, is not UTF-8 text (byte "
                           f"{err.start}: {err.reason}); give UTF-8 sentences") from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    while lines and not lines[-1].strip():  # blank lines at the end: nothing to say
        lines.pop()
    if not lines:
        raise CommandError(f"no sentence to translate in {source}: give one sentence per "
                           f"line")
    blank = next((i for i, line in enumerate(lines, 1) if not line.strip()), None)
    if blank is not None:
        raise CommandError(f"{source}, line {blank}, is empty: give one sentence per line")
    return lines, source


def _cmd_translate(args: argparse.Namespace) -> int:
    from ..nmt.decode import translate_pairs
    from ..train.tasks import task_of

    config = run_config(args.run_dir)
    task = task_of(config)
    refuse_unless(task, lambda t: t.decodes, "translate", str(args.run_dir),
                  "train a translation run with `drillbook train "
                  "multi30k/de-en-softmax-tutorial --out DIR`")
    raw_lines, source = _source_lines(args)
    _, model, (src_vocab, tgt_vocab) = task.load_run(args.run_dir, config, which=args.which,
                                                     device=args.device)
    _check_beam(model, args.beam)
    if args.raw:
        from ..nmt.text import moses_detokenize, moses_tokenize

        def split(line: str) -> list[str]:
            return moses_tokenize(line, config.data.src)

        def join(tokens: list[str]) -> str:
            return moses_detokenize(tokens, config.data.tgt)
    else:
        split, join = str.split, " ".join
    lines = [split(line) for line in raw_lines]
    empty = next((i for i, tokens in enumerate(lines, 1) if not tokens), None)
    if empty is not None:
        raise CommandError(f"{source}, line {empty}, has no word once tokenised: give one "
                           f"sentence per line")
    device = next(model.parameters()).device
    for hyp in translate_pairs(model, [(tokens, []) for tokens in lines], src_vocab,
                               tgt_vocab, beam=args.beam, device=device):
        print(join(hyp))
    return 0


def _cmd_rank(args: argparse.Namespace) -> int:
    from ..analysis import DRILL_TOL, log_prob_chunks, singular_values
    from ..train.tasks import task_of
    from . import estimates

    config = run_config(args.run_dir)
    task = task_of(config)
    refuse_unless(task, lambda t: t.streams, "rank", str(args.run_dir),
                  "use `drillbook eval` or `drillbook translate`")
    corpus = task.load_data(config)
    _, model, _ = task.load_run(args.run_dir, config, which=args.which, device=args.device,
                                corpus=corpus)
    device = next(model.parameters()).device
    data = task.split_stream(config, corpus, args.split).to(device)
    seconds, how = estimates.rank_cost(model, data, config.train.bptt, args.max_tokens)
    estimates.say(f"the rank on {device}", seconds, how)
    spec = singular_values(log_prob_chunks(model, data, config.train.bptt, args.max_tokens),
                           method="gram", device=device)
    result = {"run": str(args.run_dir), "split": args.split, "contexts": spec.n_rows,
              "vocab_size": spec.n_cols, "rank_tol_1": spec.rank(DRILL_TOL),
              "resolution": spec.resolution, "method": spec.method,
              "head": config.head.kind, "d_hidden": model.head.d_hidden}
    return emit(args, result, (
        f"rank of the {spec.n_rows:,} x {spec.n_cols:,} log-probability matrix "
        f"({args.split}): {result['rank_tol_1']} with DRILL's tol = 1.0 (head "
        f"{config.head.kind}, d = {model.head.d_hidden}, so a softmax-family ceiling of "
        f"{model.head.d_hidden + 2})"))


class _DynamicDefault:
    """A default of :mod:`drillbook.train.dynamic`, read only when help is printed (building
    the parser imports no torch)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        from ..train import dynamic

        return f"{getattr(dynamic, self.name):g}"


def _add_dynamic_options(p: argparse.ArgumentParser) -> None:
    """``--dynamic`` and its options; an option left out takes Krause et al.'s default
    (:mod:`drillbook.train.dynamic`)."""
    g = p.add_argument_group(
        "dynamic evaluation (language models; Krause et al. 2018)",
        "The weights learn from each segment after scoring it (RMS-normalised update with "
        "decay towards the trained weights). The split is read as one sequence; the "
        "gradient statistics come from the training split.")
    g.add_argument("--dynamic", action="store_true", help="evaluate dynamically")

    def option(flag: str, default: str | None, help: str, **kw) -> None:
        action = g.add_argument(flag, help=help, **kw)
        action.dyn_default = _DynamicDefault(default) if default else None

    option("--dyn-lr", "DEFAULT_LR", "learning rate eta (default %(dyn_default)s)",
           type=non_negative_float)
    option("--dyn-lambda", "DEFAULT_LAMBDA",
           "decay rate lambda towards the trained weights (default %(dyn_default)s)",
           type=non_negative_float)
    option("--dyn-eps", "DEFAULT_EPS", "epsilon of the update (default %(dyn_default)s)",
           type=positive_float)
    option("--dyn-bptt", "DEFAULT_BPTT", "segment length, also of the gradient statistics "
           "(default %(dyn_default)s)", type=positive_int)
    g.add_argument("--dyn-search", action="store_true",
                   help="choose lr and lambda on the validation split from the authors' grid "
                        "(6 x 4 pairs, scaled by bptt/5), then evaluate --split with them")
    g.add_argument("--dyn-search-tokens", type=positive_int,
                   help="search on the first N validation tokens (the authors' --gridfast "
                        "uses 30000)")
    option("--dyn-grad-batch-size", "DEFAULT_GRAD_BATCH_SIZE",
           "batch size of the training-gradient statistics (default %(dyn_default)s)",
           type=positive_int)
    g.add_argument("--dyn-grad-batches", type=positive_int,
                   help="training batches of the gradient statistics (default: all)")
    g.add_argument("--dyn-state", type=Path,
                   help="the resumable state file (default "
                        "RUN_DIR/dynamic-eval-<which>-<split>.pt)")
    g.add_argument("--dyn-every", type=positive_int,
                   help=f"write the state file every N segments (default {_DYN_EVERY})")
    g.add_argument("--dyn-old-hyper", action="store_true",
                   help="--dyn-lr, --dyn-lambda and --dyn-eps are the first script's (the MoS "
                        "README: 0.002, 0.075, 0.001 on PTB); convert them (the authors' "
                        "--oldhyper)")
    g.add_argument("--resume", action="store_true",
                   help="continue the dynamic evaluation from its state file")


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``train``, ``finetune``, ``eval``, ``rank`` and ``translate``."""
    p = sub.add_parser("train", help="train a config",
                       description="Train a named config, or a config file, into a run "
                                   "folder (config.json, log.jsonl, last.pt, best.pt). "
                                   "Resumable with --resume.")
    add_config_source(p)
    add_overrides(p, "override config values, e.g. train.lr=20 head.options.depth=2")
    p.add_argument("--out", help="run folder (default runs/<config name>)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="language models on a CUDA device: capture each training step "
                        "and evaluation window as a CUDA graph (fewer kernel launches; "
                        "off by default until measured)")
    add_run_limits(p)
    p.set_defaults(func=_cmd_train, interrupted=_RESUME)

    p = sub.add_parser("finetune", help="AWD-LSTM's fine-tuning stage on a trained run",
                       description="Restart from a run's best weights with averaged SGD and "
                                   "stop at the first non-monotone validation epoch; the "
                                   "loaded model is the best to beat (never saved worse).")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, help="run folder (default RUN_DIR/finetune)")
    p.add_argument("--lr", type=positive_float,
                   help="learning rate (default: the run's train.lr; MoS's README uses 25 "
                        "on PTB, 20 on WikiText-2)")
    add_run_limits(p)
    p.set_defaults(func=_cmd_finetune, interrupted=_RESUME)

    p = sub.add_parser("eval", help="perplexity (language models) or BLEU (translation)")
    add_run_reader(p)
    p.add_argument("--beam", type=positive_int,
                   help="beam size (runs that decode: translation; default 1)")
    _add_dynamic_options(p)
    p.set_defaults(func=_cmd_eval, interrupted=lambda: "")  # set by --dynamic

    p = sub.add_parser("rank", help="rank of a trained run's log-probability matrix",
                       description="Rank (DRILL's absolute tol = 1.0) of the contexts x "
                                   "vocabulary matrix of log-probabilities on a split.")
    add_run_reader(p)
    p.set_defaults(func=_cmd_rank)

    p = sub.add_parser("translate", help="translate sentences with a trained run",
                       description="Read one source sentence per line (stdin or --input) "
                                   "and print its translation: tokenised, lowercased text "
                                   "as the corpus has it, or ordinary text with --raw.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--input", help="a file (default: standard input)")
    p.add_argument("--raw", action="store_true",
                   help="untokenised input: Moses-tokenise and lowercase it, and "
                        "detokenise the output (needs sacremoses)")
    p.add_argument("--beam", type=positive_int, default=1, help="beam size (default 1)")
    add_which(p)
    p.add_argument("--device")
    p.set_defaults(func=_cmd_translate)
