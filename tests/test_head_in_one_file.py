"""A new head is one class and one registration.

The head below is written from scratch in this file: a :class:`DistributionHead` with its
own options (each with the rule its values must pass), its own scores and its own FLOP
model, inheriting nothing from another head. Registered with one call
(``register_head(LowRankHead)``), it is then taken by every consumer of heads without an
edit anywhere else: ``build_head`` and the listing of heads, the FLOP model (checked against
PyTorch's own counter), the tutorial config and the rows of every table that lists the
heads (``cpu-scale``, ``gpu-small``, ``laptop-lm``: built from the registry when read), a
language model that trains, resumes bit for bit, evaluates and has the rank of its
log-probabilities measured, the translation models (LSTM and Transformer) that train with
it and translate, a one-row ``reproduce`` with its ``report``, the planner's dry run, the
figures' colours, ``bench heads``, ``params`` and the reference page's generators. Its
module stands in for a new file of ``drillbook/heads/``; its registration for the line in
``PACKAGE_HEADS``; the fixture unregisters it after each test.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from test_nmt import tiny_corpus as tiny_parallel
from test_train import tiny_corpus
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from drillbook.analysis import head_flops, rank_of
from drillbook.cli import main
from drillbook.configs import (
    DataConfig,
    HeadConfig,
    ModelConfig,
    apply_overrides,
    get_config,
    get_nmt_config,
    list_configs,
)
from drillbook.errors import ConfigError
from drillbook.experiments import (
    TABLES,
    plot_curves,
    render_report,
    reproduce,
    validate_result,
)
from drillbook.heads import (
    HEADS,
    DistributionHead,
    Features,
    MixtureHead,
    TiedHead,
    build_head,
    register_head,
    unregister_head,
)
from drillbook.heads.flops import FlopSize, HeadFlops
from drillbook.nmt.batching import make_batches
from drillbook.nmt.decode import beam_search, greedy_decode, translate_pairs
from drillbook.plotting import HEAD_COLORS, derived_color, head_color, head_kind
from drillbook.train import (
    LanguageModelTrainer,
    NMTTrainer,
    evaluate,
    has_checkpoint,
    load_run,
    read_log,
)
from drillbook.train.lm import split_stream
from drillbook.validation import BOOLEAN, POSITIVE_INT

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parent.parent
V, D, R = 11, 8, 3


class LowRankHead(DistributionHead):
    """A softmax over scores of rank ``r``: ``p(w | h) ∝ exp(u_w · (A h) + b_w)``.

    ``A`` (``project``, ``(r, d_h)``) maps the context to ``r`` numbers, ``U`` (``words``,
    ``(V, r)``) scores every word from them, ``b`` (``bias``) is a per-word bias. The
    log-probability matrix of any contexts then has rank at most ``r + 2`` (``U A h``, the
    bias, the normaliser). Dedicated parameters ``r d_h + V r + V``.

    Args:
        vocab_size, d_hidden: as for every head.
        rank: ``r``, a positive integer (default 16).
        bias: learn ``b`` (default ``True``).
    """

    kind = "lowrank"
    options: ClassVar[dict] = {"rank": POSITIVE_INT, "bias": BOOLEAN}
    tiny: ClassVar[dict] = {"rank": R}
    tutorial: ClassVar[dict] = {"rank": 32}
    cpu_scale: ClassVar[dict] = {"": (), "-64": ("head.options.rank=64",)}

    def __init__(self, vocab_size: int, d_hidden: int, *, rank: int = 16,
                 bias: bool = True) -> None:
        super().__init__(vocab_size, d_hidden)
        self.rank = self.check_option("rank", rank)
        self.project = nn.Parameter(torch.empty(self.rank, d_hidden).uniform_(-0.1, 0.1))
        self.words = nn.Parameter(torch.empty(vocab_size, self.rank).uniform_(-0.1, 0.1))
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if self.check_option(
            "bias", bias) else None

    @classmethod
    def _flops(cls, size: FlopSize, options: dict) -> HeadFlops:
        n, r = size.tokens, options["rank"]
        scores = 2 * n * size.vocab_size * r
        return HeadFlops(label=0, context=2 * n * size.d_hidden * r, scores=scores,
                         eval_label=0, decode=scores, score_values=n * size.vocab_size)

    def _log_prob(self, features: Tensor | Features) -> Tensor:
        context = F.linear(self._hidden(features), self.project)
        return torch.log_softmax(F.linear(context, self.words, self.bias), dim=-1)


def dedicated(vocab_size: int, d_hidden: int, rank: int) -> int:
    """The head's own parameters at these sizes: ``A``, ``U`` and ``b``."""
    return rank * d_hidden + vocab_size * rank + vocab_size


