"""AWD-LSTM (Merity et al., 2018): the encoder every language-model paper here builds on.

A stack of LSTMs regularised five ways:

==================  ==========================================  ===================
AWD-LSTM flag       what is dropped                             here
==================  ==========================================  ===================
``dropoute``        whole words of the embedding matrix          :func:`embedding_dropout`
``dropouti``        embedding outputs, one mask per sequence     :class:`LockedDropout`
``wdrop``           recurrent weights ``W_hh`` (DropConnect)    :class:`DropConnect`
``dropouth``        between LSTM layers, one mask per sequence  :class:`LockedDropout`
``dropout``         the last layer's output                      :class:`LockedDropout`
==================  ==========================================  ===================

plus activation regularisation (AR, on the dropped output) and temporal activation
regularisation (TAR, on the undropped output), applied by the trainer from
:attr:`EncoderOutput.raw_last` and ``features.last``.
"""

from __future__ import annotations

import warnings

from torch import Tensor, nn
from torch.nn.utils import parametrize

from ..errors import ConfigError
from ..heads.base import Features
from .base import Encoder, EncoderOutput
from .dropout import DropConnect, LockedDropout, check_p, embedding_dropout

__all__ = ["AWDLSTM"]


class AWDLSTM(Encoder):
    """Multi-layer LSTM encoder with AWD-LSTM regularisation.

    Args:
        vocab_size: ``V``.
        emsize: embedding size (400 on PTB).
        nhid: hidden size of every layer but the last (1150).
        nlayers: number of LSTM layers (3).
        d_out: size of the last layer; default ``emsize`` so a tied head fits.
        dropout, dropouth, dropouti, dropoute, wdrop: the five dropouts above
            (PTB: 0.4, 0.25, 0.4, 0.1, 0.5).

    Shapes:
        input ``(T, B)`` int64 -> ``features.last`` ``(T, B, d_out)``; ``features.layers``
        = (embedding ``(T, B, emsize)``, layer 1 ``(T, B, nhid)``, ..., last).
        hidden: a list of ``nlayers`` ``(h, c)`` pairs, each ``(1, B, size_l)``.
    """

    def __init__(
        self,
        vocab_size: int,
        emsize: int = 400,
        nhid: int = 1150,
        nlayers: int = 3,
        d_out: int | None = None,
        *,
        dropout: float = 0.4,
        dropouth: float = 0.25,
        dropouti: float = 0.4,
        dropoute: float = 0.1,
        wdrop: float = 0.5,
    ) -> None:
        super().__init__()
        if nlayers < 1:
            raise ConfigError(f"nlayers must be >= 1, got {nlayers}")
        self.vocab_size, self.emsize, self.nhid, self.nlayers = vocab_size, emsize, nhid, nlayers
        self.d_out = emsize if d_out is None else int(d_out)
        self.dropoute = check_p(dropoute, "dropoute")
        self.wdrop = check_p(wdrop, "wdrop")
        self.embedding = nn.Embedding(vocab_size, emsize)
        sizes = [emsize] + [nhid] * (nlayers - 1) + [self.d_out]
        self.rnns = nn.ModuleList(nn.LSTM(sizes[i], sizes[i + 1]) for i in range(nlayers))
        if self.wdrop > 0:
            for rnn in self.rnns:
                parametrize.register_parametrization(rnn, "weight_hh_l0", DropConnect(wdrop))
        self.drop_i = LockedDropout(dropouti)
        self.drop_h = LockedDropout(dropouth)
        self.drop_o = LockedDropout(dropout)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)

    @property
    def sizes(self) -> list[int]:
        return [rnn.hidden_size for rnn in self.rnns]

    @property
    def layer_sizes(self) -> list[int]:
        return [self.emsize, *self.sizes]

    def init_hidden(self, batch_size: int) -> list[tuple[Tensor, Tensor]]:
        ref = self.embedding.weight
        return [(ref.new_zeros(1, batch_size, s), ref.new_zeros(1, batch_size, s))
                for s in self.sizes]

    def forward(self, input: Tensor, hidden: list | None = None) -> EncoderOutput:
        if input.dim() != 2:
            raise ValueError(f"AWDLSTM expects word ids of shape (T, B), got "
                             f"{tuple(input.shape)}")
        if hidden is None:
            hidden = self.init_hidden(input.shape[1])
        x = embedding_dropout(self.embedding, input, self.dropoute, self.training)
        x = self.drop_i(x)
        layers, new_hidden = [x], []
        raw = x
        for i, rnn in enumerate(self.rnns):
            raw, state = self._run(rnn, x, hidden[i])
            new_hidden.append(state)
            x = self.drop_h(raw) if i < self.nlayers - 1 else self.drop_o(raw)
            layers.append(x)
        return EncoderOutput(Features(x, tuple(layers)), new_hidden, raw)

    @staticmethod
    def _run(rnn: nn.LSTM, x: Tensor, state: tuple[Tensor, Tensor]):
        """One LSTM layer on ``x`` ``(T, B, in)`` with DropConnect's mask drawn once.

        ``nn.LSTM.forward`` (PyTorch 2) reads ``weight_hh_l0`` four times before it runs
        (``hasattr`` and ``getattr`` while checking whether the weights changed, both again
        while collecting them), and without a cache each read re-runs the
        parametrization: four masks of ``4 nhid x nhid`` drawn, three thrown away. Under
        :func:`~torch.nn.utils.parametrize.cached` the first read's dropped weight serves
        the other three: one ``F.dropout`` per layer and forward, as in the authors'
        ``WeightDrop``, so a seed draws the masks their code draws.
        """
        with parametrize.cached():
            if not x.is_cuda:
                return rnn(x, state)
            # dropped weights cannot live in cuDNN's flat buffer; that is fine
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*contiguous chunk of memory.*")
                return rnn(x, state)

    def extra_repr(self) -> str:
        return f"dropoute={self.dropoute}, wdrop={self.wdrop}"


