"""Where an output layer's arithmetic goes: matrix-product FLOPs of each head, and of the
AWD-LSTM encoder in front of it.

Each head writes its own count down (:meth:`drillbook.heads.OutputHead.flops`; the parts,
label, context and score work, are explained in :mod:`drillbook.heads.flops`);
:func:`head_flops` looks the head up by kind. The backward pass of a product costs twice
its forward pass (one product per input that needs a gradient), so a training step is about
three times ``train_forward``. :func:`head_flops` is checked against PyTorch's own
``FlopCounterMode`` for every head in the tests.
"""

from __future__ import annotations

import itertools

from ..errors import ConfigError
from ..heads import HEADS, HeadFlops

__all__ = ["HeadFlops", "awd_lstm_flops", "head_flops"]


def head_flops(kind: str, *, vocab_size: int, d: int, tokens: int, d_hidden: int | None = None,
               **options) -> HeadFlops:
    """Matrix-product FLOPs of the forward pass of the head ``kind`` over ``tokens``
    positions: :meth:`~drillbook.heads.OutputHead.flops` of its class.

    Args:
        kind: a head of :data:`drillbook.heads.HEADS`.
        vocab_size, d: ``V`` and the embedding size.
        tokens: positions ``n`` in the step.
        d_hidden: the size of ``h`` (default ``d``).
        options: the head's options, as its constructor takes them (defaults as there:
            DRILL's ``depth`` 4, MoS's ``n_experts`` 15, ...); those that change no product
            (dropouts, activations, biases, residual wiring, ``chunk_size``: chunks
            recompute in the backward pass, not the forward) change nothing, so a head's
            options can be passed as they are.

    Raises:
        ConfigError: an unknown kind, or an option the head does not take (the message
            names the heads that do).
    """
    if kind not in HEADS:
        raise ConfigError(f"no FLOP model for head kind {kind!r}; known: "
                          f"{', '.join(HEADS)}")
    cls = HEADS[kind]
    cls.check_options(options, noun="head option", others=HEADS)
    return cls.flops(vocab_size=vocab_size, d=d, tokens=tokens, d_hidden=d_hidden, **options)


def awd_lstm_flops(*, emsize: int, nhid: int, nlayers: int, tokens: int,
                   d_out: int | None = None) -> int:
    """Matrix-product FLOPs of an AWD-LSTM encoder's forward pass over ``tokens`` positions.

    Layer ``l`` with input size ``a`` and hidden size ``h`` computes its four gates from
    ``[x_t, h_{t-1}]``: ``2 x 4h (a + h)`` FLOPs per position. The sizes follow
    :class:`drillbook.models.AWDLSTM`: ``emsize -> nhid -> ... -> d_out`` (default
    ``emsize``, so that a tied head fits). The embedding lookup is free.
    """
    sizes = [int(emsize)] + [int(nhid)] * (int(nlayers) - 1) + [
        int(emsize if d_out is None else d_out)]
    return sum(2 * 4 * h * (a + h) * int(tokens) for a, h in itertools.pairwise(sizes))
