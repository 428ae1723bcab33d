"""An attentional sequence-to-sequence model whose output layer is any drillbook head.

The architecture of the vMF and joint-embedding papers, at a size a laptop can train:

* **encoder**: word embedding -> bidirectional LSTM (packed, so padding is never read);
* **decoder**: word embedding -> LSTM, initialised from the encoder's final states,
  followed by Luong et al.'s (2015) global attention with the *general* score
  ``score(h_t, s_i) = h_t^T W_a s_i`` and the attentional state
  ``h~_t = tanh(W_c [c_t; h_t])``;
* **output layer**: ``h~_t`` goes to an output head, the same :mod:`drillbook.heads`
  modules the language models use: every head in :data:`drillbook.heads.HEADS` whose
  class does not declare ``reads_layers``, distributions over words and the continuous
  vMF head alike. Heads that share the decoder's input embedding receive it as
  ``embedding=``. A head that reads an encoder's middle layers is refused: the decoder
  hands the head only ``h~_t``.

Teacher forcing runs the decoder LSTM over the whole target at once (no input feeding,
unlike OpenNMT's default), so a training step is a handful of large matrix products.
Greedy and beam-search decoding run it step by step.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..errors import ConfigError
from ..heads import HEADS, OutputHead, build_head

__all__ = ["DecoderState", "Seq2Seq", "TranslationModel"]


class DecoderState(NamedTuple):
    """What the decoder carries from one step to the next.

    Attributes:
        hidden, cell: LSTM states ``(layers, B, H)``.
        memory: encoder outputs ``(S, B, H)``; ``memory_mask`` ``(S, B)`` True at tokens.
    """

    hidden: Tensor
    cell: Tensor
    memory: Tensor
    memory_mask: Tensor

    def index_select(self, index: Tensor) -> DecoderState:
        """Reorder / repeat the batch entries (beam search)."""
        return DecoderState(self.hidden[:, index], self.cell[:, index],
                            self.memory[:, index], self.memory_mask[:, index])


class TranslationModel(nn.Module):
    """What every translation model shares with the decoders and the trainer: subclasses
    define ``encode(src, src_lengths) -> state``, ``decode(tgt_in, state) -> (features,
    state)`` (the state has ``index_select`` for beam search), ``pad_id`` and ``head``."""

    pad_id: int
    head: OutputHead

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src, src_lengths))[0]

    def loss(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor
             ) -> Tensor:
        """Mean loss of the head over the target tokens (padding ignored)."""
        features = self(src, src_lengths, tgt_in)
        return self.head.loss(features, tgt_out, ignore_index=self.pad_id)

    @property
    def is_continuous(self) -> bool:
        """True for a head that predicts a vector, not a distribution over words (vMF):
        decoding by nearest neighbour, no beam search."""
        return not self.head.is_distribution

    def next_token_scores(self, features: Tensor) -> Tensor:
        """Log-probabilities ``(..., V)`` for a head that is a distribution over words; for
        a continuous head every word's score by the head's own decoding distance
        (``VMFHead.scores``: vMF density, cosine, or minus the squared Euclidean distance;
        higher is better)."""
        if self.is_continuous:
            return self.head.scores(features)
        return self.head.log_prob(features)


class Seq2Seq(TranslationModel):
    """BiLSTM encoder, attentional LSTM decoder, pluggable output head.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (pad id 0 in both).
        emb_size: word embedding size of both sides (also the ``d`` of a head that shares
            the embedding; ``tied``, ``sigsoftmax`` and ``drill`` need ``emb_size ==
            hidden``).
        hidden: decoder size ``H``; each encoder direction has ``H / 2`` units.
        dec_layers: decoder LSTM layers.
        dropout: on embeddings and on the attentional state.
        head: an output head kind (``drillbook.heads.HEADS``) that does not read layers.
        head_options: its keyword options (e.g. ``{"d_joint": 512}`` or, for ``"vmf"``,
            ``{"target_embeddings": table}``).
        input_from_targets: decoder inputs are the frozen target embeddings of the vMF
            head, projected to ``emb_size`` by a trained ``Linear(m, emb_size)`` (the vMF
            paper's "tied" input, its best setup); needs a head that is not a distribution
            (vMF). The model then has no trained target embedding (``tgt_embed`` is None).

    Raises:
        ConfigError: a head that reads layers (DOC), ``input_from_targets`` without a vMF
            head, or head options and sizes that do not fit (the head's message).

    Shapes:
        src ``(S, B)``, src_lengths ``(B,)``, tgt_in ``(T, B)`` ->
        features ``(T, B, H)`` (what the head reads).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, *, emb_size: int = 256,
                 hidden: int = 256, dec_layers: int = 1, dropout: float = 0.3,
                 head: str = "softmax", head_options: dict | None = None,
                 input_from_targets: bool = False, pad_id: int = 0) -> None:
        super().__init__()
        if hidden % 2:
            raise ValueError(f"hidden must be even (two encoder directions), got {hidden}")
        head_cls = HEADS.get(head)  # an unknown kind: build_head names the choices
        if input_from_targets and head_cls is not None and head_cls.is_distribution:
            raise ConfigError(f"input_from_targets feeds the decoder the frozen target "
                              f"vectors of a vmf head, and the {head!r} head has none; "
                              f"use head 'vmf' or turn input_from_targets off")
        self.pad_id, self.hidden_size, self.dec_layers = pad_id, hidden, dec_layers
        self.src_embed = nn.Embedding(src_vocab, emb_size, padding_idx=pad_id)
        self.encoder = nn.LSTM(emb_size, hidden // 2, bidirectional=True)
        self.bridge = nn.Linear(hidden, 2 * dec_layers * hidden)
        self.tgt_embed = (None if input_from_targets  # the inputs read the head's table
                          else nn.Embedding(tgt_vocab, emb_size, padding_idx=pad_id))
        self.decoder = nn.LSTM(emb_size, hidden, num_layers=dec_layers,
                               dropout=dropout if dec_layers > 1 else 0.0)
        self.attn_score = nn.Linear(hidden, hidden, bias=False)  # W_a (general score)
        self.attn_out = nn.Linear(2 * hidden, hidden, bias=False)  # W_c
        self.drop = nn.Dropout(dropout)
        if head_cls is not None and head_cls.reads_layers:
            raise ConfigError(f"the {head!r} head reads an encoder's middle layers, but the "
                              f"translation decoder hands its head only the attentional "
                              f"state; use head 'mos' (DOC with every vector from the last "
                              f"layer is MoS)")
        try:
            self.head: OutputHead = build_head(head, vocab_size=tgt_vocab, d_hidden=hidden,
                                               embedding=self.tgt_embed,
                                               **dict(head_options or {}))
        except (ValueError, TypeError) as err:
            raise ConfigError(f"translation head {head!r}: {err}") from err
        self.input_from_targets = input_from_targets
        if input_from_targets:
            self.input_proj = nn.Linear(self.head.target_embeddings.shape[1], emb_size)
        for embed in (self.src_embed, self.tgt_embed):
            if embed is not None:
                nn.init.uniform_(embed.weight, -0.1, 0.1)

    # ------------------------------------------------------------- encoder
    def encode(self, src: Tensor, src_lengths: Tensor) -> DecoderState:
        """Run the encoder; return the decoder's initial state and the memory."""
        if src.dim() != 2:
            raise ValueError(f"src must be (S, B) word ids, got shape {tuple(src.shape)}")
        if int(src_lengths.min()) < 1:
            raise ValueError("every source sentence needs at least one token; got a length 0")
        emb = self.drop(self.src_embed(src))
        packed = pack_padded_sequence(emb, src_lengths.cpu(), enforce_sorted=False)
        out, (h, _) = self.encoder(packed)
        memory, _ = pad_packed_sequence(out, total_length=src.shape[0])
        final = torch.cat([h[0], h[1]], dim=-1)  # (B, H): both directions' last states
        init = torch.tanh(self.bridge(final)).view(final.shape[0], 2, self.dec_layers, -1)
        hidden, cell = init[:, 0].transpose(0, 1), init[:, 1].transpose(0, 1)
        return DecoderState(hidden.contiguous(), cell.contiguous(), memory, src != self.pad_id)

    # ------------------------------------------------------------- decoder
    def _input_embed(self, tokens: Tensor) -> Tensor:
        if self.input_from_targets:
            return self.input_proj(self.head.target_embeddings[tokens])
        return self.tgt_embed(tokens)

    def _attend(self, out: Tensor, state: DecoderState) -> tuple[Tensor, Tensor]:
        """Luong attention for decoder outputs ``(T, B, H)``; returns ``h~`` and weights."""
        keys = self.attn_score(state.memory)  # (S, B, H)
        scores = torch.einsum("tbh,sbh->bts", out, keys)
        scores = scores.masked_fill(~state.memory_mask.T[:, None, :], float("-inf"))
        weights = scores.softmax(-1)  # (B, T, S)
        context = torch.einsum("bts,sbh->tbh", weights, state.memory)
        attended = torch.tanh(self.attn_out(torch.cat([context, out], dim=-1)))
        return self.drop(attended), weights

    def decode(self, tgt_in: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Teacher-forced (or one-step) decoding: features ``(T, B, H)`` and new state."""
        emb = self.drop(self._input_embed(tgt_in))
        out, (h, c) = self.decoder(emb, (state.hidden, state.cell))
        features, _ = self._attend(out, state)
        return features, DecoderState(h, c, state.memory, state.memory_mask)
