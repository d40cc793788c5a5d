"""forward_dynamics_gradient vs Pinocchio's computeABADerivatives (float64, rel 1e-9),
f_ext included, and vs central finite differences of our own forward_dynamics.

Pinocchio refuses the derivatives on mimic models: there the expected value is the
central finite difference of Pinocchio's ``solve(M, tau - rnea(q, qd, 0))``.  Ill-conditioned
robots (pin_bridge.ILL_CONDITIONED) are checked on the equations in test_ill_conditioned_reference.py.

Finite differences use h = 1e-5 and rel 1e-6.  Forward dynamics is computed with a
relative error of about eps cond(M) (cond(M) up to ~1e4-1e6 here), so the rounding
error of a central difference is about eps cond(M) |qdd| / (h |dqdd|): ~1e-6 at
h = 1e-6 on a floating panda (measured), ~1e-7 at h = 1e-5, while the truncation error
(h^2 |d3 qdd| / 6) stays ~1e-9.  A wrong term shows up at 1e-3 or more.
"""

from __future__ import annotations

import pytest

from conftest import ROBOTS
from grid_core import Reference, algorithms
from grid_core.testing import assert_close, central_fd, random_state, tangent_fd
from tests.pin_bridge import (
    ILL_CONDITIONED,
    pin_forces,
    pin_forward_dynamics,
    pin_model,
    robot_cases,
    to_pin_q,
)

REL = 1e-9
REL_FD = 1e-6
H = 1e-5
WELL_CONDITIONED = [name for name in ROBOTS if name not in ILL_CONDITIONED]
CASES = robot_cases(exclude=ILL_CONDITIONED)


def pin_aba_derivatives(robot, q, qd, tau, f_ext):
    """Pinocchio's (dqdd_dq, dqdd_dqd); on a mimic model, central differences of its FD."""
    import pinocchio as pin

    model = pin_model(robot)
    if not robot.has_mimic:
        data = model.createData()
        dq, dqd, _ = pin.computeABADerivatives(model, data, to_pin_q(robot, q), qd, tau, pin_forces(f_ext))
        return dq.copy(), dqd.copy()  # views into data, which dies with this frame
    fd = lambda q_, qd_: pin_forward_dynamics(robot, q_, qd_, tau, f_ext, model)  # noqa: E731
    return tangent_fd(robot, lambda x: fd(x, qd), q, H), central_fd(lambda x: fd(q, x), qd, H)


@pytest.mark.parametrize("name, floating", CASES)
def test_forward_dynamics_gradient_matches_pinocchio(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    rel = REL_FD if robot.has_mimic else REL
    for _ in range(20):
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        dq, dqd = ref.forward_dynamics_gradient(q, qd, tau, f_ext)
        pin_dq, pin_dqd = pin_aba_derivatives(robot, q, qd, tau, f_ext)
        assert_close(dq, pin_dq, rel, f"{name}: dqdd_dq")
        assert_close(dqd, pin_dqd, rel, f"{name}: dqdd_dqd")


@pytest.mark.parametrize("name, floating", CASES)
def test_forward_dynamics_gradient_matches_own_finite_differences(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    for _ in range(3):
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        dq, dqd = ref.forward_dynamics_gradient(q, qd, tau, f_ext)
        fd_dq = tangent_fd(robot, lambda x: ref.forward_dynamics(x, qd, tau, f_ext), q, H)
        fd_dqd = central_fd(lambda x: ref.forward_dynamics(q, x, tau, f_ext), qd, H)
        assert_close(dq, fd_dq, REL_FD, f"{name}: dqdd_dq")
        assert_close(dqd, fd_dqd, REL_FD, f"{name}: dqdd_dqd")


@pytest.mark.parametrize("name", ["iiwa14", "g1", "erd:pr2"])
def test_forward_dynamics_gradient_differentiates_the_equations_of_motion(name, robot_cache, rng):
    # ID(q, qd, FD(q, qd, tau)) = tau for all (q, qd): M dqdd/du = -dtau/du at qdd = FD
    robot = robot_cache(name)
    ref = Reference(robot)
    q, qd, tau = random_state(robot, rng)
    qdd = ref.forward_dynamics(q, qd, tau)
    dtau_dq, dtau_dqd = ref.inverse_dynamics_gradient(q, qd, qdd)
    dq, dqd = ref.forward_dynamics_gradient(q, qd, tau)
    M = ref.crba(q)
    assert_close(M @ dq, -dtau_dq, REL, name)
    assert_close(M @ dqd, -dtau_dqd, REL, name)


def test_forward_dynamics_gradient_is_composed_through_declared_dependencies():
    assert algorithms()["forward_dynamics_gradient"].depends_on == (
        "forward_dynamics", "minv", "inverse_dynamics_gradient")
