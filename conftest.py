"""Shared fixtures: robots, a seeded random generator, and state samplers.

The robot catalogue here is the one every test draws from: the bundled robots
and a corpus of example-robot-data robots (fixed arms, quadrupeds, humanoids,
floating bases, mimic joints, continuous joints, sloppy inertias).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest_plugins = ("tests.sweep_log",)  # GRID_SWEEP_LOG: a resumable full sweep

# JAX takes 75% of a GPU's memory when it first touches it; pytest-xdist's workers share one GPU
# (the gpu-marked tests, -n 16 on the device: 16 such processes exhausted an H100's memory, and
# JAX, PyTorch and our own launches failed with out-of-memory).  Each worker allocates as it needs.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# name -> floating_base argument of load_robot (None: the source's natural base)
BUNDLED = {"iiwa14": None, "hyq": None, "atlas": None, "go2": None, "g1": None}
ERD = {
    "erd:panda": False,  # arm with a mimic finger
    "erd:ur5_robot": False,
    "erd:z1": False,
    "erd:xarm7": False,
    "erd:kinova": False,
    "erd:double_pendulum_continuous": False,  # continuous joints
    "erd:baxter": False,  # mimic grippers
    "erd:pr2": False,  # mimic grippers, prismatic torso
    "erd:solo12": True,  # quadruped
    "erd:anymal_c_simple/anymal": True,
    "erd:a1": True,
    "erd:talos_reduced": True,  # humanoid
    "erd:simple_humanoid": True,
    "erd:icub": True,  # humanoid with sloppy inertias
    "erd:tiago_pro": False,  # mobile manipulator with mimic joints
}
ROBOTS = {**BUNDLED, **ERD}
MIMIC_ROBOTS = ("erd:panda", "erd:baxter", "erd:pr2", "erd:tiago_pro")


def load(name: str, floating_base=None):
    import grid_core

    fb = ROBOTS.get(name) if floating_base is None else floating_base
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return grid_core.load_robot(name, floating_base=fb)


def script_module(name: str, path: Path):
    """The module of a file outside the packages (a benchmark script, a docs extension), loaded once
    per process as ``sys.modules[name]``."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.fixture(scope="session")
def robot_cache():
    cache = {}

    def get(name, floating_base=None):
        key = (name, floating_base)
        if key not in cache:
            cache[key] = load(name, floating_base)
        return cache[key]

    return get


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id: reproducible, different per test, the same with and
    without pytest-xdist (whose ``--dist loadgroup`` appends ``@group`` to the id on its workers)."""
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.nodeid.split("@", 1)[0].encode()))


@pytest.fixture
def general_calls(monkeypatch):
    """``calls = general_calls(backend)``: one entry in ``calls`` per call that reaches the
    backend's general path (the lean paths never do)."""

    def watch(backend):
        calls, general = [], backend._call

        def counting(*args, **kwargs):
            calls.append(1)
            return general(*args, **kwargs)

        monkeypatch.setattr(backend, "_call", counting)
        return calls

    return watch


def uses_the_cpu_build(item) -> bool:
    """Whether a test calls a robot's CPU library (tests/runtime/, or a test named for the CPU build)."""
    return item.path.parent.name == "runtime" or "cpu" in getattr(item, "originalname", item.name)


SHARED_FIXTURE_FILES = ("test_docs.py", "test_third_party_plugin.py", "test_import_all.py", "test_peers.py")
"""Test files whose module- or session-scoped fixtures do long work (the docs build, a pip install, a
subprocess importing every module, MuJoCo models): each file's tests go to one worker, which does it once."""


def group_of(item) -> str | None:
    """The pytest-xdist group of a test: its robot's (its robot's CPU build's apart), its file's where
    the file's fixtures are shared, none else (the nvcc compilations, which share nothing, included)."""
    if item.path.name in SHARED_FIXTURE_FILES:
        return f"file-{item.path.name}"
    if item.path.name == "test_nvcc_compile.py":
        return None
    spec = getattr(item, "callspec", None)
    robot = next((v for k, v in (spec.params.items() if spec else ()) if k in ("name", "robot")
                  and isinstance(v, str) and v in ROBOTS), None)
    return None if robot is None else f"robot-{robot}{'-cpu' if uses_the_cpu_build(item) else ''}"


BUILD_ONLY = "GRID_GPU_BUILD_ONLY"
"""``GRID_GPU_BUILD_ONLY=<arch>`` (``sm_90``): the gpu-marked tests build every GPU library they
would load, for that architecture, and stop there, on a machine with or without a GPU: the
libraries of a GPU run compiled beforehand (on a CPU machine, whose cache the GPU machine is then
given, or on the GPU machine side by side, before its test run: ``benchmarks/gpu_check.py``).  A
test whose library got built is reported skipped ("built"); a library that fails to build fails
its test; anything else a test did before loading a library is not judged; other tests do not run.
A test that loads several libraries stops at its first: the test run builds the others."""


class _Built(Exception):
    """A GPU library built under GRID_GPU_BUILD_ONLY, where a test would load it."""


