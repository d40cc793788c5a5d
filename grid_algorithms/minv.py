"""Inverse of the joint-space inertia matrix, directly, by Carpentier's ABA-like recursion.

``Minv = minv(q)`` without forming (or factorising) ``M``: the algorithm of Carpentier (2018),
"Analytical inverse of the joint space inertia matrix", the one Pinocchio's ``computeMinverse``
implements.  It is the articulated-body algorithm run on all unit joint forces at once: a
backward pass of articulated inertias ``IA`` carrying, for the unit forces applied in each
subtree, the articulated bias forces ``F``; then a forward pass carrying their accelerations
``P``.  Only the upper triangle is computed (each row from its own column on), then mirrored.

Mimic joints: the recursion runs on the relaxed tree (every mimic joint free) and the mimic
constraints are imposed afterwards by a Schur complement of the size of the number of mimic
joints (see :mod:`grid_algorithms._mimic`).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.arena import spill_ladder
from grid_core.derivatives import Rule
from grid_core.emit import articulated, sweeps
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, dot, sum_terms
from grid_core.emit.storage import Field, Symmetric, put_symmetric, region, regions, vector
from grid_core.errors import CodegenError
from grid_core.model import Body, Robot
from grid_core.model.joints import body_q, joint_transform, motion_subspace
from grid_core.review import ParallelismReview, done

from ._mimic import Schur, relaxation, schur_fields


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
# The recursion on the relaxed tree as steps on scalars (MinvSteps) shared by both layouts, over
# column bookkeeping baked at generation time (Columns).  F holds one 6-vector per relaxed column:
# column j's bias force lives at one body at a time (where the backward pass is on j's path to the
# root), and siblings' subtrees own disjoint columns.  Without mimic joints the recursion writes
# the output directly.


class Columns:
    """The recursion's column bookkeeping for one robot (relaxed tree), computed offline."""

    def __init__(self, robot: Robot):
        rel = self.rel = relaxation(robot)
        topo = robot.topology
        self.n, self.mimic = rel.nv, bool(len(rel.C))
        for b in robot.bodies:
            if rel.width[b.index] != 1 and b.parent >= 0:
                raise CodegenError(f"minv: robot '{robot.name}': body '{b.name}' has a multi-dof joint below "
                                   "the root, which the emitted recursion does not take")
        if [a + sum(a >= t for t in rel.own_steps) for a in range(robot.nv)] != [int(x) for x in rel.own]:
            raise CodegenError(f"minv: robot '{robot.name}': its own coordinates are not in relaxed order")
        self.leaf = [not c for c in topo.children]
        parents = [b for b in range(robot.num_bodies) if topo.children[b]]
        w = rel.width
        self.p_first = {b: rel.index[b] + w[b] for b in parents}
        """The first column of body ``b``'s P: its first child's."""
        fields = [  # F and P component-major: F(k, j) is column j's component k
            Field("F", range(6), self.n, "articulated bias forces of the unit joint forces: one 6-vector per "
                  "relaxed column, carried up the tree in place"),
            Field("P", [(b, k) for b in parents for k in range(6)],
                  lambda key: rel.tree_end[key[0]] - self.p_first[key[0]],
                  "accelerations of the forward pass: bodies with children, the columns their children read"),
            Field("IA", [b.index for b in robot.bodies if b.parent >= 0], 21, "articulated inertia each non-root "
                  "body passes to its parent, X^T (IA - U Dinv U^T) X (21 scalars)"),
            *articulated.fields(parents, w),
            *([vector("Mr", self.n * self.n, "inverse inertia of the relaxed tree (mimic joints free)", self.n),
               *schur_fields(rel)] if self.mimic else []),
        ]
        self.fields = {f.name: f for f in fields}


