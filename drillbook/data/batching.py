"""Cutting a token stream into batches for truncated back-propagation through time, the
AWD-LSTM way: :func:`batchify` into parallel streams, :func:`get_batch` for one window, and
:class:`BPTTSampler` for an epoch of windows of random length, resumable to the batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor

__all__ = ["BPTTSampler", "Batch", "batchify", "get_batch"]


def batchify(data: Tensor, batch_size: int) -> Tensor:
    """Cut a 1-d id stream into ``batch_size`` parallel streams, as AWD-LSTM does.

    Args:
        data: word ids, shape ``(N,)``.
        batch_size: ``B``, the number of streams.

    Returns:
        ``(N // B, B)``, contiguous, on ``data``'s device: column ``b`` is
        ``data[b * T : (b + 1) * T]`` with ``T = N // B``. The last ``N mod B`` tokens are
        dropped.

    Raises:
        ValueError: ``data`` is not 1-d, ``batch_size < 1``, or ``N < batch_size``.
    """
    if data.dim() != 1:
        raise ValueError(
            f"batchify takes a 1-d stream of ids, got shape {tuple(data.shape)}; pass "
            f"corpus.train (or .valid/.test), not an already batchified tensor"
        )
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    n_steps = data.size(0) // batch_size
    if n_steps == 0:
        raise ValueError(
            f"cannot cut {data.size(0)} tokens into {batch_size} streams: need at least "
            f"batch_size tokens; use a smaller batch size (or a larger split)"
        )
    return data.narrow(0, 0, n_steps * batch_size).view(batch_size, -1).t().contiguous()


def get_batch(source: Tensor, i: int, seq_len: int) -> tuple[Tensor, Tensor]:
    """Input and target rows starting at row ``i``.

    Args:
        source: a batchified split, ``(T, B)``.
        i: first row, ``0 <= i < T - 1``.
        seq_len: wanted length; cut to ``T - 1 - i`` at the end of the data.

    Returns:
        ``(x, y)``, both ``(L, B)`` with ``L = min(seq_len, T - 1 - i)``:
        ``x = source[i : i + L]`` and ``y = source[i + 1 : i + 1 + L]`` (views, no copy).

    Raises:
        ValueError: ``i`` leaves no target (``i >= T - 1`` or ``i < 0``), or ``seq_len < 1``.
    """
    if source.dim() != 2:
        raise ValueError(
            f"get_batch takes a batchified (T, B) tensor, got shape {tuple(source.shape)}; "
            f"call batchify(ids, batch_size) first"
        )
    n_steps = source.size(0)
    i, seq_len = int(i), int(seq_len)
    if seq_len < 1:
        raise ValueError(f"seq_len must be a positive integer, got {seq_len}")
    if not 0 <= i < n_steps - 1:
        raise ValueError(
            f"row i={i} leaves no target: the source has T={n_steps} rows, so i must lie "
            f"in [0, {n_steps - 1})"
        )
    seq_len = min(seq_len, n_steps - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len]


class Batch(NamedTuple):
    """One step of a :class:`BPTTSampler`.

    Attributes:
        x: input ids, ``(seq_len, B)``.
        y: target ids, ``(seq_len, B)``: ``x`` shifted by one row.
        seq_len: number of rows, ``x.size(0)``.
        lr_scale: ``seq_len / bptt``; multiply the learning rate by it for this step.
        position: the row ``i`` of the source this batch starts at.
    """

    x: Tensor
    y: Tensor
    seq_len: int
    lr_scale: float
    position: int


class BPTTSampler:
    """The (variable-length) BPTT batches of one epoch after another, resumable.

    Language models in this book are trained the AWD-LSTM way:

    1. :func:`batchify` cuts the split's id stream ``(N,)`` into ``B`` parallel streams,
       a ``(T, B)`` tensor with ``T = N // B`` (the last ``N mod B`` tokens are dropped).
       Column ``b`` holds tokens ``b*T ... (b+1)*T - 1``: each column is read top to bottom,
       and the hidden state is carried from one batch to the next down the columns.
    2. :func:`get_batch` takes ``seq_len`` rows starting at row ``i`` as input ``x`` and the
       same rows shifted by one as target ``y`` (both ``(seq_len, B)``).
    3. :class:`BPTTSampler` walks one epoch from row 0 to the end. In training mode it draws a
       new length at every step (AWD-LSTM, Merity et al. 2018, Sec. 4.1)::

           bptt_i  = bptt        with probability 0.95, else bptt / 2
           seq_len = max(5, int(Normal(bptt_i, 5)))
           lr      = base_lr * seq_len / bptt        (the trainer applies lr_scale)

       so batch boundaries move from epoch to epoch, and the learning-rate rescaling keeps
       short sequences from being over-weighted. In evaluation mode (``variable=False``)
       every step is ``bptt`` long.

    The sampler draws from its own ``torch.Generator``, never from the global random state,
    and its :meth:`~BPTTSampler.state_dict` records where it stands in the epoch together
    with the generator's state: a run that is killed mid-epoch and restored from a checkpoint
    sees exactly the batches, and the future random lengths, it would have seen.

    Two small departures from the awd-lstm-lm script, both at the very end of an epoch:
    its loop stops at row ``T - 2`` (``while i < T - 1 - 1``), which skips the last target
    when a step lands exactly there; this sampler stops at ``T - 1``, so every target of the
    epoch is used exactly once. And when the last step is cut short by the end of the data,
    ``seq_len`` and ``lr_scale`` describe the batch actually returned (``x.size(0)``), not
    the drawn length.

    Two ways to use it:

    * ``for batch in sampler:`` runs the rest of the current epoch, then starts the next
      one (position back to row 0, :attr:`epoch` + 1), so the next ``for`` loop is the
      next epoch. Breaking out and looping again continues where it stopped.
    * A trainer that needs the epoch boundary in its own hands calls
      :meth:`iter_epoch` (optionally capped at ``max_batches``), then :meth:`new_epoch`.

    Each batch's position is advanced *before* it is handed out, so a
    :meth:`state_dict` taken while the caller works on a batch points at the next one.
    Use one iterator at a time.

    Args:
        source: batchified ids, ``(T, B)`` with ``T >= 2``.
        bptt: the base sequence length (70 in AWD-LSTM).
        seed: seeds the sampler's own ``torch.Generator``.
        variable: draw a length per step (training); ``False``: always ``bptt`` (eval).
        p_full: probability of using ``bptt`` rather than ``bptt / 2`` as the mean.
        std: standard deviation of the drawn length.
        min_len: shortest drawn length.

    Example::

        sampler = BPTTSampler(batchify(corpus.train, 80), bptt=70, seed=141)
        for batch in sampler:
            for group in optimizer.param_groups:
                group["lr"] = base_lr * batch.lr_scale
            loss = model.loss(batch.x, batch.y)
            ...
        checkpoint["sampler"] = sampler.state_dict()
    """

    def __init__(
        self,
        source: Tensor,
        bptt: int,
        *,
        seed: int = 0,
        variable: bool = True,
        p_full: float = 0.95,
        std: float = 5.0,
        min_len: int = 5,
    ) -> None:
        if source.dim() != 2 or source.size(0) < 2:
            raise ValueError(
                f"BPTTSampler needs a batchified (T, B) tensor with T >= 2, got shape "
                f"{tuple(source.shape)}; call batchify(ids, batch_size) with a smaller "
                f"batch size or more data"
            )
        if int(bptt) < 1 or int(min_len) < 1:
            raise ValueError(f"bptt and min_len must be positive, got bptt={bptt}, "
                             f"min_len={min_len}")
        if not 0.0 <= float(p_full) <= 1.0 or float(std) < 0:
            raise ValueError(f"need 0 <= p_full <= 1 and std >= 0, got p_full={p_full}, "
                             f"std={std}")
        self.source = source
        self.bptt = int(bptt)
        self.variable = bool(variable)
        self.p_full = float(p_full)
        self.std = float(std)
        self.min_len = int(min_len)
        self._generator = torch.Generator().manual_seed(int(seed))
        self._position = 0  # row the next batch starts at
        self._batches = 0  # batches handed out in the current epoch
        self._epoch = 0

    # ------------------------------------------------------------------ state
    @property
    def position(self) -> int:
        """The row the next batch starts at (``T - 1`` once the epoch's data is used up)."""
        return self._position

    @property
    def epoch(self) -> int:
        """Number of epochs started before the current one (0 during the first)."""
        return self._epoch

    @property
    def batches_done(self) -> int:
        """Batches handed out so far in the current epoch."""
        return self._batches

    @property
    def _last_row(self) -> int:
        return self.source.size(0) - 1  # rows with a target: 0 .. T - 2

    def _draw(self, generator: torch.Generator) -> int:
        """The next wanted length (AWD-LSTM's schedule)."""
        if not self.variable:
            return self.bptt
        u = torch.rand((), generator=generator, dtype=torch.float64).item()
        mean = self.bptt if u < self.p_full else self.bptt / 2
        z = torch.randn((), generator=generator, dtype=torch.float64).item()
        return max(self.min_len, int(mean + self.std * z))

    # -------------------------------------------------------------- iteration
    def iter_epoch(self, max_batches: int | None = None) -> Iterator[Batch]:
        """The rest of the current epoch; stops at the end of the data.

        Args:
            max_batches: stop once the epoch has handed out this many batches in all
                (counting those before a resume). ``None``: no cap.

        Does not start the next epoch: call :meth:`new_epoch` for that.
        """
        last_row = self._last_row
        while self._position < last_row and (max_batches is None
                                              or self._batches < max_batches):
            i = self._position
            x, y = get_batch(self.source, i, self._draw(self._generator))
            seq_len = x.size(0)
            self._position = i + seq_len
            self._batches += 1
            yield Batch(x, y, seq_len, seq_len / self.bptt, i)

    def new_epoch(self) -> None:
        """Start the next epoch: back to row 0, :attr:`epoch` + 1.

        The random stream simply continues (it is not re-seeded), as in AWD-LSTM.
        """
        self._position, self._batches, self._epoch = 0, 0, self._epoch + 1

    def __iter__(self) -> Iterator[Batch]:
        if self._position >= self._last_row:  # left at the end by iter_epoch or a break
            self.new_epoch()
        yield from self.iter_epoch()
        self.new_epoch()

    def num_batches(self, max_batches: int | None = None) -> int:
        """Exact number of batches of the current epoch (handed out + still to come).

        The remaining lengths are simulated on a copy of the generator, so this is exact
        for variable lengths too and leaves the sampler untouched. Capped at
        ``max_batches`` when given.
        """
        generator = torch.Generator().set_state(self._generator.get_state())
        position, count, last_row = self._position, self._batches, self._last_row
        while position < last_row and (max_batches is None or count < max_batches):
            position += min(self._draw(generator), last_row - position)
            count += 1
        return count if max_batches is None else min(count, max_batches)

    # ----------------------------------------------------------- checkpointing
    def _settings(self) -> dict[str, Any]:
        return {"num_steps": int(self.source.size(0)), "batch_size": int(self.source.size(1)),
                "bptt": self.bptt, "variable": self.variable, "p_full": self.p_full,
                "std": self.std, "min_len": self.min_len}

    def state_dict(self) -> dict[str, Any]:
        """Position, batches done, epoch and generator state (``uint8`` tensor), settings.

        Plain ints, floats, bools and one tensor: safe for
        ``torch.load(..., weights_only=True)``.
        """
        return {"position": self._position, "batches": self._batches, "epoch": self._epoch,
                "generator": self._generator.get_state(), **self._settings()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where the sampler that wrote ``state`` stopped.

        Raises:
            ValueError: ``state`` was written for other data or settings (shape of the
                source, ``bptt``, schedule), or its position is out of range.
        """
        mine = self._settings()
        wrong = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if wrong:
            detail = ", ".join(f"{k}: saved {s!r}, here {h!r}" for k, (s, h) in wrong.items())
            raise ValueError(
                f"sampler state does not fit this sampler ({detail}); build the sampler "
                f"from the same split, batch size and settings as the run that saved it"
            )
        position = int(state["position"])
        if not 0 <= position <= self._last_row:
            raise ValueError(f"saved position {position} is outside [0, {self._last_row}]")
        generator = torch.as_tensor(state["generator"]).to("cpu", torch.uint8)
        self._generator.set_state(generator)
        self._position = position
        self._batches = int(state["batches"])
        self._epoch = int(state["epoch"])
