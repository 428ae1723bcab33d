# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,mystnb,-all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # What an output layer costs
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/drillbook/drillbook/blob/main/notebooks/07_cost_of_output_layers.ipynb)
#
# *Running time of the small profile (what CI runs): about 45 s on a 2-core CPU, measured
# when the outputs below were produced.*
#
# The papers report cost loosely. DRILL's Table 3 {cite:p}`pappas2019drill` times whole
# epochs: DRILL is about 1.2 times a tied {ref}`AWD-LSTM <glossary-awd-lstm>`, MoS 3.0
# times on Penn Treebank and 9.7 times on WikiText-2 (why MoS's is so large:
# {ref}`mos-speed-explained`). The vMF paper {cite:p}`kumar2019vmf` reports up to 2.5
# times faster training than a softmax. Such numbers depend on the GPU, the batch size,
# and the rest of the model. This chapter explains where an output layer's time and
# memory go, so that such ratios can be predicted before they are measured:
#
# 1. count the work of each head, by hand and with PyTorch's own counter;
# 2. add the encoder the head sits on, which often decides the ratio;
# 3. measure, on this machine, the head alone and behind an AWD-LSTM;
# 4. follow vMF and softmax as the vocabulary grows from 10k to 800k words;
# 5. read the committed measurements of the whole models, made on the CPU the book is
#    built on;
# 6. put DRILL's Table 3 next to the same rows trained on an H200 GPU, and next to the
#    authors' own code timed on that GPU.
#
# It builds on the heads of {doc}`02_tied_joint_drill` (DRILL's label encoder and its
# caching) and on the vMF layer of {doc}`04_vmf_continuous_outputs`.
# Symbols keep one meaning across the book; the {doc}`notation page <../book/notation>`
# lists them.

# %%
import subprocess
import sys

REPO = "git+https://github.com/drillbook/drillbook@main"
if "google.colab" in sys.modules:  # Colab only: install drillbook
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet",
                           f"drillbook[notebooks] @ {REPO}"])

# %%
import json

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn

from drillbook import book
from drillbook.analysis import awd_lstm_flops, head_flops
from drillbook.configs import get_config
from drillbook.heads import build_head
from drillbook.notebook import setup

# Colab form: the profile (auto = small on a CPU, t4 on a free Colab GPU, full on a
# large GPU; see the README).
PROFILE = "auto"  # @param ["auto", "small", "t4", "full"]
nb = setup(seed=0, profile=PROFILE)
if nb.device.type == "cpu":
    torch.set_num_threads(1)  # timed in one thread on a CPU: see "Measured: the head alone"

# %% [markdown]
# The papers' ratios quoted above, checked against the package's record of the papers
# (DRILL Sec. 4.1.1, vMF Sec. 1):

# %% tags=["nbval-check-output"]
print(book.assert_quoted({"drill:sec4.1.1:ptb-drill-speed": {"ratio_to_tied": 1.2},
                          "drill:sec4.1.1:wt2-drill-speed": {"ratio_to_tied": 1.2},
                          "drill:sec4.1.1:ptb-mos-speed": {"ratio_to_tied": 3.0},
                          "drill:sec4.1.1:wt2-mos-speed": {"ratio_to_tied": 9.7},
                          "vmf:sec1:training-speedup": {"training_speedup": 2.5}}))

# %% [markdown]
# ## Counting the work
#
# An output head is a few matrix products and some elementwise work. A product of an $r_1
# \times r_2$ matrix by an $r_2 \times r_3$ one costs $2 r_1 r_2 r_3$ floating-point
# operations, so the products are easy to count, and they split each head's cost into three
# kinds of work that grow differently. Take $n$ positions per step, a vocabulary of $V$
# words and embeddings of size $d$:
#
# * **scores**, the $n \times V$ product with the output embeddings: $2nVd$ for every
#   single-softmax head. A mixture of $K$ softmaxes computes $K$ such products ($2KnVd$;
#   for DOC, $K = J$, one per context vector). vMF training
#   computes none: its loss reads only the target word's vector.
# * **label** work depends on the vocabulary alone: the dual head's $\phi(EU)$ costs
#   $2Vd\,d_j$, and DRILL's $k$ residual layers cost $2kVd^2$. This does not grow with the
#   batch, and at evaluation the encoded labels are cached, so it disappears.
# * **context** work depends on the positions alone: the bilinear $Wh$, the mixtures'
#   latent vectors and priors, vMF's $Wh$.
#
# `drillbook.analysis.head_flops` writes these formulas down. The tests compare it with
# `torch.utils.flop_counter.FlopCounterMode` for every head, in training and in
# evaluation, and the counts match exactly. At the sizes of the PTB AWD-LSTM
# {cite:p}`merity2018awdlstm` (a batch of 20 x 70 = 1,400 positions, $V = 10{,}000$,
# $d = 400$), in GFLOP per forward pass:

# %% tags=["nbval-check-output"]
PTB = {"vocab_size": 10_000, "d": 400, "tokens": 20 * 70}
HEADS = {"softmax": ("softmax", {}), "tied": ("tied", {}), "bilinear": ("bilinear", {}),
         "dual": ("dual", {}), **{f"drill-{k}": ("drill", {"depth": k}) for k in (1, 4)},
         "mos-15": ("mos", {"n_experts": 15}), "sigsoftmax": ("sigsoftmax", {}),
         "vmf-300": ("vmf", {"dim": 300})}
flops = pd.DataFrame({name: head_flops(kind, **PTB, **opts).to_dict()
                      for name, (kind, opts) in HEADS.items()}).T
tied_forward = flops.loc["tied", "train_forward"]
flops["train x tied"] = flops["train_forward"] / tied_forward
flops["eval x tied"] = flops["eval_forward"] / tied_forward
gflops = flops[["label", "context", "scores", "eval_label"]] / 1e9
gflops.join(flops[["train x tied", "eval x tied"]]).astype(float).round(2)

# %% tags=["nbval-check-output"]
drill_label, tied_scores = flops.loc["drill-4", "label"], flops.loc["tied", "scores"]
print("MoS-15 scores / tied scores:", flops.loc["mos-15", "scores"] / tied_scores)
print("vMF-300 score FLOPs in training:", int(flops.loc["vmf-300", "scores"]))
print(f"DRILL-4 label encoder {drill_label / 1e9:.1f} GFLOP > tied scores "
      f"{tied_scores / 1e9:.1f} GFLOP: {drill_label > tied_scores}")
print(f"label / scores = {drill_label / tied_scores:.3f} = kd/n = "
      f"{4 * PTB['d'] / PTB['tokens']:.3f}")
assert drill_label / tied_scores == 4 * PTB["d"] / PTB["tokens"]
print(f"DRILL-4 head alone, training: {flops.loc['drill-4', 'train x tied']:.1f} x tied; "
      f"evaluation: {flops.loc['drill-4', 'eval x tied']:.1f} x tied")

# %% [markdown]
# Three things stand out. MoS multiplies the dominant term by $K = 15$. vMF has no
# $V$-sized term in training at all. And DRILL's label encoder, $2kVd^2$ = 12.8 GFLOP for
# four layers, is *larger* than the tied head's scores (11.2 GFLOP) at this batch size,
# so the head alone costs 2.1 times a tied head per training step. The ratio of the two
# terms is
#
# $$
# \frac{2kVd^2}{2nVd} = \frac{kd}{n} ,
# $$ (eq-drill-overhead)
#
# because the label encoder runs once per step over the vocabulary, while the scores run
# over the positions. Doubling the batch halves DRILL's relative cost. At evaluation the
# labels are cached and DRILL costs exactly what a tied head costs.
#
# ## The encoder's share
#
# A head never runs alone. The AWD-LSTM's three layers cost
# $2 \cdot 4 d_{\mathrm{hid}} (d_{\mathrm{in}} + d_{\mathrm{hid}})$ per position for a layer
# with input size $d_{\mathrm{in}}$ and hidden size $d_{\mathrm{hid}}$
# (`drillbook.analysis.awd_lstm_flops`). Adding the encoder to both sides of the ratio
# gives the whole-model prediction:

# %% tags=["nbval-check-output"]
m = get_config("ptb/awd-lstm").model
encoder = awd_lstm_flops(emsize=m.emsize, nhid=m.nhid, nlayers=m.nlayers,
                         tokens=PTB["tokens"])
