"""One AWD-LSTM training step and one evaluation window, drillbook's and the authors', timed
side by side in one process, with the kernels each spends its device time in.

    python tools/authors_step.py --authors ../awd-lstm-lm --device cuda --out step.json

``--authors`` is a checkout of the authors' code (``salesforce/awd-lstm-lm``); its
``model.py`` and ``splitcross.py`` are imported from there, unmodified, and driven the way
their ``main.py`` drives them: ``repackage_hidden``, ``model(x, h, return_h=True)``, their
split cross-entropy (no splits at PTB's 10,000 words), AR and TAR, clipping, SGD with the
learning rate scaled by the window's length. drillbook's step is the trainer's own
(``LanguageModelTrainer.train_step``, its deferred checks included). Both train the
paper's PTB AWD-LSTM (``ptb/awd-lstm``) on the same real batches, at the same sizes and
hyper-parameters, alternating ``--rounds`` times ``--steps`` steps each, so a slower clock
or a warmer GPU favours neither. Evaluation: the same validation windows (batch 10 x 70),
drillbook's ``evaluate`` against their ``evaluate`` loop.

With ``--graphed``, drillbook's graph-ready step (``LanguageModelTrainer(graphs=True)``:
captured as a CUDA graph per window length on a GPU, run eagerly on a CPU) is a third
contender, every window length of the timed batches captured before the timing; and,
with dropout off on both, the graphed and the eager step take the same twelve steps from
the same weights (four batches three times over, so that each length is replayed from its
graph), and their losses are compared step by step. On a CPU this rehearses everything but the
capture.

Prints the operations one training step of each dispatches (forward, backward and update,
counted on their way to the kernels, where the two differ), milliseconds per step and the
ratios (drillbook / authors); with ``--profile N`` it
also profiles N steps of each and prints the kernels that take most device time, so a gap
can be traced to the work that makes it. Writes everything to ``--out`` (JSON).

The authors' MoS (``--mos CHECKOUT``, a checkout of ``zihangdai/mos``):

    python tools/authors_step.py --mos ../mos --device cuda --out step.json

drillbook's MoS step (``ptb/awd-lstm-mos``, the trainer's own) is timed here, and theirs
in a child process shaped like their ``main.py`` (``tools/authors_mos.py``: torch, numpy
and their modules only, their corpus and model), driven as their ``train()`` drives it,
with and without the ``gc.collect()`` it calls after every small batch (the run without
replaces ``gc.collect`` in the namespace of that loop by a function that does nothing),
each with a kernel profile. Prints drillbook's step against theirs both ways. ``--tiny``
makes both models small: a rehearsal on a CPU. ``--authors`` and ``--mos`` may be given
together (the AWD-LSTM first).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drillbook.atomic import write_json  # noqa: E402
from drillbook.configs import apply_overrides, get_config  # noqa: E402
from drillbook.provenance import environment, git_state  # noqa: E402
from drillbook.train.lm import LanguageModelTrainer, evaluate  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
from authors_mos import detach, timed, top_kernels  # noqa: E402


def authors_model(authors: Path, config, vocab_size: int, device: torch.device):
    """The authors' ``RNNModel`` and criterion at ``config``'s sizes, on ``device``."""
    sys.path.insert(0, str(authors))
    import model as their_model
    from splitcross import SplitCrossEntropyLoss

    m = config.model
    net = their_model.RNNModel("LSTM", vocab_size, m.emsize, m.nhid, m.nlayers, m.dropout,
                               m.dropouth, m.dropouti, m.dropoute, m.wdrop, True).to(device)
    criterion = SplitCrossEntropyLoss(m.emsize, splits=[], verbose=False).to(device)
    return net, criterion


class AuthorsStep:
    """Their ``train()`` loop body for one batch (``x``, ``y`` of shape ``(T, B)``)."""

    def __init__(self, net, criterion, config, batch_size: int, device) -> None:
        t = config.train
        self.net, self.criterion, self.t = net, criterion, t
        self.params = list(net.parameters()) + list(criterion.parameters())
        self.optimizer = torch.optim.SGD(self.params, lr=t.lr, weight_decay=t.wdecay)
        self.hidden = net.init_hidden(batch_size)
        self.total = torch.zeros((), device=device)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        t, net = self.t, self.net
        net.train()
        self.hidden = detach(self.hidden)
        self.optimizer.zero_grad()
        group = self.optimizer.param_groups[0]
        base = group["lr"]
        group["lr"] = base * x.shape[0] / t.bptt
        out, self.hidden, rnn_hs, dropped = net(x, self.hidden, return_h=True)
        raw = self.criterion(net.decoder.weight, net.decoder.bias, out, y.reshape(-1))
        loss = raw + t.alpha * dropped[-1].pow(2).mean()
        loss = loss + t.beta * (rnn_hs[-1][1:] - rnn_hs[-1][:-1]).pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, t.clip)
        self.optimizer.step()
        group["lr"] = base
        self.total += raw.data

    @torch.no_grad()
    def evaluate(self, data: torch.Tensor, bptt: int) -> float:
        """Their ``evaluate()``: the loss summed on the device, read once."""
        net = self.net
        net.eval()
        hidden = net.init_hidden(data.shape[1])
        total = 0
        for i in range(0, data.shape[0] - 1, bptt):
            x, y = data[i:i + bptt], data[i + 1:i + 1 + bptt]
            x = x[:y.shape[0]]
            out, hidden = net(x, hidden)
            total += len(x) * self.criterion(net.decoder.weight, net.decoder.bias, out,
                                             y.reshape(-1)).data
            hidden = detach(hidden)
        return total.item() / len(data)


class _Operations(TorchDispatchMode):
    """Counts the operations dispatched inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count_operations(call) -> collections.Counter[str]:
    """The operations one call of ``call(0)`` dispatches (forward, backward, update)."""
    with _Operations() as mode:
        call(0)
    return mode.counts


