"""inverse_dynamics_gradient vs Pinocchio's computeRNEADerivatives (float64, rel 1e-9),
f_ext included, and vs central finite differences of our own inverse_dynamics.

Pinocchio refuses the derivatives on mimic models: there the expected value is the
central finite difference of Pinocchio's rnea.  Finite differences are judged at rel 1e-6;
a wrong term (a missing mimic multiplier, a frame mix-up) shows up at 1e-3 or more.  In q
they use h = 1e-6: truncation error (h^2 |f'''| / 6) ~1e-12, rounding error (eps |tau| / h)
~1e-10 of |tau|.  In qd they use h = 1e-2: tau is quadratic in qd, so a central difference
has no truncation error there at any h, and the larger h keeps the rounding error at ~1e-14
of |tau| even where dtau/dqd nearly vanishes (at h = 1e-6 a double-pendulum state with
|dtau/dqd| = 2.9e-5 against |tau| = 1.6 read 5e-6 relative: the difference's rounding).
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import MIMIC_ROBOTS, ROBOTS
from grid_core import Reference
from grid_core.testing import assert_close, central_fd, random_state, tangent_fd
from tests.pin_bridge import pin_forces, pin_model, robot_cases, to_pin_q

REL = 1e-9
REL_FD = 1e-6
H = 1e-6
H_QD = 1e-2  # tau is quadratic in qd: a central difference is exact there at any h
CASES = robot_cases()


def pin_rnea_derivatives(robot, q, qd, qdd, f_ext):
    """Pinocchio's (dtau_dq, dtau_dqd); on a mimic model, central differences of its rnea."""
    import pinocchio as pin

    model = pin_model(robot)
    data = model.createData()
    forces = pin_forces(f_ext)
    if not robot.has_mimic:
        dq, dqd, _ = pin.computeRNEADerivatives(model, data, to_pin_q(robot, q), qd, qdd, forces)
        return dq.copy(), dqd.copy()  # views into data, which dies with this frame
    rnea = lambda q_, qd_: pin.rnea(model, data, to_pin_q(robot, q_), qd_, qdd, forces)  # noqa: E731
    return tangent_fd(robot, lambda x: rnea(x, qd), q, H), central_fd(lambda x: rnea(q, x), qd, H_QD)


@pytest.mark.parametrize("name, floating", CASES)
def test_inverse_dynamics_gradient_matches_pinocchio(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    rel = REL_FD if robot.has_mimic else REL
    for _ in range(20):
        q, qd, qdd = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        dq, dqd = ref.inverse_dynamics_gradient(q, qd, qdd, f_ext)
        pin_dq, pin_dqd = pin_rnea_derivatives(robot, q, qd, qdd, f_ext)
        assert_close(dq, pin_dq, rel, f"{name}: dtau_dq")
        assert_close(dqd, pin_dqd, rel, f"{name}: dtau_dqd")


@pytest.mark.parametrize("name", [n for n in ROBOTS if n not in MIMIC_ROBOTS])
def test_inverse_dynamics_gradient_without_f_ext_matches_pinocchio(name, robot_cache, rng):
    import pinocchio as pin

    robot = robot_cache(name)
    model = pin_model(robot)
    q, qd, qdd = random_state(robot, rng)
    data = model.createData()
    dq, dqd, _ = pin.computeRNEADerivatives(model, data, to_pin_q(robot, q), qd, qdd)
    ours = Reference(robot).inverse_dynamics_gradient(q, qd, qdd)
    assert_close(ours[0], dq, REL, name)
    assert_close(ours[1], dqd, REL, name)


@pytest.mark.parametrize("name, floating", CASES)
def test_inverse_dynamics_gradient_matches_own_finite_differences(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    for _ in range(3):
        q, qd, qdd = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        dq, dqd = ref.inverse_dynamics_gradient(q, qd, qdd, f_ext)
        fd_dq = tangent_fd(robot, lambda x: ref.inverse_dynamics(x, qd, qdd, f_ext), q, H)
        fd_dqd = central_fd(lambda x: ref.inverse_dynamics(q, x, qdd, f_ext), qd, H_QD)
        assert_close(dq, fd_dq, REL_FD, f"{name}: dtau_dq")
        assert_close(dqd, fd_dqd, REL_FD, f"{name}: dtau_dqd")


def test_inverse_dynamics_gradient_batch_equals_loop(robot_cache, rng):
    robot = robot_cache("hyq")
    ref = Reference(robot)
    q, qd, qdd = random_state(robot, rng, n=1000)
    f_ext = rng.normal(size=(1000, robot.num_bodies, 6))
    dq, dqd = ref.inverse_dynamics_gradient(q, qd, qdd, f_ext)
    assert dq.shape == dqd.shape == (1000, robot.nv, robot.nv)
    loop = [ref.inverse_dynamics_gradient(q[k], qd[k], qdd[k], f_ext[k]) for k in range(1000)]
    assert np.array_equal(dq, np.stack([x[0] for x in loop]))
    assert np.array_equal(dqd, np.stack([x[1] for x in loop]))
