"""Generated integrator: forward dynamics' inner composed by handle, then the step per cell (each
joint coordinate adds its increment, mimic joints follow, a free-flyer moves by the SE(3)
exponential map); RK4 composes the inner four times, XImats loaded again at each stage.

The method is fixed at generation time (``algorithm_options={"integrator": {"method": ...}}``);
a call with another builds, once, the library for it.  On CI's sample -- iiwa14 (fixed arm), go2
(free-flyer), panda (a mimic finger); the humanoids g1 (29 dofs and a free-flyer), talos_reduced and
simple_humanoid with GRID_FULL_SWEEP=1 -- every tier and both layouts, with and without f_ext:

* host emulation equals the reference at float64 rel 1e-9 and float32 rel 1e-4 (the suite's
  float32 bound: the step carries forward dynamics' float32 error times dt; measured at most
  9e-6 on g1, cond(M) 1.8e5, with RK4 at dt = 0.05, and 5e-7 on iiwa14 and panda): the default
  method (semi-implicit Euler) and RK4 at rung 0 and the deepest rung in both precisions,
  explicit Euler (one line apart from the default) at rung 0 in float64;
* the CPU build (CpuHandle, per-state on SIMD lanes) equals it the same way (float32 for RK4): every
  method on iiwa14, the default on go2 and panda (every method on every robot with GRID_FULL_SWEEP=1);
* float64, it equals Pinocchio: its aba and integrate for the Euler methods, a hand-written RK4 on
  them for RK4 (tests/pin_bridge.py), rel 1e-9.

iiwa14 runs the default method and RK4 at every rung of the ladder forced in turn (the default
target, the deepest rung, then the shared-memory target of each rung no tier reached:
tests/generated.py rung_targets).  GRID_FULL_SWEEP=1: every CODEGEN_ROBOTS robot (the five bundled
ones and nine of example-robot-data, the humanoids talos_reduced and simple_humanoid and the mimic
robots panda, pr2 and tiago_pro among them), every method at every rung in both precisions, and the
CPU build in both precisions.

The GPU (the ``gpu`` marker, ids ``gpu-...``): the emulated cases' choice of methods, rungs and
precisions on GPU_ROBOTS (iiwa14, hyq, atlas and g1; iiwa14 at every rung), judged the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.algorithm import INTEGRATION_METHODS
from grid_core.errors import InputError
from grid_core.testing import assert_close, random_state
from tests.generated import (CPU_METHOD_SAMPLE, EVERY_RUNG, FULL_SWEEP, INTEGRATOR_SAMPLE, TOL, gpu_rung_cases,
                             integration_library, rung_cases)
from tests.pin_bridge import pin_step, to_pin_q

SAMPLE = INTEGRATOR_SAMPLE
N = 3
DT = 0.01
LAUNCHES = [("block", 0), ("block", 1), ("block", 2), ("per_state", 0)]
DEFAULT = "semi_implicit_euler"


def _inputs(robot, rng):
    q, qd, _ = random_state(robot, rng, N)
    return q, qd, rng.normal(size=(N, robot.nv)), rng.normal(size=(N, robot.num_bodies, 6))


def _launches(kind: str, name: str, method: str, target, dtype):
    """The integrator generated for ``method`` at shared-memory ``target`` on every tier and layout,
    host-emulated or on the GPU: the shared library of every emitted algorithm for the default method
    at the default target and the deepest rung, the method's own else (tests/generated.py)."""
    lib = integration_library(kind, name, method, target, dtype)
    return [(f"{layout} tier {tier}", lib.with_launch(layout=layout, tier=tier)) for layout, tier in LAUNCHES]


def _cases() -> list:
    """(robot, method, target, dtype).  CI: every method at the default target in float64; RK4, whose
    stages load XImats again, and the default at the deepest rung and in float32 too (each an emulated
    build of its own), and on iiwa14 at every rung forced in turn (tests/generated.py rung_cases).
    GRID_FULL_SWEEP=1: every CODEGEN_ROBOTS robot, every method, every rung, both precisions.  The GPU
    (the gpu marker, ids ``gpu-...``): the same choice on GPU_ROBOTS (tests/generated.py gpu_rung_cases)."""
    both = (np.float64, np.float32)
    out = []
    for kind in ("emulated", "gpu"):
        for method in INTEGRATION_METHODS:
            euler = method == "explicit_euler"
            labels = ("rung0",) if euler else ("rung0", "deepest-rung")
            every = () if euler else ("iiwa14",)
            options = (("method", method),)
            cases = (rung_cases("integrator", {n: EVERY_RUNG if n in every else labels for n in SAMPLE}, options)
                     if kind == "emulated" else gpu_rung_cases("integrator", labels, options, every))
            for case in cases:
                for dtype in both if FULL_SWEEP or not euler else (np.float64,):
                    out.append(pytest.param(kind, *case.values, method, dtype, marks=case.marks,
                                            id=f"{case.id}-{method}-{np.dtype(dtype).name}"))
    return out


