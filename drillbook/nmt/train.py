"""Train, evaluate and run a translation model; the run folder mirrors the LM trainer's.

A run folder holds ``config.json``, ``log.jsonl`` (one line per epoch: losses, BLEU,
seconds per step), ``last.pt`` (weights, optimiser, RNG, epoch and position: a stopped
run resumes where it was) and ``best.pt`` (the weights with the best validation BLEU).
Both checkpoints carry the vocabularies, so a run can translate on its own. The folder
follows the rules of :mod:`drillbook.train.runs` (a lock, checks before any write,
resumable ``train.lr``/``train.clip``, a log that matches the checkpoint, finite
checkpoints only); the training itself is :class:`~drillbook.train.loop.TrainingLoop`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import ConfigError
from ..heads import HEADS, OutputHead
from ..runtime import resolve_device
from ..train.checkpoint import NMT_CHECKPOINT, NMT_WEIGHTS, load_checkpoint
from ..train.loop import StepLoss, TrainingLoop
from ..train.runs import checkpoint_path, read_run_config
from .bleu import corpus_bleu
from .config import NMTConfig
from .data import NMTVocab, TranslationBatch, load_parallel, make_batches
from .decode import beam_search, greedy_decode
from .model import Seq2Seq

__all__ = ["NMTTrainer", "load_nmt_run", "sampled_softmax_loss", "translate_pairs",
           "translation_loss"]


def check_negative_sampling(head: OutputHead | type[OutputHead]) -> None:
    """Raise a ConfigError unless ``head`` (a head or a head class) scores each word with
    one logit (``has_logits``), which is what sampled-softmax training samples from."""
    if not head.has_logits:
        with_logits = sorted(kind for kind, cls in HEADS.items() if cls.has_logits)
        raise ConfigError(f"negative sampling scores a sample of the words with one softmax, "
                          f"and the {head.kind!r} head has no per-word logits; unset "
                          f"train.negative_sampling or use one of {with_logits}")


def sampled_softmax_loss(head: OutputHead, features: Tensor, target: Tensor, *,
                         percent: float, ignore_index: int, exclude: tuple[int, ...] = (),
                         generator: torch.Generator | None = None) -> tuple[Tensor, int]:
    """Cross-entropy over a sampled set of candidate words (joint-embedding paper §3.2).

    The candidates are every distinct target word of the batch (all positives, always)
    plus words drawn uniformly without replacement from the rest of the vocabulary, up
    to ``percent`` % of ``V`` in total (more if the positives alone exceed that). Only
    the candidates' scores are computed (``head.logits_subset``).

    Returns:
        the mean loss over the kept positions, and the number of candidates.

    Raises:
        ConfigError: a head without per-word logits (``has_logits`` false: MoS, DOC, vMF).
    """
    check_negative_sampling(head)
    keep = target != ignore_index
    flat_t = target[keep]
    feats = features[keep]
    positives, index = torch.unique(flat_t, return_inverse=True)
    vocab = head.vocab_size
    budget = max(int(vocab * percent / 100.0), positives.numel())
    weights = torch.ones(vocab, device=target.device)
    weights[positives] = 0.0
    if exclude:
        weights[list(exclude)] = 0.0
    n_neg = min(budget - positives.numel(), int((weights > 0).sum()))
    if n_neg > 0:
        negatives = torch.multinomial(weights.cpu(), n_neg, replacement=False,
                                      generator=generator).to(target.device)
        candidates = torch.cat([positives, negatives])
    else:
        candidates = positives
    logits = head.logits_subset(feats, candidates)
    return torch.nn.functional.cross_entropy(logits, index), int(candidates.numel())


def translation_loss(model: Seq2Seq, batch: TranslationBatch, *,
                     negative_sampling: float | None = None, exclude: tuple[int, ...] = (),
                     generator: torch.Generator | None = None) -> Tensor:
    """The training loss of one batch, as :class:`NMTTrainer` computes it.

    With ``negative_sampling=None`` the head's own loss over the whole vocabulary
    (``model.loss``); otherwise :func:`sampled_softmax_loss` with ``percent =
    negative_sampling``, never sampling the ids in ``exclude`` (the trainer excludes
    ``<pad>`` and ``<bos>``). The batch must already be on the model's device.

    Returns:
        the mean loss per target token, a scalar.

    Raises:
        ConfigError: negative sampling with a head that has no per-word logits.
    """
    features = model(batch.src, batch.src_lengths, batch.tgt_in)  # (T, B, d)
    if negative_sampling is None:  # what model.loss computes, through model's own call
        return model.head.loss(features, batch.tgt_out, ignore_index=model.pad_id)
    loss, _ = sampled_softmax_loss(model.head, features, batch.tgt_out,
                                   percent=negative_sampling, ignore_index=model.pad_id,
                                   exclude=exclude, generator=generator)
    return loss


class NMTTrainer(TrainingLoop):
    """Train a :class:`~drillbook.nmt.config.NMTConfig` into a run folder.

    The task's part of :class:`~drillbook.train.loop.TrainingLoop`: shuffled batches of
    sentence pairs (a new order each epoch, from ``train.seed + epoch``), the loss
    :func:`translation_loss`, and validation loss and greedy BLEU at the end of each
    epoch (``best.pt``: the best BLEU). With ``train.accum_steps = k`` each batch is cut
    into ``k`` pieces of whole sentences, each piece's loss weighted by its share of the
    batch's target tokens.

    Args:
        config: the resolved config.
        run_dir: the run folder.
        device: default :func:`~drillbook.runtime.default_device`.
        corpus: an already loaded :class:`~drillbook.nmt.data.ParallelCorpus`.
        target_vectors: ``(words, vectors)`` pretrained target embeddings to use instead
            of loading ``config.data.target_embeddings`` (tests, notebooks).
        resume: continue from ``run_dir/last.pt``.
        progress: ``None`` (default): a tqdm bar only on a terminal, and one line per
            epoch on stderr; ``True``: a bar always; ``False``: quiet.

    ``last.pt`` holds, besides what the loop keeps (weights, optimiser, epoch, step, CPU
    and CUDA RNG, scaler): the position in the epoch's batches, the negative-sampling
    generator (``rng_sampler``), the best BLEU and both vocabularies.

    Like the language-model trainer, it holds the run folder's lock from construction
    until :meth:`fit` returns (:meth:`~drillbook.train.loop.TrainingLoop.close`
    gives it up earlier).
    """

    checkpoint_format = NMT_CHECKPOINT
    token_weighted = True

    def __init__(self, config: NMTConfig, run_dir: str | Path, *, device: str | None = None,
                 corpus=None, target_vectors: tuple[list[str], Any] | None = None,
                 resume: bool = False, progress: bool | None = None) -> None:
        head_cls = HEADS.get(config.head.kind)  # an unknown kind: Seq2Seq names the choices
        if head_cls is not None and config.train.negative_sampling is not None:
            check_negative_sampling(head_cls)  # before anything is written or loaded
        self._open(config, run_dir, device=device, resume=resume, progress=progress,
                   build_args=(corpus, target_vectors))

    def _build(self, state: dict | None, corpus, target_vectors) -> None:
        config = self.config
        d, t = config.data, config.train
        self.corpus = corpus if corpus is not None else load_parallel(d.src, d.tgt,
                                                                      download=True)
        self.train_pairs = self.corpus.train[: d.max_train_pairs]
        self.src_vocab = NMTVocab.build([s for s, _ in self.train_pairs], min_freq=d.min_freq)
        self.tgt_vocab = NMTVocab.build([g for _, g in self.train_pairs], min_freq=d.min_freq)
        options = dict(config.head.options)
        head_cls = HEADS.get(config.head.kind)
        if head_cls is not None and not head_cls.is_distribution:  # vMF: a frozen table
            options["target_embeddings"] = self._target_table(target_vectors)
        self.model = Seq2Seq(len(self.src_vocab), len(self.tgt_vocab),
                             emb_size=config.model.emb_size, hidden=config.model.hidden,
                             dec_layers=config.model.dec_layers, dropout=config.model.dropout,
                             head=config.head.kind, head_options=options,
                             input_from_targets=config.model.input_from_targets,
                             pad_id=self.tgt_vocab.pad_id).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=t.lr)
        self.sampler = torch.Generator().manual_seed(t.seed + 1)  # negative sampling
        self.position = 0
        self.best_bleu = -math.inf
        self._epoch_list: tuple[int, list] | None = None

    # ------------------------------------------------------------- setup
    def _target_table(self, target_vectors) -> Tensor:
        from .embeddings import load_glove_50d, target_embeddings, train_word2vec

        source = self.config.data.target_embeddings
        if target_vectors is not None:
            words, vectors = target_vectors
        elif source == "glove-50d":
            if self.config.data.tgt != "en":
                raise ConfigError(f"GloVe-50d is English; the target language is "
                                  f"{self.config.data.tgt!r}: use "
                                  f"data.target_embeddings=word2vec")
            words, vectors = load_glove_50d()
        elif source == "word2vec":
            words, vectors = train_word2vec([g for _, g in self.train_pairs], dim=100,
                                            seed=self.config.train.seed, epochs=10,
                                            min_count=1)
        else:
            raise ConfigError(f"a vmf head needs target word vectors: set "
                              f"data.target_embeddings to 'glove-50d' or 'word2vec' (got "
                              f"{source!r})")
        table, self.coverage = target_embeddings(self.tgt_vocab, words, vectors)
        return table

    def _batches(self, epoch: int) -> list:
        t = self.config.train
        batches = make_batches(self.train_pairs, self.src_vocab, self.tgt_vocab,
                               batch_size=t.batch_size, shuffle=True, seed=t.seed + epoch)
        return batches[: t.max_batches_per_epoch]

    def _epoch_batch_list(self) -> list:
        """The current epoch's batches (made once per epoch)."""
        if self._epoch_list is None or self._epoch_list[0] != self.epoch:
            self._epoch_list = (self.epoch, self._batches(self.epoch))
        return self._epoch_list[1]

    # ------------------------------------------------------------- checkpoints
    def _generators(self) -> dict[str, torch.Generator]:
        return {"sampler": self.sampler}

    def _task_state(self) -> dict[str, Any]:
        return {"position": self.position, "best_bleu": self.best_bleu,
                "src_vocab": self.src_vocab.state_dict(),
                "tgt_vocab": self.tgt_vocab.state_dict()}

    def _restore_task(self, state: dict[str, Any]) -> None:
        self.position, self.best_bleu = state["position"], state["best_bleu"]

    # ------------------------------------------------------------- training
    def _epoch_batches(self) -> Iterator[TranslationBatch]:
        batches = self._epoch_batch_list()[self.position:]
        if self.world_size == 1:
            return iter(batches)
        # each process: its consecutive sentences of every batch (a batch with fewer
        # sentences than processes is trained whole by every process)
        return (b if b.batch_size < self.world_size
                else self._micro_batches(b, self.world_size)[self.rank] for b in batches)

    def _epoch_progress(self) -> tuple[int, int]:
        return len(self._epoch_batch_list()), self.position

    def _batch_done(self, batch) -> None:
        self.position += 1

    def _new_epoch(self) -> None:
        self.position = 0

    def _batch_tokens(self, batch: TranslationBatch) -> int:
        return int((batch.tgt_out != self.tgt_vocab.pad_id).sum())

    def _micro_batches(self, batch: TranslationBatch, parts: int) -> list[TranslationBatch]:
        """``parts`` pieces of whole sentences (consecutive columns), each trimmed to its
        own longest source and target."""
        pieces = []
        for cols in torch.arange(batch.batch_size).tensor_split(parts):
            if cols.numel() == 0:
                continue
            s_len, t_len = int(batch.src_lengths[cols].max()), int(batch.tgt_lengths[cols].max())
            pieces.append(TranslationBatch(
                src=batch.src[:s_len, cols], src_lengths=batch.src_lengths[cols],
                tgt_in=batch.tgt_in[:t_len, cols], tgt_out=batch.tgt_out[:t_len, cols],
                tgt_lengths=batch.tgt_lengths[cols], pair_ids=batch.pair_ids[cols]))
        return pieces

    def _loss(self, batch: TranslationBatch) -> Tensor:
        """The training loss of a batch (or a piece of one), a scalar."""
        return translation_loss(self.forward_model, batch.to(self.device),
                                negative_sampling=self.config.train.negative_sampling,
                                exclude=(self.tgt_vocab.pad_id, self.tgt_vocab.bos_id),
                                generator=self.sampler)

    def _micro_loss(self, micro: TranslationBatch, part: int) -> StepLoss:
        loss = self._loss(micro)
        share = 1.0
        if self.config.train.accum_steps > 1:  # of this process's share of the batch
            share = self._batch_tokens(micro) / self._rank_tokens
        return StepLoss(loss, loss, share)

    def fit(self, max_epochs: int | None = None, max_minutes: float | None = None) -> dict:
        """Train to ``train.epochs`` (or the limits given); returns the last log record
        (``{"reason": "budget", "epoch": ...}`` when the time budget stopped it, ``{}``
        when no epoch ended).

        Raises:
            TrainingDiverged: a non-finite loss, or non-finite weights after a step;
                ``last.pt`` keeps the last finite state.
        """
        self.folder.acquire()
        try:
            reason, record = self._run(max_epochs, max_minutes, None)
        finally:
            self.folder.release()
        if reason == "budget":
            return {"reason": "budget", "epoch": self.epoch - 1}
        return record or {}

    def _end_epoch(self, seconds: float) -> dict:
        """Validation loss and greedy BLEU; ``best.pt`` when the BLEU improved."""
        t = self.config.train
        valid = self.corpus.valid[: t.max_eval_pairs]
        val_loss = self.validation_loss(valid)
        bleu = self.bleu(valid)
        if bleu > self.best_bleu:
            self.best_bleu = bleu
            self.folder.save_best({"format": NMT_WEIGHTS, "model": self.model.state_dict(),
                                   "epoch": self.epoch, "val_bleu": bleu,
                                   "src_vocab": self.src_vocab.state_dict(),
                                   "tgt_vocab": self.tgt_vocab.state_dict()})
            self._events.append("saved best")
        _, steps, _ = self.epoch_timing
        return {"epoch": self.epoch, "step": self.step,
                "train_loss": self.epoch_loss / max(self.epoch_tokens, 1),
                "val_loss": val_loss, "val_bleu": bleu, "best_val_bleu": self.best_bleu,
                "seconds_per_step": seconds / steps if steps else None,
                "epoch_seconds": seconds, "elapsed_seconds": self.elapsed,
                "tokens": self.epoch_tokens, "lr": t.lr, "clip": t.clip}

    def _summary(self, record: dict[str, Any]) -> str:
        return f"val BLEU {record['val_bleu']:.2f}"

    # ------------------------------------------------------------- evaluation
    @torch.no_grad()
    def validation_loss(self, pairs) -> float:
        """Mean loss per target token (the head's own loss: NLL or the vMF loss)."""
        self.model.eval()
        total, count = 0.0, 0
        for batch in make_batches(pairs, self.src_vocab, self.tgt_vocab,
                                  batch_size=self.config.train.batch_size, shuffle=False):
            loss = self.model.loss(batch.src.to(self.device), batch.src_lengths.to(self.device),
                                   batch.tgt_in.to(self.device), batch.tgt_out.to(self.device))
            tokens = int((batch.tgt_out != self.tgt_vocab.pad_id).sum())
            total += loss.item() * tokens
            count += tokens
        return total / max(count, 1)

    def bleu(self, pairs, beam: int = 1) -> float:
        hyps = translate_pairs(self.model, pairs, self.src_vocab, self.tgt_vocab, beam=beam,
                               max_len=self.config.train.max_len, device=self.device)
        return corpus_bleu(hyps, [tgt for _, tgt in pairs])


