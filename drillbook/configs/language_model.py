"""The language-model config (:class:`Config`): corpus, encoder, output head and the
AWD-LSTM training recipe, with the ranges of their values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import ConfigError
from ..validation import Rule, one_of
from .base import (
    AT_LEAST_ONE,
    CAP,
    LOOP_RULES,
    NON_NEGATIVE,
    PROBABILITY,
    HeadConfig,
    LoopConfig,
    SectionedConfig,
    check_head_kind,
)

__all__ = ["LM_RULES", "Config", "DataConfig", "ModelConfig", "TrainConfig"]


@dataclass
class DataConfig:
    corpus: str = "ptb"  #: a name in drillbook.data.CORPORA


@dataclass
class ModelConfig:
    encoder: str = "awd-lstm"  #: "awd-lstm" or "transformer"
    emsize: int = 400
    nhid: int = 1150
    nlayers: int = 3
    d_out: int | None = None  #: last-layer size; None = emsize (so a tied head fits)
    dropout: float = 0.4  #: output (locked) dropout
    dropouth: float = 0.25  #: between layers (locked)
    dropouti: float = 0.4  #: on embeddings (locked)
    dropoute: float = 0.1  #: whole-word embedding dropout
    wdrop: float = 0.5  #: DropConnect on W_hh
    nhead: int = 4  #: transformer only
    d_ff: int = 1024  #: transformer only
    max_len: int = 256  #: transformer only


@dataclass
class TrainConfig(LoopConfig):
    """The AWD-LSTM recipe (Merity et al., 2018) on the loop's fields
    (:class:`~drillbook.configs.base.LoopConfig`). ``accum_steps`` cuts each step's batch
    into that many column slices (it divides ``batch_size``), each carrying its own
    recurrent state."""

    seed: int = 141
    batch_size: int = 20
    lr: float = 30.0
    clip: float = 0.25
    epochs: int = 500
    eval_batch_size: int = 10
    test_batch_size: int = 1
    bptt: int = 70
    variable_bptt: bool = True  #: AWD-LSTM's random window lengths
    optimizer: str = "sgd"  #: "sgd" (switches to averaged SGD) or "adam"
    wdecay: float = 1.2e-6
    nonmono: int = 5  #: NT-ASGD trigger window (epochs)
    alpha: float = 2.0  #: activation regularisation
    beta: float = 1.0  #: temporal activation regularisation
    max_eval_tokens: int | None = None  #: cap for tutorial runs


#: the language-model configs' value ranges (types are checked separately)
LM_RULES: Mapping[str, Rule] = {
    **{f"model.{k}": AT_LEAST_ONE for k in ("emsize", "nhid", "nlayers", "nhead", "d_ff",
                                            "max_len")},
    "model.d_out": AT_LEAST_ONE.or_none("= emsize"),
    **{f"model.{k}": PROBABILITY for k in ("dropout", "dropouth", "dropouti", "dropoute",
                                           "wdrop")},
    **{f"train.{k}": rule for k, rule in LOOP_RULES.items()},
    **{f"train.{k}": AT_LEAST_ONE for k in ("eval_batch_size", "test_batch_size", "bptt")},
    "train.optimizer": one_of("sgd", "adam"),
    "train.wdecay": NON_NEGATIVE,
    "train.nonmono": AT_LEAST_ONE.saying("an integer >= 1 (epochs in NT-ASGD's window)"),
    "train.alpha": NON_NEGATIVE,
    "train.beta": NON_NEGATIVE,
    "train.max_eval_tokens": CAP,
}


@dataclass
class Config(SectionedConfig):
    """A language-model experiment: corpus, encoder, output head, training recipe."""

    name: str
    description: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    head: HeadConfig = field(default_factory=HeadConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    #: key in drillbook.papers.RECORD of the authors' result for this setup (for
    #: comparison; never used in training, ignored by hash() and resume_key())
    paper: str | None = None

    task: ClassVar[str] = "language-model"
    RULES: ClassVar[Mapping[str, Rule]] = LM_RULES

    def validate(self) -> Config:
        """Types and ranges of every value (see ``LM_RULES``), and a head that gives
        word probabilities (perplexity needs them: no ``vmf``)."""
        super().validate()
        check_head_kind(self.head.kind, language_model=True, options=self.head.options)
        from ..data.corpora import CORPORA

        spec = CORPORA.get(self.data.corpus)
        if spec is not None and spec.languages:
            streams = sorted(k for k, s in CORPORA.items() if not s.languages)
            raise ConfigError(f"invalid data.corpus={self.data.corpus!r}: a parallel corpus "
                              f"of sentence pairs, which translation configs read; a "
                              f"language model reads one of {', '.join(streams)}")
        t = self.train
        if self.model.encoder == "transformer" and self.model.max_len < t.bptt:
            raise ConfigError(f"invalid model.max_len={self.model.max_len}: a Transformer "
                              f"reads windows of train.bptt={t.bptt} positions (and longer "
                              f"ones with variable windows); raise model.max_len or lower "
                              f"train.bptt")
        if t.batch_size % t.accum_steps:
            raise ConfigError(f"invalid train.accum_steps={t.accum_steps}: it must divide "
                              f"train.batch_size={t.batch_size} (each slice is "
                              f"batch_size / accum_steps columns)")
        return self
