"""Forward dynamics by the articulated-body algorithm (ABA).

``qdd = aba(q, qd, tau, f_ext)``: the joint accelerations produced by the joint forces ``tau``
at state ``(q, qd)`` under gravity and the external forces ``f_ext`` (one spatial force per
body, in the body frame, ``[force; moment]`` as Pinocchio orders it), in O(n) without forming
the inertia matrix.

Mimic joints: the algorithm runs on the relaxed tree (every mimic joint free, no force on it)
and imposes the mimic constraints afterwards (see :mod:`grid_algorithms._mimic`).  The response
``Y = M_r^-1 C^T`` to one unit force per constraint reuses the articulated inertias: the backward
and forward passes carry those right-hand sides as extra columns, without velocity, gravity or
external force.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.arena import spill_ladder
from grid_core.derivatives import same_as
from grid_core.emit import articulated, sweeps
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, dot, matvec, sum_terms
from grid_core.emit.storage import Field, region
from grid_core.model import Body, Robot
from grid_core.model.joints import body_q, body_v, joint_transform, motion_subspace
from grid_core.model.spatial import crf, crm, gravity_accel
from grid_core.review import ParallelismReview, done, todo

from ._mimic import Constrained, relaxation


def aba(robot: Robot, q, qd, tau, f_ext=None, gravity=DEFAULT_GRAVITY) -> np.ndarray:
    """ABA (Featherstone, RBDA Table 7.1), column 0 the physical right-hand side."""
    NB = robot.num_bodies
    rel = relaxation(robot)
    K = 1 + len(rel.C)  # right-hand sides: the physical one, then one per mimic constraint
    tau_r = np.column_stack([rel.tau(tau), rel.C.T])
    Xup, S, v, c = [None] * NB, [None] * NB, [None] * NB, [None] * NB
    IA, pA, U, Dinv, u = [None] * NB, [None] * NB, [None] * NB, [None] * NB, [None] * NB
    for i, body in enumerate(robot.bodies):  # pass 1: velocities and velocity-product terms
        Xup[i] = joint_transform(body, body_q(body, q)) @ body.Xtree
        S[i] = motion_subspace(body)
        vJ = S[i] @ body_v(body, qd)  # relaxed velocity: a mimic body's own
        c[i] = np.zeros((6, K))
        if body.parent < 0:
            v[i] = vJ
        else:
            v[i] = Xup[i] @ v[body.parent] + vJ
            c[i][:, 0] = crm(v[i]) @ vJ
        IA[i] = body.inertia.copy()
        pA[i] = np.zeros((6, K))
        pA[i][:, 0] = crf(v[i]) @ body.inertia @ v[i]
        if f_ext is not None:
            fx = f_ext[i]
            pA[i][:, 0] -= np.concatenate([fx[3:], fx[:3]])  # [force; moment] -> [moment; force]
    for i in reversed(range(NB)):  # pass 2: articulated inertias and bias forces
        p = robot.bodies[i].parent
        ii = slice(rel.index[i], rel.index[i] + rel.width[i])
        U[i] = IA[i] @ S[i]
        Dinv[i] = np.linalg.inv(S[i].T @ U[i])
        u[i] = tau_r[ii] - S[i].T @ pA[i]
        if p >= 0:
            Ia = IA[i] - U[i] @ Dinv[i] @ U[i].T
            pa = pA[i] + Ia @ c[i] + U[i] @ Dinv[i] @ u[i]
            IA[p] = IA[p] + Xup[i].T @ Ia @ Xup[i]
            pA[p] = pA[p] + Xup[i].T @ pa
    a0 = np.zeros((6, K))
    a0[:, 0] = gravity_accel(gravity)
    a = [None] * NB
    qdd_r = np.zeros((rel.nv, K))
    for i, body in enumerate(robot.bodies):  # pass 3: accelerations
        ii = slice(rel.index[i], rel.index[i] + rel.width[i])
        a_p = a0 if body.parent < 0 else a[body.parent]
        a[i] = Xup[i] @ a_p + c[i]
        qdd_r[ii] = Dinv[i] @ (u[i] - U[i].T @ a[i])
        a[i] = a[i] + S[i] @ qdd_r[ii]
    return rel.constrain(qdd_r[:, 0], qdd_r[:, 1:])


# -- code generation -------------------------------------------------------------------
#
# One set of per-body steps serves both layouts: the block-cooperative one (passes 1 and 3
# forward sweeps, pass 2 a backward gather) and the per-state one (pass 2 depth-first), on typed
# fields keyed by the generation-time sparsity (_Sparsity).

HOT = ("v", "pA", "IA", "a")
"""Read and written across a sweep (children read v and a, every child adds into IA and pA)."""
COLD = ("c", "U", "Dinv", "u", "qr")
"""Written once, read once or twice later (c: passes 2 and 3; U, D^-1, u: pass 3; qr: the mimic
solve), never accumulated: the sub-band that spills first."""


class _Sparsity:
    """Generation-time structure of ABA on the relaxed tree (P4): which (body, right-hand side)
    pairs can be non-zero, and the fields of the arrays the steps store.

    Column 0 is the physical right-hand side; column ``j >= 1`` is mimic constraint ``j``'s unit
    force (``C^T``'s column: +1 on the mimic joint, -multiplier on the mimicked one; no velocity,
    gravity or external force).  Its ``u`` can be non-zero only on those two joints and their
    ancestors, its ``pA`` only on their strict ancestors; pass 3 then carries it into every
    subtree below (``qdd``, the support of its accelerations)."""

    def __init__(self, robot: Robot):
        topo = robot.topology
        nb = robot.num_bodies
        self.mimics = [b for b in robot.bodies if b.mimic is not None]  # C's rows, in order
        self.K = 1 + len(self.mimics)
        w = [len(ss.subspace_columns(b)) for b in robot.bodies]
        self.rhs = {}
        """``(body, column >= 1)`` -> the constant joint force of that column (non-zero only)."""
        for j, b in enumerate(self.mimics, start=1):
            self.rhs[(b.index, j)] = 1.0
            self.rhs[(b.mimic.body, j)] = -b.mimic.multiplier
        self.u = {(b, 0) for b in range(nb)} | {(a, j) for (x, j) in self.rhs for a in topo.support[x]}
        self.pA = {(b, 0) for b in range(nb)} | {(topo.parent[a], j) for a, j in self.u
                                                  if j and topo.parent[a] >= 0}
        self.qdd: set = set()
        for b in range(nb):
            p = topo.parent[b]
            self.qdd |= {(b, j) for j in range(self.K)
                         if j == 0 or (b, j) in self.u or (p >= 0 and (p, j) in self.qdd)}
        parents = [b for b in range(nb) if topo.children[b]]
        joint = lambda key: w[key[0]]  # noqa: E731 (an entry of one scalar per joint coordinate)
        # a leaf's U and D^-1 are robot constants; a column's u is one where its pA is zero
        fields = [Field("v", parents), Field("pA", sorted(self.pA)), Field("IA", parents, 21),
                  Field("a", sorted((b, j) for b, j in self.qdd if topo.children[b])),
                  Field("c", [b for b in range(nb) if topo.parent[b] >= 0]),
                  *articulated.fields(parents, w),
                  Field("u", sorted((b, j) for b, j in self.u if j == 0 or (b, j) in self.pA), joint),
                  *([Field("qr", sorted(self.qdd), joint)] if self.K > 1 else [])]
        self.fields = {f.name: f for f in fields}


class AbaSteps:
    """ABA's per-body steps on the relaxed tree, every robot constant folded in.

    ``arr`` maps ``q``, ``qd``, ``tau``, ``qdd`` and ``xi`` to C++ expressions (index ->
    expression) and the fields of :class:`_Sparsity` to their arrays (an entry known at generation
    time never stored, but folded where read); ``local``: the code is the per-state function's."""

    def __init__(self, robot: Robot, arr: dict, local: bool):
        self.robot, self.arr, self.local = robot, arr, local
        self.sp, self.rel = _Sparsity(robot), relaxation(robot)

    def ia(self, b: int) -> list:
        """Body ``b``'s articulated inertia: a leaf's is its own, a constant (never stored)."""
        if not self.robot.topology.children[b]:
            return ss.sym6_of(self.robot.bodies[b].inertia)
        return [self.arr["IA"](b, k) for k in range(21)]

    # -- the three passes ------------------------------------------------------------

    def pass1(self, scope: Scope, body: Body) -> None:
        """v and c of ``body`` (where read), and its bias force pA = v x* I v - f_ext."""
        b, arr = body.index, self.arr
        scope.comment(f"body {b} ({body.joint.name}): v, c, pA")
        vJ = scope.let_all(ss.joint_motion(body, arr["qd"]), "vJ")
        if body.parent < 0:
            v = vJ  # and c = vJ x vJ = 0
        else:
            X = ss.Transform(self.robot, body, arr["xi"], scope)
            Xv = X.motion(self.arr["v"].get(body.parent), scope)
            v = scope.let_all([sum_terms([(Xv[k],), (vJ[k],)]) for k in range(6)], "v")
            arr["c"].put(scope, b, scope.let_all(ss.cross_motion(v, vJ), "c"))
        if self.robot.topology.children[b]:
            arr["v"].put(scope, b, v)
        Iv = scope.let_all(ss.inertia_times(np.asarray(body.inertia), v), "Iv")
        arr["pA"].accumulate(scope, (b, 0), [ss.cross_force(v, Iv)])
        ss.minus_f_ext(scope, [arr["pA"]((b, 0), k) for k in range(6)], b, self.local)

    def _rhs(self, body: Body, j: int, r: int):
        """Column ``j``'s joint force on the body's ``r``-th relaxed coordinate."""
        if j == 0:
            return 0.0 if body.mimic is not None else self.arr["tau"](body.v_index + r)
        return self.sp.rhs.get((body.index, j), 0.0)

    def articulate(self, scope: Scope, b: int, to_parent: bool = True):
        """U = IA S, D^-1 = (S^T U)^-1 and u = tau - S^T pA of body ``b`` (stored for pass 3);
        with ``to_parent``, returns what it passes on: the articulation, Ia = IA - U D^-1 U^T and,
        per column, pa = pA + Ia c + U D^-1 u."""
        body, sp = self.robot.bodies[b], self.sp
        scope.comment(f"articulate body {b} ({body.joint.name}): U, D^-1, u" + (", Ia, pa" if to_parent else ""))
        art = articulated.articulate(scope, body, self.ia(b))
        S, U, Dinv, w = art.S, art.U, art.Dinv, len(art.S)
        articulated.store(scope, self.arr, b, art)
        u = {}
        for j in range(sp.K):
            if (b, j) in sp.u:
                pA = self.arr["pA"].get((b, j))
                u[j] = scope.let_all([sum_terms([(self._rhs(body, j, r),), (-1.0, dot(S[r], pA))])
                                      for r in range(w)], "u")
                self.arr["u"].put(scope, (b, j), u[j])
        if not to_parent:
            return None
        Ia = art.reduced(scope)
        Iac = ss.sym6_times(Ia, self.arr["c"].get(b))
        pa = {}
        for j, uj in u.items():
            Du = scope.let_all(matvec(Dinv, uj), "Du")
            pA = self.arr["pA"].get((b, j))
            pa[j] = scope.let_all(ss.combine([pA, *U, Iac], [1.0, *Du, 1.0 if j == 0 else 0.0]), "pa")
        return art, Ia, pa

    def gather(self, scope: Scope, parent: int, children) -> None:
        """Articulate each child, then ``IA[parent] += X^T Ia X`` and ``pA[parent] += X^T pa``."""
        IAs: list = []
        pAs: dict[int, list] = {}
        for c in children:
            body = self.robot.bodies[c]
            art, Ia, pa = self.articulate(scope, c)
            scope.comment(f"IA[{parent}] += X^T Ia X, pA[{parent}] += X^T pa ({body.joint.name})")
            X = ss.Transform(self.robot, body, self.arr["xi"], scope)
            IAs.append(art.to_parent(scope, X, Ia))
            for j, f in pa.items():
                pAs.setdefault(j, []).append(scope.let_all(X.force_T(f, scope), "f"))
        self.arr["IA"].accumulate(scope, parent, IAs, ss.sym6_of(self.robot.bodies[parent].inertia))
        for j, parts in sorted(pAs.items()):
            self.arr["pA"].accumulate(scope, (parent, j), parts)  # column 0: pass 1 assigned it

    def pass3(self, scope: Scope, body: Body) -> None:
        """a' = X a_parent + c, qdd = D^-1 (u - U^T a'), a = a' + S qdd, per column."""
        b, p, sp = body.index, body.parent, self.sp
        S = ss.subspace_columns(body)
        w = len(S)
        scope.comment(f"body {b} ({body.joint.name}): a, qdd")
        X = ss.Transform(self.robot, body, self.arr["xi"], scope)
        U, Dinv = articulated.stored(self.arr, body)
        for j in range(sp.K):
            if (b, j) not in sp.qdd:
                continue
            if p < 0:  # a0 = [0; -g] for the physical column: X a0 = [0; E a0]
                ap = [0.0, 0.0, 0.0] + X.rotate(ss.A0, scope) if j == 0 else [0.0] * 6
            else:
                ap = X.motion(self.arr["a"].get((p, j)), scope)
                if j == 0:
                    c = self.arr["c"].get(b)
                    ap = [sum_terms([(ap[k],), (c[k],)]) for k in range(6)]
            ap = scope.let_all(ap, "a")
            uj = self.arr["u"].get((b, j))
            t = scope.let_all([sum_terms([(uj[r],), (-1.0, dot(U[r], ap))]) for r in range(w)], "ut")
            qdd = scope.let_all(matvec(Dinv, t), "qdd")
            if self.robot.topology.children[b]:
                self.arr["a"].put(scope, (b, j), scope.let_all(ss.combine([ap, *S], [1.0, *qdd]), "a"))
            if sp.K > 1:
                self.arr["qr"].put(scope, (b, j), qdd)
            else:  # no mimic joint: the relaxed tree is the robot
                for r in range(w):
                    scope.assign(self.arr["qdd"](body.v_index + r), qdd[r])


