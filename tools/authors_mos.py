"""The authors' MoS training step (``zihangdai/mos``), timed in a process shaped like theirs,
with and without the ``gc.collect()`` their training loop calls after every small batch.

    python tools/authors_mos.py --authors ../mos --device cuda --out mos-step.json

Their ``main.py`` imports torch, numpy and their own modules, reads the corpus with their
``data.Corpus``, builds ``model.RNNModel`` and trains in ``train()``, whose loop calls
``gc.collect()`` after the backward pass of every small batch (``--small_batch_size``; the
logged PTB command has ``batch_size = small_batch_size = 12``: once per step). A full
collection walks every object the process tracks, on the host, however fast the GPU is.

This script is that process and no more: it imports torch, numpy and their ``data`` and
``model`` modules from ``--authors`` (unmodified; drillbook is not imported, so the
objects the collector walks are those of a process like theirs), reads Penn Treebank with
their ``Corpus``, builds their model at the logged command's sizes (or ``--tiny`` ones),
and drives it as their ``train()`` does: a window length drawn as they draw it, the
learning rate scaled by it, the hidden state of each small batch detached, their forward
pass, NLL of their log-probabilities, AR and TAR on the last layer, the loss scaled by the
small batch's share, backward, ``gc.collect()``, clipping, SGD. The loop body is written
here (their ``main.py`` trains as soon as it is imported); it calls the collector through
this module's name ``gc``, and the run "without" replaces ``gc.collect`` in this module's
namespace by a function that does nothing, and changes nothing else. Rounds of ``--steps``
steps alternate with and without; it also times ``gc.collect()`` alone, counts the objects
the collector tracks, and (``--profile N``) profiles N steps of each way, listing the
kernels that take most device time and the host time of the collector.

Prints the milliseconds per step both ways and the share of a step the collector takes;
writes everything to ``--out`` (JSON). ``tools/authors_step.py --mos CHECKOUT`` runs it as
a child process beside drillbook's own MoS step.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch

#: the logged command of the authors' MoS on PTB (their README; the H200 window's log)
LOGGED = {"emsize": 280, "nhid": 960, "nhidlast": 620, "nlayers": 3, "dropout": 0.4,
          "dropouth": 0.225, "dropouti": 0.4, "dropoute": 0.1, "dropoutl": 0.29,
          "wdrop": 0.5, "n_experts": 15, "batch_size": 12, "small_batch_size": 12,
          "bptt": 70, "lr": 20.0, "clip": 0.25, "alpha": 2.0, "beta": 1.0,
          "wdecay": 1.2e-6, "max_seq_len_delta": 40, "seed": 28}
#: a size for a rehearsal on a CPU (the same code, a small model)
TINY = {"emsize": 16, "nhid": 24, "nhidlast": 16, "n_experts": 3, "bptt": 12}

_REAL_COLLECT = gc.collect


def _nothing(generation: int = 2) -> int:
    """What ``gc.collect`` becomes for the run without the per-batch collection."""
    return 0


def their_modules(authors: Path):
    """Their ``data`` and ``model`` modules, imported from the checkout as they are."""
    sys.path.insert(0, str(authors))
    import data as their_data
    import model as their_model

    return their_data, their_model


def their_corpus(their_data, ptb: Path):
    """Their ``Corpus`` of Penn Treebank (it reads ``train.txt``, ``valid.txt``,
    ``test.txt``: linked here to the ``ptb.*.txt`` files of ``ptb``)."""
    folder = Path(tempfile.mkdtemp(prefix="penn-"))
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").symlink_to((ptb / f"ptb.{split}.txt").resolve())
    return their_data.Corpus(str(folder))


def batchify(data: torch.Tensor, bsz: int, device) -> torch.Tensor:
    """Their ``utils.batchify``: ``bsz`` columns of the token stream, on the device."""
    n = data.size(0) // bsz
    return data.narrow(0, 0, n * bsz).view(bsz, -1).t().contiguous().to(device)


def detach(h):
    """Their ``repackage_hidden``."""
    return h.detach() if isinstance(h, torch.Tensor) else tuple(detach(v) for v in h)


class TheirTrain:
    """The body of their ``train()`` loop, one batch per call."""

    def __init__(self, model, train_data: torch.Tensor, s: dict) -> None:
        self.model, self.data, self.s = model, train_data, s
        self.optimizer = torch.optim.SGD(model.parameters(), lr=s["lr"],
                                         weight_decay=s["wdecay"])
        parts = s["batch_size"] // s["small_batch_size"]
        self.hidden = [model.init_hidden(s["small_batch_size"]) for _ in range(parts)]
        self.i = 0
        self.total = torch.zeros((), device=train_data.device)
        self.rng = np.random.default_rng(s["seed"])  # their window lengths' distribution

    def __call__(self, _: int = 0) -> None:
        s, model = self.s, self.model
        if self.i >= self.data.size(0) - 2 - s["bptt"] - s["max_seq_len_delta"]:
            self.i = 0
        bptt = s["bptt"] if self.rng.random() < 0.95 else s["bptt"] / 2.0
        seq_len = max(5, int(self.rng.normal(bptt, 5)))
        seq_len = min(seq_len, s["bptt"] + s["max_seq_len_delta"])
        group = self.optimizer.param_groups[0]
        lr = group["lr"]
        group["lr"] = lr * seq_len / s["bptt"]
        model.train()
        data = self.data[self.i:self.i + seq_len]
        targets = self.data[self.i + 1:self.i + 1 + seq_len]
        self.optimizer.zero_grad()
        start, end, part = 0, s["small_batch_size"], 0
        while start < s["batch_size"]:
            x = data[:, start:end]
            y = targets[:, start:end].contiguous().view(-1)
            self.hidden[part] = detach(self.hidden[part])
            log_prob, self.hidden[part], rnn_hs, dropped = model(x, self.hidden[part],
                                                                 return_h=True)
            raw = torch.nn.functional.nll_loss(log_prob.view(-1, log_prob.size(2)), y)
            loss = raw + s["alpha"] * dropped[-1].pow(2).mean()
            loss = loss + s["beta"] * (rnn_hs[-1][1:] - rnn_hs[-1][:-1]).pow(2).mean()
            loss = loss * (s["small_batch_size"] / s["batch_size"])
            self.total += raw.data * s["small_batch_size"] / s["batch_size"]
            loss.backward()
            part, start, end = part + 1, end, end + s["small_batch_size"]
            gc.collect()  # theirs, after every small batch
        torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip"])
        self.optimizer.step()
        group["lr"] = lr
        self.i += seq_len


def with_collect(collect) -> None:
    """Bind ``gc.collect`` in this module's namespace (the real one, or :func:`_nothing`)."""
    globals()["gc"] = types.SimpleNamespace(collect=collect, get_objects=_GC.get_objects)