print(f"AWD-LSTM encoder: {encoder / 1e9:.1f} GFLOP per forward pass of 1,400 positions")
whole = {name: (encoder + flops.loc[name, "train_forward"]) / (encoder + tied_forward)
         for name in ["drill-1", "drill-4", "mos-15"]}
for name, ratio in whole.items():
    print(f"{name:>8}: predicted whole-model training step = {ratio:.2f} x tied")

# %% [markdown]
# The arithmetic predicts DRILL-4 at 1.19 times a tied AWD-LSTM per training step. The
# DRILL paper measured 1.2 times per epoch on its GPU: the same number, but one agreement
# may be a coincidence, and the sections below show time and FLOPs parting often
# enough.
# For MoS-15 behind the same encoder the prediction is 3.41 times. The MoS paper's own
# PTB model {cite:p}`yang2018mos` is smaller where it matters: 280-dimensional
# embeddings (so every one of the 15 score products is 280 wide, not 400), 960 hidden
# units and a 620-dimensional last layer. Its FLOPs per token, which decide the time per
# epoch whatever the batch size, against the AWD-LSTM's:

# %% tags=["nbval-check-output"]
mm = get_config("ptb/awd-lstm-mos").model
mos_head = get_config("ptb/awd-lstm-mos").head.options["n_experts"]
mos_per_token = (awd_lstm_flops(emsize=mm.emsize, nhid=mm.nhid, nlayers=mm.nlayers,
                                tokens=1, d_out=mm.d_out)
                 + head_flops("mos", vocab_size=PTB["vocab_size"], d=mm.emsize,
                              d_hidden=mm.d_out, tokens=1, n_experts=mos_head).train_forward)
awd_per_token = (encoder + tied_forward) / PTB["tokens"]
print(f"MoS paper's PTB model: {mm.emsize}-d embeddings, {mm.nhid} hidden, last layer "
      f"{mm.d_out}, {mos_head} experts")
print(f"predicted: {mos_per_token / awd_per_token:.2f} x the AWD-LSTM per token, below "
      f"DRILL Table 3's measured 3.0")
assert mos_per_token / awd_per_token < 3.0

# %% [markdown]
# The FLOPs predict 2.5 times; DRILL's Table 3 measured 3.0. Products are not everything
# a mixture does: its 15 softmaxes and the mixing are elementwise passes over
# $K \times n \times V$ values, which read and write memory rather than multiply, and
# the count above leaves them out.
#
# Arithmetic is not time, for two more reasons. First, an LSTM is sequential: on a GPU
# its 70 small time steps leave most of the chip idle, so the encoder takes longer than
# its FLOPs suggest, and every head ratio shrinks towards 1. Second, large square
# products (the label encoder's $V \times d$ by $d \times d$) run closer to peak speed
# than skinny ones. Even on a CPU, whose time is closer to its arithmetic, the prediction
# is a first guess and no more: in the committed CPU measurements at the end of the
# chapter DRILL-4's head alone lands on its FLOP ratio, while MoS-15's costs a third more
# than its FLOPs predict.
#
# ## Memory
#
# The training step keeps what the backward pass needs. For a softmax head that is
# dominated by the $n \times V$ scores (or their gradient), one value per word per
# position; for a mixture it is $K$ times that. `drillbook` offers two ways around it:
# chunking positions (each chunk's scores are recomputed in the backward pass, so only
# one chunk is ever stored) and, for vMF, no scores at all. `head_cost` measures the
# bytes autograd actually saves, by hooking every tensor saved for backward and counting
# each storage once. The heads are the benchmark's (`drillbook.experiments.BENCH_HEADS`:
# the papers' settings, dropouts included, since they are part of the step), plus MoS in
# chunks of 64 positions:

# %% tags=["nbval-check-output"]
size = nb.pick(small={"vocab_size": 10_000, "d": 128, "tokens": 140},
               full={"vocab_size": 10_000, "d": 400, "tokens": 1400})
chosen = {name: book.BENCH_HEADS[name] for name in ("tied", "drill-4", "mos-15")}
chosen["mos-15, chunks of 64"] = ("mos", {**book.BENCH_HEADS["mos-15"][1], "chunk_size": 64})
chosen["vmf-300"] = book.BENCH_HEADS["vmf-300"]
measured = pd.DataFrame(book.compare_heads(list(chosen.values()), device=nb.device,
                                           repeats=nb.pick(small=2, full=10), warmup=1, **size))
measured["label"] = list(chosen)
memory = measured.set_index("label")[["saved_bytes", "score_bytes"]] / 2**20
memory.columns = ["saved for backward (MiB)", "largest score tensor (MiB)"]
memory.round(1)

# %% tags=["nbval-check-output"]
saved = measured.set_index("label")["saved_bytes"]
tied_score = measured.set_index("label").loc["tied", "score_bytes"]
mos, chunked = "mos-15", "mos-15, chunks of 64"
print("unchunked MoS-15 saves", round(saved[mos] / tied_score),
      "x a tied head's score tensor")
print(f"chunked MoS-15 saves {saved[chunked] / saved[mos]:.3f} of that")
assert saved[chunked] < saved[mos] / 10
vmf_scores = measured.set_index("label").loc["vmf-300", "score_bytes"]
print(f"vMF's largest score tensor: {vmf_scores} bytes")
assert vmf_scores == 0

# %% [markdown]
# The unchunked MoS saves for the backward pass about fifteen times a tied head's
# $n \times V$ scores: $K = 15$ score matrices' worth. With chunks of 64 positions it
# keeps under a tenth of that: each chunk is recomputed from its inputs in the backward
# pass, which adds one more forward pass of the scores to every step (a third more score
# FLOPs). Chunking trades time for memory. At the MoS paper's WikiText-2 settings
# {cite:p}`merity2016wikitext` (15 experts, batches of 15 x 70 positions,
# $V = 33{,}278$), one $K \times n \times V$ float32 tensor takes about 2.1 GB; at
# AWD-LSTM's batch of 80 it would take 11 GB; the config's chunks of 256 positions cap it
# at about 0.5 GB:

# %% tags=["nbval-check-output"]
wt2_mos = get_config("wt2/awd-lstm-mos")
j, v_wt2 = wt2_mos.head.options["n_experts"], book.SIZES["wt2"]
for label, positions in [("MoS config, batch 15 x 70", wt2_mos.train.batch_size * 70),
                         ("AWD-LSTM's batch, 80 x 70", get_config("wt2/awd-lstm")
                          .train.batch_size * 70),
                         ("one chunk of 256", wt2_mos.head.options["chunk_size"])]:
    nbytes = 4 * j * positions * v_wt2
    print(f"{label:<26} {nbytes / 1e9:5.2f} GB = {nbytes / 2**30:5.2f} GiB")

# %% [markdown]
# ## Measured: the head alone
#
# The same call timed each head's training step and its evaluation per token. Every head
# is timed in the same process as the tied head, on the same inputs, and the table shows
# ratios, which stay stable on a busy machine when absolute times do not. On a CPU the
# chapter runs in one thread (the first cell set it): with several threads, a machine
# that is also running other work stalls every parallel product until its slowest
# thread gets a core back, and small steps (vMF's) suffer most, which distorts the ratios
# far more than it slows the whole. Next to the measurements is the ratio the FLOP count
# predicts:

# %%
predicted = {label: head_flops(kind, **size, **opts).train_forward
             / head_flops("tied", **size).train_forward
             for label, kind, opts in zip(measured["label"], measured["kind"],
                                          measured["options"], strict=True)}
timing = measured.set_index("label")[["train_ratio", "eval_ratio"]].copy()
timing["predicted train ratio (FLOPs)"] = pd.Series(predicted)
print(f"measured on {measured['device'][0]}, {size['tokens']} positions, "
      f"V = {size['vocab_size']}, d = {size['d']}")
timing.round(2)

# %% [markdown]
# The printed ratios vary from machine to machine and run to run; only their coarse
# order is checked:

# %% tags=["nbval-check-output"]
# timed just now (the tables above): the ratios to a tied head, as bounds
print("vMF-300's training step under half a tied head's:",
      bool(timing.loc["vmf-300", "train_ratio"] < 0.5), "| MoS-15's over 3 times, training "
      "and evaluation:", bool((timing.loc[mos, ["train_ratio", "eval_ratio"]] > 3).all()),
      "| DRILL-4's evaluation ratio below its training ratio:",
      bool(timing.loc["drill-4", "eval_ratio"] < timing.loc["drill-4", "train_ratio"]))
assert timing.loc["vmf-300", "train_ratio"] < 0.5  # vMF: under half a tied head's step
assert (timing.loc[mos, ["train_ratio", "eval_ratio"]] > 3).all()  # MoS: over 3 times
assert timing.loc["drill-4", "eval_ratio"] < timing.loc["drill-4", "train_ratio"]

# %% [markdown]
# vMF's step is a small fraction of a tied head's, MoS's a large multiple, and DRILL's
# evaluation is much closer to the tied head's than its training step, because its labels
# are encoded once. How closely a measured ratio follows the FLOP prediction depends on
# the machine. Elementwise work (the softmaxes, the mixture's log-sum-exp, dropout masks)
# is memory-bound and not counted above, so mixtures cost more than their products
# suggest: the end of the chapter shows it in the committed measurements.
#
# ### Cached labels against re-encoding them
#
# The authors' DRILL code runs the label encoder on every forward pass, evaluation
# included. `drillbook` encodes the labels once per evaluation (the cache is invalidated
# when any weight changes). Clearing the cache before every call reproduces the
# reference behaviour, so the two can be timed side by side on the same head:

# %%
drill = build_head("drill", vocab_size=size["vocab_size"], d_hidden=size["d"], depth=4,
                   embedding=nn.Embedding(size["vocab_size"], size["d"])).to(nb.device).eval()
hidden = torch.randn(size["tokens"], size["d"], device=nb.device)
words = torch.randint(0, size["vocab_size"], (size["tokens"],), device=nb.device)


def evaluate_drill(reencode: bool) -> None:
    with torch.no_grad():
        if reencode:
            drill.clear_cache()
        drill.loss(hidden, words)


[cached] = book.time_call(lambda: evaluate_drill(False), nb.device, repeats=5)
[plain] = book.time_call(lambda: evaluate_drill(True), nb.device, repeats=5)
predicted_saving = 1 + 4 * size["d"] / size["tokens"]  # 1 + kd/n
print(f"DRILL-4, {size['tokens']} positions: {1e3 * plain:.1f} ms re-encoding the labels, "
      f"{1e3 * cached:.1f} ms from the cache: {plain / cached:.1f} x faster "
      f"(FLOPs predict {predicted_saving:.1f} x)")

# %% tags=["nbval-check-output"]
print("DRILL-4's evaluation call faster from the cache than re-encoding:", cached < plain)
assert cached < plain

# %% [markdown]
# Eq. {eq}`eq-drill-overhead` predicts the saving: re-encoding adds $kd/n$ of the scores'
# work to every evaluation call. {doc}`03_mixtures_mos_doc` showed the other two
# optimisations, log-space mixing (exact where the probability-space form underflows) and
# chunking (bounded memory); the tests check that every optimised path agrees with the
# plain one.
#
# ## Measured: behind an AWD-LSTM
#
# The ratio that matters is the whole model's. `compare_models` builds the language model
# of a named config with each head in turn. It times the trainer's own objective (the
# head's loss, its regulariser, AR and TAR) through the backward pass, and the evaluation
# pass in eval mode with the label cache active. The small profile uses the `tutorial/`
# encoder (embeddings of 128, so $d$ matches the head-alone measurements above) with
# batches of 4 x 35 = 140 positions, the head-alone size; the full profile uses the
# paper's `ptb/awd-lstm`. Next to the measurements is the FLOP prediction for the same
# encoder:

# %%
encoder_name = nb.pick(small="tutorial/ptb-tied", full="ptb/awd-lstm")
batch = nb.pick(small={"batch_size": 4, "bptt": 35, "eval_batch_size": 4}, full={})
behind = pd.DataFrame(book.compare_models(
    ["tied", "drill-4", "mos-15"], "ptb", encoder_config=encoder_name, device=nb.device,
    repeats=nb.pick(small=2, full=5), warmup=1, **batch))
small_model = get_config(encoder_name).model
positions = int(behind["batch_size"][0]) * int(behind["bptt"][0])
small_encoder = awd_lstm_flops(emsize=small_model.emsize, nhid=small_model.nhid,
                               nlayers=small_model.nlayers, tokens=positions)


def behind_prediction(kind: str, **opts) -> float:
    """(encoder + head) / (encoder + tied head), FLOPs of a forward pass."""
    shape = {"vocab_size": book.SIZES["ptb"], "d": small_model.emsize, "tokens": positions}
    return ((small_encoder + head_flops(kind, **shape, **opts).train_forward)
            / (small_encoder + head_flops("tied", **shape).train_forward))


behind["predicted train ratio (FLOPs)"] = [
    behind_prediction("tied"), behind_prediction("drill", depth=4),
    behind_prediction("mos", n_experts=15)]
print(f"encoder {encoder_name}, {positions} positions, on {behind['device'][0]}")
behind.set_index("name")[["train_ratio", "eval_ratio", "tokens_per_s",
                          "predicted train ratio (FLOPs)"]].round(2)

# %% tags=["nbval-check-output"]
ratio = behind.set_index("name")
print(f"FLOPs: DRILL-4's training ratio alone {predicted['drill-4']:.2f}, behind the "
      f"encoder {behind_prediction('drill', depth=4):.2f}")
print(f"FLOPs: MoS-15's training ratio alone {predicted[mos]:.1f}, behind the encoder "
      f"{behind_prediction('mos', n_experts=15):.1f}")
assert behind_prediction("drill", depth=4) < predicted["drill-4"]  # both move towards 1
assert behind_prediction("mos", n_experts=15) < predicted[mos]
print("measured behind the encoder (the table above): MoS-15's training step slower than "
      "a tied head's:", bool(ratio.loc["mos-15", "train_ratio"] > 1),
      "| DRILL-4's evaluation ratio below its training ratio:",
      bool(ratio.loc["drill-4", "eval_ratio"] < ratio.loc["drill-4", "train_ratio"]))
assert ratio.loc["mos-15", "train_ratio"] > 1  # MoS-15 slower than tied
assert ratio.loc["drill-4", "eval_ratio"] < ratio.loc["drill-4", "train_ratio"]

# %% [markdown]
# By the FLOP count, the ratios move towards 1 behind an encoder: the encoder's work is
# added to both sides. The tutorial encoder is small (two layers of 256 units), so at
# this size the head still dominates and most of MoS's overhead remains: the count
# predicts MoS-15 going from about 15 to about 11 times a tied head. Behind the paper's
# three layers of 1,150 units it shrinks far more, as the FLOP arithmetic of the second
# section showed. The page does not check that smaller shift against the measured
# tables: two repeats on a shared CPU are too few to resolve a change of a few units in a
# ratio of about 15, so the measured MoS ratios alone and behind the encoder are not
# compared here. Exercise 4 compares them, with more repeats.
#
# ## vMF against softmax as the vocabulary grows
#
# A softmax's training step grows linearly with $V$, and so does the memory its scores
# take. vMF's training step does not depend on $V$ at all. Decoding is different: both
# must compare the prediction with all $V$ words, softmax with a $d$-sized product and vMF
# with an $m$-sized one (300 here, against a decoder state of 1,024 in the vMF paper's
# translation models). `vocab_sweep` measures both heads at each size;
# {doc}`04_vmf_continuous_outputs` ran it live at small sizes ({numref}`fig-vmf-step-time`),
# where the features are narrower than vMF's table and its decoding does *more* work than
# the softmax's: the decoding advantage is the ratio of the two widths, $d/m$, not
# something vMF has by itself.
#
# The committed sweep goes further, from 10k to 800k words, at the vMF paper's sizes
# ($d = 1{,}024$, $m = 300$, 1,400 positions per step, 64 positions per decoding call,
# one decoder step of a batch of 64). It reads `drillbook/results/bench/`; sizes whose step did not
# fit or took too long on the machine that ran it are listed as skipped.

# %%
RESULTS = book.book_results()
bench = {path.stem: json.loads(path.read_text())
         for path in sorted((RESULTS / "bench").glob("*.json"))}
