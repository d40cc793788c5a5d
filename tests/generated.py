"""The generated code behind the Reference's methods, shared by every test of it: one library
per (backend, robot, rung) holding every emitted algorithm, built once per process (and on
disk by content hash, so pytest-xdist workers share it)."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from conftest import load
from grid_core.arena import SM90_OPTIN_SMEM_BYTES, Tier

# The robots the generated code is proven on (GRID_FULL_SWEEP=1; CI runs SAMPLE_ROBOTS): every
# bundled robot and 9 example-robot-data robots (fixed arms, mimic joints, continuous joints,
# floating bases).
CODEGEN_ROBOTS = [
    "iiwa14", "hyq", "atlas", "go2", "g1",
    "erd:panda", "erd:ur5_robot", "erd:double_pendulum_continuous", "erd:pr2", "erd:tiago_pro",
    "erd:solo12", "erd:anymal_c_simple/anymal", "erd:talos_reduced", "erd:simple_humanoid",
]
GPU_ROBOTS = ["iiwa14", "hyq", "atlas", "g1"]
FULL_SWEEP = os.environ.get("GRID_FULL_SWEEP") == "1"
"""``GRID_FULL_SWEEP=1``: the slow checks (nvcc at every tier) on every robot, not CI's sample."""
SAMPLE_ROBOTS = ["iiwa14", "hyq", "atlas", "go2", "erd:panda", "erd:double_pendulum_continuous", "erd:solo12",
                 "erd:pr2"]
"""CI's sample of CODEGEN_ROBOTS, for the generated code in emulation (every algorithm, every tier, both
rungs) and on the CPU: the bundled robots but g1 (a fixed arm, quadrupeds, atlas the humanoid), a mimic
arm, continuous joints, a floating quadruped, and a second mimic robot (pr2: mimic grippers, a prismatic
torso; its rung-0 library is built for the gravity tests anyway).  The full sweep adds g1 (the second
humanoid: its libraries, 29 dofs and a free-flyer, took 1,500 CPU s of CI's compilation in session 45, its
CPU library alone 727), ur5 (a fixed arm), anymal (a quadruped), talos_reduced and simple_humanoid
(humanoids) and tiago_pro (mimic joints), whose libraries (two emulated rungs and a CPU build each) took
387 CPU s of CI's compilation."""
SWEEP_ONLY_ROBOTS = ["g1"]
"""The robots CI's samples leave to the full sweep wherever a check names its robots (g1: its libraries took
1,500 CPU s of CI's compilation in session 45); :func:`and_in_the_sweep` adds them under GRID_FULL_SWEEP=1."""


def and_in_the_sweep(robots: list[str]) -> list[str]:
    """``robots`` (CI's choice for a check), with SWEEP_ONLY_ROBOTS added under GRID_FULL_SWEEP=1."""
    return robots + (SWEEP_ONLY_ROBOTS if FULL_SWEEP else [])


NVCC_SAMPLE = ["iiwa14", "erd:panda", "erd:double_pendulum_continuous", "erd:solo12"]
"""CI's nvcc check: a fixed arm, a mimic arm, continuous joints, a floating base (nvcc -O3 of the light
algorithms at every tier, both precisions and both rungs takes minutes per humanoid; the GPU check
builds those).  solo12 is the smallest free-flyer of CODEGEN_ROBOTS (its unit 399 s in the full sweep of
session 45; hyq's, fixed-base, 139 s)."""
NVCC_ROBOTS = CODEGEN_ROBOTS if FULL_SWEEP else NVCC_SAMPLE
SWEEP_ROBOTS = CODEGEN_ROBOTS if FULL_SWEEP else SAMPLE_ROBOTS
"""The robots of the checks that run on CI's sample (every robot under GRID_FULL_SWEEP=1)."""
NVCC_GRADIENT_SAMPLE = (["iiwa14", "hyq", "go2", "erd:panda", "erd:ur5_robot", "erd:double_pendulum_continuous",
                         "erd:solo12", "erd:anymal_c_simple/anymal"] if FULL_SWEEP
                        else ["erd:double_pendulum_continuous"])
