"""Rank and singular-value spectrum of a log-probability matrix, with the tolerance stated
(numpy's relative default, or the DRILL authors' absolute ``tol = 1``) and the singular
values computed by SVD or, for a matrix too large to hold, from a streamed Gram matrix
(:func:`singular_values` says what each can resolve).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["DRILL_TOL", "RANK_SVD_MAX", "Spectrum", "log_prob_chunks", "matrix_rank", "rank_of",
           "singular_values"]

#: The absolute tolerance of the DRILL authors' code (their paper states none): count
#: singular values > 1.
DRILL_TOL = 1.0

_EPS64 = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class Spectrum:
    """Singular values of an ``n_rows x n_cols`` matrix, in descending order.

    Attributes:
        values: float64 numpy array of length ``min(n_rows, n_cols)``.
        n_rows, n_cols: shape of the matrix they came from.
        method: ``"svd"`` or ``"gram"``.
        resolution: the smallest singular value this method can separate from zero.
    """

    values: np.ndarray
    n_rows: int
    n_cols: int
    method: str
    resolution: float

    @property
    def numpy_tol(self) -> float:
        """numpy's default tolerance ``s_max * max(N, V) * eps`` for this matrix."""
        smax = float(self.values[0]) if self.values.size else 0.0
        return smax * max(self.n_rows, self.n_cols) * _EPS64

    def rank(self, tol: float | None = None) -> int:
        """Number of singular values strictly greater than ``tol``.

        Args:
            tol: absolute tolerance; ``None`` means numpy's default :attr:`numpy_tol`.
                Pass :data:`DRILL_TOL` for the rule of the DRILL authors' code.

        Raises:
            ValueError: ``tol`` is below what the method resolves (Gram route with a
                tolerance that needs the plain SVD).
        """
        tol = self.numpy_tol if tol is None else float(tol)
        if tol < 0:
            raise ValueError(f"tolerance must be >= 0, got {tol}")
        if tol < self.resolution:
            raise ValueError(
                f"tol={tol:.3g} is below the {self.method!r} method's resolution "
                f"{self.resolution:.3g}: singular values that small are rounding noise "
                f"here; recompute with singular_values(..., method='svd') or use a larger "
                f"tol (DRILL's rule is tol={DRILL_TOL})"
            )
        return int(np.count_nonzero(self.values > tol))


def _as_chunks(matrix: Tensor | np.ndarray | Iterable, rows: int = 4096) -> Iterable[Tensor]:
    """Row blocks, so that at most ``rows x V`` float64 values exist at a time."""
    if isinstance(matrix, (Tensor, np.ndarray)):
        matrix = torch.as_tensor(matrix)
        if matrix.dim() != 2:
            raise ValueError(f"expected a 2-d (contexts x vocabulary) matrix, got shape "
                             f"{tuple(matrix.shape)}; flatten the leading dims first")
        return matrix.split(rows)
    return (torch.as_tensor(c) for c in matrix)


def _check_2d(chunk: Tensor, n_cols: int | None) -> int:
    if chunk.dim() != 2:
        raise ValueError(f"expected a 2-d (contexts x vocabulary) matrix, got shape "
                         f"{tuple(chunk.shape)}; flatten the leading dims first")
    if n_cols is not None and chunk.shape[1] != n_cols:
        raise ValueError(f"all chunks must have {n_cols} columns, got {chunk.shape[1]}")
    if not torch.isfinite(chunk).all():
        raise ValueError("matrix has inf or nan entries: a log-probability of -inf "
                         "(probability exactly 0) has no finite rank; check the head")
    return int(chunk.shape[1])


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _svd(matrix: Tensor, device: torch.device) -> Spectrum:
    m = matrix.to(device=device, dtype=torch.float64)
    n_rows, n_cols = m.shape
    _check_2d(m, None)
    if n_cols > 2 * n_rows:  # wide: its transpose has the same singular values
        m = m.T
    if m.shape[0] > 2 * m.shape[1]:  # tall: R of a QR has the same singular values
        m = torch.linalg.qr(m, mode="r")[1]
    values = torch.linalg.svdvals(m).cpu().numpy()
    smax = float(values[0]) if values.size else 0.0
    return Spectrum(values, n_rows, n_cols, "svd", smax * max(n_rows, n_cols) * _EPS64)


