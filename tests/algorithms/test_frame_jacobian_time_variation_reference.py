"""frame_jacobian_time_variation vs Pinocchio's computeJointJacobiansTimeVariation +
getFrameJacobianTimeVariation(LOCAL_WORLD_ALIGNED) (float64, rel 1e-9), vs central finite
differences of our end_effector_pose_gradient along the motion q(t) = q (+) t qd, and vs the pose
Hessian applied to the velocity (dJ/dt = H qd).

The robots: every robot whose generated code CI proves (tests/generated.py CODEGEN_ROBOTS: the
bundled ones and nine example-robot-data robots: fixed arms, mimic joints, continuous joints,
floating bases) and the mimic robots on a free-flyer.  On a mimic robot Pinocchio 4.1's mimic
model gives a wrong dJ (pr2, tiago_pro, baxter: off by 30-100 %, and its own Jacobian's finite
differences disagree with it by as much), so there the expected value comes from its model built
without mimic (the relaxed tree, every mimic joint free) by the chain rule: J = J_r G with
v_r = G v constant, so dJ/dt = dJ_r/dt G at (q_r, G qd).

Finite differences use h = 1e-6 and rel 1e-6: the Jacobians are computed to ~eps, so the
rounding error is ~eps / h = 1e-10 and the truncation error h^2 / 6 ~ 1e-13 relative.
"""

from __future__ import annotations

import numpy as np
import pytest

from grid_core import Reference
from grid_core.model.spatial import skew
from grid_core.testing import assert_close, integrate, random_state
from tests.algorithms.second_order_support import relaxed_map, relaxed_pin_q
from tests.generated import CODEGEN_ROBOTS
from tests.pin_bridge import FLOATING_MIMIC, _pin_model, pin_frame_id, pin_model, to_pin_q, urdf_path

REL = 1e-9
REL_FD = 1e-6
H = 1e-6
CASES = [(name, None) for name in CODEGEN_ROBOTS] + list(FLOATING_MIMIC)


def pin_jacobian_time_variation(robot, q, qd, frames) -> np.ndarray:
    """Pinocchio's dJ/dt (LOCAL_WORLD_ALIGNED) of ``frames``; on a mimic robot through the relaxed
    tree and the chain rule (see the module docstring)."""
    import pinocchio as pin

    if robot.has_mimic:
        model = _pin_model(urdf_path(robot), robot.floating_base, False)
        G = relaxed_map(robot)
        pq, v = relaxed_pin_q(robot, q), G @ qd
    else:
        model, G = pin_model(robot), np.eye(robot.nv)
        pq, v = to_pin_q(robot, q), qd
    data = model.createData()
    pin.computeJointJacobiansTimeVariation(model, data, pq, v)
    return np.stack([
        pin.getFrameJacobianTimeVariation(model, data, pin_frame_id(model, f), pin.LOCAL_WORLD_ALIGNED) @ G
        for f in frames
    ])


@pytest.mark.parametrize("name, floating", CASES)
def test_frame_jacobian_time_variation_matches_pinocchio(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    leaves = robot.leaf_frames()  # the default
    for k in range(10):
        q, qd, _ = random_state(robot, rng)
        dJ = ref.frame_jacobian_time_variation(q, qd)
        assert dJ.shape == (len(leaves), 6, robot.nv)
        assert_close(dJ, pin_jacobian_time_variation(robot, q, qd, leaves), REL, f"{name}: leaf frames")
        if k < 2:  # every frame (up to 163 on pr2): a few states suffice
            every = list(robot.frames)
            assert_close(ref.frame_jacobian_time_variation(q, qd, every),
                         pin_jacobian_time_variation(robot, q, qd, every), REL, f"{name}: every frame")


@pytest.mark.parametrize("name, floating", CASES)
def test_frame_jacobian_time_variation_matches_finite_differences_along_the_motion(name, floating, robot_cache,
                                                                                    rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    every = list(robot.frames)
    for _ in range(3):
        q, qd, _ = random_state(robot, rng)
        plus = ref.end_effector_pose_gradient(integrate(robot, q, H * qd), every)
        minus = ref.end_effector_pose_gradient(integrate(robot, q, -H * qd), every)
        dJ = ref.frame_jacobian_time_variation(q, qd, every)
        assert_close(dJ, (plus - minus) / (2 * H), REL_FD, f"{name}: central differences")
        # the pose Hessian along the velocity: the same derivative, to rounding
        assert_close(dJ, ref.end_effector_pose_hessian(q, every) @ qd, REL, f"{name}: H qd")


def test_frame_jacobian_time_variation_hand_cases(robot_cache, rng):
    robot = robot_cache("erd:pr2")
    ref = Reference(robot)
    q, qd, _ = random_state(robot, rng)
    dJ = ref.frame_jacobian_time_variation(q, qd, ["base_link", "l_gripper_tool_frame"])
    assert dJ.shape == (2, 6, robot.nv)
    assert not dJ[0].any()  # the fixed base does not move
    assert not ref.frame_jacobian_time_variation(q, np.zeros(robot.nv)).any()  # at rest
    # only the first joint of a fixed arm turning (1 rad/s about its world axis w): the whole arm
    # turns rigidly, so every column's world axis and lever arm turn with it, dJ = [w x J_lin; w x J_ang]
    arm = robot_cache("iiwa14")
    every = list(arm.frames)
    q, _, _ = random_state(arm, rng)
    J = Reference(arm).end_effector_pose_gradient(q, every)
    dJ = Reference(arm).frame_jacobian_time_variation(q, np.eye(arm.nv)[0], every)
    w = J[-1, 3:, 0]  # the first joint's world axis
    assert_close(dJ, (skew(w) @ J.reshape(-1, 3, arm.nv)).reshape(dJ.shape), 1e-12, "rigid turn")


def test_outputs_follow_the_frames_option(robot_cache):
    from grid_core import algorithms

    robot = robot_cache("go2")
    alg = algorithms()["frame_jacobian_time_variation"]
    assert [p.name for p in alg.inputs(robot)] == ["q", "qd", "frames"]
    assert alg.outputs(robot)[0].shape == (4, 6, robot.nv)  # go2's four feet
    assert alg.outputs(robot, frames=["base", "imu", "FL_calf"])[0].shape == (3, 6, robot.nv)
