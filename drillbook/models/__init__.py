"""Models from configs: the language-model encoders, all returning an
:class:`~drillbook.models.EncoderOutput` (their last layer and every layer's output), the
model that joins an encoder and a head, and the builders of both tasks' models
(:mod:`~drillbook.models.builders`; the translation model itself is
:class:`drillbook.nmt.model.Seq2Seq`)."""

from .awd_lstm import AWDLSTM
from .base import Encoder, EncoderOutput, LanguageModel, eval_windows
from .builders import (
    ENCODERS,
    build_encoder,
    build_model,
    build_translation_model,
    check_buildable,
)
from .dropout import DropConnect, LockedDropout, embedding_dropout
from .params import param_report
from .transformer import TransformerLM

__all__ = [
    "AWDLSTM",
    "ENCODERS",
    "DropConnect",
    "Encoder",
    "EncoderOutput",
    "LanguageModel",
    "LockedDropout",
    "TransformerLM",
    "build_encoder",
    "build_model",
    "build_translation_model",
    "check_buildable",
    "embedding_dropout",
    "eval_windows",
    "param_report",
]
