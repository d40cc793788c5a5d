"""Forward kinematics: the world pose of every body frame.

``world_T_body = forward_kinematics(q)``, shape ``(num_bodies, 4, 4)``: for each
body (in body order, the joint order of Pinocchio's model) the homogeneous
transform ``[[R, p], [0, 1]]`` whose ``R`` takes body coordinates to world
coordinates and whose ``p`` is the body origin in the world (Pinocchio's
``data.oMi[1:]``).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.model import Robot
from grid_core.model.joints import body_q, joint_transform
from grid_core.model.spatial import pose_of
from grid_core.review import ParallelismReview, not_applicable, todo


def forward_kinematics(robot: Robot, q) -> np.ndarray:
    """World transforms ``X0_i = Xup_i X0_parent`` (spatial_v2's ``fwdKin``), as poses."""
    NB = robot.num_bodies
    X0 = [None] * NB
    for i, body in enumerate(robot.bodies):
        Xup = joint_transform(body, body_q(body, q)) @ body.Xtree
        X0[i] = Xup if body.parent < 0 else Xup @ X0[body.parent]
    return np.stack([pose_of(X) for X in X0]) if NB else np.zeros((0, 4, 4))


class ForwardKinematics(Algorithm):
    name = "forward_kinematics"
    summary = "world pose of every body frame, (num_bodies, 4, 4) homogeneous transforms"
    math = r"""
:math:`{}^0X_i = X_J(q_i)\,X_{T,i}\;{}^0X_{\lambda(i)}` root to leaves; the pose of body
:math:`i` is :math:`{}^0T_i = \begin{bmatrix} E_i^T & r_i \\ 0 & 1 \end{bmatrix}` where
:math:`{}^0X_i = \mathrm{plux}(E_i, r_i)`.
"""
    review = ParallelismReview(
        P1=todo("the world transforms are a root-to-leaves chain of 4x4 products; bodies of one "
                "BFS level are independent"),
        P2=not_applicable("one output per body, no independent columns; the per-body work is "
                          "already the parallel axis (P1)"),
        P3=todo("the joint transforms Xup depend only on q: compute them in one parallel pass "
                "(sincos per joint) before the serial composition"),
        P4=todo("compose 3x4 homogeneous transforms rather than 6x6 Plücker matrices and fold the "
                "constant zeros of each Xtree offline"),
    )

    def inputs(self, robot: Robot):
        return (Port("q", (robot.nq,), "joint configuration"),)

    def outputs(self, robot: Robot, **options):
        return (Port("world_T_body", (robot.num_bodies, 4, 4), "world pose of each body frame"),)

    def reference(self, ctx, q):
        return forward_kinematics(ctx.robot, q)


@hookimpl
def grid_register_algorithms():
    return [ForwardKinematics]
