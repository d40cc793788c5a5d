"""Frame Jacobian time variation: ``dJ/dt`` of the frame Jacobians at ``(q, qd)``.

``dJ = frame_jacobian_time_variation(q, qd, frames=None)``, shape ``(n_frames, 6, nv)``,
the time derivative along the motion ``(q, qd)`` of :mod:`grid_algorithms.end_effector_pose_gradient`'s
Jacobian ``J`` (``LOCAL_WORLD_ALIGNED``, rows ``[linear; angular]``), frames as in
:mod:`grid_algorithms.end_effector_pose`.  Each ``dJ[k]`` is Pinocchio's
``computeJointJacobiansTimeVariation(model, data, q, v)`` then
``getFrameJacobianTimeVariation(model, data, frame_id, LOCAL_WORLD_ALIGNED)``; with it the
frame's classical acceleration is ``J qdd + dJ qd`` (origin acceleration; angular acceleration).

Derivation.  Write every motion subspace column ``c`` of body ``b`` in the world frame as a
spatial vector at the world origin, ``s_c = [w_c; n_c]`` (``w_c`` the world axis, ``n_c = u_c +
p_b x w_c`` the velocity of the point at the world origin, ``u_c`` that of the body origin
``p_b``).  The column is fixed in body ``b``, so it moves with the body's spatial velocity
``V_b = [w_b; n_b] = V_parent + sum_c s_c qd_c``: ``d s_c / dt = V_b x s_c``, i.e.

    d w_c / dt = w_b x w_c,    d n_c / dt = w_b x n_c + n_b x w_c

(a joint's own motion along its axis drops out: ``s_c x s_c = 0``; for a free-flyer the six
columns are fixed in the base, which moves with ``V_b``).  The Jacobian column at the frame
origin ``p_f`` is ``J_c = [n_c + w_c x p_f; w_c]`` and the origin moves with the frame's body
``f``: ``dp_f / dt = n_f + w_f x p_f``.  Hence

    dJ[:3, c] = d n_c / dt + (d w_c / dt) x p_f + w_c x dp_f / dt,    dJ[3:, c] = d w_c / dt,

for the columns supporting the frame, zero elsewhere.  Equivalently ``dJ = H qd`` with ``H`` the
pose Hessian (:mod:`grid_algorithms.end_effector_pose_hessian`), at O(nv) per frame instead of
O(nv^2).  Mimic joints: a mimic body's columns are its subspace times the multiplier, added
into the mimicked joint's column, and its rate is the multiplier times that joint's.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames
from grid_core.model.joints import effective_subspace
from grid_core.review import ParallelismReview, todo


def jacobian_time_variations(robot: Robot, world_T_body, world_T_frame, frames, qd) -> np.ndarray:
    """``(n_frames, 6, nv)``: ``dJ/dt`` of the LOCAL_WORLD_ALIGNED Jacobians at velocity ``qd``."""
    NB = robot.num_bodies
    s = [None] * NB  # per body: its world columns [w; n], (6, body nv)
    ds = [None] * NB  # and their time derivatives
    V = np.zeros((NB, 6))  # body spatial velocity [w; n], world frame at the world origin
    for b in robot.bodies:
        R, p = world_T_body[b.index, :3, :3], world_T_body[b.index, :3, 3]
        S = effective_subspace(b)  # [angular; linear], body frame, mimic multiplier applied
        w = R @ S[:3]
        n = R @ S[3:] + np.cross(p, w, axis=0)
        s[b.index] = np.vstack([w, n])
        V[b.index] = (V[b.parent] if b.parent >= 0 else 0.0) + s[b.index] @ qd[b.v_index:b.v_index + S.shape[1]]
        wb, nb = V[b.index, :3, None], V[b.index, 3:, None]
        ds[b.index] = np.vstack([np.cross(wb, w, axis=0), np.cross(wb, n, axis=0) + np.cross(nb, w, axis=0)])
    dJ = np.zeros((len(frames), 6, robot.nv))
    for k, f in enumerate(frames):
        if f.body < 0:
            continue  # a world-fixed frame does not move
        p_f = world_T_frame[k, :3, 3, None]
        dp_f = V[f.body, 3:, None] + np.cross(V[f.body, :3], p_f[:, 0])[:, None]
        for j in robot.topology.support[f.body]:
            body = robot.bodies[j]
            (w, n), (dw, dn) = np.split(s[j], 2), np.split(ds[j], 2)
            col = slice(body.v_index, body.v_index + w.shape[1])
            dJ[k, :3, col] += dn + np.cross(dw, p_f, axis=0) + np.cross(w, dp_f, axis=0)
            dJ[k, 3:, col] += dw
    return dJ


class FrameJacobianTimeVariation(Algorithm):
    name = "frame_jacobian_time_variation"
    summary = ("time derivative of the frame Jacobians at (q, qd), (n_frames, 6, nv), "
               "LOCAL_WORLD_ALIGNED, [linear; angular]")
    math = r"""
With :math:`s_c = [\omega_c; \nu_c]` the world-frame column :math:`c` of body :math:`b` at the
world origin, :math:`V_b = [\omega_b; \nu_b] = V_{\lambda(b)} + \sum_{c \in b} s_c \dot q_c` the
body's spatial velocity and :math:`p_f` the frame origin:

.. math::

   \dot s_c = V_b \times s_c, \qquad
   \dot p_f = \nu_{b(f)} + \omega_{b(f)} \times p_f,

.. math::

   \dot J_c = \begin{bmatrix} \dot\nu_c + \dot\omega_c \times p_f + \omega_c \times \dot p_f \\
                              \dot\omega_c \end{bmatrix}

for the columns supporting the frame (zero elsewhere); equal to :math:`H \dot q`, the pose
Hessian applied to the velocity.
"""
    depends_on = ("forward_kinematics", "end_effector_pose")
    review = ParallelismReview(
        P1=todo("the body velocities V_b = V_parent + s_b qd are a root-to-leaves recursion: the "
                "bodies of one BFS level are independent, batch them level by level"),
        P2=todo("once the velocities are known every (frame, column) pair is independent: fan them "
                "across threads"),
        P3=todo("the world columns s_c and their rates V_b x s_c are per-body and frame-independent: "
                "compute them once per body, then only the cross products with each frame's origin "
                "and its velocity remain"),
        P4=todo("columns outside a frame's support are structural zeros: bake each frame's support "
                "column map offline and write only those entries"),
    )

    def inputs(self, robot: Robot):
        return frame_inputs(robot, velocity=True)

    def outputs(self, robot: Robot, frames=None, **options):
        n = len(resolve_frames(robot, frames, self.name))
        return (Port("dJ", (n, 6, robot.nv), "dJ/dt of the frame Jacobians, LOCAL_WORLD_ALIGNED, [linear; angular]"),)

    def reference(self, ctx, q, qd, frames=None):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        return jacobian_time_variations(ctx.robot, ctx.forward_kinematics(q), ctx.end_effector_pose(q, chosen),
                                        chosen, qd)


@hookimpl
def grid_register_algorithms():
    return [FrameJacobianTimeVariation]
