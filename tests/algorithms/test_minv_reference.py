"""minv reference vs Pinocchio's computeMinverse (float64, rel 1e-9), and its identities.

Pinocchio refuses computeMinverse on mimic models: there the expected value is the
inverse of Pinocchio's crba.  Ill-conditioned robots (pin_bridge.ILL_CONDITIONED) are
checked on the equations instead, in test_ill_conditioned_reference.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROBOTS
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.pin_bridge import ILL_CONDITIONED, pin_minv, robot_cases

REL = 1e-9
WELL_CONDITIONED = [name for name in ROBOTS if name not in ILL_CONDITIONED]
CASES = robot_cases(exclude=ILL_CONDITIONED)


@pytest.mark.parametrize("name, floating", CASES)
def test_minv_matches_pinocchio(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    for _ in range(20):
        q, _, _ = random_state(robot, rng)
        assert_close(ref.minv(q), pin_minv(robot, q), REL, name)


@pytest.mark.parametrize("name", WELL_CONDITIONED)
def test_minv_inverts_crba(name, robot_cache, rng):
    robot = robot_cache(name)
    ref = Reference(robot)
    for _ in range(5):
        q, _, _ = random_state(robot, rng)
        Minv = ref.minv(q)
        assert_close(Minv, Minv.T, 1e-12, f"{name}: symmetry")
        assert_close(ref.crba(q) @ Minv, np.eye(robot.nv), REL, name)


def test_minv_is_computed_directly():
    # the recursion itself, not an inversion of crba's M: it composes nothing
    from grid_core import algorithms

    assert algorithms()["minv"].depends_on == ()


def test_minv_batch_equals_loop(robot_cache, rng):
    robot = robot_cache("hyq")
    ref = Reference(robot)
    q, _, _ = random_state(robot, rng, n=1000)
    batch = ref.minv(q)
    assert batch.shape == (1000, robot.nv, robot.nv)
    assert np.array_equal(batch, np.stack([ref.minv(x) for x in q]))