@pytest.fixture
def lowrank():
    """The head registered with one call, and unregistered after the test."""
    before = {name: list(table) for name, table in TABLES.items()}
    register_head(LowRankHead)
    yield before
    unregister_head("lowrank")
    assert {name: list(table) for name, table in TABLES.items()} == before


def test_it_is_built_and_listed_by_name(lowrank, capsys):
    head = build_head("lowrank", vocab_size=V, d_hidden=D, rank=R)
    assert isinstance(head, LowRankHead) and list(HEADS)[-1] == "lowrank"
    assert head.param_counts().dedicated == dedicated(V, D, R)
    assert head.param_counts().shared == 0
    torch.testing.assert_close(head.log_prob(torch.randn(4, D)).logsumexp(-1), torch.zeros(4))
    with pytest.raises(ConfigError, match="the 'lowrank' head's option rank must be a "
                                          "positive integer, got 0"):
        build_head("lowrank", vocab_size=V, d_hidden=D, rank=0)
    assert main(["heads"]) == 0
    assert "lowrank  A softmax over scores of rank" in capsys.readouterr().out


def test_the_flop_model_counts_what_pytorch_counts(lowrank):
    head = build_head("lowrank", vocab_size=V, d_hidden=D, rank=R)
    features, target = torch.randn(5, 3, D), torch.randint(0, V, (5, 3))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        head.loss(features, target)
    model = head_flops("lowrank", vocab_size=V, d=D, tokens=15, rank=R)
    assert counter.get_total_flops() == model.train_forward == 2 * 15 * (D * R + R * V)


def test_every_table_that_lists_the_heads_has_its_rows(lowrank):
    """``cpu-scale`` has the rows the class declares, ``gpu-small`` and ``laptop-lm`` take
    them from there (each on its recipe), and every other row of every table is as it was
    before the head was registered."""
    assert "tutorial/ptb-lowrank" in list_configs("language-model")
    assert get_config("tutorial/ptb-lowrank").head == HeadConfig("lowrank", {"rank": 32})
    ours = {name: [r for r in table if r.config == "tutorial/ptb-lowrank"]
            for name, table in TABLES.items()}
    assert {name: [r.name for r in rows] for name, rows in ours.items() if rows} == {
        table: ["lowrank", "lowrank-64"] for table in ("cpu-scale", "gpu-small", "laptop-lm")}
    for name, table in TABLES.items():
        assert [r for r in table if r not in ours[name]] == lowrank[name], name
    for name in ("cpu-scale", "gpu-small", "laptop-lm"):
        table = TABLES[name]
        tied, row = table.row("tied"), table.row("lowrank-64")
        assert row.overrides == (*tied.overrides[:1], "head.options.rank=64",
                                 *tied.overrides[1:])  # the table's recipe, the row's rank
        assert row.resolve().head.options == {"rank": 64}
        assert table.baseline_of("lowrank") == "tied"


def lm_config():
    """The head's tutorial config at a tiny size, on the tiny corpus."""
    config = get_config("tutorial/ptb-lowrank")
    config.name, config.data = "test/lowrank", DataConfig("tiny")
    config.model = ModelConfig(emsize=D, nhid=6, nlayers=2, dropout=0.1, dropouth=0.1,
                               dropouti=0.1, dropoute=0.1, wdrop=0.1)
    config.head.options = {"rank": R}
    t = config.train
    t.batch_size, t.eval_batch_size, t.test_batch_size, t.bptt = 4, 2, 2, 6
    t.variable_bptt, t.lr, t.epochs, t.nonmono = False, 5.0, 2, 1
    t.checkpoint_minutes, t.max_batches_per_epoch, t.max_eval_tokens = 1e6, None, None
    return config


def trainer(run: Path, **kw) -> LanguageModelTrainer:
    return LanguageModelTrainer(lm_config(), run, device="cpu", corpus=tiny_corpus(),
                                progress=False, **kw)


