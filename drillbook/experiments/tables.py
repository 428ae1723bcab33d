"""The papers' tables as the package reproduces them: each row a named config, the
overrides that make the row, and the keys of the papers' numbers it is compared with
(:data:`TABLES`); :mod:`~drillbook.experiments.reproduce` trains them and
:mod:`~drillbook.experiments.report` shows them beside the papers'."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..configs import apply_overrides, get_config
from ..papers import paper_number, paper_values
from ..train.tasks import Task, task_of

__all__ = ["CPU_SCALE_EPOCHS", "GPU_EPOCHS", "RANK_TABLES", "STAGES", "TABLES", "Row",
           "baseline_row", "find_row", "paper_params", "records_for"]


#: the stages a row's paper numbers belong to: the main run, fine-tuning, and dynamic
#: evaluation of the fine-tuned run
STAGES = ("main", "finetuned", "dynamic")


@dataclass(frozen=True)
class Row:
    """One row of a paper table: a named config, the overrides that make the row, and the
    keys in :data:`drillbook.papers.RECORD` of the papers' numbers it is compared with.

    Attributes:
        paper: the records compared with the main run (before fine-tuning): DRILL's
            "w/o finetune" rows, speeds, ranks. Several records may be named when they
            give different metrics.
        paper_finetuned: the record compared with the fine-tuned run. A row that names one
            is fine-tuned after its main run, as the papers' authors did.
        paper_dynamic: the record compared with dynamic evaluation (Krause et al., 2018) of
            the fine-tuned run. A row that names one evaluates its fine-tuned ``best.pt``
            dynamically once fine-tuning has ended: the authors' grid searched on the
            validation split, the test split read with the best pair
            (:func:`drillbook.train.dynamic.evaluate_run`).
    """

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    paper: tuple[str, ...] = ()
    paper_finetuned: str | None = None
    paper_dynamic: str | None = None

    @property
    def finetunes(self) -> bool:
        """The paper's number for this row is after fine-tuning, so the row fine-tunes."""
        return self.paper_finetuned is not None

    def paper_keys(self, stage: str = "main") -> tuple[str, ...]:
        """The record keys of one stage, ``"main"``, ``"finetuned"`` or ``"dynamic"``."""
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        if stage == "main":
            return self.paper
        key = self.paper_finetuned if stage == "finetuned" else self.paper_dynamic
        return (key,) if key else ()

    def paper_values(self, stage: str = "main") -> dict[str, float]:
        """The papers' values for one stage, read from the record now (never stored)."""
        return paper_values(self.paper_keys(stage))

    def paper_sources(self) -> list[str]:
        """Where the row's paper numbers are printed, main run first."""
        keys = [k for stage in STAGES for k in self.paper_keys(stage)]
        return list(dict.fromkeys(paper_number(k).source for k in keys))

    @property
    def task(self) -> Task:
        """The task the row trains (:class:`~drillbook.train.tasks.Task`): its config's."""
        return task_of(get_config(self.config))

    def resolve(self, extra: Sequence[str] = ()):
        """The row's config: the named config, the row's overrides, then ``extra``."""
        return apply_overrides(get_config(self.config), [*self.overrides, *extra])



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
                            paper_dynamic=f"{key}-dynamic-eval"))
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


#: epochs of 150 updates each for every row of the ``cpu-scale`` table: 900 updates of
#: 32 x 35 tokens, about one pass over PTB's training text
CPU_SCALE_EPOCHS = 6


def _cpu_scale() -> list[Row]:
    """Every head on the tutorial model, one budget. The dual head's config trains it with
    SGD at learning rate 20, where it does not train stably at this size; ``dual-lr5`` is
    the same head at 5, the rate that trained best of 2, 5, 10 and 20 in three epochs."""
    budget = (f"train.epochs={CPU_SCALE_EPOCHS}",)
    rows = [Row(h, f"tutorial/ptb-{h}", budget) for h in ("softmax", "tied", "bilinear", "dual")]
    rows.append(Row("dual-lr5", "tutorial/ptb-dual", (*budget, "train.lr=5")))
    rows += [Row(f"drill-{k}", "tutorial/ptb-drill", (*budget, f"head.options.depth={k}"))
             for k in (1, 2, 4)]
    return rows + [Row(h, f"tutorial/ptb-{h}", budget) for h in ("mos", "doc", "sigsoftmax")]


#: epochs of every row of the GPU plans (:mod:`drillbook.experiments.plans`), sized with
#: ``drillbook reproduce TABLE --dry-run`` for a window of about 9 minutes: the papers' PTB
#: models side by side, the translation models on the whole of Multi30k, and the small
#: models on whole passes over PTB
GPU_EPOCHS = {"gpu-ptb": 7, "gpu-multi30k": 20, "gpu-small": 10}


def _gpu_ptb() -> list[Row]:
    """DRILL's and the mixtures' PTB models at the papers' size and settings, trained the
    same number of epochs (the papers plot their curves by epoch), not fine-tuned."""
    e = (f"train.epochs={GPU_EPOCHS['gpu-ptb']}",)
    return [Row("tied", "ptb/awd-lstm", e, paper=("drill:table1:awd-lstm-wo-finetune",)),
            Row("drill-4", "ptb/awd-lstm-drill", e,
                paper=("drill:table1:awd-lstm-drill-wo-finetune",)),
            Row("mos-15", "ptb/awd-lstm-mos", e),
            Row("doc", "ptb/awd-lstm-doc", e)]


