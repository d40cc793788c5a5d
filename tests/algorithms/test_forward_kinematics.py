"""Generated forward kinematics equals the reference (proven against Pinocchio's oMi in
test_forward_kinematics_reference.py) on host emulation (CI; the GPU under the `gpu` marker):
CI's sample of robots (every CODEGEN_ROBOTS robot with GRID_FULL_SWEEP=1), float64 at rel 1e-9,
float32 at rel 1e-4, both layouts, every tier, and the deepest spill rung forced."""

from __future__ import annotations

import pytest

from tests.generated import SWEEP_ROBOTS, check_kinematics, robot_cases

@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases(robots=SWEEP_ROBOTS))
def test_forward_kinematics(kind, name, spill, rng):
    check_kinematics(kind, name, spill, "forward_kinematics", rng)
