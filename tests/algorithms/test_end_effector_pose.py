"""Generated end-effector poses equal the reference (proven against Pinocchio's oMf in
test_end_effector_pose_reference.py) on host emulation (CI; the GPU under the `gpu` marker): the
default frames on CI's sample of robots (every CODEGEN_ROBOTS robot with GRID_FULL_SWEEP=1),
float64 at rel 1e-9, float32 at rel 1e-4, both layouts, every tier, the deepest spill rung forced;
frames chosen at generation time (a world-fixed link, a joint, a fixed joint, a mimic finger), and
a call with other frames, which builds the library it needs."""

from __future__ import annotations

import pytest

import grid_core
from conftest import load
from grid_core import Reference
from grid_core.composer import generate
from grid_core.testing import Emulated, assert_close, random_q
from tests.generated import SWEEP_ROBOTS, check_kinematics, robot_cases

N = 4
CHOSEN = ("panda_link0", "panda_joint3", "panda_hand_tcp_joint", "panda_rightfinger")
"""panda's frames of every kind: fixed in the world, a joint, a fixed joint (merged), a mimic finger."""


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases(robots=SWEEP_ROBOTS))
def test_end_effector_pose(kind, name, spill, rng):
    check_kinematics(kind, name, spill, "end_effector_pose", rng)


def test_chosen_frames_differ_and_carry_their_tables():
    robot = load("erd:panda")
    default, chosen = generate(robot, ["end_effector_pose"]), generate(robot, ["end_effector_pose"], frames=CHOSEN)
    assert default != chosen
    assert "static constexpr int NUM_FRAMES = 4;" in chosen
    assert "static constexpr int FRAME_BODY[4] = {-1, 2, 6, 8};" in chosen
    assert "3: panda_rightfinger (link, body 8)" in chosen
    assert "T *s_world_T_frame" in chosen and "world_T_frame[64]" not in default


@pytest.mark.parametrize("layout", ["block", "per_state"])
def test_chosen_frames_and_a_call_with_others(layout, rng):
    robot = load("erd:panda")
    ref = Reference(robot)
    q = random_q(robot, rng, N)
    b = Emulated(robot, ["end_effector_pose"], quiet=True, frames=CHOSEN).with_launch(layout=layout)
    b.set_poison(True)
    out = b.end_effector_pose(q)
    assert out.shape == (N, len(CHOSEN), 4, 4)
    assert_close(out, ref.end_effector_pose(q, CHOSEN), 1e-9, layout)
    assert_close(b.end_effector_pose(q, frames=list(CHOSEN)), out, 0.0, "the built frames, named")
    other = ["panda_link4", "panda_leftfinger"]  # built once, then kept
    assert_close(b.end_effector_pose(q, other), ref.end_effector_pose(q, other), 1e-9, f"{layout} {other}")
    alg = grid_core.algorithms()["end_effector_pose"]
    built = b._generated_for(alg, (q, other), {})[2]
    assert built is not b and built is b._generated_for(alg, (q, tuple(other)), {})[2]
    # the build is shared by the launch copies, each calling it under its own launch configuration
    twin = b.with_launch(layout="block" if layout == "per_state" else "per_state", tier=2)
    view = twin._generated_for(alg, (q, other), {})[2]
    assert (view.layout, view.tier) == (twin.layout, 2) and view.generate_options == built.generate_options
    assert_close(twin.end_effector_pose(q, other), ref.end_effector_pose(q, other), 1e-9, f"{twin.layout} {other}")
