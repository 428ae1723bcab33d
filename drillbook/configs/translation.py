"""The translation config (:class:`NMTConfig`): language pair, target word vectors, the
attentional model's sizes, the output head and training, with the ranges of their values.
Keys and overrides are the language models' (``data.src=de``, ``model.hidden=512``,
``head.options.depth=2``, ``train.epochs=20``); the named ``multi30k/...`` configs are in
:mod:`drillbook.configs.registry`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import ConfigError
from ..validation import Rule, number, one_of
from .base import (
    AT_LEAST_ONE,
    CAP,
    LOOP_RULES,
    PROBABILITY,
    HeadConfig,
    LoopConfig,
    SectionedConfig,
    check_head_kind,
)

__all__ = ["NMT_RULES", "NMTConfig", "NMTDataConfig", "NMTModelConfig", "NMTTrainConfig"]


@dataclass
class NMTDataConfig:
    src: str = "de"
    tgt: str = "en"
    min_freq: int = 2  #: words seen fewer times in training become <unk>
    max_train_pairs: int | None = None  #: a prefix of the training set (CPU tutorials)
    #: target word vectors for continuous heads: "glove-50d" (English only), "word2vec"
    #: (trained with gensim on the target side), or None
    target_embeddings: str | None = None


@dataclass
class NMTModelConfig:
    emb_size: int = 256
    hidden: int = 256
    dec_layers: int = 1
    dropout: float = 0.3
    input_from_targets: bool = False  #: vMF paper's "tied" decoder input
    #: "lstm" (the attentional BiLSTM model: emb_size, hidden, dec_layers) or
    #: "transformer" (d_model, nhead, layers, d_ff, positions, norm, max_len)
    arch: str = "lstm"
    d_model: int = 256
    nhead: int = 4
    layers: int = 3  #: Transformer blocks of the encoder and of the decoder
    d_ff: int = 1024
    positions: str = "sinusoidal"  #: or "learned"
    norm: str = "pre"  #: "pre" (OpenNMT-py's, DRILL's implementation) or "post"
    max_len: int = 256  #: the Transformer's longest sentence
    #: one vocabulary for both sides, one embedding shared by encoder and decoder
    #: (Transformer only)
    share_vocab: bool = False


@dataclass
class NMTTrainConfig(LoopConfig):
    """Adam on batches of sentence pairs, on the loop's fields
    (:class:`~drillbook.configs.base.LoopConfig`); ``accum_steps`` cuts each batch into
    that many pieces of whole sentences."""

    seed: int = 1
    batch_size: int = 64
    lr: float = 1e-3  #: Adam, as in the joint-embedding paper
    clip: float = 5.0
    epochs: int = 10
    log_interval: int = 100
    #: sampled softmax for softmax-family heads: negatives per batch as a percentage of V
    #: (the joint-embedding paper's Sec. 3.2); None trains on the full softmax
    negative_sampling: float | None = None
    max_eval_pairs: int | None = None  #: validation BLEU on a prefix (CPU tutorials)
    max_len: int = 60  #: decoding limit
    #: the share of each target's probability spread evenly over the vocabulary
    #: (Szegedy et al. 2016); 0 trains on the plain loss of the head
    label_smoothing: float = 0.0
    #: warm-up steps of the inverse-square-root schedule (train.lr is its peak); None:
    #: a constant train.lr
    warmup: int | None = None
    adam_beta2: float = 0.999  #: Adam's second-moment decay (0.98 for a Transformer)


#: the translation configs' value ranges (types are checked separately)
NMT_RULES: Mapping[str, Rule] = {
    "data.min_freq": AT_LEAST_ONE, "data.max_train_pairs": CAP,
    "data.target_embeddings": one_of(None, "glove-50d", "word2vec"),
    "model.emb_size": AT_LEAST_ONE, "model.hidden": AT_LEAST_ONE,
    "model.dec_layers": AT_LEAST_ONE, "model.dropout": PROBABILITY,
    "model.arch": one_of("lstm", "transformer"), "model.d_model": AT_LEAST_ONE,
    "model.nhead": AT_LEAST_ONE, "model.layers": AT_LEAST_ONE, "model.d_ff": AT_LEAST_ONE,
    "model.positions": one_of("sinusoidal", "learned"), "model.norm": one_of("pre", "post"),
    "model.max_len": AT_LEAST_ONE,
    **{f"train.{k}": rule for k, rule in LOOP_RULES.items()},
    "train.max_eval_pairs": CAP,
    "train.negative_sampling": number(above=0, maximum=100).saying(
        "a percentage in (0, 100]").or_none("full softmax"),
    "train.max_len": AT_LEAST_ONE,
    "train.label_smoothing": PROBABILITY.saying("a share in [0, 1)"),
    "train.warmup": AT_LEAST_ONE.or_none("a constant learning rate"),
    "train.adam_beta2": PROBABILITY.saying("a decay in [0, 1)"),
}


@dataclass
class NMTConfig(SectionedConfig):
    """A translation experiment: language pair, model sizes, output head, training."""

    name: str
    description: str = ""
    data: NMTDataConfig = field(default_factory=NMTDataConfig)
    model: NMTModelConfig = field(default_factory=NMTModelConfig)
    head: HeadConfig = field(default_factory=lambda: HeadConfig("softmax"))
    train: NMTTrainConfig = field(default_factory=NMTTrainConfig)
    paper: str | None = None  #: a key in drillbook.papers.RECORD (none: Multi30k analogues)

    task: ClassVar[str] = "translation"
    RULES: ClassVar[Mapping[str, Rule]] = NMT_RULES

    def validate(self) -> NMTConfig:
        """Types and ranges of every value (see ``NMT_RULES``), a known head, and word
        vectors for a continuous (``vmf``) head; returns ``self``.

        Raises:
            ConfigError: one line naming the key, the value and what is valid.
        """
        super().validate()
        if self.train.accum_steps > self.train.batch_size:
            raise ConfigError(f"invalid train.accum_steps={self.train.accum_steps}: a batch "
                              f"of train.batch_size={self.train.batch_size} sentences cannot "
                              f"be cut into more pieces than it has sentences")
        check_head_kind(self.head.kind, language_model=False, options=self.head.options)
        from ..heads import HEADS, VectorHead  # torch: only to validate

        m = self.model
        if m.arch == "transformer":
            if m.d_model % m.nhead:
                raise ConfigError(f"invalid model.d_model={m.d_model}: it must be divisible "
                                  f"by model.nhead={m.nhead}")
            if m.input_from_targets:
                raise ConfigError("model.input_from_targets is the LSTM decoder's; the "
                                  "transformer reads its own target embedding: unset it")
        elif m.share_vocab:
            raise ConfigError("model.share_vocab shares one embedding between the "
                              "transformer's encoder and decoder; set model.arch=transformer "
                              "or unset it")
        if self.train.label_smoothing and not HEADS[self.head.kind].is_distribution:
            raise ConfigError(f"label smoothing spreads probability over the words, and the "
                              f"{self.head.kind} head has no distribution over words; set "
                              f"train.label_smoothing=0")
        if self.train.label_smoothing and self.train.negative_sampling is not None:
            raise ConfigError("label smoothing needs the full softmax: unset "
                              "train.negative_sampling or set train.label_smoothing=0")
        vectors = self.data.target_embeddings
        if issubclass(HEADS[self.head.kind], VectorHead) and vectors is None:
            raise ConfigError(f"a {self.head.kind} head needs target word vectors: set "
                              f"data.target_embeddings to 'glove-50d' or 'word2vec'")
        if vectors == "glove-50d" and self.data.tgt != "en":
            raise ConfigError(f"invalid data.target_embeddings='glove-50d' for target "
                              f"language {self.data.tgt!r}: GloVe-50d is English; use "
                              f"data.target_embeddings=word2vec")
        return self