"""The robots of the nvcc check of the gradients (every tier, both precisions, both rungs): nvcc -O3 of the
forward-dynamics gradient, which inlines forward dynamics, minv and the inverse-dynamics gradient into each of
its kernels, took 411 s on solo12 and 181 s on iiwa14 here.  CI: the double pendulum (every gradient kernel at
every tier, both precisions and both rungs; iiwa14's four gradient units took 430 s of CI's nvcc in session
46, its light unit stays).  GRID_FULL_SWEEP=1: every arm and quadruped (fixed and floating bases, a mimic
finger, continuous joints), not the humanoids atlas, g1, talos_reduced and simple_humanoid nor the large mimic
robots pr2 and tiago_pro: their light units alone took 10 to 48 minutes of nvcc each in the sweep of session
45 (iiwa14's 1.5), and each robot's four gradient units, each larger than its light unit (iiwa14: 103 to 142
s), would add tens of CPU hours on two cores.  atlas's and g1's gradients are compiled, and run, on the GPU by
benchmarks/gpu_check.sh (GPU_ROBOTS)."""
GRADIENTS = ("inverse_dynamics_gradient", "forward_dynamics_gradient", "end_effector_pose_hessian", "integrator_gradient")
"""The heavy derivatives, compiled with nvcc and run on the CPU backend on CI's samples only."""
INTEGRATOR_SAMPLE = CODEGEN_ROBOTS if FULL_SWEEP else ["iiwa14", "go2", "erd:panda"]
"""CI's robots of the integration family's tests (tests/algorithms/test_integrator*.py): a fixed arm, a
floating quadruped, a mimic arm; every CODEGEN_ROBOTS robot under GRID_FULL_SWEEP=1 (the humanoids
among them: the integrator and its gradient compose the forward-dynamics gradient, minutes of g++ -O3
on a humanoid)."""
CPU_METHOD_SAMPLE = INTEGRATOR_SAMPLE if FULL_SWEEP else ["iiwa14"]
"""The robots whose CPU build runs every integration method (explicit Euler and RK4 generate libraries of
their own, 50 to 90 CPU s of g++ -O3 each on go2 and panda); the default method runs on the CPU on every
INTEGRATOR_SAMPLE robot, from its CPU library."""
DERIVATIVE_ROBOTS = and_in_the_sweep(["iiwa14", "go2"])
"""The robots of the differentiable calls' tests (PyTorch gradcheck, JAX check_grads): a fixed arm and a
floating base in CI; g1 too, a humanoid, under GRID_FULL_SWEEP=1 (its CPU library, holding the gradients,
the integration family and the second derivatives, took 727 CPU s of CI's 70 minutes in session 45)."""
SECOND_ORDER_IN_LIBRARY = ["g1"]
"""The DERIVATIVE_ROBOTS (g1 is one under GRID_FULL_SWEEP=1) whose CPU library holds the kernels of the
second derivatives too (idsva_so, in its loop form on g1, fdsva_so and the end-effector pose Hessian):
g1's second-derivative tests (PyTorch gradgradcheck, JAX check_grads of order 2) call them from it, where
a library of their own would be a second build of the humanoid; iiwa14's and go2's handles build theirs on
the first second derivative (the lazy build those tests assert: idsva_so and fdsva_so, and the pose
Hessian on go2, which CI builds on CPU_GRADIENT_SAMPLE only).  Cold builds, same machine and cache:
g1's library 154 CPU s with idsva_so alone, 203 with fdsva_so and the pose Hessian too; go2's second-order
library 31 CPU s (idsva_so) against 51, iiwa14's 39 either way (fdsva_so composes idsva_so's code)."""
CPU_GRADIENT_SAMPLE = NVCC_SAMPLE
"""CI's sample for the gradients on the CPU in both precisions (g++ -O3 of a humanoid's gradients takes
minutes); every robot with GRID_FULL_SWEEP=1."""
INTEGRATION = ("integrator", "integrator_gradient")
"""The integration family (its time step a required input)."""
TOL = {np.float64: 1e-9, np.float32: 1e-4}
PARAM_VALUES = {"gravity": "{ns}Gravity<{T}>()", "dt": "{T}(0.01)"}
"""A C++ value of each param port, for the tests that call the generated functions from C++ (``{ns}``:
the header's namespace and ``::``, ``{T}``: the scalar type)."""


def emitted() -> list[str]:
    """Every algorithm of the default set (one library holds them all): those with a GPU emitter but
    the ones left out of a header built without a list (``Emitter.in_default_set``: idsva_so and
    fdsva_so, whose tests build them on a sample)."""
    from grid_core import algorithms

    return sorted(name for name, alg in algorithms().items() if alg.has_emitter() and alg.emitter.in_default_set)


