"""The book's tables, declared row by row (:func:`declarations`): the papers' tables, the
CPU-sized tables and the tables of the GPU windows' and laptops' plans, with the settings
each shares (epochs, baseline, rank, paper columns, plans)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ...heads.registry import HEADS, language_model_refusal
from .records import PAPER_RANKS, PAPER_SPEED, Plan, Row, Table

__all__ = ["declarations"]


def _table4() -> list[Row]:
    """DRILL Table 4. Its numbers are after fine-tuning; Table 1 gives the tied and the
    4-layer DRILL models before it too."""
    drill, t4 = "ptb/awd-lstm-drill", "drill:table4:"
    layers = {1: "drill-1-layer", 2: "drill-2-layers", 3: "drill-3-layers", 4: "drill-4-layers"}
    return [
        Row("full-softmax", "ptb/awd-lstm-full-softmax", paper_finetuned=t4 + "full-softmax"),
        Row("tied", "ptb/awd-lstm", paper=("drill:table1:awd-lstm-wo-finetune",),
            paper_finetuned=t4 + "weight-tying"),
        Row("bilinear", "ptb/awd-lstm-bilinear", paper_finetuned=t4 + "bilinear"),
        Row("dual", "ptb/awd-lstm-dual", paper_finetuned=t4 + "dual"),
        *[Row(f"drill-{k}", drill, (f"head.options.depth={k}",),
              paper=("drill:table1:awd-lstm-drill-wo-finetune",) if k == 4 else (),
              paper_finetuned=t4 + layers[k]) for k in (1, 2, 3, 4)],
        Row("drill-4-residual-previous", drill, ("head.options.residual_previous=true",),
            paper_finetuned=t4 + "residuals-between-layers"),
        Row("drill-4-standard-dropout", drill, ("head.options.dropout_kind=standard",),
            paper_finetuned=t4 + "no-variational-dropout"),
        # footnote 6: the paper's bilinear and dual rows used dropout and residual
        # connections to E and h_t where validation improved (which, it does not say);
        # these rows switch them all on, with DRILL's label dropout (0.6, variational)
        Row("bilinear-dropout-residual", "ptb/awd-lstm-bilinear", (
            "head.options.dropout=0.6", "head.options.residual=true"),
            paper_finetuned=t4 + "bilinear"),
        Row("dual-dropout-residual", "ptb/awd-lstm-dual", (
            "head.options.dropout=0.6", "head.options.residual_label=true",
            "head.options.residual_context=true"), paper_finetuned=t4 + "dual"),
    ]


def _drill_main() -> list[Row]:
    """DRILL Tables 1 (PTB) and 2 (WikiText-2): before and after fine-tuning, and with
    dynamic evaluation (AWD-LSTM's dynamic-evaluation row is Krause et al.'s)."""
    rows = []
    for corpus, table in (("ptb", "table1"), ("wt2", "table2")):
        for head, suffix in (("awd-lstm", ""), ("drill", "-drill")):
            key = f"drill:{table}:awd-lstm{suffix}"
            rows.append(Row(f"{corpus}-{head}", f"{corpus}/awd-lstm{suffix}",
                            paper=(f"{key}-wo-finetune",), paper_finetuned=key,
                            paper_dynamic=f"{key}-dynamic-eval",
                            baseline=f"{corpus}-awd-lstm"))
    return rows


def _mixtures() -> list[Row]:
    """MoS and DOC (DOC Tables 7 and 8), and two rows of DOC's Table 3 ablation."""
    return [
        Row("ptb-mos", "ptb/awd-lstm-mos", paper_finetuned="doc:table7:awd-lstm-mos",
            paper_dynamic="drill:table1:awd-lstm-mos-dynamic-eval"),
        Row("ptb-doc", "ptb/awd-lstm-doc", paper_finetuned="doc:table7:awd-lstm-doc"),
        # "the implementation of Yang et al. (2018) with identical hyperparameters except
        # for i3": MoS with 20 experts from the last layer, not DOC's settings
        Row("ptb-doc-i3-20", "ptb/awd-lstm-mos", ("head.options.n_experts=20",),
            paper_finetuned="doc:table3:i3-20"),
        Row("ptb-doc-lambda-0", "ptb/awd-lstm-doc", ("head.options.cv_weight=0.0",),
            paper_finetuned="doc:table3:i3-15-i2-5-lambda-0"),
        Row("wt2-mos", "wt2/awd-lstm-mos", paper_finetuned="doc:table8:awd-lstm-mos",
            paper_dynamic="drill:table2:awd-lstm-mos-dynamic-eval"),
        Row("wt2-doc", "wt2/awd-lstm-doc", paper_finetuned="doc:table8:awd-lstm-doc"),
    ]


