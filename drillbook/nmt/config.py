"""Translation experiment configs (``multi30k/...``), same override rules as the LMs.

They are named configs like the language models' (:func:`drillbook.configs.get_config`
finds them, and their ``task`` is ``"translation"``); :func:`get_nmt_config` looks up
these alone.

Keys: ``data.src=de``, ``model.hidden=512``, ``head.kind=drill``,
``head.options.depth=2``, ``train.epochs=20`` (see :mod:`drillbook.configs.schema`).

Two kinds of "tied" appear in the papers, so the names say which:

* ``multi30k/de-en-softmax-tied``: a softmax whose output matrix is the decoder's input
  embedding (weight tying, the ``tied`` head; the joint-embedding paper's baseline);
* ``multi30k/de-en-vmf-<loss>-tied``: a continuous-output model whose decoder *inputs* are
  the frozen pretrained target embeddings (``model.input_from_targets``), the vMF paper's
  "tied" column (Table 1) and its best setups, max-margin and regularised NLLvMF with
  fastText vectors (their BLEU is in :data:`drillbook.papers.RECORD` under
  ``vmf:table1:fasttext-tied-*``). The extracted paper text lost which regulariser that
  NLLvMF row used, so both ``reg1`` and ``reg2`` are provided. Here the vectors are GloVe
  50-d and the data Multi30k, so the numbers are not comparable with the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..configs.schema import (
    AMP,
    AT_LEAST_ONE,
    CAP,
    CHECKPOINT_STEPS,
    CLIP,
    EPOCHS,
    POSITIVE,
    PROBABILITY,
    ConfigError,
    HeadConfig,
    SectionedConfig,
    check_fields,
    check_head_kind,
)
from ..validation import number, one_of

__all__ = ["NMT_CONFIGS", "NMTConfig", "get_nmt_config", "list_nmt_configs"]


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


@dataclass
class NMTTrainConfig:
    seed: int = 1
    batch_size: int = 64
    lr: float = 1e-3  #: Adam, as in the joint-embedding paper
    clip: float = 5.0
    epochs: int = 10
    max_batches_per_epoch: int | None = None
    #: sampled softmax for softmax-family heads: negatives per batch as a percentage of V
    #: (the joint-embedding paper's Sec. 3.2); None trains on the full softmax
    negative_sampling: float | None = None
    max_eval_pairs: int | None = None  #: validation BLEU on a prefix (CPU tutorials)
    max_len: int = 60  #: decoding limit
    log_interval: int = 100
    checkpoint_minutes: float = 10.0
    checkpoint_steps: int | None = None
    amp: str = "off"  #: "off", "bf16", "fp16" or "auto", as for the language models
    #: gradient accumulation: each batch in this many pieces of whole sentences
    accum_steps: int = 1
    compile: bool = False  #: torch.compile the model (in place)


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

    def validate(self) -> NMTConfig:
        """Types and ranges of every value, a known head, and word vectors for a
        continuous (``vmf``) head; returns ``self``.

        Raises:
            ConfigError: one line naming the key, the value and what is valid.
        """
        super().validate()
        check_fields(self, {
            "data.min_freq": AT_LEAST_ONE, "data.max_train_pairs": CAP,
            "data.target_embeddings": one_of(None, "glove-50d", "word2vec"),
            "model.emb_size": AT_LEAST_ONE, "model.hidden": AT_LEAST_ONE,
            "model.dec_layers": AT_LEAST_ONE, "model.dropout": PROBABILITY,
            "train.batch_size": AT_LEAST_ONE, "train.lr": POSITIVE, "train.clip": CLIP,
            "train.epochs": EPOCHS,
            "train.max_batches_per_epoch": CAP, "train.max_eval_pairs": CAP,
            "train.negative_sampling": number(above=0, maximum=100).saying(
                "a percentage in (0, 100]").or_none("full softmax"),
            "train.max_len": AT_LEAST_ONE, "train.log_interval": AT_LEAST_ONE,
            "train.checkpoint_minutes": POSITIVE,
            "train.checkpoint_steps": CHECKPOINT_STEPS,
            "train.amp": AMP, "train.accum_steps": AT_LEAST_ONE,
        })
        if self.train.accum_steps > self.train.batch_size:
            raise ConfigError(f"invalid train.accum_steps={self.train.accum_steps}: a batch "
                              f"of train.batch_size={self.train.batch_size} sentences cannot "
                              f"be cut into more pieces than it has sentences")
        check_head_kind(self.head.kind, language_model=False)
        vectors = self.data.target_embeddings
        if self.head.kind == "vmf" and vectors is None:
            raise ConfigError("a vmf head needs target word vectors: set "
                              "data.target_embeddings to 'glove-50d' or 'word2vec'")
        if vectors == "glove-50d" and self.data.tgt != "en":
            raise ConfigError(f"invalid data.target_embeddings='glove-50d' for target "
                              f"language {self.data.tgt!r}: GloVe-50d is English; use "
                              f"data.target_embeddings=word2vec")
        return self


def _multi30k(head: str, options: dict | None = None, *, pair=("de", "en"),
              embeddings: str | None = None, description: str = "",
              input_from_targets: bool = False) -> NMTConfig:
    src, tgt = pair
    name = f"multi30k/{src}-{tgt}-{head}"
    return NMTConfig(
        name=name, description=description or f"{src}->{tgt} with a {head} output layer",
        data=NMTDataConfig(src=src, tgt=tgt, target_embeddings=embeddings),
        model=NMTModelConfig(input_from_targets=input_from_targets),
        head=HeadConfig(head, dict(options or {})))


def _builders() -> dict[str, Any]:
    b = {}
    for head, options in [("softmax", {}), ("tied", {}), ("bilinear", {}),
                          ("dual", {"d_joint": 512, "activation": "tanh"}),
                          ("drill", {"depth": 2, "activation": "relu", "dropout": 0.3,
                                     "dropout_kind": "standard"})]:
        cfg = _multi30k(head, options)
        if head == "tied":  # a weight-tied softmax, not the vMF paper's tied inputs
            cfg.name = "multi30k/de-en-softmax-tied"
            cfg.description = "de->en with a weight-tied softmax (output matrix = input " \
                              "embedding)"
        b[cfg.name] = cfg
    for loss in ["nllvmf", "reg1", "reg2", "l2", "cosine", "maxmargin"]:
        cfg = _multi30k("vmf", {"loss": loss}, embeddings="glove-50d",
                        description=f"de->en, continuous outputs on GloVe-50d, {loss} loss")
        cfg.name = f"multi30k/de-en-vmf-{loss}" if loss != "nllvmf" else "multi30k/de-en-vmf"
        b[cfg.name] = cfg
    for loss in ["reg1", "reg2", "maxmargin"]:  # the vMF paper's best rows: tied inputs
        cfg = _multi30k("vmf", {"loss": loss}, embeddings="glove-50d",
                        input_from_targets=True,
                        description=f"de->en, continuous outputs on GloVe-50d, {loss} loss, "
                                    f"decoder inputs tied to the frozen target embeddings")
        cfg.name = f"multi30k/de-en-vmf-{loss}-tied"
        b[cfg.name] = cfg
    for pair in [("en", "de"), ("en", "fr")]:
        cfg = _multi30k("softmax", pair=pair)
        b[cfg.name] = cfg
    return b


NMT_CONFIGS = _builders()


def list_nmt_configs() -> list[str]:
    return sorted(NMT_CONFIGS)


def get_nmt_config(name: str) -> NMTConfig:
    """A fresh copy of a named translation config (ConfigError listing names if unknown)."""
    try:
        return NMT_CONFIGS[name].copy()
    except KeyError:
        raise ConfigError(f"unknown translation config {name!r}; choose one of "
                          f"{list_nmt_configs()}") from None
