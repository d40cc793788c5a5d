"""Peers side by side: GRiD against MJX on the same robots, states and device, in one run.

For each robot the URDF is compiled by MuJoCo (visuals and collisions stripped; joint damping,
stiffness, armature and friction zero; contacts, limits, constraints and passive forces off;
gravity as ours; a free joint on the root link of a floating-base robot) and checked against our
model body by body (joint names and types, axes, placements, masses, centres of mass and
inertias; any difference stops the run).  The same random states (``grid_core.testing.random_state``)
go to both sides, each in its own coordinates (:class:`Coordinates`): ours are Pinocchio's
(``q = [pos, quat xyzw]``, ``v = [linear; angular]`` both in the base frame), MuJoCo's free joint
takes ``qpos = [pos, quat wxyz]`` and ``qvel = [linear velocity in the world frame, angular velocity
in the body frame]``.  Each quantity is one entry of :data:`QUANTITIES`: our algorithm, how MJX
computes it, and the conversions of its inputs and output.  The rows: ``inverse_dynamics`` (MJX's
RNE with accelerations), ``crba`` (its mass matrix), ``forward_dynamics`` (``mjx.forward``'s
``qacc``), and the first derivatives of the two dynamics, ours analytic against MJX's automatic
differentiation: ``inverse_dynamics_gradient`` (``dtau/dq, dtau/dqd``; ``jax.jacrev`` through
``mjx.inverse``'s ``qfrc_inverse``) and ``forward_dynamics_gradient`` (``dqdd/dq, dqdd/dqd``;
``jax.jacrev`` through ``mjx.forward``'s ``qacc``).

Our derivatives in ``q`` are in the tangent space, Pinocchio's convention: a free-flyer moves as
``q (+) dq = q * exp6(dq)``, ``dq = [linear; angular]`` in the base frame; other joints add.  MJX's
Jacobian is taken in the same chart (:class:`Gradient`): per state, ``jax.jacrev`` of
``f(dq, v) = ours_from_mujoco(mjx(mujoco_from_ours(q (+) dq, v, x)))`` at ``dq = 0``, ``x`` (qdd or
tau, ours) held; the chart (:meth:`Coordinates.retract`: ``pos + R dq_lin``,
``quat * normalise([dq_ang / 2, 1])``) agrees with ``exp6`` to first order, and the conversions,
which depend on ``q`` through ``R`` and on ``v`` through the rate term, are inside the
differentiated function (the same :class:`Coordinates` code, on ``jax.numpy`` arrays there).  The
two Jacobians make one relative error.  MJX's reverse-mode Jacobians of a batch take about
``1000 nv^2`` words of XLA's working memory per state (4.8 MB per state of g1 in float32 on
XLA:CPU: 316 GB for 65536 states), so a batch beyond :meth:`Gradient.chunk` states (2048 of g1 in
float32, 1024 in float64, 8192 of go2; within :data:`PEER_WORKSPACE`, 16 GiB) goes through
``jax.lax.map`` a chunk at a time, each chunk one vmapped jacrev; the row then records
``peer_chunk`` (XLA:CPU plans 9.9 GB of temp buffers for 65536 states of g1 that way, in either
precision; not measured on a GPU yet).

Timing, the same on both sides: inputs resident on the device, each side one ``jax.jit`` (ours
through its XLA FFI call, so both pay JAX's dispatch once), warm-up, then the median of many
calls, each synchronised with ``block_until_ready``.  On a CUDA device our kernel alone is timed
too, as a CUDA-graph replay of our call on torch tensors (``grid_kernel_us``).  A call on its own
pays JAX's dispatch whole (about 60 µs through our FFI call on the H100, where iiwa14's kernel
takes 8), which caps the ratio for a small robot; so up to ``--calls-max-n`` states each side is
timed again as ``--calls`` calls on distinct batches in one ``jax.jit`` (``*_calls``), as inside
a user's jitted rollout or training step.  Agreement in the
same run: ours against MJX over the whole batch (``rel_err``), and each against our float64
``Reference`` on the first ``--ref-states`` states (``ref_err_grid``, ``ref_err_peer``), all in
our coordinates.  MuJoCo Warp is not measured here (warp-lang is about 149 MB, too large to carry
to the GPU machine): its published figures are quoted, labelled as such (:data:`PUBLISHED`).

On the GPU machine (Python 3.12, JAX 0.11.2, numpy 2.5, no network) the wheels of ``.whl/``
travel (``carry: [".whl"]``: ``mujoco`` 4.0.0 and ``mujoco-core`` 4.0.0 for cp312, ``mujoco-mjx``
3.17.0, ``trimesh`` 5.2.0, 17 MB; ``mujoco-studio``, a renderer, is not needed; absl-py, etils,
scipy and the rest are on the machine), and the command begins with::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;

then, with the package installed (``benchmarks/gpu_check.sh`` does it; alone,
``python3 -m pip install -q --no-deps --no-build-isolation -e . --root-user-action=ignore``)::

    python3 benchmarks/peers.py --robots iiwa14,go2,g1 --sizes 16,256,1024,4096,16384,65536 --json OUT

(one robot at a time, to the same ``--json`` with ``--merge``, where one command would run too long).

Without a GPU it runs the same comparison on the CPU (``CpuHandle``, XLA:CPU).  ``--json`` writes
``{"date", "gpu", "commit", ..., "peers": [rows]}``, rewritten after each robot; a row is
``{robot, N, algorithm, grid_us, peer, peer_us, rel_err, ref_err_grid, ref_err_peer}`` and more.
``--algorithms`` picks rows.  The exit status is 1 when a row's agreement exceeds :data:`TOLERANCE`.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import attrs
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ("iiwa14", "go2", "g1")
SIZES = (16, 256, 1024, 4096, 16384, 65536)
# MJX's working memory for the gradient rows' Jacobians, and its estimate per state (Gradient.chunk):
# 1000 nv^2 words, from XLA:CPU's temp buffers in float32, 0.13 / 1.1 / 4.8 MB per state of
# iiwa14 / go2 / g1 (nv 7 / 18 / 35); not measured on a GPU yet
PEER_WORKSPACE = 16 * 2**30
WORDS_PER_STATE = 1000  # per nv^2
TOLERANCE = {"float32": 1e-4, "float64": 1e-9}  # the validation ladder, relative error
AGREEMENTS = ("rel_err", "ref_err_grid", "ref_err_peer")  # ours vs the peer, each vs the Reference


def agrees(row: dict) -> bool:
    """Every agreement of a row measured and within the ladder's tolerance of its precision."""
    return all(row.get(k) is not None and row[k] <= TOLERANCE[row["dtype"]] for k in AGREEMENTS)