def _build_only() -> None:
    """GRID_GPU_BUILD_ONLY: the runtime sees a device of that architecture and loads no library."""
    arch = os.environ.get(BUILD_ONLY)
    if not arch:
        return
    import grid_core.runtime as runtime
    import grid_core.runtime.cuda as cuda
    import grid_core.runtime.handle as handle

    def built(path):
        raise _Built(f"built {path}")

    runtime.device_count = cuda.device_count = lambda: 1
    handle.require_device = cuda.require_device = lambda: None
    handle.cuda_arch = cuda.cuda_arch = lambda: arch
    handle.load_abi = built


_build_only()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under GRID_GPU_BUILD_ONLY: a test stopped at its library's load is skipped as built, one
    stopped by anything but a build error is skipped as not judged."""
    outcome = yield
    if not os.environ.get(BUILD_ONLY) or call.excinfo is None:
        return
    from grid_core.errors import BuildError

    report = outcome.get_result()
    if call.excinfo.errisinstance((BuildError, pytest.skip.Exception)):
        return
    reason = str(call.excinfo.value) if call.excinfo.errisinstance(_Built) else \
        f"not judged ({BUILD_ONLY}): {call.excinfo.typename}"
    report.outcome, report.longrepr = "skipped", (str(item.path), item.location[1] or 0, reason)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Every test of one robot goes to one pytest-xdist worker (``--dist loadgroup``, pyproject's
    addopts), those of its CPU build in a group of their own: the libraries its tests compile
    (emulated, CPU) are then built once, and a humanoid's two families (minutes of compilation each)
    can run on both workers at once (:func:`group_of`; the build cache's lock keeps any library
    reached from two workers one build).  `gpu`-marked tests need a CUDA device; they skip only
    when none is present."""
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get(BUILD_ONLY):
        skip = pytest.mark.skip(reason=f"{BUILD_ONLY}: the gpu tests' libraries only")
        for item in items:
            if not item.get_closest_marker("gpu"):
                item.add_marker(skip)
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    from grid_core.runtime import device_count

    if device_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA device present")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


BUILD_LOG = "GRID_TEST_BUILD_LOG"


def pytest_configure(config):
    """Every library build of the run (each xdist worker's too) is recorded in one file, which the
    summary reads: CI's log then says which builds the minutes went to, in CPU seconds (robust to
    other load on the machine) as well as wall seconds, and which test paid each."""
    import os
    import tempfile

    import grid_core.buildcache as buildcache

    if not os.environ.get(BUILD_LOG):  # the controller (or a run without xdist): workers inherit it
        fd, path = tempfile.mkstemp(prefix="grid-builds-", suffix=".tsv")
        os.close(fd)
        os.environ[BUILD_LOG] = config._grid_build_log = path
    compile_ = buildcache._compile

    def recorded(label, sources, command, output, key, final, quiet, **kw):
        import resource
        import time

        before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        path = compile_(label, sources, command, output, key, final, quiet, **kw)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
        with open(os.environ[BUILD_LOG], "a") as log:
            log.write(f"{cpu:.1f}\t{time.perf_counter() - t0:.1f}\t{final.name}\t{test}\n")
        return path

    buildcache._compile = recorded


def pytest_terminal_summary(terminalreporter, config):
    import os

    path = os.environ.get(BUILD_LOG)
    if hasattr(config, "workerinput") or not path or not os.path.exists(path):
        return
    rows = [line.rstrip("\n").split("\t") for line in open(path)]
    rows.sort(key=lambda r: -float(r[0]))
    cpu = sum(float(r[0]) for r in rows)
    terminalreporter.write_sep("=", f"slowest library builds ({len(rows)} builds, {cpu:.0f} CPU s in all)")
    for r in rows[:30]:
        terminalreporter.write_line(f"{float(r[0]):7.1f} CPU s {float(r[1]):7.1f} s  {r[2]}  ({r[3]})")


def pytest_unconfigure(config):
    import os

    path = getattr(config, "_grid_build_log", None)
    if path:
        os.environ.pop(BUILD_LOG, None)
        os.unlink(path)


LONG_FIRST = ("robot-g1", "test_nvcc_compile.py", "robot-atlas", "test_idsva_so_cpu_handle_loop_form", "robot-erd:pr2",
              "file-test_docs.py")
"""The longest units of work, longest first (g1's libraries, under GRID_FULL_SWEEP=1 only, the nvcc
compilations of minutes each, atlas's (CI's humanoid), idsva_so's loop-form CPU build (on atlas under
GRID_FULL_SWEEP=1: 300 CPU s, a test of its own), the large mimic robot, the docs build): they start ahead of
pytest-xdist's order (most tests first, single tests last), so that the run ends on short units, both workers
busy to the end.  CI's sample of robots (tests/generated.py SAMPLE_ROBOTS) holds no other humanoid: g1,
talos_reduced, simple_humanoid and tiago_pro, whose libraries made their units long, are built under
GRID_FULL_SWEEP=1 only."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with LONG_FIRST's units at the head of the queue (a group is one unit, an
    ungrouped test one)."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    def rank(scope: str) -> int:
        unit = scope.removesuffix("-cpu")
        return next((k for k, p in enumerate(LONG_FIRST) if unit == p or (not p.startswith(("robot-", "file-"))
                                                                            and p in scope)), len(LONG_FIRST))

    class LongFirst(LoadGroupScheduling):
        def _assign_work_unit(self, node):
            if not getattr(self, "_ordered", False):
                self._ordered = True
                for scope in sorted(self.workqueue, key=rank):  # stable: xdist's order among the rest
                    self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return LongFirst(config, log)
