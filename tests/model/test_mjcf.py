"""MJCF robots through the ``mjcf`` loader plugin (grid_plugins/mjcf.py), proven against MuJoCo.

The models are in tests/data/mjcf/, written for these tests: ``arm`` (every orientation form,
degrees, joint refs, off-origin anchors, a two-joint wrist), ``humanoid`` (a free joint,
default classes from an included file, inertias from geoms, jointless bodies, three-hinge
hips), ``quadruped`` (a base on three slides and a hinge, telescopic shins), ``coupling``
(joint equalities in sibling branches), ``geom_inertia`` (no <inertial>: boxes, ellipsoids,
a mesh...), and ``ball`` (refused).

MuJoCo is the oracle: its inverse dynamics (``mj_inverse``), mass matrix (``mj_fullM`` of
``qM`` after ``mj_forward``) and forward dynamics (``mj_forward``'s ``qacc``), with contacts,
constraints, limits, passive forces and actuation disabled and armature zeroed (none of them
is rigid-body dynamics), at rel 1e-9.  Our (q, v, a) map onto MuJoCo's (qpos, qvel, qacc)
through ``G`` (``qvel = G v``): hinge and slide coordinates are the same numbers; the free
joint's quaternion is reordered (x y z w <-> w x y z) and its linear velocity turned into the
world frame (``qvel_lin = R v_lin``, whence ``qacc_lin = R (a_lin + omega x v_lin)``); a mimic
joint's MuJoCo coordinate is the coupling's value (``qvel = multiplier v`` of the joint it
follows).  Forces map back with the transpose: ``tau = G^T qfrc``, ``M = G^T M_mj G``.
"""

from __future__ import annotations

import importlib.metadata
import sys
import warnings
from pathlib import Path

import mujoco  # the mjcf extra, part of the test extra
import numpy as np
import pytest
from click.testing import CliRunner

import grid_core
from grid_core.cli import main
from grid_core.errors import (
    GridWarning,
    InertiaWarning,
    RobotModelError,
    RobotNotFoundError,
    UnsupportedFeatureError,
)
from grid_core.hooks import build_registry
from grid_core.model import JointType, spatial
from grid_core.testing import Emulated, assert_close, random_state
from grid_plugins.mjcf import load_mjcf_file

DATA = Path(__file__).resolve().parent.parent / "data" / "mjcf"
DYNAMIC = ("arm", "humanoid", "quadruped", "coupling", "geom_inertia")
REL = 1e-9

_OFF = ("CONTACT", "CONSTRAINT", "LIMIT", "EQUALITY", "FRICTIONLOSS", "ACTUATION", "PASSIVE", "SPRING", "DAMPER")
OFF = sum(int(getattr(mujoco.mjtDisableBit, f"mjDSBL_{n}")) for n in _OFF
          if hasattr(mujoco.mjtDisableBit, f"mjDSBL_{n}"))
FREE = int(mujoco.mjtJoint.mjJNT_FREE)


def load(name: str, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GridWarning)
        return grid_core.load_robot(str(DATA / f"{name}.xml"), **kw)


def rigid_body_model(name: str):
    """MuJoCo's model with everything that is not rigid-body dynamics switched off."""
    m = mujoco.MjModel.from_xml_path(str(DATA / f"{name}.xml"))
    m.opt.disableflags |= OFF
    m.dof_armature[:] = 0.0
    return m


def joint_name(m, j: int) -> str:
    return mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j)


