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


def test_resolve_device_checks_the_name_and_the_machine(monkeypatch):
    from drillbook.errors import DeviceError
    from drillbook.runtime import default_device, resolve_device

    assert resolve_device(None) == default_device()
    assert resolve_device("cpu") == torch.device("cpu")
    for name in ("nonsense", "", "meta", "cuda:x"):
        with pytest.raises(DeviceError, match=r"unknown device .*use cpu, cuda, cuda:N or mps"):
            resolve_device(name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(DeviceError, match=r"'cuda': CUDA is not available on this machine "
                                          r"\(torch .* was built without CUDA\); use cpu"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.version, "cuda", "12.1")
    with pytest.raises(DeviceError, match=r"'cuda:0': .*\(no GPU found\)"):
        resolve_device("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match=r"'cuda:2': this machine has 2 CUDA device\(s\), "
                                          r"cuda:0 to cuda:1"):
        resolve_device("cuda:2")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="'mps': Apple's MPS backend is not available"):
        resolve_device("mps")