def _gram(chunks: Iterable[Tensor], device: torch.device) -> Spectrum:
    """Eigenvalues of the smaller Gram matrix: ``M M^T`` while ``N <= V`` rows have
    arrived (the rows are kept, at most ``V x V`` values), ``M^T M`` accumulated chunk by
    chunk once there are more. Both have the same nonzero eigenvalues."""
    gram, rows, n_rows, n_cols = None, [], 0, None
    for chunk in chunks:
        n_cols = _check_2d(chunk, n_cols)
        c = chunk.to(device=device, dtype=torch.float64)
        n_rows += c.shape[0]
        if gram is None and n_rows <= n_cols:
            rows.append(c)  # still the short side: keep the rows
            continue
        if gram is None:
            gram = torch.zeros(n_cols, n_cols, dtype=torch.float64, device=device)
            for r in rows:
                gram.addmm_(r.T, r)
            rows = []
        gram.addmm_(c.T, c)
    if n_rows == 0:
        raise ValueError("empty matrix: no rows to compute a spectrum of")
    if gram is None:
        m = torch.cat(rows)
        gram = m @ m.T
    eig = torch.linalg.eigvalsh(gram).flip(0).clamp_min(0.0)
    k = min(n_rows, n_cols)
    values = eig[:k].sqrt().cpu().numpy()
    lam_max = float(eig[0])
    err = _EPS64 * lam_max * (math.sqrt(n_rows) + math.sqrt(n_cols))
    return Spectrum(values, n_rows, n_cols, "gram", math.sqrt(err))


def singular_values(
    matrix: Tensor | np.ndarray | Iterable[Tensor],
    *,
    method: str = "auto",
    device: torch.device | str | None = None,
    svd_max_elements: int = 20_000_000,
) -> Spectrum:
    """Singular values of a (contexts x vocabulary) matrix, in float64.

    The softmax-bottleneck argument is about the rank of the ``N x V`` matrix whose row
    ``i`` holds ``log p(. | context_i)``. "Rank" of a floating-point matrix needs a
    tolerance, and the papers use different ones:

    * **numpy's default** (relative): singular values above ``s_max * max(N, V) * eps``
      count. This is what ``numpy.linalg.matrix_rank(M)`` returns.
    * **DRILL's rule** (absolute, :data:`DRILL_TOL` ``= 1.0``): singular values above 1
      count (``matrix_rank(M, tol=1.0)`` in the authors' code). It ignores directions that
      move log-probabilities by less than about one nat in total. With it the authors'
      repository reports softmax 402, DRILL 402 and MoS 9,981 on PTB; the paper's text
      (Sec. 4.1.1) says 400 for AWD-LSTM and DRILL and 9,981 for MoS, and states no
      tolerance (both are in :mod:`drillbook.papers`).

    Two ways to get the singular values, both in float64:

    * ``method="svd"``: LAPACK on the matrix itself (after a QR step when it is tall).
      Backward stable: resolves singular values down to ``s_max * max(N, V) * eps``.
    * ``method="gram"``: eigenvalues of the ``V x V`` Gram matrix ``M^T M``, accumulated
      chunk by chunk (or of ``M M^T`` when there are fewer rows than columns), so an
      ``80,000 x 10,000`` matrix never has to sit in memory whole and costs ``N V^2``
      multiply-adds (measured: 127 s on a 2-core CPU, ``tools/bench_rank.py``). Squaring
      loses precision: eigenvalues carry an absolute error of about
      ``eps * s_max^2 * (sqrt(N) + sqrt(V))``, so singular values below
      :attr:`Spectrum.resolution` cannot be told from zero. Fine for DRILL's ``tol = 1``;
      not for numpy's relative default, which :meth:`Spectrum.rank` then refuses.

    ``method="auto"`` uses the Gram route when the matrix has more than
    ``svd_max_elements`` entries (or arrives in chunks), else the SVD.

    Args:
        matrix: an ``(N, V)`` tensor/array, or an iterable of ``(n_i, V)`` row chunks
            (streamed through the Gram route; nothing is concatenated).
        method: ``"svd"``, ``"gram"`` or ``"auto"`` (see the module docstring).
        device: where to compute; default: CUDA when available, else CPU.
        svd_max_elements: ``"auto"`` switches to the Gram route above this size.

    Returns:
        a :class:`Spectrum`; call ``.rank(tol)`` on it.
    """
    device = torch.device(device) if device is not None else _default_device()
    if method not in ("auto", "svd", "gram"):
        raise ValueError(f"method must be 'auto', 'svd' or 'gram', got {method!r}")
    is_matrix = isinstance(matrix, (Tensor, np.ndarray))
    if method == "svd" or (method == "auto" and is_matrix
                           and np.prod(matrix.shape) <= svd_max_elements):
        if not is_matrix:
            chunks = [torch.as_tensor(c) for c in matrix]
            if not chunks:
                raise ValueError("empty matrix: no rows to compute a spectrum of")
            matrix = torch.cat(chunks)
        matrix = torch.as_tensor(matrix)
        if matrix.dim() != 2 or matrix.numel() == 0:
            raise ValueError(f"expected a non-empty 2-d matrix, got shape {tuple(matrix.shape)}")
        return _svd(matrix, device)
    return _gram(_as_chunks(matrix), device)


