"""Joint-space inertia matrix by the composite rigid body algorithm (CRBA).

``M = crba(q)``: the ``nv x nv`` symmetric positive definite matrix of the
kinetic energy ``1/2 qd^T M(q) qd``, equal to ``d tau / d qdd`` of inverse
dynamics.  A mimic joint's body adds its terms to the mimicked joint's rows and
columns, scaled by the multiplier (Pinocchio's mimic model).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.model import Robot
from grid_core.model.joints import body_q, effective_subspace, joint_transform
from grid_core.review import ParallelismReview, todo


def crba(robot: Robot, q) -> np.ndarray:
    """CRBA (Featherstone, RBDA Table 6.2)."""
    NB = robot.num_bodies
    Xup, S, col, IC = [None] * NB, [None] * NB, [None] * NB, [None] * NB
    for i, body in enumerate(robot.bodies):
        Xup[i] = joint_transform(body, body_q(body, q)) @ body.Xtree
        S[i] = effective_subspace(body)  # mimic: multiplier applied, mimicked joint's columns
        col[i] = slice(body.v_index, body.v_index + S[i].shape[1])
        IC[i] = body.inertia.copy()
    for i in reversed(range(NB)):  # composite inertias, leaves to root
        p = robot.bodies[i].parent
        if p >= 0:
            IC[p] = IC[p] + Xup[i].T @ IC[i] @ Xup[i]
    H = np.zeros((robot.nv, robot.nv))
    for i in range(NB):
        fh = IC[i] @ S[i]
        H[col[i], col[i]] += S[i].T @ fh
        j = i
        while robot.bodies[j].parent >= 0:  # up the support of i
            fh = Xup[j].T @ fh
            j = robot.bodies[j].parent
            Hij = fh.T @ S[j]
            H[col[i], col[j]] += Hij
            H[col[j], col[i]] += Hij.T
    return H


class CRBA(Algorithm):
    name = "crba"
    summary = "joint-space inertia matrix M(q) by the composite rigid body algorithm"
    math = r"""
Composite inertias, leaves to root: :math:`I^c_i = I_i + \sum_{c \in \mathrm{children}(i)} X_c^T I^c_c X_c`.
Then for each body :math:`i` and each :math:`j` in its support (ancestors and itself), with
:math:`{}^jX_i` the transform from :math:`j`'s frame to :math:`i`'s:

.. math::

   M_{ij} = M_{ji}^T = S_i^T I^c_i \, {}^iX_j S_j .

A mimic body uses :math:`S_i` scaled by its multiplier and adds into the mimicked joint's
rows and columns (so :math:`M = G^T M_r G` for the relaxed inertia :math:`M_r`).
"""
    review = ParallelismReview(
        P1=todo("the composite-inertia pass is a leaves-to-root chain; bodies of one BFS level are "
                "independent, their parent accumulation an atomicAdd or a segmented reduction per level"),
        P2=todo("the entries M_ij of the support walk are independent once IC is known: fan the "
                "(i, ancestor j) pairs (P4's support map enumerates them) across threads instead of "
                "walking each support serially"),
        P3=todo("Xup depends only on q and the per-body products IC_i S_i only on the finished IC: "
                "hoist both out of the serial passes into one parallel pass over bodies"),
        P4=todo("bake the (i, j) support pairs and the column of each body (mimic bodies share "
                "the mimicked joint's) as offline tables; store only the upper triangle and skip the "
                "structural zeros between separate branches"),
    )

    def inputs(self, robot: Robot):
        return (Port("q", (robot.nq,), "joint configuration"),)

    def outputs(self, robot: Robot, **options):
        return (Port("M", (robot.nv, robot.nv), "joint-space inertia matrix (symmetric)"),)

    def reference(self, ctx, q):
        return crba(ctx.robot, q)


@hookimpl
def grid_register_algorithms():
    return [CRBA]
