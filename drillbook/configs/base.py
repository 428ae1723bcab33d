"""What every experiment config shares: the class behind both tasks' configs, the head
section, the training-loop section, the range rules and ``key=value`` overrides.

A config is plain dataclass *sections* (``data``, ``model``, ``head``, ``train``) plus a
``name``, a ``description`` and the key of the paper's number it should reproduce
(:mod:`drillbook.papers`); its class names its ``task``
(:class:`~drillbook.configs.language_model.Config`, ``"language-model"``;
:class:`~drillbook.configs.translation.NMTConfig`, ``"translation"``). Every config is
validated when it is built from overrides (:func:`apply_overrides`), read back
(:meth:`SectionedConfig.from_dict`) or handed to a trainer
(:meth:`SectionedConfig.validate`): a value that would train garbage is a
:class:`~drillbook.errors.ConfigError` naming the key, the value and what is valid, before
anything runs. Overrides use dotted keys (``train.lr=20``, ``head.options.depth=2``) whose
values are parsed as JSON, bare words as strings.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ConfigError
from ..precision import AMP_CHOICES, OLD_SPELLINGS
from ..validation import PROBABILITY as _PROBABILITY
from ..validation import (
    SEED,
    Rule,
    as_list,
    integer,
    is_integer,
    is_number,
    number,
    one_of,
    suggest,
)

__all__ = [
    "LOOP_RULES",
    "HeadConfig",
    "LoopConfig",
    "SectionedConfig",
    "apply_overrides",
    "check_fields",
    "check_head_kind",
]


# ------------------------------------------------------------------ range rules
# Range rules (drillbook.validation.Rule), keyed "section.field"; the types come from the
# dataclass annotations (_coerce).
AT_LEAST_ONE = integer(minimum=1)
CAP = AT_LEAST_ONE.or_none("no cap")
POSITIVE = number(above=0)
NON_NEGATIVE = number(minimum=0)
CLIP = NON_NEGATIVE.saying("0 (no clipping) or a positive gradient-norm bound")
PROBABILITY = _PROBABILITY.saying("a dropout probability in [0, 1)")
EPOCHS = AT_LEAST_ONE.saying("an integer >= 1 (0 would train nothing)")
CHECKPOINT_STEPS = AT_LEAST_ONE.or_none("time-based only")
AMP = one_of(*AMP_CHOICES)
FRACTION = _PROBABILITY.saying("a fraction in [0, 1) of the metric, e.g. 0.005")


# ------------------------------------------------------------------ sections
@dataclass
class HeadConfig:
    kind: str = "tied"  #: a name in drillbook.heads.HEADS
    options: dict[str, Any] = field(default_factory=dict)  #: keyword options of that head


@dataclass
class LoopConfig:
    """The training section's fields that the one training loop
    (:class:`drillbook.train.loop.TrainingLoop`) reads, whatever the task; each task's
    training section extends it and gives the first five their defaults."""

    seed: int
    batch_size: int
    lr: float
    clip: float  #: gradient-norm bound; 0 switches clipping off
    epochs: int  #: at least 1 (0 would train nothing; evaluate with `drillbook eval`)
    max_batches_per_epoch: int | None = None  #: a cap (CPU tutorials)
    log_interval: int = 200  #: optimiser steps between two progress-bar updates
    checkpoint_minutes: float = 10.0  #: periodic checkpoint interval
    checkpoint_steps: int | None = None  #: ... or every N steps
    #: precision: "fp32", "bf16", "fp16" (with a gradient scaler), "tf32" (TF32 matrix
    #: products in the training step, GPUs of compute capability >= 8.0) or "auto" (bf16
    #: for a mixture head on a GPU with bfloat16, else float32: the rule measured on an
    #: H200, drillbook.precision.resolve_precision); old files' false/true/"off" read as
    #: fp32/bf16/fp32
    amp: str = "fp32"
    #: gradient accumulation: each step's batch in this many pieces
    accum_steps: int = 1
    compile: bool = False  #: torch.compile the model (in place)
    #: the stopping rule of a run trained to its plateau (None: train every epoch): stop
    #: after an epoch once the best validation metric of the last ``plateau_epochs``
    #: epochs improved on the best before them by less than ``plateau_tolerance`` of it
    #: (0.005: perplexity down by less than 0.5%, BLEU up by less than 0.5%;
    #: :func:`drillbook.train.plateau.reached_plateau`)
    plateau_epochs: int | None = None
    plateau_tolerance: float = 0.005


#: the ranges of :class:`LoopConfig`'s fields, keyed by field (each task's rules prefix
#: them with its training section, ``train.``)
LOOP_RULES: Mapping[str, Rule] = {
    "seed": SEED,
    "batch_size": AT_LEAST_ONE,
    "lr": POSITIVE,
    "clip": CLIP,
    "epochs": EPOCHS,
    "max_batches_per_epoch": CAP,
    "log_interval": AT_LEAST_ONE,
    "checkpoint_minutes": POSITIVE,
    "checkpoint_steps": CHECKPOINT_STEPS,
    "amp": AMP,
    "accum_steps": AT_LEAST_ONE,
    "plateau_epochs": AT_LEAST_ONE.or_none("no stopping rule"),
    "plateau_tolerance": FRACTION,
}


# ------------------------------------------------------------------ the config class
class SectionedConfig:
    """Behaviour shared by experiment configs: a ``name``, a ``description``, a ``paper``
    record key and dataclass *sections* (``data``, ``model``, ``head``, ``train``, ...).

    Subclasses are dataclasses; every field whose type is a dataclass is a section. Each
    subclass names its :attr:`task`, which :meth:`to_dict` writes beside the values, so a
    config file or run folder says which class reads it
    (:func:`drillbook.configs.config_from_dict`).
    """

    #: what the config trains: ``"language-model"``
    #: (:class:`~drillbook.configs.language_model.Config`) or ``"translation"``
    #: (:class:`~drillbook.configs.translation.NMTConfig`)
    task: ClassVar[str] = ""

    #: the value ranges of the class's fields, ``"section.field" -> Rule`` (types are
    #: checked from the annotations); :meth:`validate` applies them
    RULES: ClassVar[Mapping[str, Rule]] = {}

    #: train-section fields that a resumed run may change. They alter no step already
    #: taken, only the ones to come: the number of epochs and the stopping rule, the
    #: checkpoint and log cadence, and the step size (``lr``, ``clip``: lowering them is
    #: how a diverged run goes on from its last checkpoint). The run folder's
    #: ``config.json`` then holds the new values, each log record the ``lr`` and ``clip``
    #: it was trained with, and the checkpoint the list of changes (``"changes"``).
    RESUMABLE_CHANGES: tuple[str, ...] = ("epochs", "log_interval", "checkpoint_minutes",
                                          "checkpoint_steps", "lr", "clip", "plateau_epochs",
                                          "plateau_tolerance")

    @classmethod
    def sections(cls) -> dict[str, type]:
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in dataclasses.fields(cls)
                if dataclasses.is_dataclass(hints[f.name])}

    def to_dict(self) -> dict[str, Any]:
        """The config as nested plain dicts, JSON-serialisable, with its ``task``."""
        d = dataclasses.asdict(self)
        return {"name": d.pop("name"), "task": self.task, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        """The config a :meth:`to_dict` dict describes, validated. A missing ``task`` is
        this class's (files written before configs named their task).

        Raises:
            ConfigError: not a dict, another task, unknown or missing keys, or invalid
                values.
        """
        if not isinstance(d, dict):
            raise ConfigError(f"a config must be a JSON object, got {type(d).__name__}")
        d = copy.deepcopy(d)
        task = d.pop("task", cls.task)
        if task != cls.task:
            raise ConfigError(f"a {task!r} config cannot be read as a {cls.task!r} config; "
                              f"use drillbook.configs.config_from_dict, which reads each "
                              f"task's configs")
        sections = cls.sections()
        kwargs = {k: v for k, v in d.items() if k not in sections}
        if isinstance(kwargs.get("paper"), dict):
            kwargs["paper"] = None  # run folders written before the record held numbers
        for key, sub in sections.items():
            if key in d:
                if not isinstance(d[key], dict):
                    raise ConfigError(f"config section {key!r} must be an object, got "
                                      f"{d[key]!r}")
                _check_keys(sub, d[key], key)
                kwargs[key] = sub(**d[key])
        _check_keys(cls, kwargs, "config")
        if "name" not in kwargs:
            raise ConfigError("the config has no 'name'; add one (any string)")
        return cls(**kwargs).validate()

    def validate(self):
        """Check every value's type (and, in subclasses, its range); return ``self``.

        Raises:
            ConfigError: one line naming the key, the value and what is valid.
        """
        if not isinstance(self.name, str):
            raise ConfigError(f"name must be a string, got {self.name!r}")
        for key in ("description",):
            if not isinstance(getattr(self, key, ""), str):
                raise ConfigError(f"{key} must be a string, got {getattr(self, key)!r}")
        paper = getattr(self, "paper", None)
        if paper is not None:
            from ..papers import RECORD

            if paper not in RECORD:
                raise ConfigError(f"paper must be null or a key of drillbook.papers.RECORD, "
                                  f"got {paper!r}")
        for name in self.sections():
            section = getattr(self, name)
            hints = typing.get_type_hints(type(section))
            for f in dataclasses.fields(section):
                value = getattr(section, f.name)
                if f.name == "options":
                    if not isinstance(value, dict):
                        raise ConfigError(f"{name}.options must be an object of keyword "
                                          f"options, got {value!r}")
                    continue
                upgraded = _upgrade(f"{name}.{f.name}", value)
                plain = _coerce(upgraded, hints[f.name], f"{name}.{f.name}")
                if upgraded is not value or (type(plain) is not type(value)
                                             and not isinstance(upgraded, int)):
                    setattr(section, f.name, plain)  # a NumPy number: JSON needs Python's
        check_fields(self, self.RULES)
        return self

    def hash(self) -> str:
        """A short stable hash of everything that affects training (not name or paper)."""
        d = self.to_dict()
        d.pop("name"), d.pop("task"), d.pop("description"), d.pop("paper")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    def resume_key(self) -> str:
        """Like :meth:`hash`, but blind to what may change when a run is resumed
        (:attr:`RESUMABLE_CHANGES`: epochs, checkpoint/log cadence, ``lr``, ``clip``)."""
        c = self.copy()
        names = {f.name for f in dataclasses.fields(c.train)}
        for name in self.RESUMABLE_CHANGES:
            if name in names:
                setattr(c.train, name, None)
        return c.hash()

    def copy(self):
        return copy.deepcopy(self)


# ------------------------------------------------------------------ validation
def check_fields(config: SectionedConfig, rules: Mapping[str, Rule]) -> None:
    """Apply ``rules`` (``"section.field" -> Rule``) to ``config``.

    Raises:
        ConfigError: ``invalid train.clip=-1.0: it must be 0 (no clipping) or ...``.
    """
    for key, rule in rules.items():
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        if not rule(value):
            raise ConfigError(f"invalid {key}={value!r}: it must be {rule.valid}")


def check_head_kind(kind: str, *, language_model: bool,
                    options: Mapping[str, Any] | None = None) -> None:
    """``head.kind`` must name a head in :data:`drillbook.heads.HEADS`; a language model
    also needs one that declares a distribution over the words
    (:func:`drillbook.heads.registry.language_model_refusal`); and ``head.options``, when
    given, must be options that head takes, with values its declarations allow
    (:meth:`drillbook.heads.OutputHead.check_options`)."""
    from ..heads.registry import HEADS, language_model_refusal  # torch: only to validate

    if kind not in HEADS:
        raise ConfigError(f"unknown head kind {kind!r} (head.kind){suggest(kind, HEADS)}: "
                          f"it must be one of {', '.join(sorted(HEADS))}")
    refusal = language_model_refusal(HEADS[kind]) if language_model else None
    if refusal is not None:
        raise ConfigError(f"invalid head.kind={kind!r}: {refusal}")
    if options is not None:
        HEADS[kind].check_options(options, others=HEADS)


def _check_keys(cls, d: dict, where: str) -> None:
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - valid)
    if unknown:
        hints = "".join(suggest(key, valid) for key in unknown)
        raise ConfigError(f"unknown key(s) {unknown} in {where}{hints}; valid keys: "
                          f"{sorted(valid)}")


#: values of earlier releases that still load, by key: ``train.amp`` was a boolean
#: (``true``: bfloat16 autocast), then said ``off`` for float32 (the precision's old
#: spellings, :data:`drillbook.precision.OLD_SPELLINGS`)
_UPGRADES: Mapping[str, Mapping[bool | str, Any]] = {"train.amp": OLD_SPELLINGS}


def _upgrade(key: str, value: Any) -> Any:
    """``value`` in today's form (``train.amp=true`` -> ``"bf16"``, ``off`` ->
    ``"fp32"``)."""
    if isinstance(value, (bool, str)) and value in _UPGRADES.get(key, {}):
        return _UPGRADES[key][value]
    return value


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
        if is_integer(value):
            return int(value)
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if hint is float:
        if is_number(value):
            return float(value)
        raise ConfigError(f"{key} must be a finite number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key} must be a string, got {value!r}")
    return value


def apply_overrides(config: SectionedConfig, overrides: list[str] | dict[str, Any]):
    """Return a copy of ``config`` with ``key=value`` overrides applied: ``train.lr=20``,
    ``head.options.depth=2`` (one head option), ``head.options={}`` (all of them at once:
    what a change of ``head.kind`` needs, as the old head's options do not fit the new
    head). ``overrides`` is a list of such strings or a dict ``key -> value``; a lone
    string is refused, never read letter by letter.

    Raises:
        ConfigError: malformed item, unknown key (with the valid ones), wrong type, or a
            value out of range (:meth:`SectionedConfig.validate`).
    """
    config = config.copy()
    items = overrides.items() if isinstance(overrides, dict) else [
        _split(item) for item in as_list(overrides, "overrides", " (or a dict: key -> value)")]
    keys = [key for key, _ in items]
    for key, raw in items:
        value = _parse(raw) if isinstance(raw, str) else raw
        parts = key.split(".")
        if parts[:2] == ["head", "options"] and len(parts) == 3:
            config.head.options[parts[2]] = value
            continue
        if parts == ["head", "options"]:  # the head's options replaced at once
            if not isinstance(value, dict):
                raise ConfigError(f"head.options must be an object of the head's options, "
                                  f"e.g. head.options={{}} (none: the head's defaults), got "
                                  f"{value!r}")
            config.head.options = dict(value)
            continue
        sections = list(type(config).sections())
        if len(parts) != 2 or parts[0] not in sections:
            every = [f"{name}.{f.name}" for name in sections
                     for f in dataclasses.fields(getattr(config, name)) if f.name != "options"]
            raise ConfigError(f"unknown key {key!r}{suggest(key, every)}; keys look like "
                              f"section.field with section in {', '.join(sections)} (or "
                              f"head.options.NAME, or head.options={{...}} for all of them)")
        section = getattr(config, parts[0])
        fields = {f.name: f for f in dataclasses.fields(section)}
        if parts[1] not in fields or parts[1] == "options":
            valid = sorted(k for k in fields if k != "options")
            raise ConfigError(f"unknown key {key!r}"
                              f"{suggest(key, [f'{parts[0]}.{k}' for k in valid])}; valid "
                              f"keys in {parts[0]}: {valid}")
        hints = typing.get_type_hints(type(section))
        setattr(section, parts[1], _coerce(_upgrade(key, value), hints[parts[1]], key))
    try:
        return config.validate()
    except ConfigError as err:
        if "head.kind" in keys and "head.options" not in keys and "for head" in str(err):
            # the config's head options do not fit the new head: say how to drop them
            raise ConfigError(f"{err}; a new head.kind keeps the config's head.options: "
                              f"drop them with the override head.options={{}} (then set the "
                              f"new head's own)") from None
        raise


def _split(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value, e.g. train.lr=20")
    key, value = item.split("=", 1)
    return key.strip(), value.strip()