class MinvSteps:
    """The recursion's steps on scalars, every robot constant folded (``xi``: the XI array)."""

    def __init__(self, robot: Robot, xi):
        self.robot, self.xi = robot, xi
        self.S = [ss.subspace_columns(b) for b in robot.bodies]

    def X(self, scope: Scope, body: Body) -> ss.Transform:
        return ss.Transform(self.robot, body, self.xi, scope)

    def backward(self, scope: Scope, body: Body, Dinv, F, own: int | None, S=None) -> list:
        """Rows ``ii`` of one column of the backward pass, ``Dinv (e - S^T F)``: ``own`` the
        joint's own column (``F`` zero there), else a descendant's (``e`` zero).  ``S``: the
        joint's subspace in ``F``'s frame (default its own, in the body frame)."""
        w = len(Dinv)
        if own is not None:
            return [Dinv[a][own] for a in range(w)]
        rhs = [scope.let(dot(s, F), "StF") for s in (self.S[body.index] if S is None else S)]
        return scope.let_all([sum_terms([(-1.0, Dinv[a][c], rhs[c]) for c in range(w)]) for a in range(w)], "m")

    def transfer(self, scope: Scope, U, minv, F, name: str = "F") -> list:
        """``F + U minv`` (``F`` None: zero), the column's bias force that a joint passes on, in
        the frame of ``F`` and ``U``; ``name``: its variables."""
        return scope.let_all(ss.combine(U, minv) if F is None else ss.combine([F, *U], [1.0, *minv]), name)

    def forward(self, scope: Scope, body: Body, U, Dinv, XP, minv, S=None, ut: str = "UtP"):
        """One column of the forward pass: ``minv -= Dinv U^T XP`` (``XP``: the parent's P in the
        frame of ``U`` and ``S``, None at a root; ``minv`` None: zero, a column beyond the subtree),
        then ``P = XP + S minv``.  ``ut``: the variables of ``U^T XP``."""
        w = len(Dinv)
        minv = list(minv) if minv is not None else [0.0] * w
        if XP is not None:
            UtXP = [scope.let(dot(u, XP), ut) for u in U]
            minv = [sum_terms([(minv[a],), *[(-1.0, Dinv[a][c], UtXP[c]) for c in range(w)]]) for a in range(w)]
        minv = scope.let_all(minv, "m")
        return minv, ss.combine([XP or [0.0] * 6, *(self.S[body.index] if S is None else S)], [1.0, *minv])


