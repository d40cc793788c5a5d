"""Inverse of the joint-space inertia matrix, directly, by Carpentier's ABA-like recursion.

``Minv = minv(q)`` without forming (or factorising) ``M``: the algorithm of
Carpentier (2018), "Analytical inverse of the joint space inertia matrix", the
one Pinocchio's ``computeMinverse`` implements.  It is the articulated-body
algorithm run on all unit joint forces at once: a backward pass of articulated
inertias ``IA`` carrying, for the unit forces applied in each subtree, the
articulated bias forces ``F``; then a forward pass carrying their accelerations
``P``.  Only the upper triangle is computed (each row from its own column on),
then mirrored.

Mimic joints: the recursion runs on the relaxed tree (every mimic joint free) and
the mimic constraints are imposed afterwards by a Schur complement of the size
of the number of mimic joints (see :mod:`grid_algorithms._mimic`).
"""

from __future__ import annotations

import attrs
import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.arena import ALL_SCRATCH, ArenaRegion, SpillRung
from grid_core.emit import dense, sweeps
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, dot, sum_terms
from grid_core.errors import CodegenError
from grid_core.model import Body, Robot
from grid_core.model.joints import body_q, joint_transform, motion_subspace
from grid_core.review import ParallelismReview, done

from ._mimic import relaxation


def minv_relaxed(robot: Robot, q, rel) -> np.ndarray:
    """Carpentier's recursion on the relaxed tree: ``M_r^-1`` (``rel.nv`` square)."""
    NB, n = robot.num_bodies, rel.nv
    Xup, S, U, Dinv = [None] * NB, [None] * NB, [None] * NB, [None] * NB
    IA, F, P = [None] * NB, [None] * NB, [None] * NB
    for i, body in enumerate(robot.bodies):
        Xup[i] = joint_transform(body, body_q(body, q)) @ body.Xtree
        S[i] = motion_subspace(body)
        IA[i] = body.inertia.copy()
        F[i] = np.zeros((6, n))
    Minv = np.zeros((n, n))
    for i in reversed(range(NB)):  # backward pass: articulated inertias and bias forces
        p = robot.bodies[i].parent
        ii = slice(rel.index[i], rel.index[i] + rel.width[i])
        sub = slice(rel.index[i], rel.end[i])  # the columns of i's subtree
        U[i] = IA[i] @ S[i]
        Dinv[i] = np.linalg.inv(S[i].T @ U[i])
        Minv[ii, sub] = -Dinv[i] @ S[i].T @ F[i][:, sub]
        Minv[ii, ii] += Dinv[i]
        if p >= 0:
            F[i][:, sub] += U[i] @ Minv[ii, sub]
            F[p][:, sub] += Xup[i].T @ F[i][:, sub]
            Ia = IA[i] - U[i] @ Dinv[i] @ U[i].T
            IA[p] = IA[p] + Xup[i].T @ Ia @ Xup[i]
    for i, body in enumerate(robot.bodies):  # forward pass: accelerations, columns from i on
        p = body.parent
        ii = slice(rel.index[i], rel.index[i] + rel.width[i])
        up = slice(rel.index[i], n)
        P[i] = np.zeros((6, n))
        if p >= 0:
            XP = Xup[i] @ P[p][:, up]
            Minv[ii, up] -= Dinv[i] @ U[i].T @ XP
            P[i][:, up] = XP
        P[i][:, up] += S[i] @ Minv[ii, up]
    return np.triu(Minv) + np.triu(Minv, 1).T


def minv(robot: Robot, q) -> np.ndarray:
    """``M^-1(q)`` (mimic constraints imposed on the relaxed inverse)."""
    rel = relaxation(robot)
    Minv_r = minv_relaxed(robot, q, rel)
    return rel.constrain(Minv_r, Minv_r @ rel.C.T)[:, rel.own]


# -- code generation -------------------------------------------------------------------
#
# The recursion on the relaxed tree, as steps on scalars (MinvSteps) shared by both layouts,
# over column bookkeeping baked at generation time (Columns, P4): each body's relaxed columns,
# its subtree's, where its tree ends, the compact slots of the stored quantities.
#
# Storage, per state (the block layout's regions):
# * F: ONE 6-vector per relaxed column, carried up the tree in place.  Column j's articulated
#   bias force lives at one body at a time (the body the backward pass has reached on j's path
#   to the root), and siblings' subtrees own disjoint columns, so 6 x n_r scalars hold every
#   body's F (instead of 6 x n_r per body).
# * P: the forward pass's accelerations, for the bodies with children only (a leaf's are never
#   read), over the columns their children read: from the first child's column to the end of
#   the tree (beyond it they are zero).
# * IA: the articulated inertia each non-root body passes to its parent, X^T (IA - U Dinv U^T) X,
#   computed by the body itself (so siblings transform theirs in parallel; the parent sums).
#   A leaf's IA, U and Dinv are robot constants, folded: never stored.
# * UD: U (6 x width) and Dinv (width x width) of each body with children.
# * Mimic robots: Mr, the relaxed n_r x n_r inverse, and schur (the Cholesky factor of K and
#   Z = K^-1 Y^T); without mimic joints the recursion writes the output directly.
#
# Only the upper triangle (each row from its own column on) is computed; each final entry is
# written once, with its mirror.


