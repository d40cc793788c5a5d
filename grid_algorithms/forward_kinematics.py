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
from grid_core.arena import ALL_SCRATCH, SpillRung
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope
from grid_core.emit.storage import Field
from grid_core.model import Robot
from grid_core.model.joints import body_q, joint_transform
from grid_core.model.spatial import pose_of
from grid_core.review import ParallelismReview, done, not_applicable


def forward_kinematics(robot: Robot, q) -> np.ndarray:
    """World transforms ``X0_i = Xup_i X0_parent`` (spatial_v2's ``fwdKin``), as poses."""
    NB = robot.num_bodies
    X0 = [None] * NB
    for i, body in enumerate(robot.bodies):
        Xup = joint_transform(body, body_q(body, q)) @ body.Xtree
        X0[i] = Xup if body.parent < 0 else Xup @ X0[body.parent]
    return np.stack([pose_of(X) for X in X0]) if NB else np.zeros((0, 4, 4))


# -- code generation -------------------------------------------------------------------
#
# Each body's world frame ^bX_world = (E, r) composed from its parent's and its joint's transform
# (spatial_steps.root_frame, the step the inverse-dynamics gradient's world frame takes), written
# as the pose [[E^T, r], [0, 1]].  The block layout reads the parent's frame back from the output
# (shared memory: no scratch besides XImats), level by level; the per-state layout keeps the
# frames in registers.


def pose_field(robot: Robot) -> Field:
    """The output, one 4x4 pose (16 scalars, row-major) per body."""
    return Field("world_T_body", range(robot.num_bodies), 16, "world pose of each body frame")


class ForwardKinematicsEmitter(Emitter):
    Options = sweeps.SweepOptions

    def block_threads_hint(self, robot: Robot) -> int:
        return 32 * robot.topology.max_level_width  # one warp per body of the widest level (P1)

    def inner_body(self, layers) -> list:
        robot, xi = layers.robot, layers.vectors()["xi"]
        pose = layers.arrays([pose_field(robot)])["world_T_body"]

        def body(scope: Scope, b) -> None:
            p = b.parent
            scope.comment(f"body {b.index} ({b.joint.name}): its world frame from its parent's pose")
            E, r = ss.root_frame(robot, b, ss.pose_frame(pose.get(p)) if p >= 0 else None, xi, scope, world=True)
            for k, x in enumerate(ss.pose_entries(E, r)):
                scope.assign(pose(b.index, k), x)

        return [n.Comment("root to leaves, each body's pose from its parent's (read back from the output)"),
                *sweeps.forward(robot, body, sweeps.form_of(layers.ctx))]

    def state_body(self, layers) -> list:
        robot, io = layers.robot, layers.vectors(local=True)
        pose = layers.arrays([pose_field(robot)], local=True)["world_T_body"]
        scope = Scope("t")
        for b in robot.bodies:
            ss.xi_update(scope, robot, b, io["q"], io["xi"])
        for b, (E, r) in ss.root_frames(robot, io["xi"], scope, world=True).items():
            for k, x in enumerate(ss.pose_entries(E, r)):
                scope.assign(pose(b, k), x)
        return [layers.locals(), *scope.body()]


class ForwardKinematics(Algorithm):
    name = "forward_kinematics"
    summary = "world pose of every body frame, (num_bodies, 4, 4) homogeneous transforms"
    math = r"""
:math:`{}^0X_i = X_J(q_i)\,X_{T,i}\;{}^0X_{\lambda(i)}` root to leaves; the pose of body
:math:`i` is :math:`{}^0T_i = \begin{bmatrix} E_i^T & r_i \\ 0 & 1 \end{bmatrix}` where
:math:`{}^0X_i = \mathrm{plux}(E_i, r_i)`.
"""
    emitter = ForwardKinematicsEmitter
    review = ParallelismReview(
        P1=done("block layout: the world frames are composed root to leaves level by level, the bodies of a "
                "level in parallel (one warp each, one barrier per level); each body reads its parent's "
                "pose back from the output"),
        P2=not_applicable("one output per body, no independent columns; the per-body work is "
                          "already the parallel axis (P1)"),
        P3=done("the joint transforms' configuration data (sin/cos, a free-flyer's rotation) is computed "
                "in one parallel pass before the serial composition (load_update_XImats)"),
        P4=done("frames are composed as (E, r), 12 scalars, never 6x6 Plücker matrices, each tree "
                "transform's constants folded and its zeros dropped (an axis-aligned joint rotates two "
                "coordinates)"),
    )

    def inputs(self, robot: Robot):
        return (Port("q", (robot.nq,), "joint configuration"),)

    def outputs(self, robot: Robot, **options):
        return (Port("world_T_body", (robot.num_bodies, 4, 4), "world pose of each body frame"),)

    def reference(self, ctx, q):
        return forward_kinematics(ctx.robot, q)

    def arenas(self, robot: Robot, options=None):
        return ()  # the parent's frame is read back from the output

    def spill_rungs(self, robot: Robot, options=None):
        return (SpillRung(0, "all in shared memory"),
                SpillRung(1, "the transform data in global", {ALL_SCRATCH}, "XImats goes to d_workspace"))


@hookimpl
def grid_register_algorithms():
    return [ForwardKinematics]
