"""How the planner and the command line's estimates size a translation step: its sizes
on its corpus (the vocabularies and mean sentence lengths), its matrix-product FLOPs (the
attentional model's or the Transformer's, and the head's, :mod:`drillbook.analysis`), a
step on random sentence pairs whose saved tensors are measured (:func:`random_pairs_step`),
its model and a step of the real model timed; and the task's tiny run for a result
file's fingerprint (:func:`tiny_run`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ....analysis import head_flops
from ....configs import apply_overrides
from ....heads import HEADS
from ....models import build_translation_model
from ...translation import build_vocabs
from ..registry import Sizing, StepProbe, TinyRun, task_of

__all__ = ["SIZING", "random_pairs_step", "tiny_run"]


def _sizes(config) -> dict[str, Any]:
    t = config.train
    corpus = task_of(config).load_data(config)  # the registered task's (tests swap it)
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


def _flops(config, vocab_size: int, positions: float, *, src_vocab: int,
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


def random_pairs_step(config, vocab_size: int, gen: torch.Generator | None = None, *,
                      src_vocab: int, src_len: float, tgt_len: float
                      ) -> tuple[torch.nn.Module, Callable[[int], torch.Tensor]]:
    """``(model, loss)``: ``config``'s translation model in training mode, and
    ``loss(n)``, its training loss on ``n`` random sentence pairs of the mean lengths
    (what the planner's probe measures, and what the command line's estimate of a CPU
    step times, :mod:`drillbook.cli.estimates`)."""
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


def tiny_run(config, size: TinyRun) -> tuple[list[float], Any]:
    """The fingerprint's tiny run (:mod:`drillbook.experiments.results.fingerprint`): the
    config at a few units (every other setting, the head's options included, as the row
    has them), ``size.steps`` steps of its loss (``model.loss``), clipping and the
    optimiser (Adam or SGD) on fixed random sentence pairs; ``(losses, model)``."""
    if config.model.arch == "transformer":
        config = apply_overrides(config, ["model.d_model=8", "model.nhead=2",
                                          "model.d_ff=16", "model.layers=1"])
    else:
        config = apply_overrides(config, ["model.emb_size=8", "model.hidden=8"])
    gen = torch.Generator().manual_seed(0)
    table = _target_table(config, size.vocab, gen)  # vMF: 50-d unit vectors
    model = build_translation_model(config, size.vocab, size.vocab, pad_id=0,
                                    target_embeddings=table)
    model.train()
    t = config.train
    if getattr(t, "optimizer", "adam") == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=t.lr)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=t.lr)
    src = torch.randint(4, size.vocab, (size.length, size.batch), generator=gen)
    tgt = torch.randint(4, size.vocab, (size.length + 1, size.batch), generator=gen)
    losses = []
    for _ in range(size.steps):
        optimizer.zero_grad()
        loss = model.loss(src, torch.full((size.batch,), size.length), tgt[:-1], tgt[1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, model


def _probe(config, vocab_size: int, gen: torch.Generator, **extra) -> StepProbe:
    return StepProbe((2, 4), *random_pairs_step(config, vocab_size, gen, **extra))


def _model(config, sizes: dict[str, Any]) -> torch.nn.Module:
    """On the CPU (a few million parameters)."""
    return build_translation_model(config, sizes["extra"]["src_vocab"], sizes["vocab"],
                                   pad_id=0,
                                   target_embeddings=_target_table(config, sizes["vocab"]))


def _step_seconds(config, work, device: torch.device,
                  timed: Callable[[Callable[[], Any]], float]) -> tuple[float, str]:
    """A step is a batch of sentence pairs: forward and backward of the real model on a
    batch of random pairs of the corpus' mean lengths, timed once after a warm-up."""
    model, loss = random_pairs_step(config, work.vocab, **work.extra)
    model.to(device)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss(config.train.batch_size).backward()

    step()  # warm-up
    seconds = min(timed(step) for _ in range(2))
    return seconds, f"{work.steps:,} steps of {seconds:,.2f} s, one timed here"


#: translation trains with Adam: two tensors per parameter
SIZING = Sizing(sizes=_sizes, forward_flops=_flops, probe=_probe, model=_model,
                optimizer_states=lambda c: 2, step_seconds=_step_seconds)
