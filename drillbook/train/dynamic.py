"""Dynamic evaluation (Krause et al., 2018): the model keeps learning from the text it scores.

The evaluation stream is cut into segments of ``bptt`` tokens, read in order with the
recurrent state carried across them. Each segment is first *scored* with the current
weights, then the gradient of its loss moves the weights before the next one is scored:
a word seen once becomes more probable the next time it occurs, and nothing is learnt
from a segment before it has been scored. :func:`dynamic_evaluate` gives the update and how
it matches the authors' code; :func:`evaluate_run` evaluates a run folder, searching the
authors' grid first if asked.
"""

from __future__ import annotations

import hashlib
import math
import warnings
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..data import batchify, get_batch
from ..errors import CheckpointError, ConfigError, DataError, RunFolderError
from ..metrics import perplexity
from ..models import LanguageModel
from .checkpoint import (
    LM_DYNAMIC_EVAL,
    load_checkpoint,
    rng_state,
    save_atomic,
    set_rng_state,
)
from .lm import evaluate, load_lm_run

__all__ = ["DEFAULT_BPTT", "DEFAULT_EPS", "DEFAULT_GRAD_BATCH_SIZE", "DEFAULT_LAMBDA",
           "DEFAULT_LR", "DynamicResult", "DynamicUpdate", "GradientStats", "SearchResult",
           "check_request", "dynamic_evaluate", "evaluate_run", "gradient_statistics",
           "old_hyperparameters", "search", "search_grid"]

#: η of the authors' ``dynamiceval.py`` (tuned for AWD-LSTM on PTB)
DEFAULT_LR = 5e-5
#: λ of the authors' ``dynamiceval.py``
DEFAULT_LAMBDA = 2e-3
#: ε of the authors' ``dynamiceval.py``
DEFAULT_EPS = 2e-5
#: segment length (and the training statistics' window length) of the authors' code
DEFAULT_BPTT = 5
#: batch size of the training-gradient statistics in the authors' code
DEFAULT_GRAD_BATCH_SIZE = 100
#: the authors' search grid at ``bptt = 5`` (``--grid``): learning rates and λ
_LR_GRID = (3e-5, 4e-5, 5e-5, 6e-5, 7e-5, 1e-4)
_LAMBDA_GRID = (1e-3, 2e-3, 3e-3, 5e-3)


