"""End-effector poses: the world pose of chosen frames.

``world_T_frame = end_effector_pose(q, frames=None)``, shape ``(n_frames, 4, 4)``:
for each chosen frame the homogeneous transform ``[[R, p], [0, 1]]``, ``p`` the
frame origin in the world and ``R`` taking frame coordinates to world coordinates
(Pinocchio's ``data.oMf[frame_id].homogeneous``).

``frames`` names any frames of ``robot.frames`` (links, joints, fixed joints; a
single name is one frame; a name shared by several frames means the first, as
``robot.frame`` does, and a :class:`~grid_core.model.Frame` of ``robot.frames``
may be given instead of its name); it is shared by the whole batch.  By default the
frames are the robot's leaf frames: the links of the description's tree with no child
joint, movable or fixed (a quadruped's feet, an arm's tool frame), on the leaf bodies, in
``robot.frames`` order (:meth:`~grid_core.model.Robot.leaf_frames`,
:func:`grid_core.model.frames.default_frames`).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames
from grid_core.model.spatial import pose_of
from grid_core.review import ParallelismReview, not_applicable, todo


def frame_poses(robot: Robot, world_T_body, frames) -> np.ndarray:
    """``world_T_frame`` for each :class:`Frame`, given the bodies' world poses."""
    out = np.empty((len(frames), 4, 4))
    for k, f in enumerate(frames):
        body_T_frame = pose_of(f.X)
        out[k] = body_T_frame if f.body < 0 else world_T_body[f.body] @ body_T_frame
    return out


class EndEffectorPose(Algorithm):
    name = "end_effector_pose"
    summary = "world pose of chosen frames (default: the leaf frames), (n_frames, 4, 4) homogeneous"
    math = r"""
:math:`{}^0T_f = {}^0T_{b(f)}\; {}^{b(f)}T_f`: the world pose of the frame's body (forward
kinematics) composed with the frame's fixed placement in that body.
"""
    depends_on = ("forward_kinematics",)
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the body poses come from "
                          "forward_kinematics (see its review)"),
        P2=todo("the frames are independent: one thread group per frame for the final product"),
        P3=todo("only the bodies supporting a chosen frame are needed: restrict the forward "
                "kinematics pass to their union, computed offline"),
        P4=todo("bake each chosen frame's body index and its constant 3x4 placement (zeros folded) "
                "as offline tables"),
    )

    def inputs(self, robot: Robot):
        return frame_inputs(robot)

    def outputs(self, robot: Robot, frames=None, **options):
        n = len(resolve_frames(robot, frames, self.name))
        return (Port("world_T_frame", (n, 4, 4), "world pose of each chosen frame"),)

    def reference(self, ctx, q, frames=None):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        return frame_poses(ctx.robot, ctx.forward_kinematics(q), chosen)


@hookimpl
def grid_register_algorithms():
    return [EndEffectorPose]
