"""end_effector_pose_gradient vs Pinocchio's computeFrameJacobian(LOCAL_WORLD_ALIGNED)
(float64, rel 1e-9), and vs central finite differences of our own end_effector_pose.

Finite differences use h = 1e-6 and rel 1e-6: poses are computed to ~eps, so the rounding
error is ~eps / h = 1e-10 and the truncation error h^2 / 6 ~ 1e-13 relative.
"""

from __future__ import annotations

import numpy as np
import pytest

from grid_core import Reference
from grid_core.testing import assert_close, random_state, tangent_fd
from tests.pin_bridge import pin_frame_id, pin_model, robot_cases, to_pin_q

REL = 1e-9
REL_FD = 1e-6
H = 1e-6
CASES = robot_cases()


@pytest.mark.parametrize("name, floating", CASES)
def test_end_effector_pose_gradient_matches_pinocchio(name, floating, robot_cache, rng):
    import pinocchio as pin

    robot = robot_cache(name, floating)
    ref = Reference(robot)
    model = pin_model(robot)
    data = model.createData()
    leaves = robot.leaf_frames()  # the default
    every = list(robot.frames)
    for k in range(20):
        q, _, _ = random_state(robot, rng)
        pq = to_pin_q(robot, q)
        J = ref.end_effector_pose_gradient(q)
        assert J.shape == (len(leaves), 6, robot.nv)
        expected = np.stack([
            pin.computeFrameJacobian(model, data, pq, pin_frame_id(model, f), pin.LOCAL_WORLD_ALIGNED)
            for f in leaves
        ])
        assert_close(J, expected, REL, f"{name}: leaf frames")
        if k < 5:  # every frame (up to 163 on pr2): a few states suffice
            expected = np.stack([
                pin.computeFrameJacobian(model, data, pq, pin_frame_id(model, f), pin.LOCAL_WORLD_ALIGNED)
                for f in every
            ])
            assert_close(ref.end_effector_pose_gradient(q, every), expected, REL, f"{name}: every frame")


@pytest.mark.parametrize("name, floating", CASES)
def test_end_effector_pose_gradient_matches_own_finite_differences(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    for _ in range(3):
        q, _, _ = random_state(robot, rng)
        J = ref.end_effector_pose_gradient(q)
        dT = tangent_fd(robot, ref.end_effector_pose, q, H)  # (frames, 4, 4, nv)
        R = ref.end_effector_pose(q)[:, :3, :3]
        # d p / d q, and the world angular velocity: dR R^T = skew(omega)
        assert_close(J[:, :3], dT[:, :3, 3], REL_FD, f"{name}: linear")
        omega = np.einsum("fabj,fcb->facj", dT[:, :3, :3], R)  # dR/dq_j R^T, per frame
        omega = np.stack([omega[:, 2, 1], omega[:, 0, 2], omega[:, 1, 0]], axis=1)
        assert_close(J[:, 3:], omega, REL_FD, f"{name}: angular")


def test_end_effector_pose_gradient_takes_frames(robot_cache, rng):
    robot = robot_cache("erd:pr2")
    ref = Reference(robot)
    q, _, _ = random_state(robot, rng)
    J = ref.end_effector_pose_gradient(q, ["l_gripper_tool_frame", "base_link"])
    assert J.shape == (2, 6, robot.nv)
    assert not J[1].any()  # the fixed base does not move