def _rank() -> list[Row]:
    """The rank of the PTB test log-probability matrix (main runs; not fine-tuned): the
    DRILL authors' code (tol = 1), the DRILL paper's text, DOC Table 5."""
    return [
        Row("tied", "ptb/awd-lstm", paper=("drill-repo:rank:softmax",
                                           "drill:sec4.1.1:rank-awd-lstm",
                                           "doc:table5:awd-lstm")),
        Row("drill", "ptb/awd-lstm-drill", paper=("drill-repo:rank:drill",
                                                  "drill:sec4.1.1:rank-drill")),
        Row("mos", "ptb/awd-lstm-mos", paper=("drill-repo:rank:mos", "drill:sec4.1.1:rank-mos",
                                              "doc:table5:awd-lstm-mos")),
        Row("doc", "ptb/awd-lstm-doc", paper=("doc:table5:awd-lstm-doc",)),
    ]


def _cpu_scale() -> list[Row]:
    """Every head that can end a language model on the tutorial model, one budget (the
    table's epochs): the rows each head class declares
    (:attr:`~drillbook.heads.OutputHead.cpu_scale`, e.g. DRILL at three depths, the dual
    head at two learning rates), in the registry's order."""
    return [Row(name, f"tutorial/ptb-{kind}", overrides)
            for kind, cls in HEADS.items() if language_model_refusal(cls) is None
            for name, overrides in cls.cpu_scale_rows().items()]


def _gpu_ptb() -> list[Row]:
    """DRILL's and the mixtures' PTB models at the papers' size and settings, trained the
    same number of epochs (the papers plot their curves by epoch), not fine-tuned."""
    return [Row("tied", "ptb/awd-lstm", paper=("drill:table1:awd-lstm-wo-finetune",)),
            Row("drill-4", "ptb/awd-lstm-drill",
                paper=("drill:table1:awd-lstm-drill-wo-finetune",)),
            Row("mos-15", "ptb/awd-lstm-mos"),
            Row("doc", "ptb/awd-lstm-doc")]


#: the translation rows trained to their BLEU plateau: validation BLEU up by less than 0.5%
#: over the last 4 epochs. Greedy BLEU on Multi30k's validation set moves by about a
#: point (near 3%) from one epoch to the next at the tutorial size, so a short window
#: reads one dip as the plateau: under "0.5% over 3 epochs" the laptop-nmt Transformer
#: with the dual head (seed 1) stopped after its 19th epoch at 36.41, and continued went
#: on to 38.05 at its 24th. The window is longer and the tolerance the same: under "1%
#: over 4 epochs" the Transformer with the DRILL head would have stopped after its 22nd
#: epoch at 36.96, where it went on to 37.97.
BLEU_PLATEAU = ("train.plateau_epochs=4", "train.plateau_tolerance=0.005")


def _gpu_multi30k() -> list[Row]:
    """The translation heads of the joint-embedding and vMF chapters on the whole of
    Multi30k (de-en): softmax, tied softmax, bilinear, dual, DRILL, and NLLvMF with its
    regularisers, with tied decoder inputs for the best of them; each trained to its
    BLEU plateau (:data:`BLEU_PLATEAU`)."""
    return [Row(name, f"multi30k/de-en-{config}", BLEU_PLATEAU) for name, config in (
        ("softmax", "softmax"), ("softmax-tied", "softmax-tied"), ("bilinear", "bilinear"),
        ("dual", "dual"), ("drill", "drill"), ("vmf-nllvmf", "vmf"), ("vmf-reg1", "vmf-reg1"),
        ("vmf-reg2", "vmf-reg2"), ("vmf-reg2-tied", "vmf-reg2-tied"))]


