"""Several translation models side by side: their translations of the same sentences, and
the time of a training step, measured in one process.

Wall-clock times of separate runs are no speed comparison (other jobs, caches and clocks
differ between them); :func:`time_training_steps` times the candidates round-robin on the
same batch in one process, so whatever slows the machine down slows all of them alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .corpus import Pair
from .decode import translate_pairs
from .model import TranslationModel
from .vocab import NMTVocab

__all__ = ["example_translations", "format_examples", "repeats_a_word", "short_pairs",
           "stuck_translations", "time_training_steps"]


def time_training_steps(steps: Mapping[str, tuple[nn.Module, Callable[[], Tensor]]], *,
                        repeats: int = 5, warmup: int = 1,
                        device: torch.device | str = "cpu") -> dict[str, float]:
    """Median seconds of one training step (forward, loss, backward) of each entry.

    The entries are timed round-robin: ``warmup`` untimed rounds, then ``repeats`` timed
    rounds, each of which runs every entry once in the given order. No optimiser step is
    taken, so every round sees the same weights (the update itself, an elementwise pass
    over the parameters, is left out of every entry alike).

    Args:
        steps: name -> ``(module, loss_fn)``; ``loss_fn()`` returns a scalar loss whose
            backward reaches the parameters of ``module`` (whose gradients are cleared
            before each step and at the end).
        repeats: timed rounds, ``>= 1``.
        warmup: untimed rounds first, ``>= 0``.
        device: where the modules run (CUDA is synchronised around each step).

    Returns:
        name -> median seconds per step, in the order of ``steps``.

    Raises:
        ConfigError: no entries, ``repeats < 1`` or ``warmup < 0``.
    """
    if not steps:
        raise ConfigError("time_training_steps got no steps; pass name -> (module, loss_fn)")
    if repeats < 1 or warmup < 0:
        raise ConfigError(f"time_training_steps needs repeats >= 1 and warmup >= 0, got "
                          f"repeats={repeats}, warmup={warmup}")
    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_ in range(warmup + repeats):
        for name, (module, loss_fn) in steps.items():
            module.train()
            module.zero_grad(set_to_none=True)
            sync()
            start = time.perf_counter()
            loss_fn().backward()
            sync()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
    for module, _ in steps.values():
        module.zero_grad(set_to_none=True)
    return {name: statistics.median(t) for name, t in times.items()}


def short_pairs(pairs: Sequence[Pair], n: int, *, max_words: int = 10) -> list[Pair]:
    """The first ``n`` pairs whose source and reference have at most ``max_words`` words
    each (fewer if the split has fewer), in corpus order."""
    if n < 1 or max_words < 1:
        raise ConfigError(f"short_pairs needs n >= 1 and max_words >= 1, got n={n}, "
                          f"max_words={max_words}")
    chosen = [(s, t) for s, t in pairs if len(s) <= max_words and len(t) <= max_words]
    return chosen[:n]


Systems = Mapping[str, tuple[TranslationModel, NMTVocab, NMTVocab]]


def example_translations(systems: Systems,
                         pairs: Sequence[Pair], *, max_len: int = 60,
                         device: torch.device | str = "cpu") -> list[dict[str, str]]:
    """Greedy translations of the same sentences by several models, one dict per pair.

    Args:
        systems: label -> ``(model, src_vocab, tgt_vocab)`` (each model with its own
            vocabularies, e.g. from :func:`~drillbook.train.load_run`).
        pairs: ``(source tokens, reference tokens)``.
        max_len: decoding limit in target tokens.

    Returns:
        per pair: ``"source"``, ``"reference"`` and one entry per label, each a string of
        space-separated tokens (``<unk>`` stays visible; a hypothesis cut at ``max_len``
        has no ``<eos>``).
    """
    rows = [{"source": " ".join(s), "reference": " ".join(t)} for s, t in pairs]
    for label, (model, src_vocab, tgt_vocab) in systems.items():
        hyps = translate_pairs(model, pairs, src_vocab, tgt_vocab, max_len=max_len,
                               device=device)
        for row, hyp in zip(rows, hyps, strict=True):
            row[label] = " ".join(hyp)
    return rows


def format_examples(rows: Sequence[Mapping[str, str]]) -> str:
    """Example translations as plain text, one block per sentence: each entry of the row
    (``source``, ``reference``, then one per model, as :func:`example_translations` gives
    them) on its own line behind its label, the labels padded to one width."""
    if not rows:
        return ""
    width = max(len(label) for row in rows for label in row) + 1
    return "\n\n".join("\n".join(f"{label + ':':<{width}} {text}" for label, text in row.items())
                       for row in rows)


def repeats_a_word(words: Sequence[str], times: int = 4) -> bool:
    """Whether one word stands ``times`` or more times in a row: the sign of a model that
    has not learnt to stop repeating the most frequent word ("a a a a ...")."""
    if times < 2:
        raise ConfigError(f"repeats_a_word needs times >= 2, got {times}")
    return any(len(set(words[i:i + times])) == 1 for i in range(len(words) - times + 1))


def stuck_translations(rows: Sequence[Mapping[str, str]], *, times: int = 4) -> dict[str, int]:
    """Per model, how many of its translations repeat one word ``times`` or more times in a
    row (:func:`repeats_a_word`), from :func:`example_translations`' rows (``source`` and
    ``reference`` are not models and are left out)."""
    labels = [k for k in (rows[0] if rows else {}) if k not in ("source", "reference")]
    return {label: sum(repeats_a_word(row[label].split(), times) for row in rows)
            for label in labels}