def _gpu_multi30k() -> list[Row]:
    """The translation heads of the joint-embedding and vMF chapters on the whole of
    Multi30k (de-en): softmax, tied softmax, bilinear, dual, DRILL, and NLLvMF with its
    regularisers, with tied decoder inputs for the best of them."""
    e = (f"train.epochs={GPU_EPOCHS['gpu-multi30k']}",)
    return [Row(name, f"multi30k/de-en-{config}", e) for name, config in (
        ("softmax", "softmax"), ("softmax-tied", "softmax-tied"), ("bilinear", "bilinear"),
        ("dual", "dual"), ("drill", "drill"), ("vmf-nllvmf", "vmf"), ("vmf-reg1", "vmf-reg1"),
        ("vmf-reg2", "vmf-reg2"), ("vmf-reg2-tied", "vmf-reg2-tied"))]


def _gpu_small() -> list[Row]:
    """Every ``cpu-scale`` row at its small size, on whole passes over PTB and the whole
    validation text (the plan runs each with three seeds)."""
    whole = (f"train.epochs={GPU_EPOCHS['gpu-small']}", "train.max_batches_per_epoch=null",
             "train.max_eval_tokens=null")
    return [Row(r.name, r.config, (*r.overrides[1:], *whole)) for r in _cpu_scale()
            if r.name != "dual"]  # its learning rate fails at this size: dual-lr5 stands in


#: table name -> rows. Each row names its own paper records (:mod:`drillbook.papers`).
TABLES: dict[str, list[Row]] = {
    "drill-table4": _table4(),
    "drill-main": _drill_main(),
    "mos-doc": _mixtures(),
    "rank": _rank(),
    # DRILL Table 3 as its Sec. 4.1.1 states it: seconds per epoch (every LM row records
    # them; this table needs one epoch per row)
    "speed": [Row(f"{c}-{h}", f"{c}/awd-lstm{s}", paper=(f"drill:sec4.1.1:{c}-{h}-speed",))
              for c in ("ptb", "wt2")
              for h, s in (("awd-lstm", ""), ("drill", "-drill"), ("mos", "-mos"))],
    # vMF Table 1 and joint-embedding Table 3 analogues on Multi30k (de->en)
    "multi30k-vmf": [Row("softmax", "multi30k/de-en-softmax"),
                     Row("softmax-tied", "multi30k/de-en-softmax-tied"),
                     Row("vmf-nllvmf", "multi30k/de-en-vmf"),
                     *[Row(f"vmf-{loss}", f"multi30k/de-en-vmf-{loss}")
                       for loss in ("reg1", "reg2", "l2", "cosine", "maxmargin")],
                     *[Row(f"vmf-{loss}-tied", f"multi30k/de-en-vmf-{loss}-tied")
                       for loss in ("reg1", "reg2", "maxmargin")]],
    "multi30k-joint": [Row(h, f"multi30k/de-en-{c}") for h, c in (
        ("softmax", "softmax"), ("tied", "softmax-tied"), ("bilinear", "bilinear"),
        ("dual", "dual"), ("drill", "drill"))],
    # a CPU-sized table: the tests and a first look
    "tutorial": [Row("tied", "tutorial/ptb-tied"), Row("drill", "tutorial/ptb-drill")],
    # every head at CPU scale, one budget for all: Table 4's ordering, the mixtures' rank
    # and Table 3's speed ratios, small enough for a laptop (see CPU_SCALE_EPOCHS)
    "cpu-scale": _cpu_scale(),
    # the plans of a GPU window (drillbook.experiments.plans)
    "gpu-ptb": _gpu_ptb(),
    "gpu-multi30k": _gpu_multi30k(),
    "gpu-small": _gpu_small(),
}

#: tables whose rows also measure the rank of the test log-probability matrix, and how many
#: test positions the matrix has (None: as many as the test evaluation reads)
RANK_TABLES: dict[str, int | None] = {"rank": None, "cpu-scale": 2000, "gpu-ptb": 4000,
                                      "gpu-small": 2000}


def records_for(config) -> list[str]:
    """The record keys of every table row that trains the same model on the same corpus as
    ``config`` (equal data, model and head sections; the training recipe may differ), in
    table order: what the papers print for this setup. ``ptb/awd-lstm-drill`` with
    ``head.options.depth=2`` finds DRILL Table 4's 2-layer row."""
    def model_of(c) -> tuple:
        d = c.to_dict()
        return type(c), *(d[k] for k in ("data", "model", "head"))

    wanted, keys = model_of(config), []
    for rows in TABLES.values():
        for row in rows:
            if model_of(row.resolve()) == wanted:
                keys += [k for stage in STAGES for k in row.paper_keys(stage)
                         if k not in keys]
    return keys


def find_row(table: str, name: str) -> Row | None:
    """The row ``name`` of ``table`` (None when the table or the row no longer exists: a
    result file may outlive the row that wrote it)."""
    return next((r for r in TABLES.get(table, []) if r.name == name), None)


def baseline_row(row: str) -> str:
    """The row a speed ratio divides by: ``tied``, or ``<corpus>-awd-lstm`` in the tables
    whose rows are named ``<corpus>-<head>``."""
    for prefix in ("ptb-", "wt2-"):
        if row.startswith(prefix):
            return f"{prefix}awd-lstm"
    return "tied"


def paper_params(config) -> dict[str, float]:
    """The papers' parameter counts (millions, as printed) of the model ``config`` builds:
    record key -> ``params_m`` for every table row of this model that has one
    (:func:`records_for`); shown beside :func:`drillbook.models.param_report`'s counts."""
    return {k: paper_number(k)["params_m"] for k in records_for(config)
            if "params_m" in paper_number(k).values}
