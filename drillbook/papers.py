"""The one record of every number the book quotes from a paper.

Each :class:`PaperNumber` is one printed row (or one sentence of running text): which paper
reports it, in which table or section, the row's label as printed, the values, and whether
they are after AWD-LSTM's fine-tuning stage. The configs, the reproduction tables, the
report and the chapters all read their paper numbers from here by key, so a number is
typed exactly once, next to where it was read.

Keys look like ``"<document>:<table>:<row>"``, e.g. ``"drill:table4:drill-4-layers"``.
Metric names follow the result files where the two can be compared (``val_ppl``,
``test_ppl``, ``seconds_per_epoch``, ``rank_tol_1``, ``test_bleu``); the others say what
they are (``params_m``: millions as printed; ``ratio_to_tied``; ``rank``: as stated,
tolerance not given; ``sqrt_beta_valid``, ...).

:func:`find_in_text` looks an entry up in the paper's own text (the Markdown/plain-text
conversions kept beside the repository in ``../shared/papers``); the tests run it on every
entry that has a ``document``. Entries without one (numbers from the authors' repositories)
say in ``unchecked`` why they cannot be checked against a paper text.

Fine-tuning: AWD-LSTM (Merity et al., 2018) trains, then restarts averaged SGD from the best
model until its validation loss stops improving. DRILL's "w/o finetune" rows are the first
stage; every other perplexity the LM papers here report for their own models is after it
(DOC's "(fin)" rows after repeating it until convergence).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .errors import ConfigError

__all__ = ["DOCUMENTS", "RECORD", "Document", "PaperNumber", "assert_quoted", "find_in_text",
           "paper_number", "paper_rows", "paper_value", "paper_values", "table_block"]


@dataclass(frozen=True)
class Document:
    """A paper whose text is kept in ``../shared/papers``: its citation and file name."""

    citation: str
    filename: str


#: the paper texts the record is checked against (keys are the record's ``document``)
DOCUMENTS: Mapping[str, Document] = MappingProxyType({
    "drill": Document("Pappas & Henderson (2019), Deep Residual Output Layers for Neural "
                      "Language Generation (DRILL), ICML",
                      "drill-deep-residual-output-layers-icml2019.md"),
    "doc": Document("Takase, Suzuki & Nagata (2018), Direct Output Connection for a "
                    "High-Rank Language Model (DOC), EMNLP",
                    "doc-direct-output-connection-emnlp2018.md"),
    "vmf": Document("Kumar & Tsvetkov (2019), Von Mises-Fisher Loss for Training "
                    "Sequence to Sequence Models with Continuous Outputs, ICLR",
                    "vmf-continuous-outputs-iclr2019.txt"),
    "joint": Document("Pappas, Miculicich Werlen & Henderson (2018), Beyond Weight Tying: Learning "
                      "Joint Input-Output Embeddings for Neural Machine Translation, WMT",
                      "joint-input-output-embeddings-nmt-wmt2018.txt"),
})


@dataclass(frozen=True)
class PaperNumber:
    """One row of a paper's table (or one statement of its text) and the values printed.

    Attributes:
        key: the stable name the package uses, ``"<document>:<table>:<row>"``.
        source: who reports it and where, in words (a number quoted from another paper
            says so).
        document: the key in :data:`DOCUMENTS` of the text it is printed in; None for a
            number from the authors' repositories (then ``unchecked`` says so).
        table: ``"Table 4"``, ``"Sec. 4.1.1"``, or a repository file.
        row: the row's label as printed (for a statement in running text, what it is about).
        values: metric -> value, as printed (an int where the paper prints no decimals), in
            the order of the printed columns.
        finetuned: after AWD-LSTM's fine-tuning stage (True), before it (False), or not a
            perplexity of a trained stage (None: speeds, ranks, BLEU, parameter counts).
        dynamic_eval: evaluated with dynamic evaluation (Krause et al., 2018).
        quote: for a number stated in running text, the sentence with ``{metric}``
            placeholders (``str.format`` fills in ``values``); None for a table row.
        note: anything a reader comparing with it should know.
        unchecked: why the entry cannot be found in a paper text ('' when it can).
    """

    key: str
    source: str
    document: str | None
    table: str
    row: str
    values: Mapping[str, float]
    finetuned: bool | None
    dynamic_eval: bool = False
    quote: str | None = None
    note: str = ""
    unchecked: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))  # read-only

    def __getitem__(self, metric: str) -> float:
        try:
            return self.values[metric]
        except KeyError:
            raise ConfigError(f"paper record {self.key!r} has no {metric!r}; it records "
                              f"{sorted(self.values)}") from None


_TABLE4_FT = ("Table 4 states no stage; its weight-tying and 4-layer rows repeat Table 1's "
              "fine-tuned numbers, so the table is taken to be after fine-tuning throughout")
_DOC_T3_FT = ("Table 3 states no stage; its lambda = 0.001 row repeats the main result of "
              "Tables 6 and 7, which the authors' README obtains after fine-tuning")
_DRILL_REPO = "the DRILL authors' repository (idiap/drill)"
_NOT_A_PAPER = "a file of the authors' repository, not a paper text"
_DRILL_SPEED = ("the text's account of Table 3, whose body the paper text lacks (the caption "
                "gives |V| = 20K for PTB, whose vocabulary is 10k)")


def _lm(key: str, source: str, row: str, params_m: float, val: float, test: float, *,
        finetuned: bool, dynamic_eval: bool = False, note: str = "") -> PaperNumber:
    document, table, _ = key.split(":")
    return PaperNumber(key, source, document, f"Table {table.removeprefix('table')}", row,
                       {"params_m": params_m, "val_ppl": val, "test_ppl": test},
                       finetuned, dynamic_eval, note=note)


def _drill_main(table: int, numbers: dict[str, tuple[float, float, float]], *, readme: str,
                dynamical: str = "dynamic") -> list[PaperNumber]:
    """DRILL Table 1 or 2: slug -> (params_m, val_ppl, test_ppl); the rows' labels as printed
    (Table 2 prints MoS's last row as "dynamical evaluation")."""
    awd = f"AWD-LSTM (Merity et al., 2018) as quoted in DRILL Table {table}"
    mos, ours = f"MoS (Yang et al., 2018) as quoted in DRILL Table {table}", f"DRILL Table {table}"
    krause = f"Krause et al. (2018) as quoted in DRILL Table {table}"
    rows = {  # slug: (source, label, finetuned, dynamic evaluation)
        "awd-lstm-wo-finetune": (awd, "Merity et al. (2017) – AWD-LSTM w/o finetune", False,
                                 False),
        "awd-lstm": (awd, "Merity et al. (2017) – AWD-LSTM", True, False),
        "awd-lstm-drill-wo-finetune": (ours, "Ours – AWD-LSTM-DRILL w/o finetune", False,
                                       False),
        "awd-lstm-drill": (ours, "Ours - AWD-LSTM-DRILL", True, False),
        "awd-lstm-dynamic-eval": (krause, "Krause et al. (2018) – AWD-LSTM + dynamic "
                                          "evaluation", True, True),
        "awd-lstm-drill-dynamic-eval": (ours, "Ours – AWD-LSTM-DRILL + dynamic evaluation",
                                        True, True),
        "awd-lstm-mos": (mos, "Yang et al. (2018) - AWD-LSTM-MoS", True, False),
        "awd-lstm-mos-dynamic-eval": (
            mos, f"Yang et al. (2018) – AWD-LSTM-MoS + {dynamical} evaluation", True, True),
    }
    note = {"awd-lstm": f"the AWD-LSTM paper's number; the AWD-LSTM README's command reaches "
                        f"about {readme} after fine-tuning",
            "awd-lstm-dynamic-eval": "dynamic evaluation of an AWD-LSTM the dynamic-"
                                     "evaluation authors trained with the AWD-LSTM code "
                                     "(their README: they did not reach its paper's "
                                     "perplexity)"}
    return [_lm(f"drill:table{table}:{slug}", source, label, *numbers[slug],
                finetuned=finetuned, dynamic_eval=dynamic, note=note.get(slug, ""))
            for slug, (source, label, finetuned, dynamic) in rows.items()]


def _row(key: str, source: str, row: str, values: dict, *, finetuned: bool | None,
         note: str = "") -> PaperNumber:
    document, table, _ = key.split(":")
    return PaperNumber(key, source, document, f"Table {table.removeprefix('table')}", row,
                       values, finetuned, note=note)


def _text(key: str, source: str, section: str, row: str, values: dict, quote: str,
          note: str = "") -> PaperNumber:
    return PaperNumber(key, source, key.split(":")[0], section, row, values, None,
                       quote=quote, note=note)


def _doc_t3(slug: str, cells: str, val: float, test: float, note: str = "") -> PaperNumber:
    return _row(f"doc:table3:{slug}", "DOC Table 3", cells,
                {"val_ppl": val, "test_ppl": test}, finetuned=True,
                note=f"{note}; {_DOC_T3_FT}" if note else _DOC_T3_FT)


_ENTRIES: tuple[PaperNumber, ...] = (
    # ------------------------------------------- DRILL Tables 1 (PTB) and 2 (WikiText-2)
    *_drill_main(1, {"awd-lstm-wo-finetune": (24, 60.7, 58.8), "awd-lstm": (24, 60.0, 57.3),
                     "awd-lstm-drill-wo-finetune": (24, 59.6, 57.0),
                     "awd-lstm-drill": (24, 58.2, 55.7),
                     "awd-lstm-dynamic-eval": (24, 51.6, 51.1),
                     "awd-lstm-drill-dynamic-eval": (24, 49.5, 49.4),
                     "awd-lstm-mos": (22, 56.54, 54.44),
                     "awd-lstm-mos-dynamic-eval": (22, 48.33, 47.69)},
                 readme="58.8/56.5"),
    *_drill_main(2, {"awd-lstm-wo-finetune": (33, 69.1, 66.0), "awd-lstm": (33, 68.6, 65.8),
                     "awd-lstm-drill-wo-finetune": (34, 65.7, 62.8),
                     "awd-lstm-drill": (34, 64.9, 61.9),
                     "awd-lstm-dynamic-eval": (33, 46.4, 44.3),
                     "awd-lstm-drill-dynamic-eval": (34, 43.9, 42.0),
                     "awd-lstm-mos": (35, 63.88, 61.45),
                     "awd-lstm-mos-dynamic-eval": (35, 42.41, 40.68)},
                 readme="67.4/64.7", dynamical="dynamical"),
    # ------------------------------------------------- DRILL Table 4 (PTB ablation)
    # totals are printed truncated to 0.1M (see drillbook.configs.paper_millions)
    *[_lm(f"drill:table4:{slug}", "DRILL Table 4", label, params, val, test, finetuned=True,
          note=f"{what}; {_TABLE4_FT}" if what else _TABLE4_FT)
      for slug, label, params, val, test, what in [
          ("full-softmax", "Full softmax", 43.8, 69.9, 66.8, ""),
          ("weight-tying", "Weight tying [PW17]", 24.2, 60.0, 57.3,
           "AWD-LSTM's own number (Merity et al., 2018)"),
          ("bilinear", "Bilinear map. [G18]", 24.3, 60.7, 58.5, ""),
          ("dual", "Dual nonlinear map. [PH18]", 24.5, 58.8, 56.4, ""),
          ("drill-1-layer", "DRILL 1-layer", 24.3, 58.8, 56.2, ""),
          ("drill-2-layers", "DRILL 2-layers", 24.5, 58.7, 56.0, ""),
          ("drill-3-layers", "DRILL 3-layers", 24.7, 58.5, 55.9, ""),
          ("drill-4-layers", "DRILL 4-layers", 24.8, 58.2, 55.7, ""),
          ("residuals-between-layers", "+ residuals between layers", 24.8, 59.6, 57.5,
           "DRILL-4 with a residual to the previous layer too"),
          ("no-variational-dropout", "- no variational dropout", 24.8, 63.4, 60.7,
           "DRILL-4 with standard (element-wise) dropout")]],
    # ------------------------------------------- DRILL Sec. 4.1.1: speed (Table 3) and rank
    # (PennTreebank: "the MoS model takes about 138 seconds per epoch while AWD-LSTM about
    # 46 seconds per epoch, which makes it slower by a factor of 3.0x, whereas our model is
    # only 1.2x slower"; WikiText-2 likewise with 865, 89, 9.7x and 1.2x)
    *[_text(f"drill:sec4.1.1:{slug}-speed", "DRILL Sec. 4.1.1 (Table 3)", "Sec. 4.1.1", row,
            values, quote, _DRILL_SPEED) for slug, row, values, quote in [
        ("ptb-awd-lstm", "AWD-LSTM on PTB, seconds per epoch", {"seconds_per_epoch": 46},
         "on PennTreebank the MoS model takes about 138 seconds per epoch while AWD-LSTM "
         "about {seconds_per_epoch} seconds per epoch"),
        ("ptb-drill", "AWD-LSTM-DRILL on PTB, time per epoch relative to AWD-LSTM",
         {"ratio_to_tied": 1.2}, "which makes it slower by a factor of 3.0 $\\times$ , "
                                 "whereas our model is only {ratio_to_tied} $\\times$ slower"),
        ("ptb-mos", "AWD-LSTM-MoS on PTB, seconds per epoch and relative to AWD-LSTM",
         {"seconds_per_epoch": 138, "ratio_to_tied": 3.0},
         "on PennTreebank the MoS model takes about {seconds_per_epoch} seconds per epoch "
         "while AWD-LSTM about 46 seconds per epoch, which makes it slower by a factor of "
         "{ratio_to_tied}"),
        ("wt2-awd-lstm", "AWD-LSTM on WikiText-2, seconds per epoch",
         {"seconds_per_epoch": 89},
         "while AWD-LSTM takes about {seconds_per_epoch} seconds per epoch"),
        ("wt2-drill", "AWD-LSTM-DRILL (4 layers) on WikiText-2, relative to AWD-LSTM",
         {"ratio_to_tied": 1.2},
         "whereas our model with 4-layers is only {ratio_to_tied} $\\times$ slower than the "
         "baseline"),
        ("wt2-mos", "AWD-LSTM-MoS on WikiText-2, seconds per epoch and relative to AWD-LSTM",
         {"seconds_per_epoch": 865, "ratio_to_tied": 9.7},
         "The MoS model takes about {seconds_per_epoch} seconds per epoch while AWD-LSTM "
         "takes about 89 seconds per epoch, which makes it slower by a factor of "
         "{ratio_to_tied}")]],
    *[_text(f"drill:sec4.1.1:rank-{slug}", "DRILL Sec. 4.1.1", "Sec. 4.1.1",
            f"rank of the PTB log-probability matrix, {model}", {"rank": rank}, quote, note)
      for slug, model, rank, quote, note in [
          ("awd-lstm", "AWD-LSTM", 400,
           "while for AWD-LSTM and our model the rank is only {rank}",
           "the text states no tolerance; the authors' code counts singular values above 1 "
           "and its results file gives 402 (see drill-repo:rank:softmax)"),
          ("drill", "AWD-LSTM-DRILL", 400,
           "while for AWD-LSTM and our model the rank is only {rank}",
           "as for AWD-LSTM; the authors' results file gives 402 (drill-repo:rank:drill)"),
          ("mos", "AWD-LSTM-MoS", 9981,
           "the rank of the log-probability matrix for MoS on PennTreebank is {rank:,}",
           "the authors' results file gives the same 9,981 with tol = 1")]],
    # ----------------- DRILL Sec. 4.1.2: its account of Fig. 3 (loss by frequency band)
    *[_text(f"drill:sec4.1.2:{slug}", "DRILL Sec. 4.1.2 (Fig. 3)", "Sec. 4.1.2", row, values,
            quote, "the text's account of Fig. 3, whose values the paper does not print; the "
                   "authors' per-token losses are in drillbook.authors")
      for slug, row, values, quote in [
          ("fig3-gain-range", "DRILL's mean relative cross-entropy gain over the baselines "
           "in the rarest bands, percent", {"low_percent": 5, "high_percent": 17.5},
           "improvements in perplexity between {low_percent}% to {high_percent}% brought "
           "by DRILL"),
          ("fig3-highest-band-bilinear", "the most frequent band, DRILL against the bilinear "
           "mapping, percent", {"percent": 2.5},
           "DRILL has {percent}% higher perplexity than the bilinear mapping"),
          ("fig3-band-types", "word types in the most and the least frequent band",
           {"highest_band_types": 16, "lowest_band_types": 4116},
           "computed based on {highest_band_types} unique words as opposed to the lowest "
           "frequency band which corresponds to {lowest_band_types} unique words")]],
    # ------------------- DRILL Sec. 4.2-4.3: Transformer NMT, WMT'14 En->De, 32K BPE
    # Table 5's body is missing from the paper text; its account in Sec. 4.3 is quoted.
    *[_text(f"drill:sec4.3:{slug}", "DRILL Sec. 4.3 (Table 5)", "Sec. 4.3", row, values,
            quote, "the text's account of Table 5, whose body the paper text lacks")
      for slug, row, values, quote in [
          ("transformer-drill-params", "Transformer-DRILL (base), parameters",
           {"params_m": 79.9}, "namely Transformer-DRILL (base) with {params_m}M parameters"),
          ("transformer-params", "Transformer (base), parameters", {"params_m": 79.4},
           "outperforms the Transformer (base) model with {params_m}M parameters"),
          ("bleu-gain-over-transformer", "Transformer-DRILL (base) against Transformer "
           "(base), BLEU difference", {"bleu_gain": 0.8},
           "with 79.4M parameters by {bleu_gain} points"),
          ("bleu-gain-over-dual", "Transformer-DRILL (base) against Transformer (base) "
           "with the dual nonlinear mapping, BLEU difference", {"bleu_gain": 0.6},
           "Transformer-DRILL also outperforms by {bleu_gain} points")]],
    *[_text(f"drill:sec4.2:transformer-drill-{slug}", "DRILL Sec. 4.2", "Sec. 4.2",
            f"Transformer-DRILL label encoder, {slug}", {slug: value}, quote)
      for slug, value, quote in [
          ("depth", 2, "as follows: {depth}-layer label encoder depth"),
          ("dropout", 0.6, "dings, {dropout} dropout rate, *sigmoid* activation function")]],
    # ------------------------------------- DRILL authors' repository (not in the paper)
    *[PaperNumber(f"drill-repo:rank:{row.lower()}", _DRILL_REPO, None,
                  "analysis/rank/rank_results.txt", row, {"rank_tol_1": rank}, None,
                  note=f"numpy matrix_rank(tol=1) on PTB; {rank:,} for validation and test",
                  unchecked=_NOT_A_PAPER)
      for row, rank in [("Softmax", 402), ("DRILL", 402), ("MoS", 9981)]],
    # the speed logs of the DRILL repository, run on NVIDIA GTX 1080 Ti GPUs (its README),
    # each the mean of the "end of epoch | time: ...s" lines of one file, the mean its
    # analysis/speed/calc.sh takes (training and validation of each epoch)
    *[PaperNumber(f"drill-repo:speed:{row}", _DRILL_REPO, None, f"analysis/speed/{path}",
                  label, {"seconds_per_epoch": seconds}, None,
                  note=f"mean over {epochs} logged epochs on a GTX 1080 Ti",
                  unchecked=_NOT_A_PAPER)
      for row, path, label, seconds, epochs in [
          ("ptb-awd-lstm", "penn/penn-base.txt", "AWD-LSTM on PTB", 46.75, 600),
          ("ptb-drill", "penn/penn-ours.txt", "AWD-LSTM-DRILL on PTB", 53.14, 600),
          ("ptb-mos", "penn/penn-mos.txt", "AWD-LSTM-MoS on PTB", 139.01, 600),
          ("wt2-awd-lstm", "wiki2/wiki2-base.txt", "AWD-LSTM on WikiText-2", 89.02, 600),
          ("wt2-drill", "wiki2/wiki2-ours.txt", "AWD-LSTM-DRILL on WikiText-2", 106.09, 600),
          ("wt2-mos", "wiki2/wiki2-mos.txt", "AWD-LSTM-MoS on WikiText-2", 861.94, 683)]],
    # ------------------------------------------------- DOC Table 3 (PTB, J = 20 ablation)
    # the row label is the printed cells i3 i2 i1 i0 lambda_beta
    _doc_t3("i3-15", "15 0 0 0 0", 56.54, 54.44,
            "MoS as reported by Yang et al. (2018), the table's baseline"),
    _doc_t3("i3-20", "20 0 0 0 0", 56.88, 54.79,
            "the MoS implementation (zihangdai/mos) with identical hyper-parameters except "
            "i3 = 20, i.e. MoS with 20 experts: its latent dropout 0.29, no lambda_beta, "
            "nonmono 5"),
    _doc_t3("i3-15-i0-5", "15 0 0 5 0", 56.21, 54.28),
    _doc_t3("i3-15-i1-5", "15 0 5 0 0", 55.26, 53.52),
    _doc_t3("i3-15-i2-5-lambda-0", "15 5 0 0 0", 54.87, 53.15),
    _doc_t3("i3-15-i2-5-lambda-0.0001", "15 5 0 0 0.0001", 54.95, 53.16),
    _doc_t3("i3-15-i2-5-lambda-0.001", "15 5 0 0 0.001", 54.62, 52.87,
            "AWD-LSTM-DOC, the paper's chosen setting"),
    _doc_t3("i3-15-i2-5-lambda-0.01", "15 5 0 0 0.01", 55.13, 53.39),
    _doc_t3("i3-10-i2-5-i0-5", "10 5 0 5 0", 56.46, 54.18),
    _doc_t3("i3-10-i2-5-i1-5", "10 5 5 0 0", 56.00, 54.37),
    # ------------------------------------- DOC Table 4: sqrt(beta) by lambda_beta (PTB)
    *[_row(f"doc:table4:lambda-{lam}", "DOC Table 4", lam,
           {"sqrt_beta_valid": v, "sqrt_beta_test": t}, finetuned=None)
      for lam, v, t in [("0", 0.276, 0.279), ("0.0001", 0.254, 0.252),
                        ("0.001", 0.217, 0.213), ("0.01", 0.092, 0.086)]],
    # --------------------------------- DOC Table 5: rank of the PTB log-probability matrix
    *[_row(f"doc:table5:{slug}", "DOC Table 5", label, {"rank_valid": r, "rank_test": r},
           finetuned=None, note="tolerance not stated; D_3 = 400 for AWD-LSTM")
      for slug, label, r in [("awd-lstm", "AWD-LSTM", 401), ("awd-lstm-mos", "AWD-LSTM-MoS",
                                                              10000),
                             ("awd-lstm-doc", "AWD-LSTM-DOC", 10000)]],
    # ------------------------------------------------- DOC Tables 7 (PTB) and 8 (WT2)
    *[entry for table, (mos, doc, fin) in {7: ((22, 56.54, 54.44), (23, 54.62, 52.87),
                                                (23, 54.12, 52.38)),
                                            8: ((35, 63.88, 61.45), (37, 60.97, 58.55),
                                                (37, 60.29, 58.03))}.items()
      for entry in (
          _lm(f"doc:table{table}:awd-lstm-mos",
              f"MoS (Yang et al., 2018) as quoted in DOC Table {table}",
              "AWD-LSTM-MoS (Yang et al., 2018)", *mos, finetuned=True),
          _lm(f"doc:table{table}:awd-lstm-doc", f"DOC Table {table}",
              "Proposed method: AWD-LSTM-DOC", *doc, finetuned=True,
              note="fine-tuned once, as the authors' README does"),
          _lm(f"doc:table{table}:awd-lstm-doc-fin", f"DOC Table {table}",
              "Proposed method: AWD-LSTM-DOC (fin)", *fin, finetuned=True,
              note="fine-tuning repeated until convergence"))],
    # ------------------- vMF Table 1: test BLEU on IWSLT'16 fr-en, de-en, en-fr (greedy)
    *[_row(f"vmf:table1:{slug}", "vMF Table 1", label,
           {"test_bleu_fr_en": fr_en, "test_bleu_de_en": de_en, "test_bleu_en_fr": en_fr},
           finetuned=None, note=note)
      for slug, label, fr_en, de_en, en_fr, note in [
          ("word-ce", "no wordword CE", 31.0, 24.7, 29.3, "softmax over words"),
          ("bpe-ce", "no BPEBPE CE", 31.4, 25.8, 31.0,
           "softmax over BPE subwords on both sides: the paper's strongest baseline"),
          ("fasttext-tied-maxmargin", "fasttext yes wordemb MaxMargin", 32.1, 25.0, 31.0,
           "max-margin loss, fastText targets, decoder inputs tied to them"),
          ("word2vec-nllvmf", "word2vec no wordemb", 29.5, 22.7, 26.6,
           "plain NLLvMF, word2vec targets: the first of the rows whose loss cell the paper "
           "text lost with its mathematics (the rows before it name L2, cosine and "
           "max-margin)"),
          ("word2vec-tied-nllvmf", "word2vec yes wordemb", 29.7, 22.2, 27.5,
           "regularised NLLvMF (the text lost which regulariser), word2vec targets, decoder "
           "inputs tied to them"),
          ("fasttext-tied-nllvmf", "fasttext yes wordemb", 32.1, 25.1, 31.7,
           "regularised NLLvMF (the text lost which regulariser), fastText targets, decoder "
           "inputs tied to them")]],
    # ----------------------------- vMF: parameters of the input and output layers (Table 4)
    # and the average training time per batch in ms (the unit is in the table's header,
    # which the paper text lost; Sec. 5 calls the column "the average training time per batch")
    _row("vmf:table4:word-ce", "vMF Table 4", "word No CE",
         {"input_params_m": 25.6, "output_params_m": 51.2, "ms_per_batch": 400},
         finetuned=None,
         note="softmax over a 50,000-word vocabulary from a 1,024-d decoder state"),
    _row("vmf:table4:emb-cosine", "vMF Table 4", "emb No Cosine",
         {"input_params_m": 25.6, "output_params_k": 307.2, "ms_per_batch": 160},
         finetuned=None,
         note="a 1,024 x 300 projection onto 300-d target embeddings (every continuous loss "
              "has the same count)"),
    _row("vmf:table4:emb-maxmargin", "vMF Table 4", "emb No MaxMargin",
         {"input_params_m": 25.6, "output_params_k": 307.2, "ms_per_batch": 178},
         finetuned=None, note="the slowest continuous row: a negative example per position"),
    _row("vmf:table4:emb-nllvmf", "vMF Table 4", "emb No",
         {"input_params_m": 25.6, "output_params_k": 307.2, "ms_per_batch": 170},
         finetuned=None,
         note="the loss cell is empty in the paper text (lost with its mathematics); the "
              "other rows name CE, L2, cosine and max-margin, so this is the NLLvMF row"),
    _text("vmf:sec1:training-speedup", "vMF Sec. 1 (and Sec. 5)", "Sec. 1",
          "training time, continuous outputs against softmax", {"training_speedup": 2.5},
          "our models can be trained up to {training_speedup}x faster than softmaxbased models",
          "total training time until convergence (Sec. 5, Table 3), not time per step"),
    # --------------------------- joint input-output embeddings, Table 3 (De->En, 32K BPE)
    *[_row(f"joint:table3:{slug}", "Joint input-output embeddings (NMT) Table 3", label,
           {"test_bleu": bleu, "params_m": params}, finetuned=None, note=note)
      for slug, label, bleu, params, note in [
          ("nmt", "NMT", 15.85, 65.0, "untied softmax W^T h"),
          ("nmt-tied", "NMT-tied", 16.51, 46.7, "tied E h"),
          ("bilinear", "NMT-joint Eq. 6", 16.23, 47.0, "bilinear E W h"),
          ("eq7a", "Eq. 7 a", 16.01, 47.0, "sigma(E W) h"),
          ("eq7b", "Eq. 7 b", 17.52, 47.0, "E sigma(W h)"),
          ("joint-512", "Eq. 15 (512)", 17.54, 47.2, "the joint (dual) form, d_j = 512"),
          ("joint-2048", "Eq. 15 (2048)", 18.11, 48.8, "the joint (dual) form, d_j = 2048")]],
    # ------------------- joint input-output embeddings, Table 4: target tokens per second
    # (thousands) in training with negative sampling of 50%, 25% and 5% of |V| = 128K, En->De
    *[_row(f"joint:table4:{slug}", "Joint input-output embeddings (NMT) Table 4", label,
           {"ktokens_per_s_50": a, "ktokens_per_s_25": b, "ktokens_per_s_5": c},
           finetuned=None, note="BPE vocabulary of about 128K, En->De")
      for slug, label, a, b, c in [("nmt", "NMT -", 4.3, 5.7, 7.1),
                                   ("joint-512", "NMT-joint 512", 4.9, 5.9, 7.2),
                                   ("joint-2048", "NMT-joint 2048", 2.8, 4.2, 7.0)]],
    _text("joint:sec4:en-de-train-pairs", "Joint input-output embeddings (NMT) Sec. 4",
          "Sec. 4", "English-German training sentence pairs (WMT 2017)",
          {"train_pairs_m": 5.8}, "the English-German corpus {train_pairs_m}M for training"),
)


def _index(entries: Iterable[PaperNumber]) -> Mapping[str, PaperNumber]:
    record: dict[str, PaperNumber] = {}
    for entry in entries:
        if entry.key in record:
            raise AssertionError(f"paper record key {entry.key!r} appears twice")
        record[entry.key] = entry
    return MappingProxyType(record)


#: key -> entry, in the order above
RECORD: Mapping[str, PaperNumber] = _index(_ENTRIES)


def paper_number(key: str) -> PaperNumber:
    """The entry ``key`` of :data:`RECORD`.

    Raises:
        ConfigError: unknown key (the message lists the keys with the same prefix).
    """
    try:
        return RECORD[key]
    except KeyError:
        prefix = key.split(":")[0] + ":"
        near = [k for k in RECORD if k.startswith(prefix)] or sorted(
            {k.split(":")[0] for k in RECORD})
        raise ConfigError(f"unknown paper record {key!r}; known: {', '.join(near)}") from None


def paper_value(key: str, metric: str) -> float:
    """One printed value: ``paper_value("drill:table4:drill-4-layers", "test_ppl") == 55.7``."""
    return paper_number(key)[metric]


def paper_values(keys: Iterable[str]) -> dict[str, float]:
    """The values of several entries merged (one row compared with several papers).

    Raises:
        ConfigError: an unknown key, or two entries that give the same metric.
    """
    merged: dict[str, float] = {}
    owner: dict[str, str] = {}
    for key in keys:
        for metric, value in paper_number(key).values.items():
            if metric in merged:
                raise ConfigError(f"paper records {owner[metric]!r} and {key!r} both give "
                                  f"{metric!r}; name one of them")
            merged[metric], owner[metric] = value, key
    return merged


def assert_quoted(quoted: Mapping[str, Mapping[str, float]]) -> str:
    """Check the paper numbers a text quotes against the record; list them with sources.

    Args:
        quoted: record key -> {metric: the value as the text quotes it}.

    Returns:
        one line per value: the value, the metric, where it is printed and the row.

    Raises:
        AssertionError: a quoted value differs from the record (all differences listed).
        ConfigError: an unknown key or metric.
    """
    lines, wrong = [], []
    for key, values in quoted.items():
        entry = paper_number(key)
        for metric, value in values.items():
            if entry[metric] != value:
                wrong.append(f"{key} {metric}: quoted {value}, recorded {entry[metric]}")
            lines.append(f"{entry[metric]!s:>8}  {metric:<18} {entry.source}, {entry.row}")
    if wrong:
        raise AssertionError("quoted paper numbers differ from the record: " + "; ".join(wrong))
    return "\n".join(lines)


def paper_rows(*, document: str | None = None, table: str | None = None,
               finetuned: bool | None = None) -> list[PaperNumber]:
    """The entries of one paper text and/or table (``table="Table 4"``), in record order;
    ``finetuned=True``/``False`` keeps only the entries after/before fine-tuning."""
    return [e for e in RECORD.values()
            if (document is None or e.document == document)
            and (table is None or e.table == table)
            and (finetuned is None or e.finetuned is finetuned)]


# ------------------------------------------------------------ checking against the texts
_CAPTION = re.compile(r"^\s*Table (\d+)[.:]")
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)")


