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
# # The softmax bottleneck
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/drillbook/drillbook/blob/main/notebooks/01_softmax_bottleneck.ipynb)
#
# *Running time of the small profile (what CI runs): about 55 s on a 2-core CPU, measured
# when the outputs below were produced.*
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
# * a softmax output layer of dimension $d$ produces log-probability matrices of
#   {ref}`rank <glossary-rank>` at most $d + 2$, however good the encoder is;
# * when the true log-probabilities have higher rank, a gap in KL divergence remains
#   that only a larger $d$ closes;
# * a fitted softmax can also have far *more* rank than the language it models, and that
#   extra rank sits on words the model almost never predicts, so a measured rank says
#   little about how good a model is;
# * mixing several softmaxes breaks the bound, which is where
#   {doc}`03_mixtures_mos_doc` picks up.
#
# Symbols keep one meaning throughout the book; the {doc}`notation page <../book/notation>`
# lists them.

# %% [markdown]
# ## Setting up
#
# The first cell installs `drillbook` when the notebook runs in Google Colab; anywhere
# else it does nothing (`make book` and `make test` install the package into their own
# virtual environment). The second picks the device, seeds every random generator and
# chooses the experiment size: the *small* profile on a CPU, the *t4* profile on a GPU
# with less than 20 GiB or without bfloat16 (a free Colab T4), the *full* profile on a
# larger GPU. Choose yourself with the `PROFILE` form field (Colab shows it as a menu) or
# the environment variable `DRILLBOOK_PROFILE`.

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

from drillbook import book
from drillbook.analysis import (
    DRILL_TOL,
    SyntheticLanguage,
    errors_by_probability,
    fit_head,
    singular_values,
)
from drillbook.heads import build_head
from drillbook.notebook import setup

# Colab form: the profile (auto = small on a CPU, t4 on a free Colab GPU, full on a
# large GPU; see the README).
PROFILE = "auto"  # @param ["auto", "small", "t4", "full"]
nb = setup(seed=0, profile=PROFILE)

# %% [markdown]
# ## Language modelling as matrix factorisation
#
# Following {cite:t}`yang2018mos` and the presentation of {cite:t}`takase2018doc`
# (Sec. 3), imagine a language with finitely many contexts $c_1, \dots, c_N$ and a
# vocabulary of $V$ words. Stack the true next-word log-probabilities into a matrix
#
# $$
# A = \begin{bmatrix} \log P^*(\,\cdot \mid c_1) \\ \vdots \\ \log P^*(\,\cdot \mid c_N)
# \end{bmatrix} \in \R^{N \times V}.
# $$ (bottleneck-true-matrix)
#
# A softmax model with context vectors $h_{c} \in \R^d$ (the rows of $H$), output
# word vectors $w_v \in \R^d$ (the rows of $W$) and a bias $b \in \R^V$ assigns
#
# $$
# \log p(v \mid c) = h_c^\top w_v + b_v - \log \sum_{v'} \exp(h_c^\top w_{v'} + b_{v'}).
# $$ (bottleneck-log-softmax)
#
# The softmax does not care about adding a constant to every score of a context, so the
# model is exact precisely when its logit matrix equals $A$ up to a per-row shift:
#
# $$
# H W^\top + \mathbf{1} b^\top = A + \Lambda \mathbf{1}\mathbf{1}^\top
# \quad\text{for some diagonal } \Lambda .
# $$ (bottleneck-factorisation)
#
# Training a language model is therefore a **matrix factorisation** problem, and the
# left-hand side of {eq}`bottleneck-factorisation` has a hard ceiling on its rank:
#
# $$
# \rank\big(H W^\top + \mathbf{1} b^\top\big) \le d + 1 .
# $$ (bottleneck-rank-ceiling)
#
# The matrix of *log-probabilities* a trained model actually outputs,
# {eq}`bottleneck-log-softmax`, subtracts one more vector, the row normalisers
# $\log \sum_{v'} \exp(\cdot)$, so its rank is at most $d + 2$. For $d = 400$ that is
# 402, exactly what the DRILL authors' code finds for the softmax and for DRILL on Penn
# Treebank, counting singular values above 1 (their repository's results; the paper
# {cite:p}`pappas2019drill`, Sec. 4.1.1, reports 400 and states no tolerance).
# {cite:t}`takase2018doc` report 401 (Table 5). If the true $A$ has rank far above $d$
# (and Yang et al. argue that natural language, with its many contexts and meanings,
# does), no encoder, however powerful, can make a softmax of dimension $d$ exact. This is
# the **softmax bottleneck**.

# %% tags=["nbval-check-output"]
# the ranks quoted above, checked against the package's record of the papers' numbers
print(book.assert_quoted({"drill:sec4.1.1:rank-awd-lstm": {"rank": 400},
                          "drill:sec4.1.1:rank-drill": {"rank": 400},
                          "drill-repo:rank:softmax": {"rank_tol_1": 402},
                          "drill-repo:rank:drill": {"rank_tol_1": 402},
                          "doc:table5:awd-lstm": {"rank_test": 401}}))