class Columns:
    """The recursion's column bookkeeping for one robot (relaxed tree), computed offline."""

    def __init__(self, robot: Robot):
        rel = relaxation(robot)
        topo = robot.topology
        self.robot, self.rel, self.n = robot, rel, rel.nv
        self.mimic = bool(len(rel.C))
        for b in robot.bodies:
            if rel.width[b.index] != 1 and b.parent >= 0:
                raise CodegenError(f"minv: robot '{robot.name}': body '{b.name}' has a multi-dof joint below "
                                   "the root, which the emitted recursion does not take")
        root = [b if p < 0 else -1 for b, p in enumerate(topo.parent)]
        for b, p in enumerate(topo.parent):
            if p >= 0:
                root[b] = root[p]
        self.tree_end = [rel.end[root[b]] for b in range(robot.num_bodies)]
        self.leaf = [not topo.children[b] for b in range(robot.num_bodies)]
        self.p_cols, self.p_off, off = {}, {}, 0
        for b in range(robot.num_bodies):  # P: bodies with children, their children's columns
            if not self.leaf[b]:
                self.p_cols[b] = (rel.index[b] + rel.width[b], self.tree_end[b])
                self.p_off[b] = off
                off += 6 * (self.tree_end[b] - self.p_cols[b][0])
        self.p_size = off
        self.ia_slot = {b.index: k for k, b in enumerate(x for x in robot.bodies if x.parent >= 0)}
        self.u_off, self.d_off, u, d = {}, {}, 0, 0
        for b in range(robot.num_bodies):
            if not self.leaf[b]:
                w = rel.width[b]
                self.u_off[b], self.d_off[b] = u, d
                u, d = u + 6 * w, d + w * w
        self.u_size, self.d_size = u, d
        # mimic constraints C v_r = 0: row k is +1 at ib, -mult at im
        self.mimics = [(rel.index[b.index], rel.index[b.mimic.body], float(b.mimic.multiplier))
                       for b in robot.bodies if b.mimic is not None]
        xs = sorted(ib for ib, _, _ in self.mimics)
        self.own_steps = [x - k for k, x in enumerate(xs)]
        """own coordinate a is relaxed coordinate a + #{t in own_steps: a >= t} (branch-free)."""
        if [a + sum(a >= t for t in self.own_steps) for a in range(robot.nv)] != [int(x) for x in rel.own]:
            raise CodegenError(f"minv: robot '{robot.name}': its own coordinates are not in relaxed order")

    @property
    def m(self) -> int:
        return len(self.mimics)

    def own(self, a):
        """The relaxed coordinate of own coordinate ``a`` (an int, or a C++ expression)."""
        if isinstance(a, int):
            return int(self.rel.own[a])
        return " + ".join([a] + [f"({a} >= {t})" for t in self.own_steps])

    def columns(self, b: int) -> tuple[int, int, int, int]:
        """``(first own column, first descendant column, end of the subtree, end of the tree)``."""
        i0 = self.rel.index[b]
        return i0, i0 + self.rel.width[b], self.rel.end[b], self.tree_end[b]


def _lin(const: int, var) -> str:
    """``const + var`` as C++ (``var`` a C++ int expression)."""
    if const == 0:
        return str(var)
    return f"{var} + {const}" if const > 0 else f"{var} - {-const}"


class MinvSteps:
    """The recursion's steps on scalars, every robot constant folded (``xi``: the XI array)."""

    def __init__(self, robot: Robot, xi):
        self.robot, self.xi = robot, xi
        self.S = [ss.subspace_columns(b) for b in robot.bodies]

    def X(self, scope: Scope, body: Body) -> ss.Transform:
        return ss.Transform(self.robot, body, self.xi, scope)

    def articulated(self, scope: Scope, body: Body, IA) -> tuple[list, list]:
        """``U = IA S`` (columns) and ``Dinv = (S^T U)^-1``: a revolute joint's U is one column of
        IA (folded), its D a scalar, one reciprocal; a free-flyer's D a 6x6 SPD (Cholesky)."""
        S = self.S[body.index]
        U = [scope.let_all(ss.sym6_times(IA, s), "U") for s in S]
        D = [[dot(S[a], U[c]) for c in range(len(S))] for a in range(len(S))]
        return U, dense.spd_inverse(scope, D)

    def passed_on(self, scope: Scope, body: Body, IA, U, Dinv) -> list:
        """``X^T (IA - U Dinv U^T) X``: what the body adds to its parent's articulated inertia."""
        # Ia S = 0 exactly: an axis-aligned joint's row and column of Ia fold to zero
        Ia = scope.let_all(ss.sym6_sub_outer(IA, U, Dinv, scope, self.S[body.index]), "Ia")
        return ss.sym6_to_parent(self.X(scope, body), Ia, scope)

    def backward(self, scope: Scope, body: Body, Dinv, F, own: int | None, S=None) -> list:
        """Rows ``ii`` of one column of the backward pass, ``Dinv (e - S^T F)``: ``own`` the
        joint's own column (``F`` zero there), else a descendant's (``e`` zero).  ``S``: the
        joint's subspace in ``F``'s frame (default its own, in the body frame)."""
        w = len(Dinv)
        if own is not None:
            return [Dinv[a][own] for a in range(w)]
        rhs = [scope.let(dot(s, F), "StF") for s in (self.S[body.index] if S is None else S)]
        return scope.let_all([sum_terms([(-1.0, Dinv[a][c], rhs[c]) for c in range(w)]) for a in range(w)], "m")

    def transfer(self, scope: Scope, body: Body, U, minv, F) -> list:
        """``X^T (F + U minv)``: the column's bias force, carried to the parent."""
        f = [sum_terms([*([(F[k],)] if F is not None else []), *[(U[c][k], minv[c]) for c in range(len(U))]])
             for k in range(6)]
        return scope.let_all(self.X(scope, body).force_T(scope.let_all(f, "f"), scope), "F")

    def forward(self, scope: Scope, body: Body, U, Dinv, Pp, minv) -> tuple[list, list]:
        """One column of the forward pass: ``minv -= Dinv U^T X Pp`` (``minv`` None: zero, a column
        beyond the subtree; ``Pp`` None: a root), then ``P = X Pp + S minv``."""
        w = len(Dinv)
        minv = list(minv) if minv is not None else [0.0] * w
        XP = [0.0] * 6
        if Pp is not None:
            XP = scope.let_all(self.X(scope, body).motion(Pp, scope), "XP")
            UtXP = [scope.let(dot(u, XP), "UtXP") for u in U]
            minv = [sum_terms([(minv[a],), *[(-1.0, Dinv[a][c], UtXP[c]) for c in range(w)]]) for a in range(w)]
        minv = scope.let_all(minv, "m")
        S = self.S[body.index]
        P = [sum_terms([(XP[k],), *[(S[c][k], minv[c]) for c in range(w)]]) for k in range(6)]
        return minv, P


