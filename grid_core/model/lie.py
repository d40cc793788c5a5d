"""Lie-group math of the configuration space: the SO(3) / SE(3) exponential maps, their
Jacobians, and ``q (+) v`` (Pinocchio's ``integrate``) with its derivatives (``dIntegrate``).

Twists are ``[linear; angular]``; quaternions ``(x, y, z, w)``.  Shared by the integrators'
references and whatever else needs to move a configuration along a tangent vector.
"""

from __future__ import annotations

import math

import numpy as np

from .robot import JointType, Robot
from .spatial import quat_to_matrix, skew


def _series(theta2: float, terms) -> float:
    """``sum_n (-1)^n theta^(2n) / terms(n)`` (the series of the so(3) coefficients)."""
    out, power = 0.0, 1.0
    for n in range(12):  # theta < 1: the 12th term is below 1e-30
        out += (-1) ** n * power / terms(n)
        power *= theta2
    return out


def so3_coefficients(theta: float) -> tuple[float, float, float, float]:
    """``a = (1 - cos t)/t^2``, ``b = (t - sin t)/t^3``, ``c = (t^2 + 2 cos t - 2)/(2 t^4)``,
    ``d = (2t - 3 sin t + t cos t)/(2 t^5)``, by their series below ``t = 1`` (the closed
    forms cancel catastrophically near 0)."""
    t2 = theta * theta
    if theta < 1.0:
        f = math.factorial
        return (_series(t2, lambda n: f(2 * n + 2)), _series(t2, lambda n: f(2 * n + 3)),
                _series(t2, lambda n: f(2 * n + 4)), _series(t2, lambda n: f(2 * n + 5) / (n + 1)))
    s, c = math.sin(theta), math.cos(theta)
    return ((1 - c) / t2, (theta - s) / (t2 * theta), (t2 + 2 * c - 2) / (2 * t2 * t2),
            (2 * theta - 3 * s + theta * c) / (2 * t2 * t2 * theta))


def so3_exp(w) -> np.ndarray:
    """Rotation matrix ``exp([w]x)`` (Rodrigues)."""
    theta = float(np.linalg.norm(w))
    a, b, _, _ = so3_coefficients(theta)
    W = skew(w)
    return np.eye(3) + (math.sin(theta) / theta if theta > 0 else 1.0) * W + a * (W @ W)


def se3_left_jacobian(xi) -> np.ndarray:
    """Left Jacobian of the SE(3) exponential, ``xi = [rho; phi]`` (Barfoot, eq. 7.86)."""
    rho, phi = np.asarray(xi[:3], float), np.asarray(xi[3:], float)
    a, b, c, d = so3_coefficients(float(np.linalg.norm(phi)))
    P, R = skew(phi), skew(rho)
    J3 = np.eye(3) + a * P + b * (P @ P)
    Q = (0.5 * R + b * (P @ R + R @ P + P @ R @ P) + c * (P @ P @ R + R @ P @ P - 3 * P @ R @ P)
         + d * (P @ R @ P @ P + P @ P @ R @ P))
    out = np.zeros((6, 6))
    out[:3, :3] = out[3:, 3:] = J3
    out[:3, 3:] = Q
    return out


def se3_right_jacobian(xi) -> np.ndarray:
    """``Jr(xi) = Jl(-xi)``: ``exp(xi + dxi) = exp(xi) exp(Jr(xi) dxi + O(dxi^2))`` (Pinocchio's ``Jexp6``)."""
    return se3_left_jacobian(-np.asarray(xi, float))


def se3_inverse_adjoint(xi) -> np.ndarray:
    """``Ad(exp(xi)^-1)`` on ``[linear; angular]`` twists."""
    rho, phi = np.asarray(xi[:3], float), np.asarray(xi[3:], float)
    a, b, _, _ = so3_coefficients(float(np.linalg.norm(phi)))
    P = skew(phi)
    E = so3_exp(phi)
    p = (np.eye(3) + a * P + b * (P @ P)) @ rho
    out = np.zeros((6, 6))
    out[:3, :3] = out[3:, 3:] = E.T
    out[:3, 3:] = -E.T @ skew(p)
    return out


def quat_mul(q1, q2) -> np.ndarray:
    """Hamilton product of ``(x, y, z, w)`` quaternions."""
    x1, y1, z1, w1 = q1
    x2, y2, z2, w2 = q2
    return np.array([w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
                     w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2])


def move(robot: Robot, q, v, free_flyer) -> np.ndarray:
    """``q`` moved along the tangent vector ``v``: every joint coordinate adds its increment (mimic
    joints have none of their own), a free-flyer's 7 coordinates become ``free_flyer(xyzquat, v6)``."""
    out = np.array(q, dtype=np.float64)
    for b in robot.bodies:
        if b.mimic is not None:
            continue
        qi, vi = b.q_index, b.v_index
        if b.jtype is JointType.FLOATING:
            out[qi : qi + 7] = free_flyer(out[qi : qi + 7], np.asarray(v[vi : vi + 6], dtype=np.float64))
        else:
            out[qi : qi + b.nq] += v[vi : vi + b.nv]
    return out


def exp6_xyzquat(x, xi) -> np.ndarray:
    """``[p; quat]`` of ``M exp6(xi)`` for ``M = [p; quat]``: the quaternion normalised, its sign
    that of a non-negative dot product with ``quat`` (as Pinocchio does)."""
    quat = x[3:] / np.linalg.norm(x[3:])
    rho, w = xi[:3], xi[3:]
    theta = float(np.linalg.norm(w))
    a, bb, _, _ = so3_coefficients(theta)
    W = skew(w)
    half = 0.5 * theta
    new = quat_mul(quat, np.concatenate([w * (math.sin(half) / theta if theta > 0 else 0.5), [math.cos(half)]]))
    new /= np.linalg.norm(new)
    return np.concatenate([x[:3] + quat_to_matrix(quat) @ ((np.eye(3) + a * W + bb * (W @ W)) @ rho),
                           -new if new @ quat < 0 else new])


def integrate(robot: Robot, q, v) -> np.ndarray:
    """``q (+) v``, Pinocchio's ``integrate`` (SE(3) exponential map on a free-flyer)."""
    return move(robot, q, v, exp6_xyzquat)


def dintegrate(robot: Robot, q, v) -> tuple[np.ndarray, np.ndarray]:
    """``(d(q (+) v)/dq, d(q (+) v)/dv)``, both ``nv x nv`` and in the tangent space at
    ``q (+) v`` (Pinocchio's ``dIntegrate`` ARG0 / ARG1): the identity on every joint
    coordinate; on a free-flyer ``Ad(exp6(v)^-1)`` and ``Jexp6(v)``."""
    Dq, Dv = np.eye(robot.nv), np.eye(robot.nv)
    for b in robot.bodies:
        if b.jtype is JointType.FLOATING:
            s = slice(b.v_index, b.v_index + 6)
            Dq[s, s] = se3_inverse_adjoint(v[s])
            Dv[s, s] = se3_right_jacobian(v[s])
    return Dq, Dv
