"""Why some translation heads start faster than others: validation BLEU after every 100
updates of the 128-unit Multi30k de-en model (Adam 3e-3, the whole training set, greedy
BLEU on the first 200 validation sentences), one thread, for output layers that differ in
one thing at a time.

    DRILLBOOK_DATA=../shared/data python tools/early_learning.py [--updates 400]

The variants:

* ``softmax``, ``tied``, ``bilinear``: the package's heads as configured
  (``multi30k/de-en-softmax``, ``-softmax-tied``, ``-bilinear``);
* ``bilinear-frozen-identity``: the bilinear head ``E (W h) + b`` with ``W`` fixed at the
  identity, which is the tied head, and only ``W``'s training taken away;
* ``softmax-extra-map``: the untied softmax ``O (M h) + b`` behind one more trained
  ``d x d`` map ``M`` (initialised as the bilinear head's ``W``): the function class of
  the plain softmax, parametrised as a product of two matrices.

If the bilinear head's fast start comes from its trained shared map (a product of two
trained matrices, which Adam moves differently from one), freezing ``W`` makes it as slow
as the tied head and the extra map makes the untied softmax as fast as the bilinear one.
Prints one line per variant: its BLEU after each 100 updates.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import types

import torch
from torch import nn

from drillbook.configs import apply_overrides, get_nmt_config
from drillbook.nmt import load_parallel
from drillbook.train import NMTTrainer

SIZE = ["model.emb_size=128", "model.hidden=128", "train.lr=0.003",
        "train.max_batches_per_epoch=100", "train.max_eval_pairs=200"]
VARIANTS = {"softmax": "softmax", "tied": "softmax-tied", "bilinear": "bilinear",
            "bilinear-frozen-identity": "bilinear", "softmax-extra-map": "softmax"}


def _extra_map(model: nn.Module) -> None:
    """Put one trained ``d x d`` map between the attentional state and the head."""
    model.extra_map = nn.Linear(model.hidden_size, model.hidden_size, bias=False)
    nn.init.uniform_(model.extra_map.weight, -0.1, 0.1)  # as the bilinear head's W
    attend = model._attend

    def mapped(self, out, state):
        features, weights = attend(out, state)
        return self.extra_map(features), weights

    model._attend = types.MethodType(mapped, model)


def _freeze_identity(model: nn.Module) -> None:
    """Fix the bilinear head's ``W`` at the identity: the tied head."""
    weight = model.head.weight
    with torch.no_grad():
        weight.copy_(torch.eye(*weight.shape))
    weight.requires_grad_(False)


class _Variant(NMTTrainer):
    """The trainer with its model changed before its optimiser is made."""

    change = None

    def build(self, state):
        super().build(state)
        if self.change is not None:
            self.change(self.model)
            t = self.config.train
            self.optimizer = torch.optim.Adam(
                [p for p in self.model.parameters() if p.requires_grad], lr=t.lr,
                betas=(0.9, t.adam_beta2))


#: the variants that change the model before training
CHANGES = {"bilinear-frozen-identity": _freeze_identity, "softmax-extra-map": _extra_map}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=400,
                        help="updates per variant (a multiple of 100)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--runs", default=None,
                        help="run folders (default: a temporary folder)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = args.runs or tempfile.mkdtemp(prefix="early-learning-")
    corpus = load_parallel("de", "en", download=True)
    for name in args.variants:
        config = apply_overrides(get_nmt_config(f"multi30k/de-en-{VARIANTS[name]}"),
                                 [*SIZE, f"train.epochs={max(1, args.updates // 100)}"])
        change = CHANGES.get(name)
        trainer_cls = (NMTTrainer if change is None
                       else type(name, (_Variant,), {"change": staticmethod(change)}))
        trainer = trainer_cls(config, f"{runs}/{name}", device="cpu", corpus=corpus,
                              resume=False, progress=False)
        trainer.fit()
        log = [json.loads(line) for line in (trainer.run_dir / "log.jsonl").open()]
        bleu = [f"{r['val_bleu']:.2f}" for r in log if "val_bleu" in r]
        print(f"{name:<26} BLEU after each 100 updates: {', '.join(bleu)}", flush=True)


if __name__ == "__main__":
    main()