#: drillbook's MoS made small for a rehearsal on a CPU (the sizes of authors_mos.TINY)
MOS_TINY = ["model.emsize=16", "model.nhid=24", "model.d_out=16",
            "head.options.n_experts=3", "train.bptt=12"]


def mos_side(args, device: torch.device) -> dict:
    """drillbook's MoS step timed here, the authors' in a process like theirs
    (``tools/authors_mos.py``), with and without their per-batch ``gc.collect()``."""
    config = apply_overrides(get_config("ptb/awd-lstm-mos"), [
        "train.log_interval=100000", *(MOS_TINY if args.tiny else []), *args.set])
    torch.manual_seed(config.train.seed)
    with tempfile.TemporaryDirectory() as work:
        ours = LanguageModelTrainer(config, Path(work) / "run", device=str(device), progress=False)
        batches = [b for _, b in zip(range(args.steps), ours.batches(), strict=False)]

        def our_step(i: int) -> None:
            ours.train_step(batches[i % len(batches)])

        timed(our_step, 3, device)  # warm-up
        ms = [1000 * timed(our_step, args.steps, device) for _ in range(args.rounds)]
        ours.check_steps()
        profile = top_kernels(our_step, args.profile, device, args.top) if args.profile \
            else None
        ours.check_steps()
    theirs_out = args.out.with_name(args.out.stem + "-authors-mos.json")
    command = [sys.executable, str(ROOT / "tools" / "authors_mos.py"), "--authors",
               str(args.mos), "--device", str(device), "--steps", str(args.steps),
               "--rounds", str(args.rounds), "--profile", str(args.profile), "--top",
               str(args.top), "--out", str(theirs_out), *(["--tiny"] if args.tiny else [])]
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command, text=True, capture_output=True)
    print(done.stdout + done.stderr, flush=True)
    if done.returncode != 0:
        return {"ours_ms": min(ms), "error": (done.stderr or done.stdout)[-600:]}
    theirs = json.loads(theirs_out.read_text())
    best = theirs["summary"]
    out = {"ours_ms": min(ms), "ours_rounds_ms": ms, "ours_profile": profile,
           "theirs": theirs, "ratio_with_gc": min(ms) / best["with_gc_ms"],
           "ratio_without_gc": min(ms) / best["without_gc_ms"],
           "config": config.to_dict()}
    print(f"\nMoS: drillbook {min(ms):.2f} ms per step; the authors' {best['with_gc_ms']:.2f} "
          f"ms with their per-batch gc.collect() ({out['ratio_with_gc']:.3f} x), "
          f"{best['without_gc_ms']:.2f} ms without it ({out['ratio_without_gc']:.3f} x); "
          f"gc.collect() alone {theirs['gc_collect_ms']:.1f} ms over "
          f"{theirs['tracked_objects']:,} objects in their process")
    if profile:
        print(f"drillbook MoS: {profile['device_ms_per_call']:.2f} ms of kernels per step "
              f"(wall {profile['wall_ms_per_call']:.2f} ms), "
              f"{profile['launches_per_call']:.0f} launches")
        for k in profile["top"]:
            print(f"  {k['ms_per_call']:7.3f} ms  x{k['calls_per_step']:<6.1f} {k['name']}")
    return out


