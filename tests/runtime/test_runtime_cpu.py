"""The runtime on a machine without a GPU (CI): clear errors, the nvcc build path, the
cache under concurrency, and the host path of the C ABI (through host emulation)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.errors import RuntimeUnavailableError
from grid_core.runtime import cuda
from grid_core.testing import Emulated, assert_close, random_state


def test_handle_without_a_driver_names_the_missing_piece(monkeypatch):
    from grid_core import RobotHandle

    monkeypatch.setattr(cuda, "_driver", lambda: None)
    with pytest.raises(RuntimeUnavailableError) as info:
        RobotHandle("iiwa14")
    msg = str(info.value)
    assert "\n" not in msg
    assert "libcuda" in msg and "Emulated" in msg


def test_handle_with_a_driver_but_no_device(monkeypatch):
    from grid_core import RobotHandle

    monkeypatch.setattr(cuda, "_driver", lambda: object())
    monkeypatch.setattr(cuda, "device_count", lambda: 0)
    with pytest.raises(RuntimeUnavailableError, match="sees no device"):
        RobotHandle("iiwa14")


def test_missing_nvcc_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("GRID_NVCC", str(tmp_path / "nvcc"))
    with pytest.raises(RuntimeUnavailableError, match="GRID_NVCC=.* is not a file"):
        cuda.find_nvcc()
    monkeypatch.delenv("GRID_NVCC")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(RuntimeUnavailableError, match="no nvcc found: install the CUDA toolkit"):
        cuda.find_nvcc()


def test_arch_override(monkeypatch):
    monkeypatch.setenv("GRID_CUDA_ARCH", "9.0")
    assert cuda.cuda_arch() == "sm_90"
    monkeypatch.setenv("GRID_CUDA_ARCH", "sm_120")
    assert cuda.cuda_arch() == "sm_120"


def test_gpu_library_builds_with_nvcc_and_reports_status(tmp_path, monkeypatch, capsys):
    """The whole build path up to the GPU: header + C ABI compiled by nvcc for sm_90."""
    from grid_core.runtime import build_gpu_library

    monkeypatch.setenv("GRID_CACHE_DIR", str(tmp_path))
    robot = load("iiwa14")
    path = build_gpu_library(robot, ["inverse_dynamics"], arch="sm_90")
    first = capsys.readouterr().err
    assert "grid: inverse_dynamics[iiwa14]" in first and "compiled in" in first
    again = build_gpu_library(robot, ["inverse_dynamics"], arch="sm_90")
    assert again == path and "(cached)" in capsys.readouterr().err
    lib = ctypes.CDLL(str(path))  # loads without a driver: cudart is linked statically
    for sym in ("grid_abi_inverse_dynamics_f32", "grid_abi_inverse_dynamics_f64_host", "grid_abi_info"):
        assert hasattr(lib, sym)
    info = (ctypes.c_int * 4)()
    assert lib.grid_abi_info(info, 4) == 4 and list(info)[:3] == [7, 7, 7]


BUILD_ONE = textwrap.dedent(
    """
    import sys, warnings
    warnings.simplefilter("ignore")
    import grid_core
    from grid_core.testing import Emulated
    emu = Emulated(grid_core.load_robot("hyq"), ["inverse_dynamics"], namespace="concurrent")
    print(emu.library_path())
    """
)


def test_two_processes_building_at_once_leave_one_entry(tmp_path):
    env = {**os.environ, "GRID_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", BUILD_ONE], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    paths = {o[0].strip() for o in outs}
    assert len(paths) == 1
    entries = sorted(os.listdir(tmp_path))
    assert entries == [os.path.basename(paths.pop())], entries  # one artefact, no temporary left


def test_numpy_out_argument_is_written_in_place(rng):
    robot = load("iiwa14")
    emu = Emulated(robot, ["inverse_dynamics"], np.float64)
    q, qd, qdd = random_state(robot, rng, 9)
    out = np.full((9, robot.nv), np.nan)
    res = emu.inverse_dynamics(q, qd, qdd, out=out)
    assert res is out
    assert_close(out, Reference(robot).inverse_dynamics(q, qd, qdd), 1e-9)
    with pytest.raises(Exception, match="out= for 'tau' must be"):
        emu.inverse_dynamics(q, qd, qdd, out=np.empty((9, robot.nv), dtype=np.float32))


def test_per_algorithm_launch_configuration(rng):
    robot = load("hyq")
    emu = Emulated(robot, ["inverse_dynamics"], np.float64)
    emu.configure("inverse_dynamics", layout="block", tier=2, threads=64)
    assert emu._launch_of("inverse_dynamics") == (1, 2, 64, 0)
    q, qd, qdd = random_state(robot, rng, 4)
    assert_close(emu.inverse_dynamics(q, qd, qdd), Reference(robot).inverse_dynamics(q, qd, qdd), 1e-9)
    with pytest.raises(ValueError, match="layout must be one of"):
        emu.configure(layout="diagonal")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_finite_inputs_are_named_on_the_fast_path(dtype, rng):
    """The library checks inputs while staging them; the error names the argument."""
    from grid_core.errors import InputError

    robot = load("hyq")
    emu = Emulated(robot, ["inverse_dynamics"], dtype)
    q, qd, qdd = (x.astype(dtype) for x in random_state(robot, rng, 8))
    f_ext = rng.normal(size=(8, robot.num_bodies, 6)).astype(dtype)
    for i, name in enumerate(("q", "qd", "qdd", "f_ext")):
        for bad in (np.nan, np.inf, -np.inf):
            args = [q.copy(), qd.copy(), qdd.copy(), f_ext.copy()]
            args[i].reshape(-1)[11] = bad
            with pytest.raises(InputError, match=f"argument '{name}' contains NaN or inf"):
                emu.inverse_dynamics(*args)
