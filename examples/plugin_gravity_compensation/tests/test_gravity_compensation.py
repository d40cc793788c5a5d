"""gravity_compensation: the reference equals ID(q, 0, 0), and the generated code equals the
reference, host-emulated (grid_core.testing.Emulated), in float64 and float32, both layouts,
every tier and the deepest spill rung, on a fixed arm, a fixed quadruped and a floating one;
and, where there is a CUDA device, on the GPU (grid_core.runtime.RobotHandle).

Run after installing the package (its entry point is how GRiD finds it):

    pip install -e examples/plugin_gravity_compensation
    python -m pytest examples/plugin_gravity_compensation/tests
"""

from __future__ import annotations

import functools
import warnings
import zlib

import numpy as np
import pytest

import grid_core
from grid_core import Reference
from grid_core.testing import Emulated, assert_close, random_q

ROBOTS = ["iiwa14", "hyq", "go2"]  # go2: floating base
TOL = {np.float64: 1e-9, np.float32: 1e-4}
N = 5


@pytest.fixture(scope="session", autouse=True)
def installed():
    if "gravity_compensation" not in grid_core.algorithms():
        pytest.fail("gravity_compensation is not registered: pip install the package first "
                    "(GRiD finds plugins through their entry points)")


@functools.lru_cache(maxsize=None)
def robot(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return grid_core.load_robot(name)


@functools.lru_cache(maxsize=None)
def emulated(name, dtype, spill):
    opts = {"target_shared_mem_bytes": 0} if spill else {}
    return Emulated(robot(name), ["gravity_compensation"], dtype, **opts)


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def test_registered_by_this_distribution():
    reg = grid_core.registry()
    assert reg.info_of("algorithm", "gravity_compensation").distribution == "grid-example-gravity"
    assert reg.algorithm("gravity_compensation").depends_on == ("inverse_dynamics",)


@pytest.mark.parametrize("name", ROBOTS)
def test_reference_is_inverse_dynamics_at_rest(name, rng):
    r = robot(name)
    ref = Reference(r)
    q = random_q(r, rng, N)
    zero = np.zeros((N, r.nv))
    assert_close(ref.gravity_compensation(q), ref.inverse_dynamics(q, zero, zero), 1e-12)
    g = np.array([0.4, -0.3, -9.7])
    assert_close(ref.gravity_compensation(q[0], gravity=g), ref.inverse_dynamics(q[0], zero[0], zero[0], gravity=g),
                 1e-12)
    assert ref.gravity_compensation(q[0]).shape == (r.nv,)
    # no gravity, nothing to hold
    assert np.all(ref.gravity_compensation(q, gravity=np.zeros(3)) == 0.0)


@pytest.mark.parametrize("spill", [False, True], ids=["rung0", "deepest-rung"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ROBOTS)
def test_generated_code_equals_reference(name, dtype, spill, rng):
    r = robot(name)
    q = random_q(r, rng, N)
    g = np.array([0.2, 0.1, -9.81])
    ref = Reference(r)
    expected, expected_g = ref.gravity_compensation(q), ref.gravity_compensation(q, gravity=g)
    emu = emulated(name, dtype, spill)
    for layout, tiers in (("block", (0, 1, 2)), ("per_state", (0,))):
        for tier in tiers:
            run = emu.with_launch(layout=layout, tier=tier)
            what = f"{name} {np.dtype(dtype).name} {layout} tier {tier} spill={spill}"
            assert_close(run.gravity_compensation(q), expected, TOL[dtype], what)
            assert_close(run.gravity_compensation(q, gravity=g), expected_g, TOL[dtype], what + " gravity")
    one = emu.gravity_compensation(q[0])
    assert one.shape == (r.nv,)
    assert_close(one, expected[0], TOL[dtype], f"{name} single state")


def _has_gpu() -> bool:
    from grid_core.runtime import device_count

    return device_count() > 0


@pytest.mark.skipif(not _has_gpu(), reason="no CUDA device present")
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["iiwa14", "go2"])
def test_gpu_equals_reference(name, dtype, rng):
    """The same assertions on the GPU (grid_core.runtime.RobotHandle), where there is one."""
    from grid_core.runtime import RobotHandle

    r = robot(name)
    q = random_q(r, rng, 67)
    expected = Reference(r).gravity_compensation(q)
    gpu = RobotHandle(r, ["gravity_compensation"], dtype, quiet=True)
    for layout, tiers in (("block", (0, 1, 2)), ("per_state", (0,))):
        for tier in tiers:
            out = gpu.with_launch(layout=layout, tier=tier).gravity_compensation(q)
            assert_close(out, expected, TOL[dtype], f"{name} GPU {layout} tier {tier}")


def test_the_header_composes_inverse_dynamics_by_handle():
    from grid_core.composer import generate

    text = generate(robot("iiwa14"), ["gravity_compensation"])
    # the dependency is emitted first, and called through the handle the composer gave
    assert text.index("void inverse_dynamics_inner(") < text.index("void gravity_compensation_inner(")
    assert ("inverse_dynamics_inner<T, VAF_IN_SMEM>(s_tau_g, s_q, s_zero, s_zero, nullptr, s_XI, s_vaf, d_vaf, "
            "gravity)") in text
    assert "inverse_dynamics_state<T, false, false>(tau_g, q, zero, nullptr, nullptr, gravity)" in text
    for layer in ("gravity_compensation_device", "gravity_compensation_kernel", "gravity_compensation_launch",
                  "gravity_compensation_workspace_bytes", "GRAVITY_COMPENSATION_DEVICE_DYNAMIC_SHARED_MEM_BYTES",
                  "__host__ void gravity_compensation(gridData<T> *hd_data"):
        assert layer in text, layer
