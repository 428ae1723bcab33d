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
# # The softmax bottleneck
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/drillbook/drillbook/blob/main/notebooks/01_softmax_bottleneck.ipynb)
#
# A language model is asked one question over and over: *given this context, how likely
# is each word of the vocabulary to come next?* Almost every neural language model
# answers it the same way. An encoder compresses the context into a vector
# $h \in \R^d$, and an output layer scores every word with a dot product and normalises
# the scores with a softmax. This chapter asks what that last step can and cannot
# express, and answers with an experiment in which we know the right answer exactly.
#
# By the end you will have seen, on a computer rather than on paper, that
#
# * a softmax output layer of dimension $d$ produces log-probability matrices of rank at
#   most $d + 2$, however good the encoder is;
# * when the true log-probabilities have higher rank, a gap in KL divergence remains
#   that only a larger $d$ closes;
# * mixing several softmaxes breaks the bound, which is where chapter 3 picks up.

# %% [markdown]
# ## Setting up
#
# The first cell installs `drillbook` when the notebook runs in Google Colab; anywhere
# else it does nothing (`make book` and `make test` install the package into their own
# virtual environment). The second picks the device, seeds every random generator and
# chooses the experiment size: the *small* profile on a CPU, the *full* profile on a
# GPU. Set the environment variable `DRILLBOOK_PROFILE` to `small` or `full` to choose
# yourself.

# %%
import subprocess
import sys

REPO = "git+https://github.com/drillbook/drillbook@main"
if "google.colab" in sys.modules:  # Colab only: install drillbook
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet",
                           f"drillbook[notebooks] @ {REPO}"])

# %%
import matplotlib.pyplot as plt
import pandas as pd
import torch

from drillbook.analysis import (
    DRILL_TOL,
    SyntheticLanguage,
    fit_head,
    singular_values,
)
from drillbook.heads import build_head
from drillbook.notebook import setup

nb = setup(seed=0)

# %% [markdown]
# ## Language modelling as matrix factorisation
#
# Following {cite:t}`yang2018mos` and the presentation of {cite:t}`takase2018doc`
# (Sec. 3), imagine a language with finitely many contexts $c_1, \dots, c_U$ and a
# vocabulary of $V$ words. Stack the true next-word log-probabilities into a matrix
#
# $$
# A = \begin{bmatrix} \log P^*(\,\cdot \mid c_1) \\ \vdots \\ \log P^*(\,\cdot \mid c_U)
# \end{bmatrix} \in \R^{U \times V}.
# $$
#
# A softmax model with context vectors $h_{c} \in \R^d$ (the rows of $H$), output
# word vectors $w_v \in \R^d$ (the rows of $W$) and a bias $b \in \R^V$ assigns
#
# $$
# \log p(v \mid c) = h_c^\top w_v + b_v - \log \sum_{v'} \exp(h_c^\top w_{v'} + b_{v'}).
# $$
#
# The softmax does not care about adding a constant to every score of a context, so the
# model is exact precisely when its logit matrix equals $A$ up to a per-row shift:
#
# $$
# H W^\top + \mathbf{1} b^\top = A + \Lambda \mathbf{1}\mathbf{1}^\top
# \quad\text{for some diagonal } \Lambda .
# $$
#
# Training a language model is therefore a **matrix factorisation** problem, and the
# left-hand side has a hard ceiling on its rank:
#
# $$
# \rank\big(H W^\top + \mathbf{1} b^\top\big) \le d + 1 .
# $$
#
# The matrix of *log-probabilities* a trained model actually outputs subtracts one more
# vector, the row normalisers $\log \sum_{v'} \exp(\cdot)$, so its rank is at most
# $d + 2$. For $d = 400$ that is 402, exactly what the DRILL authors' code finds for the
# softmax and for DRILL on Penn Treebank, counting singular values above 1 (their
# repository's results; the paper {cite:p}`pappas2019drill`, Sec. 4.1.1, reports 400 and
# states no tolerance). {cite:t}`takase2018doc` report 401 (Table 5). If the true $A$ has
# rank far above $d$ (and Yang et al. argue that natural language, with its many contexts
# and meanings, does), no encoder, however powerful, can make a softmax of dimension $d$
# exact. This is the **softmax bottleneck**.