def to_mujoco(robot, m, q, v, a):
    """``(qpos, qvel, qacc, G)`` of our state ``(q, v, a)`` (module docstring)."""
    by_joint = {b.joint.name: b for b in robot.bodies}
    qpos = m.qpos0.copy()
    G = np.zeros((m.nv, robot.nv))
    turn = np.zeros(m.nv)  # the free joint's d/dt(R) v_lin term of qacc
    for j in range(m.njnt):
        b = by_joint[joint_name(m, j)]
        qa, da = m.jnt_qposadr[j], m.jnt_dofadr[j]
        if int(m.jnt_type[j]) == FREE:
            qi, vi = b.q_index, b.v_index
            R = spatial.quat_to_matrix(q[qi + 3 : qi + 7])
            qpos[qa : qa + 3] = q[qi : qi + 3]
            qpos[qa + 3] = q[qi + 6]
            qpos[qa + 4 : qa + 7] = q[qi + 3 : qi + 6]
            G[da : da + 3, vi : vi + 3] = R
            G[da + 3 : da + 6, vi + 3 : vi + 6] = np.eye(3)
            turn[da : da + 3] = R @ np.cross(v[vi + 3 : vi + 6], v[vi : vi + 3])
        elif b.mimic is not None:
            target = robot.bodies[b.mimic.body]
            qpos[qa] = b.mimic.multiplier * q[target.q_index] + b.mimic.offset
            G[da, target.v_index] = b.mimic.multiplier
        else:
            qpos[qa] = q[b.q_index]
            G[da, b.v_index] = 1.0
    return qpos, G @ v, G @ a + turn, G


def mujoco_dynamics(m, qpos, qvel, qacc):
    """MuJoCo's ``(qfrc_inverse, M, qfrc_bias)`` at one state."""
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:], d.qacc[:] = qpos, qvel, qacc
    mujoco.mj_inverse(m, d)
    tau = d.qfrc_inverse.copy()
    mujoco.mj_forward(m, d)
    M = np.zeros((m.nv, m.nv))
    if hasattr(d, "qM"):  # MuJoCo 3: mj_fullM(m, dst, qM)
        mujoco.mj_fullM(m, M, d.qM)
    else:  # MuJoCo 4: mj_fullM(m, d, dst)
        mujoco.mj_fullM(m, d, M)
    return tau, M, d.qfrc_bias.copy()


def states(robot, seed: int, n: int = 6):
    return random_state(robot, np.random.default_rng(seed), n)


# -- dynamics against MuJoCo -------------------------------------------------------------------

@pytest.mark.parametrize("name", DYNAMIC)
def test_inverse_dynamics_and_mass_matrix_equal_mujocos(name):
    robot, m = load(name), rigid_body_model(name)
    ref = grid_core.Reference(robot)
    q, v, a = states(robot, 1)
    tau, M = ref.inverse_dynamics(q, v, a), ref.crba(q)
    for i in range(len(q)):
        qpos, qvel, qacc, G = to_mujoco(robot, m, q[i], v[i], a[i])
        tau_mj, M_mj, _ = mujoco_dynamics(m, qpos, qvel, qacc)
        assert_close(tau[i], G.T @ tau_mj, REL, f"{name} inverse dynamics, state {i}")
        assert_close(M[i], G.T @ M_mj @ G, REL, f"{name} mass matrix, state {i}")


def forward_case(name: str, seed: int):
    """``(robot, MuJoCo model, q, v, tau, our forward dynamics)`` at random states."""
    robot, m = load(name), rigid_body_model(name)
    q, v, _ = states(robot, seed)
    tau = np.random.default_rng(seed + 1).uniform(-3, 3, v.shape)
    return robot, m, q, v, tau, grid_core.Reference(robot).forward_dynamics(q, v, tau)


@pytest.mark.parametrize("name", ["arm", "humanoid", "quadruped", "geom_inertia"])
def test_forward_dynamics_equals_mujocos_qacc(name):
    """``mj_forward`` under ``qfrc_applied = G^-T tau`` (G is square here: no mimic)."""
    robot, m, q, v, tau, qdd = forward_case(name, 2)
    for i in range(len(q)):
        qpos, qvel, turn, G = to_mujoco(robot, m, q[i], v[i], np.zeros(robot.nv))  # qacc of a = 0
        d = mujoco.MjData(m)
        d.qpos[:], d.qvel[:] = qpos, qvel
        d.qfrc_applied[:] = np.linalg.solve(G.T, tau[i])
        mujoco.mj_forward(m, d)
        assert_close(qdd[i], np.linalg.solve(G, d.qacc - turn), REL, f"{name} forward dynamics, state {i}")


