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
# # Breaking the bottleneck with mixtures
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/drillbook/drillbook/blob/main/notebooks/03_mixtures_mos_doc.ipynb)
#
# Chapter 1 showed that a softmax of dimension $d$ can only produce log-probability
# matrices of rank $d + 2$, and previewed the way out: average several softmaxes. This
# chapter builds the two output layers that do so, the **mixture of softmaxes** (MoS) of
# {cite:t}`yang2018mos` and the **direct output connection** (DOC) of
# {cite:t}`takase2018doc`, plus **sigsoftmax** {cite:p}`kanai2018sigsoftmax`, which escapes
# the bound with no extra parameters at all. We check that they reach full rank, measure
# what that costs, and end with the question the DRILL paper raises: is full rank what
# a language model needs?

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

from drillbook.analysis import (
    DRILL_TOL,
    SyntheticLanguage,
    fit_head,
    mixture_diagnostics,
    singular_values,
)
from drillbook.configs import apply_overrides, get_config
from drillbook.data import batchify, get_batch, load_corpus
from drillbook.experiments import compare_heads
from drillbook.heads import DOCHead, MoSHead, build_head
from drillbook.heads.mixture import (
    coefficient_of_variation,
    mixture_log_prob,
    mixture_log_prob_reference,
)
from drillbook.notebook import setup, show_source
from drillbook.train import Trainer, load_run, read_log

nb = setup(seed=0)

# %% [markdown]
# ## Why a mixture is not low-rank
#
# A softmax head's log-probabilities are $\log p(w \mid c) = h_c^\top e_w + b_w - Z_c$:
# linear in the context vector, up to the per-context normaliser $Z_c$. Stacked over
# contexts they form $H E^\top + \mathbf 1 b^\top - Z \mathbf 1^\top$, a matrix of rank at
# most $d + 2$. A mixture averages *probabilities*:
#
# $$
# p(w \mid c) = \sum_{k=1}^{K} \pi_{c,k}\, \softmax(E\, k_{c,k} + b)_w ,
# \qquad
# \log p(w \mid c) = \log \sum_{k} \exp\big(\log \pi_{c,k} + k_{c,k}^\top e_w + b_w
# - Z_{c,k}\big).
# $$
#
# The logarithm of a sum is not a sum of logarithms: $\log p$ is now a nonlinear
# function (a log-sum-exp) of $K$ low-rank matrices, and nothing bounds its rank. In MoS
# (DOC paper's Eq. 9 notation), the $K$ context vectors and the weights come from the last
# layer:
#
# $$
# [k_{c,1}; \dots; k_{c,K}] = \tanh(W_l h_c + b_l), \qquad
# \pi_c = \softmax(W_\pi h_c).
# $$
#
# DOC takes $i_n$ of the $J = \sum_n i_n$ vectors from layer $n$ of the encoder, the
# embedding layer included, with the weights still read from the last layer (DOC
# Eqs. 7-11); with all $J$ vectors from the last layer it *is* MoS. One difference between
# the paper and its code: DOC's Eq. 11 computes each vector linearly, $k_{j,c} = W_j
# h^n_c$, while the authors' code (like MoS's) passes it through $\tanh(W_j h^n_c + b_j)$.
# drillbook follows the code, since the published perplexities come from it.

# %%
show_source(MoSHead.components)
show_source(DOCHead.components)

# %% [markdown]
# ### Mixing in log space
#
# The reference MoS code computes the mixture in probability space and then takes
# $\log(p + 10^{-8})$, which quietly puts a floor of $10^{-8}$ under every word. drillbook
# mixes in log space with a log-sum-exp over the components, which is exact and never
# underflows:

# %%
show_source(mixture_log_prob)

# %% [markdown]
# With sharply peaked components, probabilities of unlikely words underflow to exactly
# zero in the probability-space form, even in float64; the log-space form keeps them:

# %% tags=["nbval-check-output"]
gen = torch.Generator().manual_seed(0)
vectors = 300 * torch.randn(50, 4, 8, generator=gen, dtype=torch.float64)
log_prior = torch.log_softmax(torch.randn(50, 4, generator=gen, dtype=torch.float64), -1)
weight = torch.randn(100, 8, generator=gen, dtype=torch.float64)
prob_space = mixture_log_prob_reference(vectors, log_prior, weight, None)
log_space = mixture_log_prob(vectors, log_prior, weight, None)
print(f"-inf entries, probability space: {int(torch.isinf(prob_space).sum())} of "
      f"{prob_space.numel()}")