# %% tags=["nbval-check-output"]
from drillbook.papers import assert_quoted

# the ranks quoted above, checked against the package's record of the papers' numbers
print(assert_quoted({"drill:sec4.1.1:rank-awd-lstm": {"rank": 400},
                     "drill:sec4.1.1:rank-drill": {"rank": 400},
                     "drill-repo:rank:softmax": {"rank_tol_1": 402},
                     "drill-repo:rank:drill": {"rank_tol_1": 402},
                     "doc:table5:awd-lstm": {"rank_test": 401}}))

# %% [markdown]
# ## A language whose answer we know
#
# Real corpora never show us $A$. So we build a language that does:
# `drillbook.analysis.SyntheticLanguage` draws logits
# $Z = \tfrac{s}{\sqrt r} F G^\top + \mathbf 1 \log u^\top$ from random factors
# $F \in \R^{U\times r}$, $G \in \R^{V \times r}$, adds a Zipfian unigram $u$, and
# normalises each row: $A = \operatorname{log\_softmax}(Z)$. The **logit rank** $r$ is
# our dial. With $r = V$ the language is as high-rank as a $V$-word language can be.

# %%
n_contexts = nb.pick(small=512, full=4096)
vocab = nb.pick(small=128, full=1024)
language = SyntheticLanguage(n_contexts, vocab, logit_rank=vocab, seed=0)
spectrum_A = singular_values(language.log_probs)
language

# %% [markdown]
# Rank needs a tolerance in floating point. `Spectrum.rank()` uses numpy's relative
# default ($\sigma_{\max} \cdot \max(U, V) \cdot \varepsilon$) unless told otherwise;
# `DRILL_TOL` is the absolute rule of the DRILL authors (count singular values above 1).
# We report both throughout the book, and say which is which.

# %% tags=["nbval-check-output"]
print(f"contexts U = {language.n_contexts}, vocabulary V = {language.vocab_size}")
print(f"rank of A (numpy tolerance):   {spectrum_A.rank()}")
print(f"rank of A (DRILL, tol = 1.0):  {spectrum_A.rank(DRILL_TOL)}")
print(f"entropy H(W | C) = {float(language.entropy()):.3f} nats")

# %% [markdown]
# ## One softmax head, exactly
#
# Before fitting anything, check the ceiling directly. `build_head("softmax", ...)` is
# the untied output layer of the DRILL paper's Eq. 1, $p \propto \exp(W h + b)$. Feed it
# random context vectors, as many as there are contexts, and measure the rank of its
# logits and of its log-probabilities, with and without the bias. We compute in float64 so
# that rounding noise cannot masquerade as extra rank.

# %% tags=["nbval-check-output"]
d = 8
contexts = torch.randn(n_contexts, d, dtype=torch.float64)
rows = []
for bias in (False, True):
    head = build_head("softmax", vocab_size=vocab, d_hidden=d, bias=bias).double()
    with torch.no_grad():
        if bias:  # a fresh head's bias is zero; a trained one's is not
            head.bias.normal_()
        logits, log_probs = head.logits(contexts), head.log_prob(contexts)
    rows.append({"bias": bias, "d": d,
                 "rank(logits)": singular_values(logits).rank(),
                 "rank(log-probs)": singular_values(log_probs).rank()})
print(pd.DataFrame(rows).to_string(index=False))

# %% [markdown]
# Exactly as the algebra says: $d$ for the logits without a bias, $d + 1$ with it, and one
# more for the log-probabilities once the softmax has subtracted each row's normaliser.
# A random head has no reason to land below the ceiling, and neither does a trained one:
# rank $d + 2$ is what you will measure on real models in later chapters.

