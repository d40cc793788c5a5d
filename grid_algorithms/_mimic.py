"""Mimic joints as linear constraints on the relaxed tree (a helper of the ABA-type algorithms:
their references, and the code that imposes the constraints on their emitted relaxed results).

A recursion that divides by a joint's articulated inertia (ABA, Carpentier's
Minv) needs every joint to own its coordinate.  Such a recursion runs on the
*relaxed* tree, where each mimic joint is a free joint with a coordinate of its
own, and the mimic relations are then imposed as constraints.

Relaxed velocities ``v_r = G v`` (``G``: the mimicked joint's column, times the
multiplier, on each mimic row); the constraints ``C v_r = 0`` (one row per mimic
joint: ``v_mimic - multiplier * v_mimicked``) hold exactly on the range of ``G``,
and ``L`` (the rows of the owned coordinates) is a left inverse of ``G``.  With
``M_r`` the relaxed inertia, ``Y = M_r^-1 C^T`` and ``K = C Y`` (one row and
column per mimic joint),

    G (G^T M_r G)^-1 G^T = M_r^-1 - Y K^-1 Y^T,

so ``M^-1 = L (M_r^-1 - Y K^-1 Y^T) L^T`` and forward dynamics is
``qdd = L (a_r - Y K^-1 C a_r)`` with ``a_r`` the relaxed forward dynamics under
``L^T tau``.  The only inverse taken is ``K``'s, of the size of the number of
mimic joints.  On a robot without mimic joints the relaxed tree is the robot
and nothing is corrected.  (The relaxed recursion needs each mimic joint's
subtree to carry inertia about its axis, as every real gripper finger does.)
"""

from __future__ import annotations

import attrs
import numpy as np

from grid_core.emit import dense, sweeps
from grid_core.emit import nodes as n
from grid_core.emit.expr import Scope, prune_unused, sum_terms
from grid_core.emit.storage import Field, plus, put_symmetric
from grid_core.model import Robot
from grid_core.model.joints import joint_nv


