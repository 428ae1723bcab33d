"""A Transformer encoder-decoder for translation whose output layer is any drillbook head.

The architecture of DRILL's Table 5 (Transformer base, Vaswani et al. 2017, as OpenNMT-py
implements it), at any size:

* **encoder**: word embedding scaled by ``sqrt(d_model)`` plus positions (sinusoidal, or
  learned), then ``layers`` self-attention blocks (``torch.nn.TransformerEncoderLayer``);
* **decoder**: the same on the target prefix, ``layers`` blocks with causal self-attention
  and attention over the encoder's output (``torch.nn.TransformerDecoderLayer``);
* **norm**: ``"pre"`` (OpenNMT-py's, which the DRILL authors used: a LayerNorm before each
  sub-layer and one after the last block of each side) or ``"post"`` (the original paper's:
  after each residual sum);
* **output layer**: the decoder's last output goes to an output head, the same
  :mod:`drillbook.heads` modules as the LSTM model (:class:`~drillbook.nmt.model.Seq2Seq`);
  heads that share an embedding get the decoder's input embedding; a head that reads
  middle layers (DOC) is refused.

The model has the LSTM model's interface (``encode`` -> a state, ``decode(tokens, state)``
-> features and a new state, ``next_token_scores``), so :mod:`drillbook.nmt.decode`, the
trainer and the analyses drive it unchanged. Its state carries the target prefix read so
far and each decoder block's inputs there: a decoding step computes only the new
position, its self-attention reading the cached inputs as keys and values (causal, so the
earlier positions' outputs are those of a teacher-forced pass).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from ..heads import HEADS, OutputHead, build_head
from .model import TranslationModel

__all__ = ["NORMS", "POSITIONS", "TransformerSeq2Seq", "TransformerState", "sinusoids"]

#: where each block normalises, and how positions are encoded
NORMS, POSITIONS = ("pre", "post"), ("sinusoidal", "learned")


class TransformerState(NamedTuple):
    """What the Transformer decoder carries from one step to the next.

    Attributes:
        memory: encoder outputs ``(S, B, d)``; ``memory_mask`` ``(S, B)`` True at tokens.
        prefix: the target tokens read so far ``(t, B)`` (``t = 0`` after encoding).
        inputs: for each decoder block, its inputs at those ``t`` positions ``(t, B, d)``
            (what its self-attention reads as keys and values), so a step computes the
            new positions only.
    """

    memory: Tensor
    memory_mask: Tensor
    prefix: Tensor
    inputs: tuple[Tensor, ...]

    def index_select(self, index: Tensor) -> TransformerState:
        """Reorder / repeat the batch entries (beam search)."""
        return TransformerState(self.memory[:, index], self.memory_mask[:, index],
                                self.prefix[:, index],
                                tuple(x[:, index] for x in self.inputs))


def sinusoids(length: int, d_model: int) -> Tensor:
    """The fixed position encodings of Vaswani et al. (2017): ``(length, d_model)`` with
    ``sin(p / 10000^(2i/d))`` in even and ``cos`` of the same in odd columns."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                     * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : d_model // 2]
    return table


