"""Generated fdsva_so equals the reference (proven against central differences of Pinocchio's
first derivatives in test_fdsva_so_reference.py) on host emulation of the GPU code (every tier of
the block layout and the per-state layout) and on the CPU backend, and against central
differences of Pinocchio's computeABADerivatives here too.

Each library holds fdsva_so and what it composes (it is not in the default set,
Emitter.in_default_set, like idsva_so): iiwa14 (a chain) at the default target and the deepest
rung (every region forced into global memory), panda (a mimic finger) at the default target, go2
(a free-flyer: six columns on one body, the world-frame second derivatives not symmetric within them) at the
default target (its LITE tier on rung 2, MINIMAL on the deepest), atlas (a humanoid, 30 dofs) at
the default target: its four nv^3 tensors (864 KB) exceed shared memory, its tiers take rungs 2
and 4, and the -Minv contraction and the right-hand sides are block-stride loops over
the nv^3 cells (no code per cell: the header's bulk is the composed first-order callees, 4.8 MB
of which idsva_so's loop form is 1.0 MB); the CPU backend on iiwa14 in float64.  Host compilation, CPU seconds
of g++ on one core: an emulation library (both precisions) 21-23 on iiwa14 a rung, 34.6 on atlas, 41.5 on g1;
the CPU builds take longer (go2's and panda's 36-85 a precision).  GRID_FULL_SWEEP=1: every CODEGEN_ROBOTS
robot (the five bundled ones and nine of example-robot-data, the humanoids talos_reduced, 38 dofs,
and simple_humanoid and the mimic robots panda, pr2 and tiago_pro among them) at every rung of the
ladder forced in turn (the default target, the deepest rung, then the shared-memory target of each
rung no tier reached, those within the sm_90 cap: tests/generated.py rung_targets), and on the
CPU, both precisions.

float64 at rel 1e-9 (the norm of the whole batch's tensor).  float32: each output column
``[:, j, k]`` is ``-Minv`` times a right-hand side assembled from idsva_so's tensors and the
first derivatives ``dqdd_dq``, ``dqdd_dqd`` (themselves ``-Minv dtau``), so its forward error
follows the condition number of ``M`` as forward dynamics' gradient's does: each state's tensor
is held, relative to its norm, to ``max(1e-4, 2 cond(M) eps32)`` (:func:`f32_bound`; 1e-4 is the
suite's float32 tolerance, reached where ``cond(M) <= 420``).  Measured (host emulation, 3
states, the worst of the four tensors and the four launches, at the default target): iiwa14
4.2e-5 at cond(M) 1.3e3 (0.27 cond eps32; bound 3.1e-4), go2 2.9e-5 at cond(M) 1.3e4 (0.02 cond
eps32; bound 3.1e-3), panda 7.3e-6 at cond(M) 5.8e2 (bound 1.4e-4), atlas 9.3e-5 at cond(M)
9.6e4 (0.008 cond eps32; bound 2.3e-2), g1 3.1e-4 at cond(M) 1.2e5 (0.022 cond eps32; bound
2.9e-2), talos_reduced 2.0e-4 at cond(M) 8.4e4 (0.02 cond eps32; bound 2.0e-2), simple_humanoid
1.0e-5 at cond(M) 2.9e2 (bound 1e-4); float64 at most 1.2e-13 on atlas, 1.2e-12 on g1, 2.9e-12
on talos_reduced, 2.6e-14 on simple_humanoid.  The humanoids' emulation libraries under the sweep:
talos_reduced 47.8 CPU s, simple_humanoid 37.0, g1 at the forced rung 3 54.3; g1's CPU library
(float64) 164.6 CPU s, its four tensors at most 1.3e-12 from the reference on 5 states.

The GPU (the ``gpu`` marker, ids ``gpu-...``): the same check, bounds and reference on GPU_ROBOTS
(iiwa14, hyq, atlas and g1) at the default target and the deepest rung, both precisions
(tests/generated.py gpu_rung_cases; every rung under GRID_FULL_SWEEP=1).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state, rel_error
from tests.generated import CODEGEN_ROBOTS, FULL_SWEEP, gpu_rung_cases, library, rung_cases, rung_options

N = 3
NAMES = ("d2qdd_dq2", "d2qdd_dqd2", "d2qdd_dqdqd", "d2qdd_dq_dtau")
LAUNCHES = [("block", 0), ("block", 1), ("block", 2), ("per_state", 0)]
SHALLOW = ("rung0", "deepest-rung")
CI = {"iiwa14": SHALLOW, "go2": ("rung0",), "erd:panda": ("rung0",), "atlas": ("rung0",)}
"""CI's emulated builds: iiwa14 (a chain) at the default target (every tier on rung 0 but MINIMAL) and the
deepest rung, panda (a mimic finger) at the default target, go2 (a free-flyer: LITE on rung 2, MINIMAL on
the deepest) and atlas (a humanoid, 30 dofs: its tensors above the shared-memory cap, its tiers on rungs 2 and 4)
at the default target; every CODEGEN_ROBOTS robot at every rung forced in turn under
GRID_FULL_SWEEP=1 (tests/generated.py rung_cases)."""
CPU_ROBOTS = CODEGEN_ROBOTS if FULL_SWEEP else ["iiwa14"]
F32_C = 2.0
"""The float32 bound's constant (see :func:`f32_bound`)."""


