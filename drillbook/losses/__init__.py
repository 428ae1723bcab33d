"""Training losses that are not a softmax cross-entropy: the continuous-output losses of
Kumar & Tsvetkov (2019) (:mod:`~drillbook.losses.vmf`), the Bessel numerics behind their
normaliser (:mod:`~drillbook.losses.bessel`), nearest-neighbour decoding by each loss's own
distance (:mod:`~drillbook.losses.neighbours`) and vMF sampling
(:mod:`~drillbook.losses.vmf_sample`).

>>> import torch
>>> from drillbook.losses import log_cm, nll_vmf
>>> log_cm(torch.tensor([0.0, 1.0, 1e4], dtype=torch.float64), m=300).isfinite().all()
tensor(True)
"""


from .bessel import bessel_ratio, log_bessel_iv, log_cm
from .neighbours import DECODE_METRICS, nearest_neighbour
from .vmf import (
    LOSSES,
    cosine_loss,
    l2_loss,
    max_margin_loss,
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
