"""forward_kinematics vs Pinocchio's forwardKinematics / data.oMi (float64, rel 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.pin_bridge import pin_model, robot_cases, to_pin_q

REL = 1e-9
CASES = robot_cases()


@pytest.mark.parametrize("name, floating", CASES)
def test_forward_kinematics_matches_pinocchio(name, floating, robot_cache, rng):
    import pinocchio as pin

    robot = robot_cache(name, floating)
    ref = Reference(robot)
    model = pin_model(robot)
    data = model.createData()
    for _ in range(20):
        q, _, _ = random_state(robot, rng)
        pin.forwardKinematics(model, data, to_pin_q(robot, q))
        expected = np.stack([data.oMi[i].homogeneous for i in range(1, model.njoints)])
        world_T_body = ref.forward_kinematics(q)
        assert world_T_body.shape == (robot.num_bodies, 4, 4)
        assert_close(world_T_body, expected, REL, name)


def test_forward_kinematics_batch_equals_loop(robot_cache, rng):
    robot = robot_cache("hyq")
    ref = Reference(robot)
    q, _, _ = random_state(robot, rng, n=1000)
    batch = ref.forward_kinematics(q)
    assert batch.shape == (1000, robot.num_bodies, 4, 4)
    assert np.array_equal(batch, np.stack([ref.forward_kinematics(x) for x in q]))