class _Block:
    """The block layout's runs (:class:`sweeps.Run`), on the inner's arena arrays (``arrays``:
    the fields of :class:`Columns` bound by the layer generator; None: bound as it binds them,
    for the runs' widths alone)."""

    def __init__(self, robot: Robot, arrays: dict | None = None, io: dict | None = None):
        self.robot, self.cols = robot, Columns(robot)
        self.arr, self.io = arrays or {}, io or {}
        self.steps = MinvSteps(robot, self.io.get("xi"))
        for body in robot.bodies if arrays else ():  # a leaf's articulation: constants, recorded (none stored)
            if self.cols.leaf[body.index]:
                articulated.store(Scope("c"), self.arr, body.index, self.articulation(Scope("c"), body))

    # -- the arrays ------------------------------------------------------------------

    def entry(self, r, c) -> str:
        """``Mr[r, c]`` (without mimic joints the output itself); either index a C++ expression."""
        return (self.arr["Mr"] if self.cols.mimic else self.io["Minv"]).at(r, c)

    def F(self, j) -> list[str]:
        return [self.arr["F"](k, j) for k in range(6)]

    def P(self, b: int, j) -> list[str]:
        return [self.arr["P"]((b, k), j, first=self.cols.p_first[b]) for k in range(6)]

    def articulation(self, scope: Scope, body: Body) -> articulated.Articulated:
        """``body``'s articulation from its inertia and its children's ``X^T Ia X`` (a leaf's: constants)."""
        IA = ss.sym6_of(body.inertia)
        for c in self.robot.topology.children[body.index]:
            IA = ss.sym6_add(IA, self.arr["IA"].get(c))
        return articulated.articulate(scope, body, scope.let_all(IA, "IA"))

    # -- the runs --------------------------------------------------------------------

    def finalize(self, b: int) -> sweeps.Run | None:
        """Body ``b``'s articulated inertia (its own and its children's), its U and Dinv, and what
        it passes to its parent.  None: nothing to do at run time (a lone leaf root)."""
        robot, cols, steps = self.robot, self.cols, self.steps
        body, kids = robot.bodies[b], list(robot.topology.children[b])
        if cols.leaf[b] and body.parent < 0:
            return None

        def step(scope, _k):
            art = self.articulation(scope, body)
            articulated.store(scope, self.arr, b, art)
            if body.parent >= 0:
                Ia, X = art.reduced(scope), steps.X(scope, body)
                scope.assign_all([self.arr["IA"](b, k) for k in range(21)], art.to_parent(scope, X, Ia))

        what = [f"IA[{b}] = I + children {kids}, U, Dinv" if kids else f"leaf {b}"]
        what += ["X^T Ia X to the parent"] if body.parent >= 0 else []
        return sweeps.Run(1, step, per_warp=True, comment=f"{'; '.join(what)} ({body.joint.name})")

    def backward_runs(self, b: int) -> list:
        """Body ``b``'s columns of the backward pass: its own, then its descendants' (one thread
        each).  A root's are final: written with their mirrors, its P stored (the forward pass
        starts below the roots)."""
        robot, cols, steps = self.robot, self.cols, self.steps
        body = robot.bodies[b]
        i0, d0, end, _ = cols.rel.spans(b)

        def column(scope, j, own):
            U, Dinv = articulated.stored(self.arr, body)
            F = None if own is not None else self.F(j)
            minv = steps.backward(scope, body, Dinv, F, own)
            if body.parent < 0:
                for a in range(d0 - i0) if own is None else range(own + 1):
                    put_symmetric(scope, self.entry, i0 + a, j, minv[a])
                if own is None and not cols.leaf[b]:
                    scope.assign_all(self.P(b, j), steps.forward(scope, body, U, Dinv, None, minv)[1])
                return
            f = steps.transfer(scope, U, minv, F, "f")
            F_up = scope.let_all(steps.X(scope, body).force_T(f, scope), "F")  # every load before the first store
            scope.assign(self.entry(i0, j), minv[0])  # read back by the forward pass
            scope.assign_all(self.F(j), F_up)

        runs = [sweeps.Run(1, lambda scope, _k, a=a: column(scope, i0 + a, a),
                           comment=f"body {b} ({body.joint.name}), its column {i0 + a}") for a in range(d0 - i0)]
        return runs + [sweeps.span(d0, end, lambda scope, j: column(scope, j, None),
                                   comment=f"body {b}: the columns of its descendants, {d0} <= j < {end}")]

    def forward_runs(self, b: int) -> list:
        """Body ``b``'s columns of the forward pass (a non-root: one column of its own): its own,
        its descendants' (the backward values corrected) and the rest of its tree's (new)."""
        robot, cols, steps = self.robot, self.cols, self.steps
        body = robot.bodies[b]
        i0, d0, end, tend = cols.rel.spans(b)

        def column(scope, j, within):
            U, Dinv = articulated.stored(self.arr, body)
            minv_in = [self.entry(i0, j)] if within else None
            XP = scope.let_all(steps.X(scope, body).motion(self.P(body.parent, j), scope), "XP")
            minv, P = steps.forward(scope, body, U, Dinv, XP, minv_in, ut="UtXP")
            put_symmetric(scope, self.entry, i0, j, minv[0])
            if j != i0 and not cols.leaf[b]:
                scope.assign_all(self.P(b, j), P)

        return [sweeps.Run(1, lambda scope, _k: column(scope, i0, True), comment=f"body {b} ({body.joint.name})"),
                sweeps.span(d0, end, lambda sc, j: column(sc, j, True), comment=f"body {b}: its descendants' columns"),
                sweeps.span(end, tend, lambda sc, j: column(sc, j, False), comment=f"body {b}: the rest of its tree")]

    def zero_runs(self) -> list:
        """The entries between separate trees (a forest): structural zeros."""
        return [sweeps.span(tend, self.cols.n, lambda scope, j, r=r: put_symmetric(scope, self.entry, r, j, 0.0),
                            comment=f"row {r}: zeros beyond its tree")
                for i0, d0, _, tend in map(self.cols.rel.spans, range(self.robot.num_bodies)) for r in range(i0, d0)]

    def steps_of(self, form: str) -> tuple[list[list], list[list]]:
        """The runs of each backward step (finalize a group and run the columns of the group before;
        the structural zeros with the first) and of each forward step (roots excluded: the backward
        pass finishes them)."""
        groups = sweeps.groups(self.robot, form)
        back = [[r for b in g for r in [self.finalize(b)] if r] for g in [*reversed(groups), []]]
        for s, g in enumerate(reversed(groups), 1):
            back[s] = [r for b in g for r in self.backward_runs(b)] + back[s]
        back[0] += self.zero_runs()
        parent = self.robot.topology.parent
        fwd = [[r for b in g if parent[b] >= 0 for r in self.forward_runs(b)] for g in groups]
        return back, [runs for runs in fwd if runs]

    def correction(self) -> list:
        """The mimic correction (:class:`~grid_algorithms._mimic.Schur`) on Mr, final here."""
        return Schur(self.cols.rel, self.entry).block(self.arr["KL"], self.arr["Z"], self.io["Minv"])