print(f"-inf entries, log space:         {int(torch.isinf(log_space).sum())}")
print(f"smallest log-probability kept:   {float(log_space.min()):.0f} nats")

# %% [markdown]
# ## Fitting a high-rank language
#
# Back to chapter 1's synthetic language, whose true log-probability matrix $A$ has full
# rank. We fix a small embedding dimension $d$ and let the number of components $K$ grow:
# a softmax of dimension $d$ is stuck at rank $d + 2$, MoS and DOC are not, and
# sigsoftmax escapes with no extra parameters. As in chapter 1, `fit_head` gives every
# context free vectors (for DOC one per layer it reads), so the remaining KL divergence
# measures the output layer alone. Every head here shares an embedding of size $d$.
#
# That makes the comparison between MoS and DOC unequal: DOC reads two layers, so it gets
# two free $d$-dimensional vectors per context where MoS gets one, twice the free
# parameters. The table compares each with the softmax ceiling, not with each other; a
# lower KL for DOC than for MoS at the same $K$ would say as much about the extra free
# vectors as about reading middle layers.

# %%
n_contexts, vocab = nb.pick(small=(512, 128), full=(2048, 512))
d = 8
language = SyntheticLanguage(n_contexts, vocab, logit_rank=vocab, seed=0)
ks = nb.pick(small=[1, 2, 4, 8], full=[1, 2, 4, 8, 16, 32])
steps = nb.pick(small=300, full=1500)


def fitted(kind, **options):
    torch.manual_seed(nb.seed)
    emb = torch.nn.Embedding(vocab, d).double()
    head = build_head(kind, vocab_size=vocab, d_hidden=d, embedding=emb, **options)
    head = head.double()
    fit = fit_head(language, head, steps=steps, lr=0.05, seed=nb.seed)
    with torch.no_grad():
        spectrum = singular_values(head.log_prob(fit.features))
    return head, fit, {"KL (nats)": fit.kl, "rank": spectrum.rank(),
                       "rank (tol=1)": spectrum.rank(DRILL_TOL),
                       "dedicated params": head.param_counts().dedicated}


rows = [{"head": "tied", "K": 1, **fitted("tied")[2]},
        {"head": "sigsoftmax", "K": 1, **fitted("sigsoftmax")[2]}]