def _groups(robot: Robot, form: str) -> tuple[list[list[int]], list[list[int]]]:
    """The backward groups (leaves first) and the forward groups (roots excluded: the backward
    pass finishes them), by levels (P1) or one body at a time."""
    topo = robot.topology
    if form == "bodies":
        back = [[b] for b in reversed(range(robot.num_bodies))]
        fwd = [[b] for b in range(robot.num_bodies) if topo.parent[b] >= 0]
    else:
        back = [list(level) for level in reversed(topo.levels)]
        fwd = [list(level) for level in topo.levels[1:]]
    return back, fwd


class _Block:
    """The block layout's runs (:class:`sweeps.Run`), on the inner's shared-memory arrays."""

    def __init__(self, robot: Robot):
        self.robot = robot
        self.cols = Columns(robot)
        self.steps = MinvSteps(robot, lambda i: f"s_XI[{i}]")
        self.mr = "s_Mr" if self.cols.mimic else "s_Minv"
        self._leaf_ud = {}

    # -- the arrays ------------------------------------------------------------------

    def entry(self, r, c) -> str:
        """``Mr[r, c]`` (relaxed, row-major); ``r`` or ``c`` may be a C++ expression."""
        nr = self.cols.n
        if isinstance(r, int) and isinstance(c, int):
            return f"{self.mr}[{r * nr + c}]"
        if isinstance(r, int):
            return f"{self.mr}[{_lin(r * nr, c)}]"
        return f"{self.mr}[{_lin(c, f'{r} * {nr}')}]"

    def F(self, j) -> list[str]:
        nr = self.cols.n
        return [f"s_F[{k * nr + j}]" if isinstance(j, int) else f"s_F[{_lin(k * nr, j)}]" for k in range(6)]

    def P(self, b: int, j) -> list[str]:
        c0, c1 = self.cols.p_cols[b]
        base = self.cols.p_off[b]
        width = c1 - c0
        return [f"s_P[{base + k * width + j - c0}]" if isinstance(j, int) else f"s_P[{_lin(base + k * width - c0, j)}]"
                for k in range(6)]

    def ud(self, b: int) -> tuple[list, list]:
        """``U`` and ``Dinv`` of body ``b``: stored, or a leaf's constants."""
        body = self.robot.bodies[b]
        if self.cols.leaf[b]:
            if b not in self._leaf_ud:
                self._leaf_ud[b] = self.steps.articulated(Scope("c"), body, ss.sym6_of(body.inertia))
            return self._leaf_ud[b]
        w = self.cols.rel.width[b]
        U = [[f"s_U[{self.cols.u_off[b] + 6 * c + k}]" for k in range(6)] for c in range(w)]
        D = [[f"s_Dinv[{self.cols.d_off[b] + w * r + c}]" for c in range(w)] for r in range(w)]
        return U, D

    def ia(self, b: int) -> list[str]:
        return [f"s_IA[{21 * self.cols.ia_slot[b] + k}]" for k in range(21)]

    def write(self, scope: Scope, r: int, j, value, mirror: bool) -> None:
        scope.assign(self.entry(r, j), value)
        if mirror:
            scope.assign(self.entry(j, r), value)

    # -- the runs --------------------------------------------------------------------

    def finalize(self, b: int) -> sweeps.Run | None:
        """Body ``b``'s articulated inertia (its own and its children's), its U and Dinv, and what
        it passes to its parent.  None: nothing to do at run time (a lone leaf root)."""
        robot, cols, steps = self.robot, self.cols, self.steps
        body = robot.bodies[b]
        if cols.leaf[b] and body.parent < 0:
            return None

        def step(scope, _k):
            if cols.leaf[b]:
                IA = ss.sym6_of(body.inertia)
                U, Dinv = self.ud(b)
            else:
                IA = ss.sym6_of(body.inertia)
                for c in robot.topology.children[b]:
                    IA = ss.sym6_add(IA, self.ia(c))
                IA = scope.let_all(IA, "IA")
                U, Dinv = steps.articulated(scope, body, IA)
                stored_U, stored_D = self.ud(b)
                for c in range(len(U)):
                    for k in range(6):
                        scope.assign(stored_U[c][k], U[c][k])
                    for r in range(len(U)):
                        scope.assign(stored_D[r][c], Dinv[r][c])
            if body.parent >= 0:
                for k, x in enumerate(steps.passed_on(scope, body, IA, U, Dinv)):
                    scope.assign(self.ia(b)[k], x)

        kids = list(robot.topology.children[b])
        what = [f"IA[{b}] = I + children {kids}, U, Dinv" if kids else f"leaf {b}"]
        if body.parent >= 0:
            what.append("X^T Ia X to the parent")
        return sweeps.Run(1, step, per_warp=True, comment=f"{'; '.join(what)} ({body.joint.name})")

    def backward_runs(self, b: int) -> list:
        """Body ``b``'s columns of the backward pass: its own, then its descendants' (one thread
        each).  A root's are final: written with their mirrors, its P stored (the forward pass
        starts below the roots)."""
        robot, cols, steps = self.robot, self.cols, self.steps
        body = robot.bodies[b]
        i0, d0, end, _ = cols.columns(b)
        w = d0 - i0
        root = body.parent < 0

        def column(scope, j, own):
            U, Dinv = self.ud(b)
            F = None if own is not None else self.F(j)
            minv = steps.backward(scope, body, Dinv, F, own)
            if root:
                rows = range(w) if own is None else range(own + 1)
                for a in rows:
                    self.write(scope, i0 + a, j, minv[a], mirror=own is None or a < own)
                if own is None and not cols.leaf[b]:
                    _, P = steps.forward(scope, body, U, Dinv, None, minv)
                    for k, x in enumerate(P):
                        scope.assign(self.P(b, j)[k], x)
                return
            F_up = steps.transfer(scope, body, U, minv, F)  # every load before the first store
            scope.assign(self.entry(i0, j), minv[0])  # read back by the forward pass
            for k, x in enumerate(F_up):
                scope.assign(self.F(j)[k], x)

        runs = [sweeps.Run(1, lambda scope, _k, a=a: column(scope, i0 + a, a),
                           comment=f"body {b} ({body.joint.name}), its column {i0 + a}") for a in range(w)]
        if end > d0:
            def descendants(scope, k):
                scope.stmt(f"const int j = {_lin(d0, k)}")
                column(scope, "j", None)

            runs.append(sweeps.Run(end - d0, descendants,
                                   comment=f"body {b}: the columns of its descendants, {d0} <= j < {end}"))
        return runs

    def forward_runs(self, b: int) -> list:
        """Body ``b``'s columns of the forward pass (a non-root: one column of its own): its own,
        its descendants' (the backward values corrected) and the rest of its tree's (new)."""
        robot, cols, steps = self.robot, self.cols, self.steps
        body = robot.bodies[b]
        i0, d0, end, tend = cols.columns(b)
        p = body.parent

        def column(scope, j, within):
            U, Dinv = self.ud(b)
            minv_in = [self.entry(i0, j)] if within else None
            minv, P = steps.forward(scope, body, U, Dinv, self.P(p, j), minv_in)
            self.write(scope, i0, j, minv[0], mirror=j != i0)
            if j != i0 and not cols.leaf[b]:
                for k, x in enumerate(P):
                    scope.assign(self.P(b, j)[k], x)

        def ranged(first, within):
            def step(scope, k):
                scope.stmt(f"const int j = {_lin(first, k)}")
                column(scope, "j", within)
            return step

        runs = [sweeps.Run(1, lambda scope, _k: column(scope, i0, True), comment=f"body {b} ({body.joint.name})")]
        if end > d0:
            runs.append(sweeps.Run(end - d0, ranged(d0, True), comment=f"body {b}: its descendants' columns"))
        if tend > end:
            runs.append(sweeps.Run(tend - end, ranged(end, False), comment=f"body {b}: the rest of its tree"))
        return runs

    def zero_runs(self) -> list:
        """The entries between separate trees (a forest): structural zeros."""
        runs = []
        for b in self.robot.bodies:
            i0, d0, _, tend = self.cols.columns(b.index)
            for r in range(i0, d0):
                if self.cols.n > tend:
                    def zeros(scope, k, r=r, tend=tend):
                        scope.stmt(f"const int j = {_lin(tend, k)}")
                        self.write(scope, r, "j", 0.0, mirror=True)
                    runs.append(sweeps.Run(self.cols.n - tend, zeros, comment=f"row {r}: zeros beyond its tree"))
        return runs

    def steps_of(self, form: str) -> tuple[list[list], list[list]]:
        """The runs of each backward step (finalize a group, and the columns of the group before)
        and of each forward step."""
        back_groups, fwd_groups = _groups(self.robot, form)
        back = []
        for s in range(len(back_groups) + 1):
            runs = [r for b in (back_groups[s] if s < len(back_groups) else []) for r in [self.finalize(b)] if r]
            if s:
                runs = [r for b in back_groups[s - 1] for r in self.backward_runs(b)] + runs
            if s == 0:
                runs += self.zero_runs()
            back.append(runs)
        fwd = [[r for b in g for r in self.forward_runs(b)] for g in fwd_groups]
        return back, fwd

    # -- mimic joints ------------------------------------------------------------------

    def correction(self) -> list:
        """``Minv = L (Mr - Y K^-1 Y^T) L^T``, ``Y = Mr C^T``, ``K = C Y``: K factored by one
        thread, ``Z = K^-1 Y^T`` one own column per thread, the entries one per thread."""
        cols, nv, m = self.cols, self.robot.nv, self.cols.m
        mimics = cols.mimics

        def Y(r, k):  # Y[r, k] = Mr[r, ib] - mult Mr[r, im]: both triangles of Mr are final here
            ib, im, mult = mimics[k]
            return sum_terms([(self.entry(r, ib),), (-mult, self.entry(r, im))])

        def L_at(i, j):
            return f"s_KL[{i * (i + 1) // 2 + j}]"

        def inv_at(i):
            return f"s_KL[{m * (m + 1) // 2 + i}]"

        def factor(scope, _k):
            K = [[sum_terms([(Y(mimics[k][0], l),), (-mimics[k][2], Y(mimics[k][1], l))])
                  if l <= k else 0.0 for l in range(m)] for k in range(m)]
            chol = dense.cholesky(scope, K)
            for i in range(m):
                scope.assign(inv_at(i), chol.inv_diag[i])
                for j in range(i + 1):
                    scope.assign(L_at(i, j), chol.L[i][j])

        def solve(scope, a):
            scope.stmt(f"const int ra = {cols.own(a)}")
            chol = dense.Cholesky([[L_at(i, j) if j <= i else 0.0 for j in range(m)] for i in range(m)],
                                  [inv_at(i) for i in range(m)])
            z = dense.cho_solve(scope, chol, [[scope.let(Y("ra", k), "y")] for k in range(m)])
            for k in range(m):
                scope.assign(f"s_Z[{_lin(k * nv, a)}]", z[k][0])

        def row(a):
            ra = cols.own(a)

            def step(scope, k):
                scope.stmt(f"const int b = {_lin(a, k)}")
                scope.stmt(f"const int rb = {cols.own('b')}")
                x = scope.let(sum_terms([(self.entry(ra, "rb"),),
                                         *[(-1.0, Y(ra, k2), f"s_Z[{_lin(k2 * nv, 'b')}]") for k2 in range(m)]]), "Minv")
                scope.assign(f"s_Minv[{_lin(a * nv, 'b')}]", x)
                scope.extend([n.If(f"b != {a}", [n.Stmt(f"s_Minv[b * {nv} + {a}] = {x}")])])
            return sweeps.Run(nv - a, step, comment=f"row {a} (relaxed {ra}), b >= {a}")

        return [
            n.Sync(),
            n.Comment(f"mimic joints: K = C Mr C^T ({m} x {m}) factored by one thread"),
            *sweeps.fan_out_runs([sweeps.Run(1, factor, per_warp=True)]),
            n.Sync(),
            n.Comment("Z = K^-1 Y^T, one own column per thread"),
            *sweeps.fan_out_runs([sweeps.Run(nv, solve)]),
            n.Sync(),
            n.Comment("Minv = Mr - Y Z on the own coordinates, the upper triangle one entry per thread, mirrored"),
            *sweeps.fan_out_runs([row(a) for a in range(nv)]),
        ]