GRAPH_CALLS = 20  # calls per CUDA graph when timing our kernel alone

# ANCHORS §E: MuJoCo Warp's published nightly, RTX 6000 Ada, 2026-08-21, ns per world.
PUBLISHED = [
    {"peer": "MuJoCo Warp", "robot": robot, "worlds": worlds, "algorithm": alg, "ns_per_world": ns,
     "gpu": "RTX 6000 Ada", "date": "2026-08-21", "source": "MuJoCo Warp nightly benchmarks",
     "label": "published, not measured here"}
    for robot, worlds, figures in (("Franka Panda", 32768, (3.5, 3.2, 42.0)), ("Unitree G1", 8192, (11.3, 13.4, 394.0)))
    for alg, ns in zip(("inverse_dynamics", "crba", "full step"), figures)
]


class ModelMismatch(RuntimeError):
    """MuJoCo's model of a robot is not ours: the comparison would be meaningless."""


# -- the robot, compiled by MuJoCo --------------------------------------------------------------


def urdf_text(name: str) -> str:
    """The URDF of a bundled robot name or a URDF path."""
    import importlib.resources

    from grid_plugins.bundled import manifest

    entry = manifest().get(name)
    if entry is not None:
        return importlib.resources.files("grid_robots").joinpath(entry["file"]).read_text()
    path = Path(name)
    if path.suffix == ".urdf" and path.is_file():
        return path.read_text()
    raise SystemExit(f"peers: '{name}' is neither a bundled robot ({', '.join(manifest())}) nor a .urdf file")


def mujoco_model(robot, urdf: str):
    """The MjModel of ``urdf`` with only rigid-body dynamics left (module docstring)."""
    import mujoco
    from lxml import etree

    from grid_core.algorithm import DEFAULT_GRAVITY

    root = etree.fromstring(urdf.encode(), etree.XMLParser(resolve_entities=False, no_network=True))
    for element in [e for tag in ("visual", "collision") for e in root.iter(tag)]:
        element.getparent().remove(element)
    spec = mujoco.MjSpec.from_string(etree.tostring(root, encoding="unicode"))
    spec.compiler.alignfree = False  # the free body's frame stays the root link's
    spec.compiler.balanceinertia = False
    spec.compiler.boundmass = spec.compiler.boundinertia = 0.0
    if robot.floating_base:
        spec.body(robot.bodies[0].name).add_freejoint()
    for joint in spec.joints:
        joint.damping = np.zeros(3)
        joint.stiffness = np.zeros(3)
        joint.armature = 0.0
        joint.frictionloss = 0.0
        joint.limited = mujoco.mjtLimited.mjLIMITED_FALSE
    off = mujoco.mjtDisableBit
    for bit in (off.mjDSBL_CONTACT, off.mjDSBL_LIMIT, off.mjDSBL_CONSTRAINT, off.mjDSBL_EQUALITY,
                off.mjDSBL_FRICTIONLOSS, off.mjDSBL_SPRING, off.mjDSBL_DAMPER, off.mjDSBL_ACTUATION):
        spec.option.disableflags |= bit
    spec.option.gravity = np.array(DEFAULT_GRAVITY)
    return spec.compile()


def _close(a, b) -> bool:
    return np.allclose(a, b, rtol=1e-6, atol=1e-9)


