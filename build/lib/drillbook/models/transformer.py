"""A small causal Transformer language model with the same interface as AWD-LSTM."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from ..heads.base import Features
from .base import Encoder, EncoderOutput
from .dropout import check_p

__all__ = ["TransformerLM"]


class TransformerLM(Encoder):
    """Pre-norm causal Transformer encoder (Vaswani et al., 2017) over BPTT windows.

    Token embedding (shared with tied heads) plus a learned position embedding, ``nlayers``
    pre-norm self-attention blocks with a causal mask, a final LayerNorm. Stateless: each
    ``(T, B)`` window is read on its own, so ``hidden`` is always ``None``.

    Args:
        vocab_size: ``V``.
        d_model: embedding and model width (= ``d_out``).
        nhead, nlayers, d_ff: attention heads, blocks, feed-forward width.
        dropout: dropout inside the blocks and on the embeddings.
        max_len: longest window accepted.

    Shapes:
        input ``(T, B)`` -> ``features.last`` ``(T, B, d_model)``; ``features.layers`` =
        (dropped embeddings, block 1, ..., block n after the final norm).
    """

    def __init__(self, vocab_size: int, d_model: int = 256, nhead: int = 4, nlayers: int = 4,
                 d_ff: int = 1024, *, dropout: float = 0.1, max_len: int = 512) -> None:
        super().__init__()
        if d_model % nhead:
            raise ConfigError(f"d_model={d_model} must be divisible by nhead={nhead}")
        self.d_out, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(check_p(dropout))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, nhead, d_ff, dropout, activation="gelu",
                                       norm_first=True)
            for _ in range(nlayers))
        self.norm = nn.LayerNorm(d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        nn.init.normal_(self.position.weight, std=0.02)

    @property
    def layer_sizes(self) -> list[int]:
        return [self.d_out] * (len(self.blocks) + 1)

    def forward(self, input: Tensor, hidden: None = None) -> EncoderOutput:
        if input.dim() != 2:
            raise ValueError(f"TransformerLM expects word ids of shape (T, B), got "
                             f"{tuple(input.shape)}")
        t = input.shape[0]
        if t > self.max_len:
            raise ConfigError(f"window of {t} tokens exceeds max_len={self.max_len}; build the "
                             f"model with a larger max_len or use a shorter bptt")
        pos = torch.arange(t, device=input.device)
        x = self.drop(self.embedding(input) + self.position(pos)[:, None, :])
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=input.device,
                                                              dtype=x.dtype)
        layers = [x]
        for i, block in enumerate(self.blocks):
            x = block(x, src_mask=mask, is_causal=True)
            layers.append(self.norm(x) if i == len(self.blocks) - 1 else x)
        out = layers[-1]
        return EncoderOutput(Features(out, tuple(layers)), None, out)
