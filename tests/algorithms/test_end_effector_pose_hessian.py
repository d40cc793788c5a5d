"""Generated frame-Jacobian Hessians equal the reference (proven by finite differences of the
Jacobians, and its symmetries, in test_end_effector_pose_hessian_reference.py) on host emulation
(CI; the GPU under the `gpu` marker): the default frames on CI's sample of robots (every
CODEGEN_ROBOTS robot with GRID_FULL_SWEEP=1), float64 at rel 1e-9, float32 at rel 1e-4, both
layouts, every tier, the deepest spill rung forced; frames of every kind chosen on a mimic arm.
The output is written in place in global memory: a humanoid's does not fit shared memory."""

from __future__ import annotations

import pytest

from conftest import load
from grid_core import Reference
from grid_core.composer import Composer, GenerateOptions
from grid_core.emit.printer import render
from grid_core.testing import Emulated, assert_close, random_q
from tests.algorithms.test_end_effector_pose import CHOSEN
from tests.generated import SWEEP_ROBOTS, check_kinematics, robot_cases

N = 3


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases(robots=SWEEP_ROBOTS))
def test_end_effector_pose_hessian(kind, name, spill, rng):
    check_kinematics(kind, name, spill, "end_effector_pose_hessian", rng)


def test_chosen_frames_with_a_mimic_finger(rng):
    robot = load("erd:panda")
    q = random_q(robot, rng, N)
    expected = Reference(robot).end_effector_pose_hessian(q, CHOSEN)
    b = Emulated(robot, ["end_effector_pose_hessian"], quiet=True, frames=CHOSEN)
    b.set_poison(True)
    for layout in ("block", "per_state"):
        out = b.with_launch(layout=layout).end_effector_pose_hessian(q)
        assert out.shape == (N, len(CHOSEN), 6, robot.nv, robot.nv)
        assert_close(out, expected, 1e-9, layout)


def test_the_output_is_written_in_place_not_staged():
    layers = Composer(load("g1"), GenerateOptions()).layers("end_effector_pose_hessian")
    names = [r.name for r in layers.plan.regions]
    assert "H" not in names and "frame_columns" in names and "body_frames" in names
    assert "&d_H[size_t(k) * " in render(layers.emit())  # the kernel hands the inner this state's slice