print({name: (r["mode"], r["environment"]["device_name"]) for name, r in bench.items()})

# %% mystnb={"figure": {"name": "fig-vocab-sweep", "caption": "The committed vocabulary sweep (`drillbook/results/bench/cpu-sweep.json`), an untied softmax against vMF with a 300-wide table, both axes logarithmic: the time of one training step of 1,400 positions (left), greedy decoding time per position in calls of 64 positions (middle), and the memory saved for the backward pass plus parameters and the frozen table (right). A size the sweep skipped (its first step over the 30-second limit) is marked by a dotted vertical line in the head's colour."}, "image": {"alt": "Three log-log panels. Left: the softmax's training time rises in a straight line from about 350 ms to 22 s, while vMF's stays flat near 20 ms; a dotted line at 800,000 words marks the size where the softmax was skipped. Middle: both decoding times rise with the vocabulary, vMF's below the softmax's. Right: both memories rise, the softmax's several times higher."}}
sweep = pd.DataFrame(bench["cpu-sweep"]["rows"])
done = sweep[sweep["train_step_s"].notna()] if "train_step_s" in sweep else sweep
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
for name, rows in done.groupby("name"):
    style = {"marker": "o", "label": name, "color": book.head_color(name)}
    axes[0].plot(rows["vocab_size"], 1e3 * rows["train_step_s"], **style)
    axes[1].plot(rows["vocab_size"], 1e6 * rows["decode_token_s"], **style)
    axes[2].plot(rows["vocab_size"],
                 (rows["saved_bytes"] + rows["param_bytes"] + rows["buffer_bytes"]) / 2**20,
                 **style)
for ax, title, unit in zip(axes, ["training step", "greedy decoding, per position",
                                   "saved + parameters + table"], ["ms", "µs", "MiB"],
                           strict=True):
    ax.set(xscale="log", yscale="log", xlabel="vocabulary size V", ylabel=unit, title=title)
    book.tidy_log_axis(ax, "both")
    sizes = sorted(sweep["vocab_size"].unique())  # a tick at every size the sweep tried
    ax.set_xticks(sizes, [f"{v // 1000}k" for v in sizes])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.tick_params(axis="x", labelrotation=45)
skipped = sweep[sweep["skipped"].notna()] if "skipped" in sweep else sweep.iloc[:0]
for _, row in skipped.iterrows():  # a size the sweep gave up on: marked, not dropped
    for ax in axes:
        ax.axvline(row["vocab_size"], color=book.head_color(row["name"]), ls=":", lw=1)
        ax.text(row["vocab_size"], 0.98, f" {row['name']} skipped", rotation=90,
                va="top", ha="right", fontsize=7, color=book.head_color(row["name"]),
                transform=ax.get_xaxis_transform())
axes[0].legend(loc="upper left")
env = bench["cpu-sweep"]["environment"]
fig.suptitle(f"vMF vs softmax, the committed sweep: a CPU ({env['device_name']}, "
             f"{env['threads']} threads), torch {env['torch']}")
fig.tight_layout()
plt.show()
if "skipped" in sweep:
    print(sweep.loc[sweep["skipped"].notna(), ["name", "vocab_size", "skipped"]]
          .to_string(index=False))

# %% tags=["nbval-check-output"]
at = sweep.set_index(["kind", "vocab_size"])
soft_step, vmf_steps = at["train_step_s"]["softmax"], at["train_step_s"]["vmf"].dropna()
speedup, decode = at["train_speedup"]["vmf"], at["decode_speedup"]["vmf"]
print(f"softmax step: {soft_step[10_000]:.2f} s at 10k, {soft_step[400_000]:.1f} s at 400k")
assert 0.3 < soft_step[10_000] < 0.4
skip = sweep.loc[(sweep["kind"] == "softmax") & (sweep["vocab_size"] == 800_000), "skipped"]
print("softmax at 800k:", skip.iloc[0])
assert skip.notna().all()
print(f"vMF step: from {1e3 * vmf_steps.min():.1f} ms to {1e3 * vmf_steps.max():.1f} ms over "
      f"every size")
assert ((vmf_steps > 0.015) & (vmf_steps < 0.025)).all()
print(f"vMF training speed-up: {speedup[10_000]:.0f} at 10k, {speedup[50_000]:.0f} at 50k, "
      f"{speedup[400_000]:,.0f} at 400k")
assert speedup[400_000] > 1000
print(f"decoding FLOPs predict d/m = 1024/300 = {1024 / 300:.1f} x")
up_to_200k = decode[[10_000, 25_000, 50_000, 100_000, 200_000]]
print(f"measured decoding speed-up up to 200k: {up_to_200k.min():.1f} to "
      f"{up_to_200k.max():.1f}; at 400k: {decode[400_000]:.1f}")
table_400k = at.loc[("vmf", 400_000), "buffer_bytes"]
print(f"vMF table at 400k: {table_400k / 1e6:.0f} MB = {table_400k / 2**20:.0f} MiB")

# %% [markdown]
# The softmax step grows in proportion to the vocabulary: about a third of a second at
# 10k words, 22 seconds at 400k on this CPU, and at 800k its first step took longer than
# the sweep's 30-second limit, so that size was skipped. vMF's step stays near 20 ms at
# every size, because its loss never touches the other $V - 1$ words; the speed-up is
# about 19 times at 10k, 87 at 50k and more than 1,000 at 400k. The vMF paper's "up to
# 2.5 times" is for a whole translation model on a GPU, where the encoder and decoder
# take most of the time; the output layer alone gains far more.
#
# Decoding is where vMF gives most of that back. Both heads compare every position with
# every word, softmax through a 1,024-wide product and vMF through a 300-wide one, so
# FLOPs predict about 3.4 times. The measured gain is between 2.4 and 3.0 up to 200k
# words and falls to 1.9 at 400k, where every call of 64 positions reads the whole
# 480 MB (458 MiB) table.
#
# Memory follows the same split. At 400k words a softmax saves 2.25 GB for the backward
# pass (its $n \times V$ scores) and its $V \times d$ weight takes 1.64 GB: 3.89 GB, or
# 3.62 GiB, before the weight's gradient (another 1.64 GB) and any optimiser state. vMF
# saves about 9 MB at every size and owns 1.2 MB of parameters; its only $V$-sized
# memory is the frozen $V \times 300$ table, 0.48 GB, with no gradient. (GB are
# $10^9$ bytes, GiB $2^{30}$.)

# %% tags=["nbval-check-output"]
soft_400k, vmf_400k = at.loc[("softmax", 400_000)], at.loc[("vmf", 400_000)]
step_bytes = soft_400k["saved_bytes"] + soft_400k["param_bytes"]
print(f"softmax at 400k: saved {soft_400k['saved_bytes'] / 1e9:.2f} GB, weight "
      f"{soft_400k['param_bytes'] / 1e9:.2f} GB, together {step_bytes / 1e9:.2f} GB = "
      f"{step_bytes / 2**30:.2f} GiB")
print(f"vMF at 400k: parameters {vmf_400k['param_bytes'] / 1e6:.1f} MB, table "
      f"{vmf_400k['buffer_bytes'] / 1e9:.2f} GB")
print("vMF saves at most", f"{sweep[sweep['kind'] == 'vmf']['saved_bytes'].max() / 1e6:.1f}",
      "MB at any size")

# %% [markdown]
# ## Measured: the whole models on the book's CPU
#
# The committed files also hold the whole PTB models behind the paper's `ptb/awd-lstm`
# encoder (batches of 20 x 70, the trainer's objective through the backward pass) and
# the heads alone at the same sizes. These three reports were measured on the 2-core CPU
# this book is built on; the GPU's report comes in the next section.

# %% tags=["nbval-check-output"]
on_cpu = sorted(n for n, r in bench.items() if r["settings"]["device"] == "cpu")
print("measured on the CPU:", on_cpu)
print("measured on a GPU:", sorted(set(bench) - set(on_cpu)))
model = {r["name"]: r for r in bench["cpu-awd-lstm-ptb"]["rows"]}
alone = {r["name"]: r for r in bench["cpu-heads-ptb"]["rows"]}
for name in ["drill-4", "mos-15"]:
    print(f"{name}: whole model {model[name]['train_ratio']:.2f} x tied per training step "
          f"(FLOPs predict {whole[name]:.2f}), {model[name]['eval_ratio']:.2f} x per "
          f"evaluation token")
