"""Spatial algebra in Featherstone's conventions (Rigid Body Dynamics Algorithms, ch. 2).

Motion vectors are ``[angular; linear]``, force vectors ``[moment; force]``.  A
Plücker transform ``X`` from frame A to frame B is built from ``E`` (the rotation
taking A coordinates to B coordinates) and ``r`` (B's origin expressed in A):

    X = [[E, 0], [-E rx, E]]                    (motion, ``plux(E, r)``)

Forces transform with ``X^-T``.  Names follow the book and spatial_v2: ``skew``,
``rx``/``crm``/``crf``, ``plux``, ``mcI``.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "skew",
    "rpy_to_matrix",
    "matrix_to_rpy",
    "axis_angle",
    "quat_to_matrix",
    "plux",
    "plux_inv",
    "split_plux",
    "crm",
    "crf",
    "mcI",
    "inertia_parts",
    "transform_inertia",
]


def skew(v) -> np.ndarray:
    """The 3x3 matrix ``v x`` (cross-product operator)."""
    x, y, z = v
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def rpy_to_matrix(rpy) -> np.ndarray:
    """URDF roll-pitch-yaw: ``R = Rz(yaw) Ry(pitch) Rx(roll)`` (child axes in parent)."""
    r, p, y = rpy
    cr, sr = np.cos(r), np.sin(r)
    cp, sp = np.cos(p), np.sin(p)
    cy, sy = np.cos(y), np.sin(y)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def matrix_to_rpy(R) -> np.ndarray:
    """Inverse of :func:`rpy_to_matrix`: ``(roll, pitch, yaw)``, pitch in [-pi/2, pi/2].

    Rebuilds ``R`` to rounding everywhere, gimbal lock included: the closed form
    (yaw = 0 at the lock, where only roll -/+ yaw is defined) is refined by
    Gauss-Newton steps on the rotation error, so near pitch = +-pi/2, where the
    closed form's roll and yaw are each ill-determined, their rotation is still ``R``.
    """
    R = np.asarray(R, dtype=float)
    cp = np.hypot(R[0, 0], R[1, 0])
    pitch = np.arctan2(-R[2, 0], cp)
    if cp > 1e-15:
        rpy = np.array([np.arctan2(R[2, 1], R[2, 2]), pitch, np.arctan2(R[1, 0], R[0, 0])])
    else:
        rpy = np.array([np.arctan2(-R[1, 2], R[1, 1]), pitch, 0.0])
    ex, ey, ez = np.eye(3)
    for _ in range(4):
        E = R @ rpy_to_matrix(rpy).T  # the rotation left to do, in world axes
        w = 0.5 * np.array([E[2, 1] - E[1, 2], E[0, 2] - E[2, 0], E[1, 0] - E[0, 1]])
        if not np.any(w):
            break
        _, p, y = rpy
        Rz = axis_angle(ez, y)
        J = np.column_stack([Rz @ axis_angle(ey, p) @ ex, Rz @ ey, ez])  # d(rpy) -> world rate
        rpy = rpy + np.linalg.lstsq(J, w, rcond=1e-10)[0]
    return rpy


def axis_angle(axis, angle) -> np.ndarray:
    """Rotation matrix of ``angle`` about the unit ``axis`` (Rodrigues)."""
    k = skew(axis)
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def quat_to_matrix(quat) -> np.ndarray:
    """Rotation matrix of a quaternion given as ``(x, y, z, w)`` (Pinocchio's order).

    The quaternion is normalised first, so any non-zero 4-vector names a rotation.
    """
    x, y, z, w = np.asarray(quat, dtype=float) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def plux(E, r) -> np.ndarray:
    """Plücker motion transform from rotation ``E`` (A->B coords) and B's origin ``r`` in A."""
    X = np.zeros((6, 6))
    X[:3, :3] = E
    X[3:, 3:] = E
    X[3:, :3] = -E @ skew(r)
    return X


def split_plux(X) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`plux`: recover ``(E, r)`` from a motion transform."""
    E = X[:3, :3]
    erx = -X[3:, :3]  # E rx
    rx = E.T @ erx
    return E.copy(), np.array([rx[2, 1], rx[0, 2], rx[1, 0]])


def pose_of(X) -> np.ndarray:
    """The homogeneous pose of frame B in frame A, from the Plücker transform A -> B."""
    E, r = split_plux(X)
    T = np.eye(4)
    T[:3, :3] = E.T
    T[:3, 3] = r
    return T


def plux_inv(X) -> np.ndarray:
    """Inverse of a Plücker motion transform (B->A)."""
    E, r = split_plux(X)
    return plux(E.T, -E @ r)


def crm(v) -> np.ndarray:
    """Motion cross-product operator ``v x`` (6x6)."""
    w, u = v[:3], v[3:]
    out = np.zeros((6, 6))
    out[:3, :3] = skew(w)
    out[3:, 3:] = skew(w)
    out[3:, :3] = skew(u)
    return out


def crf(v) -> np.ndarray:
    """Force cross-product operator ``v x*`` = ``-crm(v)^T``."""
    return -crm(v).T


def icrf(f) -> np.ndarray:
    """The matrix of ``v -> v x* f`` (so ``crf(v) @ f == icrf(f) @ v``)."""
    n, fl = skew(f[:3]), skew(f[3:])
    return -np.block([[n, fl], [fl, np.zeros((3, 3))]])


def gravity_accel(gravity) -> np.ndarray:
    """The fictitious base acceleration ``-a_g`` that folds gravity into a forward pass."""
    return np.concatenate([np.zeros(3), -np.asarray(gravity, dtype=float)])


def mcI(mass: float, com, I_com) -> np.ndarray:
    """Spatial inertia about the frame origin from mass, centre of mass and the 3x3
    rotational inertia about the centre of mass (all in that frame)."""
    C = skew(com)
    out = np.zeros((6, 6))
    out[:3, :3] = I_com + mass * C @ C.T
    out[:3, 3:] = mass * C
    out[3:, :3] = mass * C.T
    out[3:, 3:] = mass * np.eye(3)
    return out


def inertia_parts(I) -> tuple[float, np.ndarray, np.ndarray]:
    """Inverse of :func:`mcI`: ``(mass, com, I_com)`` of a spatial inertia.

    A zero-mass inertia has its centre of mass at the origin by convention.
    """
    m = float(I[5, 5])
    if m == 0.0:
        return 0.0, np.zeros(3), I[:3, :3].copy()
    mC = I[:3, 3:]
    com = np.array([mC[2, 1], mC[0, 2], mC[1, 0]]) / m
    C = skew(com)
    return m, com, I[:3, :3] - m * C @ C.T


def transform_inertia(X, I) -> np.ndarray:
    """Express a spatial inertia given in frame B in frame A, where ``X`` is A->B: ``X^T I X``."""
    return X.T @ I @ X
