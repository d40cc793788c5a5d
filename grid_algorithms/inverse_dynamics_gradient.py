"""Analytical first derivatives of inverse dynamics (RNEA), ``d tau / d q`` and ``d tau / d qd``.

The spatial-algebra derivative of the RNEA (Carpentier & Mansard 2018, in the
body-frame form of Singh, Russell & Wensing 2022 that GRiD emits): the RNEA's
forward and backward sweeps, each carrying besides ``v``, ``a``, ``f`` their
``6 x nv`` derivatives.  The only ``q``-dependence is through the joint
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
from grid_core.arena import ALL_SCRATCH, SpillRung, callee_rung
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.signature import Param, Signature, TemplateParam
from grid_core.emit.expr import ROTATION_TOL, Scope, clean, sum_terms
from grid_core.emit.storage import local_declaration
from grid_core.model import Body, Robot
from grid_core.model.joints import body_q, effective_subspace, joint_transform
from grid_core.model.spatial import crf, crm, gravity_accel, icrf
from grid_core.review import ParallelismReview, done, todo



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
# RNEA's forward and backward passes run by handle (inverse_dynamics' steps and arrays, through
# the composer: v of every body, a where a child reads it, f accumulated over each subtree);
# then each column of the derivative on its own: the column's seed at the bodies whose joint
# owns it, carried down their subtrees (dv, da, df) and back up to the root (dF), its rows
# S^T dF.  A column touches only its seed bodies' subtrees and their ancestors (P4), every
# robot constant folded; the columns are independent (P2): one warp each in the block layout,
# one after another in the per-state layout (one column's temporaries live at a time).


class GradientColumns:
    """The derivative columns of inverse dynamics, on ``rnea`` (inverse dynamics' steps by
    handle, after its passes); ``out[wrt](row, col)`` the output entries' expressions."""

    def __init__(self, robot: Robot, rnea, out: dict):
        self.robot, self.rnea, self.out = robot, rnea, out
        self.seeds: dict[int, list] = {}
        """v index -> ``(body, S column)`` of every body whose joint moves that coordinate."""
        for b in robot.bodies:
            S = effective_subspace(b)  # a mimic's multiplier applied, its mimicked joint's column
            for c in range(S.shape[1]):
                col = [clean(x, ROTATION_TOL) for x in S[:, c]]
                self.seeds.setdefault(b.v_index + c, []).append((b, col))

    def column(self, scope: Scope, j: int, wrt: str) -> None:
        """Column ``j`` of ``dtau / d wrt`` (``wrt``: ``q`` or ``qd``): every row written."""
        robot, rnea, topo = self.robot, self.rnea, self.robot.topology
        seeds = {b.index: col for b, col in self.seeds[j]}
        below = sorted(set().union(*(topo.subtree[b] for b in seeds)))
        above = sorted({a for b in seeds for a in topo.support[b]} | set(below))
        scope.comment(f"column {j} of d tau / d {wrt}: bodies {below} and their ancestors")
        dv, da, dF = {}, {}, {}
        for i in below:  # root to leaves
            body, p = robot.bodies[i], robot.bodies[i].parent
            X = ss.Transform(robot, body, rnea.arr["xi"], scope)
            v = rnea.arr["v"].get(i)
            dvi = X.motion(dv[p], scope) if p in dv else [0.0] * 6
            dai = X.motion(da[p], scope) if p in da else [0.0] * 6
            if i in seeds:
                s = seeds[i]
                if wrt == "q":  # d X / d q = -(S x) X: (X v_p) x S and (X a_p) x S
                    vp = [0.0] * 6 if p < 0 else X.motion(rnea.arr["v"].get(p), scope)
                    ap = X.motion([0.0] * 3 + rnea.a0 if p < 0 else rnea.arr["a"].get(p), scope)
                    sv, sa = ss.cross_motion(vp, s), ss.cross_motion(ap, s)
                else:  # d vJ / d qd = S, and the velocity product's v x S
                    sv, sa = s, ss.cross_motion(v, s)
                dvi = [sum_terms([(x,), (y,)]) for x, y in zip(dvi, sv)]
                dai = [sum_terms([(x,), (y,)]) for x, y in zip(dai, sa)]
            dv[i] = dvi = scope.let_all(dvi, "dv")
            vJxdv = ss.cross_motion(rnea.joint_motion(body, rnea.arr["qd"]), dvi)
            da[i] = dai = scope.let_all([sum_terms([(x,), (-1.0, y)]) for x, y in zip(dai, vJxdv)], "da")
            # df = I da + v x* I dv + dv x* I v
            I = np.asarray(body.inertia)
            Idv = scope.let_all(ss.inertia_times(I, dvi), "Idv")
            h = scope.let_all(ss.inertia_times(I, v), "h")
            terms = zip(ss.inertia_times(I, dai), ss.cross_force(v, Idv), ss.cross_force(dvi, h))
            dF[i] = [sum_terms([(a,), (b,), (c,)]) for a, b, c in terms]
        for i in reversed(above):  # leaves to root: dF of the subtree, carried to the parent
            body, p = robot.bodies[i], robot.bodies[i].parent
            dF[i] = dFi = scope.let_all(dF.get(i, [0.0] * 6), "dF")
            if p >= 0:
                if wrt == "q" and i in seeds:  # d (X^T f) / d q = X^T (S x* f): the parent's only
                    dFi = [sum_terms([(x,), (y,)]) for x, y in zip(dFi, ss.cross_force(seeds[i], rnea.arr["f"].get(i)))]
                up = ss.Transform(robot, body, rnea.arr["xi"], scope).force_T(dFi, scope)
                dF[p] = [sum_terms([(x,), (y,)]) for x, y in zip(dF.get(p, [0.0] * 6), up)]
        for dof, contributions in rnea.tau_items():  # rows: S^T dF of the bodies that own them
            terms = []
            for body, mult, comp in contributions:
                if body.index in dF:
                    F = dF[body.index]
                    terms.append((mult, F[comp] if comp is not None else ss.subspace_transpose_times(body, F)))
            scope.assign(self.out[wrt](dof, j), sum_terms(terms))

    def items(self) -> list[tuple[int, str]]:
        """Every column: ``(v index, wrt)``."""
        return [(j, wrt) for wrt in ("q", "qd") for j in range(self.robot.nv)]


