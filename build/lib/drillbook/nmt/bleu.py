"""Corpus BLEU (Papineni et al., 2002) on tokenised text, checked against sacrebleu.

drillbook scores translations of the already tokenised, lowercased Multi30k text, so BLEU
is computed on the tokens as they are: 4-gram precisions clipped by the reference counts,
summed over the corpus, their geometric mean times the brevity penalty. The result equals
``sacrebleu.corpus_bleu(hyps, [refs], tokenize="none")`` (the test suite checks it),
without needing sacrebleu at run time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

__all__ = ["corpus_bleu"]


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
                max_order: int = 4) -> float:
    """BLEU in [0, 100] of tokenised hypotheses against one reference each.

    Args:
        hypotheses, references: equal-length lists of token lists.

    Follows sacrebleu's corpus-level defaults: an n-gram order with no match at all gets
    the "exp" (NIST) smoothed precision ``1 / (2^k total_n)``, ``k`` counting such orders;
    no match of any order, or no n-grams of some order, gives 0.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    matches, totals = [0] * max_order, [0] * max_order
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        hyp_len += len(hyp)
        ref_len += len(ref)
        for n in range(1, max_order + 1):
            h, r = _ngrams(hyp, n), _ngrams(ref, n)
            matches[n - 1] += sum(min(c, r[g]) for g, c in h.items())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    if hyp_len == 0 or not any(matches) or not all(totals):
        return 0.0
    log_precision, smooth = 0.0, 1.0
    for m, t in zip(matches, totals, strict=True):
        if m == 0:
            smooth *= 2.0
            log_precision += math.log(1.0 / (smooth * t))
        else:
            log_precision += math.log(m / t)
    brevity = min(0.0, 1.0 - ref_len / hyp_len)
    return 100.0 * math.exp(brevity + log_precision / max_order)