_GC = gc


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call, n: int, device: torch.device) -> float:
    """Seconds per call over ``n`` calls, the device caught up at both ends."""
    sync(device)
    began = time.perf_counter()
    for i in range(n):
        call(i)
    sync(device)
    return (time.perf_counter() - began) / n


#: what the CUDA profiler records about itself, not kernels
PROFILER_RECORDS = {"Command Buffer Full", "Activity Buffer Request", "Buffer Flush"}


def top_kernels(call, n: int, device: torch.device, top: int, per: int = 1,
                host: tuple[str, ...] = ()) -> dict:
    """Profile ``n`` calls: the kernels' time, the wall time and the launches per unit
    (a call holds ``per`` units: evaluation windows), the ``top`` kernels, and the host
    time of the ``host`` regions (``record_function`` names) per unit. Kernel time close to
    the wall time means the device is busy throughout: nothing to gain from launching
    faster (CUDA graphs)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if device.type == "cuda" else [])
    sync(device)
    with profile(activities=activities) as prof:
        began = time.perf_counter()
        for i in range(n):
            call(i)
        sync(device)
        wall = time.perf_counter() - began
    events = prof.key_averages()
    n = n * per
    use_device = device.type == "cuda"

    def device_us(e) -> float:
        return e.self_device_time_total if use_device else e.self_cpu_time_total

    def is_kernel(e) -> bool:  # on a GPU: work the device did, not the host ops that
        # launched it (they carry its time too) nor the profiler's own records
        if e.key in host:
            return False
        if not use_device:
            return device_us(e) > 0
        return (e.device_type.name == "CUDA" and device_us(e) > 0
                and e.key not in PROFILER_RECORDS)

    kernels = sorted((e for e in events if is_kernel(e)), key=device_us, reverse=True)
    total = sum(device_us(e) for e in kernels)
    out = {"device_ms_per_call": total / 1000 / n, "wall_ms_per_call": 1000 * wall / n,
           "launches_per_call": sum(e.count for e in kernels) / n,
           "top": [{"name": e.key[:90], "ms_per_call": device_us(e) / 1000 / n,
                    "calls_per_step": e.count / n} for e in kernels[:top]]}
    if host:
        out["host_ms_per_call"] = {name: sum(e.cpu_time_total for e in events
                                             if e.key == name) / 1000 / n for name in host}
    return out


def profile_steps(call, n: int, device: torch.device, top: int) -> dict:
    """:func:`top_kernels` of ``n`` of their steps, the collector's host time apart."""
    from torch.profiler import record_function

    collect = gc.collect

    def recorded(generation: int = 2) -> int:
        with record_function("gc.collect"):
            return collect(generation)

    with_collect(recorded)
    try:
        return top_kernels(call, n, device, top, host=("gc.collect",))
    finally:
        with_collect(collect)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--authors", type=Path, required=True,
                        help="a checkout of zihangdai/mos")
    parser.add_argument("--data", type=Path, default=None,
                        help="the folder of ptb.train.txt, ptb.valid.txt, ptb.test.txt "
                             "(default: $DRILLBOOK_DATA/ptb)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=50, help="steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--collects", type=int, default=20,
                        help="gc.collect() calls timed alone")
    parser.add_argument("--profile", type=int, default=10, help="steps to profile (0: none)")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--tiny", action="store_true",
                        help="a small model (a rehearsal on a CPU); the loop is the same")
    parser.add_argument("--out", type=Path, default=Path("authors-mos.json"))
    return parser


