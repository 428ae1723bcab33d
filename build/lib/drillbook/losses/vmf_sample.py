"""Drawing from the von Mises-Fisher distribution (Wood, 1994), for pictures and tests.

``x ~ vMF(mu, kappa)`` on the unit sphere ``S^{m-1}`` is built from its component along
``mu``, ``w = mu^T x`` (whose density is proportional to
``exp(kappa w) (1 - w^2)^{(m-3)/2}``, drawn by rejection from a transformed Beta), and a
uniformly random direction orthogonal to ``mu``. ``kappa = 0`` is the uniform
distribution. The mean of ``w`` is ``A_m(kappa) = I_{m/2}(kappa) / I_{m/2-1}(kappa)``, the
Bessel ratio that also drives the NLLvMF gradient; the tests check it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["sample_vmf"]


def sample_vmf(mu: Tensor, kappa: float, n: int, *, generator: torch.Generator | None = None
               ) -> Tensor:
    """``n`` samples of ``vMF(mu, kappa)``, shape ``(n, m)``, float64.

    Args:
        mu: the mean direction ``(m,)``, any nonzero length (it is normalised), m >= 2.
        kappa: concentration >= 0.
        n: number of samples.
        generator: a private ``torch.Generator`` (CPU) for reproducibility.
    """
    mu = torch.as_tensor(mu, dtype=torch.float64).flatten()
    m = mu.numel()
    if m < 2 or not float(mu.norm()) > 0:
        raise ValueError(f"mu must be a nonzero vector of dimension >= 2, got shape "
                         f"{tuple(mu.shape)}")
    if kappa < 0 or n < 0:
        raise ValueError(f"need kappa >= 0 and n >= 0, got kappa={kappa}, n={n}")
    mu = mu / mu.norm()
    if kappa == 0:  # uniform: w = 2 Beta((m-1)/2, (m-1)/2) - 1
        w = 2 * _beta(m, n, generator) - 1
    else:
        w = _sample_w(m, float(kappa), n, generator)
    v = torch.randn(n, m, generator=generator, dtype=torch.float64)
    v = v - (v @ mu)[:, None] * mu  # orthogonal to mu
    v = v / v.norm(dim=1, keepdim=True)
    return w[:, None] * mu + torch.sqrt((1 - w * w).clamp_min(0))[:, None] * v


def _beta(m: int, n: int, generator: torch.Generator | None) -> Tensor:
    """Beta((m-1)/2, (m-1)/2) from two Gamma draws with the private generator."""
    a = (m - 1) / 2
    x = torch._standard_gamma(torch.full((n,), a, dtype=torch.float64), generator=generator)
    y = torch._standard_gamma(torch.full((n,), a, dtype=torch.float64), generator=generator)
    return x / (x + y)


def _sample_w(m: int, kappa: float, n: int, generator: torch.Generator | None) -> Tensor:
    # Wood (1994), with b written to avoid cancellation for large kappa
    b = (m - 1) / (2 * kappa + math.sqrt(4 * kappa * kappa + (m - 1) ** 2))
    x0 = (1 - b) / (1 + b)
    c = kappa * x0 + (m - 1) * math.log(1 - x0 * x0)
    out = torch.empty(n, dtype=torch.float64)
    todo = torch.arange(n)
    while todo.numel():
        z = _beta(m, todo.numel(), generator)
        w = (1 - (1 + b) * z) / (1 - (1 - b) * z)
        u = torch.rand(todo.numel(), generator=generator, dtype=torch.float64)
        accept = kappa * w + (m - 1) * torch.log(1 - x0 * w) - c >= torch.log(u)
        out[todo[accept]] = w[accept]
        todo = todo[~accept]
    return out