def test_mimic_forward_dynamics_solves_mujocos_reduced_equations():
    """MuJoCo enforces a joint equality as a (soft) constraint, not as a reduced coordinate,
    so its constrained ``qacc`` is not exact.  On the coupled manifold (qpos, qvel = G v,
    qacc = G a consistent with the coupling) the reduced equations of motion are exactly
    ``G^T M_mj G a = tau - G^T qfrc_bias`` (the principle of virtual work: the coupling does no
    work along G), which is what a mimic joint's dynamics is; solve them with MuJoCo's M and
    bias and compare."""
    robot, m, q, v, tau, qdd = forward_case("coupling", 4)
    for i in range(len(q)):
        qpos, qvel, _, G = to_mujoco(robot, m, q[i], v[i], np.zeros(robot.nv))
        _, M_mj, bias = mujoco_dynamics(m, qpos, qvel, np.zeros(m.nv))
        expected = np.linalg.solve(G.T @ M_mj @ G, tau[i] - G.T @ bias)
        assert_close(qdd[i], expected, REL, f"coupling forward dynamics, state {i}")


@pytest.mark.parametrize("name", DYNAMIC)
def test_generated_inverse_dynamics_equals_mujocos(name):
    robot, m = load(name), rigid_body_model(name)
    emu = Emulated(robot, ["inverse_dynamics"], np.float64)
    q, v, a = states(robot, 6, 4)
    tau = emu.inverse_dynamics(q, v, a)
    for i in range(len(q)):
        qpos, qvel, qacc, G = to_mujoco(robot, m, q[i], v[i], a[i])
        tau_mj, _, _ = mujoco_dynamics(m, qpos, qvel, qacc)
        assert_close(tau[i], G.T @ tau_mj, REL, f"{name} generated inverse dynamics, state {i}")
    assert_close(tau, grid_core.Reference(robot).inverse_dynamics(q, v, a), REL, f"{name} vs reference")


# -- the model: frames, order, conventions ---------------------------------------------------------

@pytest.mark.parametrize("name", DYNAMIC)
def test_body_and_site_frames_are_mujocos(name):
    """Every MuJoCo body and site is a frame of ours at MuJoCo's world pose (mj_kinematics)."""
    robot, m = load(name), rigid_body_model(name)
    bodies = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) for b in range(1, m.nbody)]
    sites = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SITE, s) for s in range(m.nsite)]
    links = {f.name: f for f in reversed(robot.frames) if f.kind == "link"}  # a joint may share the name
    q, _, _ = states(robot, 7, 3)
    poses = grid_core.Reference(robot).end_effector_pose(q, frames=[links[n] for n in bodies + sites])
    for i in range(len(q)):
        d = mujoco.MjData(m)
        d.qpos[:] = to_mujoco(robot, m, q[i], np.zeros(robot.nv), np.zeros(robot.nv))[0]
        mujoco.mj_kinematics(m, d)
        want = np.tile(np.eye(4), (len(bodies) + len(sites), 1, 1))
        want[:, :3, :3] = np.concatenate([d.xmat[1:], d.site_xmat]).reshape(-1, 3, 3)
        want[:, :3, 3] = np.concatenate([d.xpos[1:], d.site_xpos])
        np.testing.assert_allclose(poses[i], want, rtol=0, atol=1e-12)


def test_joint_order_is_mujocos():
    for name in DYNAMIC:
        robot, m = load(name), rigid_body_model(name)
        movable = [joint_name(m, j) for j in range(m.njnt) if int(m.jnt_type[j]) != FREE]
        assert robot.joint_names == tuple(n for n in movable if n not in robot.mimic_joint_names)