def _words(text: str) -> list[str]:
    """Lower-case words of a line of converted paper text, without markup: HTML tags
    (footnote marks with their content), LaTeX commands, and punctuation other than a
    decimal point inside a number."""
    text = re.sub(r"<sup>.*?</sup>|<[^>]+>|\\[A-Za-z]+", " ", text)
    words = re.sub(r"[^a-z0-9.]+", " ", text.lower()).split()
    return [w.strip(".") for w in words if w.strip(".")]


def _contains(words: list[str], part: list[str]) -> bool:
    n = len(part)
    return any(words[i:i + n] == part for i in range(len(words) - n + 1))


def table_block(text: str, table: str) -> list[str]:
    """The lines of ``text`` that belong to ``table`` (``"Table 4"``): those between the
    previous table's caption and this table's caption (the converted texts print a table's
    body above its caption). All lines when the text has no such caption."""
    lines = text.splitlines()
    number = re.fullmatch(r"Table (\d+)", table)
    captions = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _CAPTION.match(line))]
    ends = [i for i, n in captions if number and n == number.group(1)]
    if not ends:
        return lines
    start = max((i for i, _ in captions if i < ends[0]), default=-1)
    return lines[start + 1:ends[0] + 1]


def find_in_text(entry: PaperNumber, text: str) -> str | None:
    """Where ``entry`` is printed in a paper's ``text``, or None if it is not there.

    A table row is found when one line of the table's block (:func:`table_block`) contains
    the row label's words in order and the values among its numbers, in the order of
    ``values`` (the order of the printed columns). A statement of
    running text (``entry.quote``) is found when the quote, with the values filled in,
    occurs in the text (both compared as words, so line breaks and markup do not matter).
    """
    if entry.quote is not None:
        wanted = _words(entry.quote.format(**entry.values))
        for line in text.splitlines():
            if _contains(_words(line), wanted):
                return line
        return None
    label = _words(entry.row)
    for line in table_block(text, entry.table):
        if not _contains(_words(line), label):
            continue
        numbers = iter(float(n.replace(",", "")) for n in _NUMBER.findall(line))
        # the values in the order of the columns: a subsequence of the line's numbers
        if all(any(abs(n - v) < 1e-9 for n in numbers) for v in entry.values.values()):
            return line
    return None

