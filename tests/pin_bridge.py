"""Bridge to Pinocchio for the tests: build its model from the same URDF and
convert configurations and spatial quantities between the conventions.

* Continuous joints take one angle in our q, (cos, sin) in Pinocchio's.
* Spatial motion/force vectors are [angular; linear] for us (Featherstone),
  [linear; angular] for Pinocchio.
* Mimic joints: Pinocchio's ``buildModelFromUrdf(..., mimic=True)``.
"""

from __future__ import annotations

import importlib.resources
from functools import lru_cache

import numpy as np

from grid_core.model import JointType, Robot


def urdf_path(robot: Robot) -> str:
    src = robot.source
    if src.startswith("bundled:"):
        from grid_plugins.bundled import manifest

        entry = manifest()[src.split(":", 1)[1]]
        return str(importlib.resources.files("grid_robots").joinpath(entry["file"]))
    if src.startswith("erd:"):
        from grid_plugins.erd import resolve

        return str(resolve(src.split(":", 1)[1]))
    return src


@lru_cache(maxsize=None)
def _pin_model(path: str, floating: bool, mimic: bool):
    import pinocchio as pin

    if floating:
        return pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer(), mimic=mimic)
    return pin.buildModelFromUrdf(path, mimic=mimic)


def pin_model(robot: Robot):
    """Pinocchio's model of the same URDF (free-flyer if ours floats; mimic on)."""
    return _pin_model(urdf_path(robot), robot.floating_base, True)


def to_pin_q(robot: Robot, q: np.ndarray) -> np.ndarray:
    """Our q -> Pinocchio's q (continuous joints as cos/sin)."""
    out = []
    for b in robot.bodies:
        if b.mimic is not None:
            continue
        qj = q[b.q_index : b.q_index + b.nq]
        if b.jtype is JointType.CONTINUOUS:
            out.extend([np.cos(qj[0]), np.sin(qj[0])])
        else:
            out.extend(qj)
    return np.array(out)


def swap6(v: np.ndarray) -> np.ndarray:
    """[a; b] <-> [b; a] on the last axis of 6-vectors (Featherstone <-> Pinocchio)."""
    v = np.asarray(v)
    return np.concatenate([v[..., 3:], v[..., :3]], axis=-1)


def swap66(X: np.ndarray) -> np.ndarray:
    """Reorder a 6x6 spatial matrix between [ang; lin] and [lin; ang]."""
    P = np.block([[np.zeros((3, 3)), np.eye(3)], [np.eye(3), np.zeros((3, 3))]])
    return P @ X @ P


def pin_forces(f_ext) -> list:
    """Our ``f_ext`` (one ``[force; moment]`` per body, body frame) as Pinocchio's list per joint."""
    import pinocchio as pin

    return [pin.Force.Zero()] + [pin.Force(fx[:3], fx[3:]) for fx in f_ext]


def symmetrise_upper(A: np.ndarray) -> np.ndarray:
    """The symmetric matrix whose upper triangle is ``A``'s (pin.crba, pin.computeMinverse)."""
    return np.triu(A) + np.triu(A, 1).T


_FRAME_TYPES = {"link": "BODY", "joint": "JOINT", "fixed_joint": "FIXED_JOINT"}


def pin_frame_id(model, frame) -> int:
    """Pinocchio's id of our :class:`Frame` (matched by name and type: names may be shared)."""
    import pinocchio as pin

    return model.getFrameId(frame.name, getattr(pin.FrameType, _FRAME_TYPES[frame.kind]))


# Robots whose joint-space inertia matrix is so ill-conditioned that no float64 method
# can reproduce another's forward dynamics (qdd, M^-1 and their derivatives) to 1e-9:
# icub's neck links neck_pitch / neck_roll are 0.1 kg point masses (zero rotational
# inertia), so some neck motions move almost no inertia and cond(M) reaches 5e6 - 1e12.
# Ours and Pinocchio's M then agree to 4e-16 while the EXACT solutions of the two
# float64 systems differ by up to ~1e-7 (and Pinocchio's aba, computeMinverse and
# solve(crba) disagree among themselves by as much).  These robots are compared on the
# equations of motion instead (backward error, tests/algorithms/test_ill_conditioned_reference.py).
ILL_CONDITIONED = ("erd:icub",)