# %% [markdown]
# ## A language whose answer we know
#
# Real corpora never show us $A$. So we build a language that does:
# `drillbook.analysis.SyntheticLanguage` draws logits
# $Y = \tfrac{s}{\sqrt r} F G^\top + \mathbf 1 \log u^\top$ from random factors
# $F \in \R^{N\times r}$, $G \in \R^{V \times r}$, adds a Zipfian unigram $u$, and
# normalises each row: $A = \operatorname{log\_softmax}(Y)$. The **logit rank** $r$ is
# our dial. With $r = V$ the language is as high-rank as a $V$-word language can be.

# %%
n_contexts = nb.pick(small=512, full=4096)
vocab = nb.pick(small=128, full=1024)
language = SyntheticLanguage(n_contexts, vocab, logit_rank=vocab, seed=0)
spectrum_A = singular_values(language.log_probs)
language

# %% [markdown]
# Rank needs a tolerance in floating point. `Spectrum.rank()` uses numpy's relative
# default ($s_{\max} \cdot \max(N, V) \cdot \varepsilon$) unless told otherwise;
# `DRILL_TOL` is the absolute rule of the DRILL authors (count singular values above 1).
# We report both throughout the book, and say which is which.

# %% tags=["nbval-check-output"]
print(f"contexts N = {language.n_contexts}, vocabulary V = {language.vocab_size}")
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
# \mathcal{L}(H, \theta) = \frac1N \sum_{c=1}^{N}
# \mathrm{KL}\big(P^*(\cdot \mid c)\,\big\|\, p_\theta(\cdot \mid h_c)\big)
# = \frac1N \sum_{c=1}^{N} \sum_{v=1}^{V} P^*(v \mid c)
# \big(\log P^*(v \mid c) - \log p_\theta(v \mid h_c)\big)
# $$ (bottleneck-kl)
#
# by full-batch Adam over $H$ and the head's parameters $\theta$. Whatever divergence is
# left at the end is the output layer's fault alone. We do this for a full-rank language
# ($r = V$) and, as a control, for a low-rank one ($r = 16$).

# %%
steps = nb.pick(small=400, full=1500)
dims = nb.pick(small=[2, 4, 8, 16, 32, 64, 128],
               full=[4, 16, 64, 128, 256, 512, 1024])
low_rank = 16
full_name, low_name = f"r = V = {vocab}", f"r = {low_rank}"
languages = {
    full_name: language,
    low_name: SyntheticLanguage(n_contexts, vocab, logit_rank=low_rank, sharpness=3.0,
                                seed=0),
}
true_rank = {name: singular_values(lang.log_probs).rank()
             for name, lang in languages.items()}

results, fitted = [], {}
for name, lang in languages.items():
    for d in dims:
        torch.manual_seed(nb.seed)
        head = build_head("softmax", vocab_size=vocab, d_hidden=d)
        head = head.double().to(nb.device)
        fit = fit_head(lang, head, steps=steps, lr=0.05, seed=nb.seed)
        with torch.no_grad():
            log_probs = head.log_prob(fit.hidden)
        spectrum = singular_values(log_probs)
        fitted[name, d] = (head, fit, spectrum, log_probs)
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

# %% mystnb={"figure": {"name": "fig-kl-rank-vs-d", "caption": "Left: the KL divergence left after fitting a softmax head of dimension $d$ (log-log axes) to the full-rank language (grey line, filled circles) and to the rank-16 language (grey dashed line, open squares). Right: the rank of each fit's log-probability matrix (numpy's tolerance), where the two languages' fits coincide (each circle sits inside its square), the ceiling $d + 2$ (dotted black) and the true rank of each language's matrix $A$ (thin horizontal lines, labelled): 128 for the full-rank language, 18 for the rank-16 one."}, "image": {"alt": "Two log-log panels against d from 2 to 128. Left: the full-rank language's KL falls from about 1.8 at d = 2 through 0.34 at d = 16 to about 0.0004 at d = 128; the rank-16 language's KL falls to about 0.0001 at d = 16 and stays there. Right: both languages' ranks lie on the line d + 2, from 4 to 128, the rank-16 fits crossing above their language's rank of 18 from d = 32 on."}}
softmax = book.head_color("softmax")
style = {full_name: {"ls": "-", "marker": "o", "ms": 5},  # filled circles inside ...
         low_name: {"ls": "--", "marker": "s", "ms": 10, "mfc": "none"}}  # open squares
fig, (ax_kl, ax_rank) = plt.subplots(1, 2, figsize=(11, 4.4))
for name, group in table.groupby("language", sort=False):
    ax_kl.plot(group["d"], group["KL (nats)"].clip(lower=1e-6), color=softmax,
               label=f"softmax fit, {name}", **style[name])
    ax_rank.plot(group["d"], group["rank"], color=softmax, **style[name])
(ceiling,) = ax_rank.plot(dims, [min(d + 2, vocab) for d in dims], color="black", lw=1,
                          ls=":", label="ceiling d + 2")
for name, rank in true_rank.items():
    ax_rank.axhline(rank, color="black", lw=1, ls=style[name]["ls"], alpha=0.45)
    ax_rank.text(dims[0], rank * (0.8 if name == full_name else 1.08),
                 f"rank(A) = {rank}, {name}", fontsize=8)
ax_kl.set(xscale="log", yscale="log", xlabel="head dimension d",
          ylabel="KL(P* || p) after fitting (nats)",
          title="What a softmax of size d misses")
ax_rank.set(xscale="log", yscale="log", xlabel="head dimension d",
            ylabel="rank of log-probability matrix",
            title="Rank is capped at d + 2")