def nvcc_algorithms(name: str) -> list[str]:
    """What the nvcc check compiles for robot ``name``: every emitted algorithm, the gradients on
    NVCC_GRADIENT_SAMPLE only."""
    return [a for a in emitted() if a not in GRADIENTS or name in NVCC_GRADIENT_SAMPLE]


@functools.cache
def backend(kind: str, name: str, spill: bool, dtype=np.float64):
    """The generated code of robot ``name`` behind the Reference's methods: ``emulated``
    (host C++, CI) or ``gpu`` (RobotHandle, a CUDA device); ``spill`` forces the deepest rung."""
    opts = {"target_shared_mem_bytes": 0} if spill else {}
    if kind == "gpu":
        from grid_core.runtime import RobotHandle

        handle = RobotHandle(load(name), emitted(), dtype, quiet=True, **opts)
    else:
        handle = _shared_emulated_class()(load(name), emitted(), dtype, **opts)
        handle.shared = (name, spill)
    handle.set_poison(True)  # outputs start as NaN: an element the kernel never writes fails
    return handle


@functools.cache
def _shared_library(name: str, spill: bool):
    """The path of robot ``name``'s shared emulated library (both precisions in one library, built
    from sources that do not depend on the handle's dtype): its header generated once per process."""
    from grid_core.testing import Emulated

    opts = {"target_shared_mem_bytes": 0} if spill else {}
    return Emulated(load(name), emitted(), np.float64, **opts).library_path()


@functools.cache
def _shared_emulated_class():
    from grid_core.testing import Emulated

    class SharedEmulated(Emulated):
        """The shared emulated library's handle: its float64 and float32 handles load one library
        (:func:`_shared_library`), where each generated the robot's whole header again to find its
        key (g1's: 25 s of Python under load); a build for other option values (another ``frames``,
        :meth:`_built_for`) is its own, as before."""

        shared = None

        def library_path(self, quiet: bool = True):
            name, spill = self.shared or (None, None)
            if name is not None and self.algorithms == emitted() and self.generate_options == (
                    {"target_shared_mem_bytes": 0} if spill else {}):
                return _shared_library(name, spill)
            return super().library_path(quiet)

    return SharedEmulated


def gradient_algorithms() -> list[str]:
    """The differentiable calls and every kernel their rules call (the gradient library's)."""
    from grid_core.runtime.derivatives import registered_rules

    rules = registered_rules()
    return sorted(set(rules) | {n for r in rules.values() for n in r.needs})


def second_order_algorithms() -> list[str]:
    """Every kernel the rules' second derivatives call (the second-order library's)."""
    from grid_core.runtime.derivatives import registered_rules

    return sorted({n for r in registered_rules().values() if r.second is not None for n in r.second.needs})


def gradient_handle(name: str):
    """Robot ``name``'s CPU library (:func:`cpu`), which on DERIVATIVE_ROBOTS holds the differentiable
    calls and their rules' kernels (so it is its own gradient library): the PyTorch and JAX tests'."""
    assert name in DERIVATIVE_ROBOTS, name
    return cpu(name)


@functools.cache
def gradient_gpu_handle():
    """iiwa14's RobotHandle of :func:`gradient_algorithms`, float64 (the derivative tests' gpu cases)."""
    from grid_core.runtime import RobotHandle

    return RobotHandle(load("iiwa14"), gradient_algorithms(), np.float64, quiet=True)


@functools.cache
def integrator_handle(method: str):
    """iiwa14's float64 CPU library of the integrator and its gradient generated for ``method``
    (:func:`integration_library`: the robot's shared library for the default method, else
    :func:`method_library`, the integration tests' own): the PyTorch and JAX tests of a method's
    derivative."""
    return integration_library("cpu", "iiwa14", method)


DIFFERENTIABLE_PARAMS = {"integrator": {"dt": 0.05}}
"""What the tests of a differentiable call pass beyond its rule's inputs (a param without a default)."""


def differentiable_call(obj, alg: str):
    """``obj``'s method ``alg`` (a handle's, the Reference's, :class:`~grid_core.runtime.autograd_torch.TorchOps`')
    as a function of its rule's inputs in their order, with :data:`DIFFERENTIABLE_PARAMS`: positionally where
    there are none (the rule's inputs lead the signature), else by name."""
    from grid_core.runtime.derivatives import registered_rules

    names, params, method = registered_rules()[alg].inputs, DIFFERENTIABLE_PARAMS.get(alg), getattr(obj, alg)
    if not params:
        return method

    def call(*xs):
        return method(**dict(zip(names, xs)), **params)

    return call


