"""The peer benchmark (benchmarks/peers.py) on the CPU: MuJoCo's model of each robot is ours,
the coordinate conversions are exact, and MJX agrees with our generated code and our Reference.

The conversions are held against MuJoCo's C library in float64 (``mj_inverse``, the dense
``qM``, ``mj_forward``'s ``qacc``: rel 1e-9 against our Reference, in our coordinates) on a
fixed-base arm and two floating-base robots; MJX itself in float32 on XLA:CPU against
``CpuHandle`` and the Reference at the benchmark's own bound (rel 1e-4), on iiwa14 and go2.
MJX on XLA:CPU compiles slowly (seconds per function), so the MJX checks take few sizes.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import warnings
from pathlib import Path

import mujoco
import numpy as np
import pytest

import grid_core
from grid_core.testing import assert_close, random_state
from tests.model.test_mjcf import mujoco_dynamics  # MuJoCo's inverse dynamics and dense M at one state

ROOT = Path(__file__).resolve().parent.parent
# MJX's programs unroll the kinematic tree; XLA:CPU's fusion of a deep chain (iiwa14) costs tens
# of seconds of compilation and a slow program, so the untimed checks compile without it
FAST_COMPILE = {"xla_disable_hlo_passes": "fusion", "xla_backend_optimization_level": 0}


def _module(name: str, path: Path):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


peers = _module("grid_peers", ROOT / "benchmarks" / "peers.py")


def load(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return grid_core.load_robot(name)


@pytest.fixture(scope="module")
def models():
    cache = {}

    def get(name):
        if name not in cache:
            robot = load(name)
            cache[name] = robot, peers.mujoco_model(robot, peers.urdf_text(name))
        return cache[name]

    return get


def mujoco_forward(m, qpos, qvel, qfrc):
    """MuJoCo's C library at one state: ``qacc`` of ``mj_forward`` under ``qfrc_applied``."""
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:], d.qfrc_applied[:] = qpos, qvel, qfrc
    mujoco.mj_forward(m, d)
    return d.qacc.copy()


@pytest.mark.parametrize("name", ["iiwa14", "go2", "g1"])
def test_the_model_is_ours_and_the_conversions_are_exact(name, models):
    robot, m = models(name)
    peers.check_model(robot, m)  # raises on any difference
    assert (m.nq, m.nv) == (robot.nq, robot.nv)
    assert bool(robot.floating_base) == bool(np.any(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE))
    c = peers.Coordinates(robot, m)
    ref = grid_core.Reference(robot)
    q, v, a = random_state(robot, np.random.default_rng(7), 5)
    tau = np.random.default_rng(8).uniform(-3, 3, (5, robot.nv))
    qpos, qvel, qacc, qfrc = c.qpos(q), c.to_mujoco(q, v), c.to_mujoco(q, a, turn_v=v), c.to_mujoco(q, tau)
    tau_mj, M_mj, _ = (np.stack(x) for x in zip(*map(mujoco_dynamics, [m] * 5, qpos, qvel, qacc)))
    qacc_mj = np.stack([mujoco_forward(m, *s) for s in zip(qpos, qvel, qfrc)])
    assert_close(c.from_mujoco(q, tau_mj), ref.inverse_dynamics(q, v, a), 1e-9, f"{name} inverse dynamics")
    assert_close(c.mass_from_mujoco(q, M_mj), ref.crba(q), 1e-9, f"{name} mass matrix")
    assert_close(c.from_mujoco(q, qacc_mj, turn_v=v), ref.forward_dynamics(q, v, tau), 1e-9, f"{name} forward dynamics")
    # there and back again
    np.testing.assert_allclose(c.from_mujoco(q, qvel), v, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c.from_mujoco(q, qacc, turn_v=v), a, rtol=0, atol=1e-12)