def test_a_language_model_trains_resumes_evaluates_and_has_its_rank_measured(lowrank,
                                                                             tmp_path):
    ref = trainer(tmp_path / "ref")
    head = ref.model.head
    assert isinstance(head, LowRankHead) and head.rank == R
    before = {n: p.detach().clone() for n, p in head.named_parameters()}
    assert ref.fit().reason == "done"
    assert all(not torch.equal(p, before[n]) for n, p in head.named_parameters())
    # stopped mid-way with a checkpoint, then resumed: the same run, bit for bit
    assert trainer(tmp_path / "split").fit(max_steps=3).reason == "steps"
    resumed = trainer(tmp_path / "split", resume=has_checkpoint(tmp_path / "split"))
    assert resumed.step == 3 and resumed.fit().reason == "done"
    for (name, a), b in zip(ref.model.state_dict().items(),
                            resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert [r["val_loss"] for r in read_log(tmp_path / "ref")] == [
        r["val_loss"] for r in read_log(tmp_path / "split")]
    # the run read back from its folder evaluates to the NLL of its own log-probabilities
    config, model, corpus = load_run(tmp_path / "split", device="cpu", corpus=tiny_corpus())
    assert isinstance(model.head, LowRankHead)
    stream = split_stream(config, corpus, "test")
    loss, count = evaluate(model, stream, bptt=config.train.bptt)
    with torch.no_grad():
        out = model(stream[:-1])
        nll = -model.head.log_prob(out.features).gather(-1, stream[1:, :, None]).mean()
    assert count == stream[1:].numel() and loss == pytest.approx(float(nll), rel=1e-5)
    # the rank of its test log-probabilities: r + 2, the ceiling its scores put on it
    ranks = rank_of(model, stream, config.train.bptt, positions=count)
    assert ranks["rank_positions"] == count > R + 2 and len(corpus.vocab) > R + 2
    assert ranks["rank_numpy_tol"] == R + 2 and ranks["rank_tol_1"] <= R + 2


def translation_config(name: str, *overrides: str):
    config = apply_overrides(get_nmt_config(name), [
        "data.min_freq=1", "train.batch_size=4", "train.epochs=1", "train.max_len=8",
        "train.max_eval_pairs=4", *overrides])
    config.head = HeadConfig("lowrank", {"rank": R})
    return config


@pytest.mark.parametrize("name, sizes", [
    ("multi30k/de-en-softmax", ("model.emb_size=8", "model.hidden=8")),
    ("multi30k/de-en-transformer-tied", ("model.d_model=16", "model.nhead=2",
                                         "model.layers=1", "model.d_ff=32", "train.warmup=3"))])
def test_the_translation_models_train_with_it_and_translate(lowrank, tmp_path, name, sizes):
    corpus = tiny_parallel()
    t = NMTTrainer(translation_config(name, *sizes), tmp_path / "run", device="cpu",
                   corpus=corpus, progress=False)
    head = t.model.head
    assert isinstance(head, LowRankHead) and head.rank == R
    before = {n: p.detach().clone() for n, p in head.named_parameters()}
    record = t.fit().record
    assert record["epoch"] == 1 and record["val_bleu"] >= 0
    assert all(not torch.equal(p, before[n]) for n, p in head.named_parameters())
    config, model, (src_vocab, tgt_vocab) = load_run(tmp_path / "run", device="cpu")
    assert isinstance(model.head, LowRankHead) and config.head.kind == "lowrank"
    pairs = corpus.split("valid")
    hyps = translate_pairs(model, pairs, src_vocab, tgt_vocab, max_len=8)
    wide = translate_pairs(model, pairs, src_vocab, tgt_vocab, beam=3, max_len=8)
    assert len(hyps) == len(wide) == len(pairs)
    assert all(len(h) <= 8 and not {"<pad>", "<bos>", "<eos>"} & set(h) for h in hyps + wide)
    (batch,) = make_batches(pairs, src_vocab, tgt_vocab, batch_size=len(pairs), shuffle=False)
    decode = dict(bos=tgt_vocab.bos_id, eos=tgt_vocab.eos_id, max_len=8)
    greedy = greedy_decode(model, batch.src, batch.src_lengths, **decode)
    assert beam_search(model, batch.src, batch.src_lengths, beam=1, **decode) == greedy


TINY_LM = ["model.emsize=12", "model.nhid=16", "train.batch_size=4", "train.bptt=6",
           "train.eval_batch_size=2", "train.test_batch_size=2", "train.epochs=1",
           f"head.options.rank={R}"]


def test_a_one_row_reproduce_and_its_report(lowrank, tmp_path, capsys):
    """Its ``cpu-scale`` row, reproduced on the tiny corpus: a valid result file whose rank
    is the head's ceiling, and a report that shows it."""
    out, runs = tmp_path / "results", tmp_path / "runs"
    (path,) = reproduce("cpu-scale", rows=["lowrank"], out=out, runs=runs,
                        overrides=TINY_LM, corpus=tiny_corpus(), device="cpu", progress=False)
    doc = json.loads(path.read_text())
    assert path == out / "cpu-scale" / "lowrank.json" and validate_result(doc) == []
    assert doc["status"] == "done" and doc["config"]["head"] == {
        "kind": "lowrank", "options": {"rank": R}}
    assert doc["metrics"]["rank_numpy_tol"] == R + 2
    assert (runs / "cpu-scale" / "lowrank" / "best.pt").exists()
    assert main(["report", "--results", str(out)]) == 0
    report = capsys.readouterr().out
    assert "| lowrank | `tutorial/ptb-lowrank` |" in report
    assert report == render_report(out) + "\n"


@pytest.mark.slow
def test_the_dry_run_sizes_its_row(lowrank, monkeypatch, capsys):
    if not (Path(os.environ.get("DRILLBOOK_DATA", "/nonexistent")) / "ptb").is_dir():
        pytest.skip("the dry run sizes its rows from PTB: set DRILLBOOK_DATA")
    # the dry run of its row beside the baseline it divides by (restored after the test)
    table = TABLES["cpu-scale"]
    monkeypatch.setitem(TABLES, "cpu-scale", dataclasses.replace(
        table, rows=(table.row("tied"), table.row("lowrank"))))
    assert main(["reproduce", "cpu-scale", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "\nlowrank " in out and "\ntied " in out and "step model: a =" in out


def test_the_figures_give_it_a_colour_of_its_own(lowrank):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    assert head_kind("ptb-lowrank-2") == "lowrank"
    assert HEAD_COLORS["lowrank"] == head_color("lowrank") == derived_color("lowrank")
    assert head_color("lowrank") != head_color("tied")
    fig, ax = plt.subplots()
    curve = [{"epoch": 1, "val_ppl": 300.0}, {"epoch": 2, "val_ppl": 250.0}]
    plot_curves([{"row": "lowrank", "curve": curve}, {"row": "tied", "curve": curve}], ax=ax)
    lines = {line.get_label(): to_hex(line.get_color()) for line in ax.get_lines()}
    assert lines == {"lowrank": head_color("lowrank"), "tied": head_color("tied")}
    plt.close(fig)


def test_bench_heads_times_it(lowrank, tmp_path):
    out = tmp_path / "bench.json"
    assert main(["bench", "heads", "--heads", "lowrank", "--d", "8", "--tokens", "16",
                 "--repeats", "1", "--warmup", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["name"] for r in rows] == ["tied", "lowrank"]
    assert rows[1]["param_bytes"] == 4 * dedicated(10_000, 8, 16)  # the default rank
    assert rows[1]["train_ratio"] > 0


def test_params_counts_it(lowrank, capsys):
    assert main(["params", "tutorial/ptb-lowrank", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    d = get_config("tutorial/ptb-tied").model.emsize  # the tutorial's last layer
    assert report["output_layer_dedicated"] == dedicated(report["vocab_size"], d, 32)
    assert report["output_layer_shared"] == 0


def test_the_reference_page_has_its_row_and_its_section(lowrank):
    pytest.importorskip("sphinx")  # the ``book`` extra
    import importlib.util

    spec = importlib.util.spec_from_file_location("sphinx_reference",
                                                  ROOT / "tools" / "sphinx_reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    rows = reference.registry_rows(HEADS, ["is_distribution", "has_logits", "color"], "kind")
    assert rows[-1] == ["``lowrank``", f":py:class:`~{__name__}.LowRankHead`", "yes", "",
                        "``None``"]  # a distribution, without logits (a flag off: blank)
    summary = reference.registry_rows(HEADS, [])[-1][2]
    assert summary.startswith("A softmax over scores of rank")
    assert reference.registry_modules(HEADS)[-1] == (__name__, ["lowrank"])


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
    from drillbook.heads import MoSHead, OutputHead

    class Bare(OutputHead):
        kind = "bare"

    class NoFlops(DistributionHead):
        kind = "noflops"

        def _log_prob(self, features):
            return features

    class WrongOptions(LowRankHead):
        kind = "wrong-options"
        options = ("bias", "scale")

    class NotAMixture(LowRankHead):
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
    register_head(LowRankHead)
    try:
        assert register_head(LowRankHead) is LowRankHead  # the same class: no change
        assert register_head(_NoKind, replace=True) is _NoKind
        assert HEADS["tied"] is _NoKind
    finally:
        register_head(TiedHead, replace=True)
        unregister_head("lowrank")
    assert HEADS["tied"] is TiedHead and "lowrank" not in HEADS