def _laptop_nmt_transformer() -> list[Row]:
    """DRILL Table 5's three systems at a size a CPU trains
    (``multi30k/de-en-transformer-<head>``: 3 + 3 pre-norm blocks of width 128): the
    Transformer with a weight-tied softmax, with the dual nonlinear mapping and with
    DRILL (2 layers, sigmoid, residual to E, dropout 0.6), on Multi30k de-en, each to its
    BLEU plateau (:data:`BLEU_PLATEAU`). No paper number is attached: Table 5's are for
    Transformer (base) on WMT English-German (``drill:sec4.3:*`` in the paper record)."""
    return [Row(f"transformer-{head}", f"multi30k/de-en-transformer-{head}", BLEU_PLATEAU)
            for head in ("tied", "dual", "drill")]


#: the small recipe trained to its plateau in a window (the ``gpu-small`` plan): the
#: ``cpu-scale`` model (2 x 256 LSTM, 128-d embeddings, PTB's 10,000 words) on whole
#: passes over PTB and the whole validation text, at batch 64 (426 updates an epoch: the
#: small model's step is bound by kernel launches on a GPU, 12.2 ms at batch 32 and 12.4
#: at 64 by the planner's step model, so doubling the tutorial's 32 halves an epoch's
#: time while the learning rate that trains every head stays as tested), stopped by the
#: rule: validation perplexity down by less than 2% over the last 4 epochs, about half a
#: percent an epoch. After the NT-ASGD switch averaging keeps lowering perplexity by
#: about 0.4% an epoch for dozens of epochs (a reduced size of this recipe on a CPU,
#: below: switched at its 15th epoch, then 0.64% to 0.36% an epoch from its 17th to its
#: 25th), so a rule of 0.5% over 3 epochs would run every row to its cap; this one ends a
#: row once its gains fall under about half a percent an epoch. The window is four epochs
#: and not two because one epoch that rises must not end a run that is still falling:
#: under "1% over 2 epochs" a laptop-lm DRILL-4 run (seed 143) stopped after its 11th
#: epoch, its perplexity 205.2, 198.0, 196.1, 197.3 over epochs 8 to 11 (3.5% down two
#: epochs before the stop), where its other seeds ran 18 and 20 epochs.
#: At most GPU_SMALL_EPOCHS epochs.
SMALL_RECIPE = ("train.max_batches_per_epoch=null", "train.max_eval_tokens=null",
                "train.batch_size=64", "train.plateau_epochs=4",
                "train.plateau_tolerance=0.02")
GPU_SMALL_EPOCHS = 60
#: the epochs to plateau the dry run assumes for a gpu-small row no window has trained to
#: its plateau yet, and where the number comes from
GPU_SMALL_PLATEAU = 20
GPU_SMALL_PLATEAU_NOTE = (
    "from a reduced size of the recipe on a CPU (tutorial/ptb-tied at emsize 32, "
    "nhid 64, batch 64, whole passes over the real PTB): its logged validation perplexity "
    "(490 after one epoch, 189 after twenty) met the earlier rule (1% over 2 epochs) "
    "after its 20th epoch; the "
    "small model itself has not been trained to its plateau yet")


def _gpu_small() -> list[Row]:
    """Every ``cpu-scale`` head on the small recipe (:data:`SMALL_RECIPE`), trained to its
    plateau; the plan runs each with three seeds. The dual head at the rate that trains
    (``dual-lr5``)."""
    return [Row(r.name, r.config, (*r.overrides, *SMALL_RECIPE)) for r in _cpu_scale()
            if r.name != "dual"]  # its learning rate fails at this size: dual-lr5 stands in


