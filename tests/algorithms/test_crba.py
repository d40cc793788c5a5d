"""The joint-space inertia matrix M(q): the same assertions over every backend, the float64
Reference, the generated code host-emulated (CI) and on the GPU (RobotHandle, `gpu` marker).

Each backend's M is symmetric and equals d tau / d qdd of the Reference's inverse dynamics
(an independent algorithm: M qdd = ID(q, 0, qdd) - ID(q, 0, 0)); the generated code also
equals the Reference (proven against Pinocchio in test_crba_reference.py) at rel 1e-9
(float64) and 1e-4 (float32), on CI's sample of robots (the bundled robots but g1 and 4 example-robot-data
robots, tests/generated.py SAMPLE_ROBOTS; all 14 CODEGEN_ROBOTS with GRID_FULL_SWEEP=1), both
layouts, every tier, and with the deepest spill rung forced.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.generated import (BACKENDS, TOL, backend, backend_cases, check_ring_batch, check_ring_forms,
                             check_staged_batch, large_robot_cases, launches)

N = 5
CASES = backend_cases()


@pytest.mark.parametrize(("kind", "name", "spill"), CASES)
def test_mass_matrix(kind, name, spill, rng):
    robot = load(name)
    ref = Reference(robot)
    q, _, qdd = random_state(robot, rng, N)
    zero = np.zeros((N, robot.nv))
    Mqdd = ref.inverse_dynamics(q, zero, qdd, gravity=np.zeros(3))  # d tau / d qdd, gravity off
    expected = ref.crba(q)
    for dtype in ((np.float64,) if kind == "reference" else (np.float64, np.float32)):
        for what, crba in launches(kind, name, spill, dtype, "crba"):
            what = f"{name} {np.dtype(dtype).name} {what} spill={spill}"
            M = crba(q)
            assert M.shape == (N, robot.nv, robot.nv)
            assert_close(M, np.swapaxes(M, 1, 2), 1e-15, what + ": not symmetric")
            if dtype == np.float64:
                assert_close(np.einsum("nij,nj->ni", M, qdd), Mqdd, 1e-9, what + ": M qdd != ID(q, 0, qdd)")
            assert_close(M, expected, TOL[dtype], what)
            assert_close(crba(q[0]), expected[0], TOL[dtype], what + " single state")


@pytest.mark.parametrize("kind", BACKENDS)
def test_large_batch_grid_stride(kind, rng):
    robot = load("hyq")
    q = random_state(robot, rng, 300)[0]
    expected = Reference(robot).crba(q)
    b = backend(kind, "hyq", True)
    for layout in ("block", "per_state"):
        # few blocks: the grid-stride loops must cover every state
        out = b.with_launch(layout=layout, blocks=7, tier=2).crba(q)
        assert_close(out, expected, 1e-9, layout)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("name", ["iiwa14", "hyq"])
def test_staged_batch(kind, name, rng):
    """A batch from the measured staging threshold on (tests.generated.check_staged_batch)."""
    check_staged_batch(kind, name, "crba", rng)


@pytest.mark.parametrize(("kind", "name"), large_robot_cases())
def test_ring_batch(kind, name, rng):
    """A batch past the ring threshold on robots too large to stage whole (tests.generated.check_ring_batch)."""
    check_ring_batch(kind, name, "crba", rng)


@pytest.mark.parametrize("kind", BACKENDS)
def test_ring_forms(kind, rng):
    """The ring kernel with its flush forced (tests.generated.check_ring_forms)."""
    check_ring_forms(kind, "atlas", "crba", [({"per_state_ring_flush": "whole"}, True),
                                             ({"per_state_ring_flush": "groups"}, False)], rng)
