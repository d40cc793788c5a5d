"""benchmarks/cpu_vs_pinocchio.py on a fresh install: its Pinocchio timing program's includes all
resolve against the test extras (the ``pin`` wheel, ``cmeel-eigen``, ``cmeel-urdfdom-headers``).
eigenpy 3.13 stopped pulling Eigen's headers in, and the program then failed to build on a new
machine while no test noticed; the preprocessor alone (a second or two) finds that, where a full
build of the program would take minutes of CI."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import script_module
from grid_core import buildcache

ROOT = Path(__file__).resolve().parent.parent


def test_the_pinocchio_timing_program_finds_every_header():
    bench = script_module("grid_cpu_vs_pinocchio", ROOT / "benchmarks" / "cpu_vs_pinocchio.py")
    compile_flags, _ = bench.pinocchio_flags()
    source = ROOT / "benchmarks" / "src" / "pinocchio_timing.cpp"
    res = subprocess.run([*buildcache.host_compiler(), "-std=c++17", *compile_flags, "-E", "-o", "/dev/null",
                          str(source)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
