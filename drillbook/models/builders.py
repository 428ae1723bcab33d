"""Models from configs: the one place that knows every encoder and how each task's model
is put together (:func:`build_model` for a language model, :func:`build_translation_model`
for translation)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..configs import Config, NMTConfig
from ..errors import ConfigError
from ..heads import HEADS, build_head
from ..nmt.model import Seq2Seq, TranslationModel
from ..nmt.transformer import TransformerSeq2Seq
from ..validation import check_choice
from .awd_lstm import AWDLSTM
from .base import Encoder, LanguageModel, lm_head_problem
from .transformer import TransformerLM

__all__ = ["ENCODERS", "build_encoder", "build_model", "build_translation_model",
           "check_buildable"]

#: the encoders a language-model config may name (``model.encoder``)
ENCODERS = ("awd-lstm", "transformer")


def build_encoder(config: Config, vocab_size: int) -> Encoder:
    """The encoder ``config.model`` describes (:data:`ENCODERS`), over ``vocab_size`` words.

    Raises:
        ConfigError: an unknown encoder, or a Transformer asked for another output size.
    """
    m = config.model
    check_choice(m.encoder, ENCODERS, "model.encoder")
    if m.encoder == "transformer":
        if m.d_out not in (None, m.emsize):
            raise ConfigError("the transformer's output size is its width: leave "
                              "model.d_out unset or equal to model.emsize")
        return TransformerLM(vocab_size, m.emsize, m.nhead, m.nlayers, m.d_ff,
                             dropout=m.dropout, max_len=m.max_len)
    return AWDLSTM(vocab_size, m.emsize, m.nhid, m.nlayers, m.d_out, dropout=m.dropout,
                   dropouth=m.dropouth, dropouti=m.dropouti, dropoute=m.dropoute,
                   wdrop=m.wdrop)


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


def build_translation_model(config: NMTConfig, src_vocab_size: int, tgt_vocab_size: int, *,
                            pad_id: int, target_embeddings: Tensor | None = None
                            ) -> TranslationModel:
    """The translation model a config describes, its head as ``config.head`` says: the
    attentional LSTM model (:class:`~drillbook.nmt.model.Seq2Seq`) or, with
    ``model.arch = "transformer"``, the Transformer
    (:class:`~drillbook.nmt.transformer.TransformerSeq2Seq`).

    Args:
        src_vocab_size, tgt_vocab_size: the sizes of the two vocabularies.
        pad_id: the target vocabulary's padding id.
        target_embeddings: the ``(V, m)`` frozen target vectors of a head that predicts
            vectors (vMF); ignored by a head that is a distribution over words.

    Raises:
        ConfigError: a head the model cannot use, or options that do not fit.
    """
    m = config.model
    options = dict(config.head.options)
    head_cls = HEADS.get(config.head.kind)  # an unknown kind: Seq2Seq names the choices
    if head_cls is not None and not head_cls.is_distribution:
        options["target_embeddings"] = target_embeddings
    if m.arch == "transformer":
        return TransformerSeq2Seq(
            src_vocab_size, tgt_vocab_size, d_model=m.d_model, nhead=m.nhead,
            layers=m.layers, d_ff=m.d_ff, dropout=m.dropout, positions=m.positions,
            norm=m.norm, share_embeddings=m.share_vocab, max_len=m.max_len,
            head=config.head.kind, head_options=options, pad_id=pad_id)
    return Seq2Seq(src_vocab_size, tgt_vocab_size, emb_size=m.emb_size, hidden=m.hidden,
                   dec_layers=m.dec_layers, dropout=m.dropout, head=config.head.kind,
                   head_options=options, input_from_targets=m.input_from_targets,
                   pad_id=pad_id)


#: the vocabulary size a model is built at to check a config (:func:`check_buildable`)
_STAND_IN_VOCAB = 16


def check_buildable(config: Config | NMTConfig) -> None:
    """Build ``config``'s model once, at its corpus's vocabulary size (a small stand-in
    where that is not known before the data is read) and on the ``meta`` device (no
    memory, no weights), so that whatever ``train`` would refuse about the model (a head
    that does not fit the encoder, sizes that do not fit together) is refused before any
    data is read: ``configs --show`` checks a config as ``train`` does.

    Raises:
        ConfigError: the model cannot be built; the message says why and what to change.
    """
    v = _STAND_IN_VOCAB
    if isinstance(config, NMTConfig):
        cls = HEADS.get(config.head.kind)
        if cls is not None and not cls.is_distribution:  # a frozen table: built for real
            build_translation_model(config, v, v, pad_id=0,
                                    target_embeddings=torch.randn(v, _vector_size(config)))
            return
        with torch.device("meta"):
            build_translation_model(config, v, v, pad_id=0)
        return
    from ..data.corpora import CORPORA

    spec = CORPORA.get(config.data.corpus)  # its own vocabulary size where it is known
    with torch.device("meta"):
        build_model(config, spec.vocab_size if spec and spec.vocab_size else v)


def _vector_size(config: NMTConfig) -> int:
    """The width of the target vectors a vector head of ``config`` reads: its ``dim``
    option, else GloVe's 50 or word2vec's 100 (as the trainer makes them)."""
    dim = config.head.options.get("dim")
    if dim is not None:
        return int(dim)
    return 100 if config.data.target_embeddings == "word2vec" else 50