def cpu_algorithms(name: str, dtype=np.float64) -> list[str]:
    """What robot ``name``'s CPU library in ``dtype`` holds: every emitted algorithm but the GRADIENTS
    and the integration family, the GRADIENTS too on CPU_GRADIENT_SAMPLE (every robot with
    GRID_FULL_SWEEP=1), and in float64 what the tests of the integration family (INTEGRATOR_SAMPLE)
    and of the differentiable calls (DERIVATIVE_ROBOTS: their rules' kernels; on SECOND_ORDER_IN_LIBRARY
    those of their second derivatives too) call on the CPU (the integration family in float32 too under
    GRID_FULL_SWEEP=1)."""
    wanted = {a for a in emitted() if a not in GRADIENTS and a not in INTEGRATION}
    if FULL_SWEEP or name in CPU_GRADIENT_SAMPLE:
        wanted |= set(GRADIENTS) - set(INTEGRATION)
    if (dtype is np.float64 or FULL_SWEEP) and name in INTEGRATOR_SAMPLE:
        wanted |= set(INTEGRATION)
    if dtype is np.float64 and name in DERIVATIVE_ROBOTS:
        wanted |= set(gradient_algorithms())
    if dtype is np.float64 and name in SECOND_ORDER_IN_LIBRARY:
        wanted |= set(second_order_algorithms())
    return sorted(wanted)


@functools.cache
def cpu(name: str, dtype=np.float64, threads: int | None = None):
    """Robot ``name``'s CPU library (CpuHandle) in ``dtype``, holding :func:`cpu_algorithms`: the one
    every test of the CPU build on this robot calls (the generic checks, the differentiable calls'
    rules, the integration family), built once per content hash; ``threads`` a worker count (the same
    library).  Outputs start as NaN: an element the kernel never writes fails."""
    import grid_core

    handle = grid_core.CpuHandle(load(name), cpu_algorithms(name, dtype), dtype, threads=threads, quiet=True)
    handle.set_poison(True)
    return handle


def integration_library(kind: str, name: str, method: str, target: int | None = None, dtype=np.float64):
    """The integration family generated for ``method`` (fixed at generation time) on robot ``name``,
    host-emulated at the shared-memory ``target`` of :func:`rung_targets` (0: the deepest rung
    forced) or on the CPU: the robot's shared library for the default method at the default target
    or 0, else :func:`method_library`."""
    from grid_core.algorithm import INTEGRATION_METHODS

    if kind == "cpu" and method == INTEGRATION_METHODS[0]:
        return cpu(name, dtype)
    if method == INTEGRATION_METHODS[0] and target in (None, 0):
        return backend(kind, name, target == 0, dtype)
    return method_library(kind, name, method, target, dtype)


@functools.cache
def method_library(kind: str, name: str, method: str, target: int | None, dtype):
    """The integrator and its gradient generated for ``method`` (with what they compose) at the
    shared-memory ``target`` (None: the default): one library per method, robot, target and
    precision, shared by the integrator's and its gradient's tests (and the differentiable calls' of
    a method, :func:`integrator_handle`).  RK4's CPU library holds the integrator alone in float32
    (its gradient's tests run the CPU build in float64, as the Euler methods')."""
    from grid_core import CpuHandle

    algorithms = ["integrator"] if kind == "cpu" and method == "rk4" and dtype is not np.float64 else \
        ["integrator", "integrator_gradient"]
    opts = {"algorithm_options": {a: {"method": method} for a in algorithms}}
    if kind == "cpu":
        handle = CpuHandle(load(name), algorithms, dtype, quiet=True, **opts)
        handle.set_poison(True)  # outputs start as NaN: an element the kernel never writes fails
        return handle
    return library(kind, name, algorithms, dtype, **opts, **rung_options(target))