class AbaEmitter(Emitter):
    Options = sweeps.SweepOptions
    global_inputs = ("f_ext",)  # read in place: one spatial force per body, used once
    nullable_inputs = ("f_ext",)
    staged = True

    def block_threads_hint(self, robot: Robot) -> int:
        # one warp per body of the widest level (P1), one thread per dof for the mimic solve
        return max(32 * robot.topology.max_level_width, robot.num_bodies, robot.nv)

    def fields(self, layers) -> tuple:
        """ABA's arrays, the hot band's then the cold's (qr only on a robot with mimic joints)."""
        f = _Sparsity(layers.robot).fields
        return tuple(f[x] for x in HOT + COLD if x in f)

    def steps(self, layers, arrays, io, *, local):
        """ABA's steps (:class:`AbaSteps`) on its ``arrays`` and the port vectors ``io``."""
        return AbaSteps(layers.robot, {**io, **arrays}, local)

    def inner_body(self, layers) -> list:
        robot = layers.robot
        steps = layers.own_steps()
        form = sweeps.form_of(layers.ctx)
        roots = [(b.index,) for b in robot.bodies if b.parent < 0]
        return [
            *ss.gravity_statements(),
            n.Comment("pass 1, root to leaves: v, c and the bias forces pA (P1 by levels: the bodies of a level\n"
                      "in parallel, on different warps, whose code differs: in one warp it would serialise)"),
            *sweeps.forward(robot, steps.pass1, form),
            n.Comment("pass 2, leaves to root: each parent articulates its children (U, D^-1, u, then Ia, pa) and\n"
                      "gathers X^T Ia X and X^T pa (no atomics, a fixed order)"),
            *sweeps.backward_gather(robot, steps.gather, form),
            n.Comment("the roots' U, D^-1 and u (nothing to pass on)"),
            *sweeps.fan_out(roots, lambda sc, b: steps.articulate(sc, b, to_parent=False), per_warp=True),
            n.Sync(),
            n.Comment("pass 3, root to leaves: a and qdd" + (" (relaxed, one column per right-hand side)"
                                                            if steps.sp.K > 1 else "")),
            *sweeps.forward(robot, steps.pass3, form),
            *(Constrained(steps.rel, steps.arr["qr"], steps.arr["qdd"]).block() if steps.sp.K > 1 else []),
        ]

    def state_body(self, layers) -> list:
        robot = layers.robot
        steps = layers.own_steps(local=True)
        arr = steps.arr
        scope = Scope("t")

        def complete(sc, c):
            # a finished subtree: articulate it into its parent (only the root path's IA and pA
            # stay live in registers)
            p = robot.bodies[c].parent
            steps.gather(sc, p, [c]) if p >= 0 else steps.articulate(sc, c, to_parent=False)

        sweeps.depth_first(robot, scope, arr, steps.pass1, complete)
        for b in robot.bodies:
            steps.pass3(scope, b)
        if steps.sp.K > 1:
            Constrained(steps.rel, arr["qr"], arr["qdd"]).straight_line(scope)
        return [*ss.gravity_statements(), layers.locals([arr[f.name] for f in self.fields(layers)]), *scope.body()]


