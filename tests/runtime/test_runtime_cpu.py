"""The runtime on a machine without a GPU (CI): clear errors, the nvcc build path, the
cache under concurrency, and the host path of the C ABI (through host emulation)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

from pathlib import Path

import numpy as np
import pytest

import grid_core

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
    # the same nvcc under another path (another install prefix, another machine): the same entry
    from grid_core.runtime.cuda import find_nvcc

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "nvcc").symlink_to(Path(find_nvcc()).resolve())
    monkeypatch.setenv("GRID_NVCC", str(tmp_path / "elsewhere" / "nvcc"))
    assert build_gpu_library(robot, ["inverse_dynamics"], arch="sm_90") == path
    assert "(cached)" in capsys.readouterr().err
    monkeypatch.delenv("GRID_NVCC")
    lib = ctypes.CDLL(str(path))  # loads without a driver: cudart is linked statically
    for sym in ("grid_abi_inverse_dynamics_f32", "grid_abi_inverse_dynamics_f64_host", "grid_abi_info"):
        assert hasattr(lib, sym)
    info = (ctypes.c_int * 4)()
    assert lib.grid_abi_info(info, 4) == 4 and list(info)[:3] == [7, 7, 7]
    assert lib.grid_abi_platform() == 0  # a CUDA build (host emulation says 1)

    # the JAX handler refuses it on XLA:CPU, naming the fix, instead of handing it host memory
    import jax
    import jax.numpy as jnp

    from grid_core.runtime import jax_ffi

    jax_ffi.register()
    q = jnp.ones((2, 7), jnp.float32)
    call = jax.ffi.ffi_call(jax_ffi.TARGET, jax.ShapeDtypeStruct((2, 7), jnp.float32))
    with pytest.raises(Exception, match="this library runs on the GPU; a JAX computation on the CPU"):
        call(q, q, q, library=str(path), symbol="grid_abi_inverse_dynamics_f32_packed", itemsize=4,
             inputs=np.array([0, 1, 2, -1], np.int64), input_sizes=np.array([7, 7, 7, 42], np.int64),
             output_sizes=np.array([7], np.int64), params=np.zeros(3), param_sizes=np.array([3], np.int64),
             launch=np.zeros(4, np.int64)).block_until_ready()


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
    # one artefact, no temporary left (beside the cache's directory of per-artefact lock files)
    entries = sorted(e for e in os.listdir(tmp_path) if e != "locks")
    assert entries == [os.path.basename(paths.pop())], entries


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


@pytest.mark.parametrize("transfer", ["auto", "copy", "mapped", "mapped_staged"])
def test_host_transfer_modes_equal_the_reference(transfer, rng):
    """Both ways the host form moves data (mapped memory, the copy engine) and the choice by
    size: a batch either side of grid_core.abi.mapped_by_default, outputs poisoned first."""
    from grid_core.abi import mapped_by_default

    robot = load("hyq")
    emu = Emulated(robot, ["inverse_dynamics"], np.float64, transfer=transfer)
    emu.set_poison(True)
    per_state, out_bytes = robot.nq + 2 * robot.nv, robot.nv * 8
    big = next(n for n in range(1, 1 << 20) if not mapped_by_default(n, per_state, out_bytes))  # auto: copy engine
    assert mapped_by_default(big - 1, per_state, out_bytes) and 100 < big < 10000
    ref = Reference(robot)
    for n in (3, big):
        q, qd, qdd = random_state(robot, rng, n)
        assert_close(emu.inverse_dynamics(q, qd, qdd), ref.inverse_dynamics(q, qd, qdd), 1e-9, f"{transfer} n={n}")
    f_ext = rng.normal(size=(3, robot.num_bodies, 6))
    q, qd, qdd = random_state(robot, rng, 3)
    assert_close(emu.inverse_dynamics(q, qd, qdd, f_ext), ref.inverse_dynamics(q, qd, qdd, f_ext), 1e-9)
    with pytest.raises(ValueError, match="transfer must be one of"):
        emu.configure(transfer="dma")


def test_the_c_call_path_builds_here():
    """Where the interpreter's headers and a C compiler exist (CI, the GPU machine), the
    numpy path runs in C; elsewhere it falls back to Python (tested below)."""
    import shutil
    import sysconfig

    from grid_core.runtime import fastcall

    if (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file() and shutil.which(os.environ.get("CC", "cc")):
        mod = fastcall.module()
        assert mod is not None and hasattr(mod, "host")


@pytest.mark.parametrize("path", ["c", "python"])
def test_lean_numpy_path_is_taken_and_right(path, rng, monkeypatch, general_calls):
    """Positional C-contiguous arrays of the handle's dtype never reach the general path;
    read-only inputs, out= and one state without its batch axis included.  Anything else
    does, with the same answer."""
    from grid_core.errors import InputError

    robot = load("iiwa14")
    emu = Emulated(robot, ["inverse_dynamics"], np.float64)
    plan = emu._plan(grid_core.registry().algorithm("inverse_dynamics"))
    if path == "python":
        monkeypatch.setattr(plan, "fastcall", None)
    else:
        assert plan.fastcall is not None
    q, qd, qdd = random_state(robot, rng, 10)
    expected = Reference(robot).inverse_dynamics(q, qd, qdd)
    calls = general_calls(emu)
    assert_close(emu.inverse_dynamics(q, qd, qdd), expected, 1e-9)
    frozen = [x.copy() for x in (q, qd, qdd)]
    for x in frozen:
        x.flags.writeable = False
    assert_close(emu.inverse_dynamics(*frozen), expected, 1e-9)
    out = np.full((10, robot.nv), np.nan)
    assert emu.inverse_dynamics(q, qd, qdd, out=out) is out
    assert_close(out, expected, 1e-9)
    # one state (no batch axis): the lean path too, on a batch of one
    one = emu.inverse_dynamics(q[3], qd[3], qdd[3])
    assert one.shape == (robot.nv,)
    assert_close(one, expected[3], 1e-9)
    out_one = np.full(robot.nv, np.nan)
    assert emu.inverse_dynamics(q[3], qd[3], qdd[3], out=out_one) is out_one
    assert_close(out_one, expected[3], 1e-9)
    assert calls == []
    # one state that the batch of one refuses: the general path, which names the problem
    bad = q[3].copy()
    bad[2] = np.nan
    with pytest.raises(InputError, match="'q'|q"):
        emu.inverse_dynamics(bad, qd[3], qdd[3], out=out_one)
    assert_close(out_one, expected[3], 1e-9)  # left as it was
    strided = np.repeat(q[3], 2)[::2]  # one state, not contiguous
    assert not strided.flags.c_contiguous
    assert_close(emu.inverse_dynamics(strided, qd[3], qdd[3]), expected[3], 1e-9)
    assert len(calls) == 2
    calls.clear()
    # a strided view, a float32 array, a keyword argument: the general path, same answer
    wide = np.zeros((10, 2 * robot.nq))
    wide[:, ::2] = q
    assert_close(emu.inverse_dynamics(wide[:, ::2], qd, qdd), expected, 1e-9)
    assert_close(emu.inverse_dynamics(q, qd, qdd=qdd), expected, 1e-9)
    assert_close(emu.inverse_dynamics(q.astype(np.float32), qd, qdd), expected, 1e-6)
    assert len(calls) == 3
    # what does not fit reaches the general path, which names the problem
    with pytest.raises(InputError, match="batch"):
        emu.inverse_dynamics(q, qd[:9], qdd)
    with pytest.raises(InputError, match="out= for 'tau'"):
        emu.inverse_dynamics(q, qd, qdd, out=np.empty((10, robot.nv + 1)))
    frozen_out = np.empty((10, robot.nv))
    frozen_out.flags.writeable = False
    with pytest.raises(InputError, match="out= for 'tau' must be a writable"):
        emu.inverse_dynamics(q, qd, qdd, out=frozen_out)


def test_threads_share_a_handle(rng):
    """Per-thread argument words: concurrent calls on one handle each get their own answer."""
    from concurrent.futures import ThreadPoolExecutor

    robot = load("iiwa14")
    emu = Emulated(robot, ["inverse_dynamics"], np.float64)
    ref = Reference(robot)
    cases = [random_state(robot, np.random.default_rng(s), 5 + s) for s in range(8)]

    def run(case):
        return [emu.inverse_dynamics(*case) for _ in range(20)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, cases))
    for case, outs in zip(cases, results):
        for out in outs:
            assert_close(out, ref.inverse_dynamics(*case), 1e-9)


LARGE_BATCHES = textwrap.dedent("""
    import os
    import threading
    import numpy as np
    import grid_core
    from grid_core import Reference
    from grid_core.errors import InputError
    from grid_core.testing import Emulated, assert_close, random_state

    robot = grid_core.load_robot("hyq")
    ref = Reference(robot)
    rng = np.random.default_rng(7)
    n = 1500  # 1500 x 36 doubles: 432 KB of inputs, 27 chunks of the helpers' copy
    q, qd, qdd = random_state(robot, rng, n)
    f_ext = rng.normal(size=(n, robot.num_bodies, 6))
    for transfer in ("copy", "mapped"):
        emu = Emulated(robot, ["inverse_dynamics"], np.float64, transfer=transfer)
        emu.set_poison(True)
        assert_close(emu.inverse_dynamics(q, qd, qdd), ref.inverse_dynamics(q, qd, qdd), 1e-9, transfer)
        assert_close(emu.inverse_dynamics(q, qd, qdd, f_ext), ref.inverse_dynamics(q, qd, qdd, f_ext), 1e-9)
        # a NaN in the last chunk of one input, and one input before it bad too: the first is named
        for bad, name in (((2, -1),), "qdd"), (((1, -1), (3, 0)), "qd"), (((3, -5), (0, n * robot.nq // 2)), "q"):
            args = [x.copy() for x in (q, qd, qdd, f_ext)]
            for i, at in bad:
                args[i].reshape(-1)[at] = np.inf
            try:
                emu.inverse_dynamics(*args)
            except InputError as exc:
                assert f"argument '{name}' contains NaN or inf" in str(exc), exc
            else:
                raise AssertionError(f"no error for {bad}")
    # calls from several threads at once: one runs the job on the helpers, the others copy alone
    emu = Emulated(robot, ["inverse_dynamics"], np.float64)
    cases = [random_state(robot, np.random.default_rng(s), n - 100 * s) for s in range(4)]
    results = [None] * 4

    def run(i):
        results[i] = [emu.inverse_dynamics(*cases[i]) for _ in range(3)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for case, outs in zip(cases, results):
        for out in outs:
            assert_close(out, ref.inverse_dynamics(*case), 1e-9)
    # a forked child (the helpers are not there) copies alone
    pid = os.fork()
    if pid == 0:
        try:
            assert_close(emu.inverse_dynamics(q, qd, qdd), ref.inverse_dynamics(q, qd, qdd), 1e-9, "forked")
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child failed"
    print("ok")
""")


@pytest.mark.parametrize("helpers", ["0", "3"])
def test_large_batches_are_staged_by_helper_threads(helpers):
    """Inputs of 64 KiB or more are copied (and checked finite) in chunks by helper threads
    with the caller; GRID_HOST_THREADS sets their number.  Results, the input named for a NaN
    in a late chunk, concurrent calls and a forked child, with none and with three helpers."""
    env = {**os.environ, "GRID_HOST_THREADS": helpers}
    res = subprocess.run([sys.executable, "-c", LARGE_BATCHES], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


def test_emulation_refuses_cuda_arrays(rng):
    """Host emulation cannot read device memory: a CUDA array is refused with a clear error."""
    from grid_core.errors import InputError

    class FakeCudaArray:
        __cuda_array_interface__ = {"shape": (4, 7), "typestr": "<f8", "data": (1 << 40, False), "version": 3}

    robot = load("iiwa14")
    emu = Emulated(robot, ["inverse_dynamics"], np.float64)
    q, qd, qdd = random_state(robot, rng, 4)
    with pytest.raises(InputError, match="runs on the host; pass numpy arrays"):
        emu.inverse_dynamics(FakeCudaArray(), qd, qdd)


def test_the_c_call_path_limits_match_its_source():
    """The Python side routes plans the C form cannot hold to the Python form: the limits
    it checks are the ones fastcall.c was written with."""
    import re

    from grid_core.runtime import fastcall

    source = (Path(fastcall.__file__).with_name("fastcall.c")).read_text()
    defines = dict(re.findall(r"#define (MAX_WORDS|MAX_ARRAYS) (\d+)", source))
    assert int(defines["MAX_WORDS"]) == fastcall.MAX_WORDS and int(defines["MAX_ARRAYS"]) == fastcall.MAX_ARRAYS
    # and the codes of a refused input, as the library returns them (its values check says the same)
    from grid_core import abi

    support = (Path(fastcall.__file__).with_name("abi_support.h")).read_text()
    for text, prefix in ((support, "GRID_ABI_"), (source, "")):
        codes = dict(re.findall(rf"#define {prefix}(NONFINITE_INPUT|BAD_QUATERNION) \((-\d+)\)", text))
        assert {k: int(v) for k, v in codes.items()} == {"NONFINITE_INPUT": abi.NONFINITE_INPUT,
                                                           "BAD_QUATERNION": abi.BAD_QUATERNION}, prefix


def test_the_c_abi_refuses_more_state_inputs_than_its_nonfinite_report_has_bits():
    from grid_core.abi import AbiFunction, _function_source
    from grid_core.algorithm import Port

    from grid_core.emit.signature import Param, Signature, TemplateParam

    ports = tuple(Port(f"x{i}", (3,)) for i in range(33))

    def wide(inputs):
        launch = Signature("wide_launch", [Param("T *", "d_y"), *[Param("const T *", f"d_{p.name}") for p in inputs],
                                           *[Param("int", x) for x in ("num_timesteps", "cfg", "d_workspace",
                                                                       "workspace_bytes", "stream")]],
                           template=[TemplateParam("typename", "T")])
        return AbiFunction("wide", "grid_abi_wide_f32", "f32", (Port("y", (3,)),), inputs, (), launch,
                           stage_io="false", mapped="false")

    with pytest.raises(ValueError, match="at most 32 state inputs, not 33"):
        _function_source(wide(ports), "grid")
    assert "grid_abi_wide_f32_host" in "\n".join(_function_source(wide(ports[:32]), "grid"))