def f32_bound(cond: float) -> float:
    """The float32 relative error allowed for one state whose joint-space inertia has condition
    number ``cond``: a solve's forward error, ``cond eps32`` (times :data:`F32_C`), never below
    the suite's 1e-4."""
    return max(1e-4, F32_C * cond * float(np.finfo(np.float32).eps))


@functools.cache
def generated(kind: str, name: str, target: int | None, dtype, **options):
    """fdsva_so's library (tests/generated.py library: outputs start as NaN, a cell the kernel never
    writes fails), host-emulated or on the GPU."""
    opts = rung_options(target)
    if options:
        opts["algorithm_options"] = {"fdsva_so": dict(options)}
    return library(kind, name, ["fdsva_so"], dtype, **opts)


def emulated(name: str, target: int | None, dtype, **options):
    """:func:`generated`'s host-emulated library."""
    return generated("emulated", name, target, dtype, **options)


@functools.cache
def cpu(name: str, dtype):
    from grid_core import CpuHandle

    handle = CpuHandle(load(name), ["fdsva_so"], dtype, threads=2, quiet=True)
    handle.set_poison(True)
    return handle


def _inputs(robot, rng, n=N):
    q, qd, _ = random_state(robot, rng, n)
    return q, qd, rng.normal(size=(n, robot.nv)), rng.normal(size=(n, robot.num_bodies, 6))


def _check(got, expected, dtype, conds, what: str) -> None:
    for port, x, e in zip(NAMES, got, expected):
        assert x.shape == e.shape
        if dtype is np.float64:
            assert_close(x, e, 1e-9, f"{what} {port}")
            continue
        for k in range(len(x)):  # each state against its own tensor's norm and condition number
            err, bound = rel_error(x[k], e[k]), f32_bound(conds[k])
            assert err <= bound, f"{what} {port} state {k}: rel error {err:.2e} > {bound:.2e} (cond(M) {conds[k]:.1e})"


@pytest.mark.parametrize(("kind", "name", "target"), [
    *(pytest.param("emulated", *c.values, id=c.id) for c in rung_cases("fdsva_so", CI)),
    *(pytest.param("gpu", *c.values, id=c.id, marks=c.marks) for c in gpu_rung_cases("fdsva_so"))])
def test_fdsva_so_emulated(kind, name, target, rng):
    """Both precisions, with and without f_ext, every tier of the block layout and the per-state
    layout (float32 by the module docstring's bound), at the shared-memory target that puts a rung
    of the ladder on a tier (tests/generated.py rung_targets): host emulation, and the GPU (the gpu
    marker) on GPU_ROBOTS at the default target and the deepest rung."""
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau, f_ext = _inputs(robot, rng)
    conds = [np.linalg.cond(M) for M in ref.crba(q)]
    for f in (None, f_ext):
        expected = ref.fdsva_so(q, qd, tau, f)
        for dtype in (np.float64, np.float32):
            b = generated(kind, name, target, dtype)
            for layout, tier in LAUNCHES:
                got = b.with_launch(layout=layout, tier=tier).fdsva_so(q, qd, tau, f)
                what = f"{name} {np.dtype(dtype).name} {layout} tier {tier} target={target} f_ext={f is not None}"
                _check(got, expected, dtype, conds, what)


@pytest.mark.parametrize("name", CPU_ROBOTS)  # go2's and panda's alone: about 240 CPU s
def test_fdsva_so_cpu_handle(name, rng):
    """The CPU backend (the per-state code, compiled for the host), float64 (float32 too under
    GRID_FULL_SWEEP=1; CI's float32 runs in emulation), a batch that is not a multiple of the worker
    count, a gravity of its own."""
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau, f_ext = _inputs(robot, rng, 5)
    g = np.array([0.3, -1.2, -9.0])
    conds = [np.linalg.cond(M) for M in ref.crba(q)]
    expected = ref.fdsva_so(q, qd, tau, f_ext, gravity=g)
    for dtype in (np.float64, np.float32) if FULL_SWEEP else (np.float64,):  # float32: 112 CPU s more in CI
        got = cpu(name, dtype).fdsva_so(q, qd, tau, f_ext, gravity=g)
        _check(got, expected, dtype, conds, f"{name} cpu {np.dtype(dtype).name}")


