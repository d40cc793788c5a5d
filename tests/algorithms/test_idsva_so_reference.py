"""idsva_so vs central finite differences of Pinocchio's first derivatives (float64).

d2tau_dq2 and d2tau_dqdqd are central differences, along the tangent direction
(``q (+) h e_k``), of Pinocchio's ``computeRNEADerivatives`` ``(dtau_dq, dtau_dqd)``;
d2tau_dqd2 and d2tau_dqdqd (a second, independent route) central differences along
``qd_k``; dM_dq central differences of ``pin.crba`` (symmetrised).  f_ext random
throughout.  On mimic models, where Pinocchio refuses derivatives, its model without
mimic (the relaxed tree) is differentiated and mapped by the chain rule (second_order_support).

Steps and tolerance: rel 1e-6.  Along qd the differentiated first derivatives are
polynomials (dtau_dq quadratic in qd, dtau_dqd affine), on which central differences are
exact: the only error is rounding, so the step is large, h = 0.1 (measured <= 3e-13).
Along q, h = 1e-5: Pinocchio's first derivatives are exact to about eps relative, so the
rounding error is about eps |dtau| / (h |d2tau|) -- up to ~4e-9 on go2 and solo12, whose
d2tau_dqdqd is small next to dtau_dqd (4e-8 at h = 1e-6) -- and the truncation error
h^2 |d^4 tau| / 6 about 1e-10 (measured: <= 5e-9 over these robots).  A wrong term (a
missing mimic multiplier, a frame mix-up, a dropped f_ext derivative) shows up at 1e-3 or
more.
"""

from __future__ import annotations

import numpy as np
import pytest

from grid_algorithms.idsva_so import idsva_so_body_frame, idsva_so_world_frame, uses_world_frame
from grid_core import Reference, algorithms
from grid_core.testing import assert_close, central_fd, random_state, rel_error, tangent_bracket, tangent_fd
from tests.algorithms.second_order_support import (
    CASES,
    STATES,
    case_id,
    pin_crba,
    pin_rnea_derivatives,
)

REL_FD = 1e-6
H_Q = 1e-5  # along the tangent of q
H_V = 0.1  # along qd (exact up to rounding)
SYM = 1e-12


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_idsva_so_matches_finite_differences_of_pinocchio(case, robot_cache, rng):
    robot = robot_cache(*case)
    ref = Reference(robot)
    n = robot.nv
    for _ in range(STATES):
        q, qd, qdd = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        d2q, d2qd, dqdqd, dM = ref.idsva_so(q, qd, qdd, f_ext)
        assert d2q.shape == d2qd.shape == dqdqd.shape == dM.shape == (n, n, n)
        by_q = tangent_fd(robot, lambda x: np.stack(pin_rnea_derivatives(robot, x, qd, qdd, f_ext)), q, H_Q)
        by_qd = central_fd(lambda x: np.stack(pin_rnea_derivatives(robot, q, x, qdd, f_ext)), qd, H_V)
        assert_close(d2q, by_q[0], REL_FD, f"{robot.name}: d2tau_dq2")
        assert_close(d2qd, by_qd[1], REL_FD, f"{robot.name}: d2tau_dqd2")
        assert_close(dqdqd, by_qd[0], REL_FD, f"{robot.name}: d2tau_dqdqd (d/dqd of dtau_dq)")
        assert_close(dqdqd, by_q[1].transpose(0, 2, 1), REL_FD, f"{robot.name}: d2tau_dqdqd (d/dq of dtau_dqd)")
        assert_close(dM, tangent_fd(robot, lambda x: pin_crba(robot, x), q, H_Q), REL_FD, f"{robot.name}: dM_dq")


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_idsva_so_symmetries(case, robot_cache, rng):
    """What theory predicts, to 1e-12 (relative to the tensor's norm).

    d2tau_dqd2[i] and dM_dq[:, :, k] are symmetric (qd is a vector space; M is symmetric).
    d2tau_dq2[i] is symmetric in (j, k) except where j and k are both free-flyer columns:
    tangent derivatives of a Lie group do not commute, and by Baker-Campbell-Hausdorff
    d2tau_dq2[i, j, k] - d2tau_dq2[i, k, j] = dtau_dq[i] . [e_k, e_j] exactly (the se(3)
    bracket, grid_core.testing.tangent_bracket); on every other robot the bracket is zero.
    """
    robot = robot_cache(*case)
    ref = Reference(robot)
    C = tangent_bracket(robot)
    for _ in range(2):
        q, qd, qdd = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        d2q, d2qd, _, dM = ref.idsva_so(q, qd, qdd, f_ext)
        dtau_dq, _ = ref.inverse_dynamics_gradient(q, qd, qdd, f_ext)
        bch = np.einsum("im,mkj->ijk", dtau_dq, C)
        assert np.linalg.norm(d2q - d2q.transpose(0, 2, 1) - bch) <= SYM * np.linalg.norm(d2q)
        assert np.linalg.norm(d2qd - d2qd.transpose(0, 2, 1)) <= SYM * np.linalg.norm(d2qd)
        assert np.linalg.norm(dM - dM.transpose(1, 0, 2)) <= SYM * np.linalg.norm(dM)
        if robot.floating_base:
            assert np.linalg.norm(bch) > 1e-3 * np.linalg.norm(d2q)  # the asymmetry is real