def check_model(robot, m) -> None:
    """Raise :class:`ModelMismatch` unless MuJoCo's bodies and joints are ours: the same nv,
    joints (names, types, axes), body placements, masses, centres of mass and inertias."""
    import mujoco

    from grid_core.model import JointType
    from grid_core.model.spatial import inertia_parts, split_plux

    def fail(what: str) -> None:
        raise ModelMismatch(f"peers: MuJoCo's model of {robot.name} differs from ours: {what}")

    if (m.nq, m.nv) != (robot.nq, robot.nv):
        fail(f"nq, nv = {m.nq}, {m.nv} (ours {robot.nq}, {robot.nv})")
    if robot.has_mimic:
        fail("mimic joints (MuJoCo couples them by equality constraints, which are off here)")
    ours_mass = sum(inertia_parts(b.inertia)[0] for b in robot.bodies)
    if not _close(m.body_mass.sum(), ours_mass):
        fail(f"total mass {m.body_mass.sum():.9g} kg (ours {ours_mass:.9g})")
    kinds = {JointType.FLOATING: mujoco.mjtJoint.mjJNT_FREE, JointType.PRISMATIC: mujoco.mjtJoint.mjJNT_SLIDE}
    ids = {-1: 0}
    for b in robot.bodies:
        k = ids[b.index] = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b.name)
        if k < 0:
            fail(f"no body '{b.name}'")
        if m.body_parentid[k] != ids[b.parent]:
            fail(f"body '{b.name}' hangs from '{m.body(m.body_parentid[k]).name}'")
        if m.body_jntnum[k] != 1:
            fail(f"body '{b.name}' has {m.body_jntnum[k]} joints")
        j = m.body_jntadr[k]
        if m.joint(j).name != b.joint.name and b.jtype is not JointType.FLOATING:
            fail(f"body '{b.name}' moves by joint '{m.joint(j).name}', ours by '{b.joint.name}'")
        if m.jnt_type[j] != kinds.get(b.jtype, mujoco.mjtJoint.mjJNT_HINGE):
            fail(f"joint '{b.joint.name}' is of MuJoCo type {m.jnt_type[j]}, ours {b.jtype.value}")
        if b.jtype is not JointType.FLOATING and not (_close(m.jnt_axis[j], b.axis) and _close(m.jnt_pos[j], 0)):
            fail(f"joint '{b.joint.name}' turns about {m.jnt_axis[j]} at {m.jnt_pos[j]} (ours {b.axis} at 0)")
        E, r = split_plux(b.Xtree)
        R = np.empty(9)
        mujoco.mju_quat2Mat(R, m.body_quat[k])
        if not (_close(m.body_pos[k], r) and _close(R.reshape(3, 3), E.T)):
            fail(f"body '{b.name}' is placed at {m.body_pos[k]}, quat {m.body_quat[k]} (ours {r}, E {E.tolist()})")
        mass, com, I_com = inertia_parts(b.inertia)
        mujoco.mju_quat2Mat(R, m.body_iquat[k])
        Ri = R.reshape(3, 3)
        mine = (m.body_mass[k], m.body_ipos[k], Ri @ np.diag(m.body_inertia[k]) @ Ri.T)
        if not all(_close(x, y) for x, y in zip(mine, (mass, com, I_com))):
            fail(f"body '{b.name}': mass {mine[0]:.9g}, com {mine[1]}, inertia {mine[2].tolist()} "
                 f"(ours {mass:.9g}, {com}, {I_com.tolist()})")


# -- coordinates ----------------------------------------------------------------------------------