#: the laptop plans' language-model size: the small recipe (:data:`SMALL_RECIPE`) at
#: 32-d embeddings and a 2 x 64 LSTM, so ``d = 32`` against PTB's ``V = 10,000`` (the
#: bottleneck is real). Chosen from the fused loss's step times on a 2-core CPU, one thread
#: a row (``tools/cpu_step.py``; the rows' CPU seconds per step at batch 64 x 35): the
#: single-softmax heads 106-127 ms (about 55-62 s an epoch), the dual head 281, MoS and
#: DOC about 500 (their 5 softmaxes cost 5 times the output layer). With about 20 epochs to
#: the plateau a single-softmax row takes about 20 minutes on one core and a mixture row
#: about 80; at the tutorial size (128/256) a tied row would take about an hour.
LAPTOP_LM_SIZE = ("model.emsize=32", "model.nhid=64")
LAPTOP_EPOCHS = 60
LAPTOP_PLATEAU = 20
LAPTOP_PLATEAU_NOTE = GPU_SMALL_PLATEAU_NOTE


def _laptop_lm() -> list[Row]:
    """Every language-model head at the laptop size (:data:`LAPTOP_LM_SIZE`) on the small
    recipe, trained to its plateau: the ``gpu-small`` rows (the dual head at the rate that
    trains) and footnote 6's bilinear and dual heads with label dropout and residuals
    (as in ``drill-table4``; the dual one at the rate that trains, its joint space the
    embedding's 32 units, as its residual to ``E`` needs)."""
    rows = [Row(r.name, r.config, (*r.overrides, *LAPTOP_LM_SIZE)) for r in _gpu_small()]
    rows += [Row("bilinear-dropout-residual", "tutorial/ptb-bilinear", (
                 "head.options.dropout=0.6", "head.options.residual=true", *SMALL_RECIPE,
                 *LAPTOP_LM_SIZE)),
             Row("dual-dropout-residual", "tutorial/ptb-dual", (
                 "train.lr=5", "head.options.dropout=0.6", "head.options.d_joint=32",
                 "head.options.residual_label=true", "head.options.residual_context=true",
                 *SMALL_RECIPE, *LAPTOP_LM_SIZE))]
    return rows


#: the laptop plans' translation size: the tutorial's 128 units and its Adam rate (3e-3),
#: on the whole training set and the whole validation set, to the BLEU plateau
LAPTOP_NMT_SIZE = ("model.emb_size=128", "model.hidden=128", "train.lr=0.003",
                   "train.max_eval_pairs=null", *BLEU_PLATEAU)
LAPTOP_NMT_PLATEAU_NOTE = ("the gpu-multi30k plan's rule: no window has trained a "
                           "translation row to its plateau yet")


def _laptop_nmt(names: Sequence[str]) -> list[Row]:
    """The ``gpu-multi30k`` rows ``names`` at the laptop's translation size
    (:data:`LAPTOP_NMT_SIZE`)."""
    rows = {r.name: r for r in _gpu_multi30k()}
    return [Row(n, rows[n].config, (*rows[n].overrides, *LAPTOP_NMT_SIZE)) for n in names]


def _first_updates_nmt() -> list[Row]:
    """The first 400 updates of the laptop's translation model (:data:`LAPTOP_NMT_SIZE`,
    no plateau rule), an epoch being 100 updates and validation BLEU read after each on the
    first 200 validation sentences: the tied and untied softmax, the bilinear head
    ``E W h + b`` and the untied softmax behind a trained context map ``W^T M h + b``
    (:class:`~drillbook.heads.SoftmaxHead`'s ``context_map``), which write the same
    functions as the head without it as a product of two trained matrices."""
    early = ("model.emb_size=128", "model.hidden=128", "train.lr=0.003",
             "train.max_batches_per_epoch=100", "train.max_eval_pairs=200")
    return [Row("softmax-tied", "multi30k/de-en-softmax-tied", early),
            Row("softmax", "multi30k/de-en-softmax", early),
            Row("bilinear", "multi30k/de-en-bilinear", early),
            Row("softmax-mapped", "multi30k/de-en-softmax",
                (*early, "head.options.context_map=true"))]


