"""Shared fixtures. Every test seeds what it uses; nothing depends on test order."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(items):
    """Mark every test that is skipped without CUDA as ``cuda``, so that a GPU machine runs
    just those (``pytest -m cuda``, what ``make evidence`` does first)."""
    for item in items:
        if any("CUDA" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.cuda)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """Tiny sizes gain nothing from threads, and lose much when the CPU is shared: use
    with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _gradcheck_head(head, d_hidden: int) -> None:
    """float64 gradcheck of a head's log-probabilities w.r.t. the features and every
    parameter (through ``torch.func.functional_call``), and of its ``loss``."""
    names = [n for n, _ in head.named_parameters()]
    params = tuple(torch.randn_like(p).mul_(0.5).requires_grad_(True)
                   for _, p in head.named_parameters())
    h = torch.randn(3, d_hidden, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 5, head.vocab_size - 1])

    def loss(x, *ps):
        logp = torch.func.functional_call(head, dict(zip(names, ps, strict=True)), (x,))
        return -logp.gather(-1, y[:, None]).mean()

    assert torch.autograd.gradcheck(loss, (h, *params))
    assert torch.autograd.gradcheck(lambda x: head.loss(x, y), (h,))


@pytest.fixture
def gradcheck_head():
    return _gradcheck_head


@pytest.fixture
def use_trainer(monkeypatch):
    """``use_trainer(task, cls)``: the command line (and ``reproduce``) train that task's
    configs with ``cls`` for the rest of the test (the trainer of its
    :class:`~drillbook.train.tasks.Task` record)."""
    import dataclasses

    from drillbook.train.tasks import TASKS

    def use(task: str, cls) -> None:
        monkeypatch.setitem(TASKS, task, dataclasses.replace(TASKS[task], trainer=cls))

    return use
