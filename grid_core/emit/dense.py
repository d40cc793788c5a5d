"""Small dense linear algebra, emitted as straight-line code (sizes known at generation time).

For the few dense solves a tree recursion needs: the inverse of a multi-dof joint's
articulated inertia ``D = S^T I^A S`` (6 x 6 for a free-flyer), and the Schur complement of
the mimic constraints (one row per mimic joint).  Symmetric positive definite matrices are
factored by Cholesky, with the reciprocals of the diagonal kept so that every later step
multiplies; a 1 x 1 is one reciprocal.  Entries are :data:`~grid_core.emit.expr.Scalar`
expressions in a :class:`~grid_core.emit.expr.Scope`; constants fold.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .expr import Scalar, Scope, is_const, render, sum_terms

Matrix = Sequence[Sequence[Scalar]]


@attrs.frozen
class Cholesky:
    """``K = L L^T``: ``L`` lower (``L[i][j]``, ``j <= i``), ``inv_diag[i] = 1 / L[i][i]``."""

    L: list
    inv_diag: list

    @property
    def size(self) -> int:
        return len(self.inv_diag)


def _reciprocal(scope: Scope, x: Scalar, sqrt: bool) -> Scalar:
    if is_const(x):
        if x <= 0.0:
            raise ValueError(f"matrix not positive definite (pivot {x})")
        return 1.0 / (x ** 0.5 if sqrt else x)
    x = scope.let(x, "piv")
    return scope.let(f"T(1) / grid_sqrt<T>({render(x)})" if sqrt else f"T(1) / ({render(x)})", "rinv")


def cholesky(scope: Scope, K: Matrix) -> Cholesky:
    """The Cholesky factor of a symmetric positive definite ``K`` (only ``K[i][j]``, ``j <= i``,
    read)."""
    m = len(K)
    L: list = [[0.0] * m for _ in range(m)]
    inv = [0.0] * m
    for j in range(m):
        piv = sum_terms([(K[j][j],), *[(-1.0, L[j][k], L[j][k]) for k in range(j)]])
        inv[j] = _reciprocal(scope, piv, sqrt=True)
        L[j][j] = scope.let(sum_terms([(piv, inv[j])]), "L")
        for i in range(j + 1, m):
            x = sum_terms([(K[i][j],), *[(-1.0, L[i][k], L[j][k]) for k in range(j)]])
            L[i][j] = scope.let(sum_terms([(x, inv[j])]), "L")
    return Cholesky(L, inv)


def cho_solve(scope: Scope, chol: Cholesky, B: Matrix) -> list[list[Scalar]]:
    """``K^-1 B`` (``B``: ``m`` rows of ``k`` entries) by two triangular solves."""
    m, L, inv = chol.size, chol.L, chol.inv_diag
    k = len(B[0]) if m else 0
    out = [[0.0] * k for _ in range(m)]
    for c in range(k):
        y = [0.0] * m
        for i in range(m):  # L y = b
            y[i] = scope.let(sum_terms([(sum_terms([(B[i][c],), *[(-1.0, L[i][j], y[j]) for j in range(i)]]),
                                         inv[i])]), "y")
        for i in reversed(range(m)):  # L^T x = y
            out[i][c] = scope.let(sum_terms([(sum_terms([(y[i],), *[(-1.0, L[j][i], out[j][c])
                                                                     for j in range(i + 1, m)]]), inv[i])]), "x")
    return out


def spd_solve(scope: Scope, K: Matrix, B: Matrix) -> list[list[Scalar]]:
    """``K^-1 B`` for symmetric positive definite ``K``; a 1 x 1 ``K`` costs one reciprocal."""
    if len(K) == 1:
        r = _reciprocal(scope, K[0][0], sqrt=False)
        return [[scope.let(sum_terms([(b, r)]), "x") for b in B[0]]]
    return cho_solve(scope, cholesky(scope, K), B)


def spd_inverse(scope: Scope, K: Matrix) -> list[list[Scalar]]:
    """``K^-1`` of a symmetric positive definite ``K`` (symmetric: the lower triangle is the
    upper's mirror, computed once)."""
    m = len(K)
    inv = spd_solve(scope, K, [[1.0 if i == j else 0.0 for j in range(m)] for i in range(m)])
    return [[inv[max(i, j)][min(i, j)] for j in range(m)] for i in range(m)]
