"""aba reference vs Pinocchio's aba (float64, rel 1e-9), f_ext included, and its identities.

Pinocchio refuses aba on mimic models: there the expected value is
``solve(M, tau - rnea(q, qd, 0))`` with Pinocchio's crba and rnea.  Ill-conditioned
robots (pin_bridge.ILL_CONDITIONED) are checked on the equations of motion instead, in
test_ill_conditioned_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROBOTS
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.pin_bridge import ILL_CONDITIONED, pin_forward_dynamics, pin_model, robot_cases

REL = 1e-9
WELL_CONDITIONED = [name for name in ROBOTS if name not in ILL_CONDITIONED]
CASES = robot_cases(exclude=ILL_CONDITIONED)


@pytest.mark.parametrize("name, floating", CASES)
def test_aba_matches_pinocchio(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    for _ in range(20):
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        assert_close(ref.aba(q, qd, tau), pin_forward_dynamics(robot, q, qd, tau), REL, name)
        assert_close(ref.aba(q, qd, tau, f_ext), pin_forward_dynamics(robot, q, qd, tau, f_ext), REL, name)


@pytest.mark.parametrize("name", WELL_CONDITIONED)
def test_aba_inverts_inverse_dynamics_and_equals_forward_dynamics(name, robot_cache, rng):
    robot = robot_cache(name)
    ref = Reference(robot)
    for _ in range(5):
        q, qd, qdd = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        tau = ref.inverse_dynamics(q, qd, qdd, f_ext)
        assert_close(ref.aba(q, qd, tau, f_ext), qdd, REL, name)
        assert_close(ref.aba(q, qd, tau, f_ext), ref.forward_dynamics(q, qd, tau, f_ext), REL, name)


def test_aba_gravity_argument(robot_cache, rng):
    import pinocchio as pin

    robot = robot_cache("go2")
    q, qd, tau = random_state(robot, rng)
    model = pin_model(robot).copy()
    model.gravity = pin.Motion(np.array([0.3, -1.0, 2.0]), np.zeros(3))
    expected = pin_forward_dynamics(robot, q, qd, tau, model=model)
    assert_close(Reference(robot).aba(q, qd, tau, gravity=(0.3, -1.0, 2.0)), expected, REL)


def test_aba_batch_equals_loop(robot_cache, rng):
    robot = robot_cache("hyq")
    ref = Reference(robot)
    q, qd, tau = random_state(robot, rng, n=1000)
    f_ext = rng.normal(size=(1000, robot.num_bodies, 6))
    batch = ref.aba(q, qd, tau, f_ext)
    assert batch.shape == (1000, robot.nv)
    loop = np.stack([ref.aba(q[k], qd[k], tau[k], f_ext[k]) for k in range(1000)])
    assert np.array_equal(batch, loop)