def _laptop_nmt_table(name: str, rows: Sequence[str], seeds: tuple[int, ...], what: str,
                      baseline: str | None = None,
                      extra: Callable[[], Sequence[Row]] = tuple) -> _Declaration:
    """A laptop translation table of the ``gpu-multi30k`` rows ``rows`` (and the rows
    ``extra()``) and its plan."""
    seeded = "three seeds each" if len(seeds) == 3 else f"{len(seeds)} seed(s)"
    return _declare(name, lambda: (*_laptop_nmt(rows), *extra()), epochs=30, device="cpu",
                    baseline=baseline,
                    plans=(Plan(name, name, seeds=seeds, parallel=2, deadline_minutes=120.0,
                                plateau_epochs=10, plateau_note=LAPTOP_NMT_PLATEAU_NOTE,
                                description=(f"{what} on the whole of Multi30k de-en at 128 "
                                             f"units, each to its BLEU plateau on one CPU "
                                             f"core, {seeded}")),))


def _speed() -> list[Row]:
    """DRILL Table 3 as its Sec. 4.1.1 states it: seconds per epoch (every LM row records
    them; this table needs one epoch per row), each row against the AWD-LSTM of its
    corpus."""
    return [Row(f"{c}-{h}", f"{c}/awd-lstm{s}", paper=(f"drill:sec4.1.1:{c}-{h}-speed",),
                baseline=f"{c}-awd-lstm")
            for c in ("ptb", "wt2")
            for h, s in (("awd-lstm", ""), ("drill", "-drill"), ("mos", "-mos"))]


def _multi30k_vmf() -> list[Row]:
    """vMF Table 1's analogue on Multi30k (de->en): softmax, and NLLvMF with every loss and
    regulariser, with tied decoder inputs for three of them."""
    return [Row("softmax", "multi30k/de-en-softmax"),
            Row("softmax-tied", "multi30k/de-en-softmax-tied"),
            Row("vmf-nllvmf", "multi30k/de-en-vmf"),
            *[Row(f"vmf-{loss}", f"multi30k/de-en-vmf-{loss}")
              for loss in ("reg1", "reg2", "l2", "cosine", "maxmargin")],
            *[Row(f"vmf-{loss}-tied", f"multi30k/de-en-vmf-{loss}-tied")
              for loss in ("reg1", "reg2", "maxmargin")]]


#: a table's name and the function that builds it (:func:`_declare`)
_Declaration = tuple[str, Callable[[], "Table"]]


def _declare(name: str, rows: Callable[[], Iterable[Row]], **settings) -> _Declaration:
    """``name`` and the function that builds its :class:`Table`: its rows read from
    ``rows()`` at each call (the registry's heads as they are then), its ``settings``
    (epochs, baseline, plans, ...) the same objects at every call."""
    return name, lambda: Table(name, tuple(rows()), **settings)