def library(kind: str, name: str, algorithms: list[str], dtype, **options):
    """Robot ``name``'s library of ``algorithms`` generated with ``options`` (a shared-memory target, an
    algorithm's options): host-emulated (``kind`` ``"emulated"``, Emulated) or on a CUDA device
    (``"gpu"``, RobotHandle), outputs starting as NaN (an element the kernel never writes fails): the
    libraries of the algorithms outside the shared one (the second order, an integration method's)."""
    if kind == "gpu":
        from grid_core.runtime import RobotHandle

        handle = RobotHandle(load(name), algorithms, dtype, quiet=True, **options)
    else:
        assert kind == "emulated", kind
        from grid_core.testing import Emulated

        handle = Emulated(load(name), algorithms, dtype, quiet=True, **options)
    handle.set_poison(True)
    return handle


def differentiable_inputs(name: str, alg: str, rng, n: int) -> dict:
    """Random float64 inputs of the differentiable call ``alg`` of robot ``name``, by name in its
    rule's order: ``q`` a configuration, the rest uniform in [-1, 1] (``f_ext`` one force per body)."""
    from grid_core.runtime.derivatives import registered_rules

    robot = load(name)
    x = {"q": robot.random_configuration(rng, n)}
    for k in registered_rules()[alg].inputs[1:]:
        x[k] = rng.uniform(-1, 1, (n, *((robot.num_bodies, 6) if k == "f_ext" else (robot.nv,))))
    return x


DEFAULT_RUNGS = (("rung0", None), ("deepest-rung", 0))
"""The two builds every algorithm's tests start from: the default target and the deepest rung."""


@functools.cache
def rung_targets(algorithm: str, name: str, options: tuple = ()) -> tuple:
    """``(label, target_shared_mem_bytes)`` of the builds of ``algorithm`` on robot ``name`` that
    together run every rung of its spill ladder, each forced in turn on a tier: the default target
    (``"rung0"``: SHARED and LITE on the lowest rungs fitting the sm_90 opt-in cap and 48 KB, MINIMAL on
    the deepest), a target of 0 (``"deepest-rung"``: every tier on the deepest), then, for each rung
    neither reaches, the target of exactly that rung's shared memory (``"forced-rung<k>"``: SHARED falls on
    it).  A rung above the sm_90 opt-in cap (a humanoid's second-order tensors in shared memory) is no
    tier's on that robot and no launch's (host emulation refuses it as the device would): left out.
    ``options``: the algorithm's generation options
    as ``((option, value), ...)`` (the integrator's method)."""
    from grid_core.composer import GenerateOptions, plan_arena
    from grid_core.hooks import registry

    robot, alg = load(name), registry().algorithm(algorithm)
    opts = {"algorithm_options": {algorithm: dict(options)}} if options else {}

    def plan(target):
        return plan_arena(alg, robot, GenerateOptions(target_shared_mem_bytes=target, **opts))

    out, covered = list(DEFAULT_RUNGS), set()
    for _, target in out:
        covered |= set(plan(target).rung_of_tier.values())
    rungs = plan(None).rungs
    for k, rung in enumerate(rungs):
        if k in covered or plan(None).smem_elements(rung) * 8 > SM90_OPTIN_SMEM_BYTES:
            continue
        target = plan(None).smem_elements(rung) * 8
        got = plan(target)
        shared = got.rung_of_tier[Tier.SHARED]
        # a lower rung of the same shared memory places every region as rung k does: the same code
        assert shared == k or got.placements(rungs[shared]) == got.placements(rung), (algorithm, name, k)
        covered |= set(got.rung_of_tier.values()) | {k}
        out.append((f"forced-rung{k}", target))
    return tuple(out)


EVERY_RUNG = "every rung"
"""In :func:`rung_cases`' CI choice: every build of :func:`rung_targets`."""


def rung_cases(algorithm: str, ci: dict, options: tuple = (), robots=None) -> list:
    """``(name, target)`` parameters of ``algorithm``'s tests, ids ``<robot>-<label>``: every build of
    :func:`rung_targets` on every robot of ``robots`` (CODEGEN_ROBOTS) under GRID_FULL_SWEEP=1, CI's
    choice else: ``ci`` maps a robot to the labels it runs (or :data:`EVERY_RUNG`)."""
    out = []
    for name in (robots or CODEGEN_ROBOTS) if FULL_SWEEP else ci:
        # the two default builds need no plan (a humanoid's plans the composed callees' cells: 15 s on atlas)
        builds = rung_targets(algorithm, name, options) if FULL_SWEEP or ci[name] == EVERY_RUNG else DEFAULT_RUNGS
        for label, target in builds:
            if FULL_SWEEP or ci[name] == EVERY_RUNG or label in ci[name]:
                out.append(pytest.param(name, target, id=f"{name}-{label}"))
    return out


