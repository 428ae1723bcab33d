"""What every language-model encoder returns, and the model that joins encoder and head."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from ..heads.base import Features, OutputHead
from ..heads.registry import language_model_refusal

__all__ = ["Encoder", "EncoderOutput", "LanguageModel", "eval_windows", "lm_head_problem"]


class EncoderOutput(NamedTuple):
    """The encoder's answer for one ``(T, B)`` batch of word ids.

    Attributes:
        features: what the head reads: ``features.last`` is the (dropped) last layer,
            ``(T, B, d_out)``; ``features.layers`` holds every layer's output, index 0
            the dropped input embedding ``(T, B, emsize)`` (DOC reads these).
        hidden: recurrent state to pass to the next batch (``None`` when stateless).
        raw_last: the last layer *before* output dropout, ``(T, B, d_out)`` (AWD-LSTM's
            temporal activation regulariser uses it).
    """

    features: Features
    hidden: Any
    raw_last: Tensor


class Encoder(nn.Module):
    """Base class of LM encoders: word ids ``(T, B)`` -> :class:`EncoderOutput`.

    Attributes:
        embedding: the input ``nn.Embedding(V, emsize)``; tied heads share it.
        d_out: size of ``features.last``; the head's ``d_hidden``.
    """

    embedding: nn.Embedding
    d_out: int

    @property
    def layer_sizes(self) -> list[int]:
        """Feature sizes of ``features.layers``: the embedding first, the last layer last;
        empty for an encoder that exposes no layers (a head that reads them is refused)."""
        return []

    def init_hidden(self, batch_size: int) -> Any:
        """A fresh recurrent state (``None`` for stateless encoders)."""
        return None

    @staticmethod
    def detach_hidden(hidden: Any) -> Any:
        """Cut the graph between BPTT windows (truncated back-propagation)."""
        if hidden is None:
            return None
        if isinstance(hidden, Tensor):
            return hidden.detach()
        return type(hidden)(Encoder.detach_hidden(h) for h in hidden)


def lm_head_problem(head: OutputHead | type[OutputHead], encoder: Encoder) -> str | None:
    """Why ``head`` (a head or a head class) cannot end a language model over ``encoder``,
    in one line naming the fix; ``None`` when it can.

    A head that predicts vectors is refused
    (:func:`~drillbook.heads.registry.language_model_refusal`); a head that
    ``reads_layers`` (DOC) needs an encoder that exposes them.
    """
    refusal = language_model_refusal(head)
    if refusal is not None:
        return refusal
    if head.reads_layers and not encoder.layer_sizes:
        return (f"the {head.kind!r} head reads the encoder's middle layers, but "
                f"{type(encoder).__name__} exposes none; use an encoder that returns "
                f"Features.layers (every drillbook encoder does) or head.kind='mos'")
    return None


class LanguageModel(nn.Module):
    """An encoder and an output head.

    Shapes:
        input ``(T, B)`` word ids -> :class:`EncoderOutput`; ``model.head.log_prob(
        out.features)`` is ``(T, B, V)``.

    Raises:
        ConfigError: a head that cannot end a language model (:func:`lm_head_problem`).
        ValueError: the head's ``d_hidden`` differs from the encoder's ``d_out``.
    """

    def __init__(self, encoder: Encoder, head: OutputHead) -> None:
        super().__init__()
        problem = lm_head_problem(head, encoder)
        if problem is not None:
            raise ConfigError(problem)
        if head.d_hidden != encoder.d_out:
            raise ValueError(f"head reads d_hidden={head.d_hidden} features but the encoder "
                             f"outputs d_out={encoder.d_out}; size them to agree")
        self.encoder = encoder
        self.head = head

    def forward(self, input: Tensor, hidden: Any = None) -> EncoderOutput:
        return self.encoder(input, hidden)

    def init_hidden(self, batch_size: int) -> Any:
        return self.encoder.init_hidden(batch_size)


@torch.no_grad()
def eval_windows(model: LanguageModel, data: Tensor, bptt: int,
                 max_tokens: int | None = None) -> Iterator[tuple[EncoderOutput, Tensor]]:
    """Walk a batchified ``(T, B)`` stream as AWD-LSTM evaluates it.

    Fixed windows of ``bptt`` rows, the recurrent state carried from one window to the
    next, the model in eval mode and autograd off. Yields ``(output, target)`` for each
    window (``target`` is ``(seq_len, B)``); stops after the window that reaches
    ``max_tokens`` targets, if given. Every evaluation in the package reads the stream
    through this one function.
    """
    from ..data import get_batch

    model.eval()
    hidden = model.init_hidden(data.shape[1])
    count = 0
    for i in range(0, data.shape[0] - 1, bptt):
        x, y = get_batch(data, i, bptt)
        out = model(x, hidden)
        hidden = out.hidden
        yield out, y
        count += y.numel()
        if max_tokens is not None and count >= max_tokens:
            return