def test_ref_is_the_coordinate_of_the_written_pose():
    """Convention: q is MuJoCo's qpos, so at q = ref (qpos0) each body sits where the file puts
    it: here the arm's base (euler 10 20 30 in the zyx sequence, hinge ref 15 degrees)."""
    robot = load("arm")
    assert robot.nq == 5
    q = np.radians([15.0, 0.0, -40.0, 0.0, 20.0])
    pose = grid_core.Reference(robot).end_effector_pose(q, frames=["base"])[0]
    z, y, x = np.radians([10.0, 20.0, 30.0])  # eulerseq zyx: rotations about moving z, y, x
    R = spatial.axis_angle([0, 0, 1], z) @ spatial.axis_angle([0, 1, 0], y) @ spatial.axis_angle([1, 0, 0], x)
    np.testing.assert_allclose(pose[:3, :3], R, atol=1e-15)
    np.testing.assert_allclose(pose[:3, 3], [0, 0, 0.1], atol=1e-15)
    # and at q = 0 the base is turned by -15 degrees about its hinge (the body z axis)
    pose0 = grid_core.Reference(robot).end_effector_pose(np.zeros(5), frames=["base"])[0]
    np.testing.assert_allclose(pose0[:3, :3], R @ spatial.axis_angle([0, 0, 1], np.radians(-15)), atol=1e-15)


def test_free_joint_is_the_floating_base():
    robot = load("humanoid")
    assert robot.floating_base and (robot.nq, robot.nv) == (28, 27)
    root = robot.bodies[0]
    assert root.jtype is JointType.FLOATING and root.joint.name == "root" and root.name == "torso"
    fixed = load("humanoid", floating_base=False)
    assert not fixed.floating_base and (fixed.nq, fixed.nv) == (21, 21)
    m = rigid_body_model("humanoid")  # welded at its qpos0: the written pose
    pose = grid_core.Reference(fixed).end_effector_pose(np.zeros(21), frames=["torso"])[0]
    w, x, y, z = m.body_quat[1]
    np.testing.assert_allclose(pose[:3, :3], spatial.quat_to_matrix([x, y, z, w]), atol=1e-15)
    np.testing.assert_allclose(pose[:3, 3], m.body_pos[1], atol=1e-15)


def test_several_joints_make_a_chain_of_massless_bodies():
    robot = load("humanoid")
    hip = [robot.body(n) for n in ("hip_x_right", "hip_z_right", "hip_y_right")]
    assert [b.parent for b in hip[1:]] == [hip[0].index, hip[1].index]
    assert hip[0].inertia[5, 5] == 0 and hip[1].inertia[5, 5] == 0
    m = rigid_body_model("humanoid")
    thigh = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "thigh_right")
    assert hip[2].inertia[5, 5] == pytest.approx(m.body_mass[thigh], rel=1e-15)
    assert "thigh_right" in hip[2].links  # the body itself, last in the chain
    assert robot.frame("thigh_right").body == hip[2].index


def test_no_zero_mass_warning_for_the_intermediate_bodies():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid_core.load_robot(str(DATA / "humanoid.xml"), strict_inertia=True)
    assert not [w for w in caught if issubclass(w.category, InertiaWarning)]


def test_joint_equalities_are_mimic_joints():
    robot = load("coupling")
    assert robot.mimic_joint_names == ("finger_right", "thumb_b")
    fingers, thumb = robot.body("finger_right").mimic, robot.body("thumb_b").mimic
    assert robot.bodies[fingers.body].joint.name == "finger_left"
    assert robot.bodies[thumb.body].joint.name == "thumb_a"
    # y - y0 = a0 + a1 (x - x0), y0 and x0 the refs: q_y = a1 q_x + (y0 + a0 - a1 x0)
    assert (fingers.multiplier, fingers.offset) == pytest.approx((1.0, 0.0 + 0.002 - 1.0 * 0.01), abs=1e-15)
    assert (thumb.multiplier, thumb.offset) == pytest.approx(
        (-0.7, np.radians(-25) + 0.1 + 0.7 * np.radians(10)), abs=1e-15)


