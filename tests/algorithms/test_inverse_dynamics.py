"""Generated inverse dynamics equals the reference, on every backend of the generated
code: host emulation (CI) and the GPU (RobotHandle, under the `gpu` marker).

CI's sample of robots (the bundled robots but g1 and 4 example-robot-data robots, tests/generated.py
SAMPLE_ROBOTS: fixed and floating, mimic and continuous joints; all 14 CODEGEN_ROBOTS with
GRID_FULL_SWEEP=1); float64 at rel 1e-9 and float32 at rel 1e-4; with and without
f_ext; both layouts (block-cooperative and per-state); every tier; and with the
deepest spill rung forced.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state

from tests.generated import BACKENDS, GRAVITY_ROBOTS, backend, emulated, robot_cases

TOL = {np.float64: 1e-9, np.float32: 1e-4}
N = 6


def _cases(robot, rng):
    q, qd, qdd = random_state(robot, rng, N)
    f_ext = rng.normal(size=(N, robot.num_bodies, 6))
    ref = Reference(robot)
    return (q, qd, qdd, f_ext), ref.inverse_dynamics(q, qd, qdd), ref.inverse_dynamics(q, qd, qdd, f_ext)


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases())
def test_generated_equals_reference(kind, name, spill, rng):
    robot = load(name)
    (q, qd, qdd, f_ext), expected, expected_f = _cases(robot, rng)
    for dtype in (np.float64, np.float32):
        emu = backend(kind, name, spill, dtype)
        for layout in ("block", "per_state"):
            tiers = (0, 1, 2) if layout == "block" else (0,)
            for tier in tiers:
                run = emu.with_launch(layout=layout, tier=tier)
                what = f"{name} {np.dtype(dtype).name} {layout} tier {tier} spill={spill}"
                assert_close(run.inverse_dynamics(q, qd, qdd), expected, TOL[dtype], what)
                assert_close(run.inverse_dynamics(q, qd, qdd, f_ext), expected_f, TOL[dtype], what + " f_ext")


@pytest.mark.parametrize("name", GRAVITY_ROBOTS)
@pytest.mark.parametrize("kind", BACKENDS)
def test_single_state_and_gravity_and_auto_layout(kind, name, rng):
    robot = load(name)
    ref = Reference(robot)
    q, qd, qdd = random_state(robot, rng)
    g = np.array([0.3, -1.2, -9.0])
    emu = backend(kind, name, False)
    out = emu.inverse_dynamics(q, qd, qdd, gravity=g)
    assert out.shape == (robot.nv,)
    assert_close(out, ref.inverse_dynamics(q, qd, qdd, gravity=g), 1e-9)
    # qdd = 0 path (no acceleration input): the bias forces
    zero = np.zeros(robot.nv)
    assert_close(emu.inverse_dynamics(q, qd, zero), ref.inverse_dynamics(q, qd, zero), 1e-9)


def test_layouts_agree_to_rounding(rng):
    """Both layouts compute the same sums in different orders: equal to rounding."""
    robot = load("atlas")
    q, qd, qdd = random_state(robot, rng, 16)
    emu = emulated("atlas", False)
    a = emu.with_launch(layout="block").inverse_dynamics(q, qd, qdd)
    b = emu.with_launch(layout="per_state").inverse_dynamics(q, qd, qdd)
    assert_close(a, b, 1e-13)


def test_large_batch_grid_stride(rng):
    robot = load("hyq")
    q, qd, qdd = random_state(robot, rng, 300)
    emu = emulated("hyq", True)
    expected = Reference(robot).inverse_dynamics(q, qd, qdd)
    for layout in ("block", "per_state"):
        # few blocks: the grid-stride loops must cover every state
        out = emu.with_launch(layout=layout, blocks=7, tier=2).inverse_dynamics(q, qd, qdd)
        assert_close(out, expected, 1e-9, layout)
