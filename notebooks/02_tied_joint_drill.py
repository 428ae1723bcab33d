# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
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
# # Tied, bilinear, joint and DRILL heads
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/drillbook/drillbook/blob/main/notebooks/02_tied_joint_drill.ipynb)
#
# Chapter 1 asked what a softmax output layer *can express*. This chapter asks what it
# can *learn*. The output matrix of a language model has one row per word, and in the
# plain softmax each row is learnt on its own: a word seen ten times in the training data
# gets ten updates of its output vector, no matter how similar it is to a word seen ten
# thousand times. The output layers of this chapter share parameters *across words*, to
# different degrees:
#
# | head | scores | shares between words |
# |---|---|---|
# | softmax | $W h + b$ | nothing |
# | tied | $E h + b$ | the input embedding, with the encoder |
# | bilinear | $E W h + b$ | the input embedding, through one linear map |
# | dual (joint) | $\sigma(E U + b_u)\,\sigma(V h + b_v) + b$ | one nonlinear map for all words |
# | DRILL | $E^{(k)} h + b$, a $k$-layer residual encoder of $E$ | a deep network for all words |
#
# We look at each equation next to the code that implements it, count what each costs in
# parameters, train all five on Penn Treebank, and look at *where* they differ: on rare
# words.

# %%
import subprocess
import sys

REPO = "git+https://github.com/drillbook/drillbook@main"
if "google.colab" in sys.modules:  # Colab only: install drillbook
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet",
                           f"drillbook[notebooks] @ {REPO}"])

# %%
import tempfile

import matplotlib.pyplot as plt
import pandas as pd
import torch

from drillbook.analysis import compare_by_frequency, nearest_neighbours, token_nll
from drillbook.cli import param_report
from drillbook.configs import apply_overrides, get_config
from drillbook.data import batchify, load_corpus
from drillbook.heads import BilinearHead, DrillHead, DualHead, build_head
from drillbook.notebook import setup, show_source
from drillbook.train import Trainer, load_run, read_log

nb = setup(seed=0)

# %% [markdown]
# ## One interface, five heads
#
# Every head in `drillbook.heads` maps encoder features $h$ of shape `(..., d_hidden)` to
# log-probabilities over the vocabulary, and every head that shares the input embedding
# receives it as `embedding=`. The heads are interchangeable parts: the same call builds
# each of them.

# %%
V, d = 10_000, 400
embedding = torch.nn.Embedding(V, d)
heads = {kind: build_head(kind, vocab_size=V, d_hidden=d, embedding=embedding)
         for kind in ["softmax", "tied", "bilinear", "dual", "drill"]}
h = torch.randn(2, 3, d)
for kind, head in heads.items():
    print(f"{kind:>9}: log_prob{tuple(h.shape)} -> {tuple(head.log_prob(h).shape)}")

# %% [markdown]
# ### Tied and bilinear
#
# Weight tying {cite:p}`inan2017tying,press2017tying` sets the output matrix to the input
# embedding $E \in \R^{V \times d}$, so $p(y_t \mid y_{<t}) \propto \exp(E h_t + b)$
# (DRILL paper, Eq. 2). The bilinear head {cite:p}`gulordava2018bilinear` inserts one
# learnt map $W \in \R^{d \times d_h}$ between the context and the embedding,
# $\exp(E W h_t + b)$ (Eq. 3), which also frees $d_h$ from having to equal $d$:

# %%
show_source(BilinearHead._scores)

# %% [markdown]
# ### The dual nonlinear mapping (joint input-output embedding)
#
# {cite:t}`pappas2018joint` project both sides into a joint space of size $d_j$ with a
# nonlinearity $\sigma$ (tanh by default):
#
# $$
# p(y_t \mid y_{<t}) \propto \exp\big(\sigma(E U + b_u)\, \sigma(V h_t + b_v) + b\big)
# \qquad \text{(DRILL paper, Eq. 5)}.
# $$
#
# The label side $g_{\text{out}}(E) = \sigma(E U + b_u)$ is a function of the vocabulary
# alone. During training it is recomputed at every step; at evaluation it is a constant,
# and `drillbook` computes it once and caches it (invalidated when any weight changes), so
# evaluating a dual or DRILL head costs what a tied head costs.

# %%
show_source(DualHead._encode_labels)
show_source(DualHead._context)

