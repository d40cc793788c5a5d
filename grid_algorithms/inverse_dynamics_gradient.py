"""Analytical first derivatives of inverse dynamics (RNEA), ``d tau / d q`` and ``d tau / d qd``.

The reference is the spatial-algebra derivative of the RNEA in body frames (Carpentier
& Mansard 2018, in the form of Singh, Russell & Wensing 2022): the RNEA's forward and
backward sweeps, each carrying besides ``v``, ``a``, ``f`` their ``6 x nv``
derivatives; the generated code takes the world-frame form of the same derivatives
(see "code generation" below), checked against this reference.  The only ``q``-dependence is through the joint
transforms, ``d Xup_i / d q_i = -crm(S_i) Xup_i``, which is what a tangent
perturbation of the joint gives: for a free-flyer, ``q (+) dq`` moves the base
by ``dq`` expressed in the base frame (``pinocchio.integrate``: position
increment in the base frame, rotation ``R exp(dw)``), exactly Pinocchio's
``computeRNEADerivatives`` convention.  A mimic body's subspace carries its
multiplier and its derivatives go to the mimicked joint's column.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import ROTATION_TOL, Scope, clean, matTvec, matvec, sum_terms
from grid_core.emit.storage import Field, region
from grid_core.model import Body, Robot
from grid_core.model.joints import body_q, effective_subspace, joint_transform
from grid_core.model.spatial import crf, crm, gravity_accel, icrf
from grid_core.review import ParallelismReview, done



def rnea_derivatives(robot: Robot, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
    """``(dtau_dq, dtau_dqd)`` by the differentiated RNEA sweeps."""
    NB, nv = robot.num_bodies, robot.nv
    Xup, S, col = [None] * NB, [None] * NB, [None] * NB
    v, a, f = [None] * NB, [None] * NB, [None] * NB
    dv_dq, dv_dqd, da_dq, da_dqd, df_dq, df_dqd = ([None] * NB for _ in range(6))
    a0 = gravity_accel(gravity)
    zero = np.zeros((6, nv))
    for i, body in enumerate(robot.bodies):  # forward sweep
        Xup[i] = joint_transform(body, body_q(body, q)) @ body.Xtree
        S[i] = effective_subspace(body)  # mimic: multiplier applied, mimicked joint's columns
        col[i] = slice(body.v_index, body.v_index + S[i].shape[1])
        vJ = S[i] @ qd[col[i]]
        p = body.parent
        if p < 0:
            v_p, a_p = np.zeros(6), a0
            dvp_dq = dvp_dqd = dap_dq = dap_dqd = zero
        else:
            v_p, a_p = v[p], a[p]
            dvp_dq, dvp_dqd, dap_dq, dap_dqd = dv_dq[p], dv_dqd[p], da_dq[p], da_dqd[p]
        v[i] = Xup[i] @ v_p + vJ
        a[i] = Xup[i] @ a_p + S[i] @ qdd[col[i]] + crm(v[i]) @ vJ
        dv_dq[i] = Xup[i] @ dvp_dq
        dv_dq[i][:, col[i]] += crm(Xup[i] @ v_p) @ S[i]
        dv_dqd[i] = Xup[i] @ dvp_dqd
        dv_dqd[i][:, col[i]] += S[i]
        da_dq[i] = Xup[i] @ dap_dq - crm(vJ) @ dv_dq[i]
        da_dq[i][:, col[i]] += crm(Xup[i] @ a_p) @ S[i]
        da_dqd[i] = Xup[i] @ dap_dqd - crm(vJ) @ dv_dqd[i]
        da_dqd[i][:, col[i]] += crm(v[i]) @ S[i]
        I = body.inertia
        h = I @ v[i]
        f[i] = I @ a[i] + crf(v[i]) @ h
        if f_ext is not None:
            fx = f_ext[i]
            f[i] = f[i] - np.concatenate([fx[3:], fx[:3]])  # [force; moment] -> [moment; force]
        dfv = crf(v[i]) @ I + icrf(h)  # d(v x* I v) / dv
        df_dq[i] = I @ da_dq[i] + dfv @ dv_dq[i]
        df_dqd[i] = I @ da_dqd[i] + dfv @ dv_dqd[i]
    dtau_dq, dtau_dqd = np.zeros((nv, nv)), np.zeros((nv, nv))
    for i in reversed(range(NB)):  # backward sweep; f[i], df[i] hold the whole subtree's here
        dtau_dq[col[i]] += S[i].T @ df_dq[i]
        dtau_dqd[col[i]] += S[i].T @ df_dqd[i]
        p = robot.bodies[i].parent
        if p >= 0:
            f[p] = f[p] + Xup[i].T @ f[i]
            df_dq[p] = df_dq[p] + Xup[i].T @ df_dq[i]
            df_dq[p][:, col[i]] += Xup[i].T @ icrf(f[i]) @ S[i]  # d(Xup^T f) / dq_i
            df_dqd[p] = df_dqd[p] + Xup[i].T @ df_dqd[i]
    return dtau_dq, dtau_dqd


# -- code generation -------------------------------------------------------------------
#
# The world-frame form of the derivatives (Carpentier & Mansard 2018, the form Pinocchio's
# computeRNEADerivatives takes), on RNEA's own v, a and f: inverse dynamics' forward and
# backward sweeps run by handle (its steps, on its own region), then each body's quantities in
# the world frame, where a joint's motion moves its whole subtree rigidly, so a column touches
# no body-to-body transform.  With J the joint's world subspace, ov, oa (gravity included) the
# world velocity and acceleration, Y, B the world inertia and its Coriolis matrix
# B = ov x* Y - Y ov x + (Y ov) x*, and Yc, Bc, F their sums over a subtree (composites):
#
#   dVdq = ov_parent x J,  dAdq = oa_parent x J + ov_parent x dVdq,  dAdv = dVdq + ov x J,
#   d tau_r / d q_c  = J_r . (Bc_c dVdq_c + Yc_c dAdq_c [+ J_c x* F_c if r is an ancestor of c])
#                    = (Bc_r^T J_r) . dVdq_c + (Yc_r J_r) . dAdq_c      if r is a descendant of c,
#   d tau_r / d qd_c = J_r . (Bc_c J_c + Yc_c dAdv_c),  or (Bc_r^T J_r) . J_c + (Yc_r J_r) . dAdv_c,
#
# zero where r and c are on separate branches.  Per body O(1) work, per related pair of dofs two
# dot products of 6: no serial chain per column (P2 over the output cells).


def fields(robot: Robot) -> tuple[Field, ...]:
    """The world-frame arrays: per body its frame (E: world -> body, r: its origin in the world),
    velocity, acceleration, composite inertia (10 parameters), composite Coriolis matrix (by
    columns) and force; per dof (body, column) its J, dVdq, dAdq, dAdv, the column vectors G
    (Gq' = Bc dVdq + Yc dAdq, Gq = Gq' + J x* F, Gv = Bc J + Yc dAdv) and the row vectors
    (u = Bc^T J, w = Yc J)."""
    nb = range(robot.num_bodies)
    dofs = [(b.index, k) for b in robot.bodies for k in range(effective_subspace(b).shape[1])]
    return (Field("wE", nb, 9), Field("wr", nb, 3), Field("ov", nb, 6), Field("oa", nb, 6),
            Field("Yc", nb, 10), Field("Bc", nb, 36), Field("F", nb, 6),
            Field("J", dofs, 6), Field("dVdq", dofs, 6), Field("dAdq", dofs, 6), Field("dAdv", dofs, 6),
            Field("G", dofs, 18), Field("uw", dofs, 12))


def _add(*vs) -> list:
    return [sum_terms([(x,) for x in xs]) for xs in zip(*vs)]


def _dot(a, b):
    return sum_terms(zip(a, b))


class WorldSteps:
    """The derivative's steps on ``rnea`` (inverse dynamics' steps by handle, after its sweeps:
    v at every body, f summed over each subtree) and the world-frame arrays ``w``."""

    def __init__(self, robot: Robot, rnea, w: dict):
        self.robot, self.rnea, self.w = robot, rnea, w
        self.dofs: dict[int, list] = {}
        """Body -> its dofs ``(k, v index, S column)`` (a mimic's multiplier applied: its mimicked
        joint's column)."""
        for b in robot.bodies:
            S = effective_subspace(b)
            self.dofs[b.index] = [(k, b.v_index + k, [clean(x, ROTATION_TOL) for x in S[:, k]])
                                  for k in range(S.shape[1])]

    def _frame(self, b: int):
        w = self.w
        E = w["wE"].get(b)
        return [E[3 * r:3 * r + 3] for r in range(3)], w["wr"].get(b)

    def forward(self, scope: Scope, body: Body) -> None:
        """The body's world frame, J, ov, oa, dVdq, dAdq, dAdv, its Y and B (the composites'
        start) and its subtree force F in the world frame."""
        robot, rnea, w, b, p = self.robot, self.rnea, self.w, body.index, body.parent
        scope.comment(f"body {b} ({body.joint.name}): world frame, J, ov, oa, Y, B, F")
        E, r = ss.root_frame(robot, body, self._frame(p) if p >= 0 else None, rnea.arr["xi"], scope, world=True)
        if robot.topology.children[b]:
            w["wE"].put(scope, b, [x for row in E for x in row])
            w["wr"].put(scope, b, r)
        ov = scope.let_all(ss.motion_to_root(E, r, rnea.arr["v"].get(b), scope), "ov")
        ovp = w["ov"].get(p) if p >= 0 else [0.0] * 6
        oap = w["oa"].get(p) if p >= 0 else [0.0] * 3 + rnea.a0
        w["ov"].put(scope, b, ov)
        if robot.topology.children[b]:  # RNEA's a (gravity included), in the world frame
            w["oa"].put(scope, b, ss.motion_to_root(E, r, rnea.arr["a"].get(b), scope))
        for k, _, s in self.dofs[b]:
            J = scope.let_all(ss.motion_to_root(E, r, s, scope), "J")
            dVdq = scope.let_all(ss.cross_motion(ovp, J), "dV")
            w["J"].put(scope, (b, k), J)
            w["dVdq"].put(scope, (b, k), dVdq)
            w["dAdq"].put(scope, (b, k), _add(ss.cross_motion(oap, J), ss.cross_motion(ovp, dVdq)))
            w["dAdv"].put(scope, (b, k), _add(dVdq, ss.cross_motion(ov, J)))
        Y = scope.let_all(ss.rbi_transform(ss.rbi_of(body.inertia), lambda x: matTvec(E, x), r, scope), "Y")
        h = scope.let_all(ss.rbi_times_motion(Y, ov), "h")
        Yf = ss.sym6_full(ss.sym6_from_rbi(Y))
        for c in range(6):  # B e_c = ov x* (Y e_c) - Y (ov x e_c) + e_c x* h
            e = [1.0 if i == c else 0.0 for i in range(6)]
            Ye = [Yf[i][c] for i in range(6)]
            col = _add(ss.cross_force(ov, Ye), [sum_terms([(-1.0, x)]) for x in matvec(Yf, ss.cross_motion(ov, e))],
                       ss.cross_force(e, h))
            for i, x in enumerate(col):
                scope.assign(w["Bc"](b, 6 * c + i), x)
        for k, x in enumerate(Y):  # every entry stored: the composites accumulate into them
            scope.assign(w["Yc"](b, k), x)
        w["F"].put(scope, b, ss.xt_force(E, r, rnea.arr["f"].get(b), scope))

    def gather(self, scope: Scope, parent: int, children) -> None:
        """``Yc[parent] += Yc[c]``, ``Bc[parent] += Bc[c]`` for each child."""
        w = self.w
        for name, width in (("Yc", 10), ("Bc", 36)):
            for k in range(width):
                scope.add_to(w[name](parent, k), sum_terms([(w[name](c, k),) for c in children]))

    def dof(self, scope: Scope, b: int, k: int) -> None:
        """A dof's column vectors G and row vectors u, w (on its body's composites)."""
        w = self.w
        J, dVdq, dAdq, dAdv = (w[x].get((b, k)) for x in ("J", "dVdq", "dAdq", "dAdv"))
        Bc = [w["Bc"](b, i) for i in range(36)]
        Yc = [w["Yc"](b, i) for i in range(10)]

        def B_times(x):
            return [sum_terms([(Bc[6 * c + i], x[c]) for c in range(6)]) for i in range(6)]

        Gq1 = scope.let_all(_add(B_times(dVdq), ss.rbi_times_motion(Yc, dAdq)), "G")
        Gq = _add(Gq1, ss.cross_force(J, w["F"].get(b)))
        Gv = _add(B_times(J), ss.rbi_times_motion(Yc, dAdv))
        u = [_dot(Bc[6 * c:6 * c + 6], J) for c in range(6)]  # Bc^T J
        w["G"].put(scope, (b, k), [*Gq1, *Gq, *Gv])
        w["uw"].put(scope, (b, k), [*u, *ss.rbi_times_motion(Yc, J)])

    def dof_items(self) -> list[tuple[int, int]]:
        return [(b, k) for b in range(self.robot.num_bodies) for k, _, _ in self.dofs[b]]

    def cells(self) -> dict[tuple[int, int], list]:
        """Output cell ``(row, column)`` (v indices) -> its terms ``(wrt, kind, row dof, column dof)``,
        ``kind``: ``anc`` (the row's body an ancestor of the column's), ``own``, ``desc``."""
        topo = self.robot.topology
        out: dict[tuple[int, int], list] = {}
        for c in range(self.robot.num_bodies):
            for r in set(topo.support[c]) | set(topo.subtree[c]):
                kind = "own" if r == c else ("anc" if r in topo.support[c] else "desc")
                for kr, vr, _ in self.dofs[r]:
                    for kc, vc, _ in self.dofs[c]:
                        out.setdefault((vr, vc), []).append((kind, (r, kr), (c, kc)))
        return out

    def cell(self, scope: Scope, row: int, col: int, terms, out: dict) -> None:
        """d tau[row] / d q[col] and d qd[col], summed over the dof pairs of ``terms``."""
        w = self.w
        dq, dqd = [], []
        for kind, rd, cd in terms:
            if kind == "desc":
                u, wv = w["uw"].get(rd)[:6], w["uw"].get(rd)[6:]
                dq += [(_dot(u, w["dVdq"].get(cd)),), (_dot(wv, w["dAdq"].get(cd)),)]
                dqd += [(_dot(u, w["J"].get(cd)),), (_dot(wv, w["dAdv"].get(cd)),)]
            else:
                G, J = w["G"].get(cd), w["J"].get(rd)
                dq.append((_dot(J, G[0:6] if kind == "own" else G[6:12]),))
                dqd.append((_dot(J, G[12:18]),))
        scope.assign(out["q"](row, col), sum_terms(dq))
        scope.assign(out["qd"](row, col), sum_terms(dqd))


def _outputs(layers, local: bool) -> dict:
    nv, io = layers.robot.nv, layers.vectors(local)
    return {"q": lambda r, c: io["dtau_dq"](r * nv + c), "qd": lambda r, c: io["dtau_dqd"](r * nv + c)}


class InverseDynamicsGradientEmitter(Emitter):
    Options = sweeps.SweepOptions
    global_inputs = ("f_ext",)  # read in place by RNEA's forward step
    nullable_inputs = ("f_ext",)
    composes = ("inverse_dynamics",)

    def block_threads_hint(self, robot: Robot) -> int:
        return robot.nv * robot.nv  # the output cells, one thread each (P2)

    sweep_doc = "Sweep form (RNEA's and the world frame's)"

    def fields(self, layers) -> tuple:
        return fields(layers.robot)

    def structure(self, layers) -> list[tuple[int, int]]:
        """The output cells ``(row, column)`` that are not structural zeros (the same for both
        derivatives): what an algorithm composing this one may skip the rest of (P4)."""
        return sorted(WorldSteps(layers.robot, None, {}).cells())

    def steps(self, layers, arrays, io, *, local, rnea=None):
        """The world-frame steps on ``rnea`` (the caller's handle on inverse dynamics' steps, which
        must store v at every body) and on this algorithm's arrays, bound where the caller's code
        finds them: what second-order derivatives run their world-frame pass through."""
        return WorldSteps(layers.robot, rnea, arrays)

    def _steps(self, layers, local: bool) -> WorldSteps:
        rnea = layers.steps("inverse_dynamics", local=local, every_body=("v",))
        return self.steps(layers, layers.arrays(fields(layers.robot), local), None, local=local, rnea=rnea)

    def inner_body(self, layers) -> list:
        robot = layers.robot
        steps = self._steps(layers, False)
        rnea, form = steps.rnea, sweeps.form_of(layers.ctx)
        cells = steps.cells()
        out = _outputs(layers, False)
        zero = [(r, c) for r in range(robot.nv) for c in range(robot.nv) if (r, c) not in cells]
        return [
            *ss.gravity_statements(),
            n.Comment("RNEA's forward sweep (inverse dynamics' step, by handle): v of every body, a, f"),
            *sweeps.forward(robot, rnea.forward, form),
            n.Comment("RNEA's backward sweep: f of every body summed over its subtree"),
            *sweeps.backward_gather(robot, rnea.backward, form),
            n.Comment("the world frame, root to leaves: J, ov, oa and each dof's dVdq, dAdq, dAdv; Y, B and F"),
            *sweeps.forward(robot, steps.forward, form),
            n.Comment("the composites Yc and Bc, leaves to root: each parent gathers its children"),
            *sweeps.backward_gather(robot, steps.gather, form),
            n.Comment("each dof's column vectors G and row vectors u, w, one warp each"),
            *sweeps.fan_out(steps.dof_items(), steps.dof, per_warp=True),
            n.Sync(),
            n.Comment(f"the {len(cells)} related output cells of each derivative (a thread each: P2) and the "
                      f"{len(zero)} structural zeros"),
            *sweeps.fan_out([(r, c, t) for (r, c), t in sorted(cells.items())],
                            lambda sc, r, c, t: steps.cell(sc, r, c, t, out)),
            *sweeps.fan_out([(r, c) for r, c in zero],
                            lambda sc, r, c: [sc.assign(out[x](r, c), 0.0) for x in ("q", "qd")]),
        ]

    def state_body(self, layers) -> list:
        robot = layers.robot
        steps = self._steps(layers, True)
        rnea = steps.rnea
        arr = rnea.arr
        out = _outputs(layers, True)
        scope = Scope("t")

        def complete(sc, c):
            if robot.bodies[c].parent >= 0:
                rnea.backward(sc, robot.bodies[c].parent, [c])

        sweeps.depth_first(robot, scope, arr, rnea.forward, complete)
        for b in robot.bodies:
            steps.forward(scope, b)
        for b in reversed(robot.bodies):
            if robot.topology.children[b.index]:
                steps.gather(scope, b.index, robot.topology.children[b.index])
        for b, k in steps.dof_items():
            steps.dof(scope, b, k)
        cells = steps.cells()
        for r in range(robot.nv):
            for c in range(robot.nv):
                if (r, c) in cells:
                    steps.cell(scope, r, c, cells[(r, c)], out)
                else:
                    for x in ("q", "qd"):
                        scope.assign(out[x](r, c), 0.0)
        return [*ss.gravity_statements(),
                layers.locals([*(arr[x] for x in ("v", "a", "f")), *steps.w.values()],
                              "registers (or the stack): every index is a constant"),
                *scope.body()]


class InverseDynamicsGradient(Algorithm):
    name = "inverse_dynamics_gradient"
    summary = "(dtau_dq, dtau_dqd) of inverse dynamics, by the differentiated RNEA (tangent-space q)"
    math = r"""
With :math:`\partial X_i / \partial q_i = -(S_i \times) X_i` (tangent perturbation), the
forward sweep carries, for :math:`u \in \{q, \dot q\}`,

.. math::

   \partial_u v_i = X_i \partial_u v_{\lambda(i)} + [u = q_i]\,(X_i v_{\lambda(i)}) \times S_i
                    + [u = \dot q_i]\, S_i,

   \partial_u a_i = X_i \partial_u a_{\lambda(i)} - (S_i \dot q_i) \times \partial_u v_i
                    + [u = q_i]\,(X_i a_{\lambda(i)}) \times S_i + [u = \dot q_i]\, v_i \times S_i,

   \partial_u f_i = I_i \partial_u a_i + (v_i \times^* I_i + \overline{I_i v_i}) \partial_u v_i,

with :math:`\bar h\, x = x \times^* h`; the backward sweep
:math:`\partial_u f_{\lambda(i)} \mathrel{+}= X_i^T \partial_u f_i + [u = q_i]\, X_i^T \bar f_i S_i`,
:math:`\partial_u \tau_i = S_i^T \partial_u f_i`.
"""
    depends_on = ("inverse_dynamics",)
    emitter = InverseDynamicsGradientEmitter
    review = ParallelismReview(
        P1=done("block layout: RNEA's sweeps (inverse_dynamics' steps, by handle) and the world frame's "
                "forward pass and composite gather run level by level, the bodies of a level in parallel, "
                "one barrier per level"),
        P2=done("once the composites are known the derivatives have no serial chain: each dof's column and "
                "row vectors (G, u, w) one warp each, then every related output cell of both derivatives "
                "one thread each (two dot products of 6 per dof pair), no barrier between the cells"),
        P3=done("the per-pair work is hoisted into per-dof vectors: Bc dVdq + Yc dAdq (and the qd twin) for a "
                "column, Bc^T J and Yc J for a row, computed once each, so a pair costs two dot products; "
                "the configuration data is one XImats pass (load_update_XImats)"),
        P4=done("structural zeros (dofs on separate branches) are stored, never computed (the cell table is "
                "baked at generation time and handed to forward_dynamics_gradient, which skips them too); "
                "robot constants folded into the code; a revolute joint's world J is one column of its frame"),
    )

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "qdd")

    def outputs(self, robot: Robot, **options):
        return (
            Port("dtau_dq", (robot.nv, robot.nv), "d tau / d q (tangent space: columns are v coordinates)"),
            Port("dtau_dqd", (robot.nv, robot.nv), "d tau / d qd"),
        )

    def reference(self, ctx, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
        return rnea_derivatives(ctx.robot, q, qd, qdd, f_ext, gravity)

    def arenas(self, robot: Robot, options=None):
        return (region("world", fields(robot), "the world-frame quantities: frames, J, ov, oa, the composites "
                       "Yc, Bc, F, each dof's dVdq, dAdq, dAdv and its vectors G, u, w"),)

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("RNEA's sweep state in global", {callee_rung("inverse_dynamics", 1)},
                             "what inverse dynamics' rung 1 spills: the v/a/f band (read once by the world frame's "
                             "pass)"),
                            ("the world-frame band too", {callee_rung("inverse_dynamics", 1), "world"},
                             "the world-frame quantities go to d_workspace as well"))


@hookimpl
def grid_register_algorithms():
    return [InverseDynamicsGradient]
