"""What a task implements to be trained by the one training loop.

:class:`TaskHooks` lists the hooks; :class:`~drillbook.train.loop.TrainingLoop` inherits
them and calls them, and each task's trainer (the language model's
:class:`~drillbook.train.lm.LanguageModelTrainer`, translation's
:class:`~drillbook.train.translation.NMTTrainer`) overrides them. Ten are required;
six (``lr_scale``, ``carried_state``, ``carry_state``, ``process_state``,
``load_process_state``, ``best``) have defaults that suit a task without the feature.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from .step import StepLoss

__all__ = ["TaskHooks"]


class TaskHooks:
    """The hooks of a training task, in the order a run meets them.

    Setting up (the loop has seeded torch with ``train.seed`` just before):

    * :meth:`build`: the model (``self.model``), the optimiser (``self.optimizer``) and
      the data.

    An epoch, batch by batch:

    * :meth:`batches`: the rest of the epoch's batches, each one's position counted as
      done when it is handed out (a checkpoint after its step resumes after it);
    * :meth:`epoch_progress`: ``(batches in the epoch, batches done)``, for the bar;
    * :meth:`tokens`: a batch's (or a piece's) tokens, what the loss is a mean over;
    * :meth:`split`: a batch cut into pieces for gradient accumulation;
    * :meth:`loss`: a :class:`~drillbook.train.step.StepLoss` for one piece;
    * :meth:`lr_scale`: the factor on ``train.lr`` for a batch's step (default 1);
    * :meth:`carried_state` / :meth:`carry_state`: what the task carries from one step
      to the next (the language model's recurrent state; default nothing), which the
      graph-ready step keeps at a fixed address;
    * :meth:`end_epoch`: validate, save ``best.pt`` when it improved, and return the
      epoch's log record (it may add words to ``self.events`` for the console line and
      set ``self.finished`` to end training early);
    * :meth:`next_epoch`: move the batches to the next epoch.

    Checkpoints (``last.pt``, besides what the loop keeps):

    * :meth:`task_state` / :meth:`load_task_state`: what the task adds, once per run;
    * :meth:`process_state` / :meth:`load_process_state`: what each process of a
      distributed run keeps apart (its own generators, the language model's carried
      state) (default: nothing).

    The end: :meth:`best`, the best validation metric as
    :class:`~drillbook.train.loop.RunStatus` fields (default: none).

    Class attributes a task sets: ``checkpoint_format`` (its ``last.pt`` kind),
    ``max_loss`` (a reported training loss above it is divergence), ``token_weighted``
    (whether the epoch's training loss weights its batches by their tokens) and
    ``metric_line`` (the epoch record's metric in the console line, a format string over
    the record, ``"val ppl {val_ppl:.2f}"``) and ``graph_ready`` (whether it can take the
    graph-ready step, :mod:`drillbook.train.graphs`, with :meth:`graph_problem` saying
    for which configs).
    """

    #: whether the task can take the graph-ready step (:mod:`drillbook.train.graphs`)
    graph_ready: bool = False

    @classmethod
    def graph_problem(cls, config: Any, world_size: int = 1) -> str | None:
        """Why ``config`` cannot take the graph-ready step, in one line naming the fix;
        None when it can (asked only of a task that is :attr:`graph_ready`)."""
        return None

    def build(self, state: dict[str, Any] | None) -> None:
        """Build the model, optimiser and data; ``state`` is the ``last.pt`` being resumed
        (None for a new run), which the loop restores into them afterwards."""
        raise NotImplementedError

    def batches(self) -> Iterator[Any]:
        """The current epoch's batches from the saved position on."""
        raise NotImplementedError

    def epoch_progress(self) -> tuple[int, int]:
        """``(batches in the current epoch, batches done)``."""
        raise NotImplementedError

    def tokens(self, batch: Any) -> int:
        """The tokens a batch (or a piece of one) is trained on."""
        raise NotImplementedError

    def split(self, batch: Any, parts: int) -> Sequence[Any]:
        """``batch`` in ``parts`` pieces (``train.accum_steps``; several processes of a
        translation run also take their share of a batch this way)."""
        raise NotImplementedError

    def loss(self, piece: Any, part: int) -> StepLoss:
        """The loss of piece number ``part`` of a batch (a whole batch is piece 0)."""
        raise NotImplementedError

    def lr_scale(self, batch: Any) -> float:
        """The factor on ``train.lr`` for this batch's step (AWD-LSTM: ``seq_len /
        bptt``)."""
        return 1.0

    def carried_state(self) -> Any:
        """What the task carries from one step to the next (a tree of tensors), made now if
        it has none yet; None for a task that carries nothing (the default)."""
        return None

    def carry_state(self, state: Any) -> None:
        """Carry ``state`` (a tree like :meth:`carried_state`'s) into the next step in
        place of the task's own."""

    def end_epoch(self, seconds: float) -> dict[str, Any]:
        """Validate, save ``best.pt`` when it improved, and return the epoch's log record
        (with at least ``epoch``, ``step``, ``train_loss``, ``lr`` and ``val_loss``);
        ``seconds``: the epoch's training time in this call."""
        raise NotImplementedError

    def next_epoch(self) -> None:
        """Move the batches to the next epoch's."""
        raise NotImplementedError

    def task_state(self) -> dict[str, Any]:
        """What the task adds to ``last.pt`` (plain values and tensors)."""
        raise NotImplementedError

    def load_task_state(self, state: dict[str, Any]) -> None:
        """Read back what :meth:`task_state` wrote (``state`` is the whole ``last.pt``);
        the loop loads the optimiser's state afterwards, so a task whose optimiser kind
        is part of its state rebuilds it here."""
        raise NotImplementedError

    def process_state(self) -> dict[str, Any]:
        """What this process adds to ``last.pt`` apart from the others of a distributed
        run: its own generators' states, carried recurrent state (default nothing)."""
        return {}

    def load_process_state(self, state: dict[str, Any]) -> None:
        """Read back this process's :meth:`process_state`."""

    def best(self) -> dict[str, float]:
        """The best validation metric so far, as :class:`~drillbook.train.loop.RunStatus`
        fields (``{"best_val_loss": ...}`` or ``{"best_val_bleu": ...}``)."""
        return {}
