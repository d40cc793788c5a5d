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

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.model import Robot
from grid_core.model.joints import body_q, joint_transform, motion_subspace
from grid_core.review import ParallelismReview, todo

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
        P1=todo("both passes are per-body chains; bodies of one BFS level are independent (the "
                "IA / F accumulation into the parent becomes an atomicAdd or a per-level segmented "
                "reduction)"),
        P2=todo("the columns of F, P and Minv are independent unit-force solves: inside each body "
                "step, fan the subtree (backward) and j >= i (forward) columns across threads"),
        P3=todo("Xup depends only on q, not on the recursion's carry: hoist it out of the passes "
                "as one parallel pass over bodies"),
        P4=todo("bake each body's subtree column range and relaxed index offline; store only the "
                "upper triangle of Minv and skip F / P columns outside the subtree (structural zeros); "
                "the mimic correction is a small dense Schur complement of known size"),
    )

    def inputs(self, robot: Robot):
        return (Port("q", (robot.nq,), "joint configuration"),)

    def outputs(self, robot: Robot, **options):
        return (Port("Minv", (robot.nv, robot.nv), "inverse joint-space inertia matrix (symmetric)"),)

    def reference(self, ctx, q):
        return minv(ctx.robot, q)


@hookimpl
def grid_register_algorithms():
    return [Minv]