class TransformerSeq2Seq(TranslationModel):
    """Transformer encoder-decoder with a pluggable output head.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (pad id ``pad_id`` in both).
        d_model: width of embeddings and blocks (the ``d`` of the head).
        nhead: attention heads; must divide ``d_model``.
        layers: blocks of the encoder and of the decoder.
        d_ff: feed-forward width.
        dropout: on the embeddings and inside the blocks.
        positions: ``"sinusoidal"`` (no parameters) or ``"learned"``.
        norm: ``"pre"`` or ``"post"`` (see the module's notes).
        share_embeddings: one embedding for source and target (a shared vocabulary, so
            ``src_vocab == tgt_vocab``).
        max_len: the longest sentence (and decoded prefix) accepted.
        head, head_options: an output head kind of :data:`drillbook.heads.HEADS` and its
            options, as for the LSTM model.

    Raises:
        ConfigError: a head that reads layers (DOC), sizes that do not fit, or head
            options that do not fit (the head's message).

    Shapes:
        src ``(S, B)``, src_lengths ``(B,)``, tgt_in ``(T, B)`` -> features ``(T, B, d)``.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, *, d_model: int = 256, nhead: int = 4,
                 layers: int = 3, d_ff: int = 1024, dropout: float = 0.1,
                 positions: str = "sinusoidal", norm: str = "pre",
                 share_embeddings: bool = False, max_len: int = 256, head: str = "softmax",
                 head_options: dict | None = None, pad_id: int = 0) -> None:
        super().__init__()
        if d_model % nhead:
            raise ConfigError(f"model.d_model={d_model} must be divisible by "
                              f"model.nhead={nhead}")
        if positions not in POSITIONS or norm not in NORMS:
            raise ConfigError(f"model.positions must be one of {POSITIONS} and model.norm "
                              f"one of {NORMS}; got {positions!r} and {norm!r}")
        if share_embeddings and src_vocab != tgt_vocab:
            raise ConfigError(f"shared embeddings need one vocabulary, got {src_vocab} "
                              f"source and {tgt_vocab} target words; set "
                              f"model.share_vocab=true or turn sharing off")
        head_cls = HEADS.get(head)  # an unknown kind: build_head names the choices
        if head_cls is not None and head_cls.reads_layers:
            raise ConfigError(f"the {head!r} head reads an encoder's middle layers, but the "
                              f"translation decoder hands its head only its last output; "
                              f"use head 'mos' (DOC with every vector from the last layer "
                              f"is MoS)")
        self.pad_id, self.d_model, self.max_len = pad_id, d_model, max_len
        self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=pad_id)
        self.tgt_embed = (self.src_embed if share_embeddings
                          else nn.Embedding(tgt_vocab, d_model, padding_idx=pad_id))
        for embed in {id(e): e for e in (self.src_embed, self.tgt_embed)}.values():
            nn.init.normal_(embed.weight, std=d_model ** -0.5)
            with torch.no_grad():
                embed.weight[pad_id].zero_()
        if positions == "learned":
            self.position: nn.Embedding | None = nn.Embedding(max_len, d_model)
            nn.init.normal_(self.position.weight, std=d_model ** -0.5)
        else:
            self.position = None
            self.register_buffer("sinusoids", sinusoids(max_len, d_model), persistent=False)
        pre = norm == "pre"
        self.encoder = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, nhead, d_ff, dropout, norm_first=pre)
            for _ in range(layers))
        self.decoder = nn.ModuleList(
            nn.TransformerDecoderLayer(d_model, nhead, d_ff, dropout, norm_first=pre)
            for _ in range(layers))
        # a pre-norm stack ends with a norm of its own (the blocks leave their sums raw)
        self.encoder_norm = nn.LayerNorm(d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if pre else nn.Identity()
        self.drop = nn.Dropout(dropout)
        try:
            self.head: OutputHead = build_head(head, vocab_size=tgt_vocab, d_hidden=d_model,
                                               embedding=self.tgt_embed,
                                               **dict(head_options or {}))
        except (ValueError, TypeError) as err:
            raise ConfigError(f"translation head {head!r}: {err}") from err

    # ------------------------------------------------------------- inputs
    def _embed(self, embed: nn.Embedding, tokens: Tensor, start: int = 0) -> Tensor:
        """Scaled embeddings plus the positions ``start, start + 1, ...``, dropped."""
        length = start + tokens.shape[0]
        if length > self.max_len:
            raise ValueError(f"a sequence of {length} tokens is longer than the model's "
                             f"max_len={self.max_len}; raise model.max_len or drop longer "
                             f"sentences")
        where = (self.position.weight[start:length] if self.position is not None
                 else self.sinusoids[start:length])
        return self.drop(embed(tokens) * math.sqrt(self.d_model) + where[:, None])

    # ------------------------------------------------------------- encoder
    def encode(self, src: Tensor, src_lengths: Tensor) -> TransformerState:
        """Run the encoder; return the decoder's initial state (an empty prefix)."""
        if src.dim() != 2:
            raise ValueError(f"src must be (S, B) word ids, got shape {tuple(src.shape)}")
        if int(src_lengths.min()) < 1:
            raise ValueError("every source sentence needs at least one token; got a length 0")
        pad = (src == self.pad_id).T  # (B, S)
        x = self._embed(self.src_embed, src)
        for block in self.encoder:
            x = block(x, src_key_padding_mask=pad)
        memory = self.encoder_norm(x)
        empty = src.new_zeros((0, src.shape[1]))
        inputs = tuple(memory.new_zeros((0, *memory.shape[1:])) for _ in self.decoder)
        return TransformerState(memory, src != self.pad_id, empty, inputs)

    # ------------------------------------------------------------- decoder
    def decode(self, tgt_in: Tensor, state: TransformerState
               ) -> tuple[Tensor, TransformerState]:
        """Teacher-forced (or one-step) decoding: the features ``(T, B, d)`` of the ``T``
        new tokens and the state with them appended to the prefix."""
        start, new = state.prefix.shape[0], tgt_in.shape[0]
        # new position i (absolute start + i) sees the positions up to itself
        causal = torch.triu(torch.full((new, start + new), float("-inf"),
                                       device=tgt_in.device), diagonal=start + 1)
        x = self._embed(self.tgt_embed, tgt_in, start)
        memory_pad = ~state.memory_mask.T
        inputs = []
        for block, cached in zip(self.decoder, state.inputs, strict=True):
            context = torch.cat([cached, x], dim=0)
            inputs.append(context)
            x = _decoder_block(block, x, context, causal, state.memory, memory_pad)
        prefix = torch.cat([state.prefix, tgt_in], dim=0)
        return self.decoder_norm(x), TransformerState(state.memory, state.memory_mask,
                                                      prefix, tuple(inputs))


def _decoder_block(block: nn.TransformerDecoderLayer, x: Tensor, context: Tensor,
                   causal: Tensor, memory: Tensor, memory_pad: Tensor) -> Tensor:
    """``block`` on the new positions ``x`` whose self-attention reads ``context`` (the
    block's inputs at every position so far, ``x`` last): what ``block(context, ...)``
    computes at ``x``'s positions, with the block's own sub-modules."""
    def self_attention(query: Tensor, keys: Tensor) -> Tensor:
        return block.self_attn(query, keys, keys, attn_mask=causal, need_weights=False)[0]

    def cross_attention(query: Tensor) -> Tensor:
        return block.multihead_attn(query, memory, memory, key_padding_mask=memory_pad,
                                    need_weights=False)[0]

    def feed_forward(h: Tensor) -> Tensor:
        return block.linear2(block.dropout(block.activation(block.linear1(h))))

    if block.norm_first:
        x = x + block.dropout1(self_attention(block.norm1(x), block.norm1(context)))
        x = x + block.dropout2(cross_attention(block.norm2(x)))
        return x + block.dropout3(feed_forward(block.norm3(x)))
    x = block.norm1(x + block.dropout1(self_attention(x, context)))
    x = block.norm2(x + block.dropout2(cross_attention(x)))
    return block.norm3(x + block.dropout3(feed_forward(x)))
