"""The language-model task in one place: its config class
(:class:`~drillbook.configs.language_model.Config`), its trainer (AWD-LSTM's recipe,
:class:`~drillbook.train.lm.LanguageModelTrainer`, whose ``build`` makes the model with
:func:`~drillbook.models.build_model`), its corpus, its evaluation and metric (perplexity),
"best" (the lowest validation loss), fine-tuning and its runs read back (:mod:`.runs`), its
token streams (rank and dynamic
evaluation read them), its sizing for the planner (:mod:`.sizing`), its analyses
(:mod:`.analyses`) and its learning curve and its tiny run for a result file's fingerprint
(:mod:`.step`); registered on import."""

from __future__ import annotations

from ....configs import Config
from ...lm import LanguageModelTrainer, evaluate_lm_run, load_lm_data, split_stream
from ..registry import EPOCH_KEYS, TIME_KEYS, Task, register_task
from .analyses import lm_analyses
from .runs import finetune, finetune_trainer, load_lm_run
from .sizing import SIZING, mean_bptt
from .step import tiny_run, trainer_step

__all__ = ["TASK", "finetune", "finetune_trainer", "lm_analyses", "load_lm_run", "mean_bptt",
           "trainer_step"]

#: the task's record
TASK = register_task(Task(
    name=Config.task, config_class=Config, trainer=LanguageModelTrainer,
    metric="perplexity", metric_key="ppl", short="ppl",
    best_value=lambda s: s.best_val_ppl, load_data=load_lm_data, load_run=load_lm_run,
    evaluate=evaluate_lm_run,
    describe=lambda r: f"perplexity {r['ppl']:.2f} over {r['tokens']:,} tokens",
    analyses=lm_analyses, sizing=SIZING,
    analyses_keys={
        "frequency_bands": (list,),  # the loss per training-frequency band
        "word_nll": (dict,),  # word id -> [summed test NLL, tokens]
        "mixture": (dict,),  # a mixture head's component usage
    },
    curve_keys=(*EPOCH_KEYS, "train_ppl", "val_loss", "val_ppl", *TIME_KEYS),
    tiny_run=tiny_run,
    finetune_trainer=finetune_trainer, split_stream=split_stream))
