"""What a head costs behind the AWD-LSTM encoder: a training step as the trainer takes it,
evaluation per token as :func:`drillbook.train.evaluate` runs it, ratios to a tied head with
the same encoder, in the same process."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from ...configs import Config, ConfigError, HeadConfig, apply_overrides, get_config
from ...heads import HEADS
from ...models import build_model
from ...precision import autocast
from ...provenance import environment
from ...train.lm import training_loss
from .heads import BENCH_HEADS, SIZES, check_names, fit_layers, head_bytes
from .measure import (
    BENCH_FORMAT,
    add_ratios,
    amp_of,
    free_memory,
    is_out_of_memory,
    log,
    out_of_memory_note,
    step_costs,
)

__all__ = ["ModelCost", "bench_config", "compare_models", "model_cost", "run_model_bench"]


@dataclass(frozen=True)
class ModelCost:
    """One head's cost behind an encoder.

    Attributes:
        name, kind, options: the :data:`~.heads.BENCH_HEADS` entry measured.
        encoder, overrides: the named config whose encoder (and AR/TAR weights) was used,
            and the ``key=value`` overrides applied to it.
        size, vocab_size: the :data:`~.heads.SIZES` name and ``V``.
        batch_size, bptt: the training batch, ``(bptt, batch_size)`` word ids.
        eval_batch_size: the evaluation batch, ``(bptt, eval_batch_size)``.
        train_step_s: seconds of a training step (forward, loss, regulariser, backward;
            :func:`~.measure.time_call`).
        eval_token_s: seconds per evaluated token.
        tokens_per_s: training throughput, ``batch_size * bptt / train_step_s``.
        saved_bytes: what autograd keeps for backward in a training step (parameters and
            buffers excluded), :func:`~.measure.saved_bytes`.
        peak_bytes: peak CUDA memory over the training steps (None on CPU).
        param_bytes, buffer_bytes: the head's own parameters and buffers.
        model_param_bytes: every parameter of the model.
        precision, device: how and where it ran.
    """

    name: str
    kind: str
    options: dict
    encoder: str
    overrides: list
    size: str
    vocab_size: int
    batch_size: int
    bptt: int
    eval_batch_size: int
    train_step_s: float
    eval_token_s: float
    tokens_per_s: float
    saved_bytes: int
    peak_bytes: int | None
    param_bytes: int
    buffer_bytes: int
    model_param_bytes: int
    precision: str
    device: str

    def to_dict(self) -> dict:
        return asdict(self)


def bench_config(encoder: str, overrides: Sequence[str] = ()) -> Config:
    """The named config with ``key=value`` overrides (e.g. ``model.nhid=16``) applied.

    Raises:
        ConfigError: unknown config name or override (the message lists the valid ones),
            or a translation config.
    """
    config = get_config(encoder)
    if not isinstance(config, Config):  # the language model's config class
        raise ConfigError(f"{encoder} is a {config.task} config; the benchmark puts heads "
                          f"behind a language model's encoder: choose a language-model "
                          f"config (`drillbook configs`)")
    return apply_overrides(config, overrides if isinstance(overrides, dict | str)
                           else list(overrides))  # (a lone string: refused there)


def model_cost(name: str, size: str, *, encoder_config: str = "ptb/awd-lstm",
               overrides: Sequence[str] = (), batch_size: int | None = None,
               bptt: int | None = None, eval_batch_size: int | None = None,
               device: str | torch.device = "cpu", repeats: int = 5, warmup: int = 2,
               precision: str = "fp32", seed: int = 0, fused: bool = False) -> ModelCost:
    """Measure one head behind the encoder of a named config, on random word ids.

    The model is ``build_model`` of the config with its head replaced by
    ``BENCH_HEADS[name]`` (DOC's ``vectors_per_layer`` fitted to the encoder's layers) at
    vocabulary ``SIZES[size]``. A training step is what ``LanguageModelTrainer`` does up to the
    optimiser: forward from a fresh recurrent state, the head's loss, its regulariser,
    AWD-LSTM's AR (``train.alpha``) and TAR (``train.beta``) terms, backward. Gradient
    clipping and the optimiser step are *not* timed (they cost the same for every head
    of the same size). Evaluation is eval mode under ``torch.no_grad()``, so DRILL's and
    the dual head's label encodings come from their cache, as in ``evaluate``.

    Args:
        name: a :data:`~.heads.BENCH_HEADS` name.
        size: a :data:`~.heads.SIZES` name.
        encoder_config: the config that gives the encoder, batch sizes, BPTT length and
            AR/TAR weights (``"tutorial/ptb-tied"`` for a CPU-sized one).
        overrides: ``key=value`` changes to it (``model.nhid=16``).
        batch_size, bptt, eval_batch_size: default: the config's ``train`` values.
        precision: ``"fp32"``, or ``"bf16"`` for autocast around forward and loss.
        fused: as for :func:`~.heads.head_cost` (default False: the plain path).
    """
    check_names([name], [size])
    device = torch.device(device)
    amp_of(precision)  # checks the precision before any work
    config = bench_config(encoder_config, overrides)
    kind, options = BENCH_HEADS[name]
    config.head = HeadConfig(kind, fit_layers(options, config.model.nlayers + 1))
    vocab_size, t = SIZES[size], config.train
    batch, bptt = batch_size or t.batch_size, bptt or t.bptt
    eval_batch = eval_batch_size or t.eval_batch_size
    torch.manual_seed(seed)  # the same encoder weights for every head
    model = build_model(config, vocab_size).to(device)
    head = model.head
    head.fused_loss = fused  # True: fused on every device, a GPU included
    gen = torch.Generator().manual_seed(seed)
    train_ids = torch.randint(0, vocab_size, (bptt + 1, batch), generator=gen).to(device)
    eval_ids = torch.randint(0, vocab_size, (bptt + 1, eval_batch), generator=gen).to(device)

    def loss_fn() -> Tensor:  # LanguageModelTrainer._train_step up to the optimiser
        with autocast(amp_of(precision), device):
            loss, _, _ = training_loss(model, train_ids[:-1], train_ids[1:],
                                       model.init_hidden(batch), alpha=t.alpha, beta=t.beta)
        return loss

    def eval_fn() -> None:  # evaluate(): eval mode, no grad, the head's loss
        with autocast(amp_of(precision), device):
            out = model(eval_ids[:-1], model.init_hidden(eval_batch))
            head.loss(out.features, eval_ids[1:])

    cost = step_costs(model, loss_fn, eval_fn, device, repeats=repeats, warmup=warmup)
    params, buffers = head_bytes(head)
    return ModelCost(
        name=name, kind=kind, options=dict(config.head.options), encoder=encoder_config,
        overrides=list(overrides), size=size, vocab_size=vocab_size, batch_size=batch,
        bptt=bptt, eval_batch_size=eval_batch, train_step_s=cost["train_step_s"],
        eval_token_s=cost["eval_s"] / (bptt * eval_batch),
        tokens_per_s=batch * bptt / cost["train_step_s"], saved_bytes=cost["saved_bytes"],
        peak_bytes=cost["peak_bytes"], param_bytes=params, buffer_bytes=buffers,
        model_param_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        precision=precision, device=str(device))


def compare_models(names: Sequence[str], size: str, **settings) -> list[dict]:
    """Measure ``tied``, every other named head, and ``tied`` again, behind one encoder.

    Args:
        names: :data:`~.heads.BENCH_HEADS` names (``tied`` is added when missing).
        size: a :data:`~.heads.SIZES` name.
        settings: keyword arguments of :func:`model_cost`.

    Returns:
        one dict per head: the :class:`ModelCost` fields plus ``train_ratio`` and
        ``eval_ratio`` (head / tied; the mean of tied's two measurements divides, see
        ``bench.add_ratios``). A head that runs out of memory, or that cannot end a
        language model (``is_distribution`` false: vMF), gives a row with ``skipped`` (the
        reason) and no timings; the others are still measured.
    """
    check_names(names, [size])
    order = ["tied", *(n for n in names if n != "tied")]
    device = torch.device(settings.get("device", "cpu"))

    def skipped(name: str, reason: str) -> dict:
        kind, options = BENCH_HEADS[name]
        return {"name": name, "kind": kind, "options": options, "size": size,
                "vocab_size": SIZES[size], "device": str(device), "skipped": reason}

    def measure(name: str) -> dict:
        log.info("bench model: %s behind %s at %s (V=%s)", name,
                 settings.get("encoder_config", "ptb/awd-lstm"), size, f"{SIZES[size]:,}")
        if not HEADS[BENCH_HEADS[name][0]].is_distribution:
            return skipped(name, "not a language-model head (no distribution over words)")
        try:
            row = model_cost(name, size, **settings).to_dict()
        except (RuntimeError, MemoryError) as err:
            if not is_out_of_memory(err):
                raise
            row = skipped(name, out_of_memory_note(err))
        free_memory(device)
        return row

    rows = [measure(name) for name in order]
    base = rows[0]
    if "skipped" in base:  # no baseline: no ratios
        for row in rows[1:]:
            if "skipped" not in row:
                row["train_ratio"] = row["eval_ratio"] = None
        return rows
    again = measure("tied") if len(rows) > 1 else None
    add_ratios(rows, base, again if again is not None and "skipped" not in again else None)
    base["tokens_per_s"] = base["batch_size"] * base["bptt"] / base["train_step_s"]
    return rows


def run_model_bench(names: Sequence[str], sizes: Sequence[str], *,
                    encoder_config: str = "ptb/awd-lstm", overrides: Sequence[str] = (),
                    batch_size: int | None = None, bptt: int | None = None,
                    eval_batch_size: int | None = None, device: str = "cpu",
                    repeats: int = 5, warmup: int = 2, precision: str = "fp32") -> dict:
    """Every named head at every size behind one encoder, ratios to ``tied``.

    Returns a JSON-ready dict: ``format``, ``mode`` (``"model"``), ``environment``,
    ``settings`` (the encoder config, overrides, resolved batch sizes, AR/TAR weights)
    and ``rows`` (:func:`compare_models`).
    """
    check_names(names, sizes)
    t = bench_config(encoder_config, overrides).train  # fails early on a bad config
    measure = {"encoder_config": encoder_config, "overrides": list(overrides),
               "batch_size": batch_size or t.batch_size, "bptt": bptt or t.bptt,
               "eval_batch_size": eval_batch_size or t.eval_batch_size,
               "device": str(device), "repeats": repeats, "warmup": warmup,
               "precision": precision}
    rows = [row for size in sizes for row in compare_models(names, size, **measure)]
    settings = {"encoder": measure.pop("encoder_config"), **measure}
    return {"format": BENCH_FORMAT, "mode": "model", "environment": environment(device),
            "settings": {**settings, "baseline": "tied", "alpha": t.alpha, "beta": t.beta,
                         "timed": "forward, loss, regulariser, AR/TAR, backward (no clipping, "
                                  "no optimiser step)"},
            "rows": rows}
