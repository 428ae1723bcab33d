"""Build a :class:`LanguageModel` from a config: one place that knows every encoder."""

from __future__ import annotations

from ..configs.schema import Config, ConfigError
from ..heads import HEADS, build_head
from .awd_lstm import AWDLSTM
from .base import Encoder, LanguageModel, lm_head_problem
from .transformer import TransformerLM

__all__ = ["ENCODERS", "build_encoder", "build_model"]

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
