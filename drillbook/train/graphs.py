"""The training step and the evaluation windows made graph-ready, and captured as CUDA
graphs where the device has them.

A CUDA graph replays a recorded stream of kernels with one launch: the ~1,100 small
kernels of a paper-size AWD-LSTM step, which otherwise leave the GPU idle between
launches, go out at once, and N runs' graphs replayed on N streams fill the GPU together
(:mod:`drillbook.train.rows`). A graph replays exactly what it recorded, so a
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

:class:`GraphedStep` is that step for a language model's trainer (one process, no
gradient accumulation, no fp16 scaler, SGD or averaged SGD). On the CPU it runs eagerly,
bit-identical to :class:`~drillbook.train.step.OptimizerStep`. On CUDA each window length
is run eagerly ``warmup`` times, then captured into a graph of its own (the graphs of one
run share a memory pool: they never run at once) and replayed from then on; lengths seen
fewer times run eagerly. A new optimiser (the NT-ASGD switch, an epoch-boundary decision
taken outside any graph) drops the graphs: they are captured again after it.
:class:`GraphedForward` does the same for the encoder's forward pass of evaluation
windows (the head's loss stays outside the graph, with its caches).
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_map

from ..errors import ConfigError
from ..precision import PRECISIONS, matmul_precision
from .step import largest_weight

__all__ = ["GraphedForward", "GraphedStep", "capture_note"]


def _copy_into(static: Any, values: Any) -> None:
    """Copy every tensor of ``values`` into the matching one of ``static`` (same tree)."""
    for dst, src in zip(tree_flatten(static)[0], tree_flatten(values)[0], strict=True):
        if isinstance(dst, Tensor):
            dst.copy_(src)


def _pinned(tree: Any) -> Any:
    """A copy of ``tree`` whose tensors stay where they are from now on."""
    return tree_map(lambda t: t.detach().clone() if isinstance(t, Tensor) else t, tree)


def _autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The precision's autocast without its cache of cast weights (a cache filled during a
    capture would hold tensors of the graph's pool beyond it)."""
    dtype = PRECISIONS[precision].dtype
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype, cache_enabled=False)


def capture_note(device: torch.device) -> str | None:
    """Why the steps on ``device`` cannot be captured as CUDA graphs (None if they can)."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device (this run trains on {device})"
    return None


class _Captured:
    """One window length's graph and the inputs it reads."""

    def __init__(self, graph: torch.cuda.CUDAGraph, x: Tensor, y: Tensor, out: Any = None):
        self.graph, self.x, self.y, self.out = graph, x, y, out

    def replay(self, x: Tensor, y: Tensor | None = None) -> Any:
        self.x.copy_(x)
        if y is not None:
            self.y.copy_(y)
        self.graph.replay()
        return self.out


