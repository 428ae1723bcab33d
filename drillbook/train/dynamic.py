"""Dynamic evaluation (Krause et al., 2018): the model keeps learning from the text it scores.

The evaluation stream is cut into segments of ``bptt`` tokens, read in order with the
recurrent state carried across them. Each segment is first *scored* with the current
weights, then the gradient of its loss moves the weights before the next one is scored:
a word seen once becomes more probable the next time it occurs, and nothing is learnt
from a segment before it has been scored. :func:`dynamic_evaluate` reads a stream so,
:func:`search` searches the authors' grid, and :func:`evaluate_run` evaluates a run folder,
searching the grid first if asked. The update and its statistics are in
:mod:`drillbook.train.dynamic_update`, the resumable state in
:mod:`drillbook.train.dynamic_state`; every name is importable from here.

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
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..data import batchify, get_batch
from ..errors import ConfigError, DataError, RunFolderError
from ..metrics import perplexity
from ..models import LanguageModel
from .checkpoint import LM_DYNAMIC_EVAL, load_checkpoint
from .dynamic_state import Progress, StateFile, evaluation_settings, resumed_state
from .dynamic_update import (
    DEFAULT_BPTT,
    DEFAULT_EPS,
    DEFAULT_GRAD_BATCH_SIZE,
    DEFAULT_LAMBDA,
    DEFAULT_LR,
    DynamicUpdate,
    GradientStats,
    gradient_statistics,
    native_cpu_rnn,
    old_hyperparameters,
    search_grid,
    trainable_parameters,
)
from .lm import evaluate
from .tasks.language_model.runs import load_lm_run

__all__ = ["DEFAULT_BPTT", "DEFAULT_EPS", "DEFAULT_GRAD_BATCH_SIZE", "DEFAULT_LAMBDA",
           "DEFAULT_LR", "DynamicResult", "DynamicUpdate", "GradientStats", "SearchResult",
           "check_request", "dynamic_evaluate", "evaluate_run", "gradient_statistics",
           "old_hyperparameters", "search", "search_grid"]


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

    The update is Krause et al.'s RMS-normalised rule with a decay towards ``θ_g``; the
    docstring of :mod:`drillbook.train.dynamic` gives it and how it matches the authors'
    code. With ``state_path`` the evaluation is resumable (a state file is written every
    ``save_every`` segments, :mod:`drillbook.train.dynamic_state`).

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
    device = trainable_parameters(model)[0][1].device
    settings = evaluation_settings(model, data, lr=lr, lamb=lamb, eps=eps, bptt=bptt,
                                   max_tokens=max_tokens, weights=path is not None)
    state = None
    if resume and path is not None and path.exists():
        state, stats = resumed_state(path, device, settings, stats)
    if stats is None:
        raise ConfigError("dynamic evaluation needs the training-gradient statistics "
                          "(gradient_statistics) unless it resumes from a state file")
    theta_g = (None if state is None
               else {n: t.to(device) for n, t in state["theta_g"].items()})
    update = DynamicUpdate(model, stats, lr=lr, lamb=lamb, eps=eps, theta_g=theta_g)
    was_training = model.training
    model.eval()
    try:
        progress = (Progress(model.init_hidden(data.shape[1])) if state is None
                    else Progress.restore(model, state))
        _read_stream(model, data, update, progress, StateFile(path, settings, stats, update,
                                                              extra),
                     bptt=bptt, max_tokens=max_tokens, max_windows=max_windows,
                     save_every=save_every)
    finally:
        model.zero_grad(set_to_none=True)
        update.reset()
        model.train(was_training)
    if progress.count == 0:
        raise DataError(f"the evaluation stream of shape {tuple(data.shape)} is too short "
                        f"for one segment: it needs at least two tokens per column")
    return DynamicResult(progress.total / progress.count, progress.count, progress.windows,
                         float(lr), float(lamb), float(eps), int(bptt), progress.finished)


def _read_stream(model: LanguageModel, data: Tensor, update: DynamicUpdate,
                 progress: Progress, state: StateFile, *, bptt: int,
                 max_tokens: int | None, max_windows: int | None, save_every: int) -> None:
    """Score and learn from the segments of ``data`` from ``progress`` on, until the stream
    or ``max_tokens`` is read (the state is then written as finished) or ``max_windows``
    segments were read in this call; the state is also written every ``save_every``
    segments."""
    done_here = 0
    while not progress.finished:
        if (progress.row >= data.shape[0] - 1
                or (max_tokens is not None and progress.count >= max_tokens)):
            progress.finished = True
            state.save(model, progress, True)
            break
        if max_windows is not None and done_here >= max_windows:
            state.save(model, progress, False)
            break
        _score_and_learn(model, data, update, progress, bptt)
        done_here += 1
        if progress.windows % save_every == 0:
            state.save(model, progress, False)


def _score_and_learn(model: LanguageModel, data: Tensor, update: DynamicUpdate,
                     progress: Progress, bptt: int) -> None:
    """Score the segment at ``progress.row`` with the current weights, then move them by its
    gradient (:meth:`DynamicUpdate.step`) and carry the state to the next segment."""
    x, y = get_batch(data, progress.row, bptt)
    model.zero_grad(set_to_none=True)
    with torch.enable_grad(), native_cpu_rnn(update.params[0][1].device):
        out = model(x, progress.hidden)
        loss = model.head.loss(out.features, y)
        progress.total += float(loss.detach()) * y.numel()  # scored before anything is learnt
        progress.count += y.numel()
        if update.lr:  # with lr = 0 the weights never leave θ_g
            loss.backward()
    update.step()
    progress.hidden = model.encoder.detach_hidden(out.hidden)
    progress.row += x.shape[0]
    progress.windows += 1


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
        stats, found, (lr, lamb, eps) = _kept_choice(earlier, lr, lamb, eps, old_hyper)
    else:
        stats, found, (lr, lamb, eps) = _measured_choice(
            model, corpus, lr, lamb, eps, bptt=bptt, grad_batch_size=grad_batch_size,
            grad_batches=grad_batches, do_search=do_search, lrs=lrs, lambdas=lambdas,
            search_tokens=search_tokens, old_hyper=old_hyper)
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


def _kept_choice(earlier: dict[str, Any], lr: float | None, lamb: float | None, eps: float,
                 old_hyper: bool) -> tuple[GradientStats, dict | None,
                                           tuple[float, float, float]]:
    """The gradient statistics, the search result and ``(lr, lamb, eps)`` of an evaluation
    resumed from its state file ``earlier`` (the values not given are the file's)."""
    stats = GradientStats.from_state_dict(earlier["stats"])
    if old_hyper:
        lr, lamb, eps = old_hyperparameters(lr, lamb, eps, tensors=len(stats.rms),
                                            batches=stats.batches)
    found = earlier["extra"].get("search")
    lr = earlier["settings"]["lr"] if lr is None else lr
    lamb = earlier["settings"]["lamb"] if lamb is None else lamb
    return stats, found, (lr, lamb, eps)


def _measured_choice(model: LanguageModel, corpus, lr: float | None, lamb: float | None,
                     eps: float, *, bptt: int, grad_batch_size: int,
                     grad_batches: int | None, do_search: bool,
                     lrs: Iterable[float] | None, lambdas: Iterable[float] | None,
                     search_tokens: int | None, old_hyper: bool
                     ) -> tuple[GradientStats, dict | None, tuple[float, float, float]]:
    """The gradient statistics measured on the training split, the search result on the
    validation split (when ``do_search``, else None) and the ``(lr, lamb, eps)`` to
    evaluate with (the search's pair, else the given or default values; converted from the
    first script's when ``old_hyper``)."""
    dev = next(model.parameters()).device
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
    return stats, found, (lr, lamb, eps)
