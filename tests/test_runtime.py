from __future__ import annotations

import pytest
import torch

from drillbook.notebook import setup
from drillbook.runtime import PROFILE_ENV, resolve_profile, seed_everything


def test_profile_from_environment():
    assert resolve_profile("cpu", {PROFILE_ENV: "full"}).name == "full"
    assert resolve_profile("cpu", {PROFILE_ENV: " Small "}).name == "small"
    assert resolve_profile("cpu", {}).name == "small"
    assert resolve_profile("cuda", {PROFILE_ENV: "auto"}).name == "full"
    with pytest.raises(ValueError, match=r"'huge' is not a profile.*'small', 'full', 'auto'"):
        resolve_profile("cpu", {PROFILE_ENV: "huge"})


def test_pick():
    small = resolve_profile("cpu", {PROFILE_ENV: "small"})
    assert small.pick(small=1, full=2) == 1
    assert resolve_profile("cpu", {PROFILE_ENV: "full"}).pick(small=1, full=2) == 2


def test_seed_everything_reproduces_draws():
    seed_everything(7)
    a = torch.randn(3)
    seed_everything(7)
    assert torch.equal(a, torch.randn(3))


def test_setup_reports_its_choices(capsys, monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, "small")
    nb = setup(seed=3, device="cpu")
    assert nb.device.type == "cpu" and nb.profile.name == "small" and nb.seed == 3
    assert nb.pick(small="s", full="f") == "s"
    assert "profile small" in capsys.readouterr().out