for name in ["drill-4", "mos-15"]:
    print(f"{name} alone: {alone[name]['train_ratio']:.1f} x tied measured, "
          f"{flops.loc[name, 'train x tied']:.1f} x by FLOPs")
vmf_50k = at.loc[("vmf", 50_000)]
print(f"vMF at 50k: training {vmf_50k['train_speedup']:.0f} x faster, decoding "
      f"{vmf_50k['decode_speedup']:.1f} x faster than softmax")

# %% [markdown]
# On that CPU the whole-model ratios land near where the FLOP arithmetic of the second
# section puts them:
#
# * **DRILL-4** costs 1.11 times a tied AWD-LSTM per training step (the arithmetic says
#   1.19). Per evaluation token it costs 0.98 times, within the few percent of noise
#   around 1: the cached labels make it as cheap to evaluate as a tied head.
# * **MoS-15** costs 3.29 times per training step (the arithmetic says 3.41). A mixture
#   multiplies the dominant term by $K$; log-space mixing makes it exact, not cheaper;
#   chunking bounds its memory, not its time. Alone, without the encoder, it costs 20.8
#   times a tied head against 15.6 by FLOPs: the elementwise work the count leaves out.
#   DRILL-4's head alone lands on its count: 2.0 times measured, 2.1 by FLOPs.
# * **vMF** trains 87 times faster than a softmax at 50k words and decodes 2.8 times
#   faster at 64 positions per call.
#
# ## Measured on a GPU: DRILL's Table 3 on an H200
#
# Table 3 of the DRILL paper times one epoch of each model on a GTX 1080 Ti. On
# 2026-11-26 an NVIDIA H200 trained the same six rows for one epoch each with drillbook
# (float32, the authors' batch sizes and settings; `drillbook reproduce speed`), two of
# them again under bfloat16 autocast, and ran the authors' own AWD-LSTM, DRILL and MoS
# code for one epoch on the same kind of GPU. The result files and logs ship with the
# package (`drillbook/results/gpu/`); `speed_rows` puts them beside the paper's seconds
# per epoch and beside the means of the authors' own logs on their GTX 1080 Ti GPUs, which
# their repository publishes. Seconds are of the training epoch only; ratios divide by
# the AWD-LSTM row of the same corpus.

# %%
table3 = pd.DataFrame(book.speed_rows(book.gpu_results("fp32", table="speed"),
                                      book.gpu_results("bf16", table="speed"))).set_index("row")
table3[["seconds_per_epoch", "updates", "ms_per_update", "ratio", "paper_seconds_per_epoch",
        "paper_ratio", "repo_ratio", "bf16_seconds_per_epoch"]].round(2)

# %% mystnb={"figure": {"name": "fig-table3-h200", "caption": "DRILL's Table 3 as ratios, three ways: drillbook's rows trained for one epoch on an H200 (float32), the means of the authors' logs on GTX 1080 Ti GPUs, and the paper's numbers (the paper gives DRILL's ratio, 1.2, for both corpora). Logarithmic vertical axis; 1 is the tied AWD-LSTM of the same corpus."}, "image": {"alt": "Grouped bars for ptb-drill, ptb-mos, wt2-drill and wt2-mos. DRILL's three bars sit between 1.1 and 1.2 on both corpora. MoS on Penn Treebank: about 2.2 on the H200 against about 3 in the logs and the paper. MoS on WikiText-2: between 9 and 10 for all three."}}
compared = table3[table3["ratio"] > 1]  # the DRILL and MoS rows
sources = [("ratio", "drillbook, H200"), ("repo_ratio", "authors' logs, GTX 1080 Ti"),
           ("paper_ratio", "DRILL Table 3, GTX 1080 Ti")]
fig, ax = plt.subplots(figsize=(7.5, 3.6))
width = 0.26
for i, ((column, label), color) in enumerate(zip(sources, ["#0173b2", "#de8f05", "#029e73"],
                                                  strict=True)):
    ax.bar([x + (i - 1) * width for x in range(len(compared))], compared[column], width,
           label=label, color=color)
ax.set_xticks(range(len(compared)), compared.index)
ax.set(yscale="log", ylabel="seconds per epoch / AWD-LSTM's",
       title="Cost of an epoch against the tied AWD-LSTM of the same corpus")
ax.set_yticks([1, 1.5, 2, 3, 5, 10], ["1", "1.5", "2", "3", "5", "10"])
ax.minorticks_off()
ax.axhline(1, color="0.5", linewidth=0.8)
ax.legend(frameon=False)
fig.tight_layout()
plt.show()

# %% tags=["nbval-check-output"]
r = table3.round(2)
for row in compared.index:
    print(f"{row}: H200 {r.loc[row, 'ratio']:.2f} x, authors' logs "
          f"{r.loc[row, 'repo_ratio']:.2f} x, paper {table3.loc[row, 'paper_ratio']:.1f} x")
awd = table3.loc["ptb-awd-lstm"]
print(f"ptb-awd-lstm: {awd['seconds_per_epoch']:.1f} s on the H200, "
      f"{awd['paper_seconds_per_epoch']} s in the paper "
      f"({awd['paper_seconds_per_epoch'] / awd['seconds_per_epoch']:.1f} x)")
batches = {row.name: get_config(row.config).train.batch_size for row in book.TABLES["speed"]}
print("batch sizes (columns):", batches)
for mos, base in [("ptb-mos", "ptb-awd-lstm"), ("wt2-mos", "wt2-awd-lstm")]:
    more = table3.loc[mos, "updates"] / table3.loc[base, "updates"]
    dearer = table3.loc[mos, "ms_per_update"] / table3.loc[base, "ms_per_update"]
    print(f"{mos}: {more:.2f} x the updates, each {dearer:.2f} x the time: "
          f"{more * dearer:.2f} x the epoch")
    logged = table3.loc[mos, "repo_ratio"]
    print(f"  the authors' logs, GTX 1080 Ti: {logged:.2f} x the epoch = {more:.2f} x the "
          f"updates x {logged / more:.2f} per update")
targets = {t["target"]: t["measured"] for t in bench["h200-targets"]["targets"]}
print("same batch, one step, H200: MoS-15 / tied "
      f"{targets['MoS-15 train step / tied (AWD-LSTM, PTB)']:.2f} (PTB, 20 x 70), "
      f"{targets['MoS-15 train step / tied (AWD-LSTM, WikiText-2)']:.2f} (WikiText-2, 80 x 70); "
      f"DRILL-4 / tied {targets['DRILL-4 train step / tied (AWD-LSTM, PTB)']:.2f}")

# %% [markdown]
# DRILL's cost carries over from the paper's GPU to the H200: its epoch takes 1.18 times
# the AWD-LSTM's on Penn Treebank and 1.14 times on WikiText-2, where the paper reports
# 1.2 and the authors' logs 1.14 and 1.19. The whole epoch is 3.7 times faster on the
# H200 (12.5 s against the paper's 46 s), but the ratio barely moves: DRILL adds work in
# proportion to what the model already does.
#
# (mos-speed-explained)=
# ### Why an epoch of MoS costs three AWD-LSTM epochs
#
# MoS is another story, and the reason is not its head alone. Table 3 trains each model
# with its own paper's settings, and MoS trains on smaller batches (12 columns on Penn
# Treebank and 15 on WikiText-2, against the AWD-LSTM's 20 and 80). An epoch of MoS is
# therefore more updates, and each update costs more. On the H200 MoS takes 1.65 times
# the updates of the AWD-LSTM on Penn Treebank, each 1.30 times as long: 2.15 times the
# epoch, below the paper's 3.0. On WikiText-2 it takes 5.27 times the updates, each 1.75
# times as long: 9.22 times the epoch, near the paper's 9.7. The authors' own logs, from
# their GTX 1080 Ti, split the same way: on Penn Treebank their 2.97 is the same 1.65
# times the updates, each 1.80 times as long, and on WikiText-2 their 9.68 is 5.27 times
# the updates, each 1.84 times as long. So the paper's 3.0 is, first, a batch of 12
# against one of 20; what each update adds on top depends on the GPU. The cost benchmark on the
# same GPU asks the other question, the head's: the MoS-15 head and a tied head behind
# the *same* AWD-LSTM encoder at the *same* batch, one training step each. There MoS-15
# costs 2.02 times the tied step on Penn Treebank (20 x 70) and 6.92 times on WikiText-2
# (80 x 70), and DRILL-4 1.10. Whether a ratio compares the heads or the papers' whole
# recipes is the first thing to ask of it.
#
# ### The authors' code on the same GPU
#
# The authors' scripts print the milliseconds per batch of every 100 batches. Below, the
# median of those windows after the first (which includes the warm-up), beside
# drillbook's milliseconds per update: its epoch's training seconds over its updates, the
# warm-up included. The two are not measured the same way, so small differences mean
# little.

