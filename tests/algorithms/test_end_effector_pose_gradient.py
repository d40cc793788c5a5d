"""Generated frame Jacobians equal the reference (proven against Pinocchio's computeFrameJacobian,
LOCAL_WORLD_ALIGNED, in test_end_effector_pose_gradient_reference.py) on host emulation (CI; the
GPU under the `gpu` marker): the default frames on CI's sample of robots (every CODEGEN_ROBOTS
robot with GRID_FULL_SWEEP=1), float64 at rel 1e-9, float32 at rel 1e-4, both layouts, every
tier, the deepest spill rung forced; frames of every kind chosen at generation time on a mimic
arm, whose mimic finger adds into the mimicked joint's column."""

from __future__ import annotations

import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import Emulated, assert_close, random_q
from tests.algorithms.test_end_effector_pose import CHOSEN
from tests.generated import SWEEP_ROBOTS, check_kinematics, robot_cases

N = 4


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases(robots=SWEEP_ROBOTS))
def test_end_effector_pose_gradient(kind, name, spill, rng):
    check_kinematics(kind, name, spill, "end_effector_pose_gradient", rng)


@pytest.mark.parametrize("spill", [False, True])
def test_chosen_frames_with_a_mimic_finger(spill, rng):
    robot = load("erd:panda")
    q = random_q(robot, rng, N)
    expected = Reference(robot).end_effector_pose_gradient(q, CHOSEN)
    assert expected[:, 3, :, robot.nv - 1].any() and not expected[:, 0].any()  # the finger's column; the world link
    b = Emulated(robot, ["end_effector_pose_gradient"], quiet=True, frames=CHOSEN,
                 **({"target_shared_mem_bytes": 0} if spill else {}))
    b.set_poison(True)
    for layout in ("block", "per_state"):
        for tier in (0, 2):
            out = b.with_launch(layout=layout, tier=tier).end_effector_pose_gradient(q)
            assert out.shape == (N, len(CHOSEN), 6, robot.nv)
            assert_close(out, expected, 1e-9, f"{layout} tier {tier} spill={spill}")