def test_mimic_states_satisfy_mujocos_equalities():
    """MuJoCo's own equality residuals (efc_pos) vanish on our mimic configurations."""
    robot = load("coupling")
    m = mujoco.MjModel.from_xml_path(str(DATA / "coupling.xml"))
    q, _, _ = states(robot, 8, 4)
    for qi in q:
        d = mujoco.MjData(m)
        d.qpos[:] = to_mujoco(robot, m, qi, np.zeros(robot.nv), np.zeros(robot.nv))[0]
        mujoco.mj_forward(m, d)
        rows = d.efc_type[: d.nefc] == int(mujoco.mjtConstraint.mjCNSTR_EQUALITY)
        assert rows.sum() == 2
        np.testing.assert_allclose(d.efc_pos[: d.nefc][rows], 0.0, atol=1e-15)


def test_inertias_are_mujocos_from_geoms():
    robot, m = load("geom_inertia"), rigid_body_model("geom_inertia")
    total = sum(b.inertia[5, 5] for b in robot.bodies)
    assert total == pytest.approx(m.body_mass[1:].sum(), rel=1e-14) and total > 0
    from lxml import etree

    assert etree.parse(str(DATA / "geom_inertia.xml")).find(".//inertial") is None


def test_what_is_not_rigid_body_dynamics_is_listed_once():
    with pytest.warns(GridWarning) as caught:
        grid_core.load_robot(str(DATA / "arm.xml"))
    lines = [str(w.message) for w in caught if "not part of rigid-body dynamics" in str(w.message)]
    assert lines == [
        (f"{DATA / 'arm.xml'}: not part of rigid-body dynamics, ignored: joint damping (5), "
        "armature (5), joint ranges (1), actuators (2), colliding geoms (1)")
    ]
    robot = load("arm")
    assert (robot.body("j1").joint.lower, robot.body("j1").joint.upper) == pytest.approx(np.radians([-170, 170]))


# -- refused, and hardened ---------------------------------------------------------------------------

def one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_ball_joint_is_refused_naming_type_joint_and_file():
    with pytest.raises(UnsupportedFeatureError) as exc:
        grid_core.load_robot(str(DATA / "ball.xml"))
    assert one_line(exc) == (
        f"{DATA / 'ball.xml'}: <joint name='shoulder'> in body 'pendulum': joint type 'ball' is not "
        "supported (hinge, slide and free are; write a ball as three hinges)"
    )


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


PENDULUM = """<mujoco model="p">{head}<worldbody><body name="b"><joint name="h" axis="0 1 0"/>
<geom type="sphere" size="0.1" pos="0 0 -0.5"/>{body}</body></worldbody>{tail}</mujoco>"""


def pendulum(head="", body="", tail="") -> str:
    return PENDULUM.format(head=head, body=body, tail=tail)


@pytest.mark.parametrize(
    "head, body, message",
    [
        ('<include file="../secret.xml"/>', "", r"<include> \(line 1\): file='../secret.xml' resolves outside"),
        ('<asset><mesh name="m" file="/etc/hostname"/></asset>', "", r"<mesh name='m'> \(line 1\): file='/etc/hostname' resolves outside"),
        ('<compiler meshdir=".."/>', "", r"<compiler> \(line 1\): meshdir='..' resolves outside"),
        ('<compiler meshdir="m"/><asset><mesh name="m" file="../../x.stl"/></asset>', "", "resolves outside"),
        ('<asset><texture name="t" type="cube" fileright="../t.png"/></asset>', "", "fileright='../t.png' resolves outside"),
        ('<asset><mesh name="m" file="http://example.com/m.stl"/></asset>', "", "names a URL or network path"),
        ("", '<joint name="x" type="hinge" bogus="1"/>', r"MuJoCo cannot compile the model: .*bogus"),
        ("", "<geom", "not well-formed XML"),
    ],
)
def test_hostile_models_are_refused_in_one_line(tmp_path, head, body, message):
    path = write(tmp_path / "model", "m.xml", pendulum(head, body))
    write(tmp_path, "secret.xml", "<mujoco/>")
    with pytest.raises(RobotModelError, match=message) as exc:
        load_mjcf_file(path)
    assert one_line(exc).startswith(str(path))