def gpu_rung_cases(algorithm: str, labels: tuple = ("rung0", "deepest-rung"), options: tuple = (),
                   every_rung: tuple = ()) -> list:
    """``(name, target)`` parameters of ``algorithm``'s GPU cases (the ``gpu`` marker), ids
    ``gpu-<robot>-<label>``: :func:`rung_cases` on GPU_ROBOTS, the builds of ``labels`` on each (the
    default target and the deepest rung), every build of :func:`rung_targets` on those of ``every_rung``
    (the robots whose emulated cases force every rung; every GPU robot under GRID_FULL_SWEEP=1)."""
    ci = {name: EVERY_RUNG if name in every_rung else labels for name in GPU_ROBOTS}
    return [pytest.param(*c.values, id=f"gpu-{c.id}", marks=pytest.mark.gpu)
            for c in rung_cases(algorithm, ci, options, GPU_ROBOTS)]


def rung_options(target) -> dict:
    """The generation option of one of :func:`rung_targets`' targets (None: the default)."""
    return {} if target is None else {"target_shared_mem_bytes": target}


def emulated(name: str, spill: bool, dtype=np.float64):
    return backend("emulated", name, spill, dtype)


BACKENDS = [pytest.param("emulated", id="emulated"), pytest.param("gpu", id="gpu", marks=pytest.mark.gpu)]
GRAVITY_ROBOTS = and_in_the_sweep(["iiwa14", "atlas", "erd:pr2"])
"""The robots of the checks of a gravity argument and a single state: a fixed arm, a humanoid, the large
mimic robot (g1 too under GRID_FULL_SWEEP=1: its libraries are not in CI's sample)."""


def large_robot_cases() -> list:
    """``(kind, name)`` of the checks on robots whose nv x nv outputs are too large to stage whole (the
    ring kernels): host emulation on atlas (g1 too under GRID_FULL_SWEEP=1: its emulated library is
    not in CI's sample), the GPU on both humanoids.  Ids ``<robot>-<kind>``."""
    out = [pytest.param("emulated", name, id=f"{name}-emulated") for name in and_in_the_sweep(["atlas"])]
    return out + [pytest.param("gpu", name, id=f"{name}-gpu", marks=pytest.mark.gpu) for name in ("atlas", "g1")]


def backend_cases() -> list:
    """``(kind, name, spill)``: the Reference once per CODEGEN_ROBOTS robot (it has no spill rungs),
    then :func:`robot_cases` (the generated code): what each algorithm's backend test runs over."""
    return [pytest.param("reference", name, False, id=f"reference-{name}") for name in CODEGEN_ROBOTS] + robot_cases()


def robot_cases(kinds=("emulated", "gpu"), spills=(False, True), robots=None) -> list:
    """``(kind, name, spill)`` parameters: host emulation on CI's sample (SWEEP_ROBOTS: every
    CODEGEN_ROBOTS robot under GRID_FULL_SWEEP=1) or the robots of ``robots``, the GPU on GPU_ROBOTS
    (each library is an nvcc build of tens of seconds on the device machine), those of them among
    ``robots`` where it is given (a test whose premise holds on its robots only)."""
    out = []
    for kind in kinds:
        marks = [pytest.mark.gpu] if kind == "gpu" else []
        gpu = GPU_ROBOTS if robots is None else [r for r in GPU_ROBOTS if r in robots]
        for name in (gpu if kind == "gpu" else robots or SWEEP_ROBOTS):
            for spill in spills:
                rung = "deepest-rung" if spill else "rung0"
                out.append(pytest.param(kind, name, spill, id=f"{kind}-{name}-{rung}", marks=marks))
    return out



BACKWARD_THRESH = 30.0
"""LAPACK's threshold for its test ratios (as tests/algorithms/test_ill_conditioned_reference.py)."""


