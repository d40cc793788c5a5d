"""Forward dynamics by the articulated-body algorithm: the same assertions over every backend,
the float64 Reference, the generated code host-emulated (CI) and on the GPU (RobotHandle,
`gpu` marker).

The generated code equals the Reference (proven against Pinocchio in test_aba_reference.py) at
rel 1e-9 (float64) and 1e-4 (float32), with and without f_ext, on CI's sample of robots (the
bundled robots but g1 and 4 example-robot-data robots, tests/generated.py SAMPLE_ROBOTS: mimic joints
among them, the relaxed tree and its constraint columns; all 14 CODEGEN_ROBOTS with
GRID_FULL_SWEEP=1), both layouts, every tier, and with the deepest spill rung forced.  Every backend's
qdd also satisfies an independent identity, ID(q, qd, aba(q, qd, tau)) = tau with the
Reference's inverse dynamics.  An ill-conditioned robot (pin_bridge.ILL_CONDITIONED) is judged
on the equations of motion instead, as test_ill_conditioned_reference.py judges it.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.generated import (
    BACKENDS,
    GRAVITY_ROBOTS,
    TOL,
    assert_solves,
    backend,
    backend_cases,
    launches,
)
from tests.pin_bridge import ILL_CONDITIONED

N = 5
CASES = backend_cases()


def _judge(name, ref, qdd, expected, q, qd, tau, f_ext, dtype, what):
    """``qdd`` against the Reference's; on an ill-conditioned robot, where forward errors of 1e-7
    are the model's and not the code's, by the equations it solves (tests.generated.assert_solves:
    LAPACK's backward-error ratio, as test_ill_conditioned_reference.py judges the reference)."""
    if name not in ILL_CONDITIONED:
        assert_close(qdd, expected, TOL[dtype], what)
        return
    bias = ref.inverse_dynamics(q, qd, np.zeros_like(qd), f_ext)
    assert_solves(qdd, expected, ref.crba(q), tau - bias, dtype, what, parts=(tau, bias))


@pytest.mark.parametrize(("kind", "name", "spill"), CASES)
def test_forward_dynamics(kind, name, spill, rng):
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau = random_state(robot, rng, N)
    f_ext = rng.normal(size=(N, robot.num_bodies, 6))
    expected = {False: ref.aba(q, qd, tau), True: ref.aba(q, qd, tau, f_ext)}
    for dtype in ((np.float64,) if kind == "reference" else (np.float64, np.float32)):
        block = []
        for what, aba in launches(kind, name, spill, dtype, "aba"):
            for with_f in (False, True):
                fx = f_ext if with_f else None
                label = f"{name} {np.dtype(dtype).name} {what} spill={spill}" + (" f_ext" if with_f else "")
                qdd = aba(q, qd, tau, fx)
                if what.startswith("block") and with_f:
                    block.append(qdd)
                assert qdd.shape == (N, robot.nv)
                _judge(name, ref, qdd, expected[with_f], q, qd, tau, fx, dtype, label)
                if dtype == np.float64 and name not in ILL_CONDITIONED:
                    # an independent identity: the inverse dynamics of qdd is tau
                    assert_close(ref.inverse_dynamics(q, qd, qdd, fx), tau, 1e-9, label + ": ID(aba) != tau")
            single = aba(q[0], qd[0], tau[0])
            assert single.shape == (robot.nv,)
            _judge(name, ref, single[None], expected[False][:1], q[:1], qd[:1], tau[:1], None, dtype,
                   f"{name} {np.dtype(dtype).name} {what} spill={spill} single state")
        if kind == "emulated":  # the rungs only move scratch between memories: bit for bit the same
            assert all(np.array_equal(x, block[0]) for x in block), f"{name}: the tiers' rungs disagree"


@pytest.mark.parametrize("name", GRAVITY_ROBOTS)
@pytest.mark.parametrize("kind", BACKENDS)
def test_gravity_argument(kind, name, rng):
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau = random_state(robot, rng)
    g = np.array([0.3, -1.2, -9.0])
    b = backend(kind, name, False)
    for layout in ("block", "per_state"):
        out = b.with_launch(layout=layout).aba(q, qd, tau, gravity=g)
        assert out.shape == (robot.nv,)
        assert_close(out, ref.aba(q, qd, tau, gravity=g), 1e-9, f"{name} {layout}")


@pytest.mark.parametrize("kind", BACKENDS)
def test_large_batch_grid_stride(kind, rng):
    robot = load("hyq")
    q, qd, tau = random_state(robot, rng, 300)
    expected = Reference(robot).aba(q, qd, tau)
    b = backend(kind, "hyq", True)
    for layout in ("block", "per_state"):
        # few blocks: the grid-stride loops must cover every state
        out = b.with_launch(layout=layout, blocks=7, tier=2).aba(q, qd, tau)
        assert_close(out, expected, 1e-9, layout)
