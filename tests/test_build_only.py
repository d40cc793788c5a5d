"""conftest.py's GRID_GPU_BUILD_ONLY: the gpu-marked tests build, for the architecture it names,
every GPU library they would load and stop there, without a GPU (what benchmarks/gpu_check.py runs
before the GPU tests, and how a CPU machine prebuilds a GPU machine's libraries)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TESTS = textwrap.dedent(
    """
    import numpy as np
    import pytest

    import grid_core


    @pytest.mark.gpu
    def test_builds_then_stops():
        handle = grid_core.RobotHandle(grid_core.load_robot("iiwa14"), ["inverse_dynamics"], np.float32, quiet=True)
        zeros = np.zeros((2, 7), np.float32)
        handle.inverse_dynamics(zeros, zeros, zeros)  # the library's first load
        raise AssertionError("not reached: no library is loaded")


    @pytest.mark.gpu
    def test_judged_only_by_its_build():
        raise AssertionError("not a build error: not judged")


    def test_not_a_gpu_test():
        raise AssertionError("not run")
    """
)


def test_gpu_tests_build_their_libraries_and_load_none(tmp_path):
    (tmp_path / "test_sample.py").write_text(TESTS)
    env = {**os.environ, "GRID_GPU_BUILD_ONLY": "sm_90", "GRID_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-n", "0", "-p", "conftest", "-p", "no:cacheprovider",
                          "test_sample.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "3 skipped" in out, out
    libs = list((tmp_path / "cache").glob("gpu-iiwa14-*.so"))
    assert len(libs) == 1, out
    assert f"built {libs[0]}" in out
    assert "not judged (GRID_GPU_BUILD_ONLY): AssertionError" in out
    assert "GRID_GPU_BUILD_ONLY: the gpu tests' libraries only" in out
    # the library is the CUDA build for sm_90 (cudart linked statically: it loads without a driver)
    lib = ctypes.CDLL(str(libs[0]))
    assert lib.grid_abi_platform() == 0 and hasattr(lib, "grid_abi_inverse_dynamics_f32")
