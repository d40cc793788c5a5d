"""inverse_dynamics reference vs Pinocchio's rnea (float64, rel 1e-9), f_ext included."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROBOTS, load
from grid_core import Reference
from grid_core.errors import InputError
from grid_core.testing import assert_close, random_state
from tests.pin_bridge import pin_model, to_pin_q

REL = 1e-9


def pin_rnea(robot, q, qd, qdd, f_ext=None):
    import pinocchio as pin

    model = pin_model(robot)
    data = model.createData()
    if f_ext is None:
        return pin.rnea(model, data, to_pin_q(robot, q), qd, qdd)
    forces = [pin.Force.Zero()] + [pin.Force(fx[:3], fx[3:]) for fx in f_ext]
    return pin.rnea(model, data, to_pin_q(robot, q), qd, qdd, forces)


@pytest.mark.parametrize("name", list(ROBOTS))
def test_rnea_matches_pinocchio(name, rng):
    robot = load(name)
    ref = Reference(robot)
    for _ in range(20):
        q, qd, qdd = random_state(robot, rng)
        f_ext = rng.normal(size=(robot.num_bodies, 6))
        assert_close(ref.inverse_dynamics(q, qd, qdd), pin_rnea(robot, q, qd, qdd), REL, name)
        assert_close(
            ref.inverse_dynamics(q, qd, qdd, f_ext=f_ext), pin_rnea(robot, q, qd, qdd, f_ext), REL, name
        )


def test_batch_equals_loop(rng):
    robot = load("atlas")
    ref = Reference(robot)
    q, qd, qdd = random_state(robot, rng, n=1000)
    f_ext = rng.normal(size=(1000, robot.num_bodies, 6))
    batch = ref.inverse_dynamics(q, qd, qdd, f_ext)
    assert batch.shape == (1000, robot.nv)
    loop = np.stack([ref.inverse_dynamics(q[k], qd[k], qdd[k], f_ext[k]) for k in range(1000)])
    assert np.array_equal(batch, loop)


def test_gravity_argument(rng):
    robot = load("iiwa14")
    ref = Reference(robot)
    q, qd, qdd = random_state(robot, rng)
    # zero gravity equals Pinocchio with its gravity switched off
    import pinocchio as pin

    model = pin_model(robot).copy()
    model.gravity = pin.Motion.Zero()
    expected = pin.rnea(model, model.createData(), to_pin_q(robot, q), qd, qdd)
    assert_close(ref.inverse_dynamics(q, qd, qdd, gravity=(0, 0, 0)), expected, REL)


@pytest.mark.parametrize(
    "args, match",
    [
        (lambda r: (np.zeros(3), np.zeros(r.nv), np.zeros(r.nv)), r"'q' has shape \(3,\), expected \(7,\)"),
        (lambda r: (np.zeros(r.nq), np.full(r.nv, np.nan), np.zeros(r.nv)), "'qd' contains NaN"),
        (lambda r: (np.zeros(r.nq), np.zeros(r.nv), np.array(["a"] * r.nv)), "'qdd' has dtype"),
        (lambda r: (np.zeros((4, r.nq)), np.zeros((5, r.nv)), np.zeros((4, r.nv))), "batch size 5"),
    ],
)
def test_input_validation(args, match):
    robot = load("iiwa14")
    with pytest.raises(InputError, match=match):
        Reference(robot).inverse_dynamics(*args(robot))
