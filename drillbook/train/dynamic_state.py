"""The state file of a resumable dynamic evaluation, and the reader's place in the stream.

:func:`drillbook.train.dynamic.dynamic_evaluate` keeps its :class:`Progress` (the position in
the stream, the accumulated loss and token count, the carried state) and writes it, with the
adapted and the trained weights, the gradient statistics and the random-number state, to a
state file (:class:`StateFile`). A state file is resumed only on the stream, the weights and
the settings it was written with (:func:`resumed_state` refuses any other).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import CheckpointError
from .checkpoint import LM_DYNAMIC_EVAL, load_checkpoint, rng_state, save_atomic, set_rng_state
from .dynamic_update import DynamicUpdate, GradientStats

__all__ = ["Progress", "StateFile", "evaluation_settings", "resumed_state"]


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


def evaluation_settings(model: nn.Module, data: Tensor, *, lr: float, lamb: float,
                        eps: float, bptt: int, max_tokens: int | None,
                        weights: bool) -> dict[str, Any]:
    """What a state file must have been written with to be resumed: the rates, the segment
    length, the token limit, the stream's checksum and (when ``weights``: only where a
    state file is written or read) the weights' checksum."""
    settings = {"lr": float(lr), "lamb": float(lamb), "eps": float(eps), "bptt": int(bptt),
                "max_tokens": max_tokens, "stream": _fingerprint(data)}
    if weights:
        settings["weights"] = _weights_fingerprint(model)
    return settings


def resumed_state(path: Path, device: torch.device, settings: dict[str, Any],
                  stats: GradientStats | None) -> tuple[dict[str, Any], GradientStats]:
    """The state file at ``path`` and the gradient statistics it holds, once it is shown to
    have been written from these weights, with these ``settings`` and (if given) these
    ``stats``.

    Raises:
        CheckpointError: the file is unreadable, or was written otherwise (the message
            names what differs).
    """
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
    return state, saved


@dataclass
class Progress:
    """How far a dynamic evaluation has read its stream.

    Attributes:
        hidden: the recurrent state carried into the next segment.
        row: the stream's row the next segment starts at.
        windows: segments scored.
        total: the summed negative log-likelihood of the targets scored.
        count: targets scored.
        finished: the stream (or the token limit) was read to the end.
    """

    hidden: Any
    row: int = 0
    windows: int = 0
    total: float = 0.0
    count: int = 0
    finished: bool = False

    @classmethod
    def restore(cls, model: nn.Module, state: dict[str, Any]) -> Progress:
        """The progress a state file recorded; the adapted weights go back into ``model``
        (in place: version counters move) and the random-number state is restored."""
        model.load_state_dict(state["model"])
        progress = cls(state["hidden"], state["row"], state["windows"], state["total"],
                       state["count"], state["finished"])
        set_rng_state(state["rng"]["cpu"], state["rng"]["cuda"])
        return progress


@dataclass
class StateFile:
    """Where and with what a dynamic evaluation keeps its state (``path`` None: nowhere).

    Attributes:
        path: the state file.
        settings: :func:`evaluation_settings` of the evaluation.
        stats: its gradient statistics.
        update: its update (whose ``theta_g`` is kept).
        extra: JSON-like values kept under ``"extra"``.
    """

    path: Path | None
    settings: dict[str, Any]
    stats: GradientStats
    update: DynamicUpdate
    extra: dict | None = None

    def save(self, model: nn.Module, progress: Progress, done: bool) -> None:
        """Write the state atomically (``done``: the evaluation has finished)."""
        if self.path is None:
            return
        cpu, cuda = rng_state()
        save_atomic({"format": LM_DYNAMIC_EVAL, "settings": self.settings,
                     "stats": self.stats.state_dict(), "theta_g": self.update.theta_g,
                     "model": model.state_dict(), "hidden": progress.hidden,
                     "row": progress.row, "windows": progress.windows,
                     "total": progress.total, "count": progress.count, "finished": done,
                     "rng": {"cpu": cpu, "cuda": cuda}, "extra": self.extra or {}},
                    self.path)
