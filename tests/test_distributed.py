"""Two processes (gloo on the CPU) train what one process trains, and resume exactly."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_loop import no_dropout
from test_train import tiny_config, tiny_corpus

from drillbook.errors import CheckpointError
from drillbook.train import LanguageModelTrainer, load_checkpoint, read_log

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


def _worker(rank: int, world: int, folder: str) -> None:
    """One process: a dropout-free run, and a run with dropout stopped mid-epoch and
    resumed, beside an uninterrupted one."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank,
                            world_size=world)
    try:
        def trainer(name, config, **kw):
            return LanguageModelTrainer(config, f"{folder}/{name}", device="cpu",
                                        corpus=tiny_corpus(), progress=False, **kw)

        trainer("plain", no_dropout(epochs=1)).fit()
        trainer("sliced", no_dropout(epochs=1, accum_steps=2)).fit()  # 1 column x 2 each
        config = tiny_config(epochs=2, checkpoint_steps=5)
        whole = trainer("whole", config)
        whole.fit()
        trainer("part", config).fit(max_steps=6)  # a "kill" after step 6's checkpoint
        resumed = trainer("part", config, resume=True)
        resumed.fit()
        if rank == 0:
            torch.save({"whole": whole.model.state_dict(),
                        "resumed": resumed.model.state_dict()}, f"{folder}/weights.pt")
        with open(f"{folder}/rank{rank}.json", "w") as f:
            json.dump({"resumed_step": resumed.step, "world": resumed.world_size}, f)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    env = {"OMP_NUM_THREADS": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        mp.spawn(_worker, args=(2, str(folder)), nprocs=2, join=True)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return folder


def test_two_processes_train_the_one_process_batch(two_processes, tmp_path):
    """Batch 4 as 2 x 2 columns (dropout off) = batch 4 in one process, to float
    rounding: the same windows, the averaged gradient of the whole batch, all-reduced
    losses. Tolerance: 1e-5 relative (sums in another order)."""
    one = LanguageModelTrainer(no_dropout(epochs=1), tmp_path / "one", device="cpu",
                               corpus=tiny_corpus(), progress=False)
    one.fit()
    a = read_log(tmp_path / "one")
    for folder in ("plain", "sliced"):  # and with 2 accumulated slices in each process
        b = read_log(two_processes / folder)
        assert [r["step"] for r in a] == [r["step"] for r in b]
        assert [r["tokens"] for r in a] == [r["tokens"] for r in b]
        for key in ("train_loss", "val_loss"):
            assert [r[key] for r in b] == pytest.approx([r[key] for r in a], rel=1e-5), key
        assert [r["world_size"] for r in b] == [2] and a[0]["world_size"] == 1


def test_a_stopped_two_process_run_resumes_to_the_bit(two_processes):
    weights = torch.load(two_processes / "weights.pt", weights_only=True)
    for name, w in weights["whole"].items():
        assert torch.equal(w, weights["resumed"][name]), name
    a, b = read_log(two_processes / "whole"), read_log(two_processes / "part")
    assert [r["train_loss"] for r in a] == [r["train_loss"] for r in b]
    assert [r["val_loss"] for r in a] == [r["val_loss"] for r in b]
    ranks = [json.loads((two_processes / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1] and ranks[0]["world"] == 2
    state = load_checkpoint(two_processes / "part" / "last.pt")
    assert state["world_size"] == 2 and len(state["ranks"]) == 2
    # each process's own dropout stream and carried state are kept apart
    assert not torch.equal(state["ranks"][0]["rng_cpu"], state["ranks"][1]["rng_cpu"])
    assert state["ranks"][0]["hidden"][0][0].shape[1] == 2  # 2 of the 4 columns


def test_a_two_process_checkpoint_refuses_one_process(two_processes):
    with pytest.raises(CheckpointError, match=r"written by 2 process\(es\).*"
                                              r"--nproc_per_node=2"):
        LanguageModelTrainer(tiny_config(epochs=3, checkpoint_steps=5), two_processes / "part",
                             device="cpu", corpus=tiny_corpus(), progress=False, resume=True)
