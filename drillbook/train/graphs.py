"""The training step and the evaluation windows made graph-ready, and captured as CUDA
graphs where the device has them.

A CUDA graph replays a recorded stream of kernels with one launch: the ~1,100 small
kernels of a paper-size AWD-LSTM step, which otherwise leave the GPU idle between
launches, go out at once, and N runs' graphs replayed on N streams fill the GPU together
(:mod:`drillbook.train.interleaver`). A graph replays exactly what it recorded, so a
**graph-ready** step

* keeps every tensor it reads or writes between steps at a fixed address: the
  parameters, their gradients (zeroed in place, never set to None), the optimiser's state
  (:mod:`drillbook.train.optimizers`), the carried recurrent state (copied in place after
  the backward pass) and the step's numbers (loss, reported loss, finite weights);
* takes its learning rate from a device scalar written before each step
  (the optimiser's ``set_lr``), clips without a branch
  (``clip_grad_norm_`` multiplies by ``min(1, clip / (norm + 1e-6))``), and reads nothing
  back to the host, so it dispatches the same operations at every call of a given window
  length (tested on the CPU with the dispatch recorder of ``tests/test_sync.py``).

:class:`GraphedStep` is the training loop's own step
(:class:`~drillbook.train.step.OptimizerStep`, the same body) made graph-ready, for a task
that declares it can take it (its trainer's ``graph_ready``; today the language model's:
one process, no gradient accumulation, a precision without a gradient scaler, SGD or
averaged SGD). What the task carries between steps it hands over through its hooks
(``carried_state``, ``carry_state``); the batch is any tree of tensors, one graph per
shape. On the CPU it runs eagerly, bit-identical to the plain step. On CUDA each batch
shape (a window length) is run eagerly ``warmup`` times, then captured into a graph of its
own (the graphs of one run share a memory pool: they never run at once) and replayed from
then on; shapes seen fewer times run eagerly. A new optimiser (the NT-ASGD switch, an
epoch-boundary decision taken outside any graph) drops the graphs: they are captured again
after it. :class:`GraphedForward` does the same for the encoder's forward pass of
evaluation windows (the head's loss stays outside the graph, with its caches).

:func:`takes_graphs` is the one place that decides whether a trainer takes the graph-ready
step, before it is opened.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import ConfigError
from ..runtime import resolve_device
from .distributed import rank_and_world_size
from .step import OptimizerStep, StepLoss, largest_weight

__all__ = ["GraphedForward", "GraphedStep", "capture_note", "takes_graphs"]


def _copy_into(static: Any, values: Any) -> None:
    """Copy every tensor of ``values`` into the matching one of ``static`` (same tree)."""
    for dst, src in zip(tree_flatten(static)[0], tree_flatten(values)[0], strict=True):
        if isinstance(dst, Tensor):
            dst.copy_(src)


def _pinned(tree: Any) -> Any:
    """A copy of ``tree`` whose tensors stay where they are from now on."""
    return tree_map(lambda t: t.detach().clone() if isinstance(t, Tensor) else t, tree)


def capture_note(device: torch.device) -> str | None:
    """Why the steps on ``device`` cannot be captured as CUDA graphs (None if they can)."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device (this run trains on {device})"
    return None


def takes_graphs(trainer: type, config: Any, device: str | torch.device | None,
                 asked: bool | None, *, flag: str | None = None) -> bool:
    """Whether a ``trainer`` (a :class:`~drillbook.train.loop.TrainingLoop` subclass) of
    ``config`` on ``device`` takes the graph-ready step: the one place that decides, before
    a trainer is opened (``drillbook train --cuda-graphs``, the rows of
    :func:`~drillbook.train.interleaver.open_rows`, ``LanguageModelTrainer(graphs=True)``).

    Args:
        asked: True: it must (refused in one line naming the fix where it cannot); None:
            where it applies and is captured (a trainer with a graph-ready step, a config it
            takes, a CUDA device); False: never.
        flag: the command-line flag that asked: then it must also be captured (a CUDA
            device), and the fix is to drop the flag.

    Raises:
        ConfigError: ``asked`` is True and the step does not apply.
    """
    if asked is False:
        return False
    device = resolve_device(device)
    name = getattr(config, "name", "this")
    if not trainer.graph_ready:
        if asked is None:
            return False
        if flag is not None:
            raise ConfigError(f"{flag} is for language models, and {name} is a "
                              f"{config.task} config; drop {flag}")
        raise ConfigError(f"the graphed step is a language model's, and {name!r} is a "
                          f"{config.task} config: open it with graphs=None (where it "
                          f"applies) or False")
    why = trainer.graph_problem(config, rank_and_world_size()[1])
    if asked is None:
        return why is None and capture_note(device) is None
    if flag is not None:
        why = capture_note(device) or why
        if why:
            raise ConfigError(f"{flag}: {why}; drop {flag}")
    if why:
        raise ConfigError(why)
    return True


