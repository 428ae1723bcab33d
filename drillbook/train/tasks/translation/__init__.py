"""The translation task in one place: its config class
(:class:`~drillbook.configs.translation.NMTConfig`), its trainer
(:class:`~drillbook.train.translation.NMTTrainer`, whose ``build`` makes the model with
:func:`~drillbook.models.build_translation_model`), its sentence pairs, its evaluation and
metric (BLEU, with sacreBLEU's signature), "best" (the highest validation BLEU), decoding,
its sizing for the planner (:mod:`.sizing`), its analyses (:mod:`.analyses`), its
learning curve and its tiny run for a result file's fingerprint; registered on import."""

from __future__ import annotations

from ....configs import NMTConfig
from ...translation import (
    NMTTrainer,
    evaluate_translation_run,
    load_translation_data,
    load_translation_run,
)
from ..registry import EPOCH_KEYS, TIME_KEYS, Signature, Task, register_task
from .analyses import translation_analyses
from .sizing import SIZING, random_pairs_step, tiny_run

__all__ = ["TASK", "random_pairs_step", "translation_analyses"]

#: the task's record
TASK = register_task(Task(
    name=NMTConfig.task, config_class=NMTConfig, trainer=NMTTrainer,
    metric="BLEU", metric_key="bleu", short="BLEU",
    best_value=lambda s: s.best_val_bleu, load_data=load_translation_data,
    load_run=load_translation_run, evaluate=evaluate_translation_run,
    describe=lambda r: (f"BLEU {r['bleu']:.2f} over {r['sentences']:,} sentences with "
                        f"beam {r['beam']}"),
    analyses=translation_analyses, sizing=SIZING,
    analyses_keys={
        "rare_word_f1": (list,),  # word F1 by training frequency
        "sentences_per_second": (int, float, type(None)),  # decoding speed
        "examples": (list,),  # decoded test sentences
        "beam": (dict,),  # BLEU with a beam of 5 (heads with a distribution over words)
    },
    curve_keys=(*EPOCH_KEYS, "val_loss", "val_bleu", *TIME_KEYS), tiny_run=tiny_run,
    signature=Signature(
        "bleu_signature", "sacreBLEU signature",
        "`valid`: BLEU of the tokenised text (it selects the checkpoint); `test`: sacreBLEU "
        "of the detokenised translations against the raw references, signature"),
    decodes=True))
