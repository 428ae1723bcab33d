"""Shared fixtures. Every test seeds what it uses; nothing depends on test order."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
