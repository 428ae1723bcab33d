"""Experiment configs: typed dataclasses, named setups of both tasks, ``key=value``
overrides, and config files (JSON, YAML, TOML)."""

from .files import CONFIG_FORMATS, DUMP_FORMATS, dump_config, load_config
from .registry import (
    FINETUNE_LR,
    LANGUAGE_MODEL,
    LM_CONFIGS,
    TRANSLATION,
    config_classes,
    config_from_dict,
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
    "CONFIG_FORMATS",
    "DUMP_FORMATS",
    "FINETUNE_LR",
    "LANGUAGE_MODEL",
    "LM_CONFIGS",
    "TRANSLATION",
    "Config",
    "ConfigError",
    "DataConfig",
    "HeadConfig",
    "ModelConfig",
    "SectionedConfig",
    "TrainConfig",
    "apply_overrides",
    "config_classes",
    "config_from_dict",
    "dump_config",
    "finetune_lr",
    "get_config",
    "list_configs",
    "load_config",
    "paper_millions",
]