def test_fdsva_so_against_pinocchio_finite_differences(rng):
    """iiwa14, float64, the generated code on every launch: the four tensors against central
    differences of Pinocchio's computeABADerivatives (ddq_dq along the tangent of q, along qd and
    along tau; ddq_dv along qd; ddq_dtau = Minv along q), steps and tolerance as the reference's
    own test (test_fdsva_so_reference.py: rel 1e-6, h = 3e-5 along q, 0.1 along qd and tau)."""
    from grid_core.testing import central_fd, tangent_fd
    from tests.algorithms.test_fdsva_so_reference import H_Q, H_V, REL_FD, first_derivatives

    robot = load("iiwa14")
    ref = Reference(robot)
    q, qd, tau, f_ext = _inputs(robot, rng, 2)
    runs = [(f"{layout} tier {tier}", emulated("iiwa14", None, np.float64).with_launch(layout=layout, tier=tier))
            for layout, tier in LAUNCHES] + [("cpu", cpu("iiwa14", np.float64))]
    got = {what: b.fdsva_so(q, qd, tau, f_ext) for what, b in runs}
    for s in range(len(q)):
        def first(q_, qd_, tau_):
            return np.stack(first_derivatives(robot, ref, q_, qd_, tau_, f_ext[s]))

        by_q = tangent_fd(robot, lambda x: first(x, qd[s], tau[s]), q[s], H_Q)
        by_qd = central_fd(lambda x: first(q[s], x, tau[s]), qd[s], H_V)
        by_tau = central_fd(lambda x: first(q[s], qd[s], x), tau[s], H_V)
        for what, (d2q, d2qd, dqdqd, dqdtau) in got.items():
            what = f"iiwa14 {what} state {s}"
            assert_close(d2q[s], by_q[0], REL_FD, f"{what}: d2qdd_dq2")
            assert_close(d2qd[s], by_qd[1], REL_FD, f"{what}: d2qdd_dqd2")
            assert_close(dqdqd[s], by_qd[0], REL_FD, f"{what}: d2qdd_dqdqd (d/dqd of ddq_dq)")
            assert_close(dqdqd[s], by_q[1].transpose(0, 2, 1), REL_FD, f"{what}: d2qdd_dqdqd (d/dq of ddq_dv)")
            assert_close(dqdtau[s], by_tau[0], REL_FD, f"{what}: d2qdd_dq_dtau (d/dtau of ddq_dq)")
            assert_close(dqdtau[s], by_q[2].transpose(0, 2, 1), REL_FD, f"{what}: d2qdd_dq_dtau (d/dq of Minv)")


def test_contraction_tile_is_bit_identical(rng):
    """The register-tiled contraction sums each cell in the untiled loop's order: iiwa14 (nv 7,
    whose default tile is 1, the untiled loop) with a tile of 7 (every row of a column in one
    thread) gives the same bits on every tier of the block layout, both precisions."""
    robot = load("iiwa14")
    q, qd, tau, f_ext = _inputs(robot, rng)
    for dtype in (np.float64, np.float32):
        for tier in (0, 2):
            a = emulated("iiwa14", None, dtype).with_launch(layout="block", tier=tier).fdsva_so(q, qd, tau, f_ext)
            b = emulated("iiwa14", None, dtype, minv_tile=7).with_launch(layout="block", tier=tier).fdsva_so(
                q, qd, tau, f_ext)
            for port, x, y in zip(NAMES, a, b):
                assert np.array_equal(x, y), f"{np.dtype(dtype).name} tier {tier} {port}: tiled != untiled"


def test_tile_rule_and_refusal():
    """The default tile: the largest divisor of nv at most 8 leaving at least two tiles; a tile
    that does not divide nv is refused at generation time."""
    import grid_core
    from grid_algorithms.fdsva_so import default_tile
    from grid_core.errors import CodegenError

    assert [default_tile(n) for n in (35, 18, 7, 8, 12, 1, 2)] == [7, 6, 1, 4, 6, 1, 1]
    with pytest.raises(CodegenError, match="minv_tile 3 does not divide nv = 7"):
        grid_core.generate(load("iiwa14"), ["fdsva_so"], algorithm_options={"fdsva_so": {"minv_tile": 3}})


def test_left_out_of_the_default_set_built_when_named():
    """Like idsva_so (whose code it composes), fdsva_so is left out of a header built without a
    list of algorithms; named, it comes with what it composes."""
    from grid_core.composer import resolve_algorithms

    default = [a.name for a in resolve_algorithms(None)]
    assert "fdsva_so" not in default and "forward_dynamics_gradient" in default
    named = [a.name for a in resolve_algorithms(["fdsva_so"])]
    assert named[-1] == "fdsva_so" and {"idsva_so", "forward_dynamics_gradient", "minv", "forward_dynamics"} <= set(named)
