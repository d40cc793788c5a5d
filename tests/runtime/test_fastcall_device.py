"""The C form of the CUDA-array lean path (``fastcall.device``), checked on the host: stand-ins
with exactly the attributes it reads of a PyTorch tensor and of a CuPy array, over numpy
memory, and the packed device entry of an Emulated library (which runs on the host).  The
real tensors go through it on the GPU machine (tests/gpu/test_runtime_gpu.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import grid_core
from conftest import load
from grid_core import Reference
from grid_core.runtime.adapters import _CUPY, _TORCH
from grid_core.testing import Emulated, assert_close, random_state

TORCH_F32 = object()  # a torch dtype is compared by identity


class Tensor:
    """What fastcall.device reads of a torch.Tensor."""

    def __init__(self, a, device=0, dtype=TORCH_F32, requires_grad=False):
        self.a, self.dtype, self.shape, self._device = a, dtype, a.shape, device
        self.requires_grad = requires_grad

    def get_device(self):
        return self._device

    def is_contiguous(self):
        return self.a.flags.c_contiguous

    def data_ptr(self):
        return self.a.ctypes.data


class CupyArray:
    """What fastcall.device reads of a cupy.ndarray."""

    def __init__(self, a, device=0):
        self.a, self.dtype, self.shape = a, a.dtype, a.shape
        self.flags = SimpleNamespace(c_contiguous=a.flags.c_contiguous)
        self.device = SimpleNamespace(id=device)
        self.data = SimpleNamespace(ptr=a.ctypes.data)


class Broken(Tensor):
    def is_contiguous(self):
        raise RuntimeError("no layout")


@pytest.fixture(scope="module")
def iiwa():
    robot = load("iiwa14")
    emu = Emulated(robot, ["inverse_dynamics"], np.float32)
    plan = emu._plan(grid_core.registry().algorithm("inverse_dynamics"))
    assert plan.fastcall is not None  # CI has a C compiler and Python's headers
    return robot, emu, plan


def _call(plan, protocol, array_type, dtype, ins, outs, n, device=0):
    return plan.fastcall.device(*plan.fast_device_head, protocol, array_type, dtype, device, 0, n, tuple(outs),
                                plan.out_shapes, tuple(ins), plan.state_shapes, plan.required)


@pytest.mark.parametrize("protocol", ["torch", "cupy"])
def test_device_fastcall_launches_with_the_arrays_addresses(iiwa, rng, protocol):
    robot, emu, plan = iiwa
    n = 37
    q, qd, qdd = (x.astype(np.float32) for x in random_state(robot, rng, n))
    f_ext = rng.normal(size=(n, robot.num_bodies, 6)).astype(np.float32)
    if protocol == "torch":
        wrap, args = Tensor, (_TORCH, Tensor, TORCH_F32)
    else:
        wrap, args = CupyArray, (_CUPY, CupyArray, np.dtype(np.float32))
    tau = np.full((n, robot.nv), np.nan, np.float32)
    assert _call(plan, *args, [wrap(x) for x in (q, qd, qdd)], [wrap(tau)], n) == 0
    assert_close(tau, Reference(robot).inverse_dynamics(q, qd, qdd), 1e-4)
    np.testing.assert_array_equal(tau, emu.inverse_dynamics(q, qd, qdd))  # the numpy path of the same library
    # an optional input given, and passed as None
    assert _call(plan, *args, [wrap(x) for x in (q, qd, qdd, f_ext)], [wrap(tau)], n) == 0
    assert_close(tau, Reference(robot).inverse_dynamics(q, qd, qdd, f_ext), 1e-4)
    assert _call(plan, *args, [wrap(x) for x in (q, qd, qdd)] + [None], [wrap(tau)], n) == 0
    assert_close(tau, Reference(robot).inverse_dynamics(q, qd, qdd), 1e-4)


def test_device_fastcall_declines_what_does_not_fit(iiwa, rng):
    """None (the caller then takes its general path, which names the problem), nothing written."""
    robot, emu, plan = iiwa
    n = 8
    q, qd, qdd = (x.astype(np.float32) for x in random_state(robot, rng, n))
    tau = np.full((n, robot.nv), np.nan, np.float32)
    T = (_TORCH, Tensor, TORCH_F32)
    good = [Tensor(x) for x in (q, qd, qdd)]
    wide = np.zeros((n, 2 * robot.nq), np.float32)
    cases = {
        "another type": ([q, Tensor(qd), Tensor(qdd)], [Tensor(tau)], T),
        "another dtype": ([Tensor(q, dtype=object()), *good[1:]], [Tensor(tau)], T),
        "another device": ([Tensor(q, device=1), *good[1:]], [Tensor(tau)], T),
        "a tensor that requires grad": ([*good[:2], Tensor(qdd, requires_grad=True)], [Tensor(tau)], T),
        "not contiguous": ([Tensor(wide[:, ::2]), *good[1:]], [Tensor(tau)], T),
        "another batch": ([Tensor(q[:7]), *good[1:]], [Tensor(tau)], T),
        "a required input missing": (good[:2], [Tensor(tau)], T),
        "an output of another shape": (good, [Tensor(np.empty((n, robot.nv + 1), np.float32))], T),
        "an attribute that raises": ([Broken(q), *good[1:]], [Tensor(tau)], T),
        "CuPy: another dtype": ([CupyArray(x) for x in (q, qd, qdd)], [CupyArray(tau)],
                                (_CUPY, CupyArray, np.dtype(np.float64))),
        "CuPy: not contiguous": ([CupyArray(wide[:, ::2]), *(CupyArray(x) for x in (qd, qdd))], [CupyArray(tau)],
                                 (_CUPY, CupyArray, np.dtype(np.float32))),
    }
    for what, (ins, outs, args) in cases.items():
        assert _call(plan, *args, ins, outs, n) is None, what
        assert np.isnan(tau).all(), what
    with pytest.raises(TypeError, match="malformed plan"):
        _call(plan, 7, Tensor, TORCH_F32, good, [Tensor(tau)], n)