@torch.no_grad()
def translate_pairs(model: Seq2Seq, pairs, src_vocab: NMTVocab, tgt_vocab: NMTVocab, *,
                    beam: int = 1, max_len: int = 60, batch_size: int = 64,
                    device: torch.device | str = "cpu") -> list[list[str]]:
    """Translate the source side of ``pairs``, in order (a target side may be empty)."""
    pairs = [(src, tgt or ["."]) for src, tgt in pairs]
    out: list[list[str]] = [[] for _ in pairs]
    decode = dict(bos=tgt_vocab.bos_id, eos=tgt_vocab.eos_id, max_len=max_len)
    for batch in make_batches(pairs, src_vocab, tgt_vocab, batch_size=batch_size,
                              shuffle=False):
        src, lengths = batch.src.to(device), batch.src_lengths.to(device)
        ids = (greedy_decode(model, src, lengths, **decode) if beam == 1
               else beam_search(model, src, lengths, beam=beam, **decode))
        for i, hyp in zip(batch.pair_ids.tolist(), ids, strict=True):
            out[i] = tgt_vocab.decode(hyp)
    return out


def load_nmt_run(run_dir: str | Path, *, which: str = "best", device: str | None = None
                 ) -> tuple[NMTConfig, Seq2Seq, NMTVocab, NMTVocab]:
    """Rebuild a trained translation model and its vocabularies from a run folder.

    Raises:
        RunFolderError: no or an invalid ``config.json``.
        CheckpointError: the checkpoint is missing, unreadable, or not a translation one.
    """
    run_dir = Path(run_dir)
    config = read_run_config(run_dir, NMTConfig)
    device = resolve_device(device)
    path = checkpoint_path(run_dir, which)
    state = load_checkpoint(path, device, formats=(NMT_WEIGHTS, NMT_CHECKPOINT))
    src_vocab = NMTVocab.from_state_dict(state["src_vocab"])
    tgt_vocab = NMTVocab.from_state_dict(state["tgt_vocab"])
    options = dict(config.head.options)
    head_cls = HEADS.get(config.head.kind)
    if head_cls is not None and not head_cls.is_distribution:  # its table: in the checkpoint
        options["target_embeddings"] = state["model"]["head.target_embeddings"]
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), emb_size=config.model.emb_size,
                    hidden=config.model.hidden, dec_layers=config.model.dec_layers,
                    dropout=config.model.dropout, head=config.head.kind, head_options=options,
                    input_from_targets=config.model.input_from_targets,
                    pad_id=tgt_vocab.pad_id).to(device)
    model.load_state_dict(state["model"])
    return config, model.eval(), src_vocab, tgt_vocab