def test_a_symlink_out_of_the_folder_is_refused(tmp_path):
    secret = write(tmp_path, "secret.xml", "<mujoco/>")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "inc.xml").symlink_to(secret)
    path = write(tmp_path / "model", "m.xml", pendulum('<include file="inc.xml"/>'))
    with pytest.raises(RobotModelError, match="file='inc.xml' resolves outside"):
        load_mjcf_file(path)


def test_doctype_is_refused(tmp_path):
    path = write(tmp_path, "m.xml", '<?xml version="1.0"?>\n<!DOCTYPE mujoco [<!ENTITY e "x">]>\n' + pendulum())
    with pytest.raises(RobotModelError, match="DOCTYPE / ENTITY declarations are not allowed in an MJCF"):
        load_mjcf_file(path)


def test_size_cap_covers_the_included_files(tmp_path, monkeypatch):
    inc = write(tmp_path, "inc.xml", "<mujoco><option timestep='0.002'/>" + " " * 400 + "</mujoco>")
    path = write(tmp_path, "m.xml", pendulum('<include file="inc.xml"/>'))
    with pytest.warns(GridWarning, match="colliding geoms"):
        assert load_mjcf_file(path).nv == 1  # inside the folder: fine
    monkeypatch.setenv("GRID_MJCF_MAX_BYTES", str(path.stat().st_size + inc.stat().st_size - 1))
    with pytest.raises(RobotModelError, match=r"over the \d+-byte cap \(raise GRID_MJCF_MAX_BYTES\)"):
        load_mjcf_file(path)


@pytest.mark.parametrize(
    "tail, message",
    [
        ('<equality><joint joint1="h"/></equality>', "a joint locked to a value is not supported"),
        ('<equality><joint joint1="h2" joint2="h" polycoef="0 1 0.5 0 0"/></equality>', "polycoef is not linear"),
    ],
)
def test_unsupported_equalities(tmp_path, tail, message):
    body = '<body name="c" pos="0 0 -0.5"><joint name="h2" axis="1 0 0"/><geom type="sphere" size="0.1"/></body>'
    path = write(tmp_path, "m.xml", pendulum(body=body, tail=tail))
    with pytest.raises(UnsupportedFeatureError, match=message) as exc:
        load_mjcf_file(path)
    assert one_line(exc).startswith(f"{path}: <equality><joint name=")


def test_without_mujoco_one_line_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # import mujoco -> ImportError
    with pytest.raises(UnsupportedFeatureError) as exc:
        load_mjcf_file(DATA / "arm.xml")
    assert one_line(exc) == (
        f"{DATA / 'arm.xml'}: reading MJCF needs the optional mujoco package (pip install grid-rbd[mjcf])"
    )


# -- how a source reaches the loader -----------------------------------------------------------------

def test_claimed_by_content_and_by_prefix(tmp_path):
    text = (DATA / "quadruped.xml").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GridWarning)
        assert grid_core.load_robot(write(tmp_path, "q.model", text)).nv == 12  # any name: the root tells
        assert grid_core.load_robot(f"mjcf:{write(tmp_path, 'q.urdf', text)}").nv == 12  # .urdf: say it
    urdf = Path(grid_core.__file__).resolve().parent.parent / "robots" / "iiwa14.urdf"
    renamed = write(tmp_path, "iiwa.xml", urdf.read_text())
    assert grid_core.load_robot(renamed).nv == 7  # a URDF named .xml still goes to the URDF loader


