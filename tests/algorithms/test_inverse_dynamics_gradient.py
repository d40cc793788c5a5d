"""Generated inverse-dynamics gradient equals the reference (proven against Pinocchio's
computeRNEADerivatives and finite differences in test_inverse_dynamics_gradient_reference.py),
on every backend of the generated code: host emulation (CI) and the GPU (RobotHandle, `gpu`
marker).

CI's sample of robots (the bundled robots but g1 and 4 example-robot-data robots, tests/generated.py
SAMPLE_ROBOTS: fixed and floating, mimic and continuous joints; all 14 CODEGEN_ROBOTS with
GRID_FULL_SWEEP=1); float64 at rel 1e-9, float32 at rel 1e-4; with and without f_ext; both layouts, every
tier, and the deepest spill rung forced.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.generated import BACKENDS, TOL, backend, launches, robot_cases

N = 4


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases())
def test_inverse_dynamics_gradient(kind, name, spill, rng):
    robot = load(name)
    ref = Reference(robot)
    q, qd, qdd = random_state(robot, rng, N)
    f_ext = rng.normal(size=(N, robot.num_bodies, 6))
    for f in (None, f_ext):
        expected = ref.inverse_dynamics_gradient(q, qd, qdd, f)
        for dtype in (np.float64, np.float32):
            for what, fn in launches(kind, name, spill, dtype, "inverse_dynamics_gradient"):
                what = f"{name} {np.dtype(dtype).name} {what} spill={spill}{'' if f is None else ' f_ext'}"
                dq, dqd = fn(q, qd, qdd, f)
                assert dq.shape == dqd.shape == (N, robot.nv, robot.nv)
                assert_close(dq, expected[0], TOL[dtype], what + " d/dq")
                assert_close(dqd, expected[1], TOL[dtype], what + " d/dqd")


@pytest.mark.parametrize("kind", BACKENDS)
def test_single_state_gravity_and_grid_stride(kind, rng):
    robot = load("erd:solo12")
    ref = Reference(robot)
    b = backend(kind, "erd:solo12", True)
    q, qd, qdd = random_state(robot, rng)
    g = np.array([0.3, -1.2, -9.0])
    out = b.inverse_dynamics_gradient(q, qd, qdd, gravity=g)
    assert out[0].shape == (robot.nv, robot.nv)
    for got, exp in zip(out, ref.inverse_dynamics_gradient(q, qd, qdd, gravity=g)):
        assert_close(got, exp, 1e-9)
    q, qd, qdd = random_state(robot, rng, 300)
    expected = ref.inverse_dynamics_gradient(q, qd, qdd)
    for layout in ("block", "per_state"):
        # few blocks: the grid-stride loops must cover every state
        out = b.with_launch(layout=layout, blocks=7, tier=2).inverse_dynamics_gradient(q, qd, qdd)
        for got, exp in zip(out, expected):
            assert_close(got, exp, 1e-9, layout)


def test_runs_rnea_through_its_handle():
    """The gradient's inner runs inverse dynamics' own steps on inverse dynamics' own arena region
    (composed, not copied): its plan holds RNEA's v/a/f region beside its world-frame one, and its
    code stores v at every body (a leaf's too, which RNEA alone never stores)."""
    from grid_core.composer import Composer, GenerateOptions
    from grid_core.emit.printer import render

    layers = Composer(load("iiwa14"), GenerateOptions()).layers("inverse_dynamics_gradient")
    assert [r.name for r in layers.scratch_regions] == ["world", "vaf"]
    assert layers.scratch_regions[1] == layers.compose("inverse_dynamics").scratch_regions[0]
    text = render(layers.emitter.inner_body(layers))
    leaf = layers.robot.num_bodies - 1  # iiwa14's last body is a leaf
    assert f"s_v[{6 * leaf + 2}] = " in text


def test_structural_zeros_are_the_unrelated_dofs():
    """A cell of the derivatives is a structural zero exactly where its row's and its column's
    bodies are on separate branches (hyq: one leg's joints do not move another's torques)."""
    from grid_core.composer import Composer, GenerateOptions

    robot = load("hyq")
    layers = Composer(robot, GenerateOptions()).layers("inverse_dynamics_gradient")
    cells = set(layers.emitter.structure(layers))
    topo = robot.topology
    related = {(r.v_index + i, c.v_index + k) for r in robot.bodies for c in robot.bodies
               for i in range(r.nv) for k in range(c.nv)
               if r.index in topo.support[c.index] or c.index in topo.support[r.index]}
    assert cells == related and len(cells) < robot.nv ** 2