@attrs.frozen
class MinvOptions(sweeps.SweepOptions):
    """Minv's options: the block layout's sweep form, and the frame of the per-state columns."""

    per_state_frame: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", "root", "body")))
    """The per-state layout's column passes: ``root`` (U and S of every body carried into its
    tree's root frame once, then no transform per body and column: fewer operations, a longer
    chain before the first column), ``body`` (each column transformed body to body), or ``auto``
    (the measured choice for the robot, else root)."""


def frame_of(ctx) -> str:
    """The per-state column frame of an emit context: the option, else the measured one, else root."""
    return ctx.knob("per_state_frame", "auto", "root")[0]


class MinvEmitter(Emitter):
    Options = MinvOptions
    staged = True
    # nv^2 outputs per state, as crba: scattered per-thread stores do not coalesce; staged through
    # shared memory (where a block of them fits 48 KB) they do
    stage_by_default = True

    def block_threads_hint(self, robot: Robot) -> int:
        block = _Block(robot)
        back, fwd = block.steps_of("levels")
        widths = [sweeps.runs_width(runs) for runs in back + fwd]
        if block.cols.mimic:
            widths.append(robot.nv * (robot.nv + 1) // 2)
        return max(widths + [32])

    def inner_doc(self, layers) -> str:
        return f"Sweep form: {sweeps.form_of(layers.ctx)}."

    def inner_body(self, layers) -> list:
        robot = layers.robot
        block = _Block(robot)
        back, fwd = block.steps_of(sweeps.form_of(layers.ctx))
        out: list = [n.Comment(
            "backward pass, leaves to root: each step finalizes a group of bodies (their articulated\n"
            "inertias, U, Dinv, and what each passes to its parent: one warp per body) and runs the\n"
            "columns of the group before (one thread per column: P2); a root's columns are final")]
        steps = [s for s in back if s]
        for k, runs in enumerate(steps):
            out += sweeps.fan_out_runs(runs)
            if k + 1 < len(steps) or any(fwd) or block.cols.mimic:
                out.append(n.Sync())
        fwd = [s for s in fwd if s]
        if fwd:
            out.append(n.Comment("forward pass, root to leaves: each body's columns from its own on, one thread each"))
        for k, runs in enumerate(fwd):
            out += sweeps.fan_out_runs(runs)
            if k + 1 < len(fwd):
                out.append(n.Sync())
        if block.cols.mimic:
            out += block.correction()
        return out

    def state_body(self, layers) -> list:
        """The articulated inertias depth-first (only the live path's in registers), then each
        column on its own: up its body's path (the backward pass's rows), then down its tree
        (the forward pass's), so only one column's forces and accelerations are live at a time."""
        robot = layers.robot
        cols = Columns(robot)
        nv, nr = robot.nv, cols.n
        xi = lambda i: f"XI[{i}]"
        steps = MinvSteps(robot, xi)
        scope = Scope("t")
        acc = {b.index: ss.sym6_of(b.inertia) for b in robot.bodies}
        ud: dict = {}

        def visit(sc, b):
            ss.xi_update(sc, robot, b, lambda i: f"q[{i}]", xi)

        def complete(sc, c):
            # IA[c] is final once its subtree is: its U and Dinv, then its part of the parent's
            body = robot.bodies[c]
            IA = sc.let_all(acc.pop(c), "IA")
            U, Dinv = ud[c] = steps.articulated(sc, body, IA)
            if body.parent >= 0:
                p = body.parent
                acc[p] = sc.let_all(ss.sym6_add(acc[p], steps.passed_on(sc, body, IA, U, Dinv)), "acc")

        sweeps.depth_first(robot, scope, visit, complete)
        root = frame_of(layers.ctx) == "root"
        UW, SW = {}, {}
        if root:
            # the columns in the frame of their tree's root (Pinocchio's world frame): U and S of
            # every body carried there once, so a column's force F goes up (F += U m) and its
            # acceleration P down (P += S m) with no transform per body and column
            scope.comment("U and S of every body in its tree's root frame")
            frames = ss.root_frames(robot, xi, scope)
            for body in robot.bodies:
                b = body.index
                U, _ = ud[b]
                if body.parent < 0:
                    UW[b], SW[b] = U, steps.S[b]
                    continue
                E, r = frames[b]
                UW[b] = [scope.let_all(ss.xt_force(E, r, u, scope), "UW") for u in U]
                if not cols.leaf[b]:
                    SW[b] = [scope.let_all(ss.motion_to_root(E, r, s, scope), "SW") for s in steps.S[b]]
        owner = {j: b.index for b in robot.bodies for j in range(cols.columns(b.index)[0], cols.columns(b.index)[1])}
        final: dict = {}
        for j in range(nr):
            bj = robot.bodies[owner[j]]
            scope.comment(f"column {j} ({bj.joint.name}): up its path, then down its tree")
            back, F, a, own = {}, None, bj, j - cols.columns(bj.index)[0]
            while True:
                _, Dinv = ud[a.index]
                w = len(Dinv)
                m = steps.backward(scope, a, Dinv, F, own, SW.get(a.index))
                back[a.index] = m
                if a.parent < 0:
                    break
                if root:
                    UWa = UW[a.index]
                    F = scope.let_all([sum_terms([*([(F[k],)] if F is not None else []),
                                                  *[(UWa[c][k], m[c]) for c in range(w)]]) for k in range(6)], "F")
                else:
                    F = steps.transfer(scope, a, ud[a.index][0], m, F)
                a, own = robot.bodies[a.parent], None
            P: dict = {}
            for body in robot.bodies:
                b, p = body.index, body.parent
                i0, d0, _, tend = cols.columns(b)
                if not i0 <= j < tend:
                    continue
                U, Dinv = ud[b]
                w = len(Dinv)
                if root:
                    minv = list(back[b]) if b in back else [0.0] * w
                    Pp = P[p] if p >= 0 else [0.0] * 6
                    if p >= 0:
                        UtP = [scope.let(dot(u, Pp), "UtP") for u in UW[b]]
                        minv = [sum_terms([(minv[k],), *[(-1.0, Dinv[k][c], UtP[c]) for c in range(w)]])
                                for k in range(w)]
                    minv = scope.let_all(minv, "m")
                else:
                    minv, Pb = steps.forward(scope, body, U, Dinv, P[p] if p >= 0 else None, back.get(b))
                for r in range(d0 - i0):
                    if i0 + r <= j:
                        final[(i0 + r, j)] = minv[r]
                        if not cols.mimic:
                            scope.assign(f"Minv[{(i0 + r) * nv + j}]", minv[r])
                            if i0 + r != j:
                                scope.assign(f"Minv[{j * nv + i0 + r}]", minv[r])
                if j >= d0 and not cols.leaf[b]:
                    if root:
                        Sb = SW[b]
                        P[b] = scope.let_all([sum_terms([(Pp[k],), *[(Sb[c][k], minv[c]) for c in range(w)]])
                                              for k in range(6)], "P")
                    else:
                        P[b] = scope.let_all(Pb, "P")
        if not cols.mimic:
            for r in range(nv):  # entries between separate trees
                for c in range(r + 1, nv):
                    if (r, c) not in final:
                        scope.assign(f"Minv[{r * nv + c}]", 0.0)
                        scope.assign(f"Minv[{c * nv + r}]", 0.0)
        else:
            self._state_correction(scope, cols, final)
        return [n.Stmt("T XI[XI_SIZE]", comment="registers: every index is a constant"), *scope.body()]

    @staticmethod
    def _state_correction(scope: Scope, cols: Columns, final: dict) -> None:
        nv, m, mimics = cols.robot.nv, cols.m, cols.mimics

        def mr(r, c):
            return final.get((min(r, c), max(r, c)), 0.0)

        def Y(r, k):
            ib, im, mult = mimics[k]
            return sum_terms([(mr(r, ib),), (-mult, mr(r, im))])

        scope.comment(f"mimic joints: Minv = L (Mr - Y K^-1 Y^T) L^T, K = C Mr C^T ({m} x {m})")
        K = [[sum_terms([(Y(mimics[k][0], l),), (-mimics[k][2], Y(mimics[k][1], l))]) if l <= k else 0.0
              for l in range(m)] for k in range(m)]
        chol = dense.cholesky(scope, K)
        B = [[scope.let(Y(cols.own(a), k), "y") for a in range(nv)] for k in range(m)]
        Z = dense.cho_solve(scope, chol, B)
        for a in range(nv):
            for b in range(a, nv):
                x = scope.let(sum_terms([(mr(cols.own(a), cols.own(b)),),
                                         *[(-1.0, B[k][a], Z[k][b]) for k in range(m)]]), "Minv")
                scope.assign(f"Minv[{a * nv + b}]", x)
                if b != a:
                    scope.assign(f"Minv[{b * nv + a}]", x)


class Minv(Algorithm):
    name = "minv"
    inverts_mass_matrix = True
    summary = "inverse joint-space inertia M(q)^-1 by Carpentier's direct recursion (M never formed)"
    math = r"""
Backward pass, leaves to root, with :math:`F_i` the articulated bias forces of the unit joint
forces applied in :math:`i`'s subtree (children's contributions accumulated):

.. math::

   U_i = I^A_i S_i, \quad D_i = S_i^T U_i, \quad
   M^{-1}_{i,\,\mathrm{sub}(i)} = D_i^{-1} (e_i - S_i^T F_{i,\,\mathrm{sub}(i)}),

   F_{\lambda(i)} \mathrel{+}= X_i^T (F_i + U_i M^{-1}_{i,\,\mathrm{sub}(i)}), \quad
   I^A_{\lambda(i)} \mathrel{+}= X_i^T (I^A_i - U_i D_i^{-1} U_i^T) X_i .

Forward pass, root to leaves, over the columns :math:`j \ge i` with :math:`P_i` the
accelerations of body :math:`i`:

.. math::

   M^{-1}_{i,\,j\ge i} \mathrel{-}= D_i^{-1} U_i^T X_i P_{\lambda(i)}, \quad
   P_i = X_i P_{\lambda(i)} + S_i M^{-1}_{i,\,j \ge i} .

Mimic joints: :math:`M^{-1} = L (M_r^{-1} - Y K^{-1} Y^T) L^T`, :math:`Y = M_r^{-1} C^T`,
:math:`K = C Y`, on the relaxed tree whose mimic relations are the rows of :math:`C`.
"""
    review = ParallelismReview(
        P1=done("block layout: both passes run by levels (p1='levels'), one barrier per level: a "
                "backward step finalizes the bodies of one level (articulated inertia, U, Dinv, and the "
                "X^T Ia X each passes to its parent, so siblings transform theirs in parallel and the "
                "parent only sums: no atomics, a fixed order; one warp per body) while the columns of "
                "the level below run; the forward pass's levels follow. The per-body form "
                "(p1='bodies') stays for the A/B; a chain is the same either way. H200, float32, kernel us, "
                "levels vs bodies at N=256 (e4d6bd6): hyq 11.5 / 13.1, atlas 37.5 / 43.0, g1 42.7 / 50.7, "
                "pr2 41.3 / 46.0 (iiwa14 11.6 / 10.7: the same code, noise); minv.tuning.json"),
        P2=done("inside each step the columns are independent unit-force solves, one thread each: "
                "a body's subtree columns in the backward pass, its columns j >= i in the forward pass, "
                "consecutive columns of one body on consecutive threads (one code path per warp); the "
                "mimic correction fans Z = K^-1 Y^T over own columns and the upper triangle's entries over "
                "threads (one thread factors K, m <= 10). Not fanned: an articulated-inertia update, whose 21 "
                "entries' folded code differs (a warp would run them one after another) and shares its "
                "intermediates. Tried and reverted: X^T Ia X on six threads, one code path over the "
                "column (Ia and W = X^T Ia through shared memory, two more barriers per level): H200, "
                "N=256, 37.5 -> 41.3 us on atlas, 42.7 -> 47.7 on g1, 41.3 -> 48.5 on pr2 (faster only "
                "at N=16384, where the per-state layout is 3-10x faster still)"),
        P3=done("the configuration-dependent transform data is hoisted into one parallel pass over "
                "bodies (load_update_XImats) before the recursions; each body's transform of its "
                "articulated inertia to its parent is done by the body, in parallel with its siblings, "
                "one step before the parent needs it"),
        P4=done("column ranges baked per body (own, subtree, rest of the tree, structural zeros between "
                "trees): only subtree columns touched in the backward pass, only j >= i in the forward "
                "pass, each entry written once with its mirror; F is one 6-vector per column carried up "
                "in place (6 n_r, not 6 n_r per body), P stored only for bodies with children over the "
                "columns their children read, component-major so a body's consecutive columns are "
                "consecutive addresses; a leaf's IA, U and Dinv are folded constants; robot constants "
                "folded into the code (a revolute joint's U one column, its D one reciprocal)"),
        notes="two layouts: block-cooperative (the inline rung) and per-state (one thread per state: "
              "the articulated inertias depth-first in registers, then each column on its own, up its "
              "body's path and down its tree, so only one column's forces and accelerations are live: "
              "half the host compiler's time on g1 of the two passes in body order, whose values all "
              "lived across the pass boundary); the launcher picks by MINV_PER_STATE_MIN_N; staged "
              "through shared memory from MINV_STAGE_MIN_N states (nv^2 outputs, as crba: 4096 on iiwa14 "
              "and hyq, warp by warp; H200 float32 at N=16384, graph replay over the empty kernel's: iiwa14 "
              "2.3 us, hyq 3.8; at 262144 1.9x and 1.3x the memory floor). Mimic robots: the recursion on "
              "the relaxed tree, then the Schur complement of the constraints (grid_core.emit.dense: "
              "Cholesky of K). H200, float32, kernel us against upstream GRiD's rebuilt on the same H200: iiwa14 "
              "N=256 8.7 (per-state) vs 12.7, N=16384 9.1 vs 176; hyq N=256 11.5 (block) vs 11.6, N=16384 "
              "10.3 vs 171 (14.0 before the staged stores went in chunks of loads, then stores); atlas "
              "N=1 / 256 / 1024 26.6 / 27.5 / 31.8 (per-state: the crossover measured again with the ring, "
              "fda5422: atlas 1, g1 1024) vs 23.0 / 25.1 / 63.0 (the block layout 30.9 / 34.5 / 69.2), N=4096 "
              "34.7 vs 219, N=16384 68.1 vs 841 (fda5422). Robots too large to stage whole "
              "(32 states' Minv over 48 KB: atlas, g1) take the ring kernel from MINV_RING_MIN_N states "
              "(grid_core.emit.ring: each warp's outputs through a ring of shared memory, flushed as runs "
              "of consecutive entries; a value stored to several entries held once, the ring sized to the "
              "distinct values: atlas 214 in 224 slots, one flush; g1 630 in 416, two; ncu on atlas at 16384: 28.8k line writes a warp with per-thread "
              "stores, 68 cycles an instruction, LG-throttled; the launch spread over the SMs in whole warps): "
              "H200 float32 graph-replay us, plain / ring (fda5422): atlas N=2048 42.1 / 31.3, 4096 69.2 / "
              "31.7, 16384 321 / 66.0, 65536 1637 / 301 (238 in blocks of the warps that keep the most "
              "resident, b000eab: one warp a block, seven an SM, against one block of four); g1 4096 97.7 / "
              "88.9, 16384 609 / 209, 65536 3241 / 881 (four warps an SM either way); below MINV_RING_MIN_N "
              "the plain stores win (atlas 1024: 30.0 / 31.9); kernel us at 262144 (b000eab): atlas 844, "
              "3.7x the memory floor (1240 in blocks of four warps), g1 3554, 11.6x; atlas's one flush "
              "as the warp's whole block of outputs in order (MINV_RING_SLOT_OF, measured: whole on atlas; "
              "g1 flushes twice, by groups), graph us at 4096 / 16384 / 65536 / 262144 groups vs whole: "
              "31.6 / 64.5 / 231 / 839 vs 32.7 / 57.4 / 196 / 678, 3.0x the memory floor (with every store "
              "coalesced, a layout the output's contract does not allow, atlas at 16384 took 56; with "
              "none, 21). ncu: the block layout's warps "
              "wait at barriers 65% of their cycles (a level's long finalizing, straight-line code run "
              "once, carries the critical path); the per-state kernel at N=1 stalls on instruction fetch "
              "(7 of 8.7 cycles per instruction)",
    )
    emitter = MinvEmitter

    def inputs(self, robot: Robot):
        return (Port("q", (robot.nq,), "joint configuration"),)

    def outputs(self, robot: Robot, **options):
        return (Port("Minv", (robot.nv, robot.nv), "inverse joint-space inertia matrix (symmetric)"),)

    def reference(self, ctx, q):
        return minv(ctx.robot, q)

    def arenas(self, robot: Robot, options=None):
        cols = Columns(robot)
        nr = cols.n
        out = [
            ArenaRegion("F", 6 * nr, "articulated bias forces of the unit joint forces: one 6-vector per "
                        "relaxed column, carried up the tree in place"),
            ArenaRegion("P", cols.p_size, "accelerations of the forward pass: bodies with children, the "
                        "columns their children read"),
            ArenaRegion("IA", 21 * len(cols.ia_slot), "articulated inertia each non-root body passes to its "
                        "parent, X^T (IA - U Dinv U^T) X (21 scalars)"),
            ArenaRegion.group("UD", [("U", cols.u_size), ("Dinv", cols.d_size)],
                              "U = IA S and Dinv = (S^T U)^-1 of each body with children"),
        ]
        if cols.mimic:
            m = cols.m
            out += [
                ArenaRegion("Mr", nr * nr, "inverse inertia of the relaxed tree (mimic joints free)"),
                ArenaRegion.group("schur", [("KL", m * (m + 1) // 2 + m), ("Z", m * robot.nv)],
                                  "mimic correction: Cholesky factor of K = C Mr C^T, Z = K^-1 Y^T"),
            ]
        return tuple(out)

    def spill_rungs(self, robot: Robot, options=None):
        return (
            SpillRung(0, "all in shared memory"),
            SpillRung(1, "F region in global", {"F", "P"},
                      "the unit-force columns (F, and P: the forward pass's share of them) go to d_workspace"),
            SpillRung(2, "all scratch in global", {ALL_SCRATCH}, "every scratch region, transform data too"),
        )


@hookimpl
def grid_register_algorithms():
    return [Minv]