def assert_solves(x, expected, M, b, dtype, what: str, parts=(), M_error=None) -> None:
    """``x`` solves ``M x = b`` (states stacked: ``x``, ``b`` (N, n), or (N, n, k) for k right-hand
    sides at once, ``M`` (N, n, n), float64; the norms below are then matrix 1-norms).

    Judged state by state the way the reference tests judge an ill-conditioned robot: where
    ``cond(M) eps(dtype) <= TOL[dtype]`` the forward error against ``expected`` is held to
    TOL[dtype]; where the condition number allows no such forward error in this precision
    (float32 on a humanoid: cond 1e5) the backward error, LAPACK's ratio
    ``||b - M x|| / (n eps ((||M|| + ||M_error||) ||x|| + ||b|| + sum ||part||))`` (``parts``: the
    terms ``b`` was computed from, rounded like it; ``M_error`` (N, n, n): where ``M`` is itself
    computed, the bound on its computation error in units of eps, which the code under test
    computes too), below 30."""
    from grid_core.testing import rel_error

    eps, tol = float(np.finfo(dtype).eps), TOL[dtype]
    x, expected, M, b = (np.asarray(a, dtype=np.float64) for a in (x, expected, M, b))
    n = M.shape[-1]
    for k in range(len(x)):
        cond = np.linalg.cond(M[k])
        if cond * eps <= tol:
            err = rel_error(x[k], expected[k])
            assert err <= tol, f"{what} state {k}: relative error {err:.3e} exceeds {tol:.1e} (cond(M) {cond:.1e})"
            continue
        M_norm = np.linalg.norm(M[k], 1) + (0.0 if M_error is None else np.linalg.norm(M_error[k], 1))
        scale = (M_norm * np.linalg.norm(x[k], 1) + np.linalg.norm(b[k], 1)
                 + sum(np.linalg.norm(np.asarray(p[k], dtype=np.float64), 1) for p in parts))
        residual = np.linalg.norm(b[k] - M[k] @ x[k], 1)
        ratio = residual / (n * eps * scale) if scale > 0 else (0.0 if residual == 0 else np.inf)  # b = 0: x = 0
        assert ratio < BACKWARD_THRESH, (f"{what} state {k}: backward error ratio {ratio:.1f} >= {BACKWARD_THRESH} "
                                         f"(cond(M) {cond:.1e}: judged by the backward error)")


def launches(kind: str, name: str, spill: bool, dtype, algorithm: str) -> list:
    """``(label, method)`` of ``algorithm`` on one backend: the Reference's alone (``kind``
    ``"reference"``), else the generated code's on every layout and tier (the block layout at
    tiers 0, 1 and 2, the per-state layout), from the shared library of :func:`backend`."""
    if kind == "reference":
        from grid_core import Reference

        return [("reference", getattr(Reference(load(name)), algorithm))]
    return launches_of(backend(kind, name, spill, dtype), algorithm)


def launches_of(b, algorithm: str) -> list:
    """``(label, method)`` of ``algorithm`` on the generated code of backend ``b`` on every layout and
    tier: the block layout at tiers 0, 1 and 2, the per-state layout."""
    runs = [("block", t) for t in (0, 1, 2)] + [("per_state", 0)]
    return [(f"{layout} tier {tier}", getattr(b.with_launch(layout=layout, tier=tier), algorithm))
            for layout, tier in runs]


def check_launches(kind: str, name: str, spill: bool, algorithm: str, inputs: tuple, expected) -> None:
    """``algorithm`` on ``inputs`` equals ``expected`` (the Reference's) on every launch of
    :func:`launches`, float64 at 1e-9 and float32 at 1e-4."""
    from grid_core.testing import assert_close

    for dtype in (np.float64, np.float32):
        for what, fn in launches(kind, name, spill, dtype, algorithm):
            assert_close(fn(*inputs), expected, TOL[dtype],
                         f"{name} {algorithm} {np.dtype(dtype).name} {what} spill={spill}")


def check_kinematics(kind: str, name: str, spill: bool, algorithm: str, rng, n: int = 4) -> None:
    """An algorithm of the configuration alone (the kinematics, at the default frames) on ``n`` random
    configurations: :func:`check_launches` against the Reference."""
    from grid_core import Reference
    from grid_core.testing import random_q

    robot = load(name)
    q = random_q(robot, rng, n)
    check_launches(kind, name, spill, algorithm, (q,), getattr(Reference(robot), algorithm)(q))


