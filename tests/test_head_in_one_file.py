"""A new head is one class and one registry line.

The head below is written in this file, registered with one line
(``register_head(ScaledTiedHead)``), and then every consumer of heads takes it without an
edit anywhere else: ``build_head`` and the listing of heads, the FLOP model (checked against
PyTorch's own counter), the tutorial config and the ``cpu-scale`` row, the planner's dry run,
the figures' colours, ``bench heads``, ``params``, the reference page's generators, and a real
training step of a tiny language model. Its module stands in for a new file of
``drillbook/heads/``; its registration for the line in ``PACKAGE_HEADS``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from drillbook.analysis import head_flops
from drillbook.cli import main
from drillbook.configs import DataConfig, HeadConfig, ModelConfig, get_config, list_configs
from drillbook.data import load_corpus_from_files
from drillbook.errors import ConfigError
from drillbook.experiments import TABLES, plot_curves
from drillbook.experiments import tables as tables_module
from drillbook.heads import (
    HEADS,
    Features,
    MixtureHead,
    TiedHead,
    build_head,
    register_head,
    unregister_head,
)
from drillbook.plotting import HEAD_COLORS, derived_color, head_color, head_kind
from drillbook.train import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
V, D = 11, 8


class ScaledTiedHead(TiedHead):
    """A tied softmax with a learned temperature: ``p ∝ exp(s (E h + b))``.

    One scalar ``s`` (``scale``, initialised to 1) on top of the tied head; FLOPs, options
    and everything else as :class:`~drillbook.heads.TiedHead`.
    """

    kind = "scaled"

    def __init__(self, vocab_size: int, d_hidden: int, embedding=None, *,
                 bias: bool = True) -> None:
        super().__init__(vocab_size, d_hidden, embedding, bias=bias)
        self.scale = nn.Parameter(self.embedding_weight.new_ones(()))

    def _logits(self, features):
        return self.scale * super()._logits(features)

    def logits_subset(self, features, ids):
        return self.scale * super().logits_subset(features, ids)


@pytest.fixture
def scaled(monkeypatch):
    """The head registered (one line), and the tables rebuilt as importing the package
    builds them: a head of the package is registered before they are, this one after."""
    register_head(ScaledTiedHead)
    monkeypatch.setitem(TABLES, "cpu-scale", dataclasses.replace(
        TABLES["cpu-scale"], rows=tuple(tables_module._cpu_scale())))
    yield ScaledTiedHead
    unregister_head("scaled")


def test_it_is_built_and_listed_by_name(scaled, capsys):
    head = build_head("scaled", vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D))
    assert isinstance(head, ScaledTiedHead) and list(HEADS)[-1] == "scaled"
    assert head.param_counts().dedicated == V + 1  # the bias and the scale
    assert main(["heads"]) == 0
    assert "scaled  A tied softmax with a learned temperature" in capsys.readouterr().out


def test_the_flop_model_counts_what_pytorch_counts(scaled):
    head = build_head("scaled", vocab_size=V, d_hidden=D, embedding=nn.Embedding(V, D))
    features, target = torch.randn(5, 3, D), torch.randint(0, V, (5, 3))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        head.loss(features, target)
    model = head_flops("scaled", vocab_size=V, d=D, tokens=15)
    assert counter.get_total_flops() == model.train_forward == 2 * 15 * V * D


def test_it_has_a_tutorial_config_a_cpu_scale_row_and_a_dry_run(scaled, capsys):
    assert "tutorial/ptb-scaled" in list_configs("language-model")
    assert get_config("tutorial/ptb-scaled").head == HeadConfig("scaled", {})
    rows = [r for r in TABLES["cpu-scale"] if r.config == "tutorial/ptb-scaled"]
    assert [r.name for r in rows] == ["scaled"]
    if not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir():
        pytest.skip("the dry run sizes its rows from PTB: set DRILLBOOK_DATA")
    # (restored by the fixture) the dry run of this row beside the baseline it divides by
    TABLES["cpu-scale"] = dataclasses.replace(TABLES["cpu-scale"], rows=tuple(
        r for r in tables_module._cpu_scale() if r.name in ("tied", "scaled")))
    assert main(["reproduce", "cpu-scale", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "\nscaled " in out and "step model: a =" in out


def test_the_figures_give_it_a_colour_of_its_own(scaled):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    assert head_kind("ptb-scaled-2") == "scaled"
    assert HEAD_COLORS["scaled"] == head_color("scaled") == derived_color("scaled")
    assert head_color("scaled") != head_color("tied")
    fig, ax = plt.subplots()
    curve = [{"epoch": 1, "val_ppl": 300.0}, {"epoch": 2, "val_ppl": 250.0}]
    plot_curves([{"row": "scaled", "curve": curve}, {"row": "tied", "curve": curve}], ax=ax)
    lines = {line.get_label(): to_hex(line.get_color()) for line in ax.get_lines()}
    assert lines == {"scaled": head_color("scaled"), "tied": head_color("tied")}
    plt.close(fig)


def test_bench_heads_times_it(scaled, tmp_path):
    out = tmp_path / "bench.json"
    assert main(["bench", "heads", "--heads", "scaled", "--d", "8", "--tokens", "16",
                 "--repeats", "1", "--warmup", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["name"] for r in rows] == ["tied", "scaled"]
    assert rows[1]["param_bytes"] == 4 * (10_000 + 1) and rows[1]["train_ratio"] > 0


def test_params_counts_it(scaled, capsys):
    assert main(["params", "tutorial/ptb-scaled", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    tied = get_config("tutorial/ptb-tied")
    assert report["output_layer_dedicated"] == report["vocab_size"] + 1
    assert report["output_layer_shared"] == report["vocab_size"] * tied.model.emsize


def test_the_reference_page_has_its_row_and_its_section(scaled):
    pytest.importorskip("sphinx")  # the ``book`` extra
    import importlib.util

    spec = importlib.util.spec_from_file_location("sphinx_reference",
                                                  ROOT / "tools" / "sphinx_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    rows = reference.registry_rows(HEADS, ["is_distribution", "has_logits", "color"], "kind")
    assert rows[-1] == ["``scaled``", f":py:class:`~{__name__}.ScaledTiedHead`", "yes", "yes",
                        "``None``"]
    summary = reference.registry_rows(HEADS, [])[-1][2]
    assert summary.startswith("A tied softmax with a learned temperature")
    assert reference.registry_modules(HEADS)[-1] == (__name__, ["scaled"])


def test_a_language_model_takes_a_training_step_with_it(scaled, tmp_path):
    config = get_config("tutorial/ptb-scaled")
    config.name, config.data = "test/scaled", DataConfig("tiny")
    config.model = ModelConfig(emsize=D, nhid=6, nlayers=2, dropout=0.1, dropouth=0.1,
                               dropouti=0.1, dropoute=0.1, wdrop=0.1)
    t = config.train
    t.batch_size, t.eval_batch_size, t.bptt, t.variable_bptt = 2, 2, 5, False
    t.lr, t.checkpoint_minutes, t.max_eval_tokens = 1.0, 1e6, None
    corpus = load_corpus_from_files({s: DATA / "tiny" / f"{s}.txt"
                                     for s in ("train", "valid", "test")}, name="tiny")
    trainer = Trainer(config, tmp_path / "run", device="cpu", corpus=corpus, progress=False)
    head = trainer.model.head
    assert isinstance(head, ScaledTiedHead)
    before = head.scale.detach().clone()
    assert trainer.fit(max_steps=1).reason == "steps" and trainer.step == 1
    assert not torch.equal(head.scale.detach(), before)  # its own parameter was trained
    assert head.loss(Features(torch.randn(3, D)), torch.tensor([0, 1, 2])).isfinite()


# ------------------------------------------------------------------ what registration checks
class _NoKind(TiedHead):
    kind = TiedHead.kind  # the tied head's: taken


def _refusal(cls, **kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        register_head(cls, **kwargs)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("cannot register the head: ") or "is taken by" in message
    return message


def test_registration_names_what_a_head_lacks():
    from drillbook.heads import DistributionHead, MoSHead, OutputHead

    class Bare(OutputHead):
        kind = "bare"

    class NoFlops(DistributionHead):
        kind = "noflops"

        def _log_prob(self, features):
            return features

    class WrongOptions(ScaledTiedHead):
        kind = "wrong-options"
        options = ("bias", "scale")

    class NotAMixture(ScaledTiedHead):
        kind = "not-a-mixture"
        is_mixture = True

    class NoComponents(MoSHead):
        kind = "no-components"
        components = MixtureHead.components

    assert "derive from exactly one of DistributionHead" in _refusal(Bare)
    assert "NoFlops declares no FLOP model: give it the classmethod _flops" in _refusal(NoFlops)
    assert "options ['bias', 'scale'] must list exactly" in _refusal(WrongOptions)
    assert "is_mixture is True: a flag of the type MixtureHead" in _refusal(NotAMixture)
    assert "is a MixtureHead but does not implement components" in _refusal(NoComponents)
    assert "is not a subclass of drillbook.heads.OutputHead" in _refusal(dict)
    assert "head kind 'tied' is taken by TiedHead" in _refusal(_NoKind)
    assert list(HEADS)[-1] == "vmf"  # nothing was registered
    with pytest.raises(ConfigError, match="unknown head kind 'bare'"):
        unregister_head("bare")


def test_a_head_registered_twice_or_replaced():
    register_head(ScaledTiedHead)
    try:
        assert register_head(ScaledTiedHead) is ScaledTiedHead  # the same class: no change
        assert register_head(_NoKind, replace=True) is _NoKind
        assert HEADS["tied"] is _NoKind
    finally:
        register_head(TiedHead, replace=True)
        unregister_head("scaled")
    assert HEADS["tied"] is TiedHead and "scaled" not in HEADS
