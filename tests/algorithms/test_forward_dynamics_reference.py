"""forward_dynamics (Minv (tau - ID(q, qd, 0))) vs Pinocchio (float64, rel 1e-9), f_ext included.

Expected values as for aba (test_aba_reference.py): Pinocchio's aba, or on a mimic model
``solve(M, tau - rnea(q, qd, 0))``; ill-conditioned robots in test_ill_conditioned_reference.py.
"""

from __future__ import annotations

import pytest

from conftest import ROBOTS
from grid_core import Reference, algorithms
from grid_core.testing import assert_close, random_state
from tests.pin_bridge import ILL_CONDITIONED, pin_forward_dynamics, robot_cases

REL = 1e-9
WELL_CONDITIONED = [name for name in ROBOTS if name not in ILL_CONDITIONED]
CASES = robot_cases(exclude=ILL_CONDITIONED)


@pytest.mark.parametrize("name, floating", CASES)
def test_forward_dynamics_matches_pinocchio(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    for _ in range(20):
        q, qd, tau = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        assert_close(ref.forward_dynamics(q, qd, tau), pin_forward_dynamics(robot, q, qd, tau), REL, name)
        assert_close(
            ref.forward_dynamics(q, qd, tau, f_ext), pin_forward_dynamics(robot, q, qd, tau, f_ext), REL, name
        )


@pytest.mark.parametrize("name", WELL_CONDITIONED)
def test_forward_dynamics_inverts_inverse_dynamics(name, robot_cache, rng):
    robot = robot_cache(name)
    ref = Reference(robot)
    for _ in range(5):
        q, qd, qdd = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        tau = ref.inverse_dynamics(q, qd, qdd, f_ext)
        assert_close(ref.forward_dynamics(q, qd, tau, f_ext), qdd, REL, name)
        assert_close(ref.forward_dynamics(q, qd, tau, f_ext, gravity=(0, 0, 0)),
                     ref.aba(q, qd, tau, f_ext, gravity=(0, 0, 0)), REL, name)


def test_forward_dynamics_is_composed_through_declared_dependencies():
    # minv and inverse_dynamics for the reference (Minv (tau - bias)); aba for the generated code, which
    # composes aba's inner instead where the GPU measured it faster
    assert algorithms()["forward_dynamics"].depends_on == ("minv", "inverse_dynamics", "aba")
