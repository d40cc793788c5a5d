"""RobotHandle on the GPU: numpy, PyTorch, CuPy and JAX arrays; out=; streams; the cache
under concurrent builds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.testing import assert_close, random_state

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def iiwa():
    from grid_core import RobotHandle

    from tests.generated import emitted

    robot = load("iiwa14")
    return robot, RobotHandle(robot, emitted(), np.float32, quiet=True)  # the library the other tests share


def _state(robot, rng, n=64):
    q, qd, qdd = random_state(robot, rng, n)
    return q.astype(np.float32), qd.astype(np.float32), qdd.astype(np.float32)


def test_numpy_in_numpy_out(iiwa, rng):
    robot, h = iiwa
    q, qd, qdd = _state(robot, rng)
    out = h.inverse_dynamics(q, qd, qdd)
    assert isinstance(out, np.ndarray) and out.shape == (64, robot.nv)
    assert_close(out, Reference(robot).inverse_dynamics(q, qd, qdd), 1e-4)


@pytest.mark.parametrize("transfer", ["auto", "copy", "mapped", "mapped_staged"])
def test_numpy_transfer_modes(iiwa, rng, transfer):
    """Mapped memory and the copy engine, forced and chosen by size, outputs poisoned first."""
    from grid_core.abi import mapped_by_default

    robot, h = iiwa
    run = h.with_launch(transfer=transfer)
    run.set_poison(True)
    per_state = robot.nq + 2 * robot.nv
    try:
        for n in (1, 64, next(n for n in range(1, 1 << 20) if not mapped_by_default(n, per_state, 4 * robot.nv))):
            q, qd, qdd = _state(robot, rng, n)
            assert_close(run.inverse_dynamics(q, qd, qdd), Reference(robot).inverse_dynamics(q, qd, qdd), 1e-4,
                         f"{transfer} n={n}")
        q, qd, qdd = _state(robot, rng, 45)  # a partial last block
        f_ext = rng.normal(size=(45, robot.num_bodies, 6)).astype(np.float32)
        assert_close(run.inverse_dynamics(q, qd, qdd, f_ext), Reference(robot).inverse_dynamics(q, qd, qdd, f_ext),
                     1e-4, f"{transfer} f_ext")
        # a block size over the staged kernel's runs the plain kernel (stage_io is a hint)
        big = run.with_launch(layout="per_state", threads=128, transfer=transfer)
        assert_close(big.inverse_dynamics(q, qd, qdd), Reference(robot).inverse_dynamics(q, qd, qdd), 1e-4)
    finally:
        run.set_poison(False)


def test_torch_in_torch_out_without_host_copy(iiwa, rng):
    torch = pytest.importorskip("torch")
    robot, h = iiwa
    q, qd, qdd = _state(robot, rng)
    tq, tqd, tqdd = (torch.from_numpy(x).cuda() for x in (q, qd, qdd))
    res = h.inverse_dynamics(tq, tqd, tqdd)
    assert isinstance(res, torch.Tensor) and res.is_cuda and res.shape == (64, robot.nv)
    out = torch.full((64, robot.nv), float("nan"), device="cuda")
    ptr = out.data_ptr()
    got = h.inverse_dynamics(tq, tqd, tqdd, out=out)
    assert got is out and out.data_ptr() == ptr  # written in place on the device
    torch.cuda.synchronize()
    assert_close(out.cpu().numpy(), Reference(robot).inverse_dynamics(q, qd, qdd), 1e-4)
    # on a side stream: the launch follows PyTorch's current stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        res2 = h.inverse_dynamics(tq, tqd, tqdd)
    side.synchronize()
    assert_close(res2.cpu().numpy(), out.cpu().numpy(), 1e-6)


def test_cupy_in_cupy_out(iiwa, rng):
    cupy = pytest.importorskip("cupy")
    robot, h = iiwa
    q, qd, qdd = _state(robot, rng)
    cq, cqd, cqdd = (cupy.asarray(x) for x in (q, qd, qdd))
    out = cupy.full((64, robot.nv), cupy.nan, dtype=cupy.float32)
    ptr = out.data.ptr
    got = h.inverse_dynamics(cq, cqd, cqdd, out=out)
    assert got is out and out.data.ptr == ptr
    cupy.cuda.get_current_stream().synchronize()
    assert_close(cupy.asnumpy(out), Reference(robot).inverse_dynamics(q, qd, qdd), 1e-4)


@pytest.mark.parametrize("path", ["c", "python"])
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_device_arrays_take_the_lean_path(iiwa, rng, framework, path, general_calls):
    """Contiguous arrays of the handle's dtype skip the general path, in the C form of the
    lean path and in its Python form; a strided view takes it, with the same answer."""
    import grid_core

    mod = pytest.importorskip(framework)
    robot, h = iiwa
    run = h.with_launch()
    plan = run._plan(grid_core.registry().algorithm("inverse_dynamics"))
    if path == "python":
        plan.fastcall = None
    else:
        assert plan.fastcall is not None
    calls = general_calls(run)
    q, qd, qdd = _state(robot, rng)
    to_device = (lambda x: mod.from_numpy(x).cuda()) if framework == "torch" else mod.asarray
    to_host = (lambda x: x.cpu().numpy()) if framework == "torch" else mod.asnumpy
    args = [to_device(x) for x in (q, qd, qdd)]
    expected = Reference(robot).inverse_dynamics(q, qd, qdd)
    assert_close(to_host(run.inverse_dynamics(*args)), expected, 1e-4)
    assert calls == []
    wide = np.zeros((q.shape[0], 2 * robot.nq), dtype=np.float32)
    wide[:, ::2] = q
    strided = to_device(wide)[:, ::2]
    assert_close(to_host(run.inverse_dynamics(strided, args[1], args[2])), expected, 1e-4)
    assert calls == [1]


def test_jax_in_jax_out(iiwa, rng):
    """JAX arrays on the GPU through the XLA FFI call: eager, in a jitted program, vmapped;
    the result stays on the GPU."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    robot, h = iiwa
    q, qd, qdd = _state(robot, rng)
    expected = Reference(robot).inverse_dynamics(q, qd, qdd)
    jq, jqd, jqdd = (jnp.asarray(x) for x in (q, qd, qdd))
    res = h.inverse_dynamics(jq, jqd, jqdd)
    assert isinstance(res, jax.Array) and next(iter(res.devices())).platform == "gpu"
    assert_close(np.asarray(res), expected, 1e-4, "eager")
    np.testing.assert_array_equal(np.asarray(res), h.inverse_dynamics(q, qd, qdd))
    program = jax.jit(lambda a, b, c: jnp.sum(h.inverse_dynamics(a, b, c) ** 2, axis=1))
    assert_close(np.asarray(program(jq, jqd, jqdd)), np.sum(expected ** 2, axis=1), 1e-4, "jit")
    per_state = jax.vmap(lambda a, b, c: h.inverse_dynamics(a, b, c))(jq, jqd, jqdd)
    assert_close(np.asarray(per_state), expected, 1e-4, "vmap")


