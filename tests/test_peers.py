"""The peer benchmark (benchmarks/peers.py) on the CPU: MuJoCo's model of each robot is ours,
the coordinate conversions are exact, and MJX agrees with our generated code and our Reference.

The conversions are held against MuJoCo's C library in float64 (``mj_inverse``, the dense
``qM``, ``mj_forward``'s ``qacc``: rel 1e-9 against our Reference, in our coordinates) on a
fixed-base arm and two floating-base robots; MJX itself in float32 on XLA:CPU against
``CpuHandle`` and the Reference at the benchmark's own bound (rel 1e-4), on iiwa14 and go2.
MJX on XLA:CPU compiles slowly (seconds per function; its reverse-mode Jacobians of go2 tens of
seconds), so the MJX checks take few sizes and one gradient row; the command's float64 run of
both gradient rows on iiwa14, go2 and g1 is the benchmark's own (rel 1e-9).
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import mujoco
import numpy as np
import pytest

import grid_core
from conftest import script_module
from grid_core.testing import assert_close, random_state
from tests.model.test_mjcf import mujoco_dynamics  # MuJoCo's inverse dynamics and dense M at one state

ROOT = Path(__file__).resolve().parent.parent
# MJX's programs unroll the kinematic tree; XLA:CPU's fusion of a deep chain (iiwa14) costs tens
# of seconds of compilation and a slow program, so the untimed checks compile without it
FAST_COMPILE = {"xla_disable_hlo_passes": "fusion", "xla_backend_optimization_level": 0}


peers = script_module("grid_peers", ROOT / "benchmarks" / "peers.py")


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


def test_the_conversions_run_on_jax_arrays_and_the_chart_is_ours_to_first_order(models):
    """The gradient rows differentiate the same conversions on jax.numpy arrays: there they give
    numpy's numbers; the chart MJX's Jacobian is taken in is ``grid_core.testing.integrate``'s
    (Pinocchio's) to first order."""
    import jax.numpy as jnp

    from grid_core.testing import integrate

    robot, m = models("go2")
    c = peers.Coordinates(robot, m)
    q, v, a = random_state(robot, np.random.default_rng(9), 5)
    M = np.random.default_rng(10).normal(size=(5, robot.nv, robot.nv))
    dq = 1e-4 * np.random.default_rng(11).normal(size=(5, robot.nv))
    J = [jnp.asarray(x, dtype=jnp.float32) for x in (q, v, a, M, dq)]
    pairs = [(c.qpos(q), c.qpos(J[0])), (c.to_mujoco(q, a, turn_v=v), c.to_mujoco(J[0], J[2], turn_v=J[1])),
             (c.from_mujoco(q, a, turn_v=v), c.from_mujoco(J[0], J[2], turn_v=J[1])),
             (c.mass_from_mujoco(q, M), c.mass_from_mujoco(J[0], J[3])), (c.retract(q, dq), c.retract(J[0], J[4]))]
    for ours, theirs in pairs:
        assert isinstance(theirs, jnp.ndarray)
        assert_close(np.asarray(theirs), ours, 1e-6, "jax.numpy against numpy")
    np.testing.assert_array_equal(c.retract(q, np.zeros_like(dq)), q)
    moved = c.retract(q, dq)
    np.testing.assert_allclose(np.linalg.norm(moved[:, 3:7], axis=1), 1.0, rtol=1e-15)
    # second order apart: |dq|^2 is 1e-8 here
    np.testing.assert_allclose(moved, np.stack([integrate(robot, *s) for s in zip(q, dq)]), rtol=0, atol=1e-9)


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
    for qty in [q for q in peers.QUANTITIES if not isinstance(q, peers.Gradient)]:
        row = peers.compare(side, qty, 6, np.float32, repeats=0, warmup=0, ref_states=4, timing=False,
                            peer_compiler_options=FAST_COMPILE)
        assert (row["robot"], row["N"], row["algorithm"]) == ("iiwa14", 6, qty.algorithm)
        assert row["ref_err_peer"] <= 1e-4, row
        if peers.our_method(side.handle, qty) is not None:
            assert row["rel_err"] <= 1e-4 and row["ref_err_grid"] <= 1e-4, row
            assert row["grid_call"] in qty.ours
        else:
            assert "rel_err" not in row and "grid_us" not in row


@pytest.mark.xdist_group("robot-go2")  # with the command's run below: go2's CPU library built once
def test_mjx_gradient_agrees_with_ours_on_a_floating_base_in_chunks(monkeypatch):
    """A gradient row, timed, on go2 in float32: MJX's jacrev through mjx.forward in the tangent
    chart against our forward_dynamics_gradient and both against the Reference (d/dq and d/dqd in
    one relative error), the batch through jax.lax.map in chunks of 2 states."""
    qty = next(q for q in peers.QUANTITIES if q.algorithm == "forward_dynamics_gradient")
    side = peers.prepare("go2", np.float32, "cpu", max_n=4)
    nv = side.robot.nv
    monkeypatch.setattr(peers, "PEER_WORKSPACE", 2 * peers.WORDS_PER_STATE * 4 * nv * nv)
    assert qty.chunk(nv, np.float32) == 2
    row = peers.compare(side, qty, 4, np.float32, repeats=1, warmup=0, ref_states=4,
                        peer_compiler_options=FAST_COMPILE)
    assert row["peer_chunk"] == 2 and row["grid_call"] == "forward_dynamics_gradient"
    assert "jacrev" in row["peer_call"] and row["peer_us"] > 0 and row["grid_us"] > 0
    assert max(row["rel_err"], row["ref_err_grid"], row["ref_err_peer"]) <= 1e-4, row
    assert peers.agrees(row)


@pytest.mark.xdist_group("robot-go2")
def test_the_command_writes_the_peer_rows_and_the_docs_render_them(tmp_path, capsys):
    """go2 through the command line, timed: every row of values the handle can compute (the
    gradient rows' compilation is the test above's), its agreement within the bound, the JSON the
    docs read, and the docs' section from it."""
    out = tmp_path / "peers.json"
    values = [q.algorithm for q in peers.QUANTITIES if not isinstance(q, peers.Gradient)]
    rc = peers.main(["--robots", "go2", "--sizes", "6", "--repeats", "3", "--warmup", "1", "--ref-states", "4",
                     "--backend", "cpu", "--algorithms", ",".join(values), "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert {"date", "gpu", "commit", "versions", "peers", "peers_published"} <= set(data)
    rows = data["peers"]
    handle_has = [q.algorithm for q in peers.QUANTITIES
                  if q.algorithm in values and any(grid_core.algorithms()[n].has_emitter() for n in q.ours)]
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

    docs = script_module("grid_docs", ROOT / "docs" / "_ext" / "grid_docs.py")
    text = "\n".join(docs.peers_section(data, out, tmp_path))
    assert "go2" in text and "MuJoCo Warp" in text and "published, not measured here" in text
    assert f"{rows[0]['peer_us'] / rows[0]['grid_us']:.1f}x" in text
    for r in rows:
        assert (tmp_path / f"bench_peers_{out.stem}_{r['algorithm']}.png").is_file()