def declarations() -> dict[str, Callable[[], Table]]:
    """Every table, declared whole: name -> the function that builds it. The GPU tables'
    epochs are sized with ``drillbook reproduce TABLE --dry-run`` for a window of about 9
    minutes of an H100/H200, of which the CUDA tests and the cost benchmark take the first
    two and a half: the papers' PTB models side by side, the translation models on the
    whole of Multi30k, and the small models on whole passes over PTB."""
    return dict([
        _declare("drill-table4", _table4, baseline="tied"),
        # DRILL Tables 1 and 2: each row's speed against the AWD-LSTM of its corpus
        _declare("drill-main", _drill_main),
        _declare("mos-doc", _mixtures),
        _declare("rank", _rank, rank=True, baseline="tied", paper_columns=PAPER_RANKS),
        _declare("speed", _speed, paper_columns=PAPER_SPEED),
        # vMF Table 1 and joint-embedding Table 3 analogues on Multi30k (de->en)
        _declare("multi30k-vmf", _multi30k_vmf),
        _declare("multi30k-joint", lambda: (Row(h, f"multi30k/de-en-{c}") for h, c in (
            ("softmax", "softmax"), ("tied", "softmax-tied"), ("bilinear", "bilinear"),
            ("dual", "dual"), ("drill", "drill"))), baseline="tied"),
        # why some translation heads start faster: the first 400 updates of the laptop's
        # translation model, validation BLEU after each 100, with and without a second
        # trained matrix in the output layer
        _declare("first-updates-nmt", _first_updates_nmt, epochs=4, device="cpu",
                 baseline="softmax-tied"),
        # a CPU-sized table: the tests and a first look
        _declare("tutorial", lambda: (Row("tied", "tutorial/ptb-tied"),
                                      Row("drill", "tutorial/ptb-drill")),
                 device="cpu", baseline="tied"),
        # every head at CPU scale, one budget for all: Table 4's ordering, the mixtures'
        # rank and Table 3's speed ratios, small enough for a laptop: 6 epochs of 150
        # updates of 32 x 35 tokens, about one pass over PTB's training text
        _declare("cpu-scale", _cpu_scale, epochs=6, device="cpu", rank=True,
                 rank_positions=2000, baseline="tied"),
        # the tables of a GPU window's plans (drillbook.experiments.run.plans)
        _declare("gpu-ptb", _gpu_ptb, epochs=7, rank=True, rank_positions=4000,
                 baseline="tied",
                 plans=(Plan("gpu-ptb", "gpu-ptb", parallel=4, description=(
                     "tied AWD-LSTM, DRILL-4, MoS-15 and DOC at the papers' size and "
                     "settings on PTB, the same epochs each: curves, rank, frequency bands, "
                     "mixture usage")),)),
        _declare("gpu-multi30k", _gpu_multi30k, epochs=30,
                 plans=(Plan("gpu-multi30k", "gpu-multi30k", parallel=9, description=(
                     "softmax, tied softmax, bilinear, dual, DRILL and the vMF losses on "
                     "the whole of Multi30k de-en, each to its BLEU plateau: BLEU, "
                     "rare-word F1, decoding speed")),)),
        _declare("gpu-small", _gpu_small, epochs=GPU_SMALL_EPOCHS, rank=True,
                 rank_positions=2000, baseline="tied",
                 plans=(Plan("gpu-small", "gpu-small", seeds=(141, 142, 143), parallel=16,
                             deadline_minutes=9.0, sharing="graphs-assumed",
                             plateau_epochs=GPU_SMALL_PLATEAU,
                             plateau_note=GPU_SMALL_PLATEAU_NOTE,
                             description=("every cpu-scale head on the small recipe, each "
                                          "trained to its plateau on whole passes over "
                                          "PTB, three seeds each: the ordering with error "
                                          "bars")),)),
        # the same on a laptop's CPU, a few hours at a time (both cores, a row each)
        _declare("laptop-lm", _laptop_lm, epochs=LAPTOP_EPOCHS, device="cpu",
                 rank=True, rank_positions=2000, baseline="tied",
                 plans=(Plan("laptop-lm", "laptop-lm", seeds=(141, 142, 143), parallel=2,
                             deadline_minutes=120.0, plateau_epochs=LAPTOP_PLATEAU,
                             plateau_note=LAPTOP_PLATEAU_NOTE,
                             description=("every language-model head at d = 32 on whole "
                                          "passes over PTB, each trained to its plateau on "
                                          "one CPU core, three seeds each")),)),
        # the translation heads the same way: the softmax family with three seeds, the
        # vMF losses with one (two tables: a plan gives every row of its table its seeds)
        _laptop_nmt_table("laptop-nmt", ("softmax", "softmax-tied", "bilinear", "dual",
                                         "drill"), (1, 2, 3),
                          "softmax, tied softmax, bilinear, dual and DRILL, and DRILL "
                          "Table 5's Transformer with a tied softmax, the dual mapping and "
                          "DRILL,", baseline="softmax-tied", extra=_laptop_nmt_transformer),
        _laptop_nmt_table("laptop-nmt-vmf", ("vmf-nllvmf", "vmf-reg1", "vmf-reg2",
                                             "vmf-reg2-tied"), (1,),
                          "NLLvMF and its regularisers (reg2 also with tied decoder inputs)"),
    ])