book.tidy_log_axis(ax_rank, "y")
for ax in (ax_kl, ax_rank):
    book.tidy_log_axis(ax, "x")
    ax.set_xticks(dims, [str(d) for d in dims])
handles = [*ax_kl.get_lines(), ceiling]
fig.legend(handles, [h.get_label() for h in handles], loc="lower center", ncol=3,
           fontsize=9, frameon=False)
fig.tight_layout(rect=(0, 0.08, 1, 1))
plt.show()

# %% [markdown]
# The left panel is the bottleneck in one picture. For the language whose $A$ has full
# rank, each doubling of $d$ narrows the gap, slowly at first (1.78 nats at $d = 2$,
# 0.338 at $d = 16$) and then fast, to 0.000393 nats at $d = 128$, where the ceiling
# $d + 2$ passes the rank of $A$. For the rank-16 language the gap drops by more than three orders
# of magnitude the moment $d$ reaches 16. The floor near $10^{-4}$ after that is what 400
# steps of Adam leave behind, not a limit of the head: a head with $d = 16$ and a bias can
# represent the rank-16 language exactly (the unigram term of its logits is a bias). The
# full-rank language's gap at small $d$ is not the optimiser's doing either: four times
# as many steps lower it by less than 1% for every $d \le 8$ (next cell), while the rank
# ceiling keeps the fit away from $A$.
#
# %% tags=["nbval-check-output"]
# the full-rank gap at small d, fitted again with four times the steps
longer = 4 * steps
for d in [d for d in dims if d <= 8]:
    torch.manual_seed(nb.seed)
    head = build_head("softmax", vocab_size=vocab, d_hidden=d).double().to(nb.device)
    again = fit_head(language, head, steps=longer, lr=0.05, seed=nb.seed).kl
    before = fitted[full_name, d][1].kl
    print(f"d = {d}: KL {before:.3f} after {steps} steps, {again:.3f} after {longer}: "
          f"{100 * (before - again) / before:.1f}% lower")

# %% [markdown]
# In the right panel every fit, of either language, sits exactly on its ceiling $d + 2$.
# For the full-rank language that is the bottleneck at work. For the rank-16 language it
# is stranger: from $d = 32$ on, the fits have *more* rank than the language they model,
# up to 128 against the language's 18, without a better KL. We come back to that
# below.

# %% tags=["nbval-check-output"]
kl_of = {name: group["KL (nats)"].to_numpy() for name, group in table.groupby("language")}
ranks_of = {name: group["rank"].tolist() for name, group in table.groupby("language")}
print("KL gap shrinks at every step of d (r = V):",
      bool((kl_of[full_name][1:] < kl_of[full_name][:-1]).all()))
print("KL (r = V) at d = " + ", ".join(f"{d}: {kl:.3g}" for d, kl
                                       in zip(dims, kl_of[full_name], strict=True)))
ceilings = [min(d + 2, vocab) for d in dims]
for name in languages:
    print(f"ranks of the fits, {name}: {ranks_of[name]}")
print(f"ceilings min(d + 2, V): {ceilings}")
assert all(ranks_of[name] == ceilings for name in languages)
print("true ranks of A:", true_rank)
d_at = {d: i for i, d in enumerate(dims)}
if 8 in d_at and 16 in d_at:  # the small profile's dims
    drop = kl_of[low_name][d_at[8]] / kl_of[low_name][d_at[16]]
    print(f"r = 16: KL falls {drop:,.0f}-fold from d = 8 to d = 16")
    floor = kl_of[low_name][[i for d, i in d_at.items() if d >= 16]]
    print("r = 16, KL at every d >= 16:", ", ".join(f"{kl:.1e}" for kl in floor))
    assert drop > 1000 and ((floor > 1e-5) & (floor < 1e-3)).all()

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

# %% mystnb={"figure": {"name": "fig-spectra", "caption": "Singular values $s_i$ (log scale) against their index $i$ for the full-rank language: the true matrix $A$ (thick black), three softmax fits of increasing $d$ (grey; solid, dashed and dash-dotted in order of $d$), and DRILL's tolerance of 1 (dotted). Each fit follows the true spectrum for its first $d + 2$ values and then drops to rounding noise."}, "image": {"alt": "Singular values on a log scale from 1e-15 to 1e3 against their index from 1 to 128. The true matrix's values decline slowly from about 1000 to 1 across all 128 indices. The fits with d = 4, 16 and 64 follow it for their first 6, 18 and 66 values, then drop vertically to about 1e-12 and stay there."}}
shown = dims[1:-1:2]
fig, ax = plt.subplots(figsize=(7.5, 4.2))
index = range(1, len(spectrum_A.values) + 1)
ax.semilogy(index, spectrum_A.values, color="black", lw=2, label="true A")
for d, ls in zip(shown, ["-", "--", "-."], strict=True):
    values = fitted[full_name, d][2].values
    ax.semilogy(range(1, len(values) + 1), values.clip(min=1e-16), lw=1.4, ls=ls,
                color=softmax, label=f"softmax fit, d = {d}")
ax.axhline(DRILL_TOL, color="black", ls=":", lw=1, label="DRILL tolerance (1.0)")
ax.set(xlabel="index $i$", ylabel="singular value $s_i$",
       title=f"Spectra of the true and fitted matrices ({full_name})")
ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
fig.tight_layout()
plt.show()