# %% [markdown]
# ### DRILL: a deep residual label encoder
#
# {cite:t}`pappas2019drill` replace the single label projection by $k$ layers, each with a
# residual connection back to the embedding and dropout on its input (Eqs. 8-12):
#
# $$
# E^{(0)} = E, \qquad
# E^{(i)} = \sigma\big(\delta(E^{(i-1)})\, U^{(i)} + b^{(i)}\big) + E ,
# \qquad p(y_t \mid y_{<t}) \propto \exp(E^{(k)} h_t + b).
# $$
#
# The dropout $\delta$ comes in two kinds. *Standard* dropout draws an independent mask
# for every entry; *variational* dropout draws one mask over the $d$ embedding dimensions
# and applies it to all $V$ words, so every word loses the same directions in a given step.
# The paper's PTB model uses 4 layers, sigmoid activations and variational dropout 0.6.
#
# *Where* the dropout falls differs between the paper and its code. The paper's Eq. 12
# drops the layer's *output*, $f'^{(i)}(E^{(i-1)}) = \delta(f^{(i)}(E^{(i-1)})) \odot
# f^{(i)}(E^{(i-1)})$; the authors' code drops the layer's *input* $E^{(i-1)}$ (so at the
# first layer, $E$ itself) before the projection, which is what the equation above writes
# and what drillbook does. The residual always adds the undropped $E$.

# %%
show_source(DrillHead._encode_labels)

# %% [markdown]
# With depth 0 there is no label encoder left and DRILL *is* the tied head. The test suite
# checks this and the other equivalences (bilinear with $W = I$ is tied; the dual head with
# identity activations and zero biases is bilinear with $W = U^\top V$); here is the first,
# with random weights:

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
tied = build_head("tied", vocab_size=V, d_hidden=d, embedding=embedding)
drill0 = build_head("drill", vocab_size=V, d_hidden=d, embedding=embedding, depth=0)
with torch.no_grad():
    tied.bias.normal_()
    drill0.bias.copy_(tied.bias)
print("DRILL(depth 0) == tied:",
      torch.allclose(drill0.log_prob(h), tied.log_prob(h), atol=1e-6))

# %% [markdown]
# ## What each head costs: the capacity inequality
#
# The DRILL paper (Eq. 6) orders the output layers by their number of *dedicated*
# parameters, those that exist only because of the output layer (the shared embedding is
# counted with the encoder):
#
# $$
# \mathcal C_{\text{tied}} < \mathcal C_{\text{bilinear}} \le \mathcal C_{\text{dual}}
# \le \mathcal C_{\text{base}} ,
# \qquad \mathcal C_{\text{drill}} \approx k\,(d^2 + d) + |V| .
# $$
#
# The paper's Eq. 11 writes $k\,d^2 + |V|$, leaving out the $k\,d$ biases of the label
# layers; the package counts them, and the check below uses the count with biases.
#
# `drillbook params` (and `param_report` behind it) builds each configuration of the
# paper's Table 4 on PyTorch's *meta* device, so no memory is allocated, and counts. The
# fourth column truncates to 0.1M as the paper prints it; the last is the paper's count,
# from the package's record of the papers' numbers (each row of the reproduction table
# `drill-table4` names its own entry).

# %% tags=["nbval-check-output"]
from drillbook.experiments import TABLES
from drillbook.papers import paper_value

rows = []
for row in TABLES["drill-table4"][:8]:  # the output layers (the last two vary DRILL-4)
    config = row.resolve()
    report = param_report(config)
    label = config.head.kind + (f" k={config.head.options['depth']}"
                                if config.head.kind == "drill" else "")
    rows.append({"output layer": label,
                 "dedicated": report["output_layer_dedicated"],
                 "total": report["total"],
                 "total (M, as printed)": report["total_m_as_printed_in_drill"],
                 "paper (M)": paper_value(row.paper_finetuned, "params_m")})
capacity = pd.DataFrame(rows)
print(capacity.to_string(index=False))
assert (capacity["total (M, as printed)"] == capacity["paper (M)"]).all()

# %% [markdown]
# Every total matches the paper's Table 4. (The full-softmax model is so much larger
# because the untied AWD-LSTM also widens its last LSTM layer to 1,150 units, the size of
# the others.) The dedicated counts obey the inequality:

# %% tags=["nbval-check-output"]
c = dict(zip(capacity["output layer"], capacity["dedicated"], strict=True))
print("C_tied < C_bilinear <= C_dual <= C_base:",
      c["tied"] < c["bilinear"] <= c["dual"] <= c["softmax"])
print("C_drill(k) = k (d^2 + d) + V:",
      all(c[f"drill k={k}"] == k * (d * d + d) + V for k in (1, 2, 3, 4)))

# %% [markdown]
# ## Training the five heads on Penn Treebank
#
# Now the heads meet real text. Each run below uses a `tutorial/ptb-*` config: a 2-layer
# AWD-LSTM with 128-dimensional embeddings, the same for every head, trained with the
# AWD-LSTM recipe (SGD with NT-ASGD, variable-length BPTT, the five dropouts, AR/TAR).
# `drillbook.data.load_corpus` finds PTB through `$DRILLBOOK_DATA` or its cache folder,
# and downloads it (checking sha256 sums) the first time.
#
# The heads are the tutorial configs' (`drillbook configs` lists them): the DRILL head has
# 2 layers and variational dropout 0.3, smaller than the paper's 4 layers and 0.6, to
# suit a 128-dimensional embedding and a short run; the dual head's joint space has 128
# dimensions.
#
# The budget depends on the profile. On a CPU (this website) each head trains for 100
# batches, about an eighth of an epoch: enough to see the machinery work and to measure cost,
# **not** enough to rank the heads; their perplexities at this point mostly reflect how
# fast each starts. On a GPU the full profile trains 6 whole epochs each. The paper-sized
# runs (`ptb/awd-lstm-drill` and friends, 500-1000 epochs) are the subject of chapter 6.

# %%
corpus = load_corpus("ptb", download=True)
budget = nb.pick(
    small=["train.epochs=1", "train.max_batches_per_epoch=100",
           "train.max_eval_tokens=20000"],
    full=["train.epochs=6", "train.max_batches_per_epoch=null",
          "train.max_eval_tokens=null"])
kinds = ["tied", "softmax", "bilinear", "dual", "drill"]
run_root = tempfile.mkdtemp(prefix="drillbook-ch02-")
runs = {}
for kind in kinds:
    config = apply_overrides(get_config(f"tutorial/ptb-{kind}"), budget)
    trainer = Trainer(config, f"{run_root}/{kind}", device=nb.device, corpus=corpus,
                      progress=False)
    trainer.fit()
    runs[kind] = trainer.run_dir
print(f"runs in {run_root}")

# %%
results = []
for kind, run_dir in runs.items():
    log = read_log(run_dir)
    config, model, _ = load_run(run_dir, corpus=corpus, device=nb.device)
    results.append({
        "head": kind,
        "valid ppl": log[-1]["best_val_ppl"],
        "dedicated params": model.head.param_counts().dedicated,
    })
results = pd.DataFrame(results).set_index("head")
results.round({"valid ppl": 1})

# %%
fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
for ax, column in zip(axes, results.columns, strict=True):
    results[column].plot.bar(ax=ax, color=[f"C{i}" for i in range(len(results))])
    ax.set(title=column, xlabel="")
    ax.tick_params(axis="x", rotation=0)
axes[1].set_yscale("log")
fig.suptitle(f"Five output heads, same encoder, {nb.profile.name} profile")
fig.tight_layout()
plt.show()

# %% [markdown]
# The parameter column is exact at any budget. The perplexity column is the one to
# distrust in the small profile; run the notebook on a GPU for the full profile. The table
# leaves out time on purpose: these runs follow one another on a shared machine, and
# wall-clock times of separate runs are no speed comparison. What a label encoder costs,
# measured as ratios within one process, is chapter 7's subject; in short, the dual and
# DRILL encoders act on the $V \times d$ embedding once per batch, however many tokens the
# batch holds.

# %% [markdown]
# ## Where the heads differ: rare words
#
# The DRILL paper's Fig. 3 splits the test tokens by how often their target word occurs
# in the training data and compares the mean cross-entropy band by band. For every head
# we compute the per-token loss on (part of) the validation set with `token_nll`, and
# `compare_by_frequency` reports, per band, how much lower the head's cross-entropy is
# than the tied head's, in percent (positive: better than tied). It uses the authors'
# bins ($[1, 50)$, $[50, 100)$, $[100, 250)$, ..., $[5000, \infty)$ training
# occurrences) and their average: for every word type in a band, the relative difference
# (tied $-$ head) / head of its mean loss, then the mean over the band's word types, with
# `<eos>` left out as in their Fig. 3. A per-word mean gives a rare word seen once in the
# validation text as much weight as a frequent one, so a few words can dominate a band:
# `average="token"` compares the band's mean losses instead.

