"""Typed experiment configs and ``key=value`` overrides.

A config is four plain dataclasses (data, model, head, train) plus a name and the key of
the paper's number it should reproduce (:mod:`drillbook.papers`). Everything is
JSON-serialisable; the trainer writes the resolved config into its run folder.

Overrides use dotted keys: ``model.nhid=1150``, ``train.lr=20``,
``head.options.depth=2``. Values are parsed as JSON (``0.5``, ``true``, ``null``,
``"relu"``) with bare words taken as strings. Unknown keys and values of the wrong type
are errors that list what is valid.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

__all__ = [
    "Config",
    "ConfigError",
    "DataConfig",
    "HeadConfig",
    "ModelConfig",
    "SectionedConfig",
    "TrainConfig",
    "apply_overrides",
]


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
class HeadConfig:
    kind: str = "tied"  #: a name in drillbook.heads.HEADS
    options: dict[str, Any] = field(default_factory=dict)  #: keyword options of that head


@dataclass
class TrainConfig:
    seed: int = 141
    batch_size: int = 20
    eval_batch_size: int = 10
    test_batch_size: int = 1
    bptt: int = 70
    variable_bptt: bool = True  #: AWD-LSTM's random window lengths
    optimizer: str = "sgd"  #: "sgd" (switches to averaged SGD) or "adam"
    lr: float = 30.0
    clip: float = 0.25
    wdecay: float = 1.2e-6
    nonmono: int = 5  #: NT-ASGD trigger window (epochs)
    alpha: float = 2.0  #: activation regularisation
    beta: float = 1.0  #: temporal activation regularisation
    epochs: int = 500
    max_batches_per_epoch: int | None = None  #: cap for tutorial runs
    max_eval_tokens: int | None = None  #: cap for tutorial runs
    checkpoint_minutes: float = 10.0  #: periodic checkpoint interval
    checkpoint_steps: int | None = None  #: ... or every N steps
    amp: bool = False  #: bf16 autocast on CUDA
    log_interval: int = 200


class SectionedConfig:
    """Behaviour shared by experiment configs: a ``name``, a ``description``, a ``paper``
    record key and dataclass *sections* (``data``, ``model``, ``head``, ``train``, ...).

    Subclasses are dataclasses; every field whose type is a dataclass is a section.
    """

    #: train-section fields that a resumed run may change (they alter no step taken)
    RESUMABLE_CHANGES: tuple[str, ...] = ("epochs", "log_interval", "checkpoint_minutes",
                                          "checkpoint_steps")

    @classmethod
    def sections(cls) -> dict[str, type]:
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in dataclasses.fields(cls)
                if dataclasses.is_dataclass(hints[f.name])}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        d = copy.deepcopy(d)
        sections = cls.sections()
        kwargs = {k: v for k, v in d.items() if k not in sections}
        if isinstance(kwargs.get("paper"), dict):
            kwargs["paper"] = None  # run folders written before the record held numbers
        for key, sub in sections.items():
            if key in d:
                _check_keys(sub, d[key], key)
                kwargs[key] = sub(**d[key])
        _check_keys(cls, kwargs, "config")
        return cls(**kwargs)

    def hash(self) -> str:
        """A short stable hash of everything that affects training (not name or paper)."""
        d = self.to_dict()
        d.pop("name"), d.pop("description"), d.pop("paper")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    def resume_key(self) -> str:
        """Like :meth:`hash`, but blind to what may change when a run is resumed: the
        number of epochs and the checkpoint/log cadence (they do not alter the steps
        already taken)."""
        c = self.copy()
        defaults = {f.name: f for f in dataclasses.fields(c.train)}
        for name in self.RESUMABLE_CHANGES:
            if name in defaults:
                setattr(c.train, name, None)
        return c.hash()

    def copy(self):
        return copy.deepcopy(self)


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


def _check_keys(cls, d: dict, where: str) -> None:
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - valid)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in {where}; valid keys: {sorted(valid)}")


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare word: a string


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Fit a parsed value to a field's type, or raise ConfigError naming both."""
    hint = annotation
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for opt in options:
            if opt is not type(None):
                try:
                    return _coerce(value, opt, key)
                except ConfigError:
                    continue
        raise ConfigError(f"{key}={value!r} does not fit type {hint}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{key} must be a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key} must be a string, got {value!r}")
    return value


def apply_overrides(config: SectionedConfig, overrides: list[str] | dict[str, Any]):
    """Return a copy of ``config`` with ``key=value`` overrides applied.

    Raises:
        ConfigError: malformed item, unknown key (with the valid ones) or wrong type.
    """
    config = config.copy()
    items = overrides.items() if isinstance(overrides, dict) else [
        _split(item) for item in overrides]
    for key, raw in items:
        value = _parse(raw) if isinstance(raw, str) else raw
        parts = key.split(".")
        if parts[:2] == ["head", "options"] and len(parts) == 3:
            config.head.options[parts[2]] = value
            continue
        sections = list(type(config).sections())
        if len(parts) != 2 or parts[0] not in sections:
            raise ConfigError(f"unknown key {key!r}; keys look like section.field with "
                              f"section in {', '.join(sections)} (or head.options.NAME)")
        section = getattr(config, parts[0])
        fields = {f.name: f for f in dataclasses.fields(section)}
        if parts[1] not in fields or parts[1] == "options":
            raise ConfigError(f"unknown key {key!r}; valid keys in {parts[0]}: "
                              f"{sorted(k for k in fields if k != 'options')}")
        hints = typing.get_type_hints(type(section))
        setattr(section, parts[1], _coerce(value, hints[parts[1]], key))
    return config


def _split(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value, e.g. train.lr=20")
    key, value = item.split("=", 1)
    return key.strip(), value.strip()
