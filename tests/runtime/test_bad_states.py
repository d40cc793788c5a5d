"""Bad states get a clear error, not NaN: a zero or far-from-unit free-flyer quaternion is an
InputError naming the input on every backend (the Reference, the host-emulated code on its
general and lean paths, C and Python forms, the CPU build, and the GPU's numpy path); Robot.neutral() and
Robot.random_configuration(rng) give valid states; a mass matrix singular by construction (a
zero-mass chain, erd:romeo's fingers) is a GridError naming robot, algorithm and cause."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

import grid_core
from conftest import load
from grid_core import Reference
from grid_core.errors import GridError, InputError
from grid_core.runtime.adapters import DECLINED, numpy_lean
from grid_core.testing import Emulated, assert_close

ZERO = re.escape("inverse_dynamics: argument 'q' holds a free-flyer quaternion q[3:7] (x y z w) of norm 0, "
                 "not a unit quaternion: normalise it, or start from robot.neutral() or "
                 "robot.random_configuration(rng)")
SECOND = re.escape("argument 'q' holds a free-flyer quaternion q[1, 3:7] (x y z w) of norm 2 (1 of 4 states)")


def bad_batch(robot, rng):
    q = robot.random_configuration(rng, 4)
    q[1, 3:7] *= 2.0
    return q, rng.uniform(-1, 1, (4, robot.nv)), rng.uniform(-1, 1, (4, robot.nv))


@pytest.fixture(scope="module")
def go2():
    return load("go2")


@pytest.fixture(scope="module", params=[np.float64, np.float32], ids=["f64", "f32"])
def emulated(go2, request):
    return Emulated(go2, ["inverse_dynamics"], request.param)


def test_neutral_and_random_configuration_are_valid(go2, rng):
    q0 = go2.neutral()
    assert q0.shape == (19,) and q0[3:7].tolist() == [0, 0, 0, 1] and not np.any(np.delete(q0, 6))
    Q = go2.random_configuration(rng, 100)
    assert Q.shape == (100, 19)
    assert_close(np.linalg.norm(Q[:, 3:7], axis=1), np.ones(100), 1e-12)
    for b in go2.bodies[1:]:
        j = b.joint
        assert np.all((Q[:, b.q_index] >= j.lower) & (Q[:, b.q_index] <= j.upper)), j.name
    assert go2.random_configuration(rng).shape == (19,)
    ref = Reference(go2)
    assert np.all(np.isfinite(ref.inverse_dynamics(q0, np.zeros(18), np.zeros(18))))


def test_reference_refuses_a_zero_quaternion(go2):
    q = go2.neutral()
    q[3:7] = 0.0
    with pytest.raises(InputError, match=f"^{ZERO}$"):
        Reference(go2).inverse_dynamics(q, np.zeros(18), np.zeros(18))


def test_reference_refuses_a_far_from_unit_quaternion_in_a_batch(go2, rng):
    with pytest.raises(InputError, match=SECOND):
        Reference(go2).inverse_dynamics(*bad_batch(go2, rng))
    q, qd, qdd = bad_batch(go2, rng)
    q[1, 3:7] /= np.linalg.norm(q[1, 3:7]) / (1 + 5e-4)  # within the tolerance: rounding, drift
    assert np.all(np.isfinite(Reference(go2).inverse_dynamics(q, qd, qdd)))


def test_emulated_refuses_it_on_every_path(go2, emulated, rng):
    dt = emulated.dtype
    q = go2.neutral()
    q[3:7] = 0.0
    with pytest.raises(InputError, match=f"^{ZERO}$"):  # one state
        emulated.inverse_dynamics(q, np.zeros(18), np.zeros(18))
    args = [np.ascontiguousarray(x, dtype=dt) for x in bad_batch(go2, rng)]
    with pytest.raises(InputError, match=SECOND):  # a batch, positionally: the lean path first
        emulated.inverse_dynamics(*args)
    with pytest.raises(InputError, match=SECOND):  # keywords: the general path
        emulated.inverse_dynamics(q=args[0], qd=args[1], qdd=args[2])
    # the lean path itself, in C and in Python, hands the call on (the library found it staging)
    alg = grid_core.registry().algorithm("inverse_dynamics")
    for form in ("c", "python"):
        run = emulated.with_launch()
        plan = run._plan(alg)
        if form == "python":
            plan.fastcall = None
        assert numpy_lean(run, plan, tuple(args), None) is DECLINED, form
        args[0][1, 3:7] /= 2.0
        good = numpy_lean(run, plan, tuple(args), None)
        assert_close(good, Reference(go2).inverse_dynamics(*args), 1e-9 if dt == np.float64 else 1e-4)
        args[0][1, 3:7] *= 2.0


def test_cpu_handle_refuses_it_on_every_path(go2, rng):
    """The CPU build's entry checks the quaternions as the host form does (it returned NaN)."""
    cpu = grid_core.CpuHandle(go2, ["inverse_dynamics"], quiet=True)
    q = go2.neutral()
    q[3:7] = 0.0
    with pytest.raises(InputError, match=f"^{ZERO}$"):  # one state
        cpu.inverse_dynamics(q, np.zeros(18), np.zeros(18))
    args = bad_batch(go2, rng)
    with pytest.raises(InputError, match=SECOND):  # a batch, positionally: the lean path first
        cpu.inverse_dynamics(*args)
    with pytest.raises(InputError, match=SECOND):  # keywords: the general path
        cpu.inverse_dynamics(q=args[0], qd=args[1], qdd=args[2])
    args[0][1, 3:7] /= 2.0
    assert_close(cpu.inverse_dynamics(*args), Reference(go2).inverse_dynamics(*args), 1e-9)


