"""The AWD-LSTM training recipe, resumable to the bit.

What one epoch does (Merity et al., 2018):

1. walk the training stream in windows of random length (70 w.p. 0.95, else 35, then
   ``max(5, N(bptt, 5))``), carrying the LSTM state across windows, the learning rate
   scaled by ``seq_len / bptt``;
2. loss = head NLL + ``alpha`` x mean(dropped output^2) (AR) + ``beta`` x mean of
   squared differences of consecutive undropped outputs (TAR);
3. clip the gradient norm, take an SGD step;
4. evaluate; **NT-ASGD**: once the validation loss is worse than the best of all epochs
   before the last ``nonmono``, switch to averaged SGD and evaluate with averaged weights.

State that a resumed run needs to continue *exactly* (tested: a killed CPU run resumed
from its last checkpoint ends bit-identical to an uninterrupted one): weights, optimiser
(kind and state), epoch, position in the epoch and the window-length generator, the
carried LSTM state, the global RNG (dropout masks), the validation history.

The run folder follows :mod:`drillbook.train.run_folder` (locked while training, checked before
anything is written, a log that matches the checkpoint); a non-finite loss or parameter
stops training with :class:`~drillbook.errors.TrainingDiverged` before it is saved.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm import tqdm

from ..configs import Config
from ..data import BPTTSampler, Corpus, batchify, load_corpus
from ..errors import CheckpointError, ConfigError, DataError
from ..metrics import MAX_LOSS, perplexity
from ..models import LanguageModel, build_model, eval_windows
from ..precision import amp_precisions
from ..runtime import check_model_fits, read_back
from .checkpoint import LM_CHECKPOINT, LM_WEIGHTS, load_checkpoint, load_weights
from .graphs import GraphedForward
from .loop import TrainingLoop
from .optimizers import first_kind, make_optimizer
from .run_files import CONFIG, LoadedRun
from .step import StepLoss

__all__ = ["LanguageModelTrainer", "check_columns", "evaluate", "evaluate_lm_run",
           "load_lm_data", "split_stream", "training_loss"]


def training_loss(model: LanguageModel, x: Tensor, y: Tensor, hidden, *, alpha: float,
                  beta: float) -> tuple[Tensor, Tensor, Any]:
    """The AWD-LSTM training objective of one batch (Merity et al. 2018, Sec. 4.6).

    ``loss = head.loss + head.regularizer (DOC's λ_β β) + α mean(h_last²) (AR)
    + β mean((r_t − r_{t−1})²) (TAR, on the last layer's output before dropout)``.

    Args:
        model: the language model; x, y: ``(T, B)`` inputs and targets; hidden: the
            carried state. alpha, beta: the AR and TAR weights (0 switches them off).

    Returns:
        ``(loss, raw_loss, out)``: the objective, the head's loss alone (what perplexity
        reports), and the model's output (for the hidden state).
    """
    out = model(x, hidden)
    raw_loss = model.head.loss(out.features, y)
    loss = raw_loss
    extra = model.head.regularizer(out.features)
    if extra is not None:
        loss = loss + extra
    if alpha:
        loss = loss + alpha * out.features.last.float().pow(2).mean()
    if beta and out.raw_last.shape[0] > 1:
        diff = out.raw_last[1:] - out.raw_last[:-1]
        loss = loss + beta * diff.float().pow(2).mean()
    return loss, raw_loss, out


@torch.no_grad()
def evaluate(model: LanguageModel, data: Tensor, bptt: int,
             max_tokens: int | None = None, *, progress: bool | None = False
             ) -> tuple[float, int]:
    """Mean NLL per token of ``model`` on a batchified ``(T, B)`` stream.

    The recurrent state is carried across fixed windows of ``bptt`` tokens, as in
    AWD-LSTM's evaluation. Returns ``(loss, n_tokens)``; perplexity is ``exp(loss)``.
    ``progress``: a bar over the windows (None: on a terminal only).
    """
    total = 0.0
    steps = data.size(0) - 1
    if max_tokens is not None:
        steps = min(steps, -(-max_tokens // max(data.size(1), 1)))
    windows = tqdm(eval_windows(model, data, bptt, max_tokens), total=-(-steps // bptt),
                   desc="evaluating", leave=False,
                   disable=None if progress is None else not progress)
    losses, sizes = [], []  # the windows' losses stay on the device until the last one
    for out, y in windows:
        losses.append(model.head.loss(out.features, y).detach())
        sizes.append(y.numel())
    if losses:  # one read back, then the sum in Python's float64 as window by window
        for loss, size in zip(read_back(losses), sizes, strict=True):
            total += loss * size
    count = sum(sizes)
    if count == 0:
        raise DataError(f"the evaluation stream of shape {tuple(data.shape)} is too short "
                        f"for one window: use a smaller batch size (or more tokens)")
    return total / count, count


class LanguageModelTrainer(TrainingLoop):
    """Train a config's language model into a run folder, resumably.

    The task's part of :class:`~drillbook.train.loop.TrainingLoop`: batches from
    :class:`~drillbook.data.BPTTSampler` over the ``(T, B)`` training stream, the loss
    :func:`training_loss` with the LSTM state carried across windows, the learning rate
    scaled by ``seq_len / bptt``, and NT-ASGD at the end of each epoch.

    With ``train.accum_steps = k`` each step's ``(L, B)`` window is cut into ``k`` column
    slices of ``B / k`` streams; slice ``i`` carries its own recurrent state from window
    to window (``hidden`` is then a list of ``k`` states), so the ``k`` slices see the
    same text, in the same order, as one batch of ``B`` columns.

    Args:
        config: the resolved config (written to ``run_dir/config.json``).
        run_dir: where ``config.json``, ``log.jsonl``, ``last.pt`` and ``best.pt`` live.
        device: where to train; default :func:`~drillbook.runtime.default_device`.
        corpus: an already loaded corpus (default: :func:`load_lm_data`).
        resume: continue from ``run_dir/last.pt``. Without it an existing run folder
            with a checkpoint is an error (nothing is overwritten by accident).
        progress: ``None`` (default): a tqdm bar only on a terminal, and one line per
            epoch on stderr; ``True``: a bar always; ``False``: quiet.
        stage: ``"train"``, or ``"finetune"``: AWD-LSTM's second stage, which starts in
            averaged SGD from ``init_from`` and stops at the first non-monotone epoch.
        init_from: a ``best.pt``/``last.pt`` whose weights a new run starts from. A new
            fine-tuning run evaluates them once: their validation loss is the best so far
            and they are its first ``best.pt``, so it never saves a worse model than the
            one it loaded (as AWD-LSTM's ``finetune.py`` does).
        graphs: take the graph-ready step (:class:`~drillbook.train.graphs.GraphedStep`,
            with :mod:`~drillbook.train.optimizers`' SGD and averaged SGD), captured as
            CUDA graphs per window length on a CUDA device (evaluation windows too), run
            eagerly elsewhere (bit-identical to the plain step on the CPU). One process,
            whole batches, SGD, a precision that can be captured (not one with a
            gradient scaler), no ``train.compile`` (:meth:`graph_problem`); anything else
            is refused before the folder is written.

    ``last.pt`` holds, besides what the loop keeps (weights, optimiser, epoch, step, RNG,
    scaler): the optimiser's kind, the sampler (position and window-length generator),
    the carried LSTM state, the validation history, the best validation loss, the stage
    and whether fine-tuning has finished.

    The trainer holds the run folder's lock from construction until :meth:`fit` returns
    (:meth:`~drillbook.train.loop.TrainingLoop.close` gives it up earlier); a second
    trainer on the same folder fails with :class:`~drillbook.errors.RunFolderError`.

    Raises:
        ConfigError: an invalid config.
        RunFolderError: the folder is in use, holds another run, or holds none to resume.
        CheckpointError: ``last.pt`` (or ``init_from``) is unreadable or of another kind.
    """

    checkpoint_format = LM_CHECKPOINT
    config_type = Config
    graph_ready = True
    max_loss = MAX_LOSS
    metric_line = "val ppl {val_ppl:.2f}"
    val_bound = "twice a uniform guess's"

    @property
    def max_val_loss(self) -> float:
        """Twice a uniform guess's validation loss, ``2 ln V``: a validation loss above it
        is divergence, so that every saved state can be trained on from."""
        return 2 * math.log(len(self.corpus.vocab))

    def __init__(self, config: Config, run_dir: str | Path, *, device: str | None = None,
                 corpus: Corpus | None = None, resume: bool = False,
                 progress: bool | None = None, stage: str = "train",
                 init_from: str | Path | None = None, graphs: bool = False) -> None:
        if stage not in ("train", "finetune"):
            raise ValueError(f"stage must be 'train' or 'finetune', got {stage!r}")
        self.stage, self._given = stage, (corpus, init_from)
        super().__init__(config, run_dir, device=device, resume=resume, progress=progress,
                         graphs=graphs)
        #: what validation calls for the model's forward passes
        self.eval_model: Any = GraphedForward(self.model) if self.graphs else self.model
        if stage == "finetune" and init_from is not None and not resume:
            try:  # the loaded weights are the first best.pt: none worse is ever saved
                if math.isfinite(self.best_val_loss):
                    self._save_best(self.model.state_dict(), epoch=0,
                                    val_loss=self.best_val_loss)
            except BaseException:
                self.folder.release()
                raise

    def build(self, state: dict | None) -> None:
        corpus, init_from = self._given
        stage = self.stage
        if state is not None and state["stage"] != stage:
            raise CheckpointError(f"{self.folder.last} is a {state['stage']!r} checkpoint, "
                                  f"not {stage!r}: resume it with the command that started "
                                  f"it")
        init_from = init_from if state is None else None
        config = self.config
        t = config.train
        self.corpus = corpus if corpus is not None else load_lm_data(config)
        vocab_size = len(self.corpus.vocab)
        check_model_fits(lambda: build_model(config, vocab_size), self.device,
                         f"config {config.name!r}")
        self.model = build_model(config, vocab_size).to(self.device)
        world = self.world_size
        for key, split, size in (("train.batch_size", "train", t.batch_size),
                                 ("train.eval_batch_size", "valid", t.eval_batch_size)):
            check_columns(key, split, len(getattr(self.corpus, split)), size)
        rows = len(self.corpus.train) // t.batch_size
        if t.bptt >= rows:
            raise ConfigError(f"train.bptt={t.bptt} is longer than a column of the train text "
                              f"({rows:,} tokens in each of train.batch_size={t.batch_size} "
                              f"columns): lower train.bptt")
        if t.batch_size % (world * t.accum_steps):
            raise ConfigError(f"train.batch_size={t.batch_size} does not split into {world} "
                              f"processes x train.accum_steps={t.accum_steps} equal column "
                              f"slices; use a multiple of {world * t.accum_steps}")
        self.train_data = self._my_columns(batchify(self.corpus.train, t.batch_size))
        valid = batchify(self.corpus.valid, t.eval_batch_size)
        #: whether each process validates its own columns (then all-reduced) or all of them
        self.split_validation = world > 1 and t.eval_batch_size % world == 0
        self.valid_data = (self._my_columns(valid) if self.split_validation
                           else valid.to(self.device))
        self.sampler = BPTTSampler(self.train_data, t.bptt, seed=t.seed,
                                   variable=t.variable_bptt)
        if init_from is not None:
            weights = load_checkpoint(init_from, self.device, formats=(LM_WEIGHTS,
                                                                       LM_CHECKPOINT))
            load_weights(self.model, weights["model"], checkpoint=init_from,
                         config=Path(init_from).parent / CONFIG)
        self.optimizer = self._make_optimizer("asgd" if stage == "finetune"
                                              else first_kind(t.optimizer))
        self.hidden: Any = None if t.accum_steps == 1 else [None] * t.accum_steps
        self.val_history: list[float] = []
        self.best_val_loss = math.inf
        if stage == "finetune" and init_from is not None:
            # the loaded model is the one to beat (written as best.pt once the folder is up)
            # every process evaluates all columns: no collective before all have opened
            loaded = evaluate(self.model, valid.to(self.device), t.bptt, t.max_eval_tokens)[0]
            self.best_val_loss = loaded if math.isfinite(loaded) else math.inf

    def _my_columns(self, data: Tensor) -> Tensor:
        """This process's equal share of the columns of a ``(T, B)`` stream (all of them
        for a single process), on the device."""
        if self.world_size > 1:
            data = data.chunk(self.world_size, dim=1)[self.rank]
        return data.to(self.device)

    # ------------------------------------------------------------ optimisers
    @property
    def averaging(self) -> bool:
        return isinstance(self.optimizer, torch.optim.ASGD)

    def _make_optimizer(self, kind: str) -> torch.optim.Optimizer:
        t = self.config.train
        return make_optimizer(kind, self.model.parameters(), t.lr, t.wdecay,
                              graph_ready=self.graphs)

    @classmethod
    def graph_problem(cls, config: Config, world_size: int = 1) -> str | None:
        """Why ``config`` cannot train with the graph-ready step
        (``LanguageModelTrainer(graphs=True)``, ``drillbook train --cuda-graphs``), in one
        line naming the fix; None when it can (:func:`~drillbook.train.graphs.takes_graphs`
        asks it)."""
        t = config.train
        uncaptured = [p for p in amp_precisions(t.amp) if not p.capturable]
        problems = [
            (world_size > 1, "it is one process's step: run it without torchrun"),
            (t.accum_steps > 1, "it takes whole batches: leave train.accum_steps at 1"),
            (t.optimizer != "sgd", f"it updates with SGD and averaged SGD, not "
                                   f"train.optimizer={t.optimizer}: use train.optimizer=sgd"),
            (bool(uncaptured), "; ".join(f"{p.name} cannot be captured, {p.not_captured}"
                                         for p in uncaptured) + ": use train.amp=bf16 or fp32"),
            (t.compile, "train.compile is another way to launch fewer kernels: set "
                        "train.compile=false"),
        ]
        why = next((text for bad, text in problems if bad), None)
        return None if why is None else f"the graph-ready training step does not apply: {why}"

    def _optimizer_kind(self) -> str:
        kinds = {torch.optim.ASGD: "asgd", torch.optim.Adam: "adam", torch.optim.SGD: "sgd"}
        return next(kind for cls, kind in kinds.items() if isinstance(self.optimizer, cls))

    # ------------------------------------------------------------ checkpoints
    def task_state(self) -> dict[str, Any]:
        return {
            "config_hash": self.config.resume_key(),
            "optimizer_kind": self._optimizer_kind(),
            "sampler": self.sampler.state_dict(),
            "val_history": list(self.val_history),
            "best_val_loss": self.best_val_loss,
            "stage": self.stage,
            "finished": self.finished,
        }

    def load_task_state(self, state: dict[str, Any]) -> None:
        self.optimizer = self._make_optimizer(state["optimizer_kind"])
        self.sampler.load_state_dict(state["sampler"])
        self.val_history = list(state["val_history"])
        self.best_val_loss = state["best_val_loss"]
        self.finished = state["finished"]

    def process_state(self) -> dict[str, Any]:
        return {"hidden": self.hidden}  # this process's columns' carried state

    def carried_state(self) -> Any:
        """The LSTM state carried from window to window (zeros before the first window;
        with ``train.accum_steps = k``, a list of the ``k`` slices' states)."""
        columns, k = self.train_data.size(1), self.config.train.accum_steps
        if k == 1:
            if self.hidden is None:
                self.hidden = self.model.init_hidden(columns)
        else:
            self.hidden = [self.model.init_hidden(columns // k) if h is None else h
                           for h in self.hidden]
        return self.hidden

    def carry_state(self, state: Any) -> None:
        self.hidden = state

    def load_process_state(self, state: dict[str, Any]) -> None:
        self.hidden = state["hidden"]

    # ------------------------------------------------------------ training
    def batches(self) -> Iterator[Any]:
        return self.sampler.iter_epoch(self.config.train.max_batches_per_epoch)

    def epoch_progress(self) -> tuple[int, int]:
        cap = self.config.train.max_batches_per_epoch
        return self.sampler.num_batches(cap), self.sampler.batches_done

    def next_epoch(self) -> None:
        self.sampler.new_epoch()

    def lr_scale(self, batch) -> float:
        return batch.lr_scale

    def tokens(self, batch) -> int:
        return batch.y.numel()

    def split(self, batch, parts: int) -> list:
        """``parts`` column slices of the window (``train.batch_size`` is a multiple of
        ``parts``), ``B/parts`` columns each."""
        return [batch._replace(x=x, y=y) for x, y in
                zip(batch.x.chunk(parts, dim=1), batch.y.chunk(parts, dim=1), strict=True)]

    def loss(self, piece, part: int) -> StepLoss:
        """:func:`training_loss` of a window (or of column slice ``part`` of one) from its
        carried state, which then carries this window's on, detached."""
        t = self.config.train
        whole = t.accum_steps == 1
        hidden = self.hidden if whole else self.hidden[part]
        if hidden is None:
            hidden = self.model.init_hidden(piece.x.shape[1])
        loss, raw_loss, out = training_loss(self.forward_model, piece.x, piece.y, hidden,
                                            alpha=t.alpha, beta=t.beta)
        carried = self.model.encoder.detach_hidden(out.hidden)
        if whole:
            self.hidden = carried
        else:
            self.hidden[part] = carried
        return StepLoss(loss, raw_loss)

    @contextmanager
    def _averaged_weights(self) -> Iterator[None]:
        """Swap NT-ASGD's averaged weights in, and back afterwards.

        The copies are in-place updates of the parameters (under ``no_grad``, not
        through ``.data``), so they bump each parameter's version counter: the label
        caches of DRILL/dual heads (:class:`~drillbook.heads.label_cache.LabelCache`)
        see both swaps and never serve ``g_out(E)`` of the other weights.
        """
        params = [p for p in self.model.parameters() if "ax" in self.optimizer.state[p]]
        saved = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p in params:
                p.copy_(self.optimizer.state[p]["ax"])
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in zip(params, saved, strict=True):
                    p.copy_(value)

    def _validate(self) -> float:
        """The validation loss of the weights in use (the averaged ones under NT-ASGD)."""
        if not self.averaging:
            return self._validation_loss()
        with self._averaged_weights():
            return self._validation_loss()

    def _validation_loss(self) -> float:
        """The model's validation loss. Several processes: each evaluates its columns,
        the sums are all-reduced, and rank 0's result is every process's (so all take the
        same NT-ASGD decision)."""
        t = self.config.train
        loss, count = evaluate(self.eval_model, self.valid_data, t.bptt, t.max_eval_tokens)
        if self.world_size == 1:
            return loss
        if self.split_validation:
            total, count = self.reducer.all_sum([loss * count, float(count)])
            loss = total / count
        return self.reducer.from_rank0([loss])[0]

    def _best_state(self) -> dict[str, Any]:
        if not self.averaging:
            return self.model.state_dict()
        params = {id(p): self.optimizer.state[p]["ax"] for p in self.model.parameters()
                  if "ax" in self.optimizer.state[p]}
        state = {}
        for name, p in self.model.state_dict(keep_vars=True).items():
            state[name] = params.get(id(p), p).detach().clone()
        return state

    def _save_best(self, state: dict[str, Any], *, epoch: int, val_loss: float) -> None:
        self.folder.save_best({"format": LM_WEIGHTS, "model": state,
                               "config": self.config.to_dict(), "epoch": epoch,
                               "val_loss": val_loss})

    def end_epoch(self, seconds: float) -> dict[str, Any]:
        """Validate (averaged weights under NT-ASGD), switch to averaged SGD at the
        trigger, save ``best.pt`` when it improved; returns the epoch's log record."""
        t = self.config.train
        val_loss = self._validate()
        switched = False
        trigger = (len(self.val_history) > t.nonmono
                   and val_loss > min(self.val_history[:-t.nonmono]))
        if self.stage == "finetune":
            self.finished = trigger  # fine-tuning ends at its first non-monotone epoch
            if trigger:
                self.events.append("fine-tuning stops (non-monotone)")
        elif trigger and t.optimizer == "sgd" and not self.averaging:
            self.optimizer = self._make_optimizer("asgd")  # NT-ASGD
            switched = True
            self.events.append("switched to averaged SGD")
        self.val_history.append(val_loss)
        improved = val_loss < self.best_val_loss
        if improved:
            self.best_val_loss = val_loss
            self._save_best(self._best_state(), epoch=self.epoch, val_loss=val_loss)
            self.events.append("saved best")
        train_loss = self.epoch_loss / max(self.epoch_batches, 1)
        return {
            "epoch": self.epoch, "step": self.step, "train_loss": train_loss,
            "train_ppl": perplexity(train_loss), "val_loss": val_loss,
            "val_ppl": perplexity(val_loss), "best_val_ppl": perplexity(self.best_val_loss),
            "optimizer": self._optimizer_kind(), "switched_to_asgd": switched,
            "stage": self.stage, "lr": t.lr, "clip": t.clip,
            "epoch_seconds": seconds, "elapsed_seconds": self.elapsed,
            "tokens": self.epoch_tokens, "batches": self.epoch_batches,
        }

    def best(self) -> dict[str, float]:
        return {"best_val_loss": self.best_val_loss}


def load_lm_data(config: Config) -> Corpus:
    """The corpus a language-model config trains on, its missing files downloaded first
    (checksum-verified; :func:`~drillbook.data.load_corpus`): what the trainer, evaluation
    and :func:`~drillbook.train.load_run` read when no corpus is given."""
    return load_corpus(config.data.corpus, download=True)


def split_stream(config: Config, corpus: Corpus, split: str) -> Tensor:
    """A split of ``corpus`` batchified as the config evaluates it: ``valid`` (and
    ``train``) in ``train.eval_batch_size`` columns, ``test`` in
    ``train.test_batch_size``."""
    t = config.train
    key = "train.test_batch_size" if split == "test" else "train.eval_batch_size"
    batch = t.test_batch_size if split == "test" else t.eval_batch_size
    check_columns(key, split, len(getattr(corpus, split)), batch)
    return batchify(getattr(corpus, split), batch)


def check_columns(key: str, split: str, tokens: int, columns: int) -> None:
    """A ConfigError naming ``key`` when a split of ``tokens`` tokens cannot be cut into
    ``columns`` columns of at least two (an input and its next word)."""
    if tokens // columns < 2:
        raise ConfigError(f"{key}={columns} leaves no batch: the {split} text has {tokens:,} "
                          f"tokens, so at most {tokens // 2:,} columns of two; lower {key}")


def evaluate_lm_run(run: LoadedRun, split: str, *, data: Corpus, max_items: int | None = None,
                    beam: int = 1) -> dict[str, Any]:
    """Perplexity of a loaded run on a split of ``data``: ``loss``, ``ppl`` and ``tokens``
    (about ``max_items`` of them, if given; ``beam`` is for translation and ignored)."""
    stream = split_stream(run.config, data, split).to(next(run.model.parameters()).device)
    loss, n = evaluate(run.model, stream, run.config.train.bptt, max_items, progress=None)
    return {"loss": loss, "ppl": perplexity(loss), "tokens": n}
