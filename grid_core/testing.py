"""Helpers for tests, ours and plugin authors': random states and comparisons.

The same test body runs over every backend (``Reference``, and the generated
code through ``Emulated`` and ``RobotHandle``); these helpers make its inputs
and its assertions.
"""

from __future__ import annotations

import numpy as np

from .model import JointType, Robot


def random_q(robot: Robot, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
    """Random non-zero configuration(s); a free-flyer gets a unit quaternion."""
    shape = (robot.nq,) if n is None else (n, robot.nq)
    q = rng.uniform(-1.5, 1.5, shape)
    for b in robot.bodies:
        if b.jtype is JointType.FLOATING:
            quat = rng.normal(size=shape[:-1] + (4,))
            q[..., b.q_index + 3 : b.q_index + 7] = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    return q


def random_state(robot: Robot, rng: np.random.Generator, n: int | None = None):
    """``(q, qd, qdd)``, random and non-zero, for one state or a batch of ``n``."""
    shape = (robot.nv,) if n is None else (n, robot.nv)
    return random_q(robot, rng, n), rng.uniform(-2, 2, shape), rng.uniform(-3, 3, shape)


def rel_error(out, ref) -> float:
    """``||out - ref|| / ||ref||`` (DESIGN §5); NaN anywhere gives inf, never a pass."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise AssertionError(f"shape {out.shape} != reference shape {ref.shape}")
    if not (np.all(np.isfinite(out)) and np.all(np.isfinite(ref))):
        return float("inf")
    denom = np.linalg.norm(ref)
    diff = np.linalg.norm(out - ref)
    if denom == 0.0:
        return float(diff)
    return float(diff / denom)


def assert_close(out, ref, rel: float, what: str = "") -> None:
    """Assert :func:`rel_error` is at most ``rel``, with a useful message."""
    err = rel_error(out, ref)
    if not err <= rel:
        label = f"{what}: " if what else ""
        raise AssertionError(f"{label}relative error {err:.3e} exceeds {rel:.1e}")
