"""Forward dynamics by the articulated-body algorithm (ABA).

``qdd = aba(q, qd, tau, f_ext)``: the joint accelerations produced by the joint
forces ``tau`` at state ``(q, qd)`` under gravity and the external forces
``f_ext`` (one spatial force per body, in the body frame, ``[force; moment]``
as Pinocchio orders it), in O(n) without forming the inertia matrix.

Mimic joints: the algorithm runs on the relaxed tree (every mimic joint free,
no force on it) and imposes the mimic constraints afterwards (see
:mod:`grid_algorithms._mimic`).  The response ``Y = M_r^-1 C^T`` to one unit
force per constraint reuses the articulated inertias: the backward and forward
passes carry those right-hand sides as extra columns, without velocity, gravity
or external force.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.model import Robot
from grid_core.model.joints import body_q, body_v, joint_transform, motion_subspace
from grid_core.model.spatial import crf, crm
from grid_core.review import ParallelismReview, todo

from ._mimic import relaxation
from .inverse_dynamics import gravity_accel


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
        P1=todo("the three passes are per-body chains; bodies of one BFS level are independent "
                "(pass 2's parent accumulation an atomicAdd or a per-level segmented reduction). "
                "A/B-time it against serial GLASS-style 6x6 operations (a parallel level loses to "
                "serial code when levels are narrow, as on a single arm)"),
        P2=todo("on mimic robots the constraint right-hand sides are independent columns of passes "
                "2-3: fan them across threads next to the physical one"),
        P3=todo("Xup and the velocity-independent parts depend only on q: hoist them out of the "
                "serial passes as one parallel pass over bodies; pass 1 has no cross-body carry "
                "beyond v and can be level-batched"),
        P4=todo("fold the known zeros of Xtree, the inertias and S (one-column revolute / prismatic "
                "subspaces make U a column and D a scalar) into the emitted code"),
    )

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "tau")

    def outputs(self, robot: Robot, **options):
        return (Port("qdd", (robot.nv,), "joint accelerations"),)

    def reference(self, ctx, q, qd, tau, f_ext=None, gravity=DEFAULT_GRAVITY):
        return aba(ctx.robot, q, qd, tau, f_ext, gravity)


@hookimpl
def grid_register_algorithms():
    return [ABA]