class GraphedStep:
    """A language model's training step, graph-ready, captured per window length on CUDA.

    It takes the place of the loop's :class:`~drillbook.train.step.OptimizerStep` (the
    same call, ``step(batch, number)``, and ``tokens``): ``p.grad`` zeroed in place; the
    task's ``loss`` (from the pinned carried state) under autocast; backward;
    ``clip_grad_norm_``; the optimiser's :meth:`~drillbook.train.optimizers.GraphSGD.update`
    at the rate written just before (``lr x lr_scale(batch)``); the new carried state
    copied into the pinned one; loss, reported loss and whether every weight is finite
    written to a pinned vector, a copy of which is queued for the loop's checks
    (:meth:`~drillbook.train.step.LocalReducer.record`).

    Args:
        loop: a single-process training loop whose task carries ``hidden`` and has a
            graph-ready optimiser (:mod:`drillbook.train.optimizers`).
        capture: capture CUDA graphs (default: on a CUDA device); False runs the same
            step eagerly.
        warmup: eager steps of a window length before its graph is captured.

    Attributes:
        graphs: window length -> its captured step.
        eager_steps: steps run eagerly (warm-up, rare lengths, CPU).
        replays: steps replayed from a graph.
    """

    def __init__(self, loop: Any, *, capture: bool | None = None, warmup: int = 2) -> None:
        self.loop = loop
        self.capture = loop.device.type == "cuda" if capture is None else capture
        if self.capture and capture_note(loop.device):
            raise ConfigError(f"{capture_note(loop.device)}; train without CUDA graphs")
        self.warmup = warmup
        hidden = loop.hidden
        if hidden is None:
            hidden = loop.model.init_hidden(loop.config.train.batch_size)
        self.hidden = _pinned(hidden)
        loop.hidden = self.hidden
        self.params = list(loop.model.parameters())
        self.numbers = torch.zeros(3, device=loop.device)
        self.graphs: dict[int, _Captured] = {}
        self.seen: collections.Counter[int] = collections.Counter()
        self.pool: Any = None
        #: where the step runs, is captured and replayed (on CUDA)
        self.stream = torch.cuda.Stream(loop.device) if self.capture else None
        self._optimizer: torch.optim.Optimizer | None = None
        self.tokens = 0
        self.eager_steps = self.replays = 0

    def __call__(self, batch: Any, step: int) -> Tensor:
        loop = self.loop
        optimizer = loop.optimizer
        if optimizer is not self._optimizer:  # a new optimiser: its state is new too
            self._optimizer, self.graphs, self.seen = optimizer, {}, collections.Counter()
        self.tokens = loop.tokens(batch)
        optimizer.set_lr(optimizer.param_groups[0]["lr"] * loop.lr_scale(batch))
        if self.capture:  # warm-up, capture and replay on a side stream of their own
            current = torch.cuda.current_stream(loop.device)
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                self._run(batch)
            current.wait_stream(self.stream)
        else:
            self._run(batch)
        numbers = self.numbers.clone()
        loop.reducer.record(step, self.tokens, [(numbers[0], numbers[1], 1.0)],
                            numbers[2] != 0)
        return numbers[1]

    def _run(self, batch: Any) -> None:
        """Replay this length's graph, capture it if it is due, or run the step eagerly."""
        length = batch.x.shape[0]
        captured = self.graphs.get(length)
        if captured is None and self.capture and self.seen[length] >= self.warmup:
            captured = self._capture(length, batch)
        if captured is not None:
            captured.replay(batch.x, batch.y)
            self.replays += 1
        else:
            self._body(batch)
            self.seen[length] += 1
            self.eager_steps += 1

    def _body(self, batch: Any) -> None:
        """The step itself: what runs eagerly and what a graph records."""
        loop, params = self.loop, self.params
        with matmul_precision(loop.precision):
            loop.model.train()
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                torch._foreach_zero_(grads)
            with _autocast(loop.precision, loop.device):
                loss = loop.loss(batch, 0)  # reads loop.hidden, rebinds it to the new state
            loss.loss.backward()
            if loop.config.train.clip:
                torch.nn.utils.clip_grad_norm_(params, loop.config.train.clip)
            loop.optimizer.update()
            with torch.no_grad():
                _copy_into(self.hidden, loop.hidden)
                loop.hidden = self.hidden
                finite = torch.isfinite(largest_weight(params))
                self.numbers.copy_(torch.stack([loss.loss.detach().float(),
                                                loss.report.detach().float(),
                                                finite.float()]))

    def _capture(self, length: int, batch: Any) -> _Captured:
        """Record the step at this window length (the capture runs nothing), keep the
        graph, and let the caller replay it for this batch."""
        x, y = batch.x.clone(), batch.y.clone()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                self._body(batch._replace(x=x, y=y))
        except RuntimeError as err:
            raise ConfigError(f"the training step at window length {length} could not be "
                              f"captured as a CUDA graph ({str(err).splitlines()[0][:160]}); "
                              f"train without CUDA graphs") from err
        if self.pool is None:
            self.pool = graph.pool()
        self.graphs[length] = captured = _Captured(graph, x, y)
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
        self.graphs[x.shape[0]] = captured = _Captured(graph, static, static, out)
        return captured
