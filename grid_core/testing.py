"""Helpers for tests, ours and plugin authors': random states and comparisons.

The same test body runs over every backend (``Reference``, and the generated
code through ``Emulated`` and ``RobotHandle``); these helpers make its inputs
and its assertions.
"""

from __future__ import annotations

import numpy as np

from .model import JointType, Robot
from .model.spatial import quat_to_matrix


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
    """``||out - ref|| / ||ref||`` (the comparison every backend test makes); NaN anywhere gives inf, never a pass."""
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


def integrate(robot: Robot, q: np.ndarray, dv: np.ndarray) -> np.ndarray:
    """``q (+) dv``: move the configuration ``q`` along the tangent vector ``dv`` (size nv).

    A free-flyer's position moves by ``R dv_linear`` (the increment is expressed in
    the base frame) and its orientation becomes ``R exp(dv_angular)`` (quaternion
    right-multiplied); every other joint adds its increment.  To first order this is
    ``pinocchio.integrate``, so derivatives taken along it are Pinocchio's tangent
    derivatives (``computeRNEADerivatives``, ``computeFrameJacobian``, ...).
    """
    from .model.lie import move, quat_mul

    def first_order(x, xi):
        angle = np.linalg.norm(xi[3:])
        axis = xi[3:] / angle if angle > 0 else np.zeros(3)
        dq = np.concatenate([np.sin(angle / 2) * axis, [np.cos(angle / 2)]])
        return np.concatenate([x[:3] + quat_to_matrix(x[3:]) @ xi[:3], quat_mul(x[3:], dq)])

    return move(robot, q, dv, first_order)


def central_fd(f, x: np.ndarray, h: float = 1e-6, *, dim: int | None = None, step=None) -> np.ndarray:
    """Central differences of ``f`` at ``x`` along each of ``dim`` coordinate directions.

    Returns ``d f / d x`` with the directions on the last axis, shape
    ``f(x).shape + (dim,)``.  ``step(x, dx)`` moves ``x`` by ``dx`` (default
    ``x + dx`` with ``dim = len(x)``; :func:`tangent_fd` passes :func:`integrate`).
    The truncation error is ``O(h^2)`` and the rounding error ``O(eps |f| / h)``:
    about 1e-10 relative at the default ``h``.
    """
    dim = len(x) if dim is None else dim
    step = step or (lambda x_, dx: x_ + dx)
    cols = []
    for k in range(dim):
        e = np.zeros(dim)
        e[k] = h
        cols.append((np.asarray(f(step(x, e))) - np.asarray(f(step(x, -e)))) / (2 * h))
    return np.stack(cols, axis=-1)


def tangent_fd(robot: Robot, f, q: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of ``f`` at the configuration ``q`` along each tangent (v)
    direction, moving ``q`` by :func:`integrate`: shape ``f(q).shape + (nv,)``."""
    return central_fd(f, q, h, dim=robot.nv, step=lambda q_, dv: integrate(robot, q_, dv))


from .runtime.backend import LAYOUTS, Emulated  # noqa: E402  (the host-emulated backend, DESIGN §2)

__all__ = ["LAYOUTS", "Emulated", "assert_close", "central_fd", "integrate", "random_q", "random_state",
           "rel_error", "tangent_bracket", "tangent_fd"]


def tangent_bracket(robot: Robot) -> np.ndarray:
    """Structure constants of the tangent space: ``C[m, a, b] = [e_a, e_b]_m`` (shape ``(nv,) * 3``).

    Nonzero only within a free-flyer's six columns, where ``[., .]`` is the Lie bracket of
    se(3) in ``[linear; angular]`` coordinates, ``[(v1, w1), (v2, w2)] = (w1 x v2 - w2 x v1,
    w1 x w2)``; every other coordinate commutes.  Tangent derivatives do not commute: for
    any smooth ``f`` with tangent gradient ``g`` and ``D[..., j, k] = d/dq_k (d f / d q_j)``,
    ``D[..., j, k] - D[..., k, j] = g @ C[:, k, j]`` (Baker-Campbell-Hausdorff), the symmetry
    a second-order tangent derivative really has.
    """
    C = np.zeros((robot.nv,) * 3)
    E = np.eye(6)
    for b in robot.bodies:
        if b.jtype is not JointType.FLOATING:
            continue
        s = slice(b.v_index, b.v_index + 6)
        for a in range(6):
            for c in range(6):
                v1, w1, v2, w2 = E[a, :3], E[a, 3:], E[c, :3], E[c, 3:]
                C[s, b.v_index + a, b.v_index + c] = np.concatenate(
                    [np.cross(w1, v2) - np.cross(w2, v1), np.cross(w1, w2)])
    return C
