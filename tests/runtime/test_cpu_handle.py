"""CpuHandle: the generated code as optimised host C++ on the CPU's cores, equal to the
reference for every algorithm that has an emitter on CI's sample of the code-generation robots
(tests/generated.py SAMPLE_ROBOTS; every robot with GRID_FULL_SWEEP=1).

One library per robot holds every emitted algorithm, built once per process (and on disk
by content hash, so pytest-xdist workers share it).
"""

from __future__ import annotations

import functools
import re
import subprocess
import threading

import numpy as np
import pytest

import grid_core
from conftest import load
from grid_core import Reference
from grid_core.errors import InputError
from grid_core.testing import assert_close, random_q

from tests.algorithms.test_operational_space_inertia import judge as judge_inertia
from tests.generated import SWEEP_ROBOTS, and_in_the_sweep, assert_solves, cpu_algorithms, emitted
from tests.generated import cpu as generated_cpu

EMITTED = [name for name in emitted() if not any(p.kind == "param" and p.default is None
                                                for p in grid_core.algorithms()[name].inputs(load("iiwa14")))]
"""Every emitted algorithm of the default set these generic checks can call with state inputs alone:
not the integration family, whose time step is required (tests/algorithms/test_integrator*.py run it
on the CPU)."""


def algorithms_of(name: str, dtype=np.float64) -> list[str]:
    """What these checks call in robot ``name``'s CPU library (tests.generated.cpu_algorithms: every
    emitted algorithm, the gradients on CI's sample and the derivative tests' robots): those callable
    with state inputs alone."""
    return [a for a in cpu_algorithms(name, dtype) if a in EMITTED]


TOL = {np.float64: 1e-9, np.float32: 1e-4}
N = 37  # not a multiple of the worker count: ranges of unequal length


def cpu(name: str, threads: int | None = None):
    """The robot's CPU library, float64 (tests/generated.py: shared with the other tests of the CPU build)."""
    return generated_cpu(name, np.float64, threads)


def state_inputs(alg, robot, rng, n=N, optional=True) -> dict:
    """Random non-zero state inputs of ``alg`` by port: ``q`` a configuration, the rest uniform;
    optional inputs given only when ``optional``."""
    out = {}
    for p in alg.inputs(robot):
        if p.kind != "state" or (p.optional and not optional):
            continue
        shape = (n, *p.shape) if n is not None else p.shape
        out[p.name] = random_q(robot, rng, n) if p.name == "q" else rng.uniform(-2, 2, shape)
    return out


def same(algorithm: str, robot, run, expected, x: dict, dtype, what: str):
    """``run()`` (the CPU build) against ``expected()`` (the reference) on the inputs ``x``: the
    reference's InputError word for word where it refuses (None then), else the result, equal to the
    reference's at TOL; the operational-space inertia (an inverse whose condition number reaches 1e7)
    judged as its own tests judge it."""
    try:
        want = expected()
    except InputError as exc:
        with pytest.raises(InputError) as info:
            run()
        assert str(info.value) == str(exc), what
        return None
    out = run()
    if algorithm == "operational_space_inertia":
        judge_inertia(robot, x["q"], out, want, dtype, what)
    else:
        assert_close(out, want, TOL[dtype], what)
    return out


@pytest.mark.parametrize(("name", "algorithm"), [(n, a) for n in SWEEP_ROBOTS for a in algorithms_of(n)])
def test_cpu_handle_equals_the_reference(name, algorithm, rng, general_calls):
    robot = load(name)
    alg = grid_core.algorithms()[algorithm]
    ref, handle = getattr(Reference(robot), algorithm), getattr(cpu(name), algorithm)
    for optional in (False, True):
        x = state_inputs(alg, robot, rng, optional=optional)
        same(algorithm, robot, lambda: handle(**x), lambda: ref(**x), x, np.float64,
             f"{name} {algorithm} optional={optional}")
    x = state_inputs(alg, robot, rng, n=None)  # one state, positionally: the lean path
    calls = general_calls(cpu(name))
    out = same(algorithm, robot, lambda: handle(*x.values()), lambda: ref(*x.values()), x, np.float64,
               f"{name} {algorithm} one state")
    assert calls == [], "one state took the general path"
    outs = out if isinstance(out, tuple) else (out,)
    assert out is None or [o.shape for o in outs] == [p.shape for p in alg.outputs(robot)]