@pytest.mark.parametrize(("kind", "name", "target", "method", "dtype"), _cases())
def test_emulated_equals_the_reference(kind, name, target, method, dtype, rng):
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau, f_ext = _inputs(robot, rng)
    for f in (None, f_ext):
        expected = ref.integrator(q, qd, tau, DT, method, f)
        for what, lib in _launches(kind, name, method, target, dtype):
            out = lib.integrator(q, qd, tau, DT, method, f)
            what = f"{name} {method} {np.dtype(dtype).name} {what} target={target} f_ext={f is not None}"
            assert out[0].shape == (N, robot.nq) and out[1].shape == (N, robot.nv)
            assert_close(out[0], expected[0], TOL[dtype], f"{what}: q_next")
            assert_close(out[1], expected[1], TOL[dtype], f"{what}: qd_next")


CPU_CASES = [(n, m) for n in SAMPLE for m in INTEGRATION_METHODS if n in CPU_METHOD_SAMPLE or m == DEFAULT]
"""Every method on the CPU on CPU_METHOD_SAMPLE (iiwa14 in CI), the default on the other robots."""


def cpu_dtypes(method: str) -> tuple:
    """The CPU build's precisions of ``method``: float32 too for RK4, and for every method under
    GRID_FULL_SWEEP=1."""
    return (np.float64, np.float32) if FULL_SWEEP or method == "rk4" else (np.float64,)


@pytest.mark.parametrize(("name", "method"), CPU_CASES)
def test_cpu_equals_the_reference_and_pinocchio(name, method, rng):
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau, f_ext = _inputs(robot, rng)
    for f in (None, f_ext):
        expected = ref.integrator(q, qd, tau, DT, method, f)
        for dtype in cpu_dtypes(method):
            out = integration_library("cpu", name, method, None, dtype).integrator(q, qd, tau, DT, method, f)
            for got, exp, port in zip(out, expected, ("q_next", "qd_next")):
                assert_close(got, exp, TOL[dtype], f"{name} {method} {np.dtype(dtype).name} cpu: {port}")
        got = integration_library("cpu", name, method, None, np.float64).integrator(q, qd, tau, DT, method, f)
        for k in range(N):
            pin_q, pin_qd = pin_step(robot, q[k], qd[k], tau[k], DT, method, None if f is None else f[k])
            assert_close(to_pin_q(robot, got[0][k]), pin_q, 1e-9, f"{name} {method} state {k}: q_next vs Pinocchio")
            assert_close(got[1][k], pin_qd, 1e-9, f"{name} {method} state {k}: qd_next vs Pinocchio")


def test_a_call_with_another_method_builds_its_code(rng):
    """A library generated for one method runs another through a build for it; a method no
    integrator knows is refused before any build."""
    from grid_core.testing import Emulated

    robot = load("go2")
    ref = Reference(robot)
    q, qd, tau, _ = _inputs(robot, rng)
    # the integrator alone, generated for the default method: its RK4 build is the RK4 tests' library
    lib = Emulated(robot, ["integrator"], np.float64, quiet=True, algorithm_options={"integrator": {"method": DEFAULT}})
    lib.set_poison(True)
    out = lib.integrator(q, qd, tau, DT, "rk4")
    assert_close(out[0], ref.integrator(q, qd, tau, DT, "rk4")[0], 1e-9, "rk4 through the default library")
    assert not np.allclose(out[0], ref.integrator(q, qd, tau, DT)[0], rtol=1e-9, atol=0)  # not the default's step
    with pytest.raises(InputError, match="method"):
        lib.integrator(q, qd, tau, DT, "midpoint")
    with pytest.raises(InputError, match="dt"):
        lib.integrator(q, qd, tau)
    assert isinstance(lib, Emulated)


def test_rk4_loads_ximats_at_each_stage_and_composes_forward_dynamics_by_handle():
    from grid_core.composer import generate

    header = generate(load("go2"), ["integrator"], algorithm_options={"integrator": {"method": "rk4"}})
    start = header.index("__device__ void integrator_inner")
    inner = header[start:header.index("__device__ void integrator_device", start)]
    loop = inner.index("#pragma unroll 1\n    for (int rk = 0; rk < 3; ++rk) {")  # stages 2-4, rolled
    assert inner[:loop].count("forward_dynamics_inner<T") == 1  # stage 1
    assert inner[loop:].count("forward_dynamics_inner<T") == 1  # once for stages 2-4
    assert inner.count("load_update_XImats<T>(s_XI, s_stage_q)") == 1
    assert inner.count("grid_exp6_xyzquat(") == 2  # a stage placed from q (in the loop), then q_next
    assert header.count("inline void grid_exp6_xyzquat(T *out") == 1
