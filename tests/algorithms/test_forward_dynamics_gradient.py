"""Generated forward-dynamics gradient, -Minv (dtau_dq, dtau_dqd) at qdd = FD(q, qd, tau): an
orchestrator composing forward_dynamics, inverse_dynamics_gradient and minv on one XImats load.
Equal to the reference (proven against Pinocchio's computeABADerivatives in
test_forward_dynamics_gradient_reference.py) on every backend of the generated code: host
emulation (CI) and the GPU (`gpu` marker).

CI's sample of robots (the bundled robots but g1 and 4 example-robot-data robots, tests/generated.py
SAMPLE_ROBOTS; all 14 CODEGEN_ROBOTS with GRID_FULL_SWEEP=1), with and without f_ext, both layouts, every
tier, the deepest spill rung forced; float64 at rel 1e-9, float32 at rel 1e-4 where the robot's
condition number allows that forward error in float32, else by the backward error of
M dqdd_du = -dtau_du (as forward dynamics' tests judge qdd).
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state
from tests.generated import BACKENDS, assert_solves, backend, launches, robot_cases

N = 3


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases())
def test_forward_dynamics_gradient(kind, name, spill, rng):
    robot = load(name)
    ref = Reference(robot)
    q, qd, _ = random_state(robot, rng, N)
    tau = rng.normal(size=(N, robot.nv))
    f_ext = rng.normal(size=(N, robot.num_bodies, 6))
    M = ref.crba(q)
    for f in (None, f_ext):
        expected = ref.forward_dynamics_gradient(q, qd, tau, f)
        dtau = ref.inverse_dynamics_gradient(q, qd, ref.forward_dynamics(q, qd, tau, f), f)
        for dtype in (np.float64, np.float32):
            for what, fn in launches(kind, name, spill, dtype, "forward_dynamics_gradient"):
                what = f"{name} {np.dtype(dtype).name} {what} spill={spill}{'' if f is None else ' f_ext'}"
                out = fn(q, qd, tau, f)
                for k, wrt in enumerate(("q", "qd")):
                    assert out[k].shape == (N, robot.nv, robot.nv)
                    assert_solves(out[k], expected[k], M, -dtau[k], dtype, f"{what} d/d{wrt}")


@pytest.mark.parametrize("kind", BACKENDS)
def test_single_state_and_gravity(kind, rng):
    robot = load("iiwa14")
    ref = Reference(robot)
    b = backend(kind, "iiwa14", False)
    q, qd, _ = random_state(robot, rng)
    tau = rng.normal(size=robot.nv)
    g = np.array([0.3, -1.2, -9.0])
    out = b.forward_dynamics_gradient(q, qd, tau, gravity=g)
    assert out[1].shape == (robot.nv, robot.nv)
    for got, exp in zip(out, ref.forward_dynamics_gradient(q, qd, tau, gravity=g)):
        assert_close(got, exp, 1e-9)


def test_composed_inners_share_one_arena():
    """forward_dynamics and the gradient each reach inverse dynamics, forward_dynamics and the
    orchestrator each reach minv: each composed region is in the plan once."""
    from grid_core.composer import Composer, GenerateOptions

    composer = Composer(load("erd:panda"), GenerateOptions())
    names = [r.name for r in composer.layers("forward_dynamics_gradient").plan.regions]
    assert len(names) == len(set(names))
    assert "vaf" in names and {r.name for r in composer.layers("minv").scratch_regions} <= set(names)


@pytest.mark.parametrize(("name", "method"), [("hyq", "minv"), ("hyq", "aba"), ("iiwa14", "auto")])
def test_forward_dynamics_by_minv_leaves_the_minv_the_product_reads(name, method):
    """The gradient composes forward dynamics by its Minv method (Emitter.compose_options), which
    leaves Minv (Emitter.leaves): in its arena, where the block layout's product reads it, with no
    second minv call and no inv_M region; as a local of the per-state function, which runs forward
    dynamics' steps inline.  Where the header's forward dynamics runs ABA (told so, or iiwa14's
    tuning), that is a variant, ``forward_dynamics_minv``, emitted once after forward dynamics'
    own layers, its inner and per-state function only; where it runs Minv, the gradient shares it.
    The equality tests above run both (hyq's tuning picks Minv, iiwa14's ABA)."""
    from grid_core.composer import Composer, GenerateOptions, generate

    opts = {"algorithm_options": {"forward_dynamics": {"method": method}}}
    composer = Composer(load(name), GenerateOptions(**opts))
    layers = composer.layers("forward_dynamics_gradient")
    header = generate(load(name), ["forward_dynamics_gradient"], **opts)
    start = header.index("__device__ void forward_dynamics_gradient_inner(")
    inner = header[start:header.index("\n}\n", start)]
    start = header.index("void forward_dynamics_gradient_state(")
    state = header[start:header.index("\n}\n", start)]
    variant = composer.layers("forward_dynamics").ctx.algorithm_options.method == "aba"
    assert variant is (method != "minv")
    fd = layers.compose("forward_dynamics")
    assert (fd.name, fd.fixed_options) == (("forward_dynamics_minv", {"method": "minv"}) if variant
                                           else ("forward_dynamics", {}))
    assert composer.variants("forward_dynamics") == ([fd] if variant else [])
    assert fd.callers == (["forward_dynamics_gradient"] if variant else [])
    assert layers.reused == {"inv_M": ("forward_dynamics", "Minv")}
    assert "inv_M" not in {r.name for r in layers.plan.regions}
    assert inner.count(" minv_inner<") == 0 and "s_Minv[r * " in inner
    assert inner.count(f"{fd.name}_inner<") == 1 and "aba_inner<" not in inner
    assert state.count(" minv_state<") == 1 and "aba_state<" not in state and " Minv[r * " in state
    # the variant: its inner and per-state function once, after forward dynamics' kernels, no kernel of its own
    assert header.count("void forward_dynamics_minv_inner(") == int(variant)
    assert header.count("void forward_dynamics_minv_state(") == int(variant)
    assert "forward_dynamics_minv_kernel" not in header and "forward_dynamics_minv_launch" not in header
    if variant:
        assert header.index(" forward_dynamics_kernel(") < header.index("void forward_dynamics_minv_inner(")