# %% tags=["nbval-check-output"]
for row in table3.index[table3["authors_ms_per_batch"].notna()]:
    print(f"{row}: authors {table3.loc[row, 'authors_ms_per_batch']:.1f} ms/batch, "
          f"drillbook {table3.loc[row, 'ms_per_update']:.1f} ms/update "
          f"({table3.loc[row, 'ratio_to_authors']:.2f} x)")
authors_mos = {r["run"]: r for r in book.authors_code_timings(
    book.gpu_results("fp32", table="speed") / "authors-code")}["mos-ptb"]
print(f"authors' MoS: epoch ended {authors_mos['epoch_seconds'] is not None}, last batch "
      f"logged {authors_mos['batches_logged']} of {authors_mos['batches_per_epoch']}")
for row in ["ptb-awd-lstm", "ptb-mos"]:
    fp32, bf16 = table3.loc[row, "seconds_per_epoch"], table3.loc[row, "bf16_seconds_per_epoch"]
    print(f"{row}: bf16 autocast {bf16:.1f} s against {fp32:.1f} s in float32 "
          f"({100 * (bf16 / fp32 - 1):+.0f}%)")

# %% [markdown]
# drillbook's AWD-LSTM and DRILL steps take between 1.07 and 1.27 times the authors'
# (18.1 against 15.0 ms on Penn Treebank for the AWD-LSTM). The authors' MoS is the
# exception: 141.4 ms per batch against drillbook's 23.5 ms, six times slower, and its
# first epoch had not ended when it was stopped after batch 600 of 1,106. This page did
# not profile where the authors' MoS spends that time; the two mix their fifteen
# components differently (the authors in probability space, drillbook in log space, see
# chapter 3), which is one place to look.
#
# Mixed precision does not help these models on this GPU. bfloat16 autocast made the
# AWD-LSTM's epoch 20% *slower* and MoS's 6% faster. At 20 columns an LSTM step waits
# on one small kernel after another, not on arithmetic; autocast adds a cast before each
# of them. The speed-up a tensor core promises needs large matrix products, and only
# MoS's fifteen 10,000-word output layers are large enough to gain a little. So
# `train.amp=auto` now chooses by this measurement, not by what the GPU supports:
# bfloat16 for the mixture heads, float32 for every other head.
#
# ### drillbook's step against the authors' logged step
#
# How does drillbook's training step compare with the authors' code on the same GPU?
# An H200 window timed drillbook's step for the AWD-LSTM, DRILL-4 and MoS-15 at the
# authors' Penn Treebank settings (two epochs of 150 updates each; the second epoch's
# training seconds per update), beside the steady milliseconds per batch of the authors'
# code timed on the same GPU:

# %% tags=["nbval-check-output"]
timed = [row for name in ("speed-goals.json", "speed-goals-mos.json") for row in json.loads(
    (book.gpu_results("fp32", table="gpu-ptb") / "bench" / name).read_text())["rows"]
    if row["version"] == "this"]  # the files also keep an older version of the step
for r in timed:
    print(f"{r['model']:<9} {r['ms_per_update']:5.1f} ms/update, the authors' code "
          f"{r['authors_ms_per_batch']:5.1f} ms/batch: {r['ratio']:.2f} x")

# %% [markdown]
# drillbook's DRILL-4 step takes 17.3 ms per update, 1.03 times the authors' code, and
# its AWD-LSTM step 16.0 ms, 1.06 times: one measurement of each, against a log of
# another run. MoS-15 comes out at 0.13 times its authors' code, a ratio that is not
# evidence about drillbook until the authors' MoS is explained. On the H200 their MoS ran
# 127 to 147 ms per batch, no faster than their own log of the same model on a GTX 1080
# Ti, about 125 ms per batch with validation included (the paper's 138 s for an epoch of
# 1,106 batches), while their AWD-LSTM ran 4.6 times faster on the H200 than on the 1080
# Ti (15.0 ms per batch against 69 ms). Something in their MoS, not the GPU, sets its
# speed there (its settings, its `small_batch_size`, a copy to the host each batch are
# the places to look); until a profile says what, a comparison with it measures that
# unknown, not drillbook.

# %% tags=["nbval-check-output"]
authors = {r["run"]: r for r in book.authors_code_timings(
    book.gpu_results("fp32", table="speed") / "authors-code")}
windows = authors["mos-ptb"]["ms_per_batch"]
print(f"the authors' MoS on the H200: {min(windows):.0f} to {max(windows):.0f} ms per batch "
      f"(windows of 100 batches)")
for run, key in [("awd-ptb", "ptb-awd-lstm"), ("mos-ptb", "ptb-mos")]:
    on_1080 = (1e3 * book.paper_value(f"drill:sec4.1.1:{key}-speed", "seconds_per_epoch")
               / authors[run]["batches_per_epoch"])
    on_h200 = authors[run]["steady_ms_per_batch"]
    print(f"{run}: {on_h200:.1f} ms per batch on the H200, {on_1080:.1f} ms on the 1080 Ti "
          f"(validation included): the H200 is {on_1080 / on_h200:.2f} times as fast")
#
# ### Side by side in one process
#
# The ratios above set a time measured today against a log written in another run. A
# third window asked the question directly: `tools/authors_step.py` imports the authors'
# model and loss from their repository, unmodified, and drives them as their training
# script does, beside drillbook's own training step, on the same Penn Treebank batches,
# alternating 100 steps of each, three times. It also profiled ten steps of each and
# timed an evaluation window (10 x 70 positions). The window was opened twice; both times:

# %% tags=["nbval-check-output"]
window3 = book.book_results() / "gpu" / "2026-11-26-h200-window3-fp32" / "bench"


def window3_json(path):
    return json.loads((window3 / path).read_text())


for call in ("call1", "call2"):
    s = window3_json(f"{call}/authors-step-fp32.json")["summary"]
    print(f"{call}: training step {s['ours_train_ms']:.2f} ms, authors {s['theirs_train_ms']:.2f}"
          f" ({s['train_ratio']:.3f} x); evaluation window {s['ours_eval_ms']:.2f} ms, "
          f"authors {s['theirs_eval_ms']:.2f} ({s['eval_ratio']:.2f} x)")
profiles = window3_json("call2/authors-step-fp32.json")["profiles"]
for name in ("drillbook", "authors"):
    p = profiles[name]
    print(f"{name}: {p['device_ms_per_call']:.2f} ms of GPU kernels per step, "
          f"{p['launches_per_call']:.0f} kernel launches; the two largest: "
          f"{p['top'][0]['ms_per_call']:.2f} and {p['top'][1]['ms_per_call']:.2f} ms")

# %% [markdown]
# The two training steps take the same time, 15.2 ms, to within half a percent. The
# profile says why: they launch the same kernels (1,118 against 1,114 per step) for the
# same 12.1 ms of GPU work. Most of
# it is cuDNN's LSTM, whose matrix products already run in TF32 by PyTorch's default
# (their kernel names say `tf32`). The remaining 3 ms of each step are gaps between
# kernels, the same for both. So there is no work left to remove: the 1.06 times above
# was the distance between two measurements, not between two steps. A faster step than
# the authors' has to do *less* GPU work than theirs, or fill the gaps (one CUDA graph for
# the whole step, which the varying window length and the dropout masks make hard; not
# attempted). Evaluation is, if anything, faster (0.98 and 0.85 times): drillbook's
# evaluation now adds each window's loss on the GPU and reads the sum once, as the
# authors' loop does.
#
# Three options could make a step faster, each off by default and measured:
# `train.amp=tf32` (TF32 also for the products cuBLAS computes: the output layer, DRILL's
# label encoder), `train.compile=true` (`torch.compile` of the model) and, for the vMF
# head, `drillbook bench sweep --compile` (its loss compiled).