for k in ks:
    rows.append({"head": "MoS", "K": k, **fitted("mos", n_experts=k)[2]})
    if k > 1:  # DOC: half the vectors from a second (free) layer
        rows.append({"head": "DOC", "K": k, **fitted(
            "doc", vectors_per_layer=[k // 2, k - k // 2], layer_sizes=[d, d],
            cv_weight=0.0)[2]})
synthetic = pd.DataFrame(rows)

# %% tags=["nbval-check-output"]
print(f"true A: {vocab} words, rank {singular_values(language.log_probs).rank()}; "
      f"embedding size d = {d}, softmax ceiling d + 2 = {d + 2}")
print(synthetic[["head", "K", "rank", "rank (tol=1)", "dedicated params"]]
      .to_string(index=False))

# %%
fig, (ax_kl, ax_rank) = plt.subplots(1, 2, figsize=(11, 4))
for name, group in synthetic.groupby("head", sort=False):
    style = "o-" if len(group) > 1 else "s"
    ax_kl.plot(group["K"], group["KL (nats)"], style, label=name)
    ax_rank.plot(group["K"], group["rank"], style, label=name)
ax_rank.axhline(d + 2, color="grey", ls="--", lw=1, label="softmax ceiling d + 2")
ax_rank.axhline(vocab, color="grey", ls=":", lw=1, label=f"V = {vocab}")
ax_kl.set(xscale="log", xlabel="components K", ylabel="KL after fitting (nats)",
          title=f"Fit to a full-rank language, d = {d}")
ax_rank.set(xscale="log", xlabel="components K", ylabel="rank of log-probabilities",
            title="Mixtures escape the ceiling")
for ax in (ax_kl, ax_rank):
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# With one component MoS is a softmax (over a tanh-projected context) and sits on the
# ceiling. From two components on, the log-probability matrix has (numerically) full
# rank, and the divergence falls as $K$ grows: each component adds a rank-$d$ "view" and
# the log-sum-exp combines them nonlinearly. Sigsoftmax also leaves the ceiling, with no
# extra parameter, though at this $d$ it buys little divergence. Note the column with the
# DRILL tolerance in the table above: fewer singular values exceed 1.0, and the two
# tolerances answer different questions.

# %% [markdown]
# ## DOC's balance term
#
# A mixture can collapse onto a few components. DOC adds $\lambda_\beta \beta$ to the
# loss, with $\beta$ the squared *coefficient of variation* of the mixture weights. The
# paper (Eqs. 12-13) sums the weights of a minibatch into one total per component,
# $s_j$, and takes $\beta = \mathrm{Var}(s) / \mathrm{mean}(s)^2$ over the $J$ totals;
# it reports $\sqrt\beta$ in its Table 4. The authors' code, which produced the published
# perplexities, computes something larger: it sums the weights over time for *each
# sequence*, giving a $B \times J$ matrix $S$, and uses $(J - 1)\,
# \mathrm{Var}_{\text{unbiased}}(S) / \mathrm{mean}(S)^2$ over all $B J$ entries. That
# term is at least about $J - 1$ times the paper's, and far more when sequences lean on
# different components, and $\lambda_\beta = 0.001$ was tuned with it. drillbook trains
# with the authors' form by default (`cv_form="authors"`) and offers Eq. 13 as
# `cv_form="paper"`; `coefficient_of_variation` computes either, and reports the paper's
# form unless asked, so that its numbers compare with Table 4:

# %%
show_source(coefficient_of_variation)

# %% [markdown]
# The DOC paper found (Table 4) that a larger $\lambda_\beta$ gives more balanced weights:
# on PTB's validation set $\sqrt\beta$ fell from 0.276 ($\lambda_\beta = 0$) to 0.092
# ($\lambda_\beta = 0.01$).

# %% tags=["nbval-check-output"]
from drillbook.papers import assert_quoted

print(assert_quoted({"doc:table4:lambda-0": {"sqrt_beta_valid": 0.276},
                     "doc:table4:lambda-0.01": {"sqrt_beta_valid": 0.092}}))

# %% [markdown]
# The same happens on the synthetic language. (`fit_head` adds the head's regulariser to
# its objective, in the authors' form; the contexts of the language play one long
# sequence, for which that form is exactly $J$ times the paper's. The table prints the
# paper's $\sqrt\beta$.)

# %% tags=["nbval-check-output"]
balance = []
for lam in [0.0, 0.01, 0.1, 1.0]:
    head, fit, _ = fitted("doc", vectors_per_layer=[4, 4], layer_sizes=[d, d],
                          cv_weight=lam)
    with torch.no_grad():
        prior = head.mixture_weights(fit.features)
    balance.append({"lambda_beta": lam,
                    "sqrt(beta)": float(coefficient_of_variation(prior)),
                    "KL (nats)": fit.kl})
balance = pd.DataFrame(balance)
print(balance.round(2).to_string(index=False))
print("sqrt(beta) falls as lambda_beta grows:", balance["sqrt(beta)"].is_monotonic_decreasing)

# %% [markdown]
# ## On Penn Treebank
#
# Now the same heads on real text, with the `tutorial/ptb-*` configs (a 2-layer
# AWD-LSTM with 128-dimensional embeddings): tied, DRILL, sigsoftmax, MoS with 5
# experts and DOC with 3 vectors from the last layer and 2 from the first. The budget is
# tiny in the small profile (30 batches of 16 sequences each), which is enough for
# ranks, costs and mixture statistics, and not for perplexity rankings; the full profile
# trains 6 epochs each on a GPU. The paper-sized MoS and DOC runs (`ptb/awd-lstm-mos`,
# `ptb/awd-lstm-doc`, 22M and 23M parameters as in the papers) are chapter 6's.

# %% tags=["nbval-check-output"]
print(assert_quoted({"doc:table7:awd-lstm-mos": {"params_m": 22},
                     "doc:table7:awd-lstm-doc": {"params_m": 23}}))

# %%
corpus = load_corpus("ptb", download=True)
budget = nb.pick(
    small=["train.epochs=1", "train.max_batches_per_epoch=30", "train.batch_size=16",
           "train.max_eval_tokens=4000"],
    full=["train.epochs=6", "train.max_batches_per_epoch=null",
          "train.max_eval_tokens=null"])
run_root = tempfile.mkdtemp(prefix="drillbook-ch03-")
kinds = ["tied", "drill", "sigsoftmax", "mos", "doc"]
runs = {}
for kind in kinds:
    config = apply_overrides(get_config(f"tutorial/ptb-{kind}"), budget)
    Trainer(config, f"{run_root}/{kind}", device=nb.device, corpus=corpus,
            progress=False).fit()
    runs[kind] = f"{run_root}/{kind}"

# %% [markdown]
# For each trained model we build the log-probability matrix of a stretch of validation
# text (contexts x 10,000 words) and measure its rank with both tolerances. The model is
# evaluated in float64 for this: float32 rounding noise is not low-rank, and under
# numpy's relative tolerance it would make every matrix look full-rank. (That noise is
# one reason the DRILL authors counted only singular values above 1.)

# %%
rank_tokens = nb.pick(small=600, full=12_000)  # full: more contexts than words
valid = batchify(corpus.valid, 10).to(nb.device)
ptb_rows = []
for kind, run_dir in runs.items():
    config, model, _ = load_run(run_dir, corpus=corpus, device=nb.device)
    model = model.double()
    rows, hidden = [], model.init_hidden(valid.shape[1])
    with torch.no_grad():
        for i in range(0, rank_tokens // valid.shape[1], 35):
            x, _ = get_batch(valid, i, 35)
            out = model(x, hidden)
            hidden = out.hidden
            rows.append(model.head.log_prob(out.features).reshape(-1, len(corpus.vocab)))
    spectrum = singular_values(torch.cat(rows), method="svd")
    ptb_rows.append({"head": kind, "valid ppl": read_log(run_dir)[-1]["best_val_ppl"],
                     "contexts": spectrum.n_rows, "rank": spectrum.rank(),
                     "rank (tol=1)": spectrum.rank(DRILL_TOL),
                     "ceiling d+2": model.head.d_hidden + 2,
                     "dedicated params": model.head.param_counts().dedicated})
ptb = pd.DataFrame(ptb_rows).set_index("head")
ptb.round({"valid ppl": 0})

# %% [markdown]
# The `rank` column (numpy's tolerance, float64) is the chapter's claim on real text: the
# tied and DRILL heads sit exactly on the ceiling $d + 2 = 130$, while sigsoftmax and the
# mixtures produce matrices whose rank is limited only by the number of contexts we
# stacked. (On the full validation set the mixtures reach the vocabulary size, as DOC's
# Table 5 reports for PTB: 10,000 for MoS and DOC against 401 for AWD-LSTM.) The DRILL
# tolerance tells another story in the small profile: barely trained models predict
# nearly the same distribution everywhere, so few directions move the log-probabilities
# by more than one nat in total. The papers' ranks with that tolerance come from models
# trained for hundreds of epochs.

# %% tags=["nbval-check-output"]
print(assert_quoted({"doc:table5:awd-lstm-mos": {"rank_valid": 10000},
                     "doc:table5:awd-lstm-doc": {"rank_valid": 10000},
                     "doc:table5:awd-lstm": {"rank_valid": 401}}))

# %% [markdown]
# What do the mixtures do with their components? `mixture_diagnostics` summarises the
# weights $\pi$ over the validation text: the mean weight per component, $\sqrt\beta$ over
# the whole stream, and the mean entropy of $\pi$ (at most $\log J$).

# %%
diagnostics = {}
for kind in ["mos", "doc"]:
    _, model, _ = load_run(runs[kind], corpus=corpus, device=nb.device)
    diagnostics[kind] = mixture_diagnostics(model, valid, bptt=35,
                                            max_tokens=nb.pick(small=4000, full=None))
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
for ax, (kind, diag) in zip(axes, diagnostics.items(), strict=True):
    ax.bar(range(len(diag.usage)), diag.usage.numpy(), color="C0")
    ax.axhline(1 / len(diag.usage), color="grey", ls="--", lw=1, label="uniform")
    ax.set(title=f"{kind.upper()}: sqrt(beta) = {diag.cv:.2f}, "
                 f"entropy {diag.entropy:.2f} / {diag.max_entropy:.2f} nats",
           xlabel="component", ylabel="mean weight")
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
print("DOC usage by source layer:",
      {layer: round(u, 3) for layer, u in diagnostics["doc"].usage_by_layer.items()})

# %% [markdown]
# ## What full rank costs
#
# A mixture scores every position $J$ times. `compare_heads` times a training step
# (forward and backward of the loss) and the evaluation loss per token for each head,
# alone, on random inputs, against a tied head measured in the same process. On this
# CPU and at these sizes:

# %%
cost_size = nb.pick(small={"vocab_size": 10_000, "d": 128, "tokens": 16 * 35},
                    full={"vocab_size": 10_000, "d": 400, "tokens": 20 * 70})
cost = pd.DataFrame(compare_heads(
    [("tied", {}), ("drill", {"depth": 4}), ("sigsoftmax", {}),
     ("mos", {"n_experts": 15}), ("mos", {"n_experts": 15, "chunk_size": 128})],
    device=nb.device, repeats=nb.pick(small=2, full=5), warmup=1, **cost_size))
cost["label"] = cost["kind"] + cost["options"].map(
    lambda o: "" if not o.get("chunk_size") else f" (chunks of {o['chunk_size']})")
cost.set_index("label")[["train_ratio", "eval_ratio", "score_bytes"]].round(2)

# %% [markdown]
# MoS with 15 experts costs an order of magnitude more than a tied head per step on a CPU
# (the DRILL paper reports 3.0 times per *epoch* of a whole AWD-LSTM on PTB on a GPU,
# about 138 seconds against 46, where the LSTM's share is larger and the V-sized matrix
# products are cheap). Chunking the positions caps the score memory (`score_bytes`) at
# the price of recomputing each chunk in the backward pass. Chapter 7 measures every head
# at the papers' sizes, alone and inside the AWD-LSTM.

# %% tags=["nbval-check-output"]
print(assert_quoted({"drill:sec4.1.1:ptb-mos-speed": {"seconds_per_epoch": 138,
                                                      "ratio_to_tied": 3.0},
                     "drill:sec4.1.1:ptb-awd-lstm-speed": {"seconds_per_epoch": 46}}))

# %% [markdown]
# ## A question to test: is full rank what we need?
#
# The DRILL paper's own measurement (Sec. 4.1.1) is the counterpoint to this chapter.
# The log-probability matrix of its 4-layer DRILL model on PTB has rank 400, the same as
# AWD-LSTM's, while MoS reaches 9,981. (The paper states no tolerance; the authors'
# repository counts singular values above 1 and gives 402 for both, exactly the softmax
# ceiling $d + 2$ for $d = 400$, and the same 9,981 for MoS.) Yet DRILL's test perplexity
# (55.7) is close to MoS's (54.44) and better than the tied AWD-LSTM's (57.3) with the
# same rank. The suggestion: a low-rank head that *structures* its output space well can
# compete with a high-rank one.

# %% tags=["nbval-check-output"]
print(assert_quoted({"drill:sec4.1.1:rank-drill": {"rank": 400},
                     "drill:sec4.1.1:rank-awd-lstm": {"rank": 400},
                     "drill:sec4.1.1:rank-mos": {"rank": 9981},
                     "drill-repo:rank:drill": {"rank_tol_1": 402},
                     "drill-repo:rank:mos": {"rank_tol_1": 9981},
                     "drill:table1:awd-lstm-drill": {"test_ppl": 55.7},
                     "drill:table1:awd-lstm-mos": {"test_ppl": 54.44},
                     "drill:table1:awd-lstm": {"test_ppl": 57.3}}))

# %% [markdown]
# Everything needed to test this is in the package. Train `ptb/awd-lstm-drill` and
# `ptb/awd-lstm-mos` (or their `tutorial/` versions for a quick look), then compare
# `drillbook eval RUN --split test` and `drillbook rank RUN --split test`. Chapter 6's
# `rank` and `cpu-scale` tables record it, each run with its budget.
#
# ## Takeaways
#
# * A mixture of softmaxes is a log-sum-exp of low-rank matrices and has no rank ceiling;
#   MoS and DOC reach full rank, and so does sigsoftmax without extra parameters.
# * Mix in log space: exact, and no word's probability is floored or lost to underflow.
# * DOC's $\lambda_\beta \beta$ term spreads the weight across components; $\sqrt\beta$
#   measures how evenly.
# * Full rank costs $J$ times the output layer's work; chunking bounds the memory, not
#   the time. Whether the rank is needed is an empirical question, set up above.
