"""What a training run says on the console, and how it hears Ctrl-C.

The lines (:func:`epoch_line`, :func:`progress_line`) are what
:class:`~drillbook.train.loop.TrainingLoop` prints on stderr; :func:`stop_on_signals` turns
SIGINT and SIGTERM into a request to stop after the current step and save it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["epoch_line", "progress_line", "say", "stop_on_signals"]


def say(line: str) -> None:
    """Print a line on stderr at once."""
    print(line, file=sys.stderr, flush=True)


def epoch_line(label: str, record: dict[str, Any], epochs: int, metric: str,
               seconds: float, events: list[str]) -> str:
    """An epoch's line: where (``row 3/7: epoch 3/500``), updates, training loss, the
    task's ``metric`` in words, learning rate, seconds, tokens per second and
    ``events`` (``saved best, checkpoint``)."""
    rate = record.get("tokens_per_second")
    where = f"epoch {record['epoch']}/{epochs}"
    parts = [f"{label}: {where}" if label else where, f"{record['step']:,} updates",
             f"train loss {record['train_loss']:.3f}", metric, f"lr {record['lr']:g}",
             f"{seconds:.0f}s", f"{rate:,.0f} tok/s" if rate is not None else "- tok/s",
             ", ".join(events)]
    return " | ".join(parts)


def progress_line(label: str, epoch: int, done: int, total: int, loss: float) -> str:
    """A line within an epoch where no bar is drawn: ``epoch 3: 400/1,327 updates | loss
    4.812``."""
    where = f"epoch {epoch}: {done:,}/{total:,} updates"
    return f"{f'{label}: {where}' if label else where} | loss {loss:.3f}"


@contextlib.contextmanager
def stop_on_signals(loops: Iterable[Any]) -> Iterator[None]:
    """While ``loops`` train: Ctrl-C (SIGINT) or SIGTERM asks each to stop after its
    current step and save it (:class:`~drillbook.errors.TrainingInterrupted`); a second
    signal stops at once, as without the handler. Only in the main thread (where Python
    delivers signals); the previous handlers come back afterwards."""
    loops = list(loops)
    for loop in loops:
        loop.stop_signal = None
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def ask(signum, frame):
        if any(loop.stop_signal is not None for loop in loops):  # the second time: now
            raise KeyboardInterrupt
        for loop in loops:
            loop.stop_signal = signum
        if any(loop.writes for loop in loops):
            say(f"{signal.Signals(signum).name}: stopping after this step to save it "
                f"(again to stop at once)")

    previous = {sig: signal.signal(sig, ask) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
