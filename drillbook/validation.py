"""Checks of user-given numbers and choices: one place, one strictness.

Configs (:meth:`drillbook.configs.SectionedConfig.validate`), the heads' constructors and
:func:`drillbook.heads.build_head`, and the command line's argument types all check values
with the rules here, so a value is valid or invalid the same way wherever it is given:

* an **integer** is a Python or NumPy integer, never a ``bool`` (``True`` is not a size);
* a **number** is an integer or a float (Python or NumPy), never a ``bool``, and always
  finite (``nan`` and ``inf`` are refused wherever a number is expected);
* a **choice** is one of a fixed set of values;
* a **boolean** is ``True`` or ``False`` (Python or NumPy), never a word such as ``"no"``
  or a number such as ``1``: nothing that could be read either way;
* a **list** is a list or a tuple, never a string (a lone ``"tied"`` is not the list
  ``["t", "i", "e", "d"]``): :func:`as_list`, :func:`list_of`.

A :class:`Rule` pairs a test with the words that say what is valid; :meth:`Rule.check`
raises a one-line :class:`~drillbook.errors.ConfigError` ``"<what> must be <valid>, got
<value>"`` and returns the value as a plain Python ``int`` or ``float``.

>>> POSITIVE_INT.check(3, "vocab_size")
3
>>> POSITIVE_INT.check(True, "vocab_size")
Traceback (most recent call last):
...
drillbook.errors.ConfigError: vocab_size must be a positive integer, got True
>>> number(above=0).valid, integer(minimum=1).or_none("no cap").valid
('a finite number > 0', 'null (no cap) or an integer >= 1')
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = [
    "BOOLEAN",
    "NON_NEGATIVE_INT",
    "POSITIVE_INT",
    "POSITIVE_NUMBER",
    "PROBABILITY",
    "SEED",
    "Rule",
    "argument_type",
    "as_list",
    "check_choice",
    "integer",
    "is_boolean",
    "is_integer",
    "is_number",
    "list_of",
    "number",
    "one_of",
    "suggest",
]


def is_integer(value: object) -> bool:
    """A Python or NumPy integer, not a ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite integer or float (Python or NumPy), not a ``bool``."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


