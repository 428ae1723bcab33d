"""How many parameters a language-model config's model has, counted without building it
in memory (on PyTorch's meta device), split as DRILL Eq. 6 splits an output layer."""

from __future__ import annotations

from typing import Any

import torch

from ..configs import Config, paper_millions
from ..data import corpus_spec
from ..errors import ConfigError
from .builders import build_model

__all__ = ["param_report"]


def param_report(config: Config, vocab_size: int | None = None) -> dict[str, Any]:
    """Parameter counts of a language-model config's model, built on the meta device (no
    memory is allocated), as ``drillbook params`` prints them.

    Args:
        config: a language-model config (``task == "language-model"``).
        vocab_size: ``V``; default: the size of the config's corpus
            (:func:`drillbook.data.corpus_spec`).

    Returns:
        ``config`` (name), ``vocab_size``, ``total`` (shared tensors counted once),
        ``total_m_as_printed_in_drill`` (:func:`~drillbook.configs.paper_millions`),
        ``encoder``, ``output_layer_dedicated`` and ``output_layer_shared`` (DRILL Eq. 6's
        split, :meth:`~drillbook.heads.OutputHead.param_counts`). The papers' counts of the
        same model are :func:`drillbook.experiments.paper_params`.

    Raises:
        ConfigError: a config of another task, or one whose model cannot be built.
    """
    if config.task != Config.task:
        raise ConfigError(f"parameter counts are for language-model configs; {config.name} "
                          f"is a {config.task} config, whose vocabulary sizes come from its "
                          f"training data")
    vocab_size = vocab_size or corpus_spec(config.data.corpus).vocab_size
    with torch.device("meta"):
        model = build_model(config, vocab_size)
    total = sum(p.numel() for p in model.parameters())  # shared tensors counted once
    head = model.head.param_counts()
    return {
        "config": config.name, "vocab_size": vocab_size, "total": total,
        "total_m_as_printed_in_drill": paper_millions(total),
        "encoder": total - head.dedicated, "output_layer_dedicated": head.dedicated,
        "output_layer_shared": head.shared,
    }