@pytest.mark.parametrize("name", and_in_the_sweep(["iiwa14", "atlas"]))
def test_float32_and_gravity(name, rng):
    """The float32 library in every algorithm it holds on a fixed arm and a humanoid (g1 too under
    GRID_FULL_SWEEP=1), and the float64 one with another gravity."""
    robot = load(name)
    handle = generated_cpu(name, np.float32)
    ref = Reference(robot)
    g = np.array([0.3, -1.2, -9.0])
    for algorithm in algorithms_of(name, np.float32):
        alg = grid_core.algorithms()[algorithm]
        x = state_inputs(alg, robot, rng)
        run = functools.partial(getattr(handle, algorithm), **x)
        expected = functools.partial(getattr(ref, algorithm), **x)
        if algorithm == "forward_dynamics_gradient":  # judged as its own tests judge it: M X = -dtau
            out = run()
            M = ref.crba(x["q"])
            dtau = ref.inverse_dynamics_gradient(x["q"], x["qd"], ref.forward_dynamics(**x), x.get("f_ext"))
            for k in range(2):
                assert_solves(out[k], expected()[k], M, -dtau[k], np.float32, f"{name} {algorithm} float32")
        else:  # the reference's refusal word for word (atlas's head frame: too few joints for six rows)
            out = same(algorithm, robot, run, expected, x, np.float32, f"{name} {algorithm} float32")
        assert out is None or all(o.dtype == np.float32 for o in (out if isinstance(out, tuple) else (out,)))
    x = state_inputs(grid_core.algorithms()["inverse_dynamics"], robot, rng)
    assert_close(cpu(name).inverse_dynamics(**x, gravity=g), ref.inverse_dynamics(**x, gravity=g), 1e-9)


def test_threads_split_the_batch_and_change_no_bit(rng):
    """Each state is computed alone, so any worker count gives the same bits."""
    robot = load("atlas")
    x = state_inputs(grid_core.algorithms()["inverse_dynamics"], robot, rng, n=1001)
    one = cpu("atlas", 1)
    assert one.workers == 1 and cpu("atlas").workers >= 1
    expected = one.inverse_dynamics(**x)
    for threads in (2, 3, 8):
        assert np.array_equal(cpu("atlas", threads).inverse_dynamics(**x), expected), threads
    assert_close(expected, Reference(robot).inverse_dynamics(**x), 1e-9)


def test_far_joint_angles(rng):
    """The CPU build's sin and cos of a group of states in vector lanes reduce the angles by
    pi/2; a group holding an angle beyond that reduction's range (|q| > 1e5) takes them lane
    by lane.  Far angles in some groups' lanes and not others: equal to the reference."""
    robot = load("iiwa14")
    x = state_inputs(grid_core.algorithms()["inverse_dynamics"], robot, rng)
    x["q"][::3] += rng.choice([-1e6, 2e5, 4e7], size=x["q"][::3].shape)
    x["q"][1, 2] = 99999.0  # within the reduction's range, at its edge
    assert_close(cpu("iiwa14").inverse_dynamics(**x), Reference(robot).inverse_dynamics(**x), 1e-9)


def test_calls_from_several_threads_at_once(rng):
    robot = load("hyq")
    handle = cpu("hyq", 2)
    cases = [state_inputs(grid_core.algorithms()["inverse_dynamics"], robot, rng, n=500) for _ in range(4)]
    expected = [Reference(robot).inverse_dynamics(**x) for x in cases]
    results: dict = {}

    def work(k):
        for _ in range(5):
            results[k] = handle.inverse_dynamics(*cases[k].values())

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert_close(results[k], expected[k], 1e-9, f"thread {k}")


