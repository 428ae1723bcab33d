"""What the planner (:mod:`~drillbook.experiments.run.plans`) needs to size one training
step of each task, one record per task (:class:`TaskSizing`, :func:`sizing_of`): the
step's sizes on its corpus, its matrix-product FLOPs, a probe of what autograd keeps for
its backward pass, its model (to count parameters) and the optimiser's state per
parameter. The FLOP counts are :mod:`drillbook.analysis`'s, which is why these records
live here, above the trainers, and not on :class:`~drillbook.train.tasks.Task`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ...analysis import awd_lstm_flops, head_flops
from ...configs import LANGUAGE_MODEL, TRANSLATION
from ...data import corpus_spec
from ...errors import ConfigError
from ...heads import HEADS
from ...train.tasks import task_of
from ..bench.measure import saved_bytes

__all__ = ["SIZINGS", "EpochWork", "Probe", "TaskSizing", "activation_bytes", "epoch_flops",
           "mean_bptt", "sizing_of", "state_bytes", "step_flops", "translation_loss"]

#: a probe of autograd's saved tensors: ``(config, vocab_size, generator, **extra) ->
#: ((n1, n2), bytes_at)``, two small sizes and the bytes one step of ``n`` positions (or
#: sentences) keeps
Probe = Callable[..., tuple[tuple[int, int], Callable[[int], float]]]


@dataclass(frozen=True)
class TaskSizing:
    """How the planner sizes a step of one task's rows.

    Attributes:
        sizes: ``config -> dict``: ``vocab`` (the output vocabulary), ``positions`` (of a
            training step: tokens of a language model, sentences of a translation batch),
            ``extra`` (what the other functions need beyond them: a translation's
            ``src_vocab``, ``src_len``, ``tgt_len``), ``steps`` and evaluation ``windows``
            per epoch, ``eval_positions``, and for a task that decodes ``decode_steps``.
        forward_flops: ``(config, vocab_size, positions, **extra) -> float``: the forward
            pass's matrix-product FLOPs.
        saved: a :data:`Probe` of what autograd keeps for the backward pass.
        model: ``(config, sizes) -> Module``: the model, to count its parameters.
        optimizer_states: ``config -> int``: tensors the optimiser keeps per parameter.
    """

    sizes: Callable[[Any], dict[str, Any]]
    forward_flops: Callable[..., float]
    saved: Probe
    model: Callable[[Any, dict[str, Any]], torch.nn.Module]
    optimizer_states: Callable[[Any], int]


def sizing_of(config) -> TaskSizing:
    """The :class:`TaskSizing` of a config's task."""
    return SIZINGS[task_of(config).name]


def mean_bptt(bptt: int) -> float:
    """The mean window length of AWD-LSTM's variable BPTT (``bptt`` w.p. 0.95, else half)."""
    return 0.95 * bptt + 0.05 * bptt / 2


def step_flops(config, vocab_size: int, positions: float, **extra) -> float:
    """Matrix-product FLOPs of one training step, forward and backward (three times the
    forward pass, :attr:`~drillbook.experiments.run.sizing.TaskSizing.forward_flops` of the
    config's task): of a language model over ``positions`` positions, or (``extra``:
    ``src_vocab``, ``src_len``, ``tgt_len``) of a translation batch of ``positions``
    sentences."""
    return 3 * sizing_of(config).forward_flops(config, vocab_size, positions, **extra)


class EpochWork(NamedTuple):
    """One epoch of a config in matrix-product FLOPs (:func:`epoch_flops`).

    Attributes:
        steps: optimiser steps.
        positions: positions (tokens, or a translation's sentences) per step.
        step: FLOPs of a training step, forward and backward (:func:`step_flops`).
        windows: evaluation windows of its validation.
        window: :func:`step_flops` of a window's positions; a window runs forward only,
            a third of that.
        vocab: the (target) vocabulary's size.
        extra: what a task's step needs beyond them (a translation's ``src_vocab``,
            ``src_len`` and ``tgt_len``; :class:`~drillbook.experiments.run.sizing.TaskSizing`).
    """

    steps: int
    positions: float
    step: float
    windows: float
    window: float
    vocab: int
    extra: dict[str, Any]