# %% tags=["nbval-check-output"]
print("every fit's singular values beyond d + 2 are below 1e-10:",
      all((fitted[full_name, d][2].values[d + 2:] < 1e-10).all() for d in shown))

# %% [markdown]
# ## Rank the language does not have
#
# Back to the puzzle of {numref}`fig-kl-rank-vs-d`. The rank-16 language's matrix $A$ has
# rank 18 ($r$ from the interaction, one for the unigram term, one for the row
# normaliser). Its $d = 16$ fit has rank 18 too. Its $d = 128$ fit has rank 128 with
# numpy's tolerance, and still about 100 with DRILL's tolerance of 1, and its KL
# divergence is no smaller: both are at the floor Adam reaches, around $10^{-4}$. That is
# some eighty singular values above 1 more than the language has (110 more with numpy's
# tolerance), and they buy nothing. Where do they come from?

# %%
fit_low = {d: fitted[low_name, d] for d in (16, dims[-1])}
A_low = languages[low_name].log_probs
for d, (_, fit, _, _) in fit_low.items():
    print(f"r = 16 language, softmax fit with d = {d:>4}: KL = {fit.kl:.1e} nats")

# %% tags=["nbval-check-output"]
d_big = dims[-1]
kl_16, kl_big = fit_low[16][1].kl, fit_low[d_big][1].kl
print(f"rank of A, r = 16 language: {true_rank[low_name]} (numpy), "
      f"{singular_values(A_low).rank(DRILL_TOL)} (tol = 1)")
for d, (_, _, spectrum, _) in fit_low.items():
    print(f"d = {d} fit: rank {spectrum.rank()} (numpy), {spectrum.rank(DRILL_TOL)} (tol = 1)")
print(f"both KLs below 1e-3: {kl_16 < 1e-3 and kl_big < 1e-3}; "
      f"the d = {d_big} fit's KL is not the smaller: {kl_big >= kl_16}")

# %% [markdown]
# The answer is in the objective {eq}`bottleneck-kl`. It weighs the error of every entry,
# $e_{cv} = \log p(v \mid c) - \log P^*(v \mid c)$, by the probability $P^*(v \mid c)$ of
# that word in that context. A word with probability $10^{-7}$ may be off by several nats
# and cost the KL almost nothing. The singular values, and so the rank, weigh every entry
# of the matrix alike. `errors_by_probability` splits the entries by their true
# probability and reports, band by band, how many there are, how much probability they
# carry, and how large the two fits' errors are there:

# %%
bands = {d: errors_by_probability(log_probs, A_low)
         for d, (_, _, _, log_probs) in fit_low.items()}
tail_table = pd.DataFrame({
    "share of entries (%)": [100 * b.entries for b in bands[16]],
    "probability mass": [b.mass for b in bands[16]],
    "rms error, d = 16 (nats)": [b.rms_error for b in bands[16]],
    f"rms error, d = {d_big} (nats)": [b.rms_error for b in bands[d_big]],
    f"share of squared error, d = {d_big} (%)": [100 * b.sq_error_share
                                                   for b in bands[d_big]],
}, index=[b.label for b in bands[16]])
tail_table.style.format({"share of entries (%)": "{:.1f}", "probability mass": "{:.1e}",
                         "rms error, d = 16 (nats)": "{:.3f}",
                         f"rms error, d = {d_big} (nats)": "{:.3f}",
                         f"share of squared error, d = {d_big} (%)": "{:.1f}"})

# %% tags=["nbval-check-output"]
tail, *_, top = bands[d_big]
print(f"entries with P* < 1e-6: {100 * tail.entries:.1f}% of the matrix, carrying "
      f"less than 1e-5 of the probability: {tail.mass < 1e-5}")
print(f"entries with P* >= 1e-2: {100 * top.entries:.1f}% of the matrix, "
      f"{100 * top.mass:.0f}% of the probability")
print("rms error where P* >= 1e-2:",
      {d: round(b[-1].rms_error, 3) for d, b in bands.items()}, "nats")
print("rms error where P* < 1e-6:", {d: round(b[0].rms_error, 2) for d, b in bands.items()},
      f"nats; d = {d_big}: {tail.rms_error / top.rms_error:.0f} times its error where "
      f"P* >= 1e-2")
below_1e4 = sum(b.sq_error_share for b in bands[d_big] if b.high <= 1e-4)
print(f"d = {d_big}: {100 * below_1e4:.1f}% of the squared error where P* < 1e-4")
assert all(b[-1].rms_error < 0.05 for b in bands.values())
assert tail.rms_error > 1 and tail.rms_error > 100 * top.rms_error
assert bands[16][0].rms_error < tail.rms_error and below_1e4 > 0.95

