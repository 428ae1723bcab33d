"""Shared fixtures. Every test seeds what it uses; nothing depends on test order."""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch

#: every process this test process starts inherits this mark in its environment, so that a
#: process it left behind is found even once orphaned (its parent then is not us): the
#: value is this process's id, each xdist worker setting its own
SESSION_MARK = "DRILLBOOK_TEST_SESSION"
os.environ[SESSION_MARK] = str(os.getpid())
#: seconds a process started by the tests has, after the last test, to end by itself
OUTLIVE_GRACE = 15.0


def started_here() -> list[int]:
    """The live processes (not zombies) carrying this process's mark, but this one and
    two kinds of its own children that end with it: its Jupyter kernels (the notebook
    tests' plugin shuts those down) and multiprocessing's helpers (the resource tracker,
    the forkserver: they read from a pipe this process holds)."""
    mark = f"{SESSION_MARK}={os.getpid()}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        helper = int(state[1]) == os.getpid() and (
            b"ipykernel_launcher" in cmdline or b"from multiprocessing." in cmdline)
        if state[0] != "Z" and not helper:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="session", autouse=True)
def nothing_outlives_the_tests():
    """Fails the run when a process a test started (a worker, a server, a training row)
    is still running once every test is done: each gets :data:`OUTLIVE_GRACE` seconds to
    end, and whatever is left is named and killed."""
    yield
    if not Path("/proc/self/environ").exists():  # no /proc: nothing to look at
        return
    end = time.monotonic() + OUTLIVE_GRACE
    while (left := started_here()) and time.monotonic() < end:
        time.sleep(0.5)
    if not left:
        return
    names = []
    for pid in left:
        try:
            names.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes()
                         .replace(b"\0", b" ").decode(errors="replace").strip()[:200])
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    if names:
        pytest.fail(f"{len(names)} process(es) started by the tests outlived them (killed "
                    "now): " + "; ".join(names), pytrace=False)


def pytest_collection_modifyitems(items):
    """Mark every test that is skipped without CUDA as ``cuda``, so that a GPU machine runs
    just those (``pytest -m cuda``, what ``make evidence`` does first), and put the files
    that took longest first (:func:`longest_files_first`)."""
    for item in items:
        if any("CUDA" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.cuda)
    longest_files_first(items, file_seconds())


#: seconds each test file and chapter took in a measured run of the whole suite (`make
#: durations` writes it); it orders the files, nothing else
DURATIONS = Path(__file__).with_name("durations.json")
#: set (to anything) to write :data:`DURATIONS` at the end of the run
RECORD_DURATIONS = "DRILLBOOK_RECORD_DURATIONS"


def file_seconds() -> dict[str, float]:
    """The seconds per file of :data:`DURATIONS` (``{}`` when it is missing or unreadable)."""
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text())["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def longest_files_first(items: list, seconds: dict[str, float]) -> None:
    """Sort ``items`` (in place) by their file's measured seconds, longest first, each
    file's own items in their order; a file not measured counts as the median one.

    ``make test`` hands whole files to its workers (``--dist loadfile``) in this order
    (``--no-loadscope-reorder``): the long files start first and the short ones fill the
    end, so that the workers finish together instead of one running a long file alone.
    """
    if not seconds:
        return
    unknown = statistics.median(seconds.values())
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(_file_of(item.nodeid), i)

    def order(item) -> tuple[float, int]:
        file = _file_of(item.nodeid)
        return -seconds.get(file, unknown), first[file]

    items.sort(key=order)


def _file_of(nodeid: str) -> str:
    """The file (or chapter) a test id names: ``tests/test_x.py::test_y`` -> its path."""
    return nodeid.split("::")[0]


_spent: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    """Add up each file's seconds (setup, call and teardown; under xdist the controller
    receives every worker's reports)."""
    _spent[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session):
    """Write :data:`DURATIONS` when :data:`RECORD_DURATIONS` is set (from the one process
    that saw every report: the controller under xdist)."""
    if os.environ.get(RECORD_DURATIONS) and not hasattr(session.config, "workerinput"):
        files = dict(sorted(((k, round(v, 1)) for k, v in _spent.items()),
                            key=lambda kv: -kv[1]))
        DURATIONS.write_text(json.dumps(
            {"about": "seconds per file in one run of the whole suite (make durations); "
                      "orders the files, longest first", "files": files}, indent=1) + "\n")


def gpu_sitting(epochs: list[int], commit: str = "0" * 40) -> dict:
    """One sitting of a row trained on a GPU, as a result file records it (the fields the
    run's ``sittings`` list holds): for tests that need a row to have moved devices."""
    return {"git_commit": commit, "git_dirty": False, "device": "NVIDIA H200",
            "epochs": list(epochs), "budget_minutes": 1.0,
            "execution": {"way": "process", "rows": 1, "graphed": False}}


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