# %%
valid = batchify(corpus.valid, 10).to(nb.device)
max_tokens = nb.pick(small=20_000, full=None)
nll = {}
for kind, run_dir in runs.items():
    _, model, _ = load_run(run_dir, corpus=corpus, device=nb.device)
    nll[kind], target = token_nll(model, valid, bptt=70, max_tokens=max_tokens)
eos = [corpus.vocab.index("<eos>")]
bands = {kind: compare_by_frequency(nll[kind], nll["tied"], target, corpus.vocab.counts,
                                    exclude=eos)
         for kind in kinds if kind != "tied"}
band_table = pd.DataFrame(
    {kind: [b.rel_diff_percent for b in rows] for kind, rows in bands.items()},
    index=[f"{b.label} ({b.n_types} words)" for b in bands["drill"]])
band_table.index.name = "training count of the target"
band_table.round(1)

# %%
ax = band_table.plot.bar(figsize=(8, 4), rot=0)
ax.axhline(0, color="black", lw=0.8)
ax.set(ylabel="cross-entropy reduction vs tied (%)",
       title="Relative loss by word-frequency band (validation)")
plt.tight_layout()
plt.show()

# %% [markdown]
# In the paper, trained to convergence, DRILL's gains over the other heads are largest in
# the lowest-frequency bands (words seen 1 to 100 times), which is the signature of
# parameters shared across words. At the small profile's budget, differences in the rare
# bands mostly show how quickly each head moves its rare-word scores at all; repeat the
# experiment in the full profile before reading them as an effect.

# %% [markdown]
# ## What the output side learns: nearest neighbours
#
# {cite:t}`pappas2018joint` (Table 1) compare a word's neighbours under the *input*
# embedding with its neighbours under the *output* representation the classifier scores
# against. With weight tying the two are the same matrix. A head with a label encoder can
# organise the output side differently. `head.output_embeddings()` returns the matrix each
# head scores against; `nearest_neighbours` ranks words by cosine similarity.

# %%
queries = ["million", "company", "market", "president", "year"]
ids = [corpus.vocab.index(w) for w in queries]
neighbours = {}
for kind in ["tied", "dual", "drill"]:
    _, model, _ = load_run(runs[kind], corpus=corpus, device=nb.device)
    with torch.no_grad():
        tables = {"input": model.encoder.embedding.weight,
                  "output": model.head.output_embeddings()}
        for side, table in tables.items():
            if kind != "tied" or side == "input":  # tied: output is the input
                found = nearest_neighbours(table, ids, k=4)
                neighbours[f"{kind} {side}"] = [
                    ", ".join(corpus.vocab.words[i] for i, _ in row) for row in found]
pd.DataFrame(neighbours, index=queries)

# %% [markdown]
# Read these lists as a demonstration of the tool, not as a result. After 100 updates the
# output sides have barely moved from their random start: where a list is dominated by
# frequent function words, that is an untrained projection placing most words near the
# frequent ones, not learnt structure. The paper's Table 1 comes from converged models;
# the full profile is the place to look for it.

# %% [markdown]
# ## Takeaways
#
# * The five heads are one interface: `build_head(kind, vocab_size=, d_hidden=,
#   embedding=)`; swapping the output layer of a model is a one-word change.
# * Their dedicated parameter counts obey $\mathcal C_{\text{tied}} <
#   \mathcal C_{\text{bilinear}} \le \mathcal C_{\text{dual}} \le \mathcal C_{\text{base}}$,
#   and DRILL adds $d^2 + d$ per layer; the totals reproduce the DRILL paper's Table 4.
# * A label encoder runs over the vocabulary, not over the tokens of a batch, so its cost
#   does not grow with the batch, and at evaluation it is computed once.
# * Whether sharing across words pays off shows up first on rare words; small budgets
#   cannot tell the heads apart, which is why chapter 6 keeps full-length runs and
#   budgeted ones strictly apart.
