"""Language-model encoders, all returning an :class:`~drillbook.models.EncoderOutput`.

Every encoder gives its last layer's output and the output of every layer.
"""

from .awd_lstm import AWDLSTM
from .base import Encoder, EncoderOutput, LanguageModel, eval_windows
from .dropout import DropConnect, LockedDropout, embedding_dropout
from .factory import ENCODERS, build_encoder, build_model, param_report
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
    "embedding_dropout",
    "eval_windows",
    "param_report",
]
