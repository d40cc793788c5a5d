"""``benchmarks/src/bench.cu``, the GPU script's benchmark and check program, compiles against the
adapter ``benchmarks/gpu_check.py`` writes for every algorithm with a GPU emitter (its launcher, its
host wrapper, its params' values): nvcc's front end only (``-cuda``: every call's types and
overloads checked against the header, no device code generated; a few seconds a unit), on the
smallest robot.  The GPU machine builds these binaries only in a GPU run, so a wrong argument was
found there before, at device time: the integration family's ``dt`` once given a ``Gravity``
(session 47).  The test fails on exactly that (``test_a_wrong_param_fails_the_front_end``)."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import pytest

import grid_core
from conftest import load, script_module
from grid_core.composer import generate
from grid_core.runtime.cuda import find_nvcc

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
BENCH = ROOT / "benchmarks" / "src" / "bench.cu"
ROBOT = "erd:double_pendulum_continuous"
"""The smallest robot (two dofs): the header of every algorithm in seconds."""
ALGORITHMS = sorted(a for a, x in grid_core.algorithms().items() if x.has_emitter())
"""Every algorithm the GPU script can bench: the default set and those it benches when named."""


@pytest.fixture(scope="module")
def bench_build(tmp_path_factory):
    """``(gpu_check, robot, header path, header text)``: the script, loaded as the GPU machine runs it, and
    one header of every algorithm."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        robot = load(ROBOT)
    d = tmp_path_factory.mktemp("bench")
    text = generate(robot, ALGORITHMS)
    (d / "grid.cuh").write_text(text)
    return script_module("gpu_check_adapters", SCRIPT), robot, d / "grid.cuh", text


def front_end(script, header: Path, adapter: str, name: str) -> subprocess.CompletedProcess:
    """nvcc's front end over bench.cu with ``adapter`` (its text), with the GPU script's flags."""
    ad = header.parent / f"adapter_{name}.h"
    ad.write_text(adapter)
    cmd = [find_nvcc(), *script.nvcc()[1:], "-cuda", "-include", str(header), f'-DBENCH_ADAPTER="{ad}"', str(BENCH),
           "-o", str(header.parent / f"bench_{name}.ii")]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_bench_compiles_against_every_adapter(bench_build, algorithm):
    script, robot, header, text = bench_build
    res = front_end(script, header, script.adapter(robot, algorithm, text), algorithm)
    assert res.returncode == 0, res.stderr[-4000:]


def test_a_wrong_param_fails_the_front_end(bench_build):
    """The defect this file guards against, put back by hand: the integrator's host wrapper given the
    default Gravity where its dt goes."""
    script, robot, header, text = bench_build
    good = script.adapter(robot, "integrator", text)
    bad = good.replace("(hd, model, param_dt<T>, ", "(hd, model, g::Gravity<T>(), ")
    assert bad != good
    res = front_end(script, header, bad, "integrator_bad")
    assert res.returncode != 0
    assert "does not match" in res.stderr or "no instance" in res.stderr, res.stderr[-2000:]