def check_staged_batch(kind: str, name: str, algorithm: str, rng) -> None:
    """``algorithm``'s (an nv x nv output) generated code on a batch past its measured staging
    threshold on robot ``name`` (its tuning file's ``per_state_stage_min_n``): the per-state kernel
    staged through shared memory warp by warp, whole warps of 32 states, then a partial one (37
    states past a multiple of 32).  The first 40 and the last 40 states equal the Reference, in
    both precisions."""
    import json
    from pathlib import Path

    import grid_algorithms
    from grid_core import Reference
    from grid_core.testing import assert_close, random_state

    tuning = json.loads((Path(grid_algorithms.__file__).parent / f"{algorithm}.tuning.json").read_text())
    n = max(64, int(tuning["robots"].get(name, {}).get("per_state_stage_min_n", 1))) // 32 * 32 + 37
    pick = np.r_[0:40, n - 40:n]
    robot = load(name)
    q = random_state(robot, rng, n)[0]
    expected = getattr(Reference(robot), algorithm)(q[pick])
    for dtype in (np.float64, np.float32):
        out = getattr(backend(kind, name, False, dtype), algorithm)(q)
        assert out.shape == (n, robot.nv, robot.nv)
        assert_close(out[pick], expected, TOL[dtype], f"{name} {algorithm} {np.dtype(dtype).name} N={n}")


def check_ring_batch(kind: str, name: str, algorithm: str, rng) -> None:
    """``algorithm``'s (an nv x nv output) generated code on robot ``name``, whose outputs are too
    large to stage whole, on a batch past the ring threshold (grid_core.emit.ring; the header's
    ``<ALG>_RING_MIN_N``): the per-state kernel's outputs through each warp's ring of shared
    memory, whole warps of 32 states, then a partial one (37 states past a multiple of 32).
    States at both ends and in the middle equal the Reference, in both precisions; outputs start
    as NaN (an entry no flush writes fails)."""
    import re

    from grid_core import Reference
    from grid_core.composer import generate
    from grid_core.testing import assert_close, random_state

    robot = load(name)
    found = re.search(rf"static constexpr int {algorithm.upper()}_RING_MIN_N = (\d+);", generate(robot, [algorithm]))
    assert found, f"{name}: {algorithm} has no ring kernel (its outputs fit the staged kernel?)"
    n = int(found.group(1)) // 32 * 32 + 37
    pick = np.r_[0:40, n // 2 - 20:n // 2 + 20, n - 40:n]
    q = random_state(robot, rng, n)[0]
    expected = getattr(Reference(robot), algorithm)(q[pick])
    for dtype in (np.float64, np.float32):
        out = getattr(backend(kind, name, False, dtype).with_launch(layout="per_state"), algorithm)(q)
        assert out.shape == (n, robot.nv, robot.nv)
        assert_close(out[pick], expected, TOL[dtype], f"{name} {algorithm} {np.dtype(dtype).name} N={n} (ring)")


def check_ring_forms(kind: str, name: str, algorithm: str, forms: list[tuple[dict, bool]], rng) -> None:
    """``algorithm``'s ring kernel on robot ``name`` with the algorithm options of each of ``forms``
    (``(options, whether its one flush stores the whole block)``) forced, the ring on from one
    state: the header calls the flush asked for (``per_state_ring_flush`` whole: the warp's whole
    block of outputs where the ring flushes once, else the groups), and a batch of whole warps and
    a partial one equals the Reference (float64; the GPU, float32 too)."""
    import re

    from grid_core import Reference
    from grid_core.composer import generate
    from grid_core.testing import assert_close, random_state

    robot = load(name)
    n = 3 * 32 + 5
    q = random_state(robot, rng, n)[0]
    expected = getattr(Reference(robot), algorithm)(q)
    for form, whole_block in forms:
        opts = {"algorithm_options": {algorithm: {**form, "per_state_ring_min_n": 1}}}
        header = generate(robot, [algorithm], **opts)
        assert re.search(rf"{algorithm.upper()}_RING_SLOTS = \d+;", header), "no ring kernel"
        flushes, whole = header.count("grid_ring_flush<T,"), header.count("grid_ring_flush_whole<T,")
        assert (whole, flushes > 0) == ((1, False) if whole_block else (0, True)), (form, whole, flushes)
        flushes += whole
        for dtype in (np.float64, np.float32) if kind == "gpu" else (np.float64,):
            b = library(kind, name, [algorithm], dtype, **opts)
            out = getattr(b.with_launch(layout="per_state"), algorithm)(q)
            assert_close(out, expected, TOL[dtype], f"{name} {algorithm} {form} {np.dtype(dtype).name} ({flushes} flushes)")