# Mimic robots given a free-flyer (the catalogue's mimic robots are fixed-base):
# ``(name, floating_base)`` pairs for the comparisons that must cover both at once.
FLOATING_MIMIC = (("erd:panda", True), ("erd:baxter", True))


def pin_minv(robot, q):
    import pinocchio as pin

    model = pin_model(robot)
    data = model.createData()
    pq = to_pin_q(robot, q)
    if robot.has_mimic:  # Pinocchio 4.1: "This algorithm does not support Joint Mimic type"
        return np.linalg.inv(symmetrise_upper(pin.crba(model, data, pq)))
    return symmetrise_upper(pin.computeMinverse(model, data, pq))


def pin_forward_dynamics(robot, q, qd, tau, f_ext=None, model=None):
    """Pinocchio's qdd: aba, or on a mimic model solve(crba, tau - rnea(q, qd, 0))."""
    return pin_forward_dynamics_at(robot, to_pin_q(robot, q), qd, tau, f_ext, model)


def pin_forward_dynamics_at(robot, pq, qd, tau, f_ext=None, model=None):
    """:func:`pin_forward_dynamics` at Pinocchio's configuration ``pq``."""
    import pinocchio as pin

    model = model or pin_model(robot)
    data = model.createData()
    extra = () if f_ext is None else (pin_forces(f_ext),)
    if robot.has_mimic:
        M = symmetrise_upper(pin.crba(model, data, pq))
        return np.linalg.solve(M, tau - pin.rnea(model, data, pq, qd, np.zeros(robot.nv), *extra))
    return pin.aba(model, data, pq, qd, tau, *extra)


def pin_rk4(robot, q, qd, tau, dt, f_ext):
    """The classical RK4 step written on Pinocchio: its forward dynamics at each stage, its
    ``integrate`` placing the stages from q (as Crocoddyl's IntegratedActionModelRK4)."""
    return pin_rk4_at(robot, to_pin_q(robot, q), qd, tau, dt, f_ext)


def pin_rk4_at(robot, pq, qd, tau, dt, f_ext=None, model=None):
    """:func:`pin_rk4` from Pinocchio's configuration ``pq`` (``q_next`` as Pinocchio's q)."""
    import pinocchio as pin

    model = model or pin_model(robot)

    def fd(pq_, v_):
        return pin_forward_dynamics_at(robot, pq_, v_, tau, f_ext, model)

    k1v, k1a = qd, fd(pq, qd)
    k2v = qd + dt / 2 * k1a
    k2a = fd(pin.integrate(model, pq, dt / 2 * k1v), k2v)
    k3v = qd + dt / 2 * k2a
    k3a = fd(pin.integrate(model, pq, dt / 2 * k2v), k3v)
    k4v = qd + dt * k3a
    k4a = fd(pin.integrate(model, pq, dt * k3v), k4v)
    return (pin.integrate(model, pq, dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)),
            qd + dt / 6 * (k1a + 2 * k2a + 2 * k3a + k4a))


def pin_step(robot, q, qd, tau, dt, method, f_ext=None):
    """One integrator step on Pinocchio, ``(q_next as Pinocchio's q, qd_next)``: Euler (semi-implicit
    or explicit) on its forward dynamics and ``integrate``, or :func:`pin_rk4`."""
    import pinocchio as pin

    if method == "rk4":
        return pin_rk4(robot, q, qd, tau, dt, f_ext)
    qd_next = qd + dt * pin_forward_dynamics(robot, q, qd, tau, f_ext)
    v = dt * (qd_next if method == "semi_implicit_euler" else qd)
    return pin.integrate(pin_model(robot), to_pin_q(robot, q), v), qd_next


def robot_cases(exclude=()) -> list[tuple[str, bool | None]]:
    """``(name, floating_base)`` cases of the reference tests: the catalogue's robots at their
    natural base (minus ``exclude``), and the mimic robots on a free-flyer."""
    from conftest import ROBOTS

    return [(name, None) for name in ROBOTS if name not in exclude] + list(FLOATING_MIMIC)
