"""crba reference vs Pinocchio's crba (float64, rel 1e-9), and its identities."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROBOTS
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.pin_bridge import pin_model, robot_cases, symmetrise_upper, to_pin_q

REL = 1e-9
CASES = robot_cases()


@pytest.mark.parametrize("name, floating", CASES)
def test_crba_matches_pinocchio(name, floating, robot_cache, rng):
    import pinocchio as pin

    robot = robot_cache(name, floating)
    ref = Reference(robot)
    model = pin_model(robot)
    data = model.createData()
    for _ in range(20):
        q, _, _ = random_state(robot, rng)
        expected = symmetrise_upper(pin.crba(model, data, to_pin_q(robot, q)))
        assert_close(ref.crba(q), expected, REL, name)


@pytest.mark.parametrize("name", list(ROBOTS))
def test_crba_is_spd_and_the_acceleration_map_of_inverse_dynamics(name, robot_cache, rng):
    robot = robot_cache(name)
    ref = Reference(robot)
    for _ in range(5):
        q, qd, qdd = random_state(robot, rng)
        M = ref.crba(q)
        assert_close(M, M.T, 1e-12, f"{name}: symmetry")
        assert np.linalg.eigvalsh(M).min() > 0, name
        # inverse dynamics is affine in qdd with slope M (mimic joints included)
        tau = ref.inverse_dynamics(q, qd, qdd)
        assert_close(M @ qdd, tau - ref.inverse_dynamics(q, qd, np.zeros(robot.nv)), REL, name)