# %% [markdown]
# ## How close can a softmax of dimension $d$ get?
#
# Now give the softmax every advantage. `drillbook.analysis.fit_head` replaces the
# encoder by a *free* vector $h_c$ for every context, the most powerful encoder there
# could be, and minimises the exact expected divergence
#
# $$
# \mathcal{L}(H, \theta) = \frac1U \sum_{c=1}^{U}
# \mathrm{KL}\big(P^*(\cdot \mid c)\,\big\|\, p_\theta(\cdot \mid h_c)\big)
# $$
#
# by full-batch Adam over $H$ and the head's parameters $\theta$. Whatever divergence is
# left at the end is the output layer's fault alone. We do this for a full-rank language
# ($r = V$) and, as a control, for a low-rank one ($r = 16$).

# %%
steps = nb.pick(small=400, full=1500)
dims = nb.pick(small=[2, 4, 8, 16, 32, 64, 128],
               full=[4, 16, 64, 128, 256, 512, 1024])
low_rank = 16
languages = {
    f"r = V = {vocab}": language,
    f"r = {low_rank}": SyntheticLanguage(n_contexts, vocab, logit_rank=low_rank,
                                         sharpness=3.0, seed=0),
}

results, fitted = [], {}
for name, lang in languages.items():
    for d in dims:
        torch.manual_seed(nb.seed)
        head = build_head("softmax", vocab_size=vocab, d_hidden=d)
        head = head.double().to(nb.device)
        fit = fit_head(lang, head, steps=steps, lr=0.05, seed=nb.seed)
        with torch.no_grad():
            spectrum = singular_values(head.log_prob(fit.hidden))
        fitted[name, d] = (head, fit, spectrum)
        results.append({"language": name, "d": d, "KL (nats)": fit.kl,
                        "rank": spectrum.rank(),
                        "rank (tol=1)": spectrum.rank(DRILL_TOL)})
table = pd.DataFrame(results)

# %% tags=["nbval-check-output"]
print(table.round({"KL (nats)": 3}).to_string(index=False))

# %% [markdown]
# Read the table row by row. For the full-rank language the divergence falls steadily as
# $d$ grows and the rank of every fit sits exactly at its ceiling $d + 2$ (capped at $V$).
# For the rank-16 language the divergence collapses to essentially zero as soon as
# $d \ge 16$: dimension is not the point, **rank** is.

# %%
fig, (ax_kl, ax_rank) = plt.subplots(1, 2, figsize=(11, 4))
for name, group in table.groupby("language", sort=False):
    ax_kl.plot(group["d"], group["KL (nats)"].clip(lower=1e-6), "o-", label=name)
    ax_rank.plot(group["d"], group["rank"], "o-", label=f"fitted head, {name}")
ax_rank.plot(dims, [min(d + 2, vocab) for d in dims], "k--", lw=1,
             label="ceiling d + 2")
ax_rank.axhline(spectrum_A.rank(), color="grey", ls=":",
                label=f"rank of A (r = V = {vocab})")
ax_kl.set(xscale="log", yscale="log", xlabel="head dimension d",
          ylabel="KL(P* || p) after fitting (nats)",
          title="What a softmax of size d misses")
ax_rank.set(xscale="log", yscale="log", xlabel="head dimension d",
            ylabel="rank of log-probability matrix",
            title="Rank is capped at d + 2")
for ax in (ax_kl, ax_rank):
    ax.set_xticks(dims, [str(d) for d in dims])
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# The left panel is the bottleneck in one picture: for the language whose $A$ has full
# rank, a gap that shrinks only as fast as $d$ grows; for the rank-16 language, a drop of
# three orders of magnitude the moment $d$ reaches 16. The floor near $10^{-4}$ after that
# is what a finite run of Adam leaves behind, not a limit of the head: more steps push it
# lower, while no number of steps moves the full-rank curve at small $d$. In the right
# panel every fit, of either language, sits exactly on the ceiling $d + 2$: a trained
# softmax uses all the rank it has.

# %% tags=["nbval-check-output"]
full_name = f"r = V = {vocab}"
kl_full = table[table["language"] == full_name]["KL (nats)"].to_numpy()
shrinks = bool((kl_full[1:] < kl_full[:-1]).all())
print("KL gap shrinks at every step of d:", shrinks)
ceilings = [min(d + 2, vocab) for d in dims]
ranks = table[table["language"] == full_name]["rank"].tolist()
print("every fit has rank min(d + 2, V):   ", ranks == ceilings)