def search_grid(bptt: int = DEFAULT_BPTT) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The authors' grid of learning rates and decay rates for segments of ``bptt``
    tokens: their values at 5 tokens scaled by ``bptt / 5`` (as their code scales them)."""
    scale = bptt / DEFAULT_BPTT
    return (tuple(x * scale for x in _LR_GRID), tuple(x * scale for x in _LAMBDA_GRID))


def old_hyperparameters(lr: float, lamb: float, eps: float, *, tensors: int,
                        batches: int) -> tuple[float, float, float]:
    """``(η, λ, ε)`` of this rule that reproduce the first version of the authors' script
    (the one the MoS repository ships) run with ``lr``, ``lamb``, ``eps``.

    That version took ``sqrt`` of the *sum* of the ``N_b`` squared gradients, not of their
    mean, and divided by the *sum* over the ``n`` parameter tensors of their mean RMS, not by
    the average. So its denominator is ``sqrt(N_b) sqrt(MS_g) + ε_old`` and its decay rate
    ``λ_old RMS_norm / n``, which is this rule with::

        η = η_old / sqrt(N_b),   ε = ε_old / sqrt(N_b),   λ = λ_old / n

    (the authors' ``--oldhyper``; the caps agree: ``λ_old · RMS_norm / n <= 1``).

    Args:
        tensors: ``n``, the number of parameter tensors (``len(list(model.parameters()))``;
            the authors' models may count theirs differently).
        batches: ``N_b``, the training batches of the statistics
            (:attr:`GradientStats.batches`).
    """
    root = math.sqrt(batches)
    return lr / root, lamb / tensors, eps / root


def _parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The trainable parameters, each tensor once (a tied embedding is one parameter)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


@contextmanager
def _native_cpu_rnn(device: torch.device) -> Iterator[None]:
    """On CPU, run the LSTM with PyTorch's native kernel rather than oneDNN's.

    With autograd on, oneDNN's LSTM prepares its weights anew at every call: measured on a
    PTB AWD-LSTM (3 layers, 1150 units) reading one stream in segments of 5 tokens, its
    forward pass took 8 times as long as the native one. The setting is put back on exit.
    """
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        yield
        return
    with warnings.catch_warnings():  # torch announces oneDNN's TF32 on every switch
        warnings.filterwarnings("ignore", message=".*TF32 acceleration on top of oneDNN.*")
        with torch.backends.mkldnn.flags(enabled=False):
            yield


# ------------------------------------------------------------------ gradient statistics
@dataclass
class GradientStats:
    """``sqrt(MS_g)`` of every parameter (Sec. 5), measured on the training text.

    Attributes:
        rms: parameter name -> ``sqrt(MS_g)``, the parameter's shape.
        batches: ``N_b``, the number of training batches averaged.
    """

    rms: dict[str, Tensor]
    batches: int

    def average(self) -> float:
        """``avg(sqrt(MS_g))``: the mean over parameter tensors of each tensor's mean RMS
        (every tensor weighs the same, as in the authors' code)."""
        means = [float(r.double().mean()) for r in self.rms.values() if r.numel()]
        return sum(means) / len(means)

    def rms_norm(self) -> dict[str, Tensor]:
        """``RMS_norm = sqrt(MS_g) / avg(sqrt(MS_g))`` (Sec. 5), per parameter."""
        avg = self.average()
        if not avg > 0:
            raise DataError("every training gradient is zero, so the gradient statistics "
                            "cannot scale the update; measure them on more training text")
        return {n: r / avg for n, r in self.rms.items()}

    def state_dict(self) -> dict[str, Any]:
        """Tensors and numbers only (a state file loads with ``weights_only=True``)."""
        return {"rms": dict(self.rms), "batches": self.batches}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> GradientStats:
        """The statistics :meth:`state_dict` saved."""
        return cls(dict(state["rms"]), int(state["batches"]))


def gradient_statistics(model: LanguageModel, data: Tensor, bptt: int = DEFAULT_BPTT,
                        max_batches: int | None = None) -> GradientStats:
    """``MS_g`` (Sec. 5) of ``model`` on a batchified training stream, as its square root.

    The model is in eval mode (no dropout) and its weights do not change; the state is
    carried across the windows of ``bptt`` rows, and every window's gradient is that of
    its mean loss.

    Args:
        model: the trained language model.
        data: the training stream, batchified ``(T, B)`` (the authors use ``B = 100``).
        bptt: window length.
        max_batches: average over the first this many windows only (None: all).

    Raises:
        DataError: the stream is too short for one window.
    """
    params = _parameters(model)
    sums = {n: torch.zeros_like(p) for n, p in params}
    was_training = model.training
    model.eval()
    hidden = model.init_hidden(data.shape[1])
    batches = 0
    try:
        with torch.enable_grad(), _native_cpu_rnn(data.device):
            for i in range(0, data.shape[0] - 1, bptt):
                if max_batches is not None and batches >= max_batches:
                    break
                x, y = get_batch(data, i, bptt)
                model.zero_grad(set_to_none=True)
                out = model(x, hidden)
                model.head.loss(out.features, y).backward()
                with torch.no_grad():
                    for n, p in params:
                        if p.grad is not None:
                            sums[n].addcmul_(p.grad, p.grad)
                hidden = model.encoder.detach_hidden(out.hidden)
                batches += 1
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    if batches == 0:
        raise DataError(f"the training stream of shape {tuple(data.shape)} is too short for "
                        f"one window of gradient statistics; use a smaller batch size")
    return GradientStats({n: (s / batches).sqrt() for n, s in sums.items()}, batches)


# ------------------------------------------------------------------ the update
class DynamicUpdate:
    """The update of Sec. 5 for every parameter of ``model``, from the gradients in ``.grad``.

    ``θ ← θ − η g / (sqrt(MS_g) + ε) + min(λ RMS_norm, 1) ⊙ (θ_g − θ)``

    Args:
        model: the module whose parameters are updated in place.
        stats: ``sqrt(MS_g)`` of the same parameters (:func:`gradient_statistics`).
        lr: ``η`` (0: no learning; with ``lr = 0`` the weights stay at ``θ_g``).
        lamb: ``λ``, the decay rate towards ``θ_g`` (0: no decay).
        eps: ``ε``.
        theta_g: the weights to decay towards; default a copy of the current ones.

    Raises:
        ConfigError: a negative rate, a non-positive ``eps``, or statistics of other
            parameters.
    """

    def __init__(self, model: nn.Module, stats: GradientStats, *, lr: float, lamb: float,
                 eps: float = DEFAULT_EPS, theta_g: dict[str, Tensor] | None = None) -> None:
        for name, value in (("lr", lr), ("lamb", lamb)):
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"dynamic evaluation: {name} must be a finite number >= 0, "
                                  f"got {value}")
        if not (math.isfinite(eps) and eps > 0):
            raise ConfigError(f"dynamic evaluation: eps must be a positive number, got {eps}")
        self.params = _parameters(model)
        names = [n for n, _ in self.params]
        if sorted(names) != sorted(stats.rms):
            raise ConfigError("the gradient statistics were measured on other parameters "
                              "than the model's; measure them on this model "
                              "(gradient_statistics)")
        self.lr, self.lamb, self.eps = float(lr), float(lamb), float(eps)
        device = self.params[0][1].device if self.params else None
        norm = stats.rms_norm()
        self.denominator = {n: (stats.rms[n] + self.eps).to(device) for n in names}
        # r = λ · min(RMS_norm, 1/λ): the authors' capped decay rate, at most 1
        self.rate = {n: (norm[n].clamp(max=1 / self.lamb) * self.lamb if self.lamb
                         else torch.zeros_like(norm[n])).to(device) for n in names}
        if theta_g is None:
            theta_g = {n: p.detach().clone() for n, p in self.params}
        self.theta_g = theta_g

    @torch.no_grad()
    def step(self) -> None:
        """Apply the update once, in place (a parameter without a gradient only decays).

        Two fused passes per tensor: ``θ + r ⊙ (θ_g − θ)`` as ``lerp``, then the gradient
        term, which does not depend on ``θ``: both terms read ``θ_{i-1}``.
        """
        for name, p in self.params:
            if self.lamb:
                p.lerp_(self.theta_g[name], self.rate[name])
            if p.grad is not None and self.lr:
                p.addcdiv_(p.grad, self.denominator[name], value=-self.lr)

    @torch.no_grad()
    def reset(self) -> None:
        """Put ``θ_g`` back into the parameters (in place: label caches see it)."""
        for name, p in self.params:
            p.copy_(self.theta_g[name])


# ------------------------------------------------------------------ evaluation
@dataclass
class DynamicResult:
    """What :func:`dynamic_evaluate` measured.

    Attributes:
        loss: mean negative log-likelihood per token, each segment scored before the
            weights learn from it.
        tokens: targets scored.
        windows: segments scored.
        lr, lamb, eps, bptt: the settings.
        finished: the stream (or ``max_tokens``) was read to the end; False when
            ``max_windows`` stopped this call (resume it from the state file).
    """

    loss: float
    tokens: int
    windows: int
    lr: float
    lamb: float
    eps: float
    bptt: int
    finished: bool = True

    @property
    def ppl(self) -> float:
        """``exp(loss)``."""
        return perplexity(self.loss)


def _fingerprint(data: Tensor) -> str:
    """A checksum of a stream, so that a state file is never resumed on other text."""
    ids = data.detach().to("cpu", torch.int64).contiguous().numpy().tobytes()
    return f"{tuple(data.shape)}:{hashlib.sha256(ids).hexdigest()[:16]}"


def _weights_fingerprint(model: nn.Module) -> str:
    """A checksum of a model's weights, so that a state file is never resumed on other
    weights (those of a run trained further since, or of another run)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8)
                      .numpy().tobytes())
    return digest.hexdigest()[:16]


def dynamic_evaluate(model: LanguageModel, data: Tensor, stats: GradientStats | None = None,
                     *, lr: float = DEFAULT_LR, lamb: float = DEFAULT_LAMBDA,
                     eps: float = DEFAULT_EPS, bptt: int = DEFAULT_BPTT,
                     max_tokens: int | None = None, state_path: str | Path | None = None,
                     save_every: int = 500, resume: bool = False,
                     max_windows: int | None = None, extra: dict | None = None
                     ) -> DynamicResult:
    """Dynamic evaluation of ``model`` on a batchified stream (the update of Sec. 5).

    Each segment of ``bptt`` rows is scored, then the weights learn from its gradient;
    the recurrent state is carried. The model's weights are put back to the trained ones
    ``θ_g`` when this returns (or raises), so the caller's model is unchanged.

    The update is Krause et al.'s RMS-normalised rule with a decay towards the trained weights
    ``θ_g`` (their Sec. 5, where the three formulas below are numbered equations; the
    letters are theirs):

    * gradient statistics on the training text, before evaluation::

          MS_g = 1/N_b  Σ_{k=1..N_b} (∇L_k)²        per parameter entry

      over ``N_b`` training batches (dropout off, the state carried, the mean loss of each
      batch: the authors' ``gradstat``, batch size 100, segments of 5 tokens);
    * the decay rate of every entry is scaled by its RMS gradient relative to the average
      one, and capped at 1 so that a decay step never overshoots ``θ_g``::

          RMS_norm = sqrt(MS_g) / avg(sqrt(MS_g))
          r        = min(λ · RMS_norm, 1)

    * the update after segment ``s_i``::

          θ_i = θ_{i-1} − η ∇L(s_i) / (sqrt(MS_g) + ε) + r ⊙ (θ_g − θ_{i-1})

      with ``∇L(s_i)`` the gradient of the segment's mean negative log-likelihood at
      ``θ_{i-1}``; both terms are computed from ``θ_{i-1}``.

    Agreement with the authors' code (``benkrause/dynamic-evaluation`` ``dynamiceval.py``,
    which the DRILL repository ships unchanged but for its model's output; the MoS
    repository ships its earlier version):

    * ``avg`` is the mean over parameter *tensors* of each tensor's mean RMS, every tensor
      weighing the same whatever its size, as the code computes it (``gsum / count``);
    * the cap is applied as the code does, ``λ · min(RMS_norm, 1/λ)``;
    * the evaluation stream is one sequence (batch size 1), the segment loss is the mean
      over its tokens, and the perplexity weights each segment by its number of targets;
    * hyperparameters: :data:`DEFAULT_LR`, :data:`DEFAULT_LAMBDA`, :data:`DEFAULT_EPS` and
      the search grid :func:`search_grid` are the code's defaults (its ``--grid``), the grid
      scaled by ``bptt / 5`` as the code scales it.

    Differences: the evaluation stream and the training statistics are read to their last
    target with the package's windows (:func:`drillbook.data.get_batch`, the code's windows),
    where the code's loops stop one row early when a segment ends exactly at the last-but-one
    row. The MoS
    repository's older script sums the squared gradients instead of averaging them and does
    not divide ``avg`` by the number of tensors (its ``--ms`` flag restores the mean); the
    README of the newer script gives the conversion (``--oldhyper``, here
    :func:`old_hyperparameters`), which the MoS authors' settings need (PTB: ``lr 0.002``,
    ``lamb 0.075``, ``epsilon 0.001``; WikiText-2: ``lr 0.002``, ``lamb 0.02``,
    ``epsilon 0.002``).

    Every head of :data:`drillbook.heads.HEADS` that can end a language model works: the
    update touches only ``model.parameters()`` (a tied embedding once), in place and under
    ``no_grad``, which bumps each tensor's version, so the label caches of the DRILL and dual
    heads (:class:`~drillbook.heads.label_cache.LabelCache`) never serve ``g_out(E)`` of older
    weights.

    A long evaluation is resumable: :func:`dynamic_evaluate` writes a state file every
    ``save_every`` segments (atomically, :func:`~drillbook.train.checkpoint.save_atomic`) with
    the position in the stream, the adapted and the trained weights, the gradient statistics,
    the accumulated loss and token count, the carried state and the random-number state; a
    resumed evaluation ends at the same number as an uninterrupted one.

    Args:
        model: the trained language model (any head that ends one).
        data: the stream, ``(T, B)``; the authors read one sequence, ``B = 1``
            (:func:`drillbook.data.batchify` with batch size 1).
        stats: :func:`gradient_statistics` of the model; may be None when resuming (the
            state file holds them).
        lr, lamb, eps: ``η``, ``λ``, ``ε`` of Sec. 5.
        bptt: segment length (5 in the authors' code).
        max_tokens: stop after the segment that reaches this many targets.
        state_path: where to keep the resumable state (None: nowhere).
        save_every: write the state every this many segments (and at the end).
        resume: continue from ``state_path`` if it exists (its settings, stream and
            statistics must be these). Without it, a state file at ``state_path`` is
            overwritten.
        max_windows: stop after this many segments *in this call* (the state is written;
            ``finished`` is False).
        extra: JSON-like values kept in the state file under ``"extra"`` (the search
            results of :func:`evaluate_run`).

    Raises:
        ConfigError: bad settings, or ``stats`` missing without a state to resume.
        CheckpointError: the state file is unreadable, or was written for other settings,
            another stream or other statistics.
        DataError: the stream is too short for one segment.
    """
    if int(bptt) < 1 or int(save_every) < 1:
        raise ConfigError(f"dynamic evaluation: bptt and save_every must be positive "
                          f"integers, got {bptt} and {save_every}")
    path = None if state_path is None else Path(state_path)
    params = _parameters(model)
    device = params[0][1].device
    settings = {"lr": float(lr), "lamb": float(lamb), "eps": float(eps), "bptt": int(bptt),
                "max_tokens": max_tokens, "stream": _fingerprint(data)}
    if path is not None:  # (computed only where a state file is written or read)
        settings["weights"] = _weights_fingerprint(model)
    state = None
    if resume and path is not None and path.exists():
        state = load_checkpoint(path, device, formats=(LM_DYNAMIC_EVAL,),
                                fix="delete it to start the evaluation again")
        if state["settings"].get("weights") != settings["weights"]:
            raise CheckpointError(f"{path} was made from other weights than these (the run "
                                  f"trained further since, or it is another run's); delete "
                                  f"it to evaluate these weights afresh")
        if state["settings"] != settings:
            was = state["settings"]
            changed = ", ".join(f"{k}={was.get(k)} (now {settings[k]})" for k in settings
                                if was.get(k) != settings[k])
            raise CheckpointError(f"{path} was written with other settings: {changed}; "
                                  f"resume with the same ones, or delete it to start again")
        saved = GradientStats.from_state_dict(state["stats"])
        if stats is not None and any(not torch.equal(stats.rms[n].to(device), saved.rms[n])
                                     for n in saved.rms if n in stats.rms):
            raise CheckpointError(f"{path} was written with other gradient statistics; resume "
                                  f"without new ones, or delete it to start again")
        stats = saved
    if stats is None:
        raise ConfigError("dynamic evaluation needs the training-gradient statistics "
                          "(gradient_statistics) unless it resumes from a state file")
    theta_g = (None if state is None
               else {n: t.to(device) for n, t in state["theta_g"].items()})
    update = DynamicUpdate(model, stats, lr=lr, lamb=lamb, eps=eps, theta_g=theta_g)
    was_training = model.training
    model.eval()
    try:
        if state is None:
            hidden = model.init_hidden(data.shape[1])
            row, windows, total, count, finished = 0, 0, 0.0, 0, False
        else:
            model.load_state_dict(state["model"])  # in place: version counters move
            hidden = state["hidden"]
            row, windows = state["row"], state["windows"]
            total, count, finished = state["total"], state["count"], state["finished"]
            set_rng_state(state["rng"]["cpu"], state["rng"]["cuda"])

        def save(done: bool) -> None:
            if path is not None:
                cpu, cuda = rng_state()
                save_atomic({"format": LM_DYNAMIC_EVAL, "settings": settings,
                             "stats": stats.state_dict(), "theta_g": update.theta_g,
                             "model": model.state_dict(), "hidden": hidden, "row": row,
                             "windows": windows, "total": total, "count": count,
                             "finished": done, "rng": {"cpu": cpu, "cuda": cuda},
                             "extra": extra or {}},
                            path)

        done_here = 0
        while not finished:
            if row >= data.shape[0] - 1 or (max_tokens is not None and count >= max_tokens):
                finished = True
                save(True)
                break
            if max_windows is not None and done_here >= max_windows:
                save(False)
                break
            x, y = get_batch(data, row, bptt)
            model.zero_grad(set_to_none=True)
            with torch.enable_grad(), _native_cpu_rnn(device):
                out = model(x, hidden)
                loss = model.head.loss(out.features, y)
                total += float(loss.detach()) * y.numel()  # scored before anything is learnt
                count += y.numel()
                if update.lr:  # with lr = 0 the weights never leave θ_g
                    loss.backward()
            update.step()
            hidden = model.encoder.detach_hidden(out.hidden)
            row += x.shape[0]
            windows += 1
            done_here += 1
            if windows % save_every == 0:
                save(False)
    finally:
        model.zero_grad(set_to_none=True)
        update.reset()
        model.train(was_training)
    if count == 0:
        raise DataError(f"the evaluation stream of shape {tuple(data.shape)} is too short "
                        f"for one segment: it needs at least two tokens per column")
    return DynamicResult(total / count, count, windows, float(lr), float(lamb), float(eps),
                         int(bptt), finished)


# ------------------------------------------------------------------ hyperparameter search
@dataclass
class SearchResult:
    """The authors' grid search on the validation stream.

    Attributes:
        lr, lamb: the pair with the lowest validation perplexity (the first such pair in
            the search order, λ outer, η inner, as in the authors' loop).
        table: one dict per pair: ``lr``, ``lamb``, ``loss``, ``ppl``, ``tokens``.
    """

    lr: float
    lamb: float
    table: list[dict[str, float]] = field(default_factory=list)

    @property
    def best(self) -> dict[str, float]:
        """The row of :attr:`table` of the chosen pair."""
        return next(r for r in self.table if r["lr"] == self.lr and r["lamb"] == self.lamb)


def search(model: LanguageModel, data: Tensor, stats: GradientStats, *,
           lrs: Sequence[float] | None = None, lambdas: Sequence[float] | None = None,
           eps: float = DEFAULT_EPS, bptt: int = DEFAULT_BPTT,
           max_tokens: int | None = None) -> SearchResult:
    """Evaluate every ``(lr, λ)`` pair dynamically on ``data`` (the validation stream) from
    the trained weights, and keep the pair of lowest perplexity.

    Args:
        lrs, lambdas: the grid (default: the authors', :func:`search_grid` of ``bptt``).
        max_tokens: search on the first this many tokens (the authors' ``--gridfast``
            uses 30,000 validation tokens).
    """
    default_lrs, default_lambdas = search_grid(bptt)
    lrs = tuple(default_lrs if lrs is None else lrs)
    lambdas = tuple(default_lambdas if lambdas is None else lambdas)
    if not lrs or not lambdas:
        raise ConfigError("the search grid needs at least one learning rate and one lambda")
    table = []
    for lamb in lambdas:
        for lr in lrs:
            r = dynamic_evaluate(model, data, stats, lr=lr, lamb=lamb, eps=eps, bptt=bptt,
                                 max_tokens=max_tokens)
            table.append({"lr": lr, "lamb": lamb, "loss": r.loss, "ppl": r.ppl,
                          "tokens": r.tokens})
    best = min(table, key=lambda r: r["loss"])  # min keeps the first of equal losses
    return SearchResult(best["lr"], best["lamb"], table)


# ------------------------------------------------------------------ a run folder
def check_request(*, do_search: bool = False, lr: float | None = None,
                  lamb: float | None = None, old_hyper: bool = False,
                  search_tokens: int | None = None, searched: bool = False,
                  state_path: str | Path | None = None, resume: bool = False) -> None:
    """Refuse, before anything is loaded or measured, what :func:`evaluate_run` would not
    do or would ignore: a search together with the values it picks, the first script's
    hyperparameters without both values, search options without the search, or a state
    file at ``state_path`` that is not resumed (or is no state file at all).

    Raises:
        ConfigError: the settings do not go together (the message says which to drop).
        RunFolderError: the state file's path is taken.
    """
    if do_search and (lr is not None or lamb is not None):
        raise ConfigError("the search picks the learning rate and lambda on the validation "
                          "split: give either the search or the two values (--dyn-search, "
                          "or --dyn-lr and --dyn-lambda)")
    if old_hyper and (do_search or lr is None or lamb is None):
        raise ConfigError("the first script's hyperparameters convert a given learning rate "
                          "and lambda (and epsilon): give both, and no search")
    if (search_tokens is not None or searched) and not do_search:
        raise ConfigError("the search's tokens and grid are read only by the search: add "
                          "--dyn-search (or drop --dyn-search-tokens)")
    path = None if state_path is None else Path(state_path)
    if path is None or not path.exists():
        return
    if path.is_dir() or not zipfile.is_zipfile(path):
        raise RunFolderError(f"{path} exists and is not the state file of a dynamic "
                             f"evaluation; give --dyn-state a path that is free")
    if not resume:
        raise RunFolderError(f"{path} holds a dynamic evaluation already; continue it with "
                             f"--resume, or delete it to start again")


def evaluate_run(run_dir: str | Path, *, split: str = "test", which: str = "best",
                 lr: float | None = None, lamb: float | None = None, eps: float = DEFAULT_EPS,
                 bptt: int = DEFAULT_BPTT, do_search: bool = False,
                 lrs: Iterable[float] | None = None, lambdas: Iterable[float] | None = None,
                 search_tokens: int | None = None,
                 grad_batch_size: int = DEFAULT_GRAD_BATCH_SIZE,
                 grad_batches: int | None = None, max_tokens: int | None = None,
                 state_path: str | Path | None = None, save_every: int = 500,
                 resume: bool = False, device: str | None = None, corpus=None,
                 static: bool = True, old_hyper: bool = False) -> dict[str, Any]:
    """Dynamic evaluation of a trained run, as ``drillbook eval RUN --dynamic`` runs it.

    Measures the gradient statistics on the training split (``grad_batch_size`` columns,
    windows of ``bptt``, at most ``grad_batches`` of them), optionally searches the
    authors' grid on the validation split (``do_search``, on ``search_tokens`` tokens),
    then evaluates ``split`` as one sequence with the chosen ``(lr, λ)``. With
    ``state_path`` the last evaluation is resumable (``resume``): the statistics and the
    search result are kept in the state file and are not measured again (``grad_batches``
    and the search options are then not read; ``lr``, ``lamb``, ``eps``, ``bptt`` and
    ``max_tokens`` must be those it was written with). With ``old_hyper``, ``lr``, ``lamb``
    and ``eps`` are the first script's (the MoS README's settings) and are converted
    (:func:`old_hyperparameters`) once the statistics are measured; the result reports the
    converted values.

    Returns:
        the JSON-ready dict of ``run``, ``split``, ``which``, ``dynamic`` (True), ``lr``,
        ``lamb``, ``eps``, ``bptt``, ``loss``, ``ppl``, ``tokens``, ``windows``,
        ``finished``, ``grad_batches``; ``static_loss``/``static_ppl`` (the same stream
        evaluated without learning, when ``static``); ``search`` (the grid's table,
        ``best_lr``, ``best_lamb``, ``valid_ppl``) when a search was made.

    Raises:
        ConfigError: ``lr``/``lamb`` given together with ``do_search``; ``old_hyper``
            without ``lr`` and ``lamb``, or with ``do_search``.
        RunFolderError: a state file exists and ``resume`` is not set.
    """
    check_request(do_search=do_search, lr=lr, lamb=lamb, old_hyper=old_hyper,
                  search_tokens=search_tokens, searched=lrs is not None or lambdas is not None,
                  state_path=state_path, resume=resume)
    path = None if state_path is None else Path(state_path)
    config, model, corpus = load_lm_run(run_dir, which=which, device=device, corpus=corpus)
    dev = next(model.parameters()).device
    data = batchify(corpus.split(split), 1).to(dev)
    earlier = None
    if resume and path is not None and path.exists():
        earlier = load_checkpoint(path, dev, formats=(LM_DYNAMIC_EVAL,),
                                  fix="delete it to start the evaluation again")
    if earlier is not None:  # its statistics and chosen pair; other settings are refused
        stats = GradientStats.from_state_dict(earlier["stats"])
        if old_hyper:
            lr, lamb, eps = old_hyperparameters(lr, lamb, eps, tensors=len(stats.rms),
                                                batches=stats.batches)
        found = earlier["extra"].get("search")
        lr = earlier["settings"]["lr"] if lr is None else lr
        lamb = earlier["settings"]["lamb"] if lamb is None else lamb
    else:
        train = batchify(corpus.train, grad_batch_size).to(dev)
        stats = gradient_statistics(model, train, bptt, grad_batches)
        found = None
        if do_search:
            valid = batchify(corpus.valid, 1).to(dev)
            result = search(model, valid, stats, lrs=None if lrs is None else list(lrs),
                            lambdas=None if lambdas is None else list(lambdas), eps=eps,
                            bptt=bptt, max_tokens=search_tokens)
            found = {"table": result.table, "best_lr": result.lr, "best_lamb": result.lamb,
                     "valid_ppl": result.best["ppl"], "tokens": result.best["tokens"]}
            lr, lamb = result.lr, result.lamb
        lr = DEFAULT_LR if lr is None else lr
        lamb = DEFAULT_LAMBDA if lamb is None else lamb
        if old_hyper:
            lr, lamb, eps = old_hyperparameters(lr, lamb, eps, tensors=len(stats.rms),
                                                batches=stats.batches)
    r = dynamic_evaluate(model, data, stats, lr=lr, lamb=lamb, eps=eps, bptt=bptt,
                         max_tokens=max_tokens, state_path=path, save_every=save_every,
                         resume=resume, extra={"search": found} if found else None)
    out: dict[str, Any] = {
        "run": str(run_dir), "split": split, "which": which, "dynamic": True, "lr": r.lr,
        "lamb": r.lamb, "eps": r.eps, "bptt": r.bptt, "loss": r.loss, "ppl": r.ppl,
        "tokens": r.tokens, "windows": r.windows, "finished": r.finished,
        "grad_batches": stats.batches}
    if static:
        loss, _ = evaluate(model, data, config.train.bptt, max_tokens)
        out["static_loss"], out["static_ppl"] = loss, perplexity(loss)
    if found:
        out["search"] = found
    return out
