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
from grid_core.model import Robot
from grid_core.model.joints import body_q, effective_subspace, joint_transform
from grid_core.model.spatial import crf, crm, gravity_accel, icrf
from grid_core.review import ParallelismReview, todo



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
    review = ParallelismReview(
        P1=todo("the sweeps are per-body chains; bodies of one BFS level are independent (the "
                "backward accumulation an atomicAdd or a per-level segmented reduction)"),
        P2=todo("the 2 nv columns of d/dq and d/dqd are independent once v, a, f are known: fan "
                "them (up to 2 nv^2 output cells) across threads, as upstream id_du does"),
        P3=todo("Xup, crm(Xup v_p) S and crm(Xup a_p) S need only the value sweep: store them as "
                "temporaries and hoist the per-column algebra out of the serial chain"),
        P4=todo("column j of body i is structurally zero unless j supports i (forward) or lies in "
                "i's subtree (backward): bake the support / subtree column maps and touch only those"),
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


@hookimpl
def grid_register_algorithms():
    return [InverseDynamicsGradient]