class ABA(Algorithm):
    name = "aba"
    inverts_mass_matrix = True
    summary = "joint accelerations qdd = FD(q, qd, tau, f_ext) by the articulated-body algorithm"
    math = r"""
Pass 1, root to leaves: :math:`v_i = X_i v_{\lambda(i)} + S_i \dot q_i`,
:math:`c_i = v_i \times S_i \dot q_i`, :math:`I^A_i = I_i`,
:math:`p^A_i = v_i \times^* I_i v_i - f^{ext}_i`.

Pass 2, leaves to root:

.. math::

   U_i = I^A_i S_i, \quad D_i = S_i^T U_i, \quad u_i = \tau_i - S_i^T p^A_i,

   I^a_i = I^A_i - U_i D_i^{-1} U_i^T, \quad p^a_i = p^A_i + I^a_i c_i + U_i D_i^{-1} u_i,

   I^A_{\lambda(i)} \mathrel{+}= X_i^T I^a_i X_i, \quad p^A_{\lambda(i)} \mathrel{+}= X_i^T p^a_i .

Pass 3, root to leaves, with :math:`a_0 = -a_g`:
:math:`a'_i = X_i a_{\lambda(i)} + c_i`, :math:`\ddot q_i = D_i^{-1}(u_i - U_i^T a'_i)`,
:math:`a_i = a'_i + S_i \ddot q_i`.

Mimic joints: :math:`\ddot q = L(\ddot q_r - Y K^{-1} C \ddot q_r)` on the relaxed tree, with
:math:`Y = M_r^{-1} C^T` from passes 2-3 on the columns of :math:`C^T` and :math:`K = C Y`.
"""
    review = ParallelismReview(
        P1=done("block layout: passes 1 and 3 level by level, a level's bodies in parallel (one warp each, "
                "one barrier per level); pass 2 a backward gather by levels, each parent articulating its "
                "children (U, D^-1, u, Ia, pa) and summing their X^T Ia X and X^T pa in a fixed order (no "
                "atomics). p1='bodies' stays for the A/B (a level form can lose on narrow levels; not yet timed)"),
        P2=todo("done for the outputs: on mimic robots qdd = L (a_r - Y z) fans out over velocity indices "
                "(each thread repeats the small constraint solve instead of a barrier). Left: the constraint "
                "right-hand sides are independent columns of passes 2-3, run by one lane of the body's warp; "
                "spread them over its other lanes (the articulated inertias they share computed once)"),
        P3=done("the transform data in one parallel pass over bodies (load_update_XImats); U, D^-1 and u "
                "computed once, in pass 2, and stored for pass 3 (the cold band)"),
        P4=done("robot constants folded (a revolute joint's U one column of IA, D^-1 one reciprocal; a "
                "leaf's IA, U and D^-1 constants, never stored; Ia's row and column along an axis-aligned "
                "joint exact zeros); articulated inertias in 21 scalars; every array stored only where it "
                "can be non-zero, a mimic constraint's column only where it reaches"),
        notes="the block layout is also the inner forward_dynamics composes where it measured faster than "
              "Minv; the per-state one runs pass 2 depth-first, so only the root path's IA and pA stay live. "
              "Mimic joints: the relaxed tree with one right-hand-side column per constraint, then "
              "qdd = L (a_r - Y K^-1 C a_r) by a Cholesky of K (grid_core.emit.dense)",
    )
    emitter = AbaEmitter
    # ABA computes forward dynamics: its first and second derivatives are that rule's, by name
    derivatives = same_as("forward_dynamics", ("q", "qd", "tau", "f_ext"),
                          ("forward_dynamics_gradient", "minv", "inverse_dynamics"),
                          second=(("q", "qd", "tau"), ("fdsva_so",)))

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "tau")

    def outputs(self, robot: Robot, **options):
        return (Port("qdd", (robot.nv,), "joint accelerations"),)

    def reference(self, ctx, q, qd, tau, f_ext=None, gravity=DEFAULT_GRAVITY):
        return aba(ctx.robot, q, qd, tau, f_ext, gravity)

    def arenas(self, robot: Robot, options=None):
        f = _Sparsity(robot).fields
        return (
            region("sweep", [f[x] for x in HOT], "the sweep state: v (pass 1), pA and IA (pass 2, every child "
                   "adds into its parent's), a (pass 3); stored where non-zero"),
            region("cold", [f[x] for x in COLD if x in f], "written once, read once or twice later: c (passes 2, "
                   "3), U, D^-1, u (pass 3)" + (", the relaxed qdd (the mimic solve)" if "qr" in f else "")),
        )

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("cold sub-band in global", {"cold"},
                             "c, U, D^-1 and u go to d_workspace: each is written once, read in pass 3 (c also "
                             "once in pass 2) and never accumulated, so a spilled access is paid once, while the "
                             "hot sweep state (v, pA, IA, a), re-read by every child, stays in shared memory"))


@hookimpl
def grid_register_algorithms():
    return [ABA]