class MinvEmitter(Emitter):
    Options = sweeps.SweepOptions
    staged = True
    stage_by_default = True  # nv^2 outputs per state

    def block_threads_hint(self, robot: Robot) -> int:
        block = _Block(robot)
        widths = [sweeps.runs_width(runs) for stage in block.steps_of("levels") for runs in stage]
        return max(widths + [robot.nv * (robot.nv + 1) // 2 if block.cols.mimic else 32, 32])

    def fields(self, layers) -> tuple:
        return tuple(Columns(layers.robot).fields.values())

    def inner_body(self, layers) -> list:
        block = _Block(layers.robot, layers.arrays(self.fields(layers)), layers.vectors())
        back, fwd = block.steps_of(sweeps.form_of(layers.ctx))
        out: list = [n.Comment(
            "backward pass, leaves to root: each step finalizes a group of bodies (their articulated\n"
            "inertias, U, Dinv, and what each passes to its parent: one warp per body) and runs the\n"
            "columns of the group before (one thread per column: P2); a root's columns are final")]
        out += sweeps.phases(back)
        if any(back) and (any(fwd) or block.cols.mimic):
            out.append(n.Sync())
        out += sweeps.phases(fwd, ["forward pass, root to leaves: each body's columns from its own on, "
                                   "one thread each"])
        return out + (block.correction() if block.cols.mimic else [])

    def state_body(self, layers) -> list:
        """Each column on its own, up its body's path, then down its tree (the review's notes), in
        the frame of its tree's root (Pinocchio's world frame): U and S of every body carried there
        once, so a column's force F goes up (F += U m) and its acceleration P down (P += S m) with
        no transform per body and column."""
        robot = layers.robot
        cols = Columns(robot)
        io = layers.vectors(local=True)
        steps = MinvSteps(robot, io["xi"])
        scope = Scope("t")
        ud: dict = {}

        def finish(sc, c, IA):
            # IA[c] is final once its subtree is: its U and Dinv, then its part of the parent's
            body = robot.bodies[c]
            art = ud[c] = articulated.articulate(sc, body, IA)
            if body.parent >= 0:
                Ia = art.reduced(sc)
                return art.to_parent(sc, steps.X(sc, body), Ia)

        sweeps.depth_first_sums(robot, scope, io, lambda b: ss.sym6_of(b.inertia), finish, "IA")
        scope.comment("U and S of every body in its tree's root frame")
        U, S = ss.in_root_frames(robot, io["xi"], scope, {b: ud[b].U for b in ud},
                                 {b: steps.S[b] for b in ud if not cols.leaf[b]}, ("UW", "SW"))
        out = Symmetric(cols.n, None if cols.mimic else io["Minv"].at)  # relaxed with mimic joints
        for j in range(cols.n):
            (bj, own), back, F = cols.rel.owner[j], {}, None
            scope.comment(f"column {j} ({robot.bodies[bj].joint.name}): up its path, then down its tree")
            for a in reversed(robot.topology.support[bj]):
                body = robot.bodies[a]
                back[a] = m = steps.backward(scope, body, ud[a].Dinv, F, own if a == bj else None, S.get(a))
                if body.parent >= 0:
                    F = steps.transfer(scope, U[a], m, F)
            P: dict = {}
            for b, body in enumerate(robot.bodies):
                i0, d0, _, tend = cols.rel.spans(b)
                if not i0 <= j < tend:
                    continue
                minv, Pb = steps.forward(scope, body, U[b], ud[b].Dinv, P.get(body.parent), back.get(b), S.get(b))
                for r in range(i0, min(d0, j + 1)):
                    out.put(scope, r, j, minv[r - i0])
                if j >= d0 and not cols.leaf[b]:
                    P[b] = scope.let_all(Pb, "P")
        if cols.mimic:
            Schur(cols.rel, out).straight_line(scope, io["Minv"])
        else:  # the entries between separate trees
            out.zeros(scope)
        return [layers.locals(), *scope.body()]


def _jacobians(kernels, x, params, wanted):
    """``dMinv = -Minv dM Minv``, ``dM/dq`` crba's Jacobian (its rule, by name)."""
    Minv, xp = kernels("minv", x["q"]), kernels.xp
    dM = xp.einsum("bijk->bkij", kernels.jacobian("crba", "q", {"q": x["q"]}))
    return {"q": -xp.einsum("bkic->bick", Minv[:, None] @ dM @ Minv[:, None])}


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
        P1=done("block layout: both passes by levels, one barrier per level: a backward step finalizes one "
                "level's bodies (one warp each: articulated inertia, U, Dinv and the X^T Ia X each passes to "
                "its parent, so siblings transform theirs in parallel and the parent only sums, in a fixed "
                "order, no atomics) while the level below runs its columns; then the forward pass's levels. "
                "p1='bodies' stays for the A/B (minv.tuning.json)"),
        P2=done("the columns are independent unit-force solves, one thread each (a body's subtree columns "
                "backward, its columns j >= i forward), a body's consecutive columns on consecutive threads; "
                "the mimic correction fans Z = K^-1 Y^T over own columns and the upper triangle over entries "
                "(one thread factors K). Not fanned: an articulated-inertia update, whose 21 entries' folded "
                "code differs and shares intermediates (X^T Ia X on six threads measured slower)"),
        P3=done("the transform data in one parallel pass over bodies (load_update_XImats) before the "
                "recursions; each body transforms its articulated inertia to its parent, beside its "
                "siblings, one step before the parent needs it"),
        P4=done("column ranges baked per body (own, subtree, rest of its tree, zeros between trees): "
                "subtree columns only backward, j >= i only forward, each entry written once with its "
                "mirror; F one 6-vector per column carried up in place (6 n_r scalars), P only for bodies "
                "with children over the columns their children read, component-major; a leaf's IA, U and "
                "Dinv folded, as every robot constant (a revolute joint's U one column of IA)"),
        notes="per-state: the articulated inertias depth-first in registers, then each column on its own, "
              "up its body's path and down its tree, so only one column's forces and accelerations are "
              "live. Mimic robots: the recursion on the relaxed tree, then the Schur complement of the "
              "constraints (grid_core.emit.dense: Cholesky of K). Measured figures: benchmarks/results",
    )
    emitter = MinvEmitter
    derivatives = Rule(("q",), ("minv", "inverse_dynamics_gradient"), _jacobians)
    """dM/dq through crba's rule, which calls ``inverse_dynamics_gradient``."""

    def inputs(self, robot: Robot):
        return (Port("q", (robot.nq,), "joint configuration"),)

    def outputs(self, robot: Robot, **options):
        return (Port("Minv", (robot.nv, robot.nv), "inverse joint-space inertia matrix (symmetric)"),)

    def reference(self, ctx, q):
        return minv(ctx.robot, q)

    def arenas(self, robot: Robot, options=None):
        f = Columns(robot).fields
        out = [*regions(f[x] for x in ("F", "P", "IA")),
               region("UD", [f["U"], f["Dinv"]], "U = IA S and Dinv = (S^T U)^-1 of each body with children")]
        if "Mr" in f:
            out += [*regions([f["Mr"]]), region("schur", [f["KL"], f["Z"]], "mimic correction: Cholesky factor "
                                                "of K = C Mr C^T, Z = K^-1 Y^T")]
        return tuple(out)

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("F region in global", {"F", "P"},
                             "the unit-force columns (F, and P: the forward pass's share of them) go to d_workspace"))


@hookimpl
def grid_register_algorithms():
    return [Minv]
