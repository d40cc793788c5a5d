"""The inverse joint-space inertia Minv(q): the same assertions over every backend, the float64
Reference, the generated code host-emulated (CI) and on the GPU (RobotHandle, `gpu` marker).

Each backend's Minv is symmetric and inverts the Reference's crba (an independent algorithm:
M is formed there, never here); the generated code also equals the Reference (proven against
Pinocchio in test_minv_reference.py) at rel 1e-9 (float64) and 1e-4 (float32), on CI's sample
of robots (the bundled robots but g1 and 4 example-robot-data robots, tests/generated.py SAMPLE_ROBOTS:
fixed and floating bases, mimic joints; all 14 CODEGEN_ROBOTS with GRID_FULL_SWEEP=1), both layouts,
every tier, and with the deepest spill rung forced.

In float32 the identity is judged as the reference tests judge an ill-conditioned robot
(tests.generated.assert_solves: LAPACK's backward-error ratio below 30 wherever cond(M) eps is
over 1e-4, as it is on most of the catalogue: cond(M) reaches 1e6, where a float32 inverse's
residual against I is ~0.1); the forward error against the Reference is held to 1e-4 on every
robot regardless.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.generated import (
    BACKENDS,
    TOL,
    assert_solves,
    backend,
    backend_cases,
    check_ring_batch,
    check_ring_forms,
    check_staged_batch,
    large_robot_cases,
    launches,
)

N = 5
CASES = backend_cases()


@pytest.mark.parametrize(("kind", "name", "spill"), CASES)
def test_inverse_inertia(kind, name, spill, rng):
    robot = load(name)
    ref = Reference(robot)
    q = random_state(robot, rng, N)[0]
    M = ref.crba(q)
    expected = ref.minv(q)
    eye = np.broadcast_to(np.eye(robot.nv), M.shape)
    for dtype in ((np.float64,) if kind == "reference" else (np.float64, np.float32)):
        for what, minv in launches(kind, name, spill, dtype, "minv"):
            what = f"{name} {np.dtype(dtype).name} {what} spill={spill}"
            Minv = minv(q)
            assert Minv.shape == (N, robot.nv, robot.nv)
            assert_close(Minv, np.swapaxes(Minv, 1, 2), 1e-15, what + ": not symmetric")
            if dtype == np.float64:
                assert_close(M @ Minv, eye, 1e-9, what + ": crba(q) Minv != I")
            else:
                assert_solves(Minv, expected, M, eye, dtype, what + ": crba(q) Minv != I")
            assert_close(Minv, expected, TOL[dtype], what)
            assert_close(minv(q[0]), expected[0], TOL[dtype], what + " single state")


# hyq on every backend; a mimic robot (the Schur complement's fan-outs) where it is built
LARGE = [pytest.param(*p.values, "hyq", id=f"{p.id}-hyq", marks=p.marks) for p in BACKENDS] + \
    [pytest.param("emulated", "erd:panda", id="emulated-erd:panda")]


@pytest.mark.parametrize(("kind", "name"), LARGE)
def test_large_batch_grid_stride(kind, name, rng):
    robot = load(name)
    q = random_state(robot, rng, 300)[0]
    expected = Reference(robot).minv(q)
    b = backend(kind, name, True)
    for layout in ("block", "per_state"):
        # few blocks: the grid-stride loops must cover every state
        out = b.with_launch(layout=layout, blocks=7, tier=2).minv(q)
        assert_close(out, expected, 1e-9, layout)


# the per-state column passes (in each tree's root frame): fixed and floating bases, branched
# trees, a mimic robot (the Schur complement over the relaxed tree's columns)
@pytest.mark.parametrize("name", ["iiwa14", "hyq", "go2", "erd:pr2"])
def test_per_state_columns(name, rng):
    from grid_core.testing import Emulated

    robot = load(name)
    q = random_state(robot, rng, N)[0]
    expected = Reference(robot).minv(q)
    b = Emulated(robot, ["minv"], np.float64)
    b.set_poison(True)
    assert_close(b.with_launch(layout="per_state").minv(q), expected, 1e-9, name)


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("name", ["iiwa14", "hyq"])
def test_staged_batch(kind, name, rng):
    """A batch from the measured staging threshold on (tests.generated.check_staged_batch)."""
    check_staged_batch(kind, name, "minv", rng)


@pytest.mark.parametrize(("kind", "name"), large_robot_cases())
def test_ring_batch(kind, name, rng):
    """A batch past the ring threshold on robots too large to stage whole (tests.generated.check_ring_batch)."""
    check_ring_batch(kind, name, "minv", rng)


@pytest.mark.parametrize("kind", BACKENDS)
def test_ring_forms(kind, rng):
    """The ring kernel with its flush forced: g1 flushes twice, so by groups (tests.generated.check_ring_forms)."""
    check_ring_forms(kind, "g1", "minv", [({"per_state_ring_flush": "whole"}, False)], rng)
