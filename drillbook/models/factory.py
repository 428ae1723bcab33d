"""Build a :class:`LanguageModel` from a config: one place that knows every encoder; and
count a config's parameters without building it in memory (:func:`param_report`)."""

from __future__ import annotations

from typing import Any

import torch

from ..configs.schema import Config, ConfigError
from ..heads import HEADS, build_head
from .awd_lstm import AWDLSTM
from .base import Encoder, LanguageModel, lm_head_problem
from .transformer import TransformerLM

__all__ = ["ENCODERS", "build_encoder", "build_model", "param_report"]

ENCODERS = ("awd-lstm", "transformer")


def build_encoder(config: Config, vocab_size: int) -> Encoder:
    m = config.model
    if m.encoder == "awd-lstm":
        return AWDLSTM(vocab_size, m.emsize, m.nhid, m.nlayers, m.d_out, dropout=m.dropout,
                       dropouth=m.dropouth, dropouti=m.dropouti, dropoute=m.dropoute,
                       wdrop=m.wdrop)
    if m.encoder == "transformer":
        if m.d_out not in (None, m.emsize):
            raise ConfigError("the transformer's output size is its width: leave "
                              "model.d_out unset or equal to model.emsize")
        return TransformerLM(vocab_size, m.emsize, m.nhead, m.nlayers, m.d_ff,
                             dropout=m.dropout, max_len=m.max_len)
    raise ConfigError(f"unknown model.encoder {m.encoder!r}; choose one of {list(ENCODERS)}")


def build_model(config: Config, vocab_size: int) -> LanguageModel:
    """Encoder + head as the config says; the head shares the encoder's embedding.

    Raises:
        ConfigError: a head that cannot end a language model (a vMF head, which has no
            distribution over words; a head that reads layers the encoder does not
            expose), or head options that do not fit (the message names the config).
    """
    encoder = build_encoder(config, vocab_size)
    options = dict(config.head.options)
    head_cls = HEADS.get(config.head.kind)  # an unknown kind: build_head names the choices
    if head_cls is not None:
        problem = lm_head_problem(head_cls, encoder)
        if problem is not None:
            raise ConfigError(f"config {config.name!r}: {problem}")
        if head_cls.reads_layers:  # DOC: the sizes of every layer it may read
            options.setdefault("layer_sizes", encoder.layer_sizes)
    try:
        head = build_head(config.head.kind, vocab_size=vocab_size, d_hidden=encoder.d_out,
                          embedding=encoder.embedding, **options)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"config {config.name!r}: {err}") from err
    return LanguageModel(encoder, head)


def param_report(config: Config, vocab_size: int | None = None) -> dict[str, Any]:
    """Parameter counts of a language-model config's model, built on the meta device (no
    memory is allocated), as ``drillbook params`` prints them.

    Args:
        config: a language-model config (``task == "language-model"``).
        vocab_size: ``V``; default: the size of the config's corpus
            (:func:`drillbook.data.corpus_spec`).

    Returns:
        ``config`` (name), ``vocab_size``, ``total`` (shared tensors counted once),
        ``total_m_as_printed_in_drill`` (:func:`~drillbook.configs.paper_millions`),
        ``encoder``, ``output_layer_dedicated`` and ``output_layer_shared`` (DRILL Eq. 6's
        split, :meth:`~drillbook.heads.OutputHead.param_counts`), and ``paper``: record key
        -> millions as printed, for every paper table row of this model
        (:func:`drillbook.experiments.reproduce.records_for`).

    Raises:
        ConfigError: a config of another task, or one whose model cannot be built.
    """
    from ..configs import paper_millions
    from ..data import corpus_spec
    from ..experiments.reproduce import records_for  # experiments builds on this module
    from ..papers import paper_number

    if config.task != Config.task:
        raise ConfigError(f"parameter counts are for language-model configs; {config.name} "
                          f"is a {config.task} config, whose vocabulary sizes come from its "
                          f"training data")
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
