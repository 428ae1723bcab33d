"""One strictness for numbers and choices: drillbook.validation, and the configs, heads and
command-line arguments that use it."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from drillbook.cli.common import positive_float, positive_int
from drillbook.configs import ConfigError, get_config
from drillbook.heads import build_head
from drillbook.validation import (
    POSITIVE_INT,
    POSITIVE_NUMBER,
    PROBABILITY,
    integer,
    is_integer,
    is_number,
    number,
    one_of,
)

NOT_INTEGERS = [True, False, 3.0, np.float64(3.0), "3", None, 1 + 0j]
NOT_NUMBERS = [True, math.nan, math.inf, -math.inf, np.float32("nan"), "1", None, 1j]


@pytest.mark.parametrize("value", [0, 3, -2, np.int64(3), np.int8(-1), np.uint16(7)])
def test_python_and_numpy_integers_are_integers(value):
    assert is_integer(value) and is_number(value)


@pytest.mark.parametrize("value", NOT_INTEGERS)
def test_bools_floats_and_text_are_not_integers(value):
    assert not is_integer(value)


@pytest.mark.parametrize("value", [2.5, -1e300, 0.0, np.float32(0.25), np.float64(2.0), 7])
def test_finite_numbers(value):
    assert is_number(value)


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_bools_nan_inf_and_text_are_not_numbers(value):
    assert not is_number(value)


def test_bounds_are_inclusive_or_strict_as_their_words_say():
    assert (integer(minimum=1).valid, number(above=0).valid) == ("an integer >= 1",
                                                                 "a finite number > 0")
    assert number(minimum=0, below=1).valid == "a finite number >= 0 and < 1"
    assert [PROBABILITY(v) for v in (0, 0.999, 1, -0.001)] == [True, True, False, False]
    assert [POSITIVE_NUMBER(v) for v in (1e-300, 0, -1, math.inf)] == [True, False, False,
                                                                         False]
    percent = number(above=0, maximum=100)
    assert [percent(v) for v in (100, 100.000001, 0, 0.5)] == [True, False, False, True]
    assert [POSITIVE_INT(v) for v in (1, 0, np.int32(5), True, 2.0)] == [True, False, True,
                                                                          False, False]


def test_check_returns_plain_python_numbers_and_says_what_is_valid():
    value = POSITIVE_INT.check(np.int64(3), "batch_size")
    assert value == 3 and type(value) is int
    assert type(POSITIVE_NUMBER.check(np.float32(0.5), "lr")) is float
    with pytest.raises(ConfigError) as err:
        POSITIVE_INT.check(True, "batch_size")
    assert str(err.value) == "batch_size must be a positive integer, got True"
    cap = integer(minimum=1).or_none("no cap")
    assert cap(None) and cap.check(None, "cap") is None
    with pytest.raises(ConfigError, match=r"^cap must be null \(no cap\) or an integer >= 1, "
                                          r"got 0$"):
        cap.check(0, "cap")


def test_one_of_compares_types_too():
    rule = one_of(None, 1, "sgd")
    assert [rule(v) for v in (None, 1, "sgd", True, 1.0, "SGD")] == [True, True, True, False,
                                                                      False, False]
    assert rule.valid == "one of None, 1, 'sgd'"


@pytest.mark.parametrize(("convert", "text", "value"), [
    (positive_int, "3", 3), (positive_int, "007", 7),
    (positive_float, "1e-3", 0.001), (positive_float, "2", 2.0),
])
def test_argument_types_accept(convert, text, value):
    assert convert(text) == value and type(convert(text)) is type(value)


@pytest.mark.parametrize(("convert", "text"), [
    (positive_int, "0"), (positive_int, "-1"), (positive_int, "1.5"), (positive_int, "x"),
    (positive_float, "0"), (positive_float, "-2"), (positive_float, "nan"),
    (positive_float, "inf"), (positive_float, "1e400"), (positive_float, "fast"),
])
def test_argument_types_refuse(convert, text):
    with pytest.raises(argparse.ArgumentTypeError, match=rf"^expected a positive \w+, got "
                                                         rf"'{text}'$"):
        convert(text)


# ------------------------------------------------------------------ the same everywhere
@pytest.mark.parametrize("bad", [True, 2.0, np.float64(4.0), 0, -3, "16"])
def test_configs_and_heads_refuse_the_same_sizes(bad):
    with pytest.raises(ConfigError, match="d_hidden must be a positive integer"):
        build_head("softmax", vocab_size=10, d_hidden=bad)
    config = get_config("tutorial/ptb-tied")
    config.model.nhid = bad
    with pytest.raises(ConfigError, match=r"model\.nhid"):
        config.validate()


@pytest.mark.parametrize("bad", [math.nan, math.inf, True, "0.1"])
def test_configs_refuse_non_finite_numbers_and_bools(bad):
    config = get_config("multi30k/de-en-softmax")
    config.train.lr = bad
    with pytest.raises(ConfigError, match=r"train\.lr"):
        config.validate()


def test_numpy_numbers_are_accepted_and_stored_as_python_numbers():
    import json

    head = build_head("softmax", vocab_size=np.int64(10), d_hidden=np.int16(4))
    assert (head.vocab_size, head.d_hidden) == (10, 4) and type(head.d_hidden) is int
    config = get_config("tutorial/ptb-tied")
    config.model.nhid, config.train.lr = np.int64(16), np.float32(0.5)
    config.validate()
    assert type(config.model.nhid) is int and type(config.train.lr) is float
    json.dumps(config.to_dict())  # a NumPy number would not serialise