@attrs.frozen
class Relaxation:
    index: tuple[int, ...]
    """First relaxed coordinate of each body (body order, so a subtree's columns are contiguous)."""
    width: tuple[int, ...]
    """Relaxed coordinates of each body (6 for a free-flyer, else 1)."""
    end: tuple[int, ...]
    """One past the last relaxed coordinate of each body's subtree."""
    nv: int
    """Number of relaxed coordinates."""
    own: np.ndarray = attrs.field(eq=False)
    """``L``: the relaxed coordinates that are the robot's v, in v order."""
    C: np.ndarray = attrs.field(eq=False)
    """Constraint rows ``C v_r = 0``, one per mimic joint."""
    rows: tuple[tuple[int, int, float], ...] = ()
    """C's rows as ``(x, y, mult)`` (the emitted code's form): +1 at relaxed coordinate ``x`` (the
    mimic joint), -mult at ``y`` (the mimicked one)."""
    owner: tuple[tuple[int, int], ...] = ()
    """``(body, r)`` of each relaxed coordinate: the body whose ``r``-th coordinate it is."""
    tree_end: tuple[int, ...] = ()
    """One past the last relaxed coordinate of each body's tree (its root's subtree)."""

    def spans(self, b: int) -> tuple[int, int, int, int]:
        """Body ``b``'s relaxed coordinates: ``(its first, its descendants' first, the end of its
        subtree's, the end of its tree's)``."""
        i0 = self.index[b]
        return i0, i0 + self.width[b], self.end[b], self.tree_end[b]

    @property
    def own_steps(self) -> list[int]:
        """Own coordinate ``a`` is relaxed coordinate ``a + #{t in own_steps: a >= t}`` (where the
        own coordinates are in relaxed order)."""
        return [x - k for k, x in enumerate(sorted(x for x, _, _ in self.rows))]

    def own_of(self, a):
        """The relaxed coordinate of own coordinate ``a`` (an int, or a C++ expression: branch-free)."""
        if isinstance(a, int):
            return int(self.own[a])
        return " + ".join([a] + [f"({a} >= {t})" for t in self.own_steps])

    def tau(self, tau: np.ndarray) -> np.ndarray:
        """``L^T tau``: the joint forces on the relaxed coordinates (none on mimic joints)."""
        out = np.zeros(self.nv)
        out[self.own] = tau
        return out

    def constrain(self, A: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """``L (A - Y K^-1 C A)``: impose the constraints on relaxed accelerations ``A``
        (a vector or columns), ``Y = M_r^-1 C^T``."""
        if len(self.C):
            A = A - Y @ np.linalg.solve(self.C @ Y, self.C @ A)
        return A[self.own]


def relaxation(robot: Robot) -> Relaxation:
    """The relaxed tree of ``robot``: every joint, mimic or not, owns its coordinates."""
    width = [joint_nv(b) for b in robot.bodies]
    index = np.concatenate([[0], np.cumsum(width)[:-1]]).astype(int).tolist()
    nv = int(sum(width))
    own = np.zeros(robot.nv, dtype=int)
    rows = []
    for b, r, w in zip(robot.bodies, index, width):
        if b.mimic is None:
            own[b.v_index : b.v_index + w] = np.arange(r, r + w)
        else:
            rows.append((r, index[b.mimic.body], float(b.mimic.multiplier)))
    C = np.zeros((len(rows), nv))
    for k, (x, y, mult) in enumerate(rows):
        C[k, x] += 1.0
        C[k, y] -= mult
    end = tuple(index[s[-1]] + width[s[-1]] for s in robot.topology.subtree)
    owner = tuple((b.index, r) for b, w in zip(robot.bodies, width) for r in range(w))
    tree_end = tuple(end[robot.topology.support[b][0]] for b in range(robot.num_bodies))
    return Relaxation(tuple(index), tuple(width), end, nv, own, C, tuple(rows), owner, tree_end)


def relaxed_map(robot: Robot):
    """``(rel, G, cols, colbody)``: the relaxation of ``robot``, the map ``G`` (``rel.nv x nv``)
    from the robot's v to the relaxed velocities (``v_r = G v``; a mimic column carries its
    multiplier in the mimicked joint's column), each body's relaxed columns and each relaxed
    column's body."""
    rel = relaxation(robot)
    G = np.zeros((rel.nv, robot.nv))
    G[rel.own, np.arange(robot.nv)] = 1.0
    cols, colbody = [], np.zeros(rel.nv, dtype=int)
    for b in robot.bodies:
        c = np.arange(rel.index[b.index], rel.index[b.index] + rel.width[b.index])
        cols.append(c)
        colbody[c] = b.index
        if b.mimic is not None:
            G[c[0], b.v_index] = b.mimic.multiplier
    return rel, G, cols, colbody


# -- emitted code: the constraints imposed on a relaxed recursion's results ---------------------
#
# The same algebra on scalars (grid_core.emit.expr).  Constraint row k of C is ``(x, y, mult)``:
# +1 at index x (the mimic joint), -mult at y (the mimicked one), in the indexing of the caller's
# arrays (bodies for ABA, relaxed coordinates for Minv).


def apply_row(row: tuple, f):
    """Constraint row ``(x, y, mult)`` applied to ``f`` (index -> expression): ``f(x) - mult f(y)``."""
    x, y, mult = row
    return sum_terms([(f(x),), (-mult, f(y))])


def constraint_gram(rows: list, Y) -> list:
    """``K = C Y`` for ``Y(x, l)`` (column ``l``: the relaxed response to constraint ``l``'s unit
    force), its lower triangle: what :func:`~grid_core.emit.dense.cholesky` reads."""
    m = len(rows)
    return [[apply_row(rows[k], lambda x, l=l: Y(x, l)) if l <= k else 0.0 for l in range(m)] for k in range(m)]


def constraint_forces(scope: Scope, rows: list, A) -> list:
    """``z = K^-1 C a_r`` with ``K = C Y`` (forward dynamics), on ``A(x, l)``: column 0 the relaxed
    accelerations ``a_r``, column ``l >= 1`` those of constraint ``l``'s unit force (Y's columns)."""
    CA = [[apply_row(row, lambda x: A(x, 0))] for row in rows]
    return [row[0] for row in dense.spd_solve(scope, constraint_gram(rows, lambda x, l: A(x, l + 1)), CA)]


class Constrained:
    """Forward dynamics' ``qdd = L (a_r - Y z)``, ``z = K^-1 C a_r``, emitted on ``qr``, an array
    (:class:`~grid_core.emit.storage.Array`) of the relaxed accelerations keyed ``(body, l)``: column
    ``l`` 0 ``a_r``, ``l >= 1`` constraint ``l``'s unit force (Y's columns); written to ``qdd`` (a port
    vector)."""

    def __init__(self, rel: Relaxation, qr, qdd):
        self.rel, self.qr, self.qdd = rel, qr, qdd

    def A(self, x: int, l: int):
        """Relaxed coordinate ``x``'s acceleration in column ``l``."""
        b, k = self.rel.owner[x]
        return self.qr.get((b, l), k)

    def forces(self, scope: Scope) -> list:
        """``z = K^-1 C a_r`` (``K = C Y``, by Cholesky)."""
        m = len(self.rel.rows)
        scope.comment(f"{'the mimic constraint' if m == 1 else f'the {m} mimic constraints'}: z = K^-1 C a_r, "
                      "K = C Y (Cholesky)")
        return constraint_forces(scope, self.rel.rows, self.A)

    def write(self, scope: Scope, dof: int, z: list) -> None:
        """``qdd = L (a_r - Y z)`` at one velocity index."""
        x = self.rel.own_of(dof)
        scope.assign(self.qdd(dof), sum_terms([(self.A(x, 0),), *[(-1.0, self.A(x, l + 1), zl)
                                                                   for l, zl in enumerate(z)]]))

    def straight_line(self, scope: Scope) -> None:
        """One thread's code: every velocity index."""
        z = self.forces(scope)
        for dof in range(len(self.rel.own)):
            self.write(scope, dof, z)

    def block(self) -> list:
        """A block's code: one velocity index per thread, each solving for ``z`` itself."""
        head = Scope("z")
        head.comment("every thread solves the small constraint system itself (broadcast reads of the\n"
                     "relaxed accelerations): no barrier and nothing stored before the fan-out")
        z = self.forces(head)
        fan = sweeps.fan_out([(dof,) for dof in range(len(self.rel.own))], lambda sc, dof: self.write(sc, dof, z))
        return [n.Comment("qdd = L (a_r - Y z), one velocity index per thread"), *prune_unused([*head.stmts, *fan], "z")]


class Schur:
    """``M^-1 = L (M_r^-1 - Y K^-1 Y^T) L^T`` with ``Y = M_r^-1 C^T``, ``K = C Y``, emitted on
    ``mr(r, c)`` (the relaxed inverse's entry, any row and column: both triangles final), over the
    relaxed tree ``rel`` (C's rows, own coordinates)."""

    def __init__(self, rel: Relaxation, mr):
        self.rows, self.own, self.nv, self.mr = rel.rows, rel.own_of, len(rel.own), mr

    def Y(self, r, k):
        """``Y[r, k]``: row ``r`` of ``M_r^-1`` (an int or a C++ expression) times C's row ``k``."""
        return apply_row(self.rows[k], lambda c: self.mr(r, c))

    def entry(self, ra, rb, y, z):
        """``M^-1[a, b] = M_r^-1[ra, rb] - sum_k Y[ra, k] Z[k, b]`` (``ra``, ``rb``: the relaxed
        coordinates of ``a`` and ``b``; ``y``, ``z``: row ``ra`` of Y, column ``b`` of Z = K^-1 Y^T)."""
        return sum_terms([(self.mr(ra, rb),), *[(-1.0, yk, zk) for yk, zk in zip(y, z)]])

    def straight_line(self, scope: Scope, out) -> None:
        """One thread's code: ``out`` (``nv x nv``, :meth:`~grid_core.emit.storage.Vector.at`) written whole."""
        nv, m = self.nv, len(self.rows)
        scope.comment(f"mimic joints: Minv = L (Mr - Y K^-1 Y^T) L^T, K = C Mr C^T ({m} x {m})")
        chol = dense.cholesky(scope, constraint_gram(self.rows, self.Y))
        B = [[scope.let(self.Y(self.own(a), k), "y") for a in range(nv)] for k in range(m)]
        Z = dense.cho_solve(scope, chol, B)
        for a in range(nv):
            for b in range(a, nv):
                x = scope.let(self.entry(self.own(a), self.own(b), [B[k][a] for k in range(m)],
                                         [Z[k][b] for k in range(m)]), "Minv")
                put_symmetric(scope, out.at, a, b, x)

    def block(self, KL, Z, out) -> list:
        """A block's code (:mod:`~grid_core.emit.sweeps` runs, a barrier before each phase): K
        factored by one thread into ``KL``, ``Z = K^-1 Y^T`` one own column per thread (both bound
        from :func:`schur_fields`), the entries of ``out`` one per thread."""
        nv, m, own = self.nv, len(self.rows), self.own

        def factor(scope, _k):
            chol = dense.cholesky(scope, constraint_gram(self.rows, self.Y))
            for i in range(m):
                scope.assign(KL("inv", i), chol.inv_diag[i])
                for j in range(i + 1):
                    scope.assign(KL(i, j), chol.L[i][j])

        def solve(scope, a):
            scope.stmt(f"const int ra = {own(a)}")
            chol = dense.Cholesky([[KL(i, j) if j <= i else 0.0 for j in range(m)] for i in range(m)],
                                  [KL("inv", i) for i in range(m)])
            z = dense.cho_solve(scope, chol, [[scope.let(self.Y("ra", k), "y")] for k in range(m)])
            for k in range(m):
                scope.assign(Z(k, a), z[k][0])

        def entry(scope, a, b):
            ra = own(a)
            scope.stmt(f"const int rb = {own(b)}")
            x = scope.let(self.entry(ra, "rb", [self.Y(ra, k2) for k2 in range(m)], [Z(k2, b) for k2 in range(m)]),
                          "Minv")
            scope.assign(out(plus(b, a * nv)), x)
            scope.extend([n.If(f"b != {a}", [n.Stmt(f"{out(f'b * {nv} + {a}')} = {x}")])])

        rows = [sweeps.span(a, nv, lambda sc, b, a=a: entry(sc, a, b), "b", f"row {a} (relaxed {own(a)}), b >= {a}")
                for a in range(nv)]
        return [n.Sync(), *sweeps.phases(
            [[sweeps.Run(1, factor, per_warp=True)], [sweeps.Run(nv, solve)], rows],
            [f"mimic joints: K = C Mr C^T ({m} x {m}) factored by one thread",
             "Z = K^-1 Y^T, one own column per thread",
             "Minv = Mr - Y Z on the own coordinates, the upper triangle one entry per thread, mirrored"])]


def schur_fields(rel: Relaxation) -> list[Field]:
    """The arrays of :meth:`Schur.block`: ``KL``, K's Cholesky factor (keys: L's rows, then
    ``"inv"``, the reciprocals of its diagonal), and ``Z = K^-1 Y^T`` (a row per constraint)."""
    m = len(rel.rows)
    return [Field("KL", [*range(m), "inv"], lambda key: m if key == "inv" else key + 1),
            Field("Z", range(m), len(rel.own))]