def epoch_flops(config, sizes: dict[str, Any] | None = None) -> EpochWork:
    """One epoch of ``config`` (:class:`EpochWork`), from its task's
    :attr:`~drillbook.experiments.run.sizing.TaskSizing.sizes` (given, or read: a
    translation config's data for its vocabularies and sentence lengths).

    Raises:
        ConfigError: a config the FLOP model has no formula for (a Transformer encoder).
    """
    sizes = sizing_of(config).sizes(config) if sizes is None else sizes
    return EpochWork(
        int(sizes["steps"]), float(sizes["positions"]),
        step_flops(config, sizes["vocab"], sizes["positions"], **sizes["extra"]),
        float(sizes["windows"]),
        step_flops(config, sizes["vocab"], sizes["eval_positions"], **sizes["extra"]),
        int(sizes["vocab"]), dict(sizes["extra"]))


def state_bytes(config, sizes: dict[str, Any]) -> float:
    """Weights, gradients and optimiser state of ``config``'s model, 4 bytes each."""
    sizing = sizing_of(config)
    params = sum(p.numel() for p in sizing.model(config, sizes).parameters())
    return 4.0 * params * (2 + sizing.optimizer_states(config))


def activation_bytes(config, vocab_size: int, positions: float, **extra) -> float:
    """What autograd keeps for the backward pass of one training step of ``positions``
    positions (a language model) or sentences (translation, with ``extra``: ``src_vocab``,
    ``src_len``, ``tgt_len``): measured on the CPU at two small sizes by the task's probe
    (:attr:`~drillbook.experiments.run.sizing.TaskSizing.saved`, with
    :func:`~drillbook.experiments.bench.measure.saved_bytes`), extrapolated linearly."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    (n1, n2), bytes_at = sizing_of(config).saved(config, vocab_size, gen, **extra)
    y1, y2 = bytes_at(n1), bytes_at(n2)
    slope = max(y2 - y1, 0.0) / (n2 - n1)
    return max(y1 + slope * (positions - n1), 0.0)


# ------------------------------------------------------------------ language models
def _lm_sizes(config) -> dict[str, Any]:
    t = config.train
    spec = corpus_spec(config.data.corpus)
    positions = t.batch_size * mean_bptt(t.bptt)
    steps = spec.tokens["train"] / positions
    windows = spec.tokens["valid"] / (t.eval_batch_size * t.bptt)
    cap = t.max_batches_per_epoch
    return {"vocab": spec.vocab_size, "positions": positions, "extra": {},
            "steps": min(math.ceil(steps), cap or math.inf), "windows": windows,
            "eval_positions": t.eval_batch_size * t.bptt}


def _lm_flops(config, vocab_size: int, positions: float) -> float:
    """Forward matrix-product FLOPs of a language model over ``positions`` positions."""
    m = config.model
    if m.encoder != "awd-lstm":
        raise ConfigError(f"no FLOP model for a {m.encoder!r} encoder; the plans train the "
                          f"AWD-LSTM")
    d_out = m.d_out or m.emsize
    n = max(1, round(positions))
    encoder = awd_lstm_flops(emsize=m.emsize, nhid=m.nhid, nlayers=m.nlayers, tokens=n,
                             d_out=d_out)
    options = dict(config.head.options)
    if HEADS[config.head.kind].reads_layers:
        options["layer_sizes"] = [m.emsize, *[m.nhid] * (m.nlayers - 1), d_out]
    head = head_flops(config.head.kind, vocab_size=vocab_size, d=m.emsize, d_hidden=d_out,
                      tokens=n, **options)
    return float(encoder + head.train_forward)


def _lm_saved(config, vocab_size: int, gen: torch.Generator):
    from ...models import build_model
    from ...train.lm import training_loss

    model = build_model(config, vocab_size).train()
    model.head.fused_loss = False  # what a GPU keeps: the plain path, its default there
    chunk = config.head.options.get("chunk_size") or 8

    def bytes_at(n: int) -> float:
        x = torch.randint(0, vocab_size, (9, max(1, n // 8)), generator=gen)
        x, y = x[:-1], x[1:]
        hidden = model.init_hidden(x.shape[1])
        return saved_bytes(lambda: training_loss(model, x, y, hidden, alpha=config.train.alpha,
                                                 beta=config.train.beta)[0],
                           exclude=[*model.parameters(), *model.buffers()])

    return (2 * chunk, 4 * chunk), bytes_at


def _lm_model(config, sizes: dict[str, Any]) -> torch.nn.Module:
    """On the meta device: nothing allocated."""
    from ...models import build_model

    with torch.device("meta"):
        return build_model(config, sizes["vocab"])


# ------------------------------------------------------------------ translation
def _translation_sizes(config) -> dict[str, Any]:
    from ...train.translation import build_vocabs

    t = config.train
    corpus = task_of(config).load_data(config)
    pairs = corpus.train[: config.data.max_train_pairs]
    src_vocab, tgt_vocab = build_vocabs(pairs, min_freq=config.data.min_freq,
                                        shared=config.model.share_vocab)
    extra = {"src_vocab": len(src_vocab),
             "src_len": sum(len(s) for s, _ in pairs) / len(pairs),
             "tgt_len": 1 + sum(len(g) for _, g in pairs) / len(pairs)}
    steps = math.ceil(len(pairs) / t.batch_size)
    batches = math.ceil(len(corpus.valid[: t.max_eval_pairs]) / t.batch_size)
    return {"vocab": len(tgt_vocab), "positions": t.batch_size, "extra": extra,
            "steps": min(steps, t.max_batches_per_epoch or math.inf),
            "windows": batches, "eval_positions": t.batch_size,
            "decode_steps": batches * t.max_len}


def _seq2seq_flops(config, vocab_size: int, positions: float, *, src_vocab: int,
                   src_len: float, tgt_len: float) -> float:
    """Forward matrix-product FLOPs of the translation model on ``positions`` sentence
    pairs of the given mean lengths: for the attentional model
    (:class:`~drillbook.nmt.model.Seq2Seq`) the bidirectional encoder, the decoder, Luong
    attention and the head; for the Transformer :func:`_transformer_flops`."""
    m = config.model
    sentences = int(positions)
    if m.arch == "transformer":
        return _transformer_flops(config, vocab_size, sentences, src_len, tgt_len)
    e, h, s, t = m.emb_size, m.hidden, src_len * sentences, tgt_len * sentences
    half = h // 2
    encoder = 2 * 2 * 4 * half * (e + half) * s
    decoder = 2 * 4 * h * (e + h) * t + (m.dec_layers - 1) * 2 * 4 * h * (2 * h) * t
    attention = 2 * s * h * h + 2 * 2 * t * src_len * h + 2 * t * 2 * h * h
    return float(encoder + decoder + attention + _head_forward(config, vocab_size, e, h, t))


def _head_forward(config, vocab_size: int, d: int, d_hidden: int, tokens: float) -> float:
    """The head's training forward FLOPs on ``tokens`` positions (``d``: the size of a
    shared embedding)."""
    options = dict(config.head.options)
    options.pop("loss", None)
    head = head_flops(config.head.kind, vocab_size=vocab_size, d=d if HEADS[
        config.head.kind].shares_embedding else d_hidden, d_hidden=d_hidden,
        tokens=max(1, round(tokens)),
        **{k: v for k, v in options.items() if k != "target_embeddings"})
    return float(head.train_forward)


def _transformer_flops(config, vocab_size: int, sentences: int, src_len: float,
                       tgt_len: float) -> float:
    """Forward matrix-product FLOPs of the Transformer
    (:class:`~drillbook.nmt.transformer.TransformerSeq2Seq`), teacher-forced: per block
    and token the attention projections (4 d^2 multiply-adds, twice in a decoder block),
    the feed-forward (2 d d_ff) and the attention scores and sums (2 d per position
    attended: the whole source, or half the target prefix on average); then the head."""
    m = config.model
    d, s, t = m.d_model, src_len * sentences, tgt_len * sentences
    encoder = m.layers * s * 2 * (4 * d * d + 2 * d * m.d_ff + 2 * d * src_len)
    decoder = m.layers * t * 2 * (8 * d * d + 2 * d * m.d_ff + 2 * d * (src_len + tgt_len / 2))
    return float(encoder + decoder + _head_forward(config, vocab_size, d, d, t))


def _target_table(config, vocab_size: int, gen: torch.Generator | None = None):
    """Unit target vectors for a head that regresses onto them (vMF), else None."""
    if HEADS[config.head.kind].is_distribution:
        return None
    return torch.nn.functional.normalize(torch.randn(vocab_size, 50, generator=gen), dim=-1)


def translation_loss(config, vocab_size: int, gen: torch.Generator | None = None, *,
                     src_vocab: int, src_len: float, tgt_len: float
                     ) -> tuple[torch.nn.Module, Callable[[int], torch.Tensor]]:
    """``(model, loss)``: ``config``'s translation model in training mode, and
    ``loss(n)``, its training loss on ``n`` random sentence pairs of the mean lengths
    (what the planner's probe measures, and what the command line's estimate of a CPU
    step times, :mod:`drillbook.cli.estimates`)."""
    from ...models import build_translation_model

    gen = gen if gen is not None else torch.Generator().manual_seed(0)
    table = _target_table(config, vocab_size, gen)
    model = build_translation_model(config, src_vocab, vocab_size, pad_id=0,
                                    target_embeddings=table).train()
    model.head.fused_loss = False  # what a GPU keeps: the plain path, its default there
    s_len, t_len = max(1, round(src_len)), max(1, round(tgt_len))

    def loss(n: int) -> torch.Tensor:
        src = torch.randint(4, src_vocab, (s_len, n), generator=gen)
        tgt = torch.randint(4, vocab_size, (t_len + 1, n), generator=gen)
        return model.loss(src, torch.full((n,), s_len), tgt[:-1], tgt[1:])

    return model, loss


def _translation_saved(config, vocab_size: int, gen: torch.Generator, **extra):
    model, loss = translation_loss(config, vocab_size, gen, **extra)

    def bytes_at(n: int) -> float:
        return saved_bytes(lambda: loss(n), exclude=[*model.parameters(), *model.buffers()])

    return (2, 4), bytes_at


def _translation_model(config, sizes: dict[str, Any]) -> torch.nn.Module:
    """On the CPU (a few million parameters)."""
    from ...models import build_translation_model

    return build_translation_model(config, sizes["extra"]["src_vocab"], sizes["vocab"],
                                   pad_id=0,
                                   target_embeddings=_target_table(config, sizes["vocab"]))


#: task name -> its :class:`TaskSizing`. Optimiser state: Adam keeps two tensors per
#: parameter, averaged SGD one (its average), SGD none (a language model averages once
#: NT-ASGD switches, so one is assumed); translation trains with Adam.
SIZINGS: dict[str, TaskSizing] = {
    LANGUAGE_MODEL: TaskSizing(
        sizes=_lm_sizes, forward_flops=_lm_flops, saved=_lm_saved, model=_lm_model,
        optimizer_states=lambda c: 2 if c.train.optimizer == "adam" else 1),
    TRANSLATION: TaskSizing(
        sizes=_translation_sizes, forward_flops=_seq2seq_flops, saved=_translation_saved,
        model=_translation_model, optimizer_states=lambda c: 2),
}