def test_a_mistaken_file_names_both_formats(tmp_path):
    path = write(tmp_path, "model.xml", "<sdf version='1.9'><model name='x'/></sdf>")
    with pytest.raises(RobotNotFoundError) as exc:
        grid_core.load_robot(path)
    assert one_line(exc) == (
        f"'{path}' is a file no robot loader recognises: not a URDF (root <robot>), nor a MJCF "
        "(root <mujoco>) (check the file, or name its loader: LOADER:PATH)"
    )


# -- a plugin like any other --------------------------------------------------------------------------

def test_registered_through_the_entry_point_group():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="grid")}
    assert eps["mjcf"] == "grid_plugins.mjcf"
    info = grid_core.hooks.registry().info_of("loader", "mjcf")
    assert (info.name, info.distribution, info.module) == ("mjcf", "grid-rbd", "grid_plugins.mjcf")


def grid(*args, env=None):
    return CliRunner().invoke(main, list(args), prog_name="grid", env=env)


def test_blocked_by_name_like_any_plugin(monkeypatch):
    monkeypatch.delenv("GRID_DISABLE_PLUGINS", raising=False)
    assert "mjcf" not in build_registry(blocked=["mjcf"]).loaders
    assert "urdf" in build_registry(blocked=["mjcf"]).loaders
    source = str(DATA / "humanoid.xml")
    for args, env in ((["--disable-plugin", "mjcf"], None), ([], {"GRID_DISABLE_PLUGINS": "mjcf"})):
        result = grid(*args, "info", source, env=env)
        assert result.exit_code == 1, result.output
        assert result.stderr.splitlines() == [
            (f"grid: error: '{source}' is a file no robot loader recognises: not a URDF (root <robot>) "
            "(check the file, or name its loader: LOADER:PATH)")
        ]
    assert grid("info", source).exit_code == 0


# -- the command line, unchanged ---------------------------------------------------------------------

def test_grid_info_and_build_on_mjcf(tmp_path):
    result = grid("info", str(DATA / "humanoid.xml"))
    assert result.exit_code == 0, result.output
    assert "nq: 28" in result.stdout and "nv: 27" in result.stdout and "hip_y_right" in result.stdout
    out = tmp_path / "grid.cuh"
    result = grid("build", str(DATA / "quadruped.xml"), "-o", str(out), "-a", "inverse_dynamics")
    assert result.exit_code == 0, result.output
    assert "inverse_dynamics" in out.read_text()


def test_cli_error_is_one_line():
    result = grid("info", str(DATA / "ball.xml"))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        (f"grid: error: {DATA / 'ball.xml'}: <joint name='shoulder'> in body 'pendulum': joint type "
        "'ball' is not supported (hinge, slide and free are; write a ball as three hinges)")
    ]


# -- the rotation conversion the loader relies on -------------------------------------------------------

def test_matrix_to_rpy_rebuilds_every_rotation_gimbal_lock_included():
    rng = np.random.default_rng(9)
    rotations = [spatial.quat_to_matrix(rng.normal(size=4)) for _ in range(500)]
    for gap in (0.0, 1e-16, 3e-16, 1e-14, 1e-12, 1e-10, 1e-8, 1e-6, 1e-3):
        for sign in (1, -1):
            r, y = rng.uniform(-np.pi, np.pi, 2)
            rotations.append(spatial.rpy_to_matrix([r, sign * (np.pi / 2 - gap), y]))
    for R in rotations:
        rpy = spatial.matrix_to_rpy(R)
        assert -np.pi / 2 <= rpy[1] <= np.pi / 2
        np.testing.assert_allclose(spatial.rpy_to_matrix(rpy), R, rtol=0, atol=1e-15)
