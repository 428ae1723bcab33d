"""One optimiser step of the training loop, and how its numbers are checked.

:class:`OptimizerStep` takes one step on a batch for either task: the batch cut into
``train.accum_steps`` pieces, each piece's loss under autocast and back-propagated, the
gradients unscaled (fp16), clipped, and the optimiser's step at the batch's learning
rate. What differs between a single process and several is a **reducer** passed in:

* :class:`LocalReducer` (one process): nothing to share, and nothing read back to the
  host. Each step's losses and a finite-weights flag stay on the device, queued, and
  :meth:`LocalReducer.check` reads the queue back at once (at a logging point, before
  anything is saved, at the end of an epoch), naming the first step that went wrong.
* :class:`~drillbook.train.distributed.CollectiveReducer` (``torchrun``): the processes
  add up their tokens and losses every step and stop together.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from ..errors import TrainingDiverged
from ..precision import Precision, precision_named
from ..runtime import read_back
from .run_folder import RunFolder

__all__ = ["Checked", "LocalReducer", "OptimizerStep", "StepLoss", "StepTask", "diverged",
           "largest_weight", "nonfinite_update"]


class StepLoss(NamedTuple):
    """The loss of one piece of a batch (what a task's ``loss`` hook returns).

    Attributes:
        loss: the scalar to differentiate (the objective of this piece, a mean over its
            tokens).
        report: the scalar that is checked for divergence and averaged into the epoch's
            training loss (the language model's head loss without AR/TAR; the
            translation loss itself).
    """

    loss: Tensor
    report: Tensor


class Checked(NamedTuple):
    """A step whose numbers have been read back and found sane."""

    step: int  #: the step's number (0-based: the steps taken before it)
    tokens: int  #: its tokens, over every process
    loss: float  #: its reported loss (the pieces' ``report`` by their shares)


class StepTask(Protocol):
    """What :class:`OptimizerStep` asks of the task it steps (the training loop's hooks
    of the same names, :class:`~drillbook.train.hooks.TaskHooks`)."""

    optimizer: torch.optim.Optimizer

    def split(self, batch: Any, parts: int) -> Sequence[Any]: ...

    def loss(self, piece: Any, part: int) -> StepLoss: ...

    def tokens(self, batch: Any) -> int: ...

    def lr_scale(self, batch: Any) -> float: ...


def largest_weight(params: Sequence[Tensor]) -> Tensor:
    """``max |w|`` over every entry of ``params``, a 0-d tensor left on their device: it is
    finite exactly when every weight is (a NaN spreads through the maximum), and no sum
    can overflow it. One multi-tensor kernel on a GPU (torch >= 2.6) instead of a test per
    parameter."""
    if hasattr(torch.nn.utils, "get_total_norm"):
        return torch.nn.utils.get_total_norm(params, math.inf)
    with torch.no_grad():
        return torch.stack([p.abs().max() for p in params]).max()


def nonfinite_update(module: torch.nn.Module) -> str | None:
    """None when every parameter of ``module`` is finite (one device sync), else what
    went wrong in words (``"the update made encoder.w, head.b non-finite"``)."""
    named = list(module.named_parameters())
    if not named:
        return None
    flags = torch.stack([torch.isfinite(p).all() for _, p in named])
    if bool(flags.all()):
        return None
    bad = [n for (n, _), ok in zip(named, flags.tolist(), strict=True) if not ok]
    return f"the update made {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} non-finite"


def diverged(what: str, *, epoch: int, step: int, lr: float, folder: RunFolder,
             resumable: bool = True) -> TrainingDiverged:
    """The error a trainer raises when ``what`` (e.g. ``"the loss became nan"``) happened:
    where the last sane checkpoint is, and the resume that continues from it.

    ``resumable``: whether ``last.pt`` may be offered. A trainer offers it only where its
    state's own loss was not seen to be insane (it is not the state that diverged); where
    there is no such state, the advice is to start again at a lower rate."""
    smaller = f"train.lr={lr / 2:g}"
    if folder.saved_step is not None and resumable:
        advice = (f"{folder.last} holds the last sane state (step {folder.saved_step}): "
                  f"resume it with a smaller step size, the same command plus --resume "
                  f"--set {smaller} (train.clip may be lowered the same way)")
    elif folder.saved_step is not None:
        advice = (f"{folder.last} (step {folder.saved_step}) is the state that diverged and "
                  f"no earlier one was kept: start the run again with --set {smaller} (or a "
                  f"lower train.clip) into a new --out folder, or into this one once you "
                  f"have removed it")
    else:
        advice = (f"no checkpoint was written yet: start again with --set {smaller} "
                  f"(or a lower train.clip)")
    return TrainingDiverged(f"training diverged: {what} at epoch {epoch}, step {step} "
                            f"(train.lr={lr:g}); {advice}")


class LocalReducer:
    """The reducer of a single process: no other process to agree with, and nothing read
    back during a step.

    Each step leaves ``(step, tokens, pieces, finite)`` in a queue: its pieces' objective
    and reported loss as 0-d device tensors with their shares, and whether every weight
    was finite after the update (:func:`largest_weight`). :meth:`check` reads them all back
    with one wait for the device.

    Args:
        model: the model whose weights are checked after each update.
        max_loss: a reported loss above it is divergence.
        diverged: ``(what, step, own_loss) -> exception`` to raise when a check fails
            (``own_loss``: the loss of the weights the step started from failed; else the
            weights its update left).
    """

    world_size = 1

    def __init__(self, model: torch.nn.Module, max_loss: float,
                 diverged: Callable[[str, int, bool], BaseException]) -> None:
        self.model, self.max_loss, self.diverged = model, max_loss, diverged
        self._queue: list[tuple[int, int, list[tuple[Tensor, Tensor, float]], Tensor]] = []
        self._step = self._tokens = 0
        self._pieces: list[tuple[Tensor, Tensor, float]] = []

    # --------------------------------------------------------- inside a step
    def begin(self, step: int, tokens: int) -> tuple[int, float]:
        """A step on a batch of ``tokens`` begins: ``(tokens over every process, the
        factor on this process's losses)``."""
        self._step, self._tokens, self._pieces = step, tokens, []
        return tokens, 1.0

    def piece_context(self, model: torch.nn.Module, last: bool
                      ) -> contextlib.AbstractContextManager:
        """What each piece's forward and backward pass run in."""
        return contextlib.nullcontext()

    def piece(self, loss: StepLoss, share: float) -> None:
        """A piece's loss, ``share`` of the batch: kept on the device for :meth:`check`."""
        self._pieces.append((loss.loss.detach(), loss.report.detach(), share))

    def end(self) -> Tensor:
        """After the update: queue the step's numbers; returns its reported loss (a 0-d
        device tensor)."""
        finite = torch.isfinite(largest_weight(list(self.model.parameters())))
        self.record(self._step, self._tokens, self._pieces, finite)
        if len(self._pieces) == 1:
            return self._pieces[0][1]
        reported: Any = 0.0
        for _, raw, share in self._pieces:
            reported = reported + raw * share
        return reported

    def record(self, step: int, tokens: int, pieces: list[tuple[Tensor, Tensor, float]],
               finite: Tensor) -> None:
        """Queue a step's numbers (what :meth:`end` does; a captured step that computes
        them itself queues them here)."""
        self._queue.append((step, tokens, pieces, finite))

    # --------------------------------------------------------- between steps
    def check(self) -> Iterator[Checked]:
        """Read the queued steps' numbers back at once and yield them, oldest first; raise
        ``diverged`` at the first step whose loss was not finite or too large, or whose
        update left a weight non-finite. A step is yielded once its loss has passed and
        before its weights are looked at (its loss is its starting state's own: the
        caller may keep that state even when the update then failed)."""
        queued, self._queue = self._queue, []
        if not queued:
            return
        numbers = read_back([x for _, _, pieces, _ in queued for v, r, _ in pieces
                             for x in (v, r)])
        flags = torch.stack([f for *_, f in queued]).tolist()
        values = iter(zip(numbers[::2], numbers[1::2], strict=True))
        for (step, tokens, pieces, _), finite in zip(queued, flags, strict=True):
            read = [next(values) for _ in pieces]
            for value, raw in read:
                if not math.isfinite(value) or raw > self.max_loss:
                    raise self.diverged(
                        f"the loss became {raw if raw > self.max_loss else value}", step,
                        True)
            if len(read) == 1:
                reported = read[0][1]
            else:  # the pieces' shares, added in the order the step added them
                reported = 0.0
                for (_, raw), (_, _, share) in zip(read, pieces, strict=True):
                    reported = reported + raw * share
            yield Checked(step, tokens, reported)
            if not finite:
                raise self.diverged(nonfinite_update(self.model) or "the update made a "
                                    "weight non-finite", step, False)

    def all_sum(self, values: list[float]) -> list[float]:
        """``values`` summed over the processes: here, themselves."""
        return list(values)

    def from_rank0(self, values: list[float]) -> list[float]:
        """Rank 0's ``values``: here, themselves."""
        return list(values)


class OptimizerStep:
    """One optimiser step of a task's model, as the training loop takes it.

    ``train.accum_steps = k``: the batch is cut into ``k`` pieces (the task's ``split``);
    each piece's loss (the task's ``loss``) is computed under autocast, handed to the
    reducer, multiplied by its share of the batch's tokens ``s_i`` (and, with several
    processes, by this process's share of them) and back-propagated, so that the
    gradient is the one batch's mean. Then the gradients are unscaled (a precision with
    a gradient scaler), clipped to ``clip`` (``torch.nn.utils.clip_grad_norm_``:
    ``g <- g min(1, clip / (||g|| + 1e-6))``) and the optimiser steps at
    ``lr x lr_scale(batch)``; the reducer checks the weights. With ``k = 1`` and precision
    ``fp32`` this is the plain float32 step: forward, loss, backward, clip, step. Under a
    precision with TF32 products (``train.amp=tf32``) the whole step, backward pass
    included, runs with them (:meth:`~drillbook.precision.Precision.matmul`).

    A call is three parts: ``_begin`` (outside any graph: the batch's tokens, the
    reducer), ``_run`` (here ``_body``, the step itself) and ``_end`` (the
    step's numbers handed to the loop). ``_body`` is the one step body: the
    graph-ready step (:class:`~drillbook.train.graphs.GraphedStep`) is this class with
    ``_run`` capturing and replaying it, and the few operations a graph cannot hold
    (a gradient set to None, the learning rate as a Python number, the numbers read
    from the reducer) swapped for ones it can.

    Args:
        task: the loss, the pieces and the learning-rate factor (:class:`StepTask`); its
            ``optimizer`` is read at every step (NT-ASGD replaces it).
        model: whose gradients are clipped.
        forward_model: what the pieces' forward passes call (the model, or its
            DistributedDataParallel wrapper): given to the reducer's ``piece_context``.
        clip: the gradient-norm bound (0: no clipping).
        parts: ``k``.
        precision: the resolved precision, its record or its name
            (:class:`~drillbook.precision.Precision`).
        device: where the model is.
        scaler: the gradient scaler of a precision that needs one, or None.
        reducer: :class:`LocalReducer` or
            :class:`~drillbook.train.distributed.CollectiveReducer`.
        autocast_context: ``() -> context`` around each piece's loss (default the
            precision's :meth:`~drillbook.precision.Precision.autocast`).

    Attributes:
        tokens: the last step's tokens, over every process.
    """

    def __init__(self, task: StepTask, model: torch.nn.Module, *, forward_model: Any = None,
                 clip: float, parts: int, precision: Precision | str, device: torch.device,
                 scaler: torch.amp.GradScaler | None, reducer: Any,
                 autocast_context: Callable[[], contextlib.AbstractContextManager] | None
                 = None) -> None:
        self.task, self.model, self.clip, self.parts = task, model, clip, parts
        self.forward_model = model if forward_model is None else forward_model
        self.precision = precision_named(precision)
        self.device, self.scaler, self.reducer = device, scaler, reducer
        self.autocast = autocast_context or self._autocast
        self.params = list(model.parameters())
        self.tokens = 0
        self._step = self._local_tokens = 0
        self._scale = 1.0

    def __call__(self, batch: Any, step: int) -> Tensor | float:
        """Take step number ``step`` on ``batch`` (this process's share of it); returns the
        batch's reported loss (a device tensor for one process, a float for several)."""
        with self.precision.matmul():
            self._begin(batch, step)
            self._run(batch)
            return self._end()

    # ------------------------------------------------- the parts a graph changes
    def _begin(self, batch: Any, step: int) -> None:
        """Before the body, outside any graph: the batch's tokens, told to the reducer."""
        self._step, self._local_tokens = step, self.task.tokens(batch)
        self.tokens, self._scale = self.reducer.begin(step, self._local_tokens)

    def _run(self, batch: Any) -> None:
        """Run the step: here, ``_body`` eagerly."""
        self._body(batch)

    def _end(self) -> Tensor | float:
        """After the body: the reducer checks the weights and gives the reported loss."""
        return self.reducer.end()

    def _autocast(self) -> contextlib.AbstractContextManager:
        return self.precision.autocast(self.device)

    def _zero_grads(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)

    def _piece(self, loss: StepLoss, share: float) -> None:
        self.reducer.piece(loss, share)

    def _update(self, optimizer: torch.optim.Optimizer, batch: Any) -> None:
        """The optimiser's step at ``lr x lr_scale(batch)`` (through the scaler, if any)."""
        group = optimizer.param_groups[0]
        base_lr = group["lr"]
        group["lr"] = base_lr * self.task.lr_scale(batch)
        if self.scaler is not None:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        group["lr"] = base_lr

    def _updated(self) -> None:
        """After the update, inside the body (what a graph-ready step keeps in place)."""

    # ------------------------------------------------- the body
    def _body(self, batch: Any) -> None:
        """The step itself: zero the gradients, each piece's loss and backward pass,
        unscale, clip, update. What runs eagerly and what a graph records."""
        task, reducer, scaler = self.task, self.reducer, self.scaler
        self.model.train()
        optimizer = task.optimizer
        self._zero_grads(optimizer)
        pieces = [batch] if self.parts == 1 else task.split(batch, self.parts)
        for part, piece in enumerate(pieces):
            share = 1.0 if self.parts == 1 else task.tokens(piece) / self._local_tokens
            with reducer.piece_context(self.forward_model, part == len(pieces) - 1):
                with self.autocast():
                    loss = task.loss(piece, part)
                self._piece(loss, share)
                weight = share * self._scale
                objective = loss.loss if weight == 1.0 else loss.loss * weight
                if scaler is not None:
                    objective = scaler.scale(objective)
                objective.backward()
        if scaler is not None:
            scaler.unscale_(optimizer)
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self._update(optimizer, batch)
        self._updated()