def _their_step(authors: Path, ptb: Path, s: dict, device: torch.device) -> TheirTrain:
    """Their MoS model and training step on PTB, warmed up."""
    torch.manual_seed(s["seed"])
    their_data, their_model = their_modules(authors.resolve())
    corpus = their_corpus(their_data, ptb)
    train_data = batchify(corpus.train, s["batch_size"], device)
    model = their_model.RNNModel("LSTM", len(corpus.dictionary), s["emsize"], s["nhid"],
                                 s["nhidlast"], s["nlayers"], s["dropout"], s["dropouth"],
                                 s["dropouti"], s["dropoute"], s["wdrop"], True,
                                 s["dropoutl"], s["n_experts"]).to(device)
    step = TheirTrain(model, train_data, s)
    timed(step, 3, device)  # warm-up: cuDNN plans, the allocator
    return step


def _collect_alone(collects: int) -> tuple[int, float]:
    """The objects the collector tracks in a process like theirs, and the milliseconds
    of one ``gc.collect()`` alone."""
    tracked = len(gc.get_objects())
    began = time.perf_counter()
    for _ in range(collects):
        _REAL_COLLECT()
    collect_ms = 1000 * (time.perf_counter() - began) / collects
    print(f"a process like theirs: {tracked:,} objects tracked by the collector; "
          f"gc.collect() alone {collect_ms:.1f} ms", flush=True)
    return tracked, collect_ms


def _rounds(step: TheirTrain, args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Each round: their step with their per-batch ``gc.collect()``, then without."""
    rounds = []
    for r in range(args.rounds):
        row = {"round": r}
        with_collect(_REAL_COLLECT)
        row["with_gc_ms"] = 1000 * timed(step, args.steps, device)
        with_collect(_nothing)
        row["without_gc_ms"] = 1000 * timed(step, args.steps, device)
        with_collect(_REAL_COLLECT)
        rounds.append(row)
        print(f"round {r}: {row['with_gc_ms']:.2f} ms per step with their gc.collect(), "
              f"{row['without_gc_ms']:.2f} ms without", flush=True)
    return rounds


def _profiles(step: TheirTrain, args: argparse.Namespace, device: torch.device) -> dict:
    """Their step's kernels profiled with their ``gc.collect()`` and without."""
    profiles = {}
    if args.profile:
        profiles["with-gc"] = profile_steps(step, args.profile, device, args.top)
        with_collect(_nothing)
        profiles["without-gc"] = profile_steps(step, args.profile, device, args.top)
        with_collect(_REAL_COLLECT)
    return profiles


def _print_profiles(profiles: dict) -> None:
    for name, p in profiles.items():
        print(f"\n{name}: {p['device_ms_per_call']:.2f} ms of kernels per step (wall "
              f"{p['wall_ms_per_call']:.2f} ms, profiled; gc.collect "
              f"{p['host_ms_per_call']['gc.collect']:.2f} ms), "
              f"{p['launches_per_call']:.0f} launches")
        for k in p["top"]:
            print(f"  {k['ms_per_call']:7.3f} ms  x{k['calls_per_step']:<6.1f} {k['name']}")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not (args.authors / "model.py").is_file():
        parser.error(f"{args.authors} holds no model.py: give a checkout of zihangdai/mos")
    ptb = args.data or Path(os.environ.get("DRILLBOOK_DATA", "data")) / "ptb"
    if not (ptb / "ptb.train.txt").is_file():
        parser.error(f"{ptb} holds no ptb.train.txt: give --data FOLDER (or set "
                     f"DRILLBOOK_DATA)")
    s = {**LOGGED, **(TINY if args.tiny else {})}
    device = torch.device(args.device)
    step = _their_step(args.authors, ptb, s, device)
    tracked, collect_ms = _collect_alone(args.collects)
    rounds = _rounds(step, args, device)
    best = {k: min(r[k] for r in rounds) for k in ("with_gc_ms", "without_gc_ms")}
    share = 1 - best["without_gc_ms"] / best["with_gc_ms"]
    profiles = _profiles(step, args, device)
    print(f"\nfastest round: {best['with_gc_ms']:.2f} ms per step with their per-batch "
          f"gc.collect(), {best['without_gc_ms']:.2f} ms without: the collector takes "
          f"{100 * share:.0f}% of their step ({collect_ms:.1f} ms per call alone)")
    _print_profiles(profiles)
    doc = {"format": "drillbook-authors-mos/1", "device": str(device),
           "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                           else "cpu"),
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "settings": {**s, "steps": args.steps, "rounds": args.rounds, "tiny": args.tiny,
                        "authors": str(args.authors), "collects": args.collects},
           "tracked_objects": tracked, "gc_collect_ms": collect_ms, "rounds": rounds,
           "summary": {**best, "gc_share": share}, "profiles": profiles,
           "loss_finite": bool(math.isfinite(float(step.total)))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(args.out)  # whole or not at all
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
