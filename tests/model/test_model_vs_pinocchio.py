"""The robot model agrees with Pinocchio's buildModelFromUrdf joint for joint (rel 1e-12)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROBOTS, load
from grid_core.model import JointType, spatial
from grid_core.model.frames import default_frames
from tests.pin_bridge import pin_frame_id, pin_model

REL = 1e-12


def rel(a, b) -> float:
    scale = max(np.abs(b).max(), 1e-300)
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / scale) if np.abs(b).max() else float(np.abs(a).max())


@pytest.mark.parametrize("name", list(ROBOTS))
def test_model_matches_pinocchio(name):
    robot = load(name)
    model = pin_model(robot)
    n_continuous = sum(1 for b in robot.bodies if b.jtype is JointType.CONTINUOUS and b.mimic is None)
    assert robot.nv == model.nv
    # continuous joints: one angle here, (cos, sin) in Pinocchio (DESIGN §3)
    assert robot.nq == model.nq - n_continuous
    names = list(model.names)[1:]
    assert [b.joint.name for b in robot.bodies] == names
    expected_joint_names = [
        nm for nm, j in zip(names, list(model.joints)[1:]) if j.nv > 0 and j.shortname() != "JointModelFreeFlyer"
    ]
    assert list(robot.joint_names) == expected_joint_names
    assert [p - 1 for p in list(model.parents)[1:]] == [b.parent for b in robot.bodies]
    for i, body in enumerate(robot.bodies, start=1):
        M = model.jointPlacements[i]
        assert rel(body.Xtree, spatial.plux(M.rotation.T, M.translation)) <= REL, body.joint.name
        inertia = model.inertias[i]
        expected = spatial.mcI(inertia.mass, inertia.lever, inertia.inertia)
        assert rel(body.inertia, expected) <= REL, body.name
        joint = model.joints[i]
        assert joint.idx_v == body.v_index
        if body.mimic is None:
            assert joint.nv == body.nv


@pytest.mark.parametrize("name", ["go2", "g1", "erd:solo12", "erd:talos_reduced"])
def test_floating_root_is_pinocchio_free_flyer(name):
    robot = load(name)
    model = pin_model(robot)
    assert robot.floating_base
    assert model.joints[1].shortname() == "JointModelFreeFlyer"
    assert robot.bodies[0].nq == 7 and robot.bodies[0].nv == 6
    assert "root_joint" not in robot.joint_names


def test_continuous_joints_take_one_angle():
    robot = load("erd:double_pendulum_continuous")
    conts = [b for b in robot.bodies if b.jtype is JointType.CONTINUOUS]
    assert conts and all(b.nq == 1 for b in conts)
    assert robot.nq == robot.nv == 2


@pytest.mark.parametrize("name", ["erd:panda", "erd:baxter", "erd:pr2", "erd:tiago_pro"])
def test_mimic_joints_follow_pinocchio_mimic_model(name):
    robot = load(name)
    model = pin_model(robot)
    assert robot.has_mimic
    for i, body in enumerate(robot.bodies, start=1):
        joint = model.joints[i]
        if body.mimic is None:
            continue
        assert joint.shortname() == "JointModelMimic"
        assert (joint.nq, joint.nv) == (0, 0) and (body.nq, body.nv) == (0, 0)
        target = robot.bodies[body.mimic.body]
        assert body.v_index == target.v_index == joint.idx_v
        assert body.joint.name not in robot.joint_names


def test_fixed_joint_frames_stay_addressable():
    robot = load("iiwa14")
    # every link and every joint (fixed ones included) is a frame
    names = {f.name for f in robot.frames}
    assert {link.name for link in robot.links} <= names
    assert {j.name for j in robot.joints} <= names


@pytest.mark.parametrize("name", ["iiwa14", "atlas", "g1", "erd:panda", "erd:talos_reduced"])
def test_link_frames_match_pinocchio_body_frames(name):
    import pinocchio as pin

    robot = load(name)
    model = pin_model(robot)
    checked = 0
    for frame in model.frames:
        if frame.type != pin.FrameType.BODY:
            continue
        ours = robot.frame(frame.name)
        assert ours.body == frame.parentJoint - 1, frame.name
        M = frame.placement
        assert rel(ours.X, spatial.plux(M.rotation.T, M.translation)) <= REL, frame.name
        checked += 1
    assert checked == len(robot.links)


@pytest.mark.parametrize("name", list(ROBOTS))
def test_frame_tree_matches_pinocchio(name):
    """Each frame's parent is Pinocchio's ``parentFrame`` (-1: its universe frame), and the leaf
    frames are the links no joint hangs from, on the bodies no movable joint hangs from."""
    robot = load(name)
    model = pin_model(robot)
    ids = [pin_frame_id(model, f) for f in robot.frames]
    for f, i in zip(robot.frames, ids):
        expected = model.frames[i].parentFrame
        assert (ids[f.parent] if f.parent >= 0 else 0) == expected, f.name
    parents = {j.parent for j in robot.joints}
    inner = {j.parent for j in robot.joints if j.type is not JointType.FIXED}
    tips = [f.name for f in robot.frames if f.kind == "link" and f.name not in parents and f.body >= 0
            and not set(robot.bodies[f.body].links) & inner]
    assert [f.name for f in robot.leaf_frames()] == tips
    assert default_frames(robot) == tuple(tips) and tips


def test_default_frames_are_the_feet_and_tool_frames():
    # go2's feet are fixed-joint links merged into the calves; its motor rotors, imu and radar are
    # leaf links too, on inner bodies (hip, thigh, base): not tips
    assert default_frames(load("go2")) == ("FL_foot", "FR_foot", "RL_foot", "RR_foot")
    assert default_frames(load("erd:ur5_robot")) == ("ee_link", "tool0")
    assert default_frames(load("iiwa14")) == ("iiwa_link_7",)
