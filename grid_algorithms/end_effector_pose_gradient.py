"""End-effector pose gradient: the frame Jacobians of chosen frames.

``J = end_effector_pose_gradient(q, frames=None)``, shape ``(n_frames, 6, nv)``,
frames as in :mod:`grid_algorithms.end_effector_pose`.  Each ``J[k]`` is
Pinocchio's ``computeFrameJacobian(model, data, q, frame_id, LOCAL_WORLD_ALIGNED)``:

* rows ``[linear; angular]`` (Pinocchio's order, NOT Featherstone's): rows 0-2 the
  velocity of the frame ORIGIN, rows 3-5 the frame's angular velocity, both
  expressed in WORLD-aligned axes; so ``d p / d q = J[k, :3]`` and
  ``dR / dq_j = skew(J[k, 3:, j]) R`` for the pose ``(R, p)`` of ``end_effector_pose``;
* columns are the v coordinates: for a free-flyer the tangent space
  (``q (+) dq``: position increment in the base frame, rotation ``R exp(dw)``),
  a continuous joint's one angle, a mimic joint adding into the mimicked joint's
  column times its multiplier.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames
from grid_core.model.joints import effective_subspace
from grid_core.review import ParallelismReview, not_applicable, todo



def frame_jacobians(robot: Robot, world_T_body, world_T_frame, frames) -> np.ndarray:
    """LOCAL_WORLD_ALIGNED Jacobians from the bodies' and the frames' world poses."""
    J = np.zeros((len(frames), 6, robot.nv))
    for k, f in enumerate(frames):
        p_f = world_T_frame[k, :3, 3]
        for j in robot.topology.support[f.body] if f.body >= 0 else ():
            body = robot.bodies[j]
            R_j, p_j = world_T_body[j, :3, :3], world_T_body[j, :3, 3]
            S = effective_subspace(body)  # [angular; linear] in body j's frame
            w = R_j @ S[:3]
            col = slice(body.v_index, body.v_index + S.shape[1])
            J[k, :3, col] += R_j @ S[3:] + np.cross(w, p_f - p_j, axis=0)
            J[k, 3:, col] += w
    return J


class EndEffectorPoseGradient(Algorithm):
    name = "end_effector_pose_gradient"
    summary = "frame Jacobians (n_frames, 6, nv), [linear; angular] in world-aligned axes at the frame origin"
    math = r"""
For each body :math:`j` supporting the frame (origin :math:`p_f`), with world pose
:math:`(R_j, p_j)` and motion subspace :math:`S_j = [S^\omega_j; S^v_j]` in its own frame:

.. math::

   J_{:, j} = \begin{bmatrix} R_j S^v_j + (R_j S^\omega_j) \times (p_f - p_j) \\
                               R_j S^\omega_j \end{bmatrix} .
"""
    depends_on = ("forward_kinematics", "end_effector_pose")
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the body poses come from "
                          "forward_kinematics (see its review)"),
        P2=todo("every (frame, column) pair is independent once the poses are known: fan them "
                "across threads (upstream's end_effector_pose_gradient walks them serially)"),
        P3=todo("the world axes R_j S_j and origins p_j are per-body and frame-independent: compute "
                "them once per body, then only the cross product with each frame's origin remains"),
        P4=todo("columns outside a frame's support are structural zeros: bake each frame's support "
                "column map offline and write only those entries"),
    )

    def inputs(self, robot: Robot):
        return frame_inputs(robot)

    def outputs(self, robot: Robot, frames=None, **options):
        n = len(resolve_frames(robot, frames, self.name))
        return (Port("J", (n, 6, robot.nv), "frame Jacobians, LOCAL_WORLD_ALIGNED, [linear; angular]"),)

    def reference(self, ctx, q, frames=None):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        return frame_jacobians(ctx.robot, ctx.forward_kinematics(q), ctx.end_effector_pose(q, chosen), chosen)


@hookimpl
def grid_register_algorithms():
    return [EndEffectorPoseGradient]