@pytest.mark.parametrize("name", ["iiwa14", "hyq", "atlas", "erd:double_pendulum_continuous"])
def test_body_and_world_frame_forms_agree(name, robot_cache, rng):
    """The reference uses the body-frame form on fixed-base trees without mimic joints; the
    world-frame form evaluates the same scalars in other coordinates."""
    robot = robot_cache(name)
    assert not uses_world_frame(robot)
    q, qd, qdd = random_state(robot, rng)
    f_ext = rng.normal(size=(robot.num_bodies, 6))
    body, _ = idsva_so_body_frame(robot, q, qd, qdd, f_ext)
    world, _ = idsva_so_world_frame(robot, q, qd, qdd, f_ext)
    for b, w, what in zip(body, world, ("d2tau_dq2", "d2tau_dqd2", "d2tau_dqdqd", "dM_dq")):
        assert_close(b, w, 1e-12, f"{name}: {what}")


@pytest.mark.parametrize("case", [("go2", None), ("erd:pr2", None), ("erd:panda", True)], ids=case_id)
def test_world_frame_form_where_needed(case, robot_cache):
    assert uses_world_frame(robot_cache(*case))


def test_idsva_so_takes_gravity(robot_cache, rng):
    robot = robot_cache("go2")
    ref = Reference(robot)
    g = np.array([1.0, -2.0, -5.0])
    q, qd, qdd = random_state(robot, rng)
    d2q, d2qd, dqdqd, _ = ref.idsva_so(q, qd, qdd, None, g)
    grad = lambda q_, qd_: np.stack(ref.inverse_dynamics_gradient(q_, qd_, qdd, None, g))  # noqa: E731
    by_q = tangent_fd(robot, lambda x: grad(x, qd), q, H_Q)
    by_qd = central_fd(lambda x: grad(q, x), qd, H_V)
    assert_close(d2q, by_q[0], REL_FD, "d2tau_dq2")
    assert_close(d2qd, by_qd[1], REL_FD, "d2tau_dqd2")
    assert_close(dqdqd, by_qd[0], REL_FD, "d2tau_dqdqd")
    assert rel_error(d2q, ref.idsva_so(q, qd, qdd)[0]) > 1e-3  # gravity does matter


@pytest.mark.parametrize("case", [("hyq", None), ("erd:panda", True)], ids=case_id)
def test_idsva_so_batch_equals_loop(case, robot_cache, rng):
    robot = robot_cache(*case)
    ref = Reference(robot)
    q, qd, qdd = random_state(robot, rng, n=3)
    f_ext = rng.normal(size=(3, robot.num_bodies, 6))
    batch = ref.idsva_so(q, qd, qdd, f_ext)
    assert all(x.shape == (3, robot.nv, robot.nv, robot.nv) for x in batch)
    loop = [ref.idsva_so(q[k], qd[k], qdd[k], f_ext[k]) for k in range(3)]
    for slot in range(4):
        assert np.array_equal(batch[slot], np.stack([x[slot] for x in loop]))


def test_idsva_so_declaration(robot_cache):
    robot = robot_cache("g1")
    alg = algorithms()["idsva_so"]
    assert alg.depends_on == ("inverse_dynamics", "inverse_dynamics_gradient")  # composed by handle
    assert [p.name for p in alg.inputs(robot)] == ["q", "qd", "qdd", "f_ext", "gravity"]
    outs = alg.outputs(robot)
    assert [p.name for p in outs] == ["d2tau_dq2", "d2tau_dqd2", "d2tau_dqdqd", "dM_dq"]
    assert all(p.shape == (robot.nv,) * 3 for p in outs)
