"""fdsva_so vs central finite differences of Pinocchio's computeABADerivatives (float64).

d2qdd_dq2 / d2qdd_dqdqd / d2qdd_dq_dtau are central differences of ``ddq_dq`` along
``q (+) h e_k`` / ``qd_k`` / ``tau_k``; d2qdd_dqd2 of ``ddq_dv`` along ``qd_k``; and,
independently, d2qdd_dqdqd of ``ddq_dv`` along the tangent ``q_j`` and d2qdd_dq_dtau of
``ddq_dtau = M^-1`` along ``q_j``.  f_ext random throughout.  On mimic models, where
Pinocchio refuses ABA derivatives, the differentiated first derivatives are our own
forward_dynamics_gradient and minv, themselves proven against Pinocchio
(test_forward_dynamics_gradient_reference.py, test_minv_reference.py).

Steps and tolerance: rel 1e-6, with a step per direction.  Along qd and tau the
differentiated first derivatives are polynomials of degree at most two (ddq_dq is quadratic
in qd, ddq_dv affine, all three affine in tau), on which central differences are exact: the
only error is rounding, so the step is large, h = 0.1 (measured <= 2e-10).  Along q there is
truncation, h^2 |d^4 qdd| / 6, and rounding, about eps cond(M) / h relative (qdd and its
derivatives are computed to about eps cond(M), cond(M) up to ~1e4-2e5 here): h = 3e-5
balances them (measured <= 1e-7 over these robots and states; at h = 1e-5 rounding reaches
3e-7 on g1, at 1e-4 truncation 1e-6).  A wrong term (a missing dM_dq product, a transposed
index) shows up at 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest

from grid_core import Reference, algorithms
from grid_core.testing import assert_close, central_fd, random_state, tangent_bracket, tangent_fd
from tests.algorithms.second_order_support import CASES, STATES, case_id
from tests.pin_bridge import pin_forces, pin_model, symmetrise_upper, to_pin_q

REL_FD = 1e-6
H_Q = 3e-5  # along the tangent of q
H_V = 0.1  # along qd and tau (exact up to rounding)
SYM = 1e-12


def first_derivatives(robot, ref, q, qd, tau, f_ext):
    """``(ddq_dq, ddq_dv, ddq_dtau)``: Pinocchio's computeABADerivatives (copied), or on a
    mimic model our own forward_dynamics_gradient and minv."""
    import pinocchio as pin

    if robot.has_mimic:
        return (*ref.forward_dynamics_gradient(q, qd, tau, f_ext), ref.minv(q))
    model = pin_model(robot)
    data = model.createData()
    dq, dv, dtau = pin.computeABADerivatives(model, data, to_pin_q(robot, q), qd, tau, pin_forces(f_ext))
    return dq.copy(), dv.copy(), symmetrise_upper(dtau)  # views into data


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_fdsva_so_matches_finite_differences_of_pinocchio(case, robot_cache, rng):
    robot = robot_cache(*case)
    ref = Reference(robot)
    n = robot.nv
    for _ in range(STATES):
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        out = ref.fdsva_so(q, qd, tau, f_ext)
        assert all(x.shape == (n, n, n) for x in out)
        d2q, d2qd, dqdqd, dqdtau = out
        first = lambda q_, qd_, tau_: np.stack(first_derivatives(robot, ref, q_, qd_, tau_, f_ext))  # noqa: E731
        by_q = tangent_fd(robot, lambda x: first(x, qd, tau), q, H_Q)
        by_qd = central_fd(lambda x: first(q, x, tau), qd, H_V)
        by_tau = central_fd(lambda x: first(q, qd, x), tau, H_V)
        assert_close(d2q, by_q[0], REL_FD, f"{robot.name}: d2qdd_dq2")
        assert_close(d2qd, by_qd[1], REL_FD, f"{robot.name}: d2qdd_dqd2")
        assert_close(dqdqd, by_qd[0], REL_FD, f"{robot.name}: d2qdd_dqdqd (d/dqd of ddq_dq)")
        assert_close(dqdqd, by_q[1].transpose(0, 2, 1), REL_FD, f"{robot.name}: d2qdd_dqdqd (d/dq of ddq_dv)")
        assert_close(dqdtau, by_tau[0], REL_FD, f"{robot.name}: d2qdd_dq_dtau (d/dtau of ddq_dq)")
        assert_close(dqdtau, by_q[2].transpose(0, 2, 1), REL_FD, f"{robot.name}: d2qdd_dq_dtau (d/dq of Minv)")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_fdsva_so_symmetries(case, robot_cache, rng):
    """To 1e-12 (relative to the tensor's norm): d2qdd_dqd2[i] symmetric; d2qdd_dq_dtau[:, j, :]
    (= d Minv / d q_j) symmetric; d2qdd_dq2[i] symmetric up to the free-flyer's Lie bracket,
    d2qdd_dq2[i, j, k] - d2qdd_dq2[i, k, j] = dqdd_dq[i] . [e_k, e_j] (tangent derivatives
    do not commute, see test_idsva_so_symmetries)."""
    robot = robot_cache(*case)
    ref = Reference(robot)
    C = tangent_bracket(robot)
    for _ in range(2):
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        d2q, d2qd, _, dqdtau = ref.fdsva_so(q, qd, tau, f_ext)
        dqdd_dq, _ = ref.forward_dynamics_gradient(q, qd, tau, f_ext)
        bch = np.einsum("im,mkj->ijk", dqdd_dq, C)
        assert np.linalg.norm(d2q - d2q.transpose(0, 2, 1) - bch) <= SYM * np.linalg.norm(d2q)
        assert np.linalg.norm(d2qd - d2qd.transpose(0, 2, 1)) <= SYM * np.linalg.norm(d2qd)
        assert np.linalg.norm(dqdtau - dqdtau.transpose(2, 1, 0)) <= SYM * np.linalg.norm(dqdtau)


@pytest.mark.parametrize("case", [("iiwa14", None), ("erd:pr2", None), ("go2", None)], ids=case_id)
def test_fdsva_so_batch_equals_loop(case, robot_cache, rng):
    robot = robot_cache(*case)
    ref = Reference(robot)
    q, qd, tau = random_state(robot, rng, n=3)
    f_ext = rng.normal(size=(3, robot.num_bodies, 6))
    batch = ref.fdsva_so(q, qd, tau, f_ext)
    assert all(x.shape == (3, robot.nv, robot.nv, robot.nv) for x in batch)
    loop = [ref.fdsva_so(q[k], qd[k], tau[k], f_ext[k]) for k in range(3)]
    for slot in range(4):
        assert np.array_equal(batch[slot], np.stack([x[slot] for x in loop]))


def test_fdsva_so_is_composed_through_declared_dependencies():
    assert algorithms()["fdsva_so"].depends_on == (
        "idsva_so", "minv", "forward_dynamics", "forward_dynamics_gradient")