# %% [markdown]
# Read the table from the bottom up. On the words that carry nine-tenths of the
# probability ($P^* \ge 10^{-2}$), both fits are within a few hundredths of a nat of
# the truth. The further down the table, the larger the errors: on the 12% of entries whose
# true probability is below $10^{-6}$, which together carry less than a hundred-thousandth
# of the probability, the $d = 128$ fit is off by more than a nat on average. Nothing in
# the objective pulls those entries towards the truth, and a head of dimension 128 has
# room to put them almost anywhere. The $d = 16$ head has no such room: its errors in the
# tail are smaller, and confined to the 18 directions it has.
#
# That is where the extra singular values live, and a bound makes it precise. Write
# $\rho = 18$ for the rank of $A$ (a symbol of this section only). $A$ is one candidate in
# the Eckart-Young problem "the closest matrix of rank $\rho$ to the fit's matrix
# $\log p$"; the best candidate is no further away, and its squared distance is the energy
# of the fit's spectrum beyond $s_\rho$:
#
# $$
# \sum_{i > \rho} s_i(\log p)^2 \;\le\; \lVert \log p - A \rVert_F^2
# = \sum_{c, v} e_{cv}^2 .
# $$ (bottleneck-tail-bound)
#
# Everything the $d = 128$ fit has beyond rank 18 is bounded by its squared error, and
# more than 95% of that error sits on entries whose true probability is below
# $10^{-4}$. The rank of a log-probability matrix mostly measures what the model does on
# words it never predicts.

# %% tags=["nbval-check-output"]
rho = true_rank[low_name]  # the rank of A (k is DRILL's depth in this book)
# float64 rounding leaves singular values near 1e-12 where the true ones are zero: an
# energy below 1e-18 is that noise, whose digits depend on the machine's arithmetic
NOISE = 1e-18
for d, (_, _, spectrum, log_probs) in fit_low.items():
    beyond = float((spectrum.values[rho:] ** 2).sum())
    squared_error = float((log_probs.to(A_low.device) - A_low).square().sum())
    shown = f"= {beyond:.3g}" if beyond >= NOISE else f"below {NOISE:.0e} (rounding noise)"
    print(f"d = {d:>4}: energy beyond s_{rho} {shown} <= squared error "
          f"{squared_error:.3g}: {beyond <= squared_error}")

# %% mystnb={"figure": {"name": "fig-rank16-errors", "caption": "The two fits of the rank-16 language, $d = 16$ (grey dashed) and $d = 128$ (grey solid). Left: the root-mean-square error of the fitted log-probabilities in bands of one decade of the true probability (log-log axes), with the $10^{-6}$ mark dotted; the errors grow by more than two orders of magnitude from the likeliest words to the least likely. Right: the singular values of both fits and of the true $A$ (thick black), with the true rank 18 (dotted vertical line) and DRILL's tolerance of 1 (dash-dotted): the true spectrum and the $d = 16$ fit, drawn on top of it, drop to rounding noise after 18 values; the $d = 128$ fit carries on above 1 for about eighty more."}, "image": {"alt": "Left, log-log: the rms error of both fits falls from several nats for words of true probability 1e-14 to about 0.01 nats for the likeliest words, the d = 128 fit above the d = 16 fit for improbable words. Right: singular values on a log scale; the true matrix and the d = 16 fit fall together from about 1000 to 1e-12 after 18 values, while the d = 128 fit stays above the tolerance line of 1 until about index 100."}}
edges = [10.0 ** e for e in range(-14, 0)]  # one band per decade of P*
fig, (ax_err, ax_sv) = plt.subplots(1, 2, figsize=(11, 4.2))
ax_err.set(xscale="log", yscale="log")
ax_sv.semilogy(range(1, vocab + 1), singular_values(A_low).values.clip(min=1e-16),
               color="black", lw=2.5, label="true A")
for (d, (_, _, spectrum, log_probs)), ls in zip(fit_low.items(), ["--", "-"], strict=True):
    fine = [b for b in errors_by_probability(log_probs, A_low, edges=edges) if b.entries]
    centre = [((b.low or b.high / 10) * min(b.high, 1.0)) ** 0.5 for b in fine]
    ax_err.plot(centre, [b.rms_error for b in fine], ls=ls, marker="o", ms=4,
                color=softmax, label=f"softmax fit, d = {d}")
    ax_sv.semilogy(range(1, len(spectrum.values) + 1), spectrum.values.clip(min=1e-16),
                   ls=ls, color=softmax, lw=1.4, label=f"softmax fit, d = {d}")
ax_err.axvline(1e-6, color="black", ls=":", lw=1)
ax_err.text(1.5e-6, 2e-3, "P* = 1e-6", fontsize=8)
ax_sv.axvline(rho, color="black", ls=":", lw=1)
ax_sv.text(rho + 2, 1e-12, f"rank(A) = {rho}", fontsize=8)
ax_sv.axhline(DRILL_TOL, color="black", ls="-.", lw=0.8)
ax_sv.text(30, 0.2, "tol = 1", fontsize=8)
ax_err.set(xlabel="true probability P*(v | c)",
           ylabel="rms error of log p (nats)",
           title="Errors grow as the word gets less likely")
ax_sv.set(xlabel="index $i$", ylabel="singular value $s_i$",
          title=f"Spectra of the fits ({low_name})")
ax_err.legend(fontsize=8, loc="lower left")
ax_sv.legend(fontsize=8, loc="upper right")
fig.tight_layout()
plt.show()

