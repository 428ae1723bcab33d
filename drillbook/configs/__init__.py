"""Experiment configs: typed dataclasses, named setups, ``key=value`` overrides."""

from .registry import CONFIGS, get_config, list_configs, paper_millions, paper_row
from .schema import (
    Config,
    ConfigError,
    DataConfig,
    HeadConfig,
    ModelConfig,
    SectionedConfig,
    TrainConfig,
    apply_overrides,
)

__all__ = [
    "CONFIGS",
    "Config",
    "ConfigError",
    "DataConfig",
    "HeadConfig",
    "ModelConfig",
    "SectionedConfig",
    "TrainConfig",
    "apply_overrides",
    "get_config",
    "list_configs",
    "paper_millions",
    "paper_row",
]
