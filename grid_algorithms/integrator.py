"""One time step of the equations of motion: ``(q_next, qd_next) = integrator(q, qd, tau, dt, method)``.

``qdd = FD(q, qd, tau, f_ext)`` (:mod:`grid_algorithms.forward_dynamics`), then

* ``method="semi_implicit_euler"`` (the default; symplectic Euler):
  ``qd_next = qd + dt qdd``, ``q_next = q (+) dt qd_next``;
* ``method="explicit_euler"``: ``q_next = q (+) dt qd``, ``qd_next = qd + dt qdd``.

``q (+) v`` is Pinocchio's ``integrate``: every joint coordinate adds its increment (a
continuous joint's one angle, mimic joints follow their mimicked joint), and a free-flyer
moves by the SE(3) exponential map, ``M_next = M exp6(v)`` with ``v = [linear; angular]`` in
the base frame: ``R_next = R exp3(w)``, ``p_next = p + R V(w) v_lin`` with
``V(w) = I + (1 - cos t)/t^2 [w]x + (t - sin t)/t^3 [w]x^2`` (``t = |w|``).  The quaternion
is ``quat (x) quat(exp3(w))``, normalised, its sign chosen with a non-negative dot product
with ``quat`` (as Pinocchio does).  To first order this is
:func:`grid_core.testing.integrate`, which moves the position by ``R v_lin`` only; for a
finite step the two differ by ``O(dt^2 |v_lin| |w|)``, and the integrator follows Pinocchio.
"""

from __future__ import annotations

import math

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, f_ext_port, gravity_port
from grid_core.errors import InputError
from grid_core.model import JointType, Robot
from grid_core.model.spatial import quat_to_matrix, skew
from grid_core.review import ParallelismReview, not_applicable, todo

METHODS = ("semi_implicit_euler", "explicit_euler")


# -- SE(3): exponential map and its Jacobians, [linear; angular] twists -----------------------


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


def _quat_mul(q1, q2) -> np.ndarray:
    """Hamilton product of ``(x, y, z, w)`` quaternions."""
    x1, y1, z1, w1 = q1
    x2, y2, z2, w2 = q2
    return np.array([w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
                     w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2])


def integrate(robot: Robot, q, v) -> np.ndarray:
    """``q (+) v``, Pinocchio's ``integrate`` (SE(3) exponential map on a free-flyer)."""
    out = np.array(q, dtype=np.float64)
    for b in robot.bodies:
        if b.mimic is not None:
            continue
        qi, vi = b.q_index, b.v_index
        if b.jtype is JointType.FLOATING:
            quat = out[qi + 3 : qi + 7] / np.linalg.norm(out[qi + 3 : qi + 7])
            rho, w = v[vi : vi + 3], v[vi + 3 : vi + 6]
            theta = float(np.linalg.norm(w))
            a, bb, _, _ = so3_coefficients(theta)
            W = skew(w)
            out[qi : qi + 3] += quat_to_matrix(quat) @ ((np.eye(3) + a * W + bb * (W @ W)) @ rho)
            half = 0.5 * theta
            dq = np.concatenate([w * (math.sin(half) / theta if theta > 0 else 0.5), [math.cos(half)]])
            new = _quat_mul(quat, dq)
            new /= np.linalg.norm(new)
            out[qi + 3 : qi + 7] = -new if new @ quat < 0 else new
        else:
            out[qi : qi + b.nq] += v[vi : vi + b.nv]
    return out


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


def check_method(method, algorithm: str) -> str:
    if method not in METHODS:
        raise InputError(f"{algorithm}: argument 'method' must be one of {', '.join(METHODS)}, got {method!r}")
    return method


def state_ports(robot: Robot) -> tuple[Port, ...]:
    """The inputs shared by the integrator and its gradient."""
    return (
        Port("q", (robot.nq,), "joint configuration"),
        Port("qd", (robot.nv,), "joint velocity"),
        Port("tau", (robot.nv,), "joint forces"),
        Port("dt", (), "time step (s), shared by the batch", kind="param"),
        Port("method", (), f"integration scheme: {' or '.join(METHODS)}", kind="option",
             default="semi_implicit_euler"),
        f_ext_port(robot),
        gravity_port(),
    )


class Integrator(Algorithm):
    name = "integrator"
    summary = ("one time step (q_next, qd_next): semi-implicit (default) or explicit Euler on "
               "qdd = forward_dynamics, exponential map on a free-flyer")
    math = r"""
.. math::

   \ddot q = \mathrm{FD}(q, \dot q, \tau), \qquad
   \text{semi-implicit: } \dot q^+ = \dot q + \Delta t\, \ddot q,\ q^+ = q \oplus \Delta t\, \dot q^+;
   \qquad
   \text{explicit: } q^+ = q \oplus \Delta t\, \dot q,\ \dot q^+ = \dot q + \Delta t\, \ddot q,

with :math:`q \oplus v` Pinocchio's ``integrate`` (:math:`M \exp_6(v)` on a free-flyer).
"""
    depends_on = ("forward_dynamics",)
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: forward_dynamics' recursions (see its review)"),
        P2=todo("the update is nq + nv independent cells (one exponential map per free-flyer): "
                "fan them across the block after forward dynamics"),
        P3=todo("the explicit-Euler q update needs no qdd: run it concurrently with forward "
                "dynamics; the free-flyer's exp6 coefficients depend on qd (explicit) only"),
        P4=not_applicable("the state vectors are contiguous and read once; there is no structural "
                          "sparsity to compact"),
    )

    def inputs(self, robot: Robot):
        return state_ports(robot)

    def outputs(self, robot: Robot, **options):
        return (
            Port("q_next", (robot.nq,), "configuration after the step"),
            Port("qd_next", (robot.nv,), "velocity after the step"),
        )

    def reference(self, ctx, q, qd, tau, dt, method="semi_implicit_euler", f_ext=None,
                  gravity=DEFAULT_GRAVITY):
        method = check_method(method, self.name)
        dt = float(dt)
        qd_next = qd + dt * ctx.forward_dynamics(q, qd, tau, f_ext, gravity)
        q_next = integrate(ctx.robot, q, dt * (qd_next if method == "semi_implicit_euler" else qd))
        return q_next, qd_next


@hookimpl
def grid_register_algorithms():
    return [Integrator]