#: what ``--graphed`` turns off in both steps whose losses it compares
NO_DROPOUT = ["model.dropout=0", "model.dropouth=0", "model.dropouti=0", "model.dropoute=0",
              "model.wdrop=0"]


def compare_losses(config, device: torch.device, batches: list, work: Path,
                   corpus) -> dict:
    """The eager and the graphed step, dropout off, from the same weights on the same
    batches (the first four of ``batches``, taken in turn for twelve steps: each window
    length is run eagerly twice, then captured and replayed): their losses step by
    step."""
    config = apply_overrides(config, NO_DROPOUT)
    pool = batches[:4]
    steps = [pool[i % len(pool)] for i in range(12)]
    losses = {}
    for name, graphs in (("eager", False), ("graphed", True)):
        trainer = LanguageModelTrainer(config, work / f"losses-{name}", device=str(device),
                                       corpus=corpus, progress=False, graphs=graphs)
        losses[name] = [float(trainer.train_step(b)) for b in steps]
        trainer.check_steps()
        if graphs:
            replays = trainer.stepper.replays
        trainer.close()
    worst = max(abs(g - e) / abs(e) for e, g in zip(losses["eager"], losses["graphed"],
                                                   strict=True))
    return {**losses, "max_relative_difference": worst, "graphed_replays": replays}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors", type=Path,
                        help="a checkout of salesforce/awd-lstm-lm")
    parser.add_argument("--mos", type=Path, help="a checkout of zihangdai/mos")
    parser.add_argument("--tiny", action="store_true",
                        help="with --mos: both MoS models small (a rehearsal on a CPU)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=100, help="steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--eval-windows", type=int, default=40)
    parser.add_argument("--profile", type=int, default=10, help="steps to profile (0: none)")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="overrides of ptb/awd-lstm for drillbook's side (e.g. "
                             "train.amp=tf32); the authors' side is unchanged")
    parser.add_argument("--graphed", action="store_true",
                        help="also time drillbook's graph-ready step (CUDA graphs on a "
                             "GPU) and compare its losses with the eager step's, dropout "
                             "off")
    parser.add_argument("--out", type=Path, default=Path("authors-step.json"))
    args = parser.parse_args(argv)
    if args.authors is None and args.mos is None:
        parser.error("give --authors (salesforce/awd-lstm-lm), --mos (zihangdai/mos) or both")
    for checkout, name in ((args.authors, "salesforce/awd-lstm-lm"), (args.mos,
                                                                       "zihangdai/mos")):
        if checkout is not None and not (checkout / "model.py").is_file():
            parser.error(f"{checkout} holds no model.py: give a checkout of {name}")
    device = torch.device(args.device)
    doc = {"format": "drillbook-authors-step/1", "environment": environment(str(device)),
           "source": git_state(),
           "settings": {**vars(args), "authors": str(args.authors), "mos": str(args.mos),
                        "out": str(args.out), "threads": torch.get_num_threads(),
                        "omp": os.environ.get("OMP_NUM_THREADS")}}
    if args.authors is not None:
        doc.update(awd_side(args, device))
    if args.mos is not None:
        doc["mos"] = mos_side(args, device)
    write_json(args.out, doc)
    print(f"written: {args.out}")
    return 0