# %% tags=["nbval-check-output"]
runs = [("fp32", "call1/speed-goals-fp32.json"), ("tf32", "call1/speed-goals-tf32.json"),
        ("compile", "call1/speed-goals-compile.json"),
        ("fp32", "call2/speed-goals-drill-fp32.json"),
        ("tf32", "call2/speed-goals-drill-tf32.json")]
for label, path in runs:
    for r in window3_json(path)["rows"]:
        print(f"{path.split('/')[0]} {label:<7} {r['model']:<8} {r['ms_per_update']:5.1f} "
              f"ms/update: {r['ratio']:.2f} x the authors'")
eager = {r["name"]: r for r in window3_json("call2/targets.json")["reports"][2]["rows"]}
compiled = {r["name"]: r for r in window3_json("call2/sweep-compiled.json")["rows"]}
for name in ("softmax", "vmf-300"):
    print(f"{name} at V = 50,000: {1e3 * eager[name]['train_step_s']:.2f} ms per training "
          f"step as it is, {1e3 * compiled[name]['train_step_s']:.2f} ms compiled")

# %% [markdown]
# TF32 helps where cuBLAS does the work: DRILL-4's step fell from 16.7 to 15.2 ms in one
# call (0.90 times the authors') and from 18.8 to 15.5 ms
# in the other. The AWD-LSTM, whose big products are cuDNN's, gains nothing within the
# noise (14.8 against 15.3 ms). That 18.8 against 16.7 ms for the same float32 run is
# the spread between two calls, the reason to trust only side-by-side ratios.
# `torch.compile` made every step slower: the AWD-LSTM 24.2 ms, DRILL-4 18.1 ms, and the
# vMF loss 3.91 against 2.94 ms. (The training window's length varies from step to step,
# which a compiler must handle by recompiling or by compiling for any length; this page
# did not profile which of the two it did.) So `tf32` is offered and off by default (it
# changes the arithmetic of a run that asks for float32), and compile stays off.
#
# The same window measured the two other costs of this chapter: the mixtures in chunks,
# and the vMF step.

# %% tags=["nbval-check-output"]
for call in ("call1", "call2"):
    for t in window3_json(f"{call}/targets.json")["targets"]:
        if t["target"].startswith(("vMF-300 train", "MoS-15 in chunks", "DOC-15+5 in chunks")):
            value = (f"{t['measured'] / 1e9:.2f} GB" if "bytes" in t["target"]
                     else f"{t['measured']:.2f} x")
            print(f"{call}: {t['target'].split(':')[0]}: {value}")
wt2 = {r["name"]: r for r in window3_json("call2/targets.json")["reports"][1]["rows"]}
for name in ("mos-15", "mos-15-chunk256", "doc-15+5-chunk256"):
    print(f"{name}, WikiText-2, batch 80 x 70: {wt2[name]['peak_bytes'] / 1e9:.1f} GB peak, "
          f"{1e3 * wt2[name]['train_step_s']:.0f} ms per step")

# %% [markdown]
# MoS-15 on WikiText-2 at the authors' batch of 80 needed 45.5 GB for one training step
# when it scored all 5,600 positions at once. In chunks of 256 positions, each recomputed
# in the backward pass, it needs 3.2 GB, and DOC 3.8 GB: both fit a 15 GB T4, at 1.33 times
# the unchunked step's time for MoS (304 against 229 ms). The vMF head trains 2.74 and 3.18
# times faster than a 50,000-word softmax in the two calls. Two things in its step matter
# on a GPU: its Bessel functions launch 156 operations a step (a direct implementation
# launches 532), and its loss weights the positions to keep instead of selecting them with
# a boolean mask, whose size depends on the data and would make the GPU stop and report it
# on every step. It is the head alone, not the paper's comparison: Table 4 of the vMF paper
# times a batch of its whole translation model, 400 ms with a softmax against 160 to 178 ms
# with continuous outputs (2.25 to 2.5 times), encoder and decoder included.

# %% tags=["nbval-check-output"]
print(book.assert_quoted({"vmf:table4:word-ce": {"ms_per_batch": 400},
                          "vmf:table4:emb-cosine": {"ms_per_batch": 160},
                          "vmf:table4:emb-maxmargin": {"ms_per_batch": 178}}))
print(f"{400 / 178:.2f} to {400 / 160:.2f} times")

# %% [markdown]
# ### The fused loss on a GPU
#
# Chunking with recomputation is one way to never hold all of a mixture's scores. The
# fused loss (`drillbook.heads.fused`) is another, and it serves every head whose scores
# are a matrix product, mixtures included. It walks the positions in chunks and, for each
# chunk, forms the scores, their log-normaliser, the target's score and, already in the
# forward pass, the gradient with respect to the scores, $\operatorname{softmax}(s) -
# e_y$ (for a mixture, each component's weighted by its posterior responsibility). It
# folds that gradient straight into the gradients of the context and of the word vectors.
# No $n \times V$ matrix ever exists, and the backward pass has nothing left to
# recompute. On a CPU it is every such head's default in training. On a GPU the plain path
# stays the default and `head.fused_loss = True` takes the fused one; a GPU chunk holds
# 256 MB of scores. A fourth window on an H200 (`tools/fused_gpu.py`) timed one training
# step of the paper-size AWD-LSTM each way, in float32, the faster of two alternating
# rounds, and recorded each step's peak memory:

# %% tags=["nbval-check-output"]
window4 = book.book_results() / "gpu" / "2026-11-29-h200-fp32" / "bench"
fused_steps = {(r["name"], r["size"]): r for r in
               json.loads((window4 / "fused-gpu-steps.json").read_text())["rows"]}
for (name, size), r in fused_steps.items():
    print(f"{name:<9} {size}, {r['tokens']:>5} positions: plain {r['plain_ms']:6.1f} ms "
          f"{r['plain_peak_bytes'] / 1e9:5.2f} GB, fused {r['fused_ms']:6.1f} ms "
          f"{r['fused_peak_bytes'] / 1e9:5.2f} GB: time x {r['time_ratio']:.2f}, "
          f"memory x {r['memory_ratio']:.3f}")
mos_wt2, tied_wt2 = fused_steps["mos-15", "wt2"], fused_steps["tied", "wt2"]
assert 45 < mos_wt2["plain_peak_bytes"] / 1e9 < 46 and mos_wt2["fused_peak_bytes"] < 1.3e9
assert mos_wt2["memory_ratio"] < 0.03 and 0.94 < mos_wt2["time_ratio"] < 0.96
assert (round(mos_wt2["fused_ms"]), round(mos_wt2["plain_ms"])) == (218, 229)
assert round(mos_wt2["fused_peak_bytes"] / 1e9, 1) == 1.2
assert 4 * 1400 * book.SIZES["ptb"] == 56e6  # PTB's scores at 1,400 positions: 56 MB
assert 0.36 < tied_wt2["memory_ratio"] < 0.37 and 1.02 < tied_wt2["time_ratio"] < 1.04
assert all(fused_steps[k, "ptb"]["memory_ratio"] < 0.2 for k in ("mos-15", "doc-15+5"))
assert all(0.97 <= round(fused_steps[k, "ptb"]["time_ratio"], 2) <= 0.98
           for k in ("mos-15", "doc-15+5"))
heads_alone = json.loads((window4 / "fused-gpu.json").read_text())["rows"]
single = [r for r in heads_alone if r["what"] == "head" and r["size"] == "ptb"
          and not r["name"].startswith(("mos", "doc"))]
times = [r["time_ratio"] for r in single]
memories = [r["memory_ratio"] for r in single]
print(f"{len(single)} single-softmax heads alone at PTB size, 1,400 positions: fused "
      f"{min(times):.2f} to {max(times):.2f} x the plain time, {min(memories):.2f} to "
      f"{max(memories):.2f} x its memory")
assert (round(min(times), 2), round(max(times), 2)) == (1.06, 1.52)
assert 0.99 < min(memories) and max(memories) < 1.09