# %% [markdown]
# ### What a measured rank can and cannot say
#
# This is the heart of the disagreement between the MoS and DRILL papers.
# {cite:t}`yang2018mos` argue that the log-probability matrix of natural language has
# high rank, so a single softmax is a bottleneck, and mix softmaxes to escape it: on Penn
# Treebank the log-probability matrix of their model has rank 9,981, against 400 for the
# softmax of the {ref}`AWD-LSTM <glossary-awd-lstm>` {cite:p}`pappas2019drill`.
# {cite:t}`pappas2019drill` report their DRILL head at the softmax's rank, 400, yet at a
# test {ref}`perplexity <glossary-perplexity>` of 55.7 against MoS's
# 54.44 (Table 1), and conclude that the classifier "does not necessarily need to be high
# rank" if it captures the structure of the output space.
#
# The experiment above does not decide between them, but it shows what a rank measured on
# a model can and cannot carry. The count includes every direction in which the matrix
# varies, and the variation is largest where the model is least constrained: on the words
# a context makes improbable, which are most of each row of a real vocabulary (in any
# context, at most 100 of Penn Treebank's 10,000 words can have a probability of 1% or
# more). A fit with rank 128 and one with rank 18 were equally good here; a fit can also
# have full rank and be poor (the mixture below). DRILL's tolerance of 1 does not filter
# the tail either: in log space the tail's errors are nats, not rounding noise. What
# matters for the likelihood is the rank of the part of the matrix that carries
# probability, and the fair test of the bottleneck is the one the left panel of
# {numref}`fig-kl-rank-vs-d` makes: a KL gap (or a perplexity) against a truth of known
# rank. {doc}`03_mixtures_mos_doc` runs that test for the mixtures.

# %% tags=["nbval-check-output"]
# the papers' numbers quoted above, checked against the record
print(book.assert_quoted({"drill:sec4.1.1:rank-mos": {"rank": 9981},
                          "drill-repo:rank:mos": {"rank_tol_1": 9981},
                          "drill:table1:awd-lstm-drill": {"test_ppl": 55.7},
                          "drill:table1:awd-lstm-mos": {"test_ppl": 54.44}}))

# %% [markdown]
# ## A preview: mixing breaks the bound
#
# The ceiling comes from one fact: a log-softmax is *linear in $h$ up to a row shift*. A
# mixture of softmaxes {cite:p}`yang2018mos` averages probabilities, not log-probabilities,
#
# $$
# \log p(v \mid c) = \log \sum_{j=1}^{K} \pi_{c,j}\,
# \softmax\big(W h_{c,j}\big)_v ,
# $$ (bottleneck-mos)
#
# and the logarithm of a sum is not a sum of logarithms: the result is a nonlinear function
# of the context, with no rank ceiling at all. Take two of the low-dimensional fits above,
# each of rank $d + 2$, and mix their distributions half and half:

# %% tags=["nbval-check-output"]
d_small = 4
head, fit, spectrum_1, log_p1 = fitted[full_name, d_small]
with torch.no_grad():
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
# as a good fit (the two components are $d = 4$ fits, far from $A$), and with DRILL's
# tolerance fewer of the new directions count as significant, but the ceiling is gone.
# {doc}`03_mixtures_mos_doc` turns this observation into the MoS and DOC output heads and
# measures what they buy; the DRILL paper, on the other hand, argues that a
# better-structured low-rank head can be just as good ({doc}`02_tied_joint_drill`). This
# book lets you test both claims.
#
# ## Trained language models: where their ranks land
#
# Everything so far fitted heads to a language we made. The papers measured trained models
# on Penn Treebank: DRILL Sec. 4.1.1 reports rank 400 for the AWD-LSTM and for DRILL
# ($d = 400$) and 9,981 for MoS; DOC Table 5 reports 401 for the AWD-LSTM and the full
# 10,000 for MoS and DOC. The DRILL authors also published what their code counted,
# singular values above 1, on the whole validation and test text (73,760 and 82,430
# tokens); `drillbook.authors` reads their results file, and the cell prints it beside
# the papers' text.

# %% tags=["nbval-check-output"]
print(book.assert_quoted({
    "drill:sec4.1.1:rank-awd-lstm": {"rank": 400}, "drill:sec4.1.1:rank-drill": {"rank": 400},
    "drill:sec4.1.1:rank-mos": {"rank": 9981}, "doc:table5:awd-lstm": {"rank_test": 401},
    "doc:table5:awd-lstm-mos": {"rank_test": 10000},
    "doc:table5:awd-lstm-doc": {"rank_test": 10000}}))
theirs = pd.DataFrame(book.authors_ranks()).T
print("the DRILL authors' results file (tol = 1):")
print(theirs.to_string())
print("single softmaxes at d + 2 = 402 on both texts:",
      bool((theirs.loc[["Softmax", "DRILL"]] == 400 + 2).all().all()))

# %% [markdown]
# Their two single-softmax models sit exactly on the ceiling $d + 2 = 402$, and MoS is 19
# short of the 10,000 words. The `gpu-ptb` {ref}`plan <glossary-runs>` trains the AWD-LSTM,
# DRILL, MoS and DOC at the papers' size and takes the same rank on the first 4,000 test
# positions, rounded up to whole windows of 70: 4,060 positions. The plan's first {ref}`GPU
# window <glossary-runs>` (an H200, nine minutes for everything) took that rank for the two
# mixtures only: its deadline stopped the AWD-LSTM and DRILL before their test evaluation
# ({doc}`06_reproductions` reads its result files). The cell below says what each row
# reached. Its `d` column is the size of the vectors each head scores the words with: a
# mixture's components are 280-dimensional on Penn Treebank (its last LSTM layer, 620 wide,
# is projected down to them), so each component alone is capped at $280 + 2 = 282$.

