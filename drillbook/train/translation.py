"""Train and evaluate a translation model: the task's part of the one training loop.

Its run folder is the language model's (:mod:`drillbook.train.run_folder`); ``log.jsonl`` adds
BLEU and seconds per step, ``best.pt`` holds the weights with the best validation BLEU, and
both checkpoints carry the vocabularies, so a run can translate on its own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..configs import NMTConfig
from ..errors import ConfigError
from ..heads import HEADS, OutputHead
from ..models import build_translation_model
from ..nmt.batching import TranslationBatch, make_batches
from ..nmt.bleu import corpus_bleu, multi30k_bleu
from ..nmt.corpus import ParallelCorpus, load_parallel
from ..nmt.decode import translate_pairs
from ..nmt.model import TranslationModel
from ..nmt.vocab import SPECIALS, NMTVocab
from ..runtime import check_model_fits, resolve_device
from .checkpoint import NMT_CHECKPOINT, NMT_WEIGHTS, load_checkpoint, load_weights
from .loop import TrainingLoop
from .optimizers import make_optimizer
from .run_files import CONFIG, LoadedRun, checkpoint_path, read_run_config
from .step import StepLoss

__all__ = ["NMTTrainer", "TranslationVocabs", "build_vocabs", "check_negative_sampling",
           "evaluate_translation_run", "label_smoothed_loss", "load_translation_data",
           "load_translation_run", "sampled_softmax_loss", "translation_loss",
           "warmup_scale"]


class TranslationVocabs(NamedTuple):
    """The two vocabularies of a translation run (a loaded run's ``data``)."""

    src: NMTVocab
    tgt: NMTVocab


def build_vocabs(pairs, *, min_freq: int, shared: bool = False) -> TranslationVocabs:
    """The source and target vocabularies of training ``pairs``; with ``shared`` one
    vocabulary of both sides' words (the same object twice)."""
    if shared:
        both = NMTVocab.build([[*s, *g] for s, g in pairs], min_freq=min_freq)
        return TranslationVocabs(both, both)
    return TranslationVocabs(NMTVocab.build([s for s, _ in pairs], min_freq=min_freq),
                             NMTVocab.build([g for _, g in pairs], min_freq=min_freq))


def warmup_scale(step: int, warmup: int | None) -> float:
    """The factor on the peak learning rate at update ``step`` (from 1) of the
    inverse-square-root schedule (Vaswani et al. 2017, "Noam" with its constant folded into
    the peak): ``step / warmup`` while warming up, ``sqrt(warmup / step)`` after; 1 without
    warm-up."""
    if warmup is None:
        return 1.0
    return min(step / warmup, math.sqrt(warmup / step))


def label_smoothed_loss(head: OutputHead, features: Tensor, target: Tensor, *,
                        smoothing: float, ignore_index: int) -> Tensor:
    """Cross-entropy against a target distribution that gives ``1 - smoothing`` to the
    right word and ``smoothing`` spread evenly over all ``V`` words (the right one
    included): ``(1 - smoothing) * NLL + smoothing * mean_w(-log p(w))``, averaged over
    the positions whose target is not ``ignore_index``."""
    keep = target != ignore_index
    logp = head.log_prob(features[keep]).float()  # (N, V)
    nll = -logp.gather(-1, target[keep][:, None]).squeeze(-1)
    return ((1.0 - smoothing) * nll - smoothing * logp.mean(-1)).mean()


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


def translation_loss(model: TranslationModel, batch: TranslationBatch, *,
                     negative_sampling: float | None = None, exclude: tuple[int, ...] = (),
                     generator: torch.Generator | None = None,
                     label_smoothing: float = 0.0) -> Tensor:
    """The training loss of one batch, as :class:`NMTTrainer` computes it.

    With ``negative_sampling=None`` the head's own loss over the whole vocabulary
    (``model.loss``); otherwise :func:`sampled_softmax_loss` with ``percent =
    negative_sampling``, never sampling the ids in ``exclude`` (the trainer excludes
    ``<pad>`` and ``<bos>``). With ``label_smoothing > 0``,
    :func:`label_smoothed_loss`. The batch must already be on the model's device.

    Returns:
        the mean loss per target token, a scalar.

    Raises:
        ConfigError: negative sampling with a head that has no per-word logits.
    """
    features = model(batch.src, batch.src_lengths, batch.tgt_in)  # (T, B, d)
    if label_smoothing:
        return label_smoothed_loss(model.head, features, batch.tgt_out,
                                   smoothing=label_smoothing, ignore_index=model.pad_id)
    if negative_sampling is None:  # what model.loss computes, through model's own call
        return model.head.loss(features, batch.tgt_out, ignore_index=model.pad_id)
    loss, _ = sampled_softmax_loss(model.head, features, batch.tgt_out,
                                   percent=negative_sampling, ignore_index=model.pad_id,
                                   exclude=exclude, generator=generator)
    return loss


def _check_words(pairs: list, vocabs: tuple[NMTVocab, NMTVocab], min_freq: int) -> None:
    """Refuse vocabularies that hold no word (every word ``<unk>``: nothing to learn),
    before anything is written, naming the ``data.min_freq`` that keeps some.

    Raises:
        ConfigError: ``data.min_freq=100 keeps no word of the target side ...``.
    """
    for side, vocab in enumerate(vocabs):
        if len(vocab) > len(SPECIALS):
            continue
        counts = Counter(word for pair in pairs for word in pair[side])
        most = max(counts.values(), default=0)
        fix = (f"lower data.min_freq to at most {most} (its most frequent word's count)"
               if most else "give training sentences that have words")
        raise ConfigError(f"data.min_freq={min_freq} keeps no word of the "
                          f"{('source', 'target')[side]} side's {len(pairs):,} training "
                          f"sentences: every word would be <unk> and the model could learn "
                          f"nothing; {fix}")


class NMTTrainer(TrainingLoop):
    """Train a :class:`~drillbook.configs.translation.NMTConfig` into a run folder.

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
        corpus: an already loaded :class:`~drillbook.nmt.corpus.ParallelCorpus`.
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
    config_type = NMTConfig
    token_weighted = True
    plateau_metric, higher_is_better = "val_bleu", True  # the stopping rule reads BLEU
    metric_line = "val BLEU {val_bleu:.2f}"

    def __init__(self, config: NMTConfig, run_dir: str | Path, *, device: str | None = None,
                 corpus=None, target_vectors: tuple[list[str], Any] | None = None,
                 resume: bool = False, progress: bool | None = None) -> None:
        self.check_config(config)  # before its head is read
        head_cls = HEADS.get(config.head.kind)  # an unknown kind: Seq2Seq names the choices
        if head_cls is not None and config.train.negative_sampling is not None:
            check_negative_sampling(head_cls)  # before anything is written or loaded
        self._given = (corpus, target_vectors)
        super().__init__(config, run_dir, device=device, resume=resume, progress=progress)

    def build(self, state: dict | None) -> None:
        corpus, target_vectors = self._given
        config = self.config
        d, t = config.data, config.train
        self.corpus = corpus if corpus is not None else load_translation_data(config)
        self.train_pairs = self.corpus.train[: d.max_train_pairs]
        self.src_vocab, self.tgt_vocab = build_vocabs(
            self.train_pairs, min_freq=d.min_freq, shared=config.model.share_vocab)
        _check_words(self.train_pairs, (self.src_vocab, self.tgt_vocab), d.min_freq)
        continuous = not HEADS[config.head.kind].is_distribution  # vMF: a frozen table
        if not continuous:  # (a vMF model needs its table to be built)
            check_model_fits(lambda: build_translation_model(
                config, len(self.src_vocab), len(self.tgt_vocab),
                pad_id=self.tgt_vocab.pad_id), self.device, f"config {config.name!r}")
        self.model = build_translation_model(
            config, len(self.src_vocab), len(self.tgt_vocab), pad_id=self.tgt_vocab.pad_id,
            target_embeddings=self._target_table(target_vectors) if continuous else None,
        ).to(self.device)
        self.optimizer = make_optimizer("adam", self.model.parameters(), t.lr, 0.0,
                                        betas=(0.9, t.adam_beta2))
        self.sampler = torch.Generator().manual_seed(t.seed + 1)  # negative sampling
        self.position = 0
        self.best_bleu = -math.inf
        self._epoch_list: tuple[int, list] | None = None

    # ------------------------------------------------------------- setup
    def _target_table(self, target_vectors) -> Tensor:
        """The frozen target vectors of a vMF head: the ones given, or those
        ``data.target_embeddings`` names (the config has checked that it names some, and
        GloVe only for English)."""
        from ..nmt.embeddings import load_glove_50d, target_embeddings, train_word2vec

        if target_vectors is not None:
            words, vectors = target_vectors
        elif self.config.data.target_embeddings == "word2vec":
            words, vectors = train_word2vec([g for _, g in self.train_pairs], dim=100,
                                            seed=self.config.train.seed, epochs=10,
                                            min_count=1)
        else:
            words, vectors = load_glove_50d()
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
    def task_state(self) -> dict[str, Any]:
        return {"position": self.position, "best_bleu": self.best_bleu,
                "src_vocab": self.src_vocab.state_dict(),
                "tgt_vocab": self.tgt_vocab.state_dict()}

    def load_task_state(self, state: dict[str, Any]) -> None:
        self.position, self.best_bleu = state["position"], state["best_bleu"]

    def process_state(self) -> dict[str, Any]:
        return {"rng_sampler": self.sampler.get_state()}  # the negative-sampling draws

    def load_process_state(self, state: dict[str, Any]) -> None:
        self.sampler.set_state(state["rng_sampler"].cpu())

    # ------------------------------------------------------------- training
    def batches(self) -> Iterator[TranslationBatch]:
        """The epoch's batches from ``position`` on; each process of a distributed
        run takes its consecutive sentences of every batch (a batch with fewer sentences
        than processes is trained whole by every process)."""
        for batch in self._epoch_batch_list()[self.position:]:
            self.position += 1  # done once handed out: a checkpoint after it resumes after
            if self.world_size > 1 and batch.batch_size >= self.world_size:
                batch = self.split(batch, self.world_size)[self.rank]
            yield batch

    def epoch_progress(self) -> tuple[int, int]:
        return len(self._epoch_batch_list()), self.position

    def next_epoch(self) -> None:
        self.position = 0

    def lr_scale(self, batch: TranslationBatch) -> float:
        """The warm-up schedule's factor for the update being taken (:func:`warmup_scale`;
        1 without ``train.warmup``): a function of the step alone, so a resumed run
        continues it exactly."""
        return warmup_scale(self.step + 1, self.config.train.warmup)

    def tokens(self, batch: TranslationBatch) -> int:
        return int((batch.tgt_out != self.tgt_vocab.pad_id).sum())

    def split(self, batch: TranslationBatch, parts: int) -> list[TranslationBatch]:
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
                                generator=self.sampler,
                                label_smoothing=self.config.train.label_smoothing)

    def loss(self, piece: TranslationBatch, part: int) -> StepLoss:
        loss = self._loss(piece)
        return StepLoss(loss, loss)

    def best(self) -> dict[str, float]:
        return {"best_val_bleu": self.best_bleu}

    def end_epoch(self, seconds: float) -> dict:
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
            self.events.append("saved best")
        _, steps, _ = self.epoch_timing
        return {"epoch": self.epoch, "step": self.step,
                "train_loss": self.epoch_loss / max(self.epoch_tokens, 1),
                "val_loss": val_loss, "val_bleu": bleu, "best_val_bleu": self.best_bleu,
                "seconds_per_step": seconds / steps if steps else None,
                "epoch_seconds": seconds, "elapsed_seconds": self.elapsed,
                "tokens": self.epoch_tokens, "lr": t.lr, "clip": t.clip}

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


def load_translation_data(config: NMTConfig) -> ParallelCorpus:
    """The sentence pairs a translation config trains on, its missing files downloaded
    first (checksum-verified; :func:`~drillbook.nmt.corpus.load_parallel`)."""
    return load_parallel(config.data.src, config.data.tgt, download=True)


def load_translation_run(run_dir: str | Path, config: NMTConfig | None = None, *,
                         which: str = "best", device: str | None = None,
                         corpus: ParallelCorpus | None = None) -> LoadedRun:
    """Rebuild a trained translation model from its run folder: ``(config, model,
    TranslationVocabs(src, tgt))`` (the vocabularies come from the checkpoint; ``corpus``
    is not needed).

    Raises:
        RunFolderError: no or an invalid ``config.json``.
        CheckpointError: the checkpoint is missing, unreadable, or not a translation one.
    """
    run_dir = Path(run_dir)
    config = config if config is not None else read_run_config(run_dir, NMTConfig)
    device = resolve_device(device)
    path = checkpoint_path(run_dir, which)
    state = load_checkpoint(path, device, formats=(NMT_WEIGHTS, NMT_CHECKPOINT))
    vocabs = TranslationVocabs(NMTVocab.from_state_dict(state["src_vocab"]),
                               NMTVocab.from_state_dict(state["tgt_vocab"]))
    model = build_translation_model(  # a vMF head's table is in the checkpoint
        config, len(vocabs.src), len(vocabs.tgt), pad_id=vocabs.tgt.pad_id,
        target_embeddings=state["model"].get("head.target_embeddings")).to(device)
    load_weights(model, state["model"], checkpoint=path, config=run_dir / CONFIG)
    return LoadedRun(config, model.eval(), vocabs)


def evaluate_translation_run(run: LoadedRun, split: str, *, data: ParallelCorpus,
                             max_items: int | None = None, beam: int = 1) -> dict[str, Any]:
    """The reported BLEU of a loaded run on a split of ``data`` (its first ``max_items``
    sentences, if given), decoded greedily or with a ``beam``: ``bleu``,
    ``bleu_signature`` (sacreBLEU's, :func:`~drillbook.nmt.bleu.multi30k_bleu`),
    ``beam`` and ``sentences``."""
    src_vocab, tgt_vocab = run.data
    pairs = data.split(split)[:max_items]
    hyps = translate_pairs(run.model, pairs, src_vocab, tgt_vocab, beam=beam,
                           max_len=run.config.train.max_len,
                           device=next(run.model.parameters()).device)
    bleu = multi30k_bleu(hyps, split=split, lang=run.config.data.tgt, download=True)
    return {"beam": beam, "bleu": bleu.score, "bleu_signature": bleu.signature,
            "sentences": len(pairs)}