class _Contenders:
    """drillbook's trainer (and its graphed twin, with ``--graphed``) and the authors'
    step on the same batches and validation windows: each step and evaluation a call of
    the step's index, as :func:`timed` takes them."""

    def __init__(self, args, device: torch.device, config, work: Path) -> None:
        self.config = config
        self.ours = LanguageModelTrainer(config, work / "run", device=str(device), progress=False)
        net, criterion = authors_model(args.authors, config, len(self.ours.corpus.vocab),
                                       device)
        self.theirs = AuthorsStep(net, criterion, config, config.train.batch_size, device)
        self.batches = [b for _, b in zip(range(args.steps), self.ours.batches(),
                                          strict=False)]
        self.valid = self.ours.valid_data[:args.eval_windows * config.train.bptt + 1]
        self.graphed = (LanguageModelTrainer(config, work / "graphed", device=str(device),
                                corpus=self.ours.corpus, progress=False, graphs=True)
                        if args.graphed else None)

    def our_step(self, i: int) -> None:
        self.ours.train_step(self.batches[i % len(self.batches)])

    def graphed_step(self, i: int) -> None:
        self.graphed.train_step(self.batches[i % len(self.batches)])

    def their_step(self, i: int) -> None:
        batch = self.batches[i % len(self.batches)]
        self.theirs(batch.x, batch.y)

    def our_eval(self, i: int) -> None:
        evaluate(self.ours.model, self.valid, self.config.train.bptt)

    def their_eval(self, i: int) -> None:
        self.theirs.evaluate(self.valid, self.config.train.bptt)

    def check(self) -> None:
        """Read back the checks of drillbook's steps (and the graphed twin's)."""
        self.ours.check_steps()
        if self.graphed is not None:
            self.graphed.check_steps()


def _warm_up(c: _Contenders, device: torch.device) -> None:
    """cuDNN plans, the allocator; with ``--graphed`` every length of the batches run
    enough to be captured."""
    timed(c.our_step, 10, device)
    timed(c.their_step, 10, device)
    timed(c.our_eval, 1, device)
    if c.graphed is not None:
        timed(c.graphed_step, (c.graphed.stepper.warmup + 1) * len(c.batches), device)
        c.graphed.check_steps()


def _operations(c: _Contenders) -> dict:
    """The operations one training step dispatches, each side's, printed where they
    differ."""
    operations = {"drillbook": count_operations(c.our_step), "authors":
                  count_operations(c.their_step)}
    if c.graphed is not None:
        operations["drillbook-graphed"] = count_operations(c.graphed_step)
        c.graphed.check_steps()
    c.ours.check_steps()
    totals = {name: sum(n.values()) for name, n in operations.items()}
    print(f"operations dispatched by one training step: {totals['drillbook']} "
          f"(drillbook) against {totals['authors']} (authors); where they differ:")
    for op in sorted(set().union(*operations.values()),
                     key=lambda op: operations["authors"][op] - operations["drillbook"][op]):
        a, b = operations["drillbook"][op], operations["authors"][op]
        if a != b:
            print(f"  {op:<28} {a:4d} {b:4d}")
    return operations


def _train_rounds(c: _Contenders, args, device: torch.device) -> list[dict]:
    """Each round: ``--steps`` training steps of each side, timed."""
    rounds = [{"round": r} for r in range(args.rounds)]
    for row in rounds:
        row["ours_train_ms"] = 1000 * timed(c.our_step, args.steps, device)
        row["theirs_train_ms"] = 1000 * timed(c.their_step, args.steps, device)
        c.ours.check_steps()
        if c.graphed is not None:
            row["graphed_train_ms"] = 1000 * timed(c.graphed_step, args.steps, device)
            c.graphed.check_steps()
        print(f"round {row['round']}: train {row['ours_train_ms']:.2f} ms (drillbook) "
              f"against {row['theirs_train_ms']:.2f} ms (authors)"
              + (f", {row['graphed_train_ms']:.2f} ms (drillbook graphed)"
                 if c.graphed is not None else ""), flush=True)
    return rounds


def _train_profiles(c: _Contenders, args, device: torch.device) -> dict:
    """The kernels of ``--profile`` training steps of each side."""
    profiles = {}
    if args.profile:
        contenders = [("drillbook", c.our_step), ("authors", c.their_step)]
        if c.graphed is not None:
            contenders.append(("drillbook-graphed", c.graphed_step))
        for name, call in contenders:
            profiles[name] = top_kernels(call, args.profile, device, args.top)
        c.check()
    return profiles


