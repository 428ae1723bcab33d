"""The project's cost targets, checked against measured reports, and the report tables.

The targets are the project's own bookkeeping, not a result of the papers: ratios it set
itself for DRILL, MoS and vMF against a tied head or a softmax (:data:`TARGETS`).
``drillbook bench targets`` measures what they need and prints the verdicts
(:func:`format_report`); :func:`render_targets` writes the same verdicts on the committed
reports as Markdown, the section ``drillbook report`` adds to ``REPORT.md``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ...provenance import environment
from .measure import BENCH_FORMAT
from .model import run_model_bench
from .sweep import vocab_sweep

__all__ = ["TARGETS", "Target", "evaluate_targets", "format_report", "render_targets",
           "run_targets"]


@dataclass(frozen=True)
class Target:
    """One cost target: a row field of a ``model`` or ``sweep`` report against a threshold.

    Attributes:
        target: what it says, in words.
        mode: the report it reads (``"model"``: behind an encoder, ``"sweep"``: vMF vs
            softmax).
        name: the row's head name.
        field: the row field compared (``train_ratio``, ``decode_speedup``, ...).
        op: ``"<="``, ``">="``, or ``"record"`` (measured is enough).
        threshold: the bound (None for ``"record"``).
        size: the vocabulary size name a ``model`` row must have.
        encoders: configs whose encoder counts (without overrides).
        vocab_size: the ``V`` a ``sweep`` row must have.
        gpu: the target is stated for a GPU.
        requires: ``(setting, value)`` pairs the report's settings must have (the sweep's
            feature size and table width).
    """

    target: str
    mode: str
    name: str
    field: str
    op: str
    threshold: float | None
    size: str | None = None
    encoders: tuple[str, ...] = ()
    vocab_size: int | None = None
    gpu: bool = False
    requires: tuple[tuple[str, object], ...] = ()


_PTB, _WT2 = ("ptb/awd-lstm",), ("wt2/awd-lstm", "ptb/awd-lstm")
#: the vMF paper's IWSLT decoder: a 1024-d state, a 300-d table; the heads as they are,
#: not through torch.compile
_VMF = (("d", 1024), ("dim", 300), ("compile", False))
#: the value of a setting in reports written before the setting existed
_SETTING_BEFORE = {"compile": False}

#: the targets of issue 7 (ratios to the tied head, same encoder, same run)
TARGETS: tuple[Target, ...] = (
    Target("DRILL-4 train step / tied (AWD-LSTM, PTB)", "model", "drill-4", "train_ratio",
           "<=", 1.10, size="ptb", encoders=_PTB, gpu=True),
    Target("DRILL-4 eval per token / tied, cached labels (AWD-LSTM, PTB)", "model",
           "drill-4", "eval_ratio", "<=", 1.02, size="ptb", encoders=_PTB, gpu=True),
    Target("MoS-15 train step / tied (AWD-LSTM, PTB)", "model", "mos-15", "train_ratio",
           "<=", 1.8, size="ptb", encoders=_PTB, gpu=True),
    Target("MoS-15 train step / tied (AWD-LSTM, WikiText-2)", "model", "mos-15",
           "train_ratio", "<=", 3.0, size="wt2", encoders=_WT2, gpu=True),
    Target("MoS-15 in chunks of 256 (the WikiText-2 config): peak bytes of a training "
           "step at batch 80 x 70, under a T4's 15 GB", "model", "mos-15-chunk256",
           "peak_bytes", "<=", 15e9, size="wt2", encoders=("wt2/awd-lstm",), gpu=True),
    Target("DOC-15+5 in chunks of 256 (the WikiText-2 config): peak bytes of a training "
           "step at batch 80 x 70, under a T4's 15 GB", "model", "doc-15+5-chunk256",
           "peak_bytes", "<=", 15e9, size="wt2", encoders=("wt2/awd-lstm",), gpu=True),
    Target("vMF-300 train step speed-up over softmax (V=50k)", "sweep", "vmf-300",
           "train_speedup", ">=", 3.0, vocab_size=50_000, requires=_VMF),
    Target("vMF-300 decoding speed-up over softmax greedy (V=50k)", "sweep", "vmf-300",
           "decode_speedup", ">=", 1.0, vocab_size=50_000, requires=_VMF),
    Target("ptb/awd-lstm training throughput, tokens/s (tied)", "model", "tied",
           "tokens_per_s", "record", None, size="ptb", encoders=_PTB),
)

_OPS = {"<=": operator.le, ">=": operator.ge}


def _reports(reports: Sequence[dict]) -> Iterator[dict]:
    for report in reports:
        if report.get("mode") == "targets":
            yield from _reports(report.get("reports", []))
        else:
            yield report


def _find(target: Target, reports: Sequence[dict]) -> tuple[dict | None, str]:
    """The last matching row, or None and why nothing matched."""
    found, why = None, "not measured"
    for report in _reports(reports):
        if report.get("mode") != target.mode:
            continue
        settings = report.get("settings", {})
        if target.mode == "model" and settings.get("encoder") not in target.encoders:
            continue
        if target.mode == "model" and settings.get("overrides"):
            why = (f"not measured: only with overrides {settings['overrides']} (not the "
                   f"target's model)")
            continue
        wrong = [f"{k}={settings.get(k, _SETTING_BEFORE.get(k))}" for k, v in target.requires
                 if settings.get(k, _SETTING_BEFORE.get(k)) != v]
        if wrong:
            why = (f"not measured: only with {', '.join(wrong)}; the target needs "
                   f"{', '.join(f'{k}={v}' for k, v in target.requires)}")
            continue
        for row in report.get("rows", []):
            if (row.get("name") == target.name
                    and (target.size is None or row.get("size") == target.size)
                    and (target.vocab_size is None or row.get("vocab_size") == target.vocab_size)):
                found = row
    return found, why


def _detail(row: dict, report_mode: str) -> str:
    if report_mode == "model":
        return (f"{1e3 * row['train_step_s']:.1f} ms/step, {row['encoder']}, batch "
                f"{row['batch_size']} x bptt {row['bptt']}, {row['precision']}")
    return (f"train {1e3 * row['train_step_s']:.1f} ms, decode "
            f"{1e6 * row['decode_token_s']:.2f} us/token ({row['decode_positions']} at once), "
            f"d={row['d']}, {row['precision']}")


def evaluate_targets(reports: Sequence[dict], targets: Sequence[Target] = TARGETS) -> list[dict]:
    """Check each target against the measured reports (later reports win).

    Args:
        reports: ``model`` and ``sweep`` reports (:func:`~.model.run_model_bench`,
            :func:`~.sweep.vocab_sweep`), or ``targets`` reports holding them.
        targets: what to check (default: :data:`TARGETS`).

    Returns:
        one dict per target: ``target``, ``measured`` (the value, or None),
        ``threshold``, ``op``, ``met`` (True/False; None when not measured: no matching
        row, only overridden models, a skipped row, or no baseline), ``device`` and a
        ``note`` (what was measured, or why not; a CPU measurement of a GPU target is
        flagged).
    """
    out = []
    for target in targets:
        row, why = _find(target, reports)
        result = {"target": target.target, "measured": None, "threshold": target.threshold,
                  "op": target.op, "met": None, "device": None, "note": why}
        if row is not None:
            value = row.get(target.field)
            result["device"] = row.get("device")
            if "skipped" in row:
                result["note"] = f"not measured: {row['skipped']}"
            elif value is None:
                result["note"] = ("not measured: peak memory is measured on CUDA only"
                                  if target.field == "peak_bytes" else
                                  "not measured: the baseline was skipped")
            else:
                result["measured"] = value
                result["met"] = (True if target.op == "record"
                                 else bool(_OPS[target.op](value, target.threshold)))
                result["note"] = _detail(row, target.mode)
                if target.gpu and not str(row.get("device", "")).startswith("cuda"):
                    result["note"] += "; measured on CPU, the target is stated for a GPU"
        out.append(result)
    return out


def run_targets(*, device: str = "cpu", repeats: int = 5, warmup: int = 2,
                precision: str = "fp32", overrides: Sequence[str] = (),
                batch_size: int | None = None, bptt: int | None = None, d: int = 1024,
                tokens: int = 1400, decode_positions: int | None = None,
                max_seconds: float | None = None) -> dict:
    """Measure what :data:`TARGETS` need and check them.

    ``tied``, ``drill-4`` and ``mos-15`` behind the ``ptb/awd-lstm`` encoder at the PTB
    size; ``tied``, ``mos-15`` and the chunked mixtures of the WikiText-2 configs
    (``mos-15-chunk256``, ``doc-15+5-chunk256``) behind ``wt2/awd-lstm`` at the WikiText-2
    size; the vMF
    sweep at ``V = 50,000`` (``d``, ``tokens``, ``decode_positions``). ``overrides``,
    ``batch_size`` and ``bptt`` go to both encoders (overridden models do not count for
    the targets).

    Returns a JSON-ready dict: ``format``, ``mode`` (``"targets"``), ``environment``,
    ``settings``, ``reports`` (the three measured reports) and ``targets``
    (:func:`evaluate_targets`).
    """
    common = {"device": device, "repeats": repeats, "warmup": warmup, "precision": precision}
    encoder = {**common, "overrides": list(overrides), "batch_size": batch_size, "bptt": bptt}
    reports = [
        run_model_bench(["tied", "drill-4", "mos-15"], ["ptb"], encoder_config="ptb/awd-lstm",
                        **encoder),
        run_model_bench(["tied", "mos-15", "mos-15-chunk256", "doc-15+5-chunk256"], ["wt2"],
                        encoder_config="wt2/awd-lstm", **encoder),
        vocab_sweep((50_000,), d=d, tokens=tokens, decode_positions=decode_positions,
                    max_seconds=max_seconds, **common),
    ]
    return {"format": BENCH_FORMAT, "mode": "targets", "environment": environment(device),
            "settings": {**encoder, "d": d, "tokens": tokens,
                         "decode_positions": decode_positions, "max_seconds": max_seconds},
            "reports": reports, "targets": evaluate_targets(reports)}


# ------------------------------------------------------------------ tables
def _num(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{scale * value:.{digits}f}"


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines = [" ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += [" ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _cells(row: dict, columns: Sequence[tuple[str, str, object]]) -> list[str]:
    if "skipped" in row:
        return [str(row.get(key, "")) if i < 2 else ("skipped" if i == 2 else "")
                for i, (_, key, _) in enumerate(columns)]
    return [fmt(row.get(key)) if callable(fmt) else str(row.get(key))
            for _, key, fmt in columns]


_HEADS = [("head", "name", None), ("size", "size", None),
          ("train ms", "train_step_s", lambda v: _num(v, 1e3)),
          ("eval us/tok", "eval_token_s", lambda v: _num(v, 1e6)),
          ("train x", "train_ratio", _num), ("eval x", "eval_ratio", _num),
          ("saved MB", "saved_bytes", _mb), ("params MB", "param_bytes", _mb),
          ("peak MB", "peak_bytes", _mb)]
_MODEL = [*_HEADS[:3], ("tok/s", "tokens_per_s", lambda v: _num(v, digits=0)), *_HEADS[3:]]
_STEP = [("config", "config", None), ("head", "head", None), ("step", "step", None),
         ("batch", "batch_size", None), ("bptt", "bptt", None),
         ("train ms", "train_step_s", lambda v: _num(v, 1e3)),
         ("tok/s", "tokens_per_s", lambda v: _num(v, digits=0)), ("x", "ratio", _num),
         ("x min", "ratio_min", _num), ("x max", "ratio_max", _num)]
_SWEEP = [("V", "vocab_size", None), ("head", "name", None),
          ("train ms", "train_step_s", lambda v: _num(v, 1e3)),
          ("decode us/tok", "decode_token_s", lambda v: _num(v, 1e6)),
          ("train speedup", "train_speedup", _num), ("decode speedup", "decode_speedup", _num),
          ("saved MB", "saved_bytes", _mb), ("params MB", "param_bytes", _mb),
          ("buffers MB", "buffer_bytes", _mb), ("peak MB", "peak_bytes", _mb)]


def _verdict_cells(r: dict) -> list[str]:
    """target, measured, threshold, met, device, note of one :func:`evaluate_targets` row."""
    return [r["target"], "-" if r["measured"] is None else f"{r['measured']:.3g}",
            "" if r["threshold"] is None else f"{r['op']} {r['threshold']:g}",
            {True: "yes", False: "NO", None: "not measured"}[r["met"]], r["device"] or "-",
            r["note"]]


_VERDICT_HEADER = ["target", "measured", "threshold", "met", "device", "note"]


def _targets_table(rows: Sequence[dict]) -> str:
    body = [_verdict_cells(r) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(_VERDICT_HEADER)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(_VERDICT_HEADER, widths,
                                                   strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)).rstrip()
              for b in body]
    return "\n".join(lines)


def render_targets(reports: Sequence[dict], targets: Sequence[Target] = TARGETS,
                   heading: str = "## Cost targets") -> str:
    """Markdown: each target checked against ``reports`` (:func:`evaluate_targets`), with
    what was measured and on which device, or why it was not, under ``heading``."""
    rows = evaluate_targets(reports, targets)
    lines = [heading, "",
             "The cost targets the project set itself, as ratios measured in one process "
             "(`drillbook bench targets` measures what they need), checked against the "
             "committed benchmark reports in `bench/`. A target nobody has measured says "
             "so; a target stated for a GPU but measured on a CPU is flagged in its note.",
             "", "| " + " | ".join(_VERDICT_HEADER) + " |",
             "|" + "---|" * len(_VERDICT_HEADER)]
    lines += ["| " + " | ".join(c or "-" for c in _verdict_cells(r)) + " |" for r in rows]
    return "\n".join([*lines, ""])


def format_report(report: dict) -> str:
    """The terminal table of a report (``heads``, ``model``, ``step``, ``sweep`` or
    ``targets``).

    Raises:
        ValueError: a dict that is not a benchmark report of this package's format.
    """
    mode = report.get("mode")
    if report.get("format") != BENCH_FORMAT or mode not in ("heads", "model", "step",
                                                             "sweep", "targets"):
        raise ValueError(f"not a {BENCH_FORMAT} report (format {report.get('format')!r}, "
                         f"mode {mode!r}); produce one with drillbook bench")
    if mode == "targets":
        parts = [format_report(r) for r in report["reports"]]
        return "\n\n".join([*parts, _targets_table(report["targets"])])
    columns = {"heads": _HEADS, "model": _MODEL, "step": _STEP, "sweep": _SWEEP}[mode]
    title = ""
    if mode == "step":
        s = report["settings"]
        title = (f"a whole training step ({s['timed']}); V = {report['rows'][0]['vocab_size']}"
                 f"{', ' + ' '.join(s['overrides']) if s['overrides'] else ''}, "
                 f"{s['precision']}, {s['device']}, {s.get('clock', 'wall')} clock; "
                 f"{s['rounds']} rounds x {s['repeats']} "
                 f"steps interleaved; x = mean / {s['baseline']}, x min/max: per round\n")
    if mode == "model":
        s = report["settings"]
        title = (f"encoder {s['encoder']}{' ' + ' '.join(s['overrides']) if s['overrides'] else ''}"
                 f", batch {s['batch_size']} x bptt {s['bptt']}, {s['precision']}, "
                 f"{s['device']}\n")
    rows = [_cells(r, columns) for r in report["rows"]]
    notes = [f"  {r['name']} {r.get('size', r.get('vocab_size'))}: {r['skipped']}"
             for r in report["rows"] if "skipped" in r]
    return title + _table([c[0] for c in columns], rows) + "".join("\n" + n for n in notes)