def test_out_argument_is_written_in_place(rng):
    robot = load("iiwa14")
    x = state_inputs(grid_core.algorithms()["inverse_dynamics"], robot, rng, optional=False)
    out = np.empty((N, robot.nv))
    assert cpu("iiwa14").inverse_dynamics(*x.values(), out=out) is out
    assert_close(out, Reference(robot).inverse_dynamics(**x), 1e-9)


@pytest.mark.parametrize("arg", ["q", "qd", "qdd"])
def test_non_finite_inputs_are_named(arg, rng):
    robot = load("iiwa14")
    x = state_inputs(grid_core.algorithms()["inverse_dynamics"], robot, rng, optional=False)
    x[arg][3, 1] = np.nan
    with pytest.raises(InputError, match=f"'{arg}'|{arg}"):
        cpu("iiwa14").inverse_dynamics(*x.values())


@pytest.mark.parametrize("arg, row", [("q", 0), ("qdd", 1023), ("qd", 511)])
def test_non_finite_inputs_are_found_by_every_worker(arg, row, rng):
    """A large batch's inputs are checked on the workers too, in chunks from both ends: a NaN
    anywhere is found and named, and the outputs are left as they were."""
    robot = load("iiwa14")
    x = state_inputs(grid_core.algorithms()["inverse_dynamics"], robot, rng, n=1024, optional=False)
    x[arg][row, -1] = np.inf
    out = np.full((1024, robot.nv), 7.0)
    with pytest.raises(InputError, match=f"'{arg}'|{arg}"):
        cpu("iiwa14", 2).inverse_dynamics(*x.values(), out=out)
    assert np.all(out == 7.0)


def test_bad_thread_counts_and_cuda_arrays_are_refused():
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="threads"):
            grid_core.CpuHandle("iiwa14", threads=bad, quiet=True)
    assert cpu("iiwa14").accepts_device_arrays is False


def symbols_of(path, *flags: str) -> str:
    """``nm``'s listing of a compiled library."""
    return subprocess.run(["nm", *flags, str(path)], capture_output=True, text=True, check=True).stdout


def test_block_layout_is_refused_by_name():
    """The CPU build compiles the per-state layout alone: asking for the block layout is a clear
    error, not a launch that fails inside the library."""
    with pytest.raises(ValueError, match="per-state layout only"):
        cpu("iiwa14").with_launch(layout="block")
    assert cpu("iiwa14").with_launch(threads=1).layout == "per_state"
    kernels = set(re.findall(r"grid::(\w+_kernel)<", symbols_of(cpu("iiwa14")._path, "-C")))
    assert {f"{a}_per_state_kernel" for a in EMITTED} <= kernels, kernels
    assert not {f"{a}_kernel" for a in EMITTED} & kernels, "a block kernel compiled into the CPU build"


def test_a_handle_compiles_its_own_precision_only():
    """A float64 handle's library holds the float64 entries and no float32 one, and the other
    way round (one precision compiles in about half the time of both)."""
    for dtype, own, other in ((np.float64, "_f64_cpu", "_f32"), (np.float32, "_f32_cpu", "_f64")):
        handle = generated_cpu("iiwa14", dtype)
        entries = [s.split()[-1] for s in symbols_of(handle._path, "-D", "--defined-only").splitlines()
                   if "grid_abi_" in s]
        assert {f"grid_abi_{a}{own}" for a in EMITTED} <= set(entries), dtype
        assert not [e for e in entries if other in e], f"{dtype.__name__}: entries of the other precision"
    assert handle.inverse_dynamics(*(np.zeros(7, np.float32),) * 3).dtype == np.float32