def _array(x):
    """``(x, its array module)``: a JAX array or tracer stays JAX's (the conversions below run
    inside ``jax.jit`` and ``jax.jacrev``), anything else becomes a float64 numpy array."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__array_namespace__"):
        return np.asarray(x, dtype=np.float64), np
    return x, x.__array_namespace__()


def _replace(x, s: slice, block, axis: int = 1):
    """``x`` with its entries ``s`` along ``axis`` replaced by ``block``, as a new array."""
    xp = _array(x)[1]
    at = (slice(None),) * axis
    return xp.concatenate([x[at + (slice(0, s.start),)], block, x[at + (slice(s.stop, None),)]], axis=axis)


def _rotations(quat_xyzw):
    """``(N, 3, 3)`` rotation matrices (body to world) of unit quaternions ``(N, 4)`` in x y z w:
    ``2 u u^T + (w^2 - u.u) I + 2 w [u]x``."""
    xp = _array(quat_xyzw)[1]
    u, w = quat_xyzw[:, :3], quat_xyzw[:, 3]
    s = w * w - xp.sum(u * u, axis=1)
    x, y, z = (2.0 * w * u[:, i] for i in range(3))  # 2 w u
    skew = ((0.0, -z, y), (z, 0.0, -x), (-y, x, 0.0))
    return xp.stack([xp.stack([2.0 * u[:, i] * u[:, j] + (s if i == j else skew[i][j]) for j in range(3)], axis=1)
                     for i in range(3)], axis=1)


def _quat_mul(a, b):
    """The quaternion products ``a b`` of ``(N, 4)`` quaternions in x y z w."""
    xp = _array(a)[1]
    (ax, ay, az, aw), (bx, by, bz, bw) = (tuple(p[:, i] for i in range(4)) for p in (a, b))
    return xp.stack([aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz], axis=1)


def _apply(R, x):
    return _array(x)[1].einsum("nij,nj->ni", R, x)


class Coordinates:
    """Our (q, v, a, tau, M) as MuJoCo's (qpos, qvel, qacc, qfrc, qM) and back, batched.

    Joint for joint by name, hinges and slides carry the same numbers.  The free joint:
    ``qpos = [pos, w x y z]``; ``qvel = G v`` with ``G = diag(R, I)`` on the base block (``R`` body
    to world: MuJoCo's linear velocity is in the world frame, its angular velocity in the body
    frame, as ours), so ``qacc = G a + [R (omega x v_lin); 0]`` (the rate of ``R``); generalized
    forces map by the transpose (``tau = G^T qfrc``, and ``qfrc = G tau`` as ``G`` is orthogonal),
    the mass matrix as ``M = G^T qM G``.  Every conversion is a function of its arguments in their
    own array module: numpy (float64) here, ``jax.numpy`` inside a traced function, where the
    gradient rows differentiate them (they depend on ``q`` through ``R``, on ``v`` through the
    rate term).
    """

    def __init__(self, robot, m):
        from grid_core.model import JointType

        self.perm = np.empty(robot.nv, dtype=np.intp)  # our dof k is MuJoCo's dof perm[k]
        self.qpos_src = np.empty(robot.nq, dtype=np.intp)  # MuJoCo's qpos j is our q[qpos_src[j]]
        self.step_src = np.full(robot.nq, robot.nv, dtype=np.intp)  # our q i moves by dq[step_src[i]] (nv: none)
        self.free = None  # (our q index, MuJoCo's qpos address, our linear dofs) of the free joint
        for b in robot.bodies:
            k = m.body_jntadr[m.body(b.name).id]
            self.perm[b.v_index : b.v_index + b.nv] = m.jnt_dofadr[k] + np.arange(b.nv)
            j = int(m.jnt_qposadr[k])
            if b.jtype is JointType.FLOATING:
                self.free = (b.q_index, j, slice(b.v_index, b.v_index + 3))
                self.qpos_src[j : j + 7] = b.q_index + np.array([0, 1, 2, 6, 3, 4, 5])  # w x y z from x y z w
            else:
                self.qpos_src[j] = b.q_index
                self.step_src[b.q_index] = b.v_index
        self.inverse_perm = np.argsort(self.perm)  # MuJoCo's dof j is our dof inverse_perm[j]

    def _base(self, q):
        """``(R, linear dofs, angular dofs)`` of the free joint, ``R`` body to world."""
        qi, _, lin = self.free
        return _rotations(q[:, qi + 3 : qi + 7]), lin, slice(lin.stop, lin.stop + 3)

    def qpos(self, q):
        return _array(q)[0][:, self.qpos_src]

    def retract(self, q, dq):
        """``q (+) dq``, to first order at ``dq = 0`` that of ``grid_core.testing.integrate``
        (Pinocchio's, along which our derivatives in q are taken): a hinge or slide adds its
        increment; the free joint moves to ``pos + R dq_lin`` and ``quat * normalise([dq_ang / 2, 1])``
        (x y z w; ``exp(dq_ang / 2)`` to first order, and smooth at ``dq = 0`` where the
        exponential's norm is not differentiable)."""
        q, xp = _array(q)
        dq = _array(dq)[0]
        out = q + xp.concatenate([dq, xp.zeros_like(dq[:, :1])], axis=1)[:, self.step_src]
        if self.free:
            R, lin, ang = self._base(q)
            qi = self.free[0]
            turn = xp.concatenate([0.5 * dq[:, ang], xp.ones_like(dq[:, :1])], axis=1)
            turn = turn / xp.sqrt(xp.sum(turn * turn, axis=1, keepdims=True))
            pos, quat = q[:, qi : qi + 3] + _apply(R, dq[:, lin]), _quat_mul(q[:, qi + 3 : qi + 7], turn)
            out = _replace(out, slice(qi, qi + 7), xp.concatenate([pos, quat], axis=1))
        return out

    def to_mujoco(self, q, x, turn_v=None):
        """A tangent vector ``x`` (v, a or tau) in MuJoCo's coordinates: ``G x``, plus the rate
        of ``R`` when ``turn_v`` (the velocity) is given (``x`` an acceleration)."""
        x, xp = _array(x)
        if self.free:
            R, lin, ang = self._base(q)
            xl = x[:, lin] if turn_v is None else x[:, lin] + xp.cross(turn_v[:, ang], turn_v[:, lin])
            x = _replace(x, lin, _apply(R, xl))
        return x[:, self.inverse_perm]

    def from_mujoco(self, q, y, turn_v=None):
        """The inverse of :meth:`to_mujoco`: ``G^T y`` (forces), less the rate of ``R`` when
        ``turn_v`` is given (accelerations)."""
        y, xp = _array(y)
        x = y[:, self.perm]
        if self.free:
            R, lin, ang = self._base(q)
            xl = _apply(xp.swapaxes(R, 1, 2), x[:, lin])
            if turn_v is not None:
                xl = xl - xp.cross(turn_v[:, ang], turn_v[:, lin])
            x = _replace(x, lin, xl)
        return x

    def mass_from_mujoco(self, q, M):
        """``G^T qM G`` in our dof order."""
        M, xp = _array(M)
        out = M[:, self.perm[:, None], self.perm[None, :]]
        if self.free:
            R, lin, _ = self._base(q)
            out = _replace(out, lin, xp.einsum("nji,njk->nik", R, out[:, lin, :]), axis=1)
            out = _replace(out, lin, xp.einsum("nij,njk->nik", out[:, :, lin], R), axis=2)
        return out


# -- the quantities --------------------------------------------------------------------------------


def _mjx():
    """MJX, quietly: it reports its optional MuJoCo Warp backend missing on import."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from mujoco import mjx
    return mjx


def mjx_inverse_dynamics(mx, qpos, qvel, qacc):
    """RNE with accelerations: ``M qacc + bias`` in one pass (what ``mjx.inverse`` adds to
    building and factoring ``M``, we leave out: the peer's fastest path)."""
    mjx = _mjx()
    d = mjx.make_data(mx).replace(qpos=qpos, qvel=qvel, qacc=qacc)
    for step in (mjx.kinematics, mjx.com_pos, mjx.com_vel):
        d = step(mx, d)
    return mjx.rne(mx, d, flg_acc=True).qfrc_bias


def mjx_mass_matrix(mx, qpos):
    mjx = _mjx()
    d = mjx.make_data(mx).replace(qpos=qpos)
    for step in (mjx.kinematics, mjx.com_pos, mjx.crb):
        d = step(mx, d)
    return mjx.full_m(mx, d)


def mjx_forward_dynamics(mx, qpos, qvel, qfrc):
    mjx = _mjx()
    return mjx.forward(mx, mjx.make_data(mx).replace(qpos=qpos, qvel=qvel, qfrc_applied=qfrc)).qacc


def mjx_inverse(mx, qpos, qvel, qacc):
    """``qfrc_inverse`` of ``mjx.inverse``, MJX's inverse dynamics as its users call it (the
    gradient row differentiates it; the row of values times :func:`mjx_inverse_dynamics`)."""
    mjx = _mjx()
    return mjx.inverse(mx, mjx.make_data(mx).replace(qpos=qpos, qvel=qvel, qacc=qacc)).qfrc_inverse


@attrs.frozen
class Quantity:
    """One row of the comparison.

    ``algorithm`` names the row; ``ours`` our methods computing it, the first the handle has is
    timed (none: the row is left out); ``peer_call`` says how MJX computes it and ``mjx(mx, *inputs)``
    does, for one state; ``inputs(coords, q, v, x)`` are MuJoCo's inputs of our state (``x`` is
    qdd or tau, unused by a function of q alone) and ``output(coords, q, v, x, y)`` MJX's output
    ``y`` in our coordinates, both batched.  ``arity``: how many of (q, v, x) our method takes.
    """

    algorithm: str
    ours: tuple[str, ...]
    peer_call: str
    mjx: Callable
    inputs: Callable
    output: Callable
    arity: int = 3

    def peer(self, side) -> Callable:
        """MJX's batched function of :meth:`peer_inputs`, to ``jax.jit``."""
        import jax

        return jax.vmap(functools.partial(self.mjx, side.mx))

    def chunk(self, nv: int, dtype) -> int | None:
        """The states MJX computes at once (None: the whole batch)."""
        return None

    def peer_inputs(self, c: Coordinates, q, v, x) -> tuple:
        return self.inputs(c, q, v, x)

    def peer_output(self, c: Coordinates, q, v, x, y):
        return self.output(c, q, v, x, y)


@attrs.frozen
class Gradient(Quantity):
    """The derivatives ``(d/dq, d/dv)`` of the quantity that ``mjx``, ``inputs`` and ``output``
    compute, by ``jax.jacrev`` through MJX, in our coordinates: for each state,
    ``f(dq, v) = output(q (+) dq, v, x, mjx(inputs(q (+) dq, v, x)))`` (:meth:`Coordinates.retract`)
    differentiated at ``dq = 0``, so the conversions, which depend on ``q`` and ``v``, are
    differentiated too and ``d/dq`` is in the tangent space, as ours.  The peer takes our
    ``(q, v, x)`` and returns the two Jacobians, a batch larger than :meth:`chunk` through
    ``jax.lax.map`` in chunks of that many states, each one vmapped jacrev.
    """

    def chunk(self, nv: int, dtype) -> int:
        """The largest power of two of states whose Jacobians fit :data:`PEER_WORKSPACE`."""
        fit = PEER_WORKSPACE // (WORDS_PER_STATE * np.dtype(dtype).itemsize * nv * nv)
        return 1 << max(0, int(fit).bit_length() - 1)

    def peer(self, side) -> Callable:
        import jax
        import jax.numpy as jnp

        c, call = side.coords, functools.partial(self.mjx, side.mx)

        def value(dq, v, q, x):  # the quantity at q (+) dq, one state (a batch of one for the conversions)
            q, v, x = c.retract(q[None], dq[None]), v[None], x[None]
            return self.output(c, q, v, x, call(*(y[0] for y in self.inputs(c, q, v, x)))[None])[0]

        jacobians = jax.jacrev(value, argnums=(0, 1))

        def one(q, v, x):
            return jacobians(jnp.zeros_like(v), v, q, x)

        def batched(*xs):
            chunk = self.chunk(side.robot.nv, xs[0].dtype)
            if len(xs[0]) <= chunk:
                return jax.vmap(one)(*xs)
            return jax.lax.map(lambda s: one(*s), xs, batch_size=chunk)

        return batched

    def peer_inputs(self, c: Coordinates, q, v, x) -> tuple:
        return q, v, x

    def peer_output(self, c: Coordinates, q, v, x, y):
        return y


def _dynamics_inputs(c: Coordinates, q, v, a):
    return c.qpos(q), c.to_mujoco(q, v), c.to_mujoco(q, a, turn_v=v)


def _forward_inputs(c: Coordinates, q, v, tau):
    return c.qpos(q), c.to_mujoco(q, v), c.to_mujoco(q, tau)


def _force_output(c: Coordinates, q, v, a, y):
    return c.from_mujoco(q, y)


def _acceleration_output(c: Coordinates, q, v, tau, y):
    return c.from_mujoco(q, y, turn_v=v)


QUANTITIES = (
    Quantity("inverse_dynamics", ("inverse_dynamics",), "MJX kinematics, com_pos, com_vel, rne(flg_acc=True)",
             mjx_inverse_dynamics, _dynamics_inputs, _force_output),
    Quantity("crba", ("crba",), "MJX kinematics, com_pos, crb, full_m", mjx_mass_matrix,
             lambda c, q, v, a: (c.qpos(q),), lambda c, q, v, a, y: c.mass_from_mujoco(q, y), arity=1),
    Quantity("forward_dynamics", ("forward_dynamics", "aba"), "MJX forward, qfrc_applied = tau", mjx_forward_dynamics,
             _forward_inputs, _acceleration_output),
    Gradient("inverse_dynamics_gradient", ("inverse_dynamics_gradient",),
             "jax.jacrev through mjx.inverse (qfrc_inverse; autodiff)", mjx_inverse, _dynamics_inputs, _force_output),
    Gradient("forward_dynamics_gradient", ("forward_dynamics_gradient",),
             "jax.jacrev through mjx.forward (qacc, qfrc_applied = tau; autodiff)", mjx_forward_dynamics,
             _forward_inputs, _acceleration_output),
)


# -- measuring ---------------------------------------------------------------------------------------


def median_us(fn, args, repeats: int, warmup: int) -> float:
    """Median wall time of ``fn(*args)``, waited for by ``jax.block_until_ready``, in µs, after
    ``warmup`` calls."""
    import jax

    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e6)


def kernel_us(method, args: list[np.ndarray], out_shapes: list[tuple], repeats: int) -> tuple[float | None, str]:
    """Our call alone on the GPU: ``GRAPH_CALLS`` calls on torch tensors (``out=``, one tensor
    per output) captured in one CUDA graph, replayed; CUDA-event time per call, median of the
    replays.  Where the capture fails, the same calls back to back between events, the reason in
    the method.  ``(None, why)`` without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return None, "no torch"
    if not torch.cuda.is_available():
        return None, "no CUDA device"
    xs = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in args]
    outs = [torch.empty(shape, dtype=xs[0].dtype, device="cuda") for shape in out_shapes]
    out = outs[0] if len(outs) == 1 else tuple(outs)

    def calls():
        for _ in range(GRAPH_CALLS):
            method(*xs, out=out)

    stream = torch.cuda.Stream()  # warmed on the capture stream: its workspace exists before the capture
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            calls()
    torch.cuda.synchronize()
    how = "graph"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            calls()
        run = graph.replay
    except Exception as exc:  # a launch refused under capture (GridError) or torch's own refusal
        torch.cuda.synchronize()
        how, run = f"events, graph capture failed: {str(exc).splitlines()[0][:120]}", calls
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(max(5, repeats // 10)):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / GRAPH_CALLS)
    return float(np.median(times)), how


def batch_major(out) -> np.ndarray:
    """An output as one array, the batch first: the arrays of a several-output call (a
    gradient's d/dq and d/dv) stacked on axis 1, so one relative error covers them all."""
    if isinstance(out, (tuple, list)):
        return np.stack([np.asarray(x) for x in out], axis=1)
    return np.asarray(out)


def _chunked_rel_error(ours: np.ndarray, theirs: Callable, n: int, chunk: int = 4096) -> float:
    """``||ours - theirs|| / ||theirs||`` over ``n`` states, ``theirs(lo, hi)`` converted a
    chunk at a time (a batch of mass matrices in float64 is large)."""
    num = den = 0.0
    for lo in range(0, n, chunk):
        t = theirs(lo, min(n, lo + chunk))
        o = np.asarray(ours[lo : lo + len(t)], dtype=np.float64)
        if not (np.isfinite(o).all() and np.isfinite(t).all()):
            return float("inf")
        num += float(np.sum((o - t) ** 2))
        den += float(np.sum(t**2))
    return float(np.sqrt(num / den)) if den else float(np.sqrt(num))


@attrs.define
class Side:
    """What one robot needs for both sides: MuJoCo's model on the device, our handle, the
    coordinates, the states (every batch a prefix of them) and the reference on the first ones."""

    robot: object
    model: object
    mx: object
    coords: Coordinates
    handle: object
    states: tuple
    reference: dict = attrs.Factory(dict)


def prepare(name: str, dtype, backend: str, max_n: int, seed: int = 0, rows_library: bool = False) -> Side:
    """Load the robot and compile it with MuJoCo (checked), build our handle (``backend``
    ``gpu``: ``RobotHandle``, else ``CpuHandle``), and draw ``max_n`` states.  ``rows_library``:
    the GPU library holds the algorithms of :data:`QUANTITIES` only (the first of each row's
    ``ours``; one library whatever rows a run asks for), minutes less of nvcc where the default set
    is not built."""
    import grid_core
    from grid_core.testing import random_state

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sloppy-inertia notes of real robots
        robot = grid_core.load_robot(name)
    model = mujoco_model(robot, urdf_text(name))
    check_model(robot, model)
    # every emitted algorithm of the default set (Emitter.in_default_set), sorted, as the libraries
    # already in the build cache hold them: on the GPU those of gpu_check's build phase and the gpu
    # tests (tests/generated.py), on the CPU CpuHandle's default
    if backend == "gpu":
        from grid_core.runtime import RobotHandle

        default = sorted(n for n, a in grid_core.algorithms().items() if a.has_emitter() and a.emitter.in_default_set)
        handle = RobotHandle(robot, sorted({q.ours[0] for q in QUANTITIES}) if rows_library else default, dtype)
    else:
        from grid_core.runtime.cpu import CpuHandle

        handle = CpuHandle(robot, None, dtype)
    mx = _mjx().put_model(model)  # its arrays on JAX's default device (its static fields stay numpy)
    states = random_state(robot, np.random.default_rng(seed), max_n)
    return Side(robot, model, mx, Coordinates(robot, model), handle, states)


def our_method(handle, qty: Quantity) -> str | None:
    """The first of ``qty.ours`` the handle has (built with its emitter)."""
    return next((n for n in qty.ours if n in dir(handle)), None)


def calls_us(fn, batches: list[list], repeats: int, warmup: int) -> float:
    """Time per call of ``fn`` called on each of ``batches`` (distinct inputs of one shape, so
    XLA can merge no two calls) inside ONE ``jax.jit``: one dispatch for ``len(batches)`` calls,
    the median divided by their count.  A side in a user's jitted loop (a rollout, a training
    step) pays JAX's dispatch so, once for many calls, not once a call."""
    import jax

    looped = jax.jit(lambda groups: [fn(*g) for g in groups])
    return median_us(looped, (batches,), repeats, warmup) / len(batches)


def compare(side: Side, qty: Quantity, n: int, dtype, repeats: int, warmup: int, ref_states: int,
            timing: bool = True, peer_compiler_options: dict | None = None, calls: int = 1,
            calls_max_n: int = 0) -> dict:
    """One row: ``qty`` at batch ``n`` on both sides (our side left out when the handle lacks
    it: then only MJX against the reference).  ``peer_compiler_options`` go to XLA for MJX's
    program (the tests' untimed checks compile faster without XLA:CPU's fusion).  With
    ``calls`` > 1 and ``n`` <= ``calls_max_n``, each side is timed again as ``calls`` calls on
    distinct batches (the states rolled by one each time) in one ``jax.jit`` (:func:`calls_us`):
    ``grid_us_calls``, ``peer_us_calls``, ``ratio_calls``."""
    import jax

    from grid_core import Reference

    mine = our_method(side.handle, qty)
    q, v, x = (s[:n] for s in side.states)
    k = min(n, ref_states)
    ref_name = mine or qty.ours[0]
    if ref_name not in side.reference:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full = tuple(s[:ref_states] for s in side.states)
            side.reference[ref_name] = batch_major(getattr(Reference(side.robot), ref_name)(*full[: qty.arity]))
    ref = side.reference[ref_name][:k]
    ours_in = [jax.device_put(a.astype(dtype)) for a in (q, v, x)[: qty.arity]]
    peer_in = [jax.device_put(a.astype(dtype)) for a in qty.peer_inputs(side.coords, q, v, x)]
    # the model closed over, as MJX's own benchmark (mjx.benchmark) does: its structure is static
    peer_fn = jax.jit(qty.peer(side), compiler_options=peer_compiler_options)
    peer_out = batch_major(peer_fn(*peer_in))

    def peer_ours(lo, hi):
        return qty.peer_output(side.coords, q[lo:hi], v[lo:hi], x[lo:hi], peer_out[lo:hi].astype(np.float64))

    from grid_core.testing import rel_error

    row = {"robot": side.robot.name, "N": n, "algorithm": qty.algorithm, "dtype": np.dtype(dtype).name,
           "grid_call": mine, "peer": "MJX", "peer_call": qty.peer_call, "ref_err_peer": rel_error(peer_ours(0, k), ref)}
    chunk = qty.chunk(side.robot.nv, dtype)
    if chunk is not None and chunk < n:
        row["peer_chunk"] = chunk  # MJX's states at once (jax.lax.map over the batch)
    if mine is not None:
        method = getattr(side.handle, mine)
        ours_fn = jax.jit(lambda *xs: method(*xs))
        ours_raw = ours_fn(*ours_in)
        ours_out = batch_major(ours_raw)
        row["rel_err"] = _chunked_rel_error(ours_out, peer_ours, n)
        row["ref_err_grid"] = rel_error(ours_out[:k], ref)
    if timing:
        row["peer_us"] = median_us(peer_fn, peer_in, repeats, warmup)
        if mine is not None:
            row["grid_us"] = median_us(ours_fn, ours_in, repeats, warmup)
            row["ratio"] = row["peer_us"] / row["grid_us"]
            if jax.default_backend() == "gpu":
                args = [a.astype(dtype) for a in (q, v, x)[: qty.arity]]
                shapes = [o.shape for o in jax.tree.leaves(ours_raw)]
                row["grid_kernel_us"], row["grid_kernel_method"] = kernel_us(method, args, shapes, repeats)
        if calls > 1 and n <= calls_max_n:
            rolled = [tuple(np.roll(s, k, axis=0) for s in (q, v, x)) for k in range(calls)]
            row["calls"] = calls
            peer_batches = [[jax.device_put(a.astype(dtype)) for a in qty.peer_inputs(side.coords, *r)] for r in rolled]
            row["peer_us_calls"] = calls_us(qty.peer(side), peer_batches, repeats, warmup)
            del peer_batches
            if mine is not None:
                batches = [[jax.device_put(a.astype(dtype)) for a in r[: qty.arity]] for r in rolled]
                row["grid_us_calls"] = calls_us(method, batches, repeats, warmup)
                row["ratio_calls"] = row["peer_us_calls"] / row["grid_us_calls"]
    return row


# -- the run -------------------------------------------------------------------------------------------


def commit() -> str:
    if os.environ.get("GRID_COMMIT"):
        return os.environ["GRID_COMMIT"]
    res = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return res.stdout.strip() or "unknown"


def device_name() -> str:
    import jax

    dev = jax.devices()[0]
    return dev.device_kind if dev.platform == "gpu" else f"CPU ({platform.processor() or platform.machine()})"


def versions() -> dict:
    out = {}
    for dist in ("mujoco", "mujoco-mjx", "jax", "jaxlib", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def table(rows: list[dict]) -> str:
    """The printed summary: one line per row, the ratio MJX / ours."""
    def f(x, spec, width):
        return format(format(x, spec) if isinstance(x, (int, float)) else "-", f">{width}")

    lines = [f"{'robot':<8}{'N':>7}  {'algorithm':<27}{'grid us':>10}{'MJX us':>10}{'MJX/grid':>9}{'kernel us':>10}"
             f"{'rel_err':>9}{'ref grid':>9}{'ref MJX':>9}{'K-call grid':>12}{'MJX':>10}{'MJX/grid':>9}"]
    for r in rows:
        lines.append(f"{r['robot']:<8}{r['N']:>7}  {r['algorithm']:<27}{f(r.get('grid_us'), '.1f', 10)}"
                     f"{f(r.get('peer_us'), '.1f', 10)}{f(r.get('ratio'), '.1f', 9)}{f(r.get('grid_kernel_us'), '.2f', 10)}"
                     f"{f(r.get('rel_err'), '.1e', 9)}{f(r.get('ref_err_grid'), '.1e', 9)}{f(r.get('ref_err_peer'), '.1e', 9)}"
                     f"{f(r.get('grid_us_calls'), '.1f', 12)}{f(r.get('peer_us_calls'), '.1f', 10)}"
                     f"{f(r.get('ratio_calls'), '.1f', 9)}")
    ks = sorted({r["calls"] for r in rows if r.get("calls")})
    lines += [f"K-call: {k} calls on distinct batches in one jax.jit, time per call (one dispatch for the {k})"
              for k in ks]
    methods = sorted({r["grid_kernel_method"] for r in rows if r.get("grid_kernel_method", "graph") != "graph"})
    lines += [f"kernel us: {m}" for m in methods]
    chunks = sorted({(r["algorithm"], r["peer_chunk"]) for r in rows if r.get("peer_chunk")})
    lines += [f"MJX us of {alg}: jax.lax.map over chunks of {c} states" for alg, c in chunks]
    lines.append("")
    lines.append("MuJoCo Warp, published, not measured here (ns per world):")
    for p in PUBLISHED:
        lines.append(f"  {p['robot']:<13}{p['worlds']:>6} worlds  {p['algorithm']:<17}{p['ns_per_world']:>7.1f} ns"
                     f"  ({p['gpu']}, {p['date']})")
    return "\n".join(lines)


def row_key(row: dict) -> tuple:
    return row["robot"], row["N"], row["algorithm"], row["dtype"]


def merged_rows(path: Path | None, result: dict) -> list[dict]:
    """The rows of an earlier run in ``path`` to keep beside this run's: only from the same
    commit, device and precision (a table of one run, measured in parts)."""
    if path is None or not path.is_file():
        return []
    old = json.loads(path.read_text())
    differ = [k for k in ("commit", "gpu", "dtype", "backend", "matmul_precision") if old.get(k) != result[k]]
    if differ:
        raise SystemExit(f"peers: --merge: {path} is of another run ({', '.join(f'{k} {old.get(k)}' for k in differ)})")
    return old.get("peers", [])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robots", default=",".join(ROBOTS), help="comma-separated bundled names or URDF paths")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated batch sizes")
    ap.add_argument("--algorithms", default=",".join(q.algorithm for q in QUANTITIES),
                    help="comma-separated rows of QUANTITIES")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--matmul-precision", choices=("highest", "default"), default="highest",
                    help="JAX's float32 dot products: 'highest' true float32 (ours are), 'default' JAX's own "
                         "choice (TF32 tensor cores on a recent GPU)")
    ap.add_argument("--backend", choices=("auto", "gpu", "cpu"), default="auto",
                    help="RobotHandle on the GPU or CpuHandle (auto: the GPU when JAX has one)")
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--ref-states", type=int, default=256, help="states checked against the float64 Reference")
    ap.add_argument("--json", type=Path, help="write the results here (rewritten after each robot)")
    ap.add_argument("--rows-library", action="store_true",
                    help="on the GPU, a library of the peers rows' algorithms only (default: every algorithm of "
                         "the default set, the library gpu_check's build phase leaves in the cache)")
    ap.add_argument("--calls", type=int, default=8,
                    help="also time each side as this many calls on distinct batches in one jax.jit (1: not)")
    ap.add_argument("--calls-max-n", type=int, default=4096,
                    help="the largest batch timed so (MJX's working memory grows with the calls)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows already in --json (same commit and device) that this run does not measure")
    args = ap.parse_args(argv)

    import jax

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    # JAX computes float32 dot products in TF32 on a recent GPU unless told otherwise: MJX's mass
    # matrix of go2 came out 4.3e-4 from the Reference that way (f96e1f8 on the H200), beyond the
    # ladder's 1e-4; ours is plain float32 arithmetic, so the peer gets the same
    if args.matmul_precision == "highest":
        jax.config.update("jax_default_matmul_precision", "highest")
    backend = args.backend if args.backend != "auto" else ("gpu" if jax.default_backend() == "gpu" else "cpu")
    if backend == "gpu":  # as benchmarks/gpu_check.py: its build cache, and XLA's programs kept for a rerun
        os.environ.setdefault("GRID_CACHE_DIR", str(ROOT / "benchmarks" / "build" / "cache"))
        jax.config.update("jax_compilation_cache_dir", str(ROOT / "benchmarks" / "build" / "jax-cache"))
    sizes = [int(s) for s in args.sizes.split(",")]
    wanted = args.algorithms.split(",")
    unknown = set(wanted) - {q.algorithm for q in QUANTITIES}
    if unknown:
        ap.error(f"unknown algorithms {', '.join(sorted(unknown))} (rows: {', '.join(q.algorithm for q in QUANTITIES)})")
    quantities = [q for q in QUANTITIES if q.algorithm in wanted]
    dtype = np.dtype(args.dtype)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "gpu": device_name(), "commit": commit(), "backend": "RobotHandle" if backend == "gpu" else "CpuHandle",
        "dtype": dtype.name, "matmul_precision": args.matmul_precision, "versions": versions(),
        "timing": (f"device-resident inputs, each side one jax.jit, warmed up by {args.warmup} calls, then the "
                   f"median of {args.repeats} calls, each synchronised by block_until_ready; *_calls: the same "
                   f"with {args.calls} calls on distinct batches in one jax.jit, per call, up to "
                   f"N = {args.calls_max_n}"),
        "peers": [], "peers_published": PUBLISHED,
    }
    kept = merged_rows(args.json, result) if args.merge else []
    bad = []
    for name in args.robots.split(","):
        try:
            side = prepare(name, dtype, backend, max(sizes), rows_library=args.rows_library)
        except ModelMismatch as exc:
            print(exc, file=sys.stderr)
            return 1
        for qty in quantities:
            if our_method(side.handle, qty) is None:
                print(f"peers: {name} {qty.algorithm}: no emitted {' or '.join(qty.ours)} yet, row left out", flush=True)
                continue
            for n in sizes:
                row = compare(side, qty, n, dtype, args.repeats, args.warmup, args.ref_states,
                              calls=args.calls, calls_max_n=args.calls_max_n)
                result["peers"].append(row)
                if not agrees(row):
                    bad.append(f"{name} {qty.algorithm} N={n}: errors {[row.get(k) for k in AGREEMENTS]}")
                print(table([row]).splitlines()[1], flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            measured = {row_key(r) for r in result["peers"]}
            rows = [r for r in kept if row_key(r) not in measured] + result["peers"]
            args.json.write_text(json.dumps({**result, "peers": rows}, indent=1) + "\n")
    print(table(result["peers"]))
    for line in bad:
        print(f"peers: agreement beyond {TOLERANCE[dtype.name]:.0e}: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
