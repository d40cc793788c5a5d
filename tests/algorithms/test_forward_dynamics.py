"""Forward dynamics composed as qdd = Minv (tau - ID(q, qd, 0, f_ext)): the same assertions over
every backend, the float64 Reference, the generated code host-emulated (CI) and on the GPU
(RobotHandle, `gpu` marker).

Each backend's qdd satisfies the equation of motion checked with an independent algorithm,
the Reference's inverse dynamics: ID(q, qd, qdd, f_ext) = tau (float64, rel 1e-9).  The generated
code also equals the Reference (proven against Pinocchio in test_forward_dynamics_reference.py),
float64 at rel 1e-9 and float32 at rel 1e-4, where the robot's condition number allows such a
forward error in that precision; where it does not (float32 on the humanoids, cond(M) ~1e5),
by LAPACK's backward-error ratio (tests.generated.assert_solves).  CI's sample of robots
(the bundled robots but g1 and 4 example-robot-data robots, tests/generated.py SAMPLE_ROBOTS; all 14
CODEGEN_ROBOTS with GRID_FULL_SWEEP=1), with and without f_ext, both layouts, every tier, the deepest spill
rung forced.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.generated import BACKENDS, assert_solves, backend, backend_cases, launches

N = 4
CASES = backend_cases()


@pytest.mark.parametrize(("kind", "name", "spill"), CASES)
def test_forward_dynamics(kind, name, spill, rng):
    robot = load(name)
    ref = Reference(robot)
    q, qd, _ = random_state(robot, rng, N)
    tau = rng.normal(size=(N, robot.nv))
    f_ext = rng.normal(size=(N, robot.num_bodies, 6))
    M = ref.crba(q)
    zero = np.zeros((N, robot.nv))
    for f in (None, f_ext):
        expected = ref.forward_dynamics(q, qd, tau, f)
        bias = ref.inverse_dynamics(q, qd, zero, f)
        for dtype in ((np.float64,) if kind == "reference" else (np.float64, np.float32)):
            for what, fd in launches(kind, name, spill, dtype, "forward_dynamics"):
                what = f"{name} {np.dtype(dtype).name} {what} spill={spill}{'' if f is None else ' f_ext'}"
                qdd = fd(q, qd, tau, f)
                assert qdd.shape == (N, robot.nv)
                if dtype == np.float64:
                    assert_close(ref.inverse_dynamics(q, qd, qdd, f), tau, 1e-9, what + ": ID(q, qd, qdd) != tau")
                assert_solves(qdd, expected, M, tau - bias, dtype, what, parts=(tau, bias))


@pytest.mark.parametrize("kind", BACKENDS)
def test_single_state_gravity_and_grid_stride(kind, rng):
    robot = load("hyq")
    ref = Reference(robot)
    b = backend(kind, "hyq", True)
    q, qd, _ = random_state(robot, rng)
    tau = rng.normal(size=robot.nv)
    g = np.array([0.3, -1.2, -9.0])
    out = b.forward_dynamics(q, qd, tau, gravity=g)
    assert out.shape == (robot.nv,)
    assert_close(out, ref.forward_dynamics(q, qd, tau, gravity=g), 1e-9)
    q, qd, _ = random_state(robot, rng, 300)
    tau = rng.normal(size=(300, robot.nv))
    expected = ref.forward_dynamics(q, qd, tau)
    for layout in ("block", "per_state"):
        # few blocks: the grid-stride loops must cover every state
        assert_close(b.with_launch(layout=layout, blocks=7, tier=2).forward_dynamics(q, qd, tau), expected, 1e-9, layout)


@pytest.mark.parametrize("method", ["minv", "aba"])
@pytest.mark.parametrize("name", ["erd:panda"])
def test_both_methods(method, name, rng):
    """The method a robot's header bakes in is measured; the other one must be as correct."""
    from grid_core.testing import Emulated

    robot = load(name)
    ref = Reference(robot)
    b = Emulated(robot, ["forward_dynamics"], np.float64, algorithm_options={"forward_dynamics": {"method": method}})
    q, qd, _ = random_state(robot, rng, 3)
    tau = rng.normal(size=(3, robot.nv))
    f_ext = rng.normal(size=(3, robot.num_bodies, 6))
    for layout in ("block", "per_state"):
        run = b.with_launch(layout=layout)
        assert_close(run.forward_dynamics(q, qd, tau, f_ext), ref.forward_dynamics(q, qd, tau, f_ext), 1e-9,
                     f"{name} {method} {layout}")