class _Captured:
    """One batch shape's graph, the inputs it reads and the outputs it writes."""

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: Any, out: Any = None) -> None:
        self.graph, self.inputs, self.out = graph, inputs, out

    def replay(self, inputs: Any) -> Any:
        _copy_into(self.inputs, inputs)
        self.graph.replay()
        return self.out


def _shape(tree: Any) -> tuple:
    """The shapes of the tensors of a batch (or of one tensor): what one graph takes."""
    return tuple(t.shape for t in tree_flatten(tree)[0] if isinstance(t, Tensor))


class GraphedStep(OptimizerStep):
    """The training step of :class:`~drillbook.train.step.OptimizerStep`, graph-ready,
    captured per batch shape (a language model's window length) on CUDA.

    The body is the same function (``OptimizerStep._body``),
    with what a graph cannot hold swapped out: ``p.grad`` zeroed in place (never set to
    None); autocast without its cache of cast weights; the optimiser's
    :meth:`~drillbook.train.optimizers.GraphSGD.update` at the rate written just before
    it (``lr x lr_scale(batch)``, ``_begin``); after the update, what the task
    carries from step to step (its ``carried_state``, a language model's recurrent
    state) copied into a pinned copy, and the loss, the reported loss and whether every
    weight is finite written to a pinned vector, a copy of which is queued for the
    loop's checks (:meth:`~drillbook.train.step.LocalReducer.record`).

    Args:
        task: a single-process task (:class:`~drillbook.train.hooks.TaskHooks`) with a
            graph-ready optimiser (:mod:`drillbook.train.optimizers`); the rest as
            :class:`~drillbook.train.step.OptimizerStep`'s (whole batches, no scaler).
        capture: capture CUDA graphs (default: on a CUDA device); False runs the same
            step eagerly.
        warmup: eager steps of a batch shape before its graph is captured.

    Attributes:
        hidden: the pinned carried state (what the task carries between steps).
        numbers: the pinned ``[loss, reported loss, finite]`` of the last step.
        graphs: batch shape -> its captured step.
        eager_steps: steps run eagerly (warm-up, rare lengths, CPU).
        replays: steps replayed from a graph.
    """

    def __init__(self, task: Any, model: torch.nn.Module, *, capture: bool | None = None,
                 warmup: int = 2, **step: Any) -> None:
        super().__init__(task, model, **step)
        device = self.device
        self.capture = device.type == "cuda" if capture is None else capture
        if self.capture and capture_note(device):
            raise ConfigError(f"{capture_note(device)}; train without CUDA graphs")
        self.warmup = warmup
        self.hidden = _pinned(task.carried_state())
        task.carry_state(self.hidden)
        self.numbers = torch.zeros(3, device=device)
        self.graphs: dict[tuple, _Captured] = {}
        self.seen: collections.Counter[tuple] = collections.Counter()
        self.pool: Any = None
        #: where the step runs, is captured and replayed (on CUDA)
        self.stream = torch.cuda.Stream(device) if self.capture else None
        self._optimizer: torch.optim.Optimizer | None = None
        self._loss: StepLoss | None = None
        self.eager_steps = self.replays = 0

    def _begin(self, batch: Any, step: int) -> None:
        super()._begin(batch, step)
        optimizer = self.task.optimizer
        if optimizer is not self._optimizer:  # a new optimiser: its state is new too
            self._optimizer, self.graphs, self.seen = optimizer, {}, collections.Counter()
        optimizer.set_lr(optimizer.param_groups[0]["lr"] * self.task.lr_scale(batch))

    def _run(self, batch: Any) -> None:
        if not self.capture:
            self._replay_or_run(batch)
            return
        current = torch.cuda.current_stream(self.device)  # warm-up, capture and replay
        self.stream.wait_stream(current)  # on a side stream of their own
        with torch.cuda.stream(self.stream):
            self._replay_or_run(batch)
        current.wait_stream(self.stream)

    def _end(self) -> Tensor:
        numbers = self.numbers.clone()
        self.reducer.record(self._step, self.tokens, [(numbers[0], numbers[1], 1.0)],
                            numbers[2] != 0)
        return numbers[1]

    def _autocast(self) -> contextlib.AbstractContextManager:
        return self.precision.autocast(self.device, cache=False)

    def _zero_grads(self, optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_zero_(grads)

    def _piece(self, loss: StepLoss, share: float) -> None:
        self._loss = loss

    def _update(self, optimizer: torch.optim.Optimizer, batch: Any) -> None:
        optimizer.update()  # at the rate _begin wrote

    @torch.no_grad()
    def _updated(self) -> None:
        task, loss = self.task, self._loss
        _copy_into(self.hidden, task.carried_state())
        task.carry_state(self.hidden)
        finite = torch.isfinite(largest_weight(self.params))
        self.numbers.copy_(torch.stack([loss.loss.detach().float(),
                                        loss.report.detach().float(), finite.float()]))
        self._loss = None

    def _replay_or_run(self, batch: Any) -> None:
        """Replay this shape's graph, capture it if it is due, or run the body eagerly."""
        shape = _shape(batch)
        captured = self.graphs.get(shape)
        if captured is None and self.capture and self.seen[shape] >= self.warmup:
            captured = self._capture(shape, batch)
        if captured is not None:
            captured.replay(batch)
            self.replays += 1
        else:
            self._body(batch)
            self.seen[shape] += 1
            self.eager_steps += 1

    def _capture(self, shape: tuple, batch: Any) -> _Captured:
        """Record the body at this batch shape (the capture runs nothing), keep the graph,
        and let the caller replay it for this batch."""
        inputs = _pinned(batch)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                self._body(inputs)
        except RuntimeError as err:
            raise ConfigError(f"the training step at batch shape {list(shape)} could not be "
                              f"captured as a CUDA graph ({str(err).splitlines()[0][:160]}); "
                              f"train without CUDA graphs") from err
        if self.pool is None:
            self.pool = graph.pool()
        self.graphs[shape] = captured = _Captured(graph, inputs)
        return captured


class GraphedForward:
    """A language model's evaluation forward pass, captured per window length on CUDA:
    what :func:`~drillbook.train.lm.evaluate` calls in place of the model.

    It answers the calls evaluation makes of a model (``eval()``, ``init_hidden(B)``,
    ``model(x, hidden)``, ``head``): the recurrent state is pinned (zeroed by
    ``init_hidden``, carried in place from window to window), and each window's features
    are the graph's outputs, valid until the next window. The head's loss is computed
    outside the graph. Eagerly (``capture=False``, or a length seen fewer than ``warmup``
    times) it runs the model itself, with the same numbers.
    """

    def __init__(self, model: torch.nn.Module, *, capture: bool | None = None,
                 warmup: int = 1) -> None:
        device = next(model.parameters()).device
        self.model, self.warmup = model, warmup
        self.capture = device.type == "cuda" if capture is None else capture
        self.hidden: Any = None
        self.batch_size: int | None = None
        self.graphs: dict[int, _Captured] = {}
        self.seen: collections.Counter[int] = collections.Counter()
        self.pool: Any = None
        self.stream: torch.cuda.Stream | None = None

    @property
    def head(self) -> torch.nn.Module:
        return self.model.head

    def eval(self) -> GraphedForward:
        self.model.eval()
        return self

    def init_hidden(self, batch_size: int) -> Any:
        """The pinned state, zeroed (made at the first call, or for a new batch size)."""
        if self.hidden is None or batch_size != self.batch_size:
            self.hidden = _pinned(self.model.init_hidden(batch_size))
            self.batch_size, self.graphs, self.seen = batch_size, {}, collections.Counter()
        for t in tree_flatten(self.hidden)[0]:
            if isinstance(t, Tensor):
                t.zero_()
        return self.hidden

    @torch.no_grad()
    def __call__(self, x: Tensor, hidden: Any) -> Any:
        length = x.shape[0]
        captured = self.graphs.get(length)
        if captured is None and self.capture and self.seen[length] >= self.warmup:
            captured = self._capture(x)
        if captured is not None:
            return captured.replay(x)
        self.seen[length] += 1
        return self._forward(x)

    def _forward(self, x: Tensor) -> Any:
        out = self.model(x, self.hidden)
        _copy_into(self.hidden, out.hidden)
        return out._replace(hidden=self.hidden)

    def _capture(self, x: Tensor) -> _Captured:
        static = x.clone()
        graph = torch.cuda.CUDAGraph()
        if self.stream is None:
            self.stream = torch.cuda.Stream(x.device)
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            out = self._forward(static)  # recorded, not run: the state is untouched
        if self.pool is None:
            self.pool = graph.pool()
        self.graphs[x.shape[0]] = captured = _Captured(graph, static, out)
        return captured
