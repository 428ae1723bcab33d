"""Experiment configs of both tasks: typed dataclasses (:mod:`~drillbook.configs.base`,
:mod:`~drillbook.configs.language_model`, :mod:`~drillbook.configs.translation`), the named
setups (:mod:`~drillbook.configs.registry`), ``key=value`` overrides, and config files
(JSON, YAML, TOML; :mod:`~drillbook.configs.files`)."""

from ..errors import ConfigError
from .base import HeadConfig, LoopConfig, SectionedConfig, apply_overrides
from .files import CONFIG_FORMATS, DUMP_FORMATS, dump_config, load_config
from .language_model import Config, DataConfig, ModelConfig, TrainConfig
from .registry import (
    FINETUNE_LR,
    LANGUAGE_MODEL,
    TRANSLATION,
    config_classes,
    config_from_dict,
    finetune_lr,
    get_config,
    get_nmt_config,
    list_configs,
    list_nmt_configs,
    paper_millions,
    register_config_class,
    task_named_by,
    unregister_config_class,
)
from .translation import NMTConfig, NMTDataConfig, NMTModelConfig, NMTTrainConfig

__all__ = [
    "CONFIG_FORMATS",
    "DUMP_FORMATS",
    "FINETUNE_LR",
    "LANGUAGE_MODEL",
    "TRANSLATION",
    "Config",
    "ConfigError",
    "DataConfig",
    "HeadConfig",
    "LoopConfig",
    "ModelConfig",
    "NMTConfig",
    "NMTDataConfig",
    "NMTModelConfig",
    "NMTTrainConfig",
    "SectionedConfig",
    "TrainConfig",
    "apply_overrides",
    "config_classes",
    "config_from_dict",
    "dump_config",
    "finetune_lr",
    "get_config",
    "get_nmt_config",
    "list_configs",
    "list_nmt_configs",
    "load_config",
    "paper_millions",
    "register_config_class",
    "task_named_by",
    "unregister_config_class",
]