def test_libraries_share_no_symbol_with_another_in_the_process():
    """No symbol of the CPU or the host-emulated library is process-wide unique (g++'s
    STB_GNU_UNIQUE for the statics of inline functions and templates, which the dynamic linker
    shares between every library that defines them, RTLD_LOCAL or not: on the GPU two builds in one
    process shared a launcher's once-only opt-in).  ``nm`` marks such a symbol ``u``."""
    from tests.generated import emulated

    for path in (cpu("iiwa14")._path, emulated("iiwa14", False).library_path()):
        symbols = symbols_of(path, "-D", "--defined-only").splitlines()
        assert any(" T grid_abi_" in s for s in symbols), path  # the entries are there
        unique = [s for s in symbols if s.split()[1:2] == ["u"]]
        assert unique == [], f"{path.name}: {len(unique)} process-wide unique symbols, e.g. {unique[:2]}"


def test_libraries_of_a_process_share_one_thread_pool(rng):
    """Every library the runtime loads runs its host jobs on the process's one pool (the first
    library's table, ``grid_host_pool_lend``, adopted by the others): two libraries called in
    turn on two threads start at most one worker between them, not one each (each spinning after
    its jobs on the cores the other's job wants: iiwa14's and hyq's CRBA called in turn took
    19 -> 35 and 38 -> 54-72 us on 2 cores with a pool each)."""
    import os

    from grid_core.runtime import backend

    def os_threads() -> int:
        return len(os.listdir("/proc/self/task"))

    # libraries of their own (their own namespace): no other test has started their pools
    handles = {name: grid_core.CpuHandle(name, algorithms=["crba"], threads=2, quiet=True, namespace=f"pool_{name}")
               for name in ("iiwa14", "hyq")}
    states = {name: random_q(load(name), rng, 512) for name in handles}
    before = os_threads()
    for _ in range(3):
        for name, handle in handles.items():
            assert_close(handle.crba(states[name]), Reference(load(name)).crba(states[name]), 1e-9, name)
    assert os_threads() - before <= 1, "each library started workers of its own"
    for handle in handles.values():
        lend = handle._lib().grid_host_pool_lend
        assert lend() == backend._POOL is not None


def test_public_and_loaded_lazily():
    from grid_core.runtime.cpu import CpuHandle

    assert grid_core.CpuHandle is CpuHandle and "CpuHandle" in grid_core.__all__


def test_build_reports_progress_and_one_status_line(monkeypatch, capsys, tmp_path):
    """Progress while the compiler runs, then `grid: <algorithms>[<robot>] <key> compiled in
    <s> s` or `(cached)`; the key covers the flags, the compiler and the CPU."""
    import time

    from grid_core import buildcache
    from grid_core.runtime import cpu as cpu_module

    seen = {}

    def slow_build(label, sources, command, output, *, extra=None, **kw):
        seen.update(command=command, extra=extra)
        time.sleep(5.5)
        return tmp_path / f"{label}-0123456789abcdef.so", False

    monkeypatch.setattr(buildcache, "build", slow_build)
    cpu_module.build_cpu_library(load("iiwa14"), ["inverse_dynamics"])
    err = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"grid: compiling inverse_dynamics\[iiwa14\] for the CPU\.\.\. \d+ s", err[0])
    assert re.fullmatch(r"grid: inverse_dynamics\[iiwa14\] 0123456 compiled in \d+\.\d s", err[-1])
    assert "-O3" in seen["command"] and "-DGRID_HOST_CPU" in seen["command"]
    assert set(seen["extra"]) == {"compiler", "march"}
    monkeypatch.setattr(buildcache, "build", lambda *a, **k: (tmp_path / "cpu-x-0123456789ab.so", True))
    cpu_module.build_cpu_library(load("iiwa14"), ["inverse_dynamics"])
    assert capsys.readouterr().err.splitlines() == ["grid: inverse_dynamics[iiwa14] 0123456 (cached)"]
