"""A training step never waits for the device.

On a GPU, Python runs ahead of the kernels it launches until something reads a value back
(``.item()``, ``float(t)``, ``bool(t)``, a data-dependent shape such as boolean indexing or
``nonzero``): then it stops until the device has caught up. A training step that does it
once per step throttles the GPU to Python's pace. Here a ``TorchDispatchMode`` records
every operation the steps between two logging points dispatch, on the CPU, with the heads'
target check on its device path (the one a GPU takes), and finds none that reads back.
"""

from __future__ import annotations

import json

import pytest
import torch
from test_nmt import small
from test_nmt import tiny_corpus as tiny_parallel
from test_train import make, tiny_config
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary

from drillbook.configs import HeadConfig
from drillbook.heads import HEADS
from drillbook.losses import LOSSES as VMF_LOSSES
from drillbook.train import NMTTrainer

#: operations that make the host wait for the device
READS_BACK = {"_local_scalar_dense", "nonzero", "masked_select", "item", "is_nonzero",
              "equal", "allclose", "unique", "_unique2"}
#: outputs (by position) that stay on the CPU whatever the device: a packed sequence's
#: batch sizes
HOST_OUTPUTS = {"_pack_padded_sequence": (1,)}


def bool_indexing(name: str, args) -> bool:
    """``x[mask]`` with a boolean mask: its size depends on the mask's values, so a GPU
    computes ``nonzero`` and waits for it (a CPU's kernel does it inside ``index``)."""
    if name not in ("index", "index_put", "index_put_", "_index_put_impl_"):
        return False
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
               for i in (args[1] if len(args) > 1 else ()) if i is not None)


class Recorder(TorchDispatchMode):
    """Records the operations that read a value back.

    Strict (``on_device=None``), every read-back counts. Otherwise only reads of tensors
    that would live on the accelerator: the ``on_device`` seeds (the model's parameters,
    the batch after ``.to(device)``) and everything computed from them. Tensors that stay
    on the CPU on every device (sequence lengths, the optimiser's step count, a packed
    sequence's batch sizes) are then read for free, as on a GPU."""

    def __init__(self, on_device: WeakTensorKeyDictionary | None = None) -> None:
        super().__init__()
        self.read_back: list[str] = []
        self.on_device = on_device

    def _device(self, tensors) -> bool:
        return self.on_device is None or any(t in self.on_device for t in tensors)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        device = self._device(inputs)
        if device and (name in READS_BACK or bool_indexing(name, args)):
            self.read_back.append(name)
        out = func(*args, **(kwargs or {}))
        if device and self.on_device is not None:
            host = HOST_OUTPUTS.get(name, ())
            for i, t in enumerate(tree_leaves(out)):
                if isinstance(t, torch.Tensor) and i not in host:
                    self.on_device[t] = True
        return out


@pytest.fixture(autouse=True)
def device_path(monkeypatch):
    """Heads check target ids as on an accelerator (no reading back)."""
    monkeypatch.setattr("drillbook.heads.base.reads_back", lambda target: False)


def steps_between_logs(trainer, batches, n: int = 3, on_device=None) -> list[str]:
    """What reads back in ``n`` steps after a first one (warm-up), none of them a
    logging point. The batches are drawn outside: the window lengths come from a CPU
    generator, on the CPU whatever the device, and reading them stops no GPU."""
    trainer.train_step(next(batches))
    drawn = [next(batches) for _ in range(n)]
    with Recorder(on_device) as recorder:
        for batch in drawn:
            trainer.train_step(batch)
    return recorder.read_back


LM_HEADS = [kind for kind, cls in HEADS.items() if cls.is_distribution]


@pytest.mark.parametrize("kind", LM_HEADS)
@pytest.mark.parametrize("accum", [1, 2])
def test_a_language_model_step_reads_nothing_back(tmp_path, kind, accum):
    config = tiny_config(log_interval=1000, accum_steps=accum)
    config.head = HeadConfig(kind, HEADS[kind].tiny_options())
    trainer = make(tmp_path / "run", config)
    assert steps_between_logs(trainer, iter(trainer.batches())) == []
    assert trainer.check_steps() is not None  # ... and one read at the logging point


#: every head a translation model takes (all but those that read an LM encoder's layers),
#: as overrides of the softmax config; the vMF head through its configs, one per loss
NMT_CASES = [("multi30k/de-en-softmax", f"head.kind={kind}",
              *(f"head.options.{k}={json.dumps(v)}" for k, v in cls.tiny_options().items()))
             for kind, cls in HEADS.items() if cls.is_distribution and not cls.reads_layers]
NMT_CASES += [("multi30k/de-en-vmf", f"head.options.loss={loss}") for loss in VMF_LOSSES]


def test_the_translation_cases_cover_every_head_a_translation_model_takes():
    kinds = {small(*case).head.kind for case in NMT_CASES}
    assert kinds == {k for k, cls in HEADS.items() if not cls.reads_layers}
    assert {small(*case).head.options.get("loss") for case in NMT_CASES} - {None} == \
        set(VMF_LOSSES)


@pytest.mark.parametrize("case", NMT_CASES, ids=lambda case: case[1].split("=")[-1])
@pytest.mark.parametrize("accum", [1, 2])
def test_a_translation_step_reads_nothing_back(tmp_path, monkeypatch, accum, case):
    """A translation batch keeps its lengths on the CPU (``TranslationBatch.to``): the
    packed encoder and the token counts read them there. What would be on the GPU (the
    weights, the batch's ids once moved, all computed from them) is never read back."""
    from drillbook.nmt.batching import TranslationBatch

    trainer = NMTTrainer(small(*case, "train.log_interval=1000",
                               f"train.accum_steps={accum}"),
                         tmp_path / "run", device="cpu", corpus=tiny_parallel(),
                         progress=False)
    on_device = WeakTensorKeyDictionary()
    for t in [*trainer.model.parameters(), *trainer.model.buffers()]:
        on_device[t] = True
    moved = TranslationBatch.to

    def to(batch, device):  # a copy, as a move to a GPU makes
        batch = moved(batch, device)
        ids = {name: getattr(batch, name).clone() for name in ("src", "tgt_in", "tgt_out")}
        for t in ids.values():
            on_device[t] = True
        return batch._replace(**ids)

    monkeypatch.setattr(TranslationBatch, "to", to)
    batches = iter(trainer._epoch_batch_list() * 4)
    assert steps_between_logs(trainer, batches, on_device=on_device) == []
    assert trainer.check_steps() is not None


def test_the_checks_still_name_the_step_that_went_wrong(tmp_path, monkeypatch):
    """Deferred, the checks lose nothing: the step whose loss was inf is named, though
    the next steps ran before anyone looked."""
    from drillbook.errors import TrainingDiverged

    trainer = make(tmp_path / "run", tiny_config(log_interval=5))
    head_loss = trainer.model.head.loss

    def inf_at_step_2(*args, **kwargs):
        loss = head_loss(*args, **kwargs)
        return loss * torch.inf if trainer.step == 2 else loss

    monkeypatch.setattr(trainer.model.head, "loss", inf_at_step_2)
    with pytest.raises(TrainingDiverged, match=r"the loss became (inf|nan) at epoch 1, "
                                               r"step 2 .*no checkpoint was written yet"):
        trainer.fit()
