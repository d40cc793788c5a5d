"""end_effector_pose vs Pinocchio's framesForwardKinematics / data.oMf (float64, rel 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from grid_core import Reference
from grid_core.errors import InputError
from grid_core.testing import assert_close, random_state
from tests.pin_bridge import pin_frame_id, pin_model, robot_cases, to_pin_q

REL = 1e-9
CASES = robot_cases()


@pytest.mark.parametrize("name, floating", CASES)
def test_end_effector_pose_matches_pinocchio(name, floating, robot_cache, rng):
    import pinocchio as pin

    robot = robot_cache(name, floating)
    ref = Reference(robot)
    model = pin_model(robot)
    data = model.createData()
    leaves = robot.leaf_frames()  # the default
    every = list(robot.frames)  # Frame objects: some names are shared (anymal: link and joint LF_HAA)
    for _ in range(20):
        q, _, _ = random_state(robot, rng)
        pin.framesForwardKinematics(model, data, to_pin_q(robot, q))
        default = ref.end_effector_pose(q)
        assert default.shape == (len(leaves), 4, 4)
        expected = np.stack([data.oMf[pin_frame_id(model, f)].homogeneous for f in leaves])
        assert_close(default, expected, REL, f"{name}: leaf frames")
        expected = np.stack([data.oMf[pin_frame_id(model, f)].homogeneous for f in every])
        assert_close(ref.end_effector_pose(q, every), expected, REL, f"{name}: every frame")


def test_frames_by_name(robot_cache, rng):
    robot = robot_cache("iiwa14")
    ref = Reference(robot)
    q, _, _ = random_state(robot, rng)
    names = [f.name for f in robot.frames]
    poses = ref.end_effector_pose(q, names)
    assert poses.shape == (len(names), 4, 4)
    k = names.index("iiwa_joint_7")
    assert np.array_equal(ref.end_effector_pose(q, "iiwa_joint_7"), poses[k : k + 1])
    assert np.array_equal(ref.end_effector_pose(q, frames=None), ref.end_effector_pose(q))
    # a frame on the world (the fixed base's root link) does not move
    assert np.array_equal(ref.end_effector_pose(q, names[0])[0], np.eye(4))


def test_unknown_frame_is_an_input_error(robot_cache):
    robot = robot_cache("iiwa14")
    with pytest.raises(InputError, match=r"argument 'frames': robot 'iiwa14' has no frame 'hand'"):
        Reference(robot).end_effector_pose(np.zeros(robot.nq), ["iiwa_link_7", "hand"])
    go2 = robot_cache("go2")
    with pytest.raises(InputError) as err:
        Reference(go2).end_effector_pose(go2.neutral(), "FL_fot")
    msg = str(err.value)
    assert "\n" not in msg
    assert "robot 'go2' has no frame 'FL_fot' (nearest: FL_foot, " in msg  # the closest first
    # nothing close: the default frames, then the first ones, so the message still shows names
    with pytest.raises(InputError, match=r"no frame 'zzz' \(e\.g\. iiwa_link_7, base, iiwa_base_joint, iiwa_link_0; "
                                         r"`grid info` lists a robot's frames\)$"):
        Reference(robot).end_effector_pose(np.zeros(robot.nq), "zzz")
    with pytest.raises(InputError, match="argument 'frames' must be frame names"):
        Reference(robot).end_effector_pose(np.zeros(robot.nq), [3])


def test_outputs_follow_the_frames_option(robot_cache):
    from grid_core import algorithms

    robot = robot_cache("hyq")
    alg = algorithms()["end_effector_pose"]
    assert alg.outputs(robot)[0].shape == (4, 4, 4)  # hyq's four lower legs by default
    assert alg.outputs(robot_cache("go2"))[0].shape == (4, 4, 4)  # go2's four feet
    assert alg.outputs(robot, frames=["base_link_0"])[0].shape == (1, 4, 4)


def test_end_effector_pose_batch_equals_loop(robot_cache, rng):
    robot = robot_cache("hyq")
    ref = Reference(robot)
    frames = [f.name for f in robot.frames[::3]]
    q, _, _ = random_state(robot, rng, n=1000)
    batch = ref.end_effector_pose(q, frames)
    assert batch.shape == (1000, len(frames), 4, 4)
    assert np.array_equal(batch, np.stack([ref.end_effector_pose(x, frames) for x in q]))
