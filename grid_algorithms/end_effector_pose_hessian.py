"""End-effector pose Hessian: the tangent derivative of the frame Jacobians.

``H = end_effector_pose_hessian(q, frames=None)``, shape ``(n_frames, 6, nv, nv)``,
``H[f, r, j, k] = d J[f, r, j] / d q_k`` where ``J`` is :mod:`grid_algorithms.end_effector_pose_gradient`'s
Jacobian (``LOCAL_WORLD_ALIGNED``, rows ``[linear; angular]``) and the derivative is taken
along ``q (+) dq`` (tangent space, as every ``q`` derivative here); frames as in
:mod:`grid_algorithms.end_effector_pose`.

With every motion subspace column ``c`` in the world frame as a spatial vector at the
world origin, ``s_c = [w_c; n_c]`` (``w_c`` the world axis, ``n_c = u_c + p_c x w_c`` the
velocity of the point at the world origin, ``u_c`` that of the body origin ``p_c``), the
Jacobian column at the frame origin ``p_f`` is ``[n_c + w_c x p_f; w_c]``.  A column moves
only with the joints ``d`` above it (``d <= c``: ancestor or same body, the free-flyer's
six columns among themselves included): ``d s_c / d q_d = s_d x s_c``; the frame origin
moves with every supporting column, ``d p_f / d q_d = n_d + w_d x p_f``.  Hence

    H[f, :3, c, d] = [d <= c] (w_d x n_c + n_d x w_c + (w_d x w_c) x p_f) + w_c x (n_d + w_d x p_f),
    H[f, 3:, c, d] = [d <= c] (w_d x w_c),

zero unless both ``c`` and ``d`` support the frame.  Not symmetric in ``(c, d)``: the
linear rows are tangent derivatives of the frame origin, symmetric up to the free-flyer's
Lie bracket (``H[:3, j, k] - H[:3, k, j] = J[:3] [e_k, e_j]``); the angular rows are not
derivatives of a function, and ``H[3:, j, k] - H[3:, k, j] = J[3:] [e_k, e_j] - w_j x w_k``.
Mimic joints: computed on the relaxed columns and contracted with ``G`` (``v_r = G v``) on
both column indices.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames
from grid_core.model.joints import motion_subspace
from grid_core.review import ParallelismReview, not_applicable, todo

from ._mimic import relaxed_map


def frame_jacobian_hessians(robot: Robot, world_T_body, world_T_frame, frames) -> np.ndarray:
    """``(n_frames, 6, nv, nv)`` tangent derivatives of the LOCAL_WORLD_ALIGNED Jacobians."""
    rel, G, cols, colbody = relaxed_map(robot)
    w, n = np.zeros((rel.nv, 3)), np.zeros((rel.nv, 3))  # per relaxed column, world frame
    for b in robot.bodies:
        R, p = world_T_body[b.index, :3, :3], world_T_body[b.index, :3, 3]
        S = motion_subspace(b)  # [angular; linear], body frame, relaxed (no multiplier)
        w[cols[b.index]] = (R @ S[:3]).T
        n[cols[b.index]] = (R @ S[3:]).T + np.cross(p, (R @ S[:3]).T)
    depth = np.asarray(robot.topology.depth)
    p_f = world_T_frame[:, :3, 3]
    H = np.zeros((len(frames), 6, rel.nv, rel.nv))
    for fi, f in enumerate(frames):
        if f.body < 0:
            continue  # a world-fixed frame does not move
        C = np.concatenate([cols[b] for b in robot.topology.support[f.body]])
        wc, nc = w[C][:, None, :], n[C][:, None, :]  # column c on axis 0
        wd, nd = w[C][None, :, :], n[C][None, :, :]  # derivative column d on axis 1
        above = (depth[colbody[C]][None, :] <= depth[colbody[C]][:, None])[..., None]  # d <= c
        dp = nd + np.cross(wd, p_f[fi])  # d p_f / d q_d
        dw = np.cross(wd, wc)  # s_d x s_c, angular
        dn = np.cross(wd, nc) + np.cross(nd, wc)  # s_d x s_c, linear
        lin = np.where(above, dn + np.cross(dw, p_f[fi]), 0.0) + np.cross(wc, dp)
        ang = np.where(above, dw, 0.0)
        H[fi][np.ix_(range(3), C, C)] = np.moveaxis(lin, 2, 0)
        H[fi][np.ix_(range(3, 6), C, C)] = np.moveaxis(ang, 2, 0)
    if robot.has_mimic:
        H = np.einsum("frcd,cj,dk->frjk", H, G, G)
    return H


class EndEffectorPoseHessian(Algorithm):
    name = "end_effector_pose_hessian"
    summary = ("tangent derivative of the frame Jacobians, (n_frames, 6, nv, nv): "
               "[f, r, j, k] = d J[f, r, j] / d q_k, LOCAL_WORLD_ALIGNED, [linear; angular]")
    math = r"""
With :math:`s_c = [\omega_c; \nu_c]` the world-frame column :math:`c` at the world origin and
:math:`p_f` the frame origin, :math:`J_c = [\nu_c + \omega_c \times p_f;\ \omega_c]`,
:math:`\partial s_c / \partial q_d = [d \preceq c]\; s_d \times s_c` and
:math:`\partial p_f / \partial q_d = \nu_d + \omega_d \times p_f`:

.. math::

   \frac{\partial J_c}{\partial q_d} = [d \preceq c]
     \begin{bmatrix} \omega_d \times \nu_c + \nu_d \times \omega_c
        + (\omega_d \times \omega_c) \times p_f \\ \omega_d \times \omega_c \end{bmatrix}
   + \begin{bmatrix} \omega_c \times (\nu_d + \omega_d \times p_f) \\ 0 \end{bmatrix} .
"""
    depends_on = ("forward_kinematics", "end_effector_pose")
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the body poses come from "
                          "forward_kinematics (see its review)"),
        P2=todo("the dominant lever: every (frame, c, d) cell is a few independent cross "
                "products once the world columns (w_c, n_c) and the frame origins are known; fan "
                "the cells across the block (as upstream GRiD's end-effector Hessian fans its cells)"),
        P3=todo("the world columns (w_c, n_c) are per body and frame-independent, and the "
                "frame-origin velocities n_d + w_d x p_f are shared by every column c: compute "
                "both once in parallel passes, then the cells need one cross product each"),
        P4=todo("only the cells whose two columns support the frame are nonzero: bake each "
                "frame's support column list and the (c, d) chain mask offline, write only those "
                "cells and store the output column-pair-contiguous so the fan's writes coalesce"),
    )

    def inputs(self, robot: Robot):
        return frame_inputs(robot)

    def outputs(self, robot: Robot, frames=None, **options):
        n = len(resolve_frames(robot, frames, self.name))
        return (Port("H", (n, 6, robot.nv, robot.nv),
                     "[f, r, j, k] = d J[f, r, j] / d q_k (tangent space), LOCAL_WORLD_ALIGNED, "
                     "[linear; angular]"),)

    def reference(self, ctx, q, frames=None):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        return frame_jacobian_hessians(ctx.robot, ctx.forward_kinematics(q), ctx.end_effector_pose(q, chosen), chosen)


@hookimpl
def grid_register_algorithms():
    return [EndEffectorPoseHessian]
