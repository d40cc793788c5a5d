"""Generated inverse dynamics on the GPU equals the reference (level L4 of DESIGN §5).

iiwa, hyq, atlas and a floating humanoid (g1); float32 at rel 1e-4 and float64 at
rel 1e-9; every tier at block sizes 32, 64, 128, MAX_PERF_LEVEL_THREADS and the
tier maximum; the per-state layout; and the deepest spill rung forced.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state

pytestmark = pytest.mark.gpu

GPU_ROBOTS = ["iiwa14", "hyq", "atlas", "g1"]
TOL = {np.float32: 1e-4, np.float64: 1e-9}


def _handle(name, dtype, spill):
    from tests.generated import backend

    return backend("gpu", name, spill, dtype)  # the library every test of this robot and rung shares


def _info(handle):
    import ctypes

    out = (ctypes.c_int * 4)()
    handle._lib().grid_abi_info(out, 4)
    return {"nq": out[0], "nv": out[1], "nb": out[2], "max_perf_threads": out[3]}


@pytest.mark.parametrize("spill", [False, True], ids=["rung0", "deepest-rung"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", GPU_ROBOTS)
def test_gpu_equals_reference(name, dtype, spill, rng):
    robot = load(name)
    handle = _handle(name, dtype, spill)
    q, qd, qdd = random_state(robot, rng, 67)
    f_ext = rng.normal(size=(67, robot.num_bodies, 6))
    ref = Reference(robot)
    expected, expected_f = ref.inverse_dynamics(q, qd, qdd), ref.inverse_dynamics(q, qd, qdd, f_ext)
    mpt = _info(handle)["max_perf_threads"]
    tier_max = {0: mpt, 1: min(2 * mpt, 768), 2: 1024}
    for tier, tmax in tier_max.items():
        for threads in sorted({32, 64, 128, mpt, tmax}):
            if threads > tmax:
                continue
            run = handle.with_launch(layout="block", tier=tier, threads=threads)
            what = f"{name} tier {tier} threads {threads} spill={spill}"
            assert_close(run.inverse_dynamics(q, qd, qdd), expected, TOL[dtype], what)
            assert_close(run.inverse_dynamics(q, qd, qdd, f_ext), expected_f, TOL[dtype], what + " f_ext")
    for threads in (32, 64, 128):
        run = handle.with_launch(layout="per_state", threads=threads)
        assert_close(run.inverse_dynamics(q, qd, qdd), expected, TOL[dtype], f"{name} per-state {threads}")
        assert_close(run.inverse_dynamics(q, qd, qdd, f_ext), expected_f, TOL[dtype], f"{name} per-state f_ext")


@pytest.mark.parametrize("name", GPU_ROBOTS)
def test_gpu_large_batch_auto_layout(name, rng):
    robot = load(name)
    handle = _handle(name, np.float32, False)
    q, qd, qdd = random_state(robot, rng, 20000)
    expected = Reference(robot).inverse_dynamics(q[:500], qd[:500], qdd[:500])
    out = handle.inverse_dynamics(q, qd, qdd)
    assert out.shape == (20000, robot.nv)
    assert np.all(np.isfinite(out))
    assert_close(out[:500], expected, 1e-4)
