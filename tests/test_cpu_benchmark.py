"""benchmarks/cpu_vs_pinocchio.py on a fresh install: its Pinocchio timing program's includes all
resolve against the test extras (the ``pin`` wheel, ``cmeel-eigen``, ``cmeel-urdfdom-headers``).
eigenpy 3.13 stopped pulling Eigen's headers in, and the program then failed to build on a new
machine while no test noticed; the preprocessor alone (a second or two) finds that, where a full
build of the program would take minutes of CI."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from grid_core import buildcache

ROOT = Path(__file__).resolve().parent.parent


def _benchmark():
    name = "grid_cpu_vs_pinocchio"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "cpu_vs_pinocchio.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def test_the_pinocchio_timing_program_finds_every_header():
    compile_flags, _ = _benchmark().pinocchio_flags()
    source = ROOT / "benchmarks" / "src" / "pinocchio_timing.cpp"
    res = subprocess.run([*buildcache.host_compiler(), "-std=c++17", *compile_flags, "-E", "-o", "/dev/null",
                          str(source)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