# %% [markdown]
# MoS-15 at WikiText-2's vocabulary and the authors' batch of 80 peaked at 45.5 GB on the
# plain path and at 1.2 GB fused, under 3% of it, and its step was 5% faster (218 against
# 229 ms): the fused loss does what chunks of 256 did for its memory without their third
# more time. MoS and DOC at PTB size keep under a fifth of their memory, 2 to 3% faster.
# The tied AWD-LSTM at WikiText-2 size keeps 37% of its memory, 3% slower. Where the
# scores fit in one chunk the fused path only adds its own work: at PTB's 1,400 positions
# (56 MB of scores) each single-softmax head alone took 1.06 to 1.52 times its plain time,
# and its memory stayed within 9% of the plain path's. So on a GPU it pays for a mixture,
# and for a single softmax once its scores outgrow the memory one can spare; it is off by
# default there. The same window ran the test suite's GPU tests, which check that the
# fused loss and every gradient equal the plain path's on the GPU for every head of the
# registry.

# %% [markdown]
# ## Takeaways
#
# * Count before you time. A head's work is scores ($\propto nV$), label encoding
#   ($\propto V$, cached at evaluation) and context projections ($\propto n$). The counts
#   match PyTorch's own counter exactly.
# * DRILL's overhead is $kd/n$ of a tied head's scores: it shrinks with the batch and
#   vanishes at evaluation. Behind an AWD-LSTM the arithmetic predicts about 1.2 times,
#   as the paper measured.
# * A mixture multiplies the dominant term by $K$, and its elementwise work adds more.
#   Chunking bounds its memory, not its time; the fused loss bounds its memory and
#   saves a little time (on an H200, MoS-15's WikiText-2 step in under 3% of the memory).
# * vMF removes the $V$-sized term from training, and its advantage grows with the
#   vocabulary. Decoding still compares against every word, with a narrower product.
# * Time two codes side by side, in one process, on the same batches. Against the log of
#   another run drillbook's AWD-LSTM step looked 6% slower than its authors'; side by
#   side it is the same step, kernel for kernel.
# * Read a published ratio as a recipe, not a head: DRILL's Table 3 ratio for MoS is
#   mostly its smaller batch (more updates per epoch). On an H200 DRILL keeps its 1.2,
#   and bfloat16 autocast slows the AWD-LSTM down.
#
# ## Exercises
#
# 1. **DRILL at batch 80.** WikiText-2's AWD-LSTM trains on batches of 80 x 70
#    positions. Predict from Eq. {eq}`eq-drill-overhead` and the encoder's FLOPs the
#    ratio of DRILL-4 to a tied head at $V = 10{,}000$, $d = 400$ and 5,600 positions:
#    the head alone, and behind the three-layer AWD-LSTM. Then measure it with
#    `drillbook bench`. At what number of positions does DRILL-4's head alone cost twice
#    a tied head?
#
# ````{admonition} Solution
# :class: dropdown
# The head alone costs $1 + kd/n = 1 + 4 \cdot 400 / 5600 = 1.29$ times a tied head.
# Behind the encoder, both sides gain the encoder's FLOPs:
#
# ```python
# from drillbook.analysis import awd_lstm_flops, head_flops
#
# n = 80 * 70
# enc = awd_lstm_flops(emsize=400, nhid=1150, nlayers=3, tokens=n)
# drill = head_flops("drill", vocab_size=10_000, d=400, tokens=n, depth=4).train_forward
# tied = head_flops("tied", vocab_size=10_000, d=400, tokens=n).train_forward
# print(drill / tied, (enc + drill) / (enc + tied))  # 1.29, 1.047
# ```
#
# So about 1.05 times, against 1.19 at PTB's batch of 20. To measure (the tied head is
# added by itself; on a CPU this takes minutes):
#
# ```
# drillbook bench model ptb/awd-lstm --heads drill-4 --batch-size 80 --repeats 3
# ```
#
# The measured ratio depends on the machine: on a CPU expect it near the prediction, on
# a GPU closer to 1 (the sequential LSTM takes longer than its FLOPs). The head alone
# costs twice a tied head when $kd/n = 1$, at $n = kd = 1{,}600$ positions.
# ````
#
# 2. **The vMF crossovers.** From FLOPs alone, below which vocabulary size is vMF's
#    training step *not* cheaper than a softmax's (features of size $d$, a table of
#    width $m$)? And for which $d$ does vMF decode faster? Check both with
#    `vocab_sweep`.
#
# ````{admonition} Solution
# :class: dropdown
# A softmax's forward pass costs $2nVd$ for the scores; vMF's costs $2ndm$ for its
# projection $Wh$ and nothing $V$-sized. They are equal at $V = m$: with a 300-wide table,
# vMF saves FLOPs above 300 words, whatever $d$ is. Decoding compares with all $V$ words
# through a $d$-wide product (softmax) or an $m$-wide one (vMF): vMF is cheaper when
# $m < d$, so at $d = 256$ it is not, at $d = 1{,}024$ it is, by $d/m = 3.4$.
#
# ```python
# from drillbook.experiments import vocab_sweep
#
# sweep = vocab_sweep((300, 1_000, 3_000, 10_000), d=256, tokens=256,
#                     decode_positions=64, repeats=3, warmup=1)
# for row in sweep["rows"]:
#     print(row["name"], row["vocab_size"], row.get("train_speedup"),
#           row.get("decode_speedup"))
# ```
#
# The measured training crossover lies above 300 words: vMF's loss has work the count
# leaves out (the normaliser $\log C_m(\kappa)$ and its gradient, per position), which a
# small vocabulary does not pay back. Where exactly depends on the machine.
# ````
#
# 3. **A chunk size for a memory budget.** MoS-15 on WikiText-2 ($V = 33{,}278$): what
#    `chunk_size` keeps one $K \times \text{chunk} \times V$ float32 score tensor under
#    1 GiB? Check the largest score tensor with `drillbook.experiments.head_cost`.
#
# ````{admonition} Solution
# :class: dropdown
# $4 \cdot 15 \cdot c \cdot 33{,}278 \le 2^{30}$ gives $c \le 537.8$: chunks of up to
# 537 positions (512 is the nearest power of two, 1.02 GB or 0.95 GiB). The package's
# WikiText-2 MoS config uses 256, about 0.51 GB.
#
# ```python
# from drillbook.experiments import head_cost
#
# cost = head_cost("mos", vocab_size=33_278, d=300, tokens=1_050, n_experts=15,
#                  chunk_size=512, repeats=1, warmup=1)
# print(cost.score_bytes / 2**30)  # 15 * 512 * 33278 * 4 bytes = 0.95 GiB
# ```
#
# The time does not shrink with the chunk: every chunk's scores are computed twice, once
# forward and once again in the backward pass.
# ````
#
# 4. **Does MoS's measured ratio shrink behind the encoder?** The FLOP count predicts
#    that MoS-15's training ratio falls from about 15 times a tied head alone to about 11
#    behind the small profile's encoder. Measure both ratios with ten repeats, three
#    times over, and decide whether the gap between them is larger than the spread of
#    each across the three trials.
#
# ````{admonition} Solution
# :class: dropdown
# Measure both in each trial, so that a slow stretch of the machine hits both:
#
# ```python
# from drillbook.experiments import BENCH_HEADS, compare_heads, compare_models
#
# for trial in range(3):
#     [alone] = compare_heads([BENCH_HEADS["mos-15"]], repeats=10, warmup=2,
#                             vocab_size=10_000, d=128, tokens=140)
#     behind = compare_models(["tied", "mos-15"], "ptb", encoder_config="tutorial/ptb-tied",
#                             repeats=10, warmup=2, batch_size=4, bptt=35, eval_batch_size=4)
#     print(f"alone {alone['train_ratio']:.1f}, behind {behind[1]['train_ratio']:.1f}")
# ```
#
# If each column's three values stay within a unit or two and the columns are several
# units apart, the measurement resolves the shift; if the columns overlap, it does not,
# and more repeats (or a quieter machine) are the remedy. The prediction assumes that
# time follows FLOPs. Where MoS's elementwise work (its softmaxes and the mixture's
# log-sum-exp) takes a larger share of the time than of the FLOPs, both measured ratios
# are higher than predicted, and the gap between them can be smaller.
# ````