def _column_signature(j: int, wrt: str) -> Signature:
    T = TemplateParam("typename", "T")
    return Signature(f"inverse_dynamics_gradient_column_{wrt}{j}", [
        Param("T *", "out"), Param("const T *", "v"), Param("const T *", "a"), Param("const T *", "f"),
        Param("const T *", "XI"), Param("const T *", "qd"), Param("const Gravity<T>", "gravity")],
        "__device__ GRID_NOINLINE", template=[T])


class InverseDynamicsGradientEmitter(Emitter):
    Options = sweeps.SweepOptions
    global_inputs = ("f_ext",)  # read in place by RNEA's forward step
    nullable_inputs = ("f_ext",)
    composes = ("inverse_dynamics",)

    def block_threads_hint(self, robot: Robot) -> int:
        return 32 * 2 * robot.nv  # one warp per column (P2)

    def inner_doc(self, layers) -> str:
        return (f"f_ext: this state's external forces or nullptr.  RNEA's sweeps (inverse_dynamics' steps): "
                f"{sweeps.form_of(layers.ctx)}.")

    def helpers(self, layers) -> list:
        """One function per column, on RNEA's v, a, f, the transform data and qd wherever they live
        (shared memory in the block layout, the per-state function's locals): both layouts call it."""
        robot = layers.robot
        rnea = layers.steps("inverse_dynamics", local=True, every_body=("v",))
        for b in robot.bodies:  # RNEA's forward step into nothing: the entries it folds (either layout's)
            rnea.forward(Scope("t"), b)
        nv = robot.nv
        cols = GradientColumns(robot, rnea, {w: (lambda r, c: f"out[{r * nv + c}]") for w in ("q", "qd")})
        out = []
        for j, wrt in cols.items():
            scope = Scope("t")
            cols.column(scope, j, wrt)
            roots = wrt == "q" and any(b.parent < 0 for b, _ in cols.seeds[j])  # reads X a0
            out.append(n.Function(_column_signature(j, wrt), [*(ss.gravity_statements() if roots else []),
                                                              *scope.body()],
                                  doc=f"Column {j} of d tau / d {wrt} (out: the nv x nv output, row-major)."))
        return out

    @staticmethod
    def _calls(layers, rnea, local: bool) -> list:
        """The column functions' calls, ``(item, call)``, on RNEA's arrays and this layout's inputs."""
        pre = "" if local else "s_"
        args = {x: rnea.arr[x].base for x in ("v", "a", "f")}
        args.update(XI=f"{pre}XI", qd=f"{pre}qd", gravity="gravity")
        return [((j, wrt), _column_signature(j, wrt).call({**args, "out": f"{pre}dtau_d{wrt}"}, {"T": "T"}))
                for wrt in ("q", "qd") for j in range(layers.robot.nv)]

    def inner_body(self, layers) -> list:
        robot = layers.robot
        rnea = layers.steps("inverse_dynamics", every_body=("v",))
        calls = dict(self._calls(layers, rnea, False))
        form = sweeps.form_of(layers.ctx)
        return [
            *ss.gravity_statements(),
            n.Comment("RNEA's forward sweep (inverse dynamics' step, by handle): v of every body, a, f"),
            *sweeps.forward(robot, rnea.forward, form),
            n.Comment("RNEA's backward sweep: f of every body accumulated over its subtree"),
            *sweeps.backward_gather(robot, rnea.backward, form),
            n.Comment(f"the {2 * robot.nv} columns of d tau / d q and d tau / d qd, one warp each (P2): each "
                      "writes its own\ncolumn of the outputs, every row (no barrier between them)"),
            *sweeps.fan_out(list(calls), lambda scope, j, wrt: scope.stmts.append(calls[(j, wrt)]), per_warp=True),
        ]

    def state_body(self, layers) -> list:
        robot = layers.robot
        rnea = layers.steps("inverse_dynamics", local=True, every_body=("v",))
        arr = rnea.arr
        scope = Scope("t")

        def visit(sc, b):
            ss.xi_update(sc, robot, b, arr["q"], arr["xi"])
            rnea.forward(sc, b)

        def complete(sc, c):
            if robot.bodies[c].parent >= 0:
                rnea.backward(sc, robot.bodies[c].parent, [c])

        sweeps.depth_first(robot, scope, visit, complete)
        return [*ss.gravity_statements(),
                local_declaration([arr[x] for x in ("v", "a", "f")], ["XI[XI_SIZE]"],
                                  "registers (or the stack): every index is a constant"),
                *scope.body(),
                n.Comment("the columns, one after another"),
                *(call for _, call in self._calls(layers, rnea, True))]


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
        P1=done("block layout: RNEA's forward and backward sweeps run level by level (inverse_dynamics' "
                "steps, by handle: the bodies of a level in parallel, one barrier per level); the per-column "
                "walks down a subtree and up to the root are serial chains of one column's own work"),
        P2=done("the 2 nv columns of d/dq and d/dqd are independent once v, a and f are known: one warp "
                "each (their folded code differs, so one lane of each runs it), each writing its own column, "
                "no barrier between them; the per-state layout runs them one after another"),
        P3=todo("I v of every body is recomputed by each column that reaches it, and X v_parent and "
                "X a_parent by each of a body's own columns; storing them beside RNEA's v, a, f in its "
                "forward sweep would hoist them out of the 2 nv columns"),
        P4=done("a column touches only the subtrees of the bodies whose joint moves it and their ancestors "
                "(the rest of its rows are structural zeros, stored as such); robot constants folded into "
                "the code (a revolute joint's S one unit axis, inertias' zeros dropped); the derivative "
                "columns live in registers, never in shared memory"),
        notes="two layouts: block-cooperative (one block per state, the inline rung) and per-state (one thread "
              "per state: RNEA depth-first, then each column); each column is one function both layouts "
              "call (inverse_dynamics_gradient_column_*, on RNEA's arrays wherever they live), so its code "
              "is compiled once; the launcher picks by INVERSE_DYNAMICS_GRADIENT_PER_STATE_MIN_N (default "
              "1: not yet measured on the GPU)",
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
        return ()  # RNEA's v, a, f (composed); the columns live in registers

    def spill_rungs(self, robot: Robot, options=None):
        return (
            SpillRung(0, "all in shared memory"),
            SpillRung(1, "RNEA's sweep state in global", {callee_rung("inverse_dynamics", 1)},
                      "what inverse dynamics' rung 1 spills: the v/a/f band, read by every column"),
            SpillRung(2, "all scratch in global", {ALL_SCRATCH}, "the transform data too"),
        )


@hookimpl
def grid_register_algorithms():
    return [InverseDynamicsGradient]
