"""Config files: a resolved config written out, edited, and read back.

``drillbook configs --show NAME`` prints what :func:`dump_config` returns and
``drillbook train --config FILE`` reads a file with :func:`load_config`. A file holds the
dict :meth:`~drillbook.configs.SectionedConfig.to_dict` gives: ``name``, ``task``,
``description``, ``paper`` and one mapping per section (``data``, ``model``, ``head``,
``train``). A key left out takes the class's default, so a hand-written file may give only
what differs from the defaults; ``task`` says which class reads the file (a file without
one is read as :func:`~drillbook.configs.config_from_dict` says).

Files are UTF-8 text; a byte-order mark at the start (what some editors save) is read as
nothing. Formats, chosen by the file's suffix (:data:`CONFIG_FORMATS`):

* ``.json``: always available; :func:`dump_config`'s default.
* ``.yaml`` / ``.yml``: needs PyYAML. Numbers such as ``1e-3`` are read as numbers (plain
  YAML 1.1 would read them as text).
* ``.toml``: read only, with the standard library's ``tomllib`` (Python >= 3.11). TOML has
  no null: leave out a key whose value is ``null`` in the JSON form (every such key
  defaults to null).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError, MissingFileError, MissingPackageError
from .base import SectionedConfig
from .registry import config_from_dict

__all__ = ["CONFIG_FORMATS", "DUMP_FORMATS", "dump_config", "load_config"]

#: file suffix -> format that :func:`load_config` reads it as
CONFIG_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"}
#: the formats :func:`dump_config` writes
DUMP_FORMATS = ("json", "yaml")

_FRESH = "or write a fresh one with `drillbook configs --show NAME`"


def _yaml():
    try:
        import yaml
    except ImportError:
        raise MissingPackageError("YAML configs need PyYAML: `pip install "
                                  "'drillbook[yaml]'` (or pyyaml), or use a .json config"
                                  ) from None
    return yaml


def _yaml_loader(yaml):
    """PyYAML's safe loader, reading ``1e-3`` (no dot, or no exponent sign) as a number
    as YAML 1.2 and JSON do."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"))
    return Loader


def _parse(text: str, fmt: str, path: Path) -> Any:
    """The file's content as Python data; a one-line ConfigError where it does not
    parse."""
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}, "
                              f"column {err.colno}); fix it, {_FRESH}") from None
    if fmt == "yaml":
        yaml = _yaml()
        try:
            return yaml.load(text, Loader=_yaml_loader(yaml))  # a safe loader
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or type(err).__name__
            raise ConfigError(f"{path} is not valid YAML ({problem}{where}); fix it, "
                              f"{_FRESH}") from None
    try:
        import tomllib
    except ImportError:
        raise MissingPackageError(f"reading {path} needs Python >= 3.11 (its tomllib); "
                                  f"use a .json or .yaml config on this Python") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML ({err}); fix it, {_FRESH}") from None


def load_config(path: str | Path) -> SectionedConfig:
    """The validated config a JSON, YAML or TOML file holds (of the class its ``task``
    names).

    Raises:
        MissingFileError: no such file.
        MissingPackageError: a YAML file without PyYAML, a TOML file on Python 3.10.
        ConfigError: an unknown suffix, a file that cannot be read or parsed, a config
            that :meth:`~drillbook.configs.SectionedConfig.from_dict` refuses (unknown
            key, wrong type, value out of range), or one that leaves out a whole section
            (which its defaults, the papers' full-size setup, would fill); one line that
            names the file.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a config file; give a file, e.g. a run's "
                          f"{path / 'config.json'}")
    fmt = CONFIG_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(f"{path}: unknown config file type {path.suffix or '(no suffix)'!r}; "
                          f"name it *.json, *.yaml, *.yml or *.toml")
    if not path.exists():
        raise MissingFileError(f"{path}: no such config file; write one with "
                               f"`drillbook configs --show NAME > {path}`")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason}); "
                          f"save it as UTF-8") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror}); give a "
                          f"readable file") from None
    data = _parse(text, fmt, path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not a config; a config "
                          f"file is a mapping of keys ({_FRESH.removeprefix('or ')})")
    try:
        config = config_from_dict(data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    missing = [name for name in type(config).sections() if name not in data]
    if missing:  # a section left out is its defaults: the papers' full-size setup
        raise ConfigError(f"{path} has no {', '.join(repr(m) for m in missing)} section"
                          f"{'s' if len(missing) > 1 else ''}: a config file gives every "
                          f"section, or its defaults (the papers' full-size model and "
                          f"training) would fill it silently; start from `drillbook "
                          f"configs --show tutorial/ptb-tied > {path.name}` and edit it")
    return config


def dump_config(config: SectionedConfig, fmt: str = "json") -> str:
    """``config`` as the text of a file :func:`load_config` reads back into an equal
    config: ``"json"`` (default) or ``"yaml"`` (:data:`DUMP_FORMATS`).

    Raises:
        ConfigError: another format.
        MissingPackageError: ``"yaml"`` without PyYAML.
    """
    d = config.to_dict()
    if fmt == "json":
        return json.dumps(d, indent=2)
    if fmt == "yaml":
        return _yaml().safe_dump(d, sort_keys=False, allow_unicode=True).rstrip("\n")
    raise ConfigError(f"unknown config format {fmt!r}; choose one of {list(DUMP_FORMATS)}")
