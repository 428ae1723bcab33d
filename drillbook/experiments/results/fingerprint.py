"""A numerical fingerprint of the code that trains a row.

Two result files of one table are comparable when the same arithmetic trained them: the
same model, head, loss, regulariser, dropout draws and optimiser update. The commit does not
say it (most commits change no number) and neither does the config (it names no code). The
fingerprint does: a tiny fixed run of the row's own config (its model and head at a few
units, on fixed random word ids, in float64 on the CPU, seeded) takes three training steps
through the package's own step, and its losses and a checksum of the parameters after them,
rounded to 10 significant digits, are hashed together with the loss path the head takes
(fused or plain). A refactor that changes no number keeps the digest; one that changes an
initialisation, a dropout draw, an equation or the loss path changes it. float64 and the
rounding keep it the same on machines whose kernels sum in another order (those differ near
the 16th digit, not the 10th).

A language model takes the trainer's own step
(:func:`drillbook.experiments.bench.step.trainer_step`: forward, the head's loss and
regulariser, AR/TAR, clipping, the optimiser); a translation model its loss
(``model.loss``), clipping and the trainer's optimiser (Adam or SGD).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

from ...configs import apply_overrides
from ...heads import HEADS

__all__ = ["FINGERPRINT_VERSION", "fingerprint_of", "training_fingerprint"]

#: bumped when what the fingerprint runs changes (a different tiny run is another digest)
FINGERPRINT_VERSION = 1

#: the tiny run: vocabulary, batch, window length (positions per sentence), steps
_VOCAB, _BATCH, _LENGTH, _STEPS = 40, 3, 5, 3

_CACHE: dict[str, dict[str, Any]] = {}


def _tiny(config) -> Any:
    """The row's config at a few units (every other setting, the head's options
    included, as the row has them)."""
    if config.task == "translation":
        if config.model.arch == "transformer":
            return apply_overrides(config, ["model.d_model=8", "model.nhead=2",
                                            "model.d_ff=16", "model.layers=1"])
        return apply_overrides(config, ["model.emb_size=8", "model.hidden=8"])
    sets = ["model.emsize=8", "model.nhid=12", "model.d_ff=16", "model.nhead=2"]
    if config.model.d_out is not None:
        sets.append("model.d_out=8")
    return apply_overrides(config, sets)


def _lm_run(config) -> tuple[list[float], Any]:
    from contextlib import nullcontext

    from ...models import build_model
    from ..bench.step import start_optimizer, trainer_step

    model = build_model(config, _VOCAB).train()
    optimizer = start_optimizer(model, config.train)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, _VOCAB, (_LENGTH + 1, _BATCH), generator=gen)
    losses = [float(trainer_step(model, optimizer, ids[:-1], ids[1:], config.train,
                                 nullcontext)) for _ in range(_STEPS)]
    return losses, model


def _translation_run(config) -> tuple[list[float], Any]:
    from ...models import build_translation_model

    gen = torch.Generator().manual_seed(0)
    table = None  # a head that regresses onto word vectors (vMF) gets 50-d unit ones
    if not HEADS[config.head.kind].is_distribution:
        table = torch.nn.functional.normalize(torch.randn(_VOCAB, 50, generator=gen), dim=-1)
    model = build_translation_model(config, _VOCAB, _VOCAB, pad_id=0,
                                    target_embeddings=table)
    model.train()
    t = config.train
    if getattr(t, "optimizer", "adam") == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=t.lr)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=t.lr)
    src = torch.randint(4, _VOCAB, (_LENGTH, _BATCH), generator=gen)
    tgt = torch.randint(4, _VOCAB, (_LENGTH + 1, _BATCH), generator=gen)
    losses = []
    for _ in range(_STEPS):
        optimizer.zero_grad()
        loss = model.loss(src, torch.full((_BATCH,), _LENGTH), tgt[:-1], tgt[1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, model


def _loss_path(head) -> str:
    """Which loss the head takes on a CPU in float32: ``fused`` or ``plain``."""
    own = head.has_logits and head.factors_describe_logits()
    if not (own or head.is_mixture):
        return "plain"
    x = torch.zeros(1, dtype=torch.float32)
    return "fused" if head._fuses(x, x) else "plain"


def _digits(x: float) -> str:
    return f"{x:.10g}"


def training_fingerprint(config) -> dict[str, Any]:
    """The fingerprint of the code that trains ``config`` (any seed): ``digest`` (16 hex
    digits), the tiny run's rounded ``losses``, the ``loss_path`` and the ``version``.
    Computed once per config (its seed aside) in a process."""
    key = config.copy()
    key.train.seed = 0
    key = json.dumps(key.to_dict(), sort_keys=True)
    if key in _CACHE:
        return dict(_CACHE[key])
    tiny = _tiny(config)
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.set_default_dtype(torch.float64)
        try:
            run = _translation_run if config.task == "translation" else _lm_run
            losses, model = run(tiny)
        finally:
            torch.set_default_dtype(dtype)
            torch.set_num_threads(threads)
    with torch.no_grad():
        params = list(model.parameters())
        squares = sum(float(p.double().pow(2).sum()) for p in params)
        sizes = sum(float(p.double().abs().sum()) for p in params)
    path = _loss_path(model.head)
    material = {"version": FINGERPRINT_VERSION, "losses": [_digits(v) for v in losses],
                "squares": _digits(squares), "abs": _digits(sizes), "loss_path": path}
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]
    out = {"digest": digest, "losses": material["losses"], "loss_path": path,
           "version": FINGERPRINT_VERSION}
    _CACHE[key] = out
    return dict(out)


def fingerprint_of(doc: dict[str, Any]) -> str | None:
    """The digest a result document records (None: written before fingerprints)."""
    block = doc.get("fingerprint")
    return block.get("digest") if isinstance(block, dict) else None