@pytest.mark.gpu
def test_gpu_numpy_path_refuses_it(go2, rng):
    handle = grid_core.RobotHandle(go2, ["inverse_dynamics"], quiet=True)
    args = [np.ascontiguousarray(x, dtype=np.float32) for x in bad_batch(go2, rng)]
    with pytest.raises(InputError, match=SECOND):
        handle.inverse_dynamics(*args)
    with pytest.raises(InputError, match=SECOND):
        handle.inverse_dynamics(q=args[0], qd=args[1], qdd=args[2])


ROMEO = ("on robot 'romeo': the mass matrix is singular: joints LHand, RHand move bodies with no mass and no "
         "inertia (a zero-mass chain), so their rows of the mass matrix are zero: give those links inertia, "
         "or make the joints fixed")


@pytest.mark.parametrize("name", ["minv", "aba", "forward_dynamics", "forward_dynamics_gradient", "integrator"])
def test_singular_mass_matrix_is_a_grid_error_naming_robot_algorithm_and_cause(name):
    romeo = load("erd:romeo")
    assert romeo.massless_joints == ("LHand", "RHand")
    ref = Reference(romeo)
    q, z = romeo.neutral(), np.zeros(romeo.nv)
    args = {"minv": (q,), "integrator": (q, z, z, 0.01)}.get(name, (q, z, z))
    with pytest.raises(GridError) as info:
        getattr(ref, name)(*args)
    assert type(info.value) is GridError and str(info.value) == f"{name} {ROMEO}"
    assert np.all(np.isfinite(ref.inverse_dynamics(q, z, z)))  # what needs no inverse still runs


def test_singular_mass_matrix_on_the_generated_backends(monkeypatch):
    """Emulated and RobotHandle share the guard (AbiBackend): raised before anything is built."""
    romeo = load("erd:romeo")
    alg = grid_core.registry().algorithm("inverse_dynamics")
    monkeypatch.setattr(type(alg), "inverts_mass_matrix", True)  # as an emitted minv would
    emu = Emulated(romeo, ["inverse_dynamics"])
    with pytest.raises(GridError) as info:
        emu.inverse_dynamics(romeo.neutral(), np.zeros(romeo.nv), np.zeros(romeo.nv))
    assert str(info.value) == f"inverse_dynamics {ROMEO}"
    assert emu._handle is None  # no library was built or loaded


def test_singular_at_a_state_only_names_it(monkeypatch):
    """A LinAlgError with no zero-mass chain behind it is still a GridError, with numpy's words."""
    iiwa = load("iiwa14")
    monkeypatch.setattr(np.linalg, "inv", lambda a: (_ for _ in ()).throw(np.linalg.LinAlgError("Singular matrix")))
    monkeypatch.setattr(np.linalg, "solve", lambda a, b: (_ for _ in ()).throw(np.linalg.LinAlgError("Singular matrix")))
    with pytest.raises(GridError, match=r"^minv on robot 'iiwa14': the mass matrix is singular: it is not invertible "
                                        r"at this configuration \(numpy: Singular matrix\)$"):
        Reference(iiwa).minv(np.zeros(7))


def test_backends_list_their_algorithm_methods(go2):
    emu = Emulated(go2, ["inverse_dynamics"])
    assert "inverse_dynamics" in dir(emu) and "configure" in dir(emu)
    assert "inverse_dynamics" in dir(Reference(go2))


def test_emulated_build_reports_progress_and_one_status_line(tmp_path, monkeypatch, capfd):
    """As the GPU build does (buildcache.build_reported): progress while compiling, one line."""
    from grid_core import buildcache

    monkeypatch.setenv("GRID_CACHE_DIR", str(tmp_path))
    real = buildcache.build

    def slow(*args, **kwargs):
        time.sleep(5.5)  # past the first progress tick
        return real(*args, **kwargs)

    monkeypatch.setattr(buildcache, "build", slow)
    iiwa = load("iiwa14")
    t0 = time.perf_counter()
    Emulated(iiwa, ["inverse_dynamics"])._lib()
    elapsed = time.perf_counter() - t0
    lines = capfd.readouterr().err.splitlines()
    progress = [re.fullmatch(r"grid: compiling inverse_dynamics\[iiwa14\] for host emulation\.\.\. (\d+) s", x)
                for x in lines[:-1]]
    assert progress and all(progress), lines
    assert re.fullmatch(r"grid: inverse_dynamics\[iiwa14\] [0-9a-f]{7} compiled in \d+\.\d s", lines[-1]), lines
    # one line per 5 s tick while compiling (however long the build takes on a loaded machine:
    # never more lines than ticks, each later than the one before), then the one status line
    seconds = [int(m.group(1)) for m in progress]
    assert len(progress) <= elapsed // 5 and seconds == sorted(set(seconds)), (lines, elapsed)
    monkeypatch.setattr(buildcache, "build", real)  # from the cache, at full speed: no progress line
    Emulated(iiwa, ["inverse_dynamics"])._lib()
    assert re.fullmatch(r"grid: inverse_dynamics\[iiwa14\] [0-9a-f]{7} \(cached\)\n", capfd.readouterr().err)
    Emulated(iiwa, ["inverse_dynamics"], quiet=True)._lib()
    assert capfd.readouterr().err == ""
