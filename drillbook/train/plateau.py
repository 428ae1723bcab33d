"""The stopping rule of a run trained to its plateau (``train.plateau_epochs``).

A run stops after an epoch once the best validation metric of its last ``E`` epochs has
improved on the best of the epochs before them by less than a fraction ``tol`` of it:

.. math::

    \\frac{\\min_{i \\le n-E} p_i}{\\min_{n-E < i \\le n} p_i} - 1 < \\mathrm{tol}

for a perplexity ``p`` (lower is better), and
:math:`\\max_{n-E < i \\le n} b_i / \\max_{i \\le n-E} b_i - 1 < \\mathrm{tol}` for a BLEU
``b`` (higher is better), where ``n`` is the number of epochs so far (the rule needs
``n > E``). With ``E = 3`` and ``tol = 0.005``: the last three epochs lowered the best
validation perplexity by less than 0.5%. The learning-rate schedule of AWD-LSTM (the
NT-ASGD switch after ``nonmono`` epochs without improvement) still runs inside the rule:
an ``E`` above ``nonmono`` gives averaging the chance to lower the perplexity before the
rule ends the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .run_files import LOG, read_log

__all__ = ["PlateauRule", "logged_plateau", "plateau_epoch", "reached_plateau", "rule_of"]


@dataclass(frozen=True)
class PlateauRule:
    """A stopping rule: ``epochs`` (``E``) and ``tolerance`` (``tol``), see the module.

    Attributes:
        epochs: the window of recent epochs.
        tolerance: the relative improvement below which the run has reached its plateau.
        higher_is_better: the metric is a BLEU (True) or a perplexity (False).
    """

    epochs: int
    tolerance: float
    higher_is_better: bool = False

    def describe(self) -> str:
        """The rule in words, as result files and the dry-run print it."""
        metric, way = (("validation BLEU", "rose") if self.higher_is_better
                       else ("validation perplexity", "fell"))
        return (f"{metric} {way} by less than {100 * self.tolerance:g}% over the last "
                f"{self.epochs} epoch{'s' if self.epochs != 1 else ''}")

    def as_dict(self) -> dict:
        return {"epochs": self.epochs, "tolerance": self.tolerance}


def reached_plateau(values: Sequence[float], rule: PlateauRule) -> bool:
    """Whether a run whose validation metric was ``values`` (one per epoch, in order) has
    reached its plateau under ``rule`` after its last epoch (False while it has no more
    than ``rule.epochs`` epochs). A metric that is not finite in the recent window (a
    perplexity that overflowed) is no improvement."""
    e = rule.epochs
    if len(values) <= e:
        return False
    before, recent = values[:-e], values[-e:]
    if rule.higher_is_better:
        old, new = max(before), max(recent)
        if old <= 0:
            return not new > old
        gain = new / old - 1
    else:
        old, new = min(before), min(recent)
        if not math.isfinite(new) or new <= 0:
            return True
        gain = old / new - 1 if math.isfinite(old) else math.inf
    return gain < rule.tolerance


def plateau_epoch(values: Sequence[float], rule: PlateauRule) -> int | None:
    """The first epoch (1-based) after which ``rule`` would have stopped a run whose
    validation metric was ``values``; None if it never would."""
    for n in range(rule.epochs + 1, len(values) + 1):
        if reached_plateau(values[:n], rule):
            return n
    return None


def logged_plateau(run_dir: Path, rule: PlateauRule | None, metric: str) -> bool:
    """Whether the run in ``run_dir`` has reached its plateau under ``rule`` (None: no
    rule, never), its log read whole (every call's epochs, a resumed run's included) for
    the record field ``metric``."""
    if rule is None or not (Path(run_dir) / LOG).exists():
        return False
    values = [r[metric] for r in read_log(run_dir) if r.get(metric) is not None]
    return reached_plateau(values, rule)


def rule_of(train, higher_is_better: bool = False) -> PlateauRule | None:
    """The stopping rule of a config's ``train`` section (None: every epoch trains)."""
    if train.plateau_epochs is None:
        return None
    return PlateauRule(train.plateau_epochs, train.plateau_tolerance, higher_is_better)