BUILD = textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("ignore")
    import numpy as np, grid_core
    h = grid_core.RobotHandle(grid_core.load_robot("hyq"), ["inverse_dynamics"], np.float32,
                              namespace="concurrent_gpu", quiet=True)
    print(h._path)
    """
)


def test_two_processes_building_the_same_handle(tmp_path):
    env = {**os.environ, "GRID_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", BUILD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert len({o[0].strip() for o in outs}) == 1
    assert [e for e in os.listdir(tmp_path) if e != "locks"] == [os.path.basename(outs[0][0].strip())]


def test_two_libraries_in_one_process_keep_their_own_launch_state(rng):
    """Two builds of one robot in one process (here Minv's ring with each flush form, atlas, whose
    float64 ring takes 59 KB a warp: over the 48 KB a kernel gets without its opt-in) each opt their
    own kernel in and run it, called in turn.  g++ made a launcher's function-local statics (the
    once-only opt-in, the block size) one symbol for the whole process, so the second library took
    the first's opt-in as done and its launch failed with "invalid argument"
    (grid_core.buildcache.private_symbols)."""
    from grid_core import RobotHandle

    robot = load("atlas")
    q = random_state(robot, rng, 101)[0]
    expected = Reference(robot).minv(q)
    handles = [RobotHandle(robot, ["minv"], np.float64, quiet=True, algorithm_options={
        "minv": {"per_state_ring_min_n": 1, "per_state_ring_flush": flush}}).with_launch(layout="per_state")
        for flush in ("whole", "groups")]
    assert handles[0]._library_file() != handles[1]._library_file()
    for _ in range(2):
        for h in handles:
            h.set_poison(True)
            assert_close(h.minv(q), expected, 1e-9, f"atlas minv, {h.generate_options}")
