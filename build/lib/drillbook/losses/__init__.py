"""Training losses that are not a softmax cross-entropy.

:mod:`drillbook.losses.vmf` holds the continuous-output losses of Kumar & Tsvetkov (2019):
the von Mises-Fisher negative log-likelihood and its variants, with a device-native,
float64-accurate ``log C_m(κ)`` (no ``scipy``, no underflow), the paper's baselines
(squared error, cosine, max-margin) and nearest-neighbour decoding by each loss's own
distance.

>>> import torch
>>> from drillbook.losses import log_cm, nll_vmf
>>> log_cm(torch.tensor([0.0, 1.0, 1e4], dtype=torch.float64), m=300).isfinite().all()
tensor(True)
"""

from __future__ import annotations

from .vmf import (
    DECODE_METRICS,
    LOSSES,
    bessel_ratio,
    cosine_loss,
    l2_loss,
    log_bessel_iv,
    log_cm,
    max_margin_loss,
    nearest_neighbour,
    nll_vmf,
    nll_vmf_reg1,
    nll_vmf_reg2,
    vmf_pseudo_loss,
)
from .vmf_sample import sample_vmf

__all__ = [
    "DECODE_METRICS",
    "LOSSES",
    "bessel_ratio",
    "cosine_loss",
    "l2_loss",
    "log_bessel_iv",
    "log_cm",
    "max_margin_loss",
    "nearest_neighbour",
    "nll_vmf",
    "nll_vmf_reg1",
    "nll_vmf_reg2",
    "sample_vmf",
    "vmf_pseudo_loss",
]