def _eval_rounds(c: _Contenders, rounds: list[dict], profiles: dict, args,
                 device: torch.device) -> None:
    """An evaluation window of each side, timed in each round (and profiled): last,
    because their WeightDrop, once evaluated, cannot train again on today's torch (in
    eval mode it re-registers the raw weight as a parameter)."""
    for row in rounds:
        row["ours_eval_ms"] = 1000 * timed(c.our_eval, 1, device) / args.eval_windows
        row["theirs_eval_ms"] = 1000 * timed(c.their_eval, 1, device) / args.eval_windows
        print(f"round {row['round']}: eval window {row['ours_eval_ms']:.2f} ms "
              f"(drillbook) against {row['theirs_eval_ms']:.2f} ms (authors)", flush=True)
    if args.profile:
        for name, call in (("drillbook-eval", c.our_eval), ("authors-eval", c.their_eval)):
            profiles[name] = top_kernels(call, 1, device, args.top, args.eval_windows)


def _graphed_summary(c: _Contenders, best: dict, summary: dict, device: torch.device,
                     work: Path) -> dict | None:
    """With ``--graphed``: the graphed step's ratios, and its losses against the eager
    step's (:func:`compare_losses`)."""
    if c.graphed is None:
        return None
    summary["graphed_train_ratio"] = best["graphed_train_ms"] / best["theirs_train_ms"]
    summary["graphed_against_eager"] = best["graphed_train_ms"] / best["ours_train_ms"]
    summary["graphed_lengths"] = len(c.graphed.stepper.graphs)
    c.graphed.close()
    losses = compare_losses(c.config, device, c.batches, work, c.ours.corpus)
    summary["graphed_loss_max_relative_difference"] = losses["max_relative_difference"]
    return losses


def _print_awd(best: dict, summary: dict, losses: dict | None, profiles: dict) -> None:
    print(f"\nfastest round: train {best['ours_train_ms']:.2f} against "
          f"{best['theirs_train_ms']:.2f} ms per step, ratio {summary['train_ratio']:.3f}; "
          f"eval {best['ours_eval_ms']:.2f} against {best['theirs_eval_ms']:.2f} ms per "
          f"window, ratio {summary['eval_ratio']:.3f}")
    if losses is not None:
        print(f"graphed step: {best['graphed_train_ms']:.2f} ms, ratio "
              f"{summary['graphed_train_ratio']:.3f} to the authors' and "
              f"{summary['graphed_against_eager']:.3f} to drillbook's eager step "
              f"({summary['graphed_lengths']} window lengths captured); losses with "
              f"dropout off, graphed against eager, over 12 steps "
              f"({losses['graphed_replays']} replayed): largest relative difference "
              f"{losses['max_relative_difference']:.3g}")
    for name, p in profiles.items():
        unit = "window" if name.endswith("eval") else "step"
        print(f"\n{name}: {p['device_ms_per_call']:.2f} ms of kernels per {unit} "
              f"(wall {p['wall_ms_per_call']:.2f} ms, profiled), "
              f"{p['launches_per_call']:.0f} launches")
        for k in p["top"]:
            print(f"  {k['ms_per_call']:7.3f} ms  x{k['calls_per_step']:<6.1f} {k['name']}")


def awd_side(args, device: torch.device) -> dict:
    """The AWD-LSTM: drillbook's step and evaluation window against the authors', side by
    side in this process (the module notes)."""
    config = apply_overrides(get_config("ptb/awd-lstm"), ["train.log_interval=100000",
                                                          *args.set])
    torch.manual_seed(config.train.seed)
    with tempfile.TemporaryDirectory() as work:
        c = _Contenders(args, device, config, Path(work))
        _warm_up(c, device)
        operations = _operations(c)
        rounds = _train_rounds(c, args, device)
        profiles = _train_profiles(c, args, device)
        _eval_rounds(c, rounds, profiles, args, device)
        best = {k: min(r[k] for r in rounds) for k in rounds[0] if k != "round"}
        summary = {"train_ratio": best["ours_train_ms"] / best["theirs_train_ms"],
                   "eval_ratio": best["ours_eval_ms"] / best["theirs_eval_ms"], **best}
        losses = _graphed_summary(c, best, summary, device, Path(work))
    _print_awd(best, summary, losses, profiles)
    return {"config": config.to_dict(), "rounds": rounds, "summary": summary,
            "operations": {k: dict(v) for k, v in operations.items()}, "profiles": profiles,
            "graphed_losses": losses}


if __name__ == "__main__":
    sys.exit(main())