# %% [markdown]
# ## Singular-value spectra
#
# Rank is a single number; the singular values show *how* a matrix fails to be low-rank.
# The true $A$ of the full-rank language has a long, slowly decaying spectrum. Each fitted
# softmax reproduces the leading part of it and then falls off a cliff after its $d + 2$-th
# value, down to rounding noise around $10^{-13}$: the directions beyond the cliff are out
# of its reach. (The Eckart-Young theorem {cite:p}`eckart1936approximation` makes the link
# between the discarded singular values and the best achievable squared error precise;
# the KL objective weights errors differently, but the picture is the same.)

# %%
fig, ax = plt.subplots(figsize=(7, 4))
index = range(1, len(spectrum_A.values) + 1)
ax.semilogy(index, spectrum_A.values, color="black", lw=2, label="true A")
for d in dims[1:-1:2]:
    values = fitted[full_name, d][2].values
    ax.semilogy(range(1, len(values) + 1), values.clip(min=1e-16), lw=1.2,
                label=f"softmax head, d = {d}")
ax.axhline(DRILL_TOL, color="grey", ls=":", lw=1, label="DRILL tolerance (1.0)")
ax.set(xlabel="index $i$", ylabel="singular value $\\sigma_i$",
       title="Spectra of the true and fitted log-probability matrices")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## A preview: mixing breaks the bound
#
# The ceiling comes from one fact: a log-softmax is *linear in $h$ up to a row shift*. A
# mixture of softmaxes {cite:p}`yang2018mos` averages probabilities, not log-probabilities,
#
# $$
# \log p(v \mid c) = \log \sum_{k=1}^{K} \pi_{c,k}\,
# \softmax\big(W h_{c,k}\big)_v ,
# $$
#
# and the logarithm of a sum is not a sum of logarithms: the result is a nonlinear function
# of the context, with no rank ceiling at all. Take two of the low-dimensional fits above,
# each of rank $d + 2$, and mix their distributions half and half:

# %% tags=["nbval-check-output"]
d_small = 4
head, fit, spectrum_1 = fitted[full_name, d_small]
with torch.no_grad():
    log_p1 = head.log_prob(fit.hidden)
    # the same head, each context paired with another context's vector
    log_p2 = head.log_prob(fit.hidden.roll(1, dims=0))
    log_mix = torch.logsumexp(torch.stack([log_p1, log_p2]), dim=0) - torch.log(
        torch.tensor(2.0, dtype=log_p1.dtype))
spectrum_mix = singular_values(log_mix)
print(f"rank of each component: {spectrum_1.rank()} "
      f"(ceiling d + 2 = {d_small + 2})")
print(f"rank of their mixture:  {spectrum_mix.rank()} (vocabulary V = {vocab})")
print(f"mixture rank with DRILL's tol = 1.0: {spectrum_mix.rank(DRILL_TOL)}")

# %% [markdown]
# Two rank-6 matrices produce a mixture of full numerical rank. Full rank is not the same
# as a good fit, and with DRILL's tolerance fewer of the new directions count as
# significant, but the ceiling is gone. Chapter 3 turns this observation into the MoS and
# DOC output heads and measures what they buy on real text; the DRILL paper, on the other
# hand, argues that a better-structured low-rank head can be just as good. This book lets
# you test both claims.
#
# ## Takeaways
#
# * A softmax output layer of dimension $d$ with a bias produces logit matrices of rank at
#   most $d + 1$ and log-probability matrices of rank at most $d + 2$, for *any* encoder.
# * When the true log-probability matrix has higher rank, the best fit leaves a KL gap;
#   we measured it shrinking as $d$ grows and vanishing once $d$ reaches the true rank.
# * "Rank" of a float matrix needs a tolerance: numpy's relative default and DRILL's
#   absolute `tol = 1.0` answer different questions. `drillbook.analysis` makes you pick.
# * Averaging probabilities (a mixture) instead of log-probabilities escapes the ceiling;
#   whether escaping it is *necessary* for good language models is the question of the
#   chapters that follow.