# %% tags=["nbval-check-output"]
# from a GPU window's result files, when one is committed
trained_gpu = book.plan_results("gpu-ptb")
if trained_gpu:  # the papers' size, from a GPU window
    print(pd.DataFrame(book.window_rows(trained_gpu)).round(1).to_string(index=False))
    gpu_ranks = pd.DataFrame(book.rank_rows(trained_gpu)).set_index("row")
    print(gpu_ranks.round(1).to_string())
    print("test positions of each matrix:", sorted(set(gpu_ranks["positions"])))
    print("one component alone at most d + 2 =", sorted(set(gpu_ranks["d"] + 2)),
          "| a single softmax over the AWD-LSTM's 400 dimensions at most 402")
    print("every measured rank above 402 under both tolerances:",
          bool((gpu_ranks[["rank_tol_1", "rank_numpy_tol"]] > 400 + 2).all().all()))
    print("full rank under numpy's tolerance:",
          bool((gpu_ranks["rank_numpy_tol"] == gpu_ranks["positions"]).all()))
else:
    print(book.missing_evidence("gpu-ptb"))

# %% [markdown]
# Two epochs into training at the papers' size, MoS-15 and DOC already have full rank
# under numpy's tolerance, 4,060 of 4,060 positions, and 1,046 and 1,007 singular values
# above 1: past the 282 of any one of their components, and past the 402 that caps a
# single softmax over the AWD-LSTM's 400 dimensions. They are not comparable with the
# authors' 9,981, for two reasons. No rank on 4,060 positions can exceed 4,060, where the
# authors' matrix has a row for every position of the test text and can reach the 10,000
# words; and their MoS trained for hundreds of epochs, ours for two. Without our tied and
# DRILL rows the window does not show the papers' comparison either. The committed
# `cpu-scale` table stands in for that: every head on a small AWD-LSTM ($d = 128$, 900
# updates on Penn Treebank), the rank taken on 2,240 test positions with both tolerances.

# %% tags=["nbval-check-output"]
small = pd.DataFrame(book.rank_rows(book.table_results("cpu-scale"))).set_index("row")
print(small[["d", "rank_tol_1", "rank_numpy_tol", "positions", "val_ppl"]].round(1)
      .to_string())
single = ["softmax", "tied", "bilinear", "dual", "dual-lr5", "drill-1", "drill-2",
          "drill-4"]
print("single-softmax heads, numpy's tolerance:", small.loc[single, "rank_numpy_tol"].tolist(),
      "(d + 2 = 130)")
assert (small.loc[single, "rank_numpy_tol"] == 128 + 2).all()
print("... and under tol = 1:", small.loc[single, "rank_tol_1"].to_dict())
mixtures = ["mos", "doc", "sigsoftmax"]
print("MoS, DOC, sigsoftmax (numpy tolerance):",
      small.loc[mixtures, "rank_numpy_tol"].tolist(), "of",
      small.loc[mixtures, "positions"].tolist(), "positions")
print("MoS, DOC, sigsoftmax (tol = 1):", small.loc[mixtures, "rank_tol_1"].tolist())

# %% [markdown]
# The small trained models behave as the synthetic fits did. Every head that ends in one
# softmax over a $d$-sized vector (untied, tied, bilinear, both dual rows,
# DRILL at every depth) has rank exactly $d + 2 = 130$ under numpy's tolerance, however it
# was trained. Under DRILL's tolerance of 1, which counts only singular values above 1,
# the untied, tied and DRILL heads keep all 130; the bilinear head has 68 and the dual
# head 13 (36 at the learning rate it trains at; {doc}`06_reproductions` explains the two
# dual rows). MoS, DOC and sigsoftmax leave the ceiling: 2,236 of the 2,240 possible under
# numpy's tolerance. With a tolerance of 1 they count 353, 1,418 and 282. With 2,240 rows
# no rank here can reach the papers' 9,981. What this small table cannot show is the
# papers' own comparison, ranks at $d = 400$ beside the perplexities those models reach;
# the `gpu-ptb` plan measures them on 4,060 test positions.
#
# ## Takeaways
#
# * A softmax output layer of dimension $d$ with a bias produces logit matrices of rank at
#   most $d + 1$ and log-probability matrices of rank at most $d + 2$, for *any* encoder.
# * When the true log-probability matrix has higher rank, the best fit leaves a KL gap;
#   we measured it shrinking as $d$ grows and vanishing once $d$ reaches the true rank.
# * A fit can have much more rank than the language: the extra directions come from its
#   errors on improbable words, which the likelihood hardly sees. A measured rank is a
#   statement about the whole matrix, tail included, not about the probable part.
# * Trained single-softmax language models sit on the same ceiling; MoS, DOC and
#   sigsoftmax leave it, with ranks that depend strongly on the tolerance.
# * "Rank" of a float matrix needs a tolerance: numpy's relative default and DRILL's
#   absolute `tol = 1.0` answer different questions. `drillbook.analysis` makes you pick.
# * Averaging probabilities (a mixture) instead of log-probabilities escapes the ceiling;
#   whether escaping it is *necessary* for good language models is the question of the
#   chapters that follow.