def test_the_free_joint_conventions_by_hand(models):
    """One state worked out by hand: a base turned 90 degrees about z, moving along its own x
    while turning about its own z."""
    robot, m = models("go2")
    c = peers.Coordinates(robot, m)
    q = robot.neutral()[None].copy()
    s = np.sqrt(0.5)
    q[0, 3:7] = [0.0, 0.0, s, s]  # x y z w: 90 degrees about z
    v = np.zeros((1, robot.nv))
    v[0, 0], v[0, 5] = 1.0, 2.0  # linear along the base x; angular about z
    base = m.jnt_qposadr[0]
    np.testing.assert_allclose(c.qpos(q)[0, base + 3 : base + 7], [s, 0.0, 0.0, s])  # w x y z
    qvel = c.to_mujoco(q, v)[0]
    np.testing.assert_allclose(qvel[:6], [0.0, 1.0, 0.0, 0.0, 0.0, 2.0], atol=1e-15)  # world-frame y; body z
    # zero body acceleration: the world-frame linear acceleration is the centripetal turn, R (w x v)
    qacc = c.to_mujoco(q, np.zeros((1, robot.nv)), turn_v=v)[0]
    np.testing.assert_allclose(qacc[:3], [-2.0, 0.0, 0.0], atol=1e-15)
    # a force along the base x is a world-frame force along y
    f = np.zeros((1, robot.nv))
    f[0, 0] = 3.0
    np.testing.assert_allclose(c.to_mujoco(q, f)[0, :3], [0.0, 3.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(c.from_mujoco(q, c.to_mujoco(q, f)), f, atol=1e-15)


def test_a_model_that_is_not_ours_is_refused_naming_what_differs(models):
    robot, m = models("iiwa14")
    heavier = copy.deepcopy(m)
    heavier.body_mass[heavier.body(robot.bodies[3].name).id] *= 1.01
    with pytest.raises(peers.ModelMismatch, match="total mass"):
        peers.check_model(robot, heavier)
    moved = copy.deepcopy(m)  # the same total mass, some of it moved from one body to the next
    moved.body_mass[moved.body(robot.bodies[2].name).id] += 0.01
    moved.body_mass[moved.body(robot.bodies[3].name).id] -= 0.01
    with pytest.raises(peers.ModelMismatch, match=f"body '{robot.bodies[2].name}': mass"):
        peers.check_model(robot, moved)
    flipped = copy.deepcopy(m)
    flipped.jnt_axis[2] *= -1
    with pytest.raises(peers.ModelMismatch, match=f"joint '{robot.bodies[2].joint.name}' turns about"):
        peers.check_model(robot, flipped)


def test_mjx_agrees_with_ours_and_the_reference_in_float32():
    """The rows the benchmark writes, untimed, on iiwa14: ours (CpuHandle) against MJX at rel
    1e-4, both against the float64 Reference; where our emitter has not landed, MJX against the
    Reference.  (go2 goes through the whole command below.)"""
    side = peers.prepare("iiwa14", np.float32, "cpu", max_n=6)
    for qty in peers.QUANTITIES:
        row = peers.compare(side, qty, 6, np.float32, repeats=0, warmup=0, ref_states=4, timing=False,
                            peer_compiler_options=FAST_COMPILE)
        assert (row["robot"], row["N"], row["algorithm"]) == ("iiwa14", 6, qty.algorithm)
        assert row["ref_err_peer"] <= 1e-4, row
        if peers.our_method(side.handle, qty) is not None:
            assert row["rel_err"] <= 1e-4 and row["ref_err_grid"] <= 1e-4, row
            assert row["grid_call"] in qty.ours
        else:
            assert "rel_err" not in row and "grid_us" not in row


def test_the_command_writes_the_peer_rows_and_the_docs_render_them(tmp_path, capsys):
    """go2 through the command line, timed: every row the handle can compute, its agreement
    within the bound, the JSON the docs read, and the docs' section from it."""
    out = tmp_path / "peers.json"
    rc = peers.main(["--robots", "go2", "--sizes", "6", "--repeats", "3", "--warmup", "1", "--ref-states", "4",
                     "--backend", "cpu", "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert {"date", "gpu", "commit", "versions", "peers", "peers_published"} <= set(data)
    rows = data["peers"]
    handle_has = [q.algorithm for q in peers.QUANTITIES
                  if any(grid_core.algorithms()[n].has_emitter() for n in q.ours)]
    assert [(r["robot"], r["N"], r["algorithm"]) for r in rows] == [("go2", 6, a) for a in handle_has]
    assert {"inverse_dynamics", "crba"} <= set(handle_has)
    for r in rows:
        for key in ("grid_us", "peer", "peer_us", "rel_err", "ref_err_grid", "ref_err_peer"):
            assert r[key] is not None, key
        assert max(r["rel_err"], r["ref_err_grid"], r["ref_err_peer"]) <= 1e-4, r
        assert r["ratio"] == pytest.approx(r["peer_us"] / r["grid_us"])
    assert all(p["label"] == "published, not measured here" for p in data["peers_published"])
    printed = capsys.readouterr().out
    assert "MJX/grid" in printed and "published, not measured here" in printed

    docs = _module("grid_docs", ROOT / "docs" / "_ext" / "grid_docs.py")
    text = "\n".join(docs.peers_section(data, out, tmp_path))
    assert "go2" in text and "MuJoCo Warp" in text and "published, not measured here" in text
    assert f"{rows[0]['peer_us'] / rows[0]['grid_us']:.1f}x" in text
    for r in rows:
        assert (tmp_path / f"bench_peers_{out.stem}_{r['algorithm']}.png").is_file()
