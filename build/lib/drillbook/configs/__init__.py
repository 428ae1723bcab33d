"""Experiment configs: typed dataclasses, named setups, ``key=value`` overrides."""

from .registry import (
    CONFIGS,
    FINETUNE_LR,
    finetune_lr,
    get_config,
    list_configs,
    paper_millions,
)
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
    "FINETUNE_LR",
    "Config",
    "ConfigError",
    "DataConfig",
    "HeadConfig",
    "ModelConfig",
    "SectionedConfig",
    "TrainConfig",
    "apply_overrides",
    "finetune_lr",
    "get_config",
    "list_configs",
    "paper_millions",
]