# %% [markdown]
# ## Exercises
#
# **1. A constant bias.** In the cell of "One softmax head, exactly", give the $d = 8$
# head the same bias for every word, `head.bias.fill_(3.0)`, instead of a random one.
# Predict the ranks of its logits and of its log-probabilities, then measure them.
#
# ````{admonition} Solution
# :class: dropdown
# The logits are $H W^\top + 3 \cdot \mathbf 1 \mathbf 1^\top$: the constant adds one
# direction, so their rank is $d + 1 = 9$, as with a random bias. The log-probabilities
# do not change at all: a bias that is the same for every word adds the same number to
# every score of a context, and the softmax removes per-row shifts. They are the
# log-probabilities of the head without a bias, of rank $d + 1 = 9$ (not $d + 2$).
#
# ```python
# head = build_head("softmax", vocab_size=vocab, d_hidden=8, bias=True).double()
# with torch.no_grad():
#     head.bias.fill_(3.0)
#     print(singular_values(head.logits(contexts)).rank(),      # 9
#           singular_values(head.log_prob(contexts)).rank())    # 9
# ```
# ````
#
# **2. A language without a unigram.** `SyntheticLanguage(..., zipf=0.0)` makes the
# unigram prior $u$ uniform. What is the rank of $A$ for $r = 16$ now? Derive it from the
# definition of $Y$, then check.
#
# ````{admonition} Solution
# :class: dropdown
# With a uniform $u$, the term $\mathbf 1 \log u^\top$ adds the same constant $-\log V$
# to every entry, a per-row shift that the row normalisation removes. What is left is the
# rank-$r$ interaction $F G^\top$ minus the row normalisers, one more direction:
# $\rank A = r + 1 = 17$, both with numpy's tolerance and with `tol = 1` (for $N = 512$,
# $V = 128$, seed 0).
#
# ```python
# flat = SyntheticLanguage(n_contexts, vocab, logit_rank=16, zipf=0.0, seed=0)
# spectrum = singular_values(flat.log_probs)
# print(spectrum.rank(), spectrum.rank(DRILL_TOL))  # 17 17
# ```
# ````
#
# **3. An absolute tolerance and the size of the matrix.** An $N \times V$ matrix of
# independent errors of standard deviation $\tau$ has its singular values between about
# $\tau(\sqrt N - \sqrt V)$ and $\tau(\sqrt N + \sqrt V)$ when $N \gg V$. Predict the
# rank with `tol = 1` of `tau * torch.randn(512, 128)` for $\tau = 0.1$ and for
# $\tau = 0.02$, and measure it. Then compute how small independent errors would have to
# be for *every* one of the 10,000 directions of the DRILL authors' Penn Treebank test
# matrix (82,430 positions by 10,000 words) to count.
#
# ````{admonition} Solution
# :class: dropdown
# For $512 \times 128$, $\sqrt N \pm \sqrt V \approx 22.6 \pm 11.3$. With $\tau = 0.1$
# every singular value lies between about 1.13 and 3.4, so all 128 count; with
# $\tau = 0.02$ they lie between about 0.23 and 0.68, and none does. For the test
# matrix, $\sqrt{82430} - \sqrt{10000} \approx 187$, so errors of about
# $1 / 187 \approx 0.005$ nats per entry already put every singular value above 1: an
# absolute tolerance of 1 is small next to a matrix with 824 million entries.
#
# ```python
# gen = torch.Generator().manual_seed(0)
# for tau in (0.1, 0.02):
#     noise = tau * torch.randn(512, 128, generator=gen, dtype=torch.float64)
#     print(tau, singular_values(noise).rank(DRILL_TOL))  # 128, then 0
# ```
# ````
#
# **4. Smoothing the truth.** Mix the rank-16 language with a little of the uniform
# distribution, $P_\varepsilon = (1 - \varepsilon) P^* + \varepsilon / V$ with
# $\varepsilon = 10^{-4}$. Bound $\mathrm{KL}(P^* \,\|\, P_\varepsilon)$ before computing
# it, predict the rank of $\log P_\varepsilon$, and measure both.
#
# ````{admonition} Solution
# :class: dropdown
# Since $P_\varepsilon \ge (1 - \varepsilon) P^*$ entry by entry,
# $\mathrm{KL}(P^* \| P_\varepsilon) \le -\log(1 - \varepsilon) \approx 10^{-4}$ nats;
# the exact value for the small profile's language is about $9 \times 10^{-6}$, better
# than any fit above. Yet $\log P_\varepsilon$ is the logarithm of a sum, a mixture like
# {eq}`bottleneck-mos`, with no rank ceiling: every entry whose $P^*$ is far below
# $\varepsilon / V \approx 8 \times 10^{-7}$ is lifted to about $\log(\varepsilon / V)$,
# a bend that only the tail feels. The rank jumps from 18 to the full 128, with numpy's
# tolerance and with `tol = 1`. A model can be almost perfect and have full rank; the rank
# records what it does on the improbable words.
#
# ```python
# import math
# A, eps = languages[low_name].log_probs, 1e-4
# smoothed = torch.logaddexp(A + math.log1p(-eps),
#                            torch.full_like(A, math.log(eps / vocab)))
# print(float(languages[low_name].kl(smoothed)))               # about 9e-06
# spectrum = singular_values(smoothed)
# print(spectrum.rank(), spectrum.rank(DRILL_TOL))              # 128 128
# ```
# ````
