"""Shared fixtures of the code-generation tests: emulated builds, cached per process
(and on disk by content hash, so pytest-xdist workers share them)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import load

# The robots the generated inverse dynamics is proven on in CI: every bundled robot and
# 9 example-robot-data robots (fixed arms, mimic joints, continuous joints, floating bases).
CODEGEN_ROBOTS = [
    "iiwa14", "hyq", "atlas", "go2", "g1",
    "erd:panda", "erd:ur5_robot", "erd:double_pendulum_continuous", "erd:pr2", "erd:tiago_pro",
    "erd:solo12", "erd:anymal_c_simple/anymal", "erd:talos_reduced", "erd:simple_humanoid",
]


@functools.lru_cache(maxsize=None)
def backend(kind: str, name: str, spill: bool, dtype=np.float64):
    """The generated inverse dynamics of robot ``name`` behind the Reference's methods:
    ``emulated`` (host C++, CI) or ``gpu`` (RobotHandle, a CUDA device)."""
    opts = {"target_shared_mem_bytes": 0} if spill else {}
    if kind == "gpu":
        from grid_core.runtime import RobotHandle

        handle = RobotHandle(load(name), ["inverse_dynamics"], dtype, quiet=True, **opts)
    else:
        from grid_core.testing import Emulated

        handle = Emulated(load(name), ["inverse_dynamics"], dtype, **opts)
    handle.set_poison(True)  # outputs start as NaN: an element the kernel never writes fails
    return handle


def emulated(name: str, spill: bool, dtype=np.float64):
    return backend("emulated", name, spill, dtype)


BACKENDS = [pytest.param("emulated", id="emulated"), pytest.param("gpu", id="gpu", marks=pytest.mark.gpu)]