def matrix_rank(
    matrix: Tensor | np.ndarray | Iterable[Tensor],
    tol: float | None = None,
    *,
    method: str = "auto",
    device: torch.device | str | None = None,
) -> int:
    """Rank of a matrix with an explicit tolerance.

    ``tol=None`` is numpy's relative default; ``tol=DRILL_TOL`` (1.0) the absolute rule of
    the DRILL authors' code. See :func:`singular_values` for ``method`` and ``device``.
    """
    return singular_values(matrix, method=method, device=device).rank(tol)


@torch.no_grad()
def log_prob_chunks(model, data: Tensor, bptt: int,
                    max_tokens: int | None = None) -> Iterable[Tensor]:
    """The (contexts x vocabulary) log-probability matrix of a language model on a
    batchified stream, as float64 row chunks (one per evaluation window), ready to be
    streamed into :func:`singular_values`."""
    from ..models import eval_windows

    for out, _ in eval_windows(model, data, bptt, max_tokens):
        logp = model.head.log_prob(out.features).double()
        yield logp.reshape(-1, logp.shape[-1])


#: the largest ``positions x V`` log-probability matrix :func:`rank_of` gives to a float64
#: SVD (where numpy's relative tolerance means something); larger ones stream a Gram matrix
RANK_SVD_MAX = 40_000_000


def rank_of(model, data: Tensor, bptt: int, positions: int | None) -> dict[str, int]:
    """The rank of a language model's log-probability matrix on (about) ``positions``
    positions of a batchified stream (None: all of it): ``rank_tol_1`` (DRILL's absolute
    ``tol = 1``), ``rank_positions``, and, where the matrix has at most
    :data:`RANK_SVD_MAX` entries, ``rank_numpy_tol`` from a float64 SVD (float32 rounding
    noise alone has full rank under numpy's relative tolerance, so the model is evaluated
    in float64 for it)."""
    import copy

    device = next(model.parameters()).device
    if positions is not None and positions * model.head.vocab_size <= RANK_SVD_MAX:
        chunks = log_prob_chunks(copy.deepcopy(model).double(), data, bptt, positions)
        spectrum = singular_values(torch.cat(list(chunks)).double(), method="svd",
                                   device=device)
        return {"rank_tol_1": spectrum.rank(DRILL_TOL), "rank_numpy_tol": spectrum.rank(),
                "rank_positions": spectrum.n_rows}
    spectrum = singular_values(log_prob_chunks(model, data, bptt, positions), method="gram",
                               device=device)
    return {"rank_tol_1": spectrum.rank(DRILL_TOL), "rank_positions": spectrum.n_rows}
