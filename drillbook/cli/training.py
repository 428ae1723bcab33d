"""``drillbook train``, ``finetune``, ``eval``, ``rank`` and ``translate``: train a config
into a run folder, and read trained runs back. A config's or run's ``task`` (language model
or translation) picks the trainer and the metric."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..configs import LANGUAGE_MODEL, TRANSLATION
from ..errors import MissingFileError
from ..metrics import perplexity
from .common import (
    CommandError,
    add_config_source,
    add_overrides,
    add_run_limits,
    add_run_reader,
    emit,
    language_model_run,
    positive_float,
    positive_int,
    resolve_config,
    run_config,
)

__all__ = ["add_commands"]

_RESUME = "; continue from the run's last checkpoint with --resume"


# ------------------------------------------------------------------ train, finetune
def _train_language_model(config, out: Path, args: argparse.Namespace) -> str:
    from ..train import Trainer

    trainer = Trainer(config, out, device=args.device, resume=args.resume,
                      progress=False if args.quiet else None)
    status = trainer.fit(max_epochs=args.max_epochs, max_minutes=args.max_minutes)
    return (f"{config.name}: stopped ({status.reason}) after {status.epoch} epoch(s); "
            f"best valid ppl {perplexity(status.best_val_loss):.2f}; run folder {out}")


def _train_translation(config, out: Path, args: argparse.Namespace) -> str:
    from ..nmt.train import NMTTrainer

    trainer = NMTTrainer(config, out, device=args.device, resume=args.resume,
                         progress=False if args.quiet else None)
    record = trainer.fit(max_epochs=args.max_epochs, max_minutes=args.max_minutes)
    return (f"{config.name}: stopped after epoch {trainer.epoch - 1}; best valid BLEU "
            f"{trainer.best_bleu:.2f}; last record {json.dumps(record)}; run folder {out}")


#: task -> how ``drillbook train`` trains a config of that task (returns its summary line)
_TRAINERS = {LANGUAGE_MODEL: _train_language_model, TRANSLATION: _train_translation}


def _cmd_train(args: argparse.Namespace) -> int:
    from ..train.loop import distributed

    config = resolve_config(args)
    out = Path(args.out or Path("runs") / config.name.replace("/", "_"))
    with distributed() as rank:  # under torchrun: this is one process of several
        summary = _TRAINERS[config.task](config, out, args)
    if rank == 0:  # rank 0 reports for every process
        print(summary)
    return 0


def _cmd_finetune(args: argparse.Namespace) -> int:
    from ..train import finetune
    from ..train.loop import distributed

    language_model_run(args.run_dir, "finetune")
    with distributed() as rank:  # under torchrun: one process of several
        status, out = finetune(args.run_dir, out=args.out, device=args.device,
                               resume=args.resume, max_epochs=args.max_epochs,
                               max_minutes=args.max_minutes,
                               progress=False if args.quiet else None, lr=args.lr)
    if rank:
        return 0
    print(f"finetune: stopped ({status.reason}) after {status.epoch} epoch(s); best valid "
          f"ppl {perplexity(status.best_val_loss):.2f}; run folder {out}")
    return 0


# ------------------------------------------------------------------ eval, rank, translate
def _split_data(config, corpus, split: str):
    from ..data import batchify

    t = config.train
    batch = {"valid": t.eval_batch_size, "test": t.test_batch_size,
             "train": t.eval_batch_size}[split]
    return batchify(getattr(corpus, split), batch)


def _check_beam(model, beam: int) -> None:
    """A CommandError for ``--beam`` above 1 with a vMF run (it has no word distribution)."""
    if beam > 1 and model.is_continuous:
        raise CommandError(f"--beam {beam}: a vMF run decodes greedily by nearest neighbour "
                           f"(it has no distribution over words to search); drop --beam")


def _eval_language_model(_, args: argparse.Namespace) -> int:
    from ..train import evaluate, load_run

    config, model, corpus = load_run(args.run_dir, which=args.which, device=args.device)
    data = _split_data(config, corpus, args.split).to(next(model.parameters()).device)
    loss, n = evaluate(model, data, config.train.bptt, args.max_tokens)
    result = {"run": str(args.run_dir), "split": args.split, "which": args.which,
              "loss": loss, "ppl": perplexity(loss), "tokens": n}
    return emit(args, result, f"{args.split} perplexity {result['ppl']:.2f} over {n:,} "
                              f"tokens ({args.which} weights of {args.run_dir})")


def _eval_translation(config, args: argparse.Namespace) -> int:
    from ..nmt.bleu import multi30k_bleu
    from ..nmt.data import load_parallel
    from ..nmt.train import load_nmt_run, translate_pairs

    # the corpus first: a missing one is reported before any weights are read
    corpus = load_parallel(config.data.src, config.data.tgt, download=True)
    _, model, src_vocab, tgt_vocab = load_nmt_run(args.run_dir, which=args.which,
                                                  device=args.device)
    _check_beam(model, args.beam)
    pairs = corpus.split(args.split)[: args.max_tokens]  # --max-tokens caps sentences here
    device = next(model.parameters()).device
    hyps = translate_pairs(model, pairs, src_vocab, tgt_vocab, beam=args.beam,
                           max_len=config.train.max_len, device=device)
    # reported BLEU: sacrebleu on detokenised text against the raw references
    bleu = multi30k_bleu(hyps, split=args.split, lang=config.data.tgt, download=True)
    result = {"run": str(args.run_dir), "split": args.split, "which": args.which,
              "beam": args.beam, "bleu": bleu.score, "bleu_signature": bleu.signature,
              "sentences": len(pairs)}
    return emit(args, result, f"{args.split} BLEU {bleu.score:.2f} over {len(pairs):,} "
                              f"sentences (beam {args.beam}, {args.which} weights of "
                              f"{args.run_dir})\nsacreBLEU signature: {bleu.signature}")


#: task -> how ``drillbook eval`` evaluates a run of that task
_EVALUATORS = {LANGUAGE_MODEL: _eval_language_model, TRANSLATION: _eval_translation}


def _cmd_eval(args: argparse.Namespace) -> int:
    config = run_config(args.run_dir)
    return _EVALUATORS[config.task](config, args)


def _cmd_translate(args: argparse.Namespace) -> int:
    from ..nmt.train import load_nmt_run, translate_pairs

    if run_config(args.run_dir).task != TRANSLATION:
        raise CommandError(f"{args.run_dir} is not a translation run (train one with "
                           f"`drillbook train multi30k/de-en-softmax --out DIR`)")
    if args.input and not Path(args.input).is_file():
        raise MissingFileError(f"--input {args.input}: no such file; give a file of "
                               f"sentences, one per line, or pipe them in")
    config, model, src_vocab, tgt_vocab = load_nmt_run(args.run_dir, device=args.device)
    _check_beam(model, args.beam)
    stream = open(args.input, encoding="utf-8") if args.input else sys.stdin
    if args.raw:
        from ..nmt.text import moses_detokenize, moses_tokenize

        def split(line: str) -> list[str]:
            return moses_tokenize(line, config.data.src)

        def join(tokens: list[str]) -> str:
            return moses_detokenize(tokens, config.data.tgt)
    else:
        split, join = str.split, " ".join
    try:
        with stream:
            lines = [split(line) for line in stream]
    except UnicodeDecodeError as err:
        raise CommandError(f"{args.input or 'standard input'} is not UTF-8 text (byte "
                           f"{err.start}: {err.reason}); give UTF-8 sentences") from None
    if not all(lines):
        raise CommandError("empty input line: give one sentence per line")
    device = next(model.parameters()).device
    for hyp in translate_pairs(model, [(tokens, []) for tokens in lines], src_vocab,
                               tgt_vocab, beam=args.beam, device=device):
        print(join(hyp))
    return 0


def _cmd_rank(args: argparse.Namespace) -> int:
    from ..analysis import DRILL_TOL, log_prob_chunks, singular_values
    from ..train import load_run

    language_model_run(args.run_dir, "rank")
    config, model, corpus = load_run(args.run_dir, which=args.which, device=args.device)
    device = next(model.parameters()).device
    data = _split_data(config, corpus, args.split).to(device)
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


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``train``, ``finetune``, ``eval``, ``rank`` and ``translate``."""
    p = sub.add_parser("train", help="train a config",
                       description="Train a named config, or a config file, into a run "
                                   "folder (config.json, log.jsonl, last.pt, best.pt). "
                                   "Resumable with --resume.")
    add_config_source(p)
    add_overrides(p, "override config values, e.g. train.lr=20 head.options.depth=2")
    p.add_argument("--out", help="run folder (default runs/<config name>)")
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
    p.add_argument("--beam", type=positive_int, default=1, help="translation: beam size")
    p.set_defaults(func=_cmd_eval)

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
    p.add_argument("--beam", type=positive_int, default=1)
    p.add_argument("--device")
    p.set_defaults(func=_cmd_translate)
