from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from drillbook.errors import ConfigError
from drillbook.notebook import setup
from drillbook.runtime import PROFILE_ENV, Profile, resolve_profile, seed_everything


def fake_gpu(monkeypatch, gib: float, capability: tuple[int, int]) -> None:
    """Make ``torch.cuda.get_device_properties`` describe a GPU this machine may lack."""
    props = SimpleNamespace(total_memory=int(gib * 2**30), major=capability[0],
                            minor=capability[1])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)


def test_profile_from_environment(monkeypatch):
    assert resolve_profile("cpu", {PROFILE_ENV: "full"}).name == "full"
    assert resolve_profile("cpu", {PROFILE_ENV: " Small "}).name == "small"
    assert resolve_profile("cpu", {PROFILE_ENV: "t4"}).name == "t4"
    assert resolve_profile("cpu", {}).name == "small"
    fake_gpu(monkeypatch, 80, (9, 0))
    assert resolve_profile("cuda", {PROFILE_ENV: "auto"}).name == "full"
    with pytest.raises(ConfigError, match=r"^DRILLBOOK_PROFILE='huge' is not a profile; use "
                                          r"one of \['small', 't4', 'full', 'auto'\]$"):
        resolve_profile("cpu", {PROFILE_ENV: "huge"})


@pytest.mark.parametrize(("gib", "capability", "expected"), [
    (15.0, (7, 5), "t4"),     # Colab's free T4: small and no bfloat16
    (16.0, (8, 6), "t4"),     # bfloat16, but under 20 GiB
    (24.0, (7, 0), "t4"),     # enough memory, but a V100-class GPU without bfloat16
    (19.9, (9, 0), "t4"),     # the memory bound is strict
    (20.0, (8, 0), "full"),   # exactly at both bounds
    (79.3, (9, 0), "full"),   # an H100
])
def test_auto_picks_t4_for_a_small_or_pre_ampere_gpu(monkeypatch, gib, capability, expected):
    fake_gpu(monkeypatch, gib, capability)
    profile = resolve_profile("cuda", {})
    assert profile.name == expected
    assert f"compute capability {capability[0]}.{capability[1]}" in profile.source
    assert resolve_profile("cpu", {}).name == "small"  # never asks the GPU off CUDA


def test_an_explicit_name_wins_over_the_environment(monkeypatch):
    fake_gpu(monkeypatch, 15, (7, 5))
    env = {PROFILE_ENV: "small"}
    assert resolve_profile("cuda", env, name="full") == Profile("full", "requested")
    assert resolve_profile("cuda", env, name="auto").name == "small"  # auto defers to env
    assert resolve_profile("cuda", {}, name="auto").name == "t4"  # ... and env to device
    assert resolve_profile("cuda", {}, name=" T4 ").name == "t4"
    with pytest.raises(ConfigError, match=r"^profile 'gpu' is not a profile; use one of "
                                          r"\['small', 't4', 'full', 'auto'\]$"):
        resolve_profile("cuda", {}, name="gpu")


def test_pick():
    small, t4, full = (Profile(name, "test") for name in ("small", "t4", "full"))
    assert small.pick(small=1, full=2) == 1 and small.pick(small=1, full=2, t4=3) == 1
    assert full.pick(small=1, full=2) == 2 and full.pick(small=1, full=2, t4=3) == 2
    assert t4.pick(small=1, full=2, t4=3) == 3
    assert t4.pick(small=1, full=2) == 2  # no t4 value: the full one


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


def test_setup_takes_the_profile_as_an_argument(capsys, monkeypatch):
    monkeypatch.setenv(PROFILE_ENV, "small")
    nb = setup(seed=0, device="cpu", profile="t4")  # a Colab form field's choice
    assert nb.profile.name == "t4" and nb.pick(small="s", full="f", t4="t") == "t"
    assert nb.pick(small="s", full="f") == "f"
    assert "profile t4 (requested)" in capsys.readouterr().out
    assert setup(seed=0, device="cpu", profile="auto", quiet=True).profile.name == "small"
    with pytest.raises(ConfigError, match=r"^profile 'large' is not a profile"):
        setup(seed=0, device="cpu", profile="large", quiet=True)


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


def test_run_folders_go_under_runs_or_to_a_fresh_temporary_folder(tmp_path, monkeypatch):
    from drillbook.notebook import setup

    monkeypatch.delenv("DRILLBOOK_PROFILE", raising=False)
    nb = setup(seed=0, device="cpu", quiet=True)
    a, b = nb.run_dir("ch02"), nb.run_dir("ch02")
    assert a != b and a.is_dir() and "drillbook-ch02-" in a.name  # never shared by accident
    assert not nb.progress  # small profile on a CPU: no bars in CI logs
    kept = setup(seed=0, device="cpu", quiet=True, runs=tmp_path / "drive")
    assert kept.run_dir("ch02") == tmp_path / "drive" / "ch02"
    assert kept.run_dir("ch02").is_dir()  # the same folder again: runs can resume
    assert setup(seed=0, device="cpu", quiet=True, runs="").runs is None  # an empty form field
    assert setup(seed=0, device="cpu", quiet=True, profile="full").progress


def test_read_back_gives_what_float_gives_and_never_widens_float32():
    """One copy back for many values, each the float ``float(t)`` gives (bit for bit), in
    the widest dtype among them: float32 values are never made float64, which Apple's
    MPS cannot hold."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from drillbook.runtime import read_back

    values = [torch.tensor(1 / 3), torch.tensor(2.7, dtype=torch.bfloat16),
              torch.tensor([1e-8]), torch.tensor(float("inf")), torch.tensor(float("nan"))]
    got = read_back(values)
    assert got[:4] == [float(v) for v in values[:4]] and math.isnan(got[4])
    assert read_back([torch.tensor(1 / 3, dtype=torch.float64)]) == [1 / 3]

    class Casts(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.dtypes: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ == "_to_copy":
                self.dtypes.append((kwargs or {}).get("dtype"))
            return func(*args, **(kwargs or {}))

    with Casts() as casts:
        read_back(values)
    assert torch.float64 not in casts.dtypes