def is_boolean(value: object) -> bool:
    """``True`` or ``False``, Python's or NumPy's."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy"
                                       and kind.__name__ in ("bool", "bool_"))


def _plain(value: Any) -> Any:
    """A NumPy number as the Python ``int`` or ``float`` it stands for; anything else
    unchanged."""
    if is_boolean(value):
        return bool(value)
    if is_integer(value):
        return int(value)
    if is_number(value):
        return float(value)
    return value


@dataclass(frozen=True)
class Rule:
    """What a valid value is: ``test(value)`` is true for one, ``valid`` says it in words
    (completing "it must be ...").

    Attributes:
        test: the predicate; it is only called through ``__call__``, which gives it
            values of any type, so it must not raise.
        valid: e.g. ``"an integer >= 1"``.
    """

    test: Callable[[Any], bool]
    valid: str
    #: the values allowed, for a rule made by :func:`one_of` (a refusal can then suggest
    #: the closest, :func:`check_choice`); None otherwise
    choices: tuple | None = None

    def __call__(self, value: object) -> bool:
        return bool(self.test(value))

    def check(self, value: object, what: str) -> Any:
        """``value`` (a NumPy scalar as a plain Python number, a list or tuple as a list of
        them) if it is valid.

        Raises:
            ConfigError: ``"<what> must be <valid>, got <value!r>"``.
        """
        if not self(value):
            raise ConfigError(f"{what} must be {self.valid}, got {value!r}")
        if isinstance(value, (list, tuple)):
            return [_plain(item) for item in value]
        return _plain(value)

    def or_none(self, meaning: str) -> Rule:
        """This rule, or ``None`` (which means ``meaning``, e.g. ``"no cap"``)."""
        return Rule(lambda v: v is None or self(v), f"null ({meaning}) or {self.valid}")

    def saying(self, valid: str) -> Rule:
        """The same test, described in other words (``"a positive integer"``)."""
        return Rule(self.test, valid)


def integer(minimum: int | None = None) -> Rule:
    """An integer (:func:`is_integer`), at least ``minimum`` if given."""
    if minimum is None:
        return Rule(is_integer, "an integer")
    return Rule(lambda v: is_integer(v) and v >= minimum, f"an integer >= {minimum}")


def number(*, minimum: float | None = None, above: float | None = None,
           below: float | None = None, maximum: float | None = None) -> Rule:
    """A finite number (:func:`is_number`) with optional bounds: ``>= minimum``,
    ``> above``, ``< below``, ``<= maximum``."""
    bounds = [(minimum, ">=", lambda v, b: v >= b), (above, ">", lambda v, b: v > b),
              (below, "<", lambda v, b: v < b), (maximum, "<=", lambda v, b: v <= b)]
    bounds = [(b, sign, op) for b, sign, op in bounds if b is not None]
    words = " and ".join(f"{sign} {b:g}" for b, sign, _ in bounds)
    return Rule(lambda v: is_number(v) and all(op(v, b) for b, _, op in bounds),
                f"a finite number {words}".rstrip())


def one_of(*choices: object) -> Rule:
    """Exactly one of ``choices`` (compared with ``==``; ``True`` is not ``1`` here)."""
    def test(v: object) -> bool:
        return any(v is c or (type(v) is type(c) and v == c) for c in choices)

    return Rule(test, f"one of {', '.join(repr(c) for c in choices)}", choices)


def list_of(rule: Rule, items: str, *, non_empty: bool = False) -> Rule:
    """A list or tuple (never a string) whose every item passes ``rule``; ``items`` names
    them in the plural (``"integers >= 0"``). :meth:`Rule.check` returns it as a list of
    plain Python values."""
    def test(v: object) -> bool:
        return (isinstance(v, (list, tuple)) and (len(v) > 0 or not non_empty)
                and all(rule(x) for x in v))

    return Rule(test, f"a {'non-empty ' if non_empty else ''}list of {items}")


def as_list(value: Any, what: str, example: str = "") -> list:
    """``value`` as a list when it is a list, tuple, set or other collection; a lone
    string is refused rather than read letter by letter.

    Raises:
        ConfigError: ``"<what> must be a list, got the string 'tied'; wrap it: ['tied']"``.
    """
    if isinstance(value, (str, bytes)):
        raise ConfigError(f"{what} must be a list, got the string {value!r}; wrap it in "
                          f"a list: [{value!r}]{example}")
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        return list(value)
    raise ConfigError(f"{what} must be a list, got {value!r}{example}")


def suggest(value: Any, choices: Iterable[Any]) -> str:
    """``" (did you mean 'X'?)"`` for the choices closest to a mistyped ``value``
    (``difflib.get_close_matches``), or ``""`` when none is close.

    >>> suggest("tutorial/ptb-dril", ["tutorial/ptb-drill", "ptb/awd-lstm"])
    " (did you mean 'tutorial/ptb-drill'?)"
    """
    import difflib

    names = [str(c) for c in choices]
    close = difflib.get_close_matches(str(value), names, n=2, cutoff=0.75)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def check_choice(value: Any, choices: Iterable[Any], what: str, *, where: str = "") -> Any:
    """``value`` if it is one of ``choices``, else a one-line
    :class:`~drillbook.errors.ConfigError` ``"unknown <what> <value!r><where>; choose one of
    [<choices>]"`` (``where``, e.g. ``" for the 'dual' head"``, says whose choice it is),
    with the closest choices suggested (:func:`suggest`).

    >>> check_choice("relu", ["tanh", "relu"], "activation")
    'relu'
    """
    choices = list(choices)
    try:
        known = value in choices
    except TypeError:  # an unhashable value against a dict's keys
        known = False
    if not known:
        raise ConfigError(f"unknown {what} {value!r}{where}{suggest(value, choices)}; "
                          f"choose one of {choices}")
    return value


#: switches: ``True`` or ``False`` only
BOOLEAN = Rule(is_boolean, "true or false")
#: sizes, counts, beam widths: 1, 2, 3, ...
POSITIVE_INT = integer(minimum=1).saying("a positive integer")
#: depths and counts that may be zero: 0, 1, 2, ...
NON_NEGATIVE_INT = integer(minimum=0).saying("a non-negative integer")
#: learning rates, budgets in minutes: finite and above 0
POSITIVE_NUMBER = number(above=0).saying("a positive number")
#: dropout rates
PROBABILITY = number(minimum=0, below=1).saying("a probability in [0, 1)")
#: random seeds: what ``torch.manual_seed`` takes, with room for the offsets added to a
#: seed (``seed + epoch``, ``seed + rank``)
SEED = Rule(lambda v: is_integer(v) and -2**63 <= v < 2**63, "an integer in [-2**63, 2**63)")


def argument_type(rule: Rule, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An ``argparse`` type: ``parse`` the text (``int``, ``float``), then check ``rule``.

    argparse turns its :class:`argparse.ArgumentTypeError` into a usage error:
    ``argument --beam: expected a positive integer, got 0``.
    """

    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {rule.valid}, got {text!r}") from None
        if not rule(value):
            raise argparse.ArgumentTypeError(f"expected {rule.valid}, got {text!r}")
        return value

    return convert
