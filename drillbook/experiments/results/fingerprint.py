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

The tiny run is the task's (:attr:`drillbook.train.tasks.registry.Task.tiny_run`): a language
model takes the trainer's own step
(:func:`drillbook.train.tasks.language_model.trainer_step`: forward, the head's loss and
regulariser, AR/TAR, clipping, the optimiser); a translation model its loss
(``model.loss``), clipping and the trainer's optimiser (Adam or SGD).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

from ...train.tasks import TinyRun, task_of

__all__ = ["FINGERPRINT_VERSION", "fingerprint_of", "training_fingerprint"]

#: bumped when what the fingerprint runs changes (a different tiny run is another digest)
FINGERPRINT_VERSION = 1

#: the tiny run: vocabulary, batch, window length (positions per sentence), steps
_TINY = TinyRun(vocab=40, batch=3, length=5, steps=3)

_CACHE: dict[str, dict[str, Any]] = {}


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
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.set_default_dtype(torch.float64)
        try:
            losses, model = task_of(config).tiny_run(config, _TINY)
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
