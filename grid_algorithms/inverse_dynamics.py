"""Inverse dynamics by the recursive Newton-Euler algorithm (RNEA).

``tau = ID(q, qd, qdd, f_ext)``: the joint forces that produce ``qdd`` at state
``(q, qd)`` under gravity and the external forces ``f_ext`` (one spatial force
per body, in the body frame, ``[force; moment]`` as Pinocchio orders it).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY
from grid_core.model import Robot
from grid_core.model.joints import body_q, body_v, joint_transform, motion_subspace
from grid_core.model.spatial import crf, crm
from grid_core.review import ParallelismReview, done, not_applicable, todo


def gravity_accel(gravity) -> np.ndarray:
    """The fictitious base acceleration ``-a_g`` that folds gravity into the forward pass."""
    return np.concatenate([np.zeros(3), -np.asarray(gravity, dtype=float)])


def rnea(robot: Robot, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
    """RNEA (Featherstone, RBDA Table 5.1).  Returns ``(tau, v, a, f, Xup)`` per body."""
    NB = robot.num_bodies
    Xup, S, v, a, f = [None] * NB, [None] * NB, [None] * NB, [None] * NB, [None] * NB
    a0 = gravity_accel(gravity)
    for i, body in enumerate(robot.bodies):
        Xup[i] = joint_transform(body, body_q(body, q)) @ body.Xtree
        S[i] = motion_subspace(body)
        vJ = S[i] @ body_v(body, qd)
        aJ = S[i] @ body_v(body, qdd)
        if body.parent < 0:
            v[i] = vJ
            a[i] = Xup[i] @ a0 + aJ
        else:
            v[i] = Xup[i] @ v[body.parent] + vJ
            a[i] = Xup[i] @ a[body.parent] + aJ + crm(v[i]) @ vJ
        f[i] = body.inertia @ a[i] + crf(v[i]) @ body.inertia @ v[i]
        if f_ext is not None:
            fx = f_ext[i]
            f[i] = f[i] - np.concatenate([fx[3:], fx[:3]])  # [force; moment] -> [moment; force]
    tau = np.zeros(robot.nv)
    for i in reversed(range(NB)):
        body = robot.bodies[i]
        tj = S[i].T @ f[i]
        if body.mimic is not None:
            tau[body.v_index] += body.mimic.multiplier * tj[0]
        else:
            tau[body.v_index : body.v_index + body.nv] += tj
        if body.parent >= 0:
            f[body.parent] = f[body.parent] + Xup[i].T @ f[i]
    return tau, v, a, f, Xup


class InverseDynamics(Algorithm):
    name = "inverse_dynamics"
    summary = "joint forces tau = ID(q, qd, qdd, f_ext) by the recursive Newton-Euler algorithm"
    math = r"""
Forward pass, root to leaves, for each body :math:`i` with parent :math:`\lambda(i)`:

.. math::

   X_i = X_J(q_i)\,X_{T,i}, \quad
   v_i = X_i v_{\lambda(i)} + S_i \dot q_i, \quad
   a_i = X_i a_{\lambda(i)} + S_i \ddot q_i + v_i \times S_i \dot q_i,

   f_i = I_i a_i + v_i \times^* I_i v_i - f^{ext}_i,

with :math:`a_0 = -a_g` (gravity as a fictitious base acceleration).  Backward pass,
leaves to root: :math:`\tau_i = S_i^T f_i`, :math:`f_{\lambda(i)} \mathrel{+}= X_i^T f_i`.
"""
    review = ParallelismReview(
        P1=todo("the forward and backward sweeps are per-body serial chains; bodies of one BFS "
                "level are independent (hyq: 4 per level, atlas: up to 5)"),
        P2=not_applicable("one output vector; no independent columns"),
        P3=todo("Xup (the joint transforms) depends only on q, not on the sweep's carry: hoist it "
                "out of the forward sweep as one parallel pass over bodies"),
        P4=todo("the constant parts of Xtree and the inertias are known offline: fold their zeros"),
    )

    def inputs(self, robot: Robot):
        return (
            Port("q", (robot.nq,), "joint configuration"),
            Port("qd", (robot.nv,), "joint velocity"),
            Port("qdd", (robot.nv,), "joint acceleration"),
            Port("f_ext", (robot.num_bodies, 6), "external force per body, body frame, [force; moment]",
                 optional=True),
            Port("gravity", (3,), "gravity vector in the world frame", kind="param", default=DEFAULT_GRAVITY),
        )

    def outputs(self, robot: Robot):
        return (Port("tau", (robot.nv,), "joint forces"),)

    def reference(self, ctx, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
        return rnea(ctx.robot, q, qd, qdd, f_ext, gravity)[0]


@hookimpl
def grid_register_algorithms():
    return [InverseDynamics]
