"""Generated frame Jacobian time variations equal the reference (proven against Pinocchio's
getFrameJacobianTimeVariation, LOCAL_WORLD_ALIGNED, in test_frame_jacobian_time_variation_reference.py)
on host emulation (CI; the GPU under the `gpu` marker): the default (leaf) frames of CI's
sample of robots (tests/generated.py SAMPLE_ROBOTS; every CODEGEN_ROBOTS robot with
GRID_FULL_SWEEP=1), float64 at rel 1e-9, float32 at rel 1e-4, both layouts, every tier, the
deepest spill rung forced; frames of every kind chosen at generation time and at run time on a mimic
arm, whose mimic finger's column is a term of its mimicked joint's; and the generated code against
Pinocchio directly on a fixed arm, a floating quadruped and a mimic arm."""

from __future__ import annotations

import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import Emulated, assert_close, random_state
from tests.algorithms.test_end_effector_pose import CHOSEN
from tests.algorithms.test_frame_jacobian_time_variation_reference import pin_jacobian_time_variation
from tests.generated import check_launches, emulated, robot_cases

ALG = "frame_jacobian_time_variation"
N = 4


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases())
def test_frame_jacobian_time_variation(kind, name, spill, rng):
    robot = load(name)
    q, qd, _ = random_state(robot, rng, N)
    check_launches(kind, name, spill, ALG, (q, qd), Reference(robot).frame_jacobian_time_variation(q, qd))


@pytest.mark.parametrize("spill", [False, True])
def test_chosen_frames_with_a_mimic_finger(spill, rng):
    robot = load("erd:panda")
    ref = Reference(robot)
    q, qd, _ = random_state(robot, rng, N)
    expected = ref.frame_jacobian_time_variation(q, qd, CHOSEN)
    assert expected[:, 3, :, robot.nv - 1].any() and not expected[:, 0].any()  # the finger's column; the world link
    b = Emulated(robot, [ALG], quiet=True, frames=CHOSEN, **({"target_shared_mem_bytes": 0} if spill else {}))
    b.set_poison(True)
    for layout in ("block", "per_state"):
        for tier in (0, 2):
            out = b.with_launch(layout=layout, tier=tier).frame_jacobian_time_variation(q, qd)
            assert out.shape == (N, len(CHOSEN), 6, robot.nv)
            assert_close(out, expected, 1e-9, f"{layout} tier {tier} spill={spill}")
    other = ["panda_link4", "panda_hand"]  # chosen at run time: the library generated for them, once
    assert_close(b.frame_jacobian_time_variation(q, qd, frames=other),
                 ref.frame_jacobian_time_variation(q, qd, other), 1e-9, f"run-time frames {other}")


@pytest.mark.parametrize("name", ["iiwa14", "go2", "erd:panda"])
def test_the_generated_code_against_pinocchio(name, rng):
    robot = load(name)
    q, qd, _ = random_state(robot, rng, N)
    out = emulated(name, False).frame_jacobian_time_variation(q, qd)
    for k in range(N):
        assert_close(out[k], pin_jacobian_time_variation(robot, q[k], qd[k], robot.leaf_frames()), 1e-9,
                     f"{name} state {k}")
