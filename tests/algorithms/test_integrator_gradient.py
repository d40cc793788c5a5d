"""Generated integrator gradient: forward_dynamics_gradient's inner composed by handle (its results,
qdd and Minv, read where it left them), dIntegrate's 6 x 6 blocks per free-flyer (the framework's
shared "lie" helpers), then the six blocks cell by cell; RK4 composes the gradient at its four
stages (XImats loaded again at each), the chain rule through them in the tangent spaces.  The method
is fixed at generation time.

On CI's sample -- iiwa14 (fixed arm), go2 (free-flyer), panda (a mimic finger); the humanoids with
GRID_FULL_SWEEP=1 -- at rung 0 and the deepest rung, every tier and both layouts:

* semi-implicit Euler (the default) through the shared libraries of every emitted algorithm
  (tests/generated.py), float64 at rel 1e-9; float32 by the condition number of M (:func:`_judge`):
  the qd_next rows dt d qdd / d q, I + dt d qdd / d qd and dt Minv carry forward dynamics' gradient's
  and Minv's float32 error and are judged as those are (tests/generated.py's assert_solves: the
  forward error where cond(M) eps32 allows 1e-4, else the backward error of M x = b; measured up to
  4.3e-4 forward error on g1 at cond(M) 2.0e5), the q_next rows, dt Dv times those plus what does not
  depend on qdd, by what is left after that product (1e-4; measured 7e-8 on g1);
* explicit Euler, float64, in a library of its own at rung 0;
* RK4 in its integrator's libraries (tests/generated.py method_library), both rungs and precisions:
  float64 at rel 1e-9, float32 at rel 1e-4 but for dqd_next_dq, held to twice the float32 error of
  the forward-dynamics gradient at the same state (test_rk4_equals_the_reference says why);
* the CPU build (CpuHandle), float64: every method on iiwa14, the default on go2 and panda (every
  method on every robot with GRID_FULL_SWEEP=1);
* against central differences of the generated integrator (float64, h = 3e-5, rel 1e-6 as the
  reference's test), against Pinocchio's computeABADerivatives and dIntegrate (rel 1e-9), and RK4's
  against central differences of RK4 written on Pinocchio's forward dynamics and integrate.

iiwa14 runs semi-implicit Euler at every rung of the ladder forced in turn (tests/generated.py
rung_targets).  GRID_FULL_SWEEP=1: both Euler methods on every CODEGEN_ROBOTS robot (the five bundled
ones and nine of example-robot-data, the humanoids talos_reduced and simple_humanoid and the mimic
robots panda, pr2 and tiago_pro among them) at every rung in both precisions, and the CPU build in
both precisions (float32 judged as the emulated launches).

The GPU (the ``gpu`` marker, ids ``gpu-...``): semi-implicit Euler and RK4 as in emulation (both rungs
and precisions, iiwa14's semi-implicit Euler at every rung) on GPU_ROBOTS (iiwa14, hyq, atlas and g1),
judged the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, central_fd, random_state, tangent_fd
from tests.generated import (CPU_METHOD_SAMPLE, EVERY_RUNG, FULL_SWEEP, GPU_ROBOTS, INTEGRATOR_SAMPLE, TOL,
                             and_in_the_sweep, assert_solves, backend, gpu_rung_cases, integration_library,
                             rung_cases)
from tests.pin_bridge import pin_model, to_pin_q

SAMPLE = INTEGRATOR_SAMPLE
PINOCCHIO_ROBOTS = and_in_the_sweep(["iiwa14", "go2"])
"""The robots of the checks against Pinocchio (its ABA derivatives and dIntegrate, a hand-written RK4 on
it): a fixed arm and a free-flyer, g1 (a humanoid) too under GRID_FULL_SWEEP=1 (its emulated libraries
are not in CI's sample)."""
N = 3
DT = 0.01
LAUNCHES = [("block", 0), ("block", 1), ("block", 2), ("per_state", 0)]
NAMES = ("dq_next_dq", "dq_next_dqd", "dq_next_dtau", "dqd_next_dq", "dqd_next_dqd", "dqd_next_dtau")


def _inputs(robot, rng):
    q, qd, _ = random_state(robot, rng, N)
    return q, qd, rng.normal(size=(N, robot.nv)), rng.normal(size=(N, robot.num_bodies, 6))


def _check(out, expected, tol, what, names=NAMES):
    for got, exp, port in zip(out, expected, names):
        assert got.shape == exp.shape
        assert_close(got, exp, tol, f"{what}: {port}")


def _judge(out, expected, M, dtau, dtype, what: str, method: str = "semi_implicit_euler") -> None:
    """One launch's six blocks against the reference: float64 at rel 1e-9.  float32: the qd_next rows
    ``dt d qdd / d q``, ``I + dt d qdd / d qd`` and ``dt Minv`` carry forward dynamics' gradient's and
    Minv's float32 error (g1: 4.3e-4 forward error at cond(M) 2.0e5), judged as those algorithms' tests
    judge them (tests/generated.py assert_solves: the forward error where cond(M) eps32 allows 1e-4,
    else the backward error of M x = b, ``dtau`` the inverse-dynamics gradient); the q_next rows are
    ``(Dq, 0, 0)`` plus ``dt Dv`` times the qd_next rows under semi-implicit Euler (measured on g1:
    their error is dt times the qd_next rows' to 4e-7), so what is left of them after that product,
    ``dt Dv = expected[2] expected[5]^-1`` in float64, is held to 1e-4 of each state's block; under
    explicit Euler they do not depend on qdd and are held to 1e-4 as they are."""
    if dtype is np.float64:
        _check(out, expected, TOL[dtype], what)
        return
    out = [np.asarray(x, dtype=np.float64) for x in out]
    eye = np.broadcast_to(np.eye(M.shape[-1]), M.shape)
    assert_solves(out[3] / DT, expected[3] / DT, M, -dtau[0], dtype, f"{what}: dqd_next_dq / dt")
    assert_solves((out[4] - eye) / DT, (expected[4] - eye) / DT, M, -dtau[1], dtype, f"{what}: (dqd_next_dqd - I) / dt")
    assert_solves(out[5] / DT, expected[5] / DT, M, eye, dtype, f"{what}: dqd_next_dtau / dt")
    if method == "explicit_euler":
        _check(out[:3], expected[:3], TOL[dtype], what, NAMES[:3])
        return
    dv = expected[2] @ np.linalg.inv(expected[5])
    for k in range(3):
        got, exp = out[k] - dv @ out[3 + k], expected[k] - dv @ expected[3 + k]
        for s in range(len(got)):
            err = np.linalg.norm(got[s] - exp[s]) / np.linalg.norm(expected[k][s])
            assert err <= TOL[dtype], f"{what}: {NAMES[k]} less dt Dv {NAMES[3 + k]}, state {s}: {err:.2e}"


def _cases() -> list:
    """(robot, target, method).  CI: semi-implicit Euler on the sample at the default target and the
    deepest rung, on iiwa14 at every rung forced in turn (tests/generated.py rung_cases); explicit
    Euler in test_explicit_euler_and_the_cpu_build.  GRID_FULL_SWEEP=1: both methods on every
    CODEGEN_ROBOTS robot at every rung.  The GPU (the gpu marker, ids ``gpu-...``): the same choice on
    GPU_ROBOTS (tests/generated.py gpu_rung_cases)."""
    out = []
    for kind in ("emulated", "gpu"):
        for method in ("semi_implicit_euler", "explicit_euler") if FULL_SWEEP else ("semi_implicit_euler",):
            ci = {**{n: ("rung0", "deepest-rung") for n in SAMPLE}, "iiwa14": EVERY_RUNG}
            options = (("method", method),)
            cases = (rung_cases("integrator_gradient", ci, options) if kind == "emulated" else
                     gpu_rung_cases("integrator_gradient", options=options, every_rung=("iiwa14",)))
            out += [pytest.param(kind, *c.values, method, id=f"{c.id}-{method}", marks=c.marks) for c in cases]
    return out


@pytest.mark.parametrize(("kind", "name", "target", "method"), _cases())
def test_emulated_equals_the_reference(kind, name, target, method, rng):
    """Both precisions (float32 judged by :func:`_judge`), with and without f_ext, every tier of the
    block layout and the per-state layout, host-emulated or on the GPU."""
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau, f_ext = _inputs(robot, rng)
    M = ref.crba(q)
    for f in (None, f_ext):
        expected = ref.integrator_gradient(q, qd, tau, DT, method, f)
        dtau = ref.inverse_dynamics_gradient(q, qd, ref.forward_dynamics(q, qd, tau, f), f)
        for dtype in (np.float64, np.float32):
            b = integration_library(kind, name, method, target, dtype)
            for layout, tier in LAUNCHES:
                out = b.with_launch(layout=layout, tier=tier).integrator_gradient(q, qd, tau, DT, method, f)
                what = f"{name} {method} {np.dtype(dtype).name} {layout} tier {tier} target={target}"
                what += f" f_ext={f is not None}"
                _judge(out, expected, M, dtau, dtype, what, method)


@pytest.mark.parametrize("name", SAMPLE)
def test_explicit_euler_and_the_cpu_build(name, rng):
    """Explicit Euler in emulation; the CPU build of the default method, and of explicit Euler on
    CPU_METHOD_SAMPLE (its library of its own)."""
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau, f_ext = _inputs(robot, rng)
    # float32 on the CPU (a library each) under GRID_FULL_SWEEP=1, judged as the emulated launches
    methods = ("explicit_euler", "semi_implicit_euler") if name in CPU_METHOD_SAMPLE else ("semi_implicit_euler",)
    M = ref.crba(q)
    for method in methods:
        expected = ref.integrator_gradient(q, qd, tau, DT, method, f_ext)
        dtau = ref.inverse_dynamics_gradient(q, qd, ref.forward_dynamics(q, qd, tau, f_ext), f_ext)
        for dtype in (np.float64, np.float32) if FULL_SWEEP else (np.float64,):
            lib = integration_library("cpu", name, method, None, dtype)
            out = lib.integrator_gradient(q, qd, tau, DT, method, f_ext)
            _judge(out, expected, M, dtau, dtype, f"{name} {method} {np.dtype(dtype).name} cpu", method)
    lib = integration_library("emulated", name, "explicit_euler")
    expected = ref.integrator_gradient(q, qd, tau, DT, "explicit_euler", f_ext)
    for layout, tier in LAUNCHES:
        out = lib.with_launch(layout=layout, tier=tier).integrator_gradient(q, qd, tau, DT, "explicit_euler", f_ext)
        _check(out, expected, 1e-9, f"{name} explicit_euler {layout} tier {tier}")


def difference(robot, q0, q1):
    """``q1 (-) q0`` in the tangent space at ``q0`` (the reference test's, Pinocchio's log6 on a free-flyer)."""
    from tests.algorithms.test_integrator_reference import difference as diff

    return diff(robot, q0, q1)


@pytest.mark.parametrize("method", ["semi_implicit_euler", "explicit_euler"])
@pytest.mark.parametrize("name", ["iiwa14", "go2", "erd:panda"])
def test_equals_central_differences_of_the_generated_integrator(name, method, rng):
    robot = load(name)
    lib = integration_library("emulated", name, method)
    q, qd, tau, f_ext = (x[0] for x in _inputs(robot, rng))
    qd = 5 * qd  # base rotations of a few tenths of a radian over the step
    grads = lib.integrator_gradient(q, qd, tau, 0.05, method, f_ext)
    q_next = lib.integrator(q, qd, tau, 0.05, method, f_ext)[0]

    def step(q_, qd_, tau_):
        q_n, qd_n = lib.integrator(q_, qd_, tau_, 0.05, method, f_ext)
        return np.concatenate([difference(robot, q_next, q_n), qd_n])

    h, n = 3e-5, robot.nv
    by_q = tangent_fd(robot, lambda x: step(x, qd, tau), q, h)
    by_qd = central_fd(lambda x: step(q, x, tau), qd, h)
    by_tau = central_fd(lambda x: step(q, qd, x), tau, h)
    expected = (by_q[:n], by_qd[:n], by_tau[:n], by_q[n:], by_qd[n:], by_tau[n:])
    for g, e, what in zip(grads, expected, NAMES):
        if what == "dq_next_dtau" and method == "explicit_euler":
            assert not g.any() and np.abs(e).max() < 1e-9
            continue
        assert_close(g, e, 1e-6, f"{name} {method}: {what}")


@pytest.mark.parametrize("name", PINOCCHIO_ROBOTS)
def test_equals_pinocchios_aba_derivatives_and_dintegrate(name, rng):
    """Semi-implicit Euler composed from Pinocchio: computeABADerivatives (d qdd / d q, d qdd / d v,
    Minv, qdd) and dIntegrate at v = dt qd_next (ARG0, ARG1).  Not on a mimic robot: Pinocchio 4.1's
    computeABADerivatives does not take mimic joints (panda's gradient is held to the reference,
    itself proven against Pinocchio's crba-based derivatives in the reference tests)."""
    import pinocchio as pin

    robot = load(name)
    model = pin_model(robot)
    data = model.createData()
    b = backend("emulated", name, False, np.float64)
    q, qd, tau, _ = (x[0] for x in _inputs(robot, rng))
    out = b.integrator_gradient(q, qd, tau, DT)
    pq = to_pin_q(robot, q)
    pin.computeABADerivatives(model, data, pq, qd, tau)
    dq, dv, qdd = data.ddq_dq.copy(), data.ddq_dv.copy(), data.ddq.copy()
    Minv = np.triu(data.Minv) + np.triu(data.Minv, 1).T
    v = DT * (qd + DT * qdd)
    Dq, Dv = pin.dIntegrate(model, pq, v, pin.ARG0), pin.dIntegrate(model, pq, v, pin.ARG1)
    I = np.eye(robot.nv)
    dqd = (DT * dq, I + DT * dv, DT * Minv)
    expected = (Dq + DT * Dv @ dqd[0], DT * Dv @ dqd[1], DT * Dv @ dqd[2], *dqd)
    _check(out, expected, 1e-9, f"{name} vs Pinocchio")


# RK4's gradient: in the libraries its integrator's tests build (tests/generated.py method_library), at
# rung 0 and the deepest rung, in both precisions: host-emulated on the sample, on the GPU (the gpu marker,
# ids gpu-...) on GPU_ROBOTS
RK4_CASES = [(spill, dtype) for spill in (False, True) for dtype in (np.float64, np.float32)]


def _rk4_cases() -> list:
    out = []
    for kind, robots, prefix, marks in (("emulated", SAMPLE, "", ()), ("gpu", GPU_ROBOTS, "gpu-", (pytest.mark.gpu,))):
        out += [pytest.param(kind, name, spill, dtype, marks=marks,
                             id=f"{prefix}{name}-{'deepest-rung' if spill else 'rung0'}-{np.dtype(dtype).name}")
                for name in robots for spill, dtype in RK4_CASES]
    return out


@pytest.mark.parametrize(("kind", "name", "spill", "dtype"), _rk4_cases())
def test_rk4_equals_the_reference(kind, name, spill, dtype, rng):
    """Every tier and both layouts, with and without f_ext: float64 at rel 1e-9; float32 at the suite's
    rel 1e-4, but for dqd_next_dq = dt/6 (A_1 + 2 A_2 + 2 A_3 + A_4), whose A_k are each stage's
    forward-dynamics gradient times near-identity blocks and carry its float32 error, which no forward
    bound below cond(M) eps32 holds: it is held, state by state, to max(1e-4, 2 cond(M) eps32), the
    bound of fdsva_so's float32 tests, cond(M) at the state's q (g1, cond(M) 1.6e5: RK4 1.3e-4 measured,
    the bound 1.9e-2; iiwa14, go2 and panda at most 4e-6, within 1e-4)."""
    robot = load(name)
    ref = Reference(robot)
    q, qd, tau, f_ext = _inputs(robot, rng)
    lib = integration_library(kind, name, "rk4", 0 if spill else None, dtype)
    eps = np.finfo(np.float32).eps
    bounds = [max(TOL[np.float32], 2 * np.linalg.cond(m) * eps) for m in ref.crba(q)]
    for f in (None, f_ext):
        expected = ref.integrator_gradient(q, qd, tau, DT, "rk4", f)
        for layout, tier in LAUNCHES:
            out = lib.with_launch(layout=layout, tier=tier).integrator_gradient(q, qd, tau, DT, "rk4", f)
            what = f"{kind} {name} rk4 {np.dtype(dtype).name} {layout} tier {tier} spill={spill} f_ext={f is not None}"
            if dtype is np.float64:
                _check(out, expected, TOL[dtype], what)
                continue
            for k in range(N):
                assert_close(out[3][k], expected[3][k], bounds[k], f"{what} state {k}: dqd_next_dq")
            _check([out[k] for k in (0, 1, 2, 4, 5)], [expected[k] for k in (0, 1, 2, 4, 5)], TOL[dtype], what,
                   [NAMES[k] for k in (0, 1, 2, 4, 5)])


@pytest.mark.parametrize("name", CPU_METHOD_SAMPLE)
def test_rk4_cpu_build(name, rng):
    robot = load(name)
    q, qd, tau, f_ext = _inputs(robot, rng)
    lib = integration_library("cpu", name, "rk4")
    for f in (None, f_ext):
        _check(lib.integrator_gradient(q, qd, tau, DT, "rk4", f), Reference(robot).integrator_gradient(q, qd, tau, DT,
                                                                                                      "rk4", f),
               1e-9, f"{name} rk4 cpu f_ext={f is not None}")


@pytest.mark.parametrize("name", PINOCCHIO_ROBOTS)
def test_rk4_equals_central_differences_of_a_hand_written_rk4_on_pinocchio(name, rng):
    """The generated RK4 gradient against central differences of RK4 written on Pinocchio (its
    forward dynamics at each stage, ``integrate`` placing the stages; tests/pin_bridge.py): ``q``
    moved along the tangent by Pinocchio's ``integrate``, ``q_next``'s rows by its ``difference``
    at ``q_next`` (float64, h = 3e-5, rel 1e-6 as the Euler methods' finite-difference test)."""
    import pinocchio as pin

    from tests.pin_bridge import pin_rk4_at

    robot = load(name)
    model = pin_model(robot)
    q, qd, tau, _ = (x[0] for x in _inputs(robot, rng))
    qd = 5 * qd  # base rotations of a few tenths of a radian over the step
    dt = 0.05
    grads = integration_library("emulated", name, "rk4").integrator_gradient(q, qd, tau, dt, "rk4")
    pq = to_pin_q(robot, q)
    pq_next = pin_rk4_at(robot, pq, qd, tau, dt, model=model)[0]

    def step(pq_, qd_, tau_):
        q_n, qd_n = pin_rk4_at(robot, pq_, qd_, tau_, dt, model=model)
        return np.concatenate([pin.difference(model, pq_next, q_n), qd_n])

    h, n = 3e-5, robot.nv
    eye = np.eye(n)
    by_q = np.stack([(step(pin.integrate(model, pq, h * e), qd, tau) - step(pin.integrate(model, pq, -h * e), qd, tau))
                     / (2 * h) for e in eye], axis=1)
    by_qd = central_fd(lambda x: step(pq, x, tau), qd, h)
    by_tau = central_fd(lambda x: step(pq, qd, x), tau, h)
    expected = (by_q[:n], by_qd[:n], by_tau[:n], by_q[n:], by_qd[n:], by_tau[n:])
    for g, e, what in zip(grads, expected, NAMES):
        assert_close(g, e, 1e-6, f"{name} rk4 vs central differences of RK4 on Pinocchio: {what}")


def test_rk4_composes_the_gradient_by_handle_at_each_stage():
    """RK4's inner: forward_dynamics_gradient's inner at stage 1, then stages 2-4 in one loop the
    compilers keep rolled (grid_core.emit.stages: the composed inner written twice, not four times),
    each loading XImats at its configuration, placed by the framework's move (grid_exp6_xyzquat), with
    dIntegrate at its increment; dIntegrate again at the final increment."""
    from grid_core.composer import generate

    header = generate(load("go2"), ["integrator_gradient"], algorithm_options={"integrator_gradient": {"method": "rk4"}})
    start = header.index("__device__ void integrator_gradient_inner")
    inner = header[start:header.index("__device__ void integrator_gradient_device", start)]
    loop = inner.index("#pragma unroll 1\n    for (int rk = 0; rk < 3; ++rk) {")
    assert inner[:loop].count("forward_dynamics_gradient_inner<T") == 1
    assert inner[loop:].count("forward_dynamics_gradient_inner<T") == 1
    assert inner.count("load_update_XImats<T>(s_XI, s_stage_q)") == 1
    assert inner.count("grid_exp6_xyzquat(") == 1
    assert inner.count("grid_dintegrate6(") == 2
    assert "const T rk_cdt = (rk == 0 ? T(0.5) : rk == 1 ? T(0.5) : T(1.0)) * dt;" in inner
    assert "const T rk_w = rk == 0 ? T(2) : rk == 1 ? T(2) : T(1);" in inner
