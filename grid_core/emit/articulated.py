"""The articulate step of the articulated-body recursions (ABA, Minv: each algorithm that
eliminates a joint from its body's articulated inertia emits it from here, so they share one step):
what a joint does with the articulated inertia ``IA`` of its body once its subtree is complete
(Featherstone, RBDA Table 7.1, pass 2).

``U = IA S`` and ``D^-1 = (S^T U)^-1`` (a revolute joint's ``U`` is one column of ``IA``, its ``D``
one entry and ``D^-1`` one reciprocal; a free-flyer's ``D`` a 6x6 SPD, inverted by Cholesky), then
what the joint passes on to its parent, ``X^T (IA - U D^-1 U^T) X``.  Every robot constant folds:
a leaf's ``IA`` is its body's inertia, so its ``U`` and ``D^-1`` come out as constants.
"""

from __future__ import annotations

import attrs

from grid_core.emit import dense
from grid_core.emit import spatial_steps as ss
from grid_core.emit.expr import Scope, dot
from grid_core.emit.storage import Field
from grid_core.model import Body


@attrs.frozen
class Articulated:
    """A joint's ``U = IA S`` (``w`` columns) and ``Dinv = (S^T U)^-1`` (``w x w``, symmetric)."""

    S: list
    IA: list
    U: list
    Dinv: list

    def reduced(self, scope: Scope) -> list:
        """``Ia = IA - U Dinv U^T`` (21 scalars).  ``Ia S = 0`` exactly: an axis-aligned joint's
        row and column of ``Ia`` fold to zero."""
        return scope.let_all(ss.sym6_sub_outer(self.IA, self.U, self.Dinv, scope, self.S), "Ia")

    @staticmethod
    def to_parent(scope: Scope, X: ss.Transform, Ia: list) -> list:
        """``X^T Ia X`` (``Ia``: the :meth:`reduced` inertia): what the joint adds to its parent's
        articulated inertia."""
        return ss.sym6_to_parent(X, Ia, scope)


def articulate(scope: Scope, body: Body, IA: list) -> Articulated:
    """``U`` and ``Dinv`` of ``body``'s joint, from its articulated inertia ``IA`` (21 scalars)."""
    S = ss.subspace_columns(body)
    U = [scope.let_all(ss.sym6_times(IA, s), "U") for s in S]
    D = [[dot(S[r], U[c]) for c in range(len(S))] for r in range(len(S))]
    return Articulated(S, IA, U, dense.spd_inverse(scope, D))


def fields(bodies, width) -> list[Field]:
    """The stored articulations of ``bodies`` (those with children: a leaf's is a robot constant),
    ``width[b]`` the joint's columns: ``U`` (``6 w`` scalars, column by column) and ``Dinv`` (its
    upper triangle, row by row)."""
    return [Field("U", bodies, lambda b: 6 * width[b]), Field("Dinv", bodies, lambda b: width[b] * (width[b] + 1) // 2)]


def store(scope: Scope, arrays: dict, b: int, art: Articulated) -> None:
    """Store body ``b``'s ``U`` and ``Dinv`` in the :func:`fields` (a constant recorded, not stored:
    a leaf's whole articulation)."""
    w = len(art.S)
    arrays["U"].put(scope, b, [x for col in art.U for x in col])
    arrays["Dinv"].put(scope, b, [art.Dinv[r][c] for r in range(w) for c in range(r, w)])


def stored(arrays: dict, body: Body) -> tuple[list, list]:
    """``U`` (a column per joint coordinate) and ``Dinv`` (square) of ``body`` as :func:`store`
    left them."""
    U, w = arrays["U"].get(body.index), len(ss.subspace_columns(body))
    return [U[6 * c:6 * c + 6] for c in range(w)], ss.sym6_full(arrays["Dinv"].get(body.index), w)
