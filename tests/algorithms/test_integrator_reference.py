"""integrator and integrator_gradient (float64).

The step itself is compared with Pinocchio: ``q_next = pin.integrate(q, dt v)`` (the SE(3)
exponential map on a free-flyer) and ``qdd`` = Pinocchio's forward dynamics (rel 1e-9, the
forward-dynamics comparison's tolerance).  The gradient is compared with central
differences of our own integrator: a derivative with respect to q along ``q (+) h e_k``;
the rows of ``q_next`` as ``q_next(x +- h e_k) (-) q_next`` -- the tangent space at
``q_next``, Pinocchio's dIntegrate convention -- with Pinocchio's ``log6`` for a
free-flyer and the coordinate difference elsewhere (see :func:`difference`).

Step and tolerance: h = 3e-5 and rel 1e-6, as for the forward-dynamics second derivatives
(test_fdsva_so_reference.py): the qd_next rows carry dt qdd, computed to about eps cond(M),
so the rounding error is about eps cond(M) / h and the truncation error h^2 |d^3| / 6
(measured: <= 1e-7 over these robots).  RK4 nests forward dynamics in its stages and its third
derivatives are larger (solo12 at dt = 0.05: 3e-6 at h = 3e-5, falling as h^2), so its
differences are Richardson-extrapolated, ``(4 D(h/2) - D(h)) / 3``, which cancels the h^2 term.  The time steps span 1e-3 .. 0.3 s, so base
rotations reach about a radian and the exponential map's large-angle branch is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest

from grid_core import Reference, algorithms
from grid_core.errors import InputError
from grid_core.model import JointType
from grid_core.model.lie import se3_inverse_adjoint, se3_right_jacobian
from grid_core.testing import assert_close, central_fd, random_state, tangent_fd
from tests.algorithms.second_order_support import CASES, STATES, case_id
from tests.pin_bridge import pin_forward_dynamics, pin_model, pin_rk4, to_pin_q

REL = 1e-9
REL_FD = 1e-6
H = 3e-5
DTS = (1e-3, 0.01, 0.05, 0.1, 0.3)
METHODS = ("semi_implicit_euler", "explicit_euler", "rk4")


def difference(robot, q0, q1) -> np.ndarray:
    """``q1 (-) q0`` in the tangent space at ``q0``: ``log6(M0^-1 M1)`` (Pinocchio's) on a
    free-flyer, ``q1 - q0`` on every other coordinate.

    Not ``pin.difference`` itself: on a continuous joint its SO(2) log takes
    ``acos(trace / 2)``, which loses all precision for tiny angles (it returns exactly 0
    for a 1.1e-10 rad difference, and ~1e-8 rad quanta around it), so it cannot be
    differentiated with a small step; our continuous joints take one angle, whose
    difference is exact.
    """
    import pinocchio as pin

    out = np.zeros(robot.nv)
    for b in robot.bodies:
        if b.mimic is not None:
            continue
        qi, vi = b.q_index, b.v_index
        if b.jtype is JointType.FLOATING:
            M0, M1 = (pin.XYZQUATToSE3(x[qi : qi + 7]) for x in (q0, q1))
            out[vi : vi + 6] = pin.log6(M0.inverse() * M1).vector
        else:
            out[vi : vi + b.nv] = q1[qi : qi + b.nq] - q0[qi : qi + b.nq]
    return out


@pytest.mark.parametrize("method", METHODS[:2])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_integrator_matches_pinocchio(case, method, robot_cache, rng):
    import pinocchio as pin

    robot = robot_cache(*case)
    ref = Reference(robot)
    model = pin_model(robot)
    for dt in DTS:
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        q_next, qd_next = ref.integrator(q, qd, tau, dt, method, f_ext)
        qd_expected = qd + dt * pin_forward_dynamics(robot, q, qd, tau, f_ext)
        v = dt * (qd_expected if method == "semi_implicit_euler" else qd)
        assert_close(qd_next, qd_expected, REL, f"{robot.name}: qd_next")
        assert_close(to_pin_q(robot, q_next), pin.integrate(model, to_pin_q(robot, q), v), REL,
                     f"{robot.name}: q_next")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rk4_matches_a_hand_written_rk4_on_pinocchio(case, robot_cache, rng):
    robot = robot_cache(*case)
    ref = Reference(robot)
    for dt in DTS:
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        q_next, qd_next = ref.integrator(q, qd, tau, dt, "rk4", f_ext)
        pq_expected, qd_expected = pin_rk4(robot, q, qd, tau, dt, f_ext)
        assert_close(qd_next, qd_expected, REL, f"{robot.name}, dt={dt}: qd_next")
        assert_close(to_pin_q(robot, q_next), pq_expected, REL, f"{robot.name}, dt={dt}: q_next")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_integrator_gradient_matches_finite_differences(case, robot_cache, rng):
    robot = robot_cache(*case)
    ref = Reference(robot)
    for k in range(STATES + 1):
        dt, method = DTS[k % len(DTS)], METHODS[k % 3]
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        grads = ref.integrator_gradient(q, qd, tau, dt, method, f_ext)
        assert all(g.shape == (robot.nv, robot.nv) for g in grads)
        q_next = ref.integrator(q, qd, tau, dt, method, f_ext)[0]

        def step(q_, qd_, tau_):
            """The step as one tangent vector: [q_next (-) q_next(x); qd_next]."""
            q_n, qd_n = ref.integrator(q_, qd_, tau_, dt, method, f_ext)
            return np.concatenate([difference(robot, q_next, q_n), qd_n])

        def fd(h):
            return (tangent_fd(robot, lambda x: step(x, qd, tau), q, h), central_fd(lambda x: step(q, x, tau), qd, h),
                    central_fd(lambda x: step(q, qd, x), tau, h))

        n = robot.nv
        by_q, by_qd, by_tau = fd(H)
        if method == "rk4":  # Richardson: the h^2 truncation term cancels (see the module docstring)
            by_q, by_qd, by_tau = ((4 * b - a) / 3 for a, b in zip((by_q, by_qd, by_tau), fd(H / 2)))
        expected = (by_q[:n], by_qd[:n], by_tau[:n], by_q[n:], by_qd[n:], by_tau[n:])
        names = ("dq_next_dq", "dq_next_dqd", "dq_next_dtau", "dqd_next_dq", "dqd_next_dqd", "dqd_next_dtau")
        for g, e, what in zip(grads, expected, names):
            if what == "dq_next_dtau" and method == "explicit_euler":
                assert not g.any() and np.abs(e).max() < 1e-9
                continue
            assert_close(g, e, REL_FD, f"{robot.name}, {method}, dt={dt}: {what}")


@pytest.mark.parametrize("case", [("go2", None), ("erd:panda", True)], ids=case_id)
def test_integrator_gradient_uses_pinocchios_dintegrate(case, robot_cache, rng):
    """The q_next rows are Pinocchio's dIntegrate (ARG0: d/dq, ARG1: d/dv) composed with the
    velocity derivatives; checked where Pinocchio's Jexp6 is accurate (|w| >= 0.3, see
    test_se3_jacobians_at_small_angles)."""
    import pinocchio as pin

    robot = robot_cache(*case)
    ref = Reference(robot)
    model = pin_model(robot)
    q, qd, tau = random_state(robot, rng)
    qd = qd * 50
    dt = 0.02
    dq_dq, dq_dqd, _, _, dqd_dqd, _ = ref.integrator_gradient(q, qd, tau, dt, "explicit_euler")
    pq, v = to_pin_q(robot, q), dt * qd
    assert np.linalg.norm(v[3:6]) >= 0.3
    assert_close(dq_dq, pin.dIntegrate(model, pq, v, pin.ARG0), REL, "dIntegrate ARG0")
    assert_close(dq_dqd, dt * pin.dIntegrate(model, pq, v, pin.ARG1), REL, "dIntegrate ARG1")
    assert_close(dqd_dqd, np.eye(robot.nv) + dt * ref.forward_dynamics_gradient(q, qd, tau)[1], REL, "qd rows")


def _series(xi, terms=40):
    """``sum_k (-ad_xi)^k / (k+1)!``: the right Jacobian, by its series (exact for small xi)."""
    from grid_core.model.spatial import skew

    ad = np.zeros((6, 6))
    ad[:3, :3] = ad[3:, 3:] = skew(xi[3:])
    ad[:3, 3:] = skew(xi[:3])
    out, term = np.eye(6), np.eye(6)
    for k in range(1, terms):
        term = -ad @ term / (k + 1)
        out = out + term
    return out


@pytest.mark.parametrize("angle", [0.0, 1e-7, 1e-3, 0.2, 0.999, 1.001, 2.5, 3.1])
def test_se3_jacobians_at_small_and_large_angles(angle, rng):
    """Our Jexp6 (series below |w| = 1, closed form above) against its defining series, and
    against Pinocchio's where Pinocchio is accurate: its Jexp6 loses ~2.5e-8 at |w| = 1e-3
    (its closed form cancels), which ours does not."""
    import pinocchio as pin

    xi = rng.normal(size=6)
    xi[3:] *= angle / np.linalg.norm(xi[3:])
    if angle < 1.0:
        assert np.abs(se3_right_jacobian(xi) - _series(xi)).max() < 1e-14
    if angle == 0.0 or angle >= 0.2:
        assert np.abs(se3_right_jacobian(xi) - pin.Jexp6(pin.Motion(xi))).max() < 1e-13
    assert np.abs(se3_inverse_adjoint(xi) - pin.exp6(pin.Motion(xi)).inverse().action).max() < 1e-14


def test_integrator_batch_equals_loop(robot_cache, rng):
    robot = robot_cache("go2")
    ref = Reference(robot)
    q, qd, tau = random_state(robot, rng, n=3)
    for name in ("integrator", "integrator_gradient"):
        batch = getattr(ref, name)(q, qd, tau, 0.01, "explicit_euler")
        loop = [getattr(ref, name)(q[k], qd[k], tau[k], 0.01, "explicit_euler") for k in range(3)]
        for slot in range(len(batch)):
            assert np.array_equal(batch[slot], np.stack([x[slot] for x in loop]))


def test_integrator_arguments(robot_cache, rng):
    robot = robot_cache("iiwa14")
    ref = Reference(robot)
    q, qd, tau = random_state(robot, rng)
    a = ref.integrator(q, qd, tau, 0.01)
    b = ref.integrator(q, qd, tau, np.float64(0.01), method="semi_implicit_euler")
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    with pytest.raises(InputError, match="method"):
        ref.integrator(q, qd, tau, 0.01, "midpoint")
    with pytest.raises(InputError, match="dt"):
        ref.integrator_gradient(q, qd, tau)
    with pytest.raises(InputError, match="dt"):
        ref.integrator(q, qd, tau, [0.01, 0.02])


def test_integrator_declarations():
    assert algorithms()["integrator"].depends_on == ("forward_dynamics",)
    assert algorithms()["integrator_gradient"].depends_on == (
        "forward_dynamics", "forward_dynamics_gradient", "minv")
