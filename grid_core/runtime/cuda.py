"""Finding the CUDA pieces: nvcc, the driver, the device's architecture.

Each lookup that fails raises :class:`RuntimeUnavailableError` naming what is
missing and how to get it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import RuntimeUnavailableError

ENV_NVCC = "GRID_NVCC"
ENV_ARCH = "GRID_CUDA_ARCH"


def find_nvcc() -> str:
    """nvcc from ``GRID_NVCC``, ``CUDA_HOME``/``CUDA_PATH``, ``PATH``, or the PyPI
    ``nvidia-cuda-nvcc`` wheel (``pip install 'grid-rbd[cuda]'``)."""
    explicit = os.environ.get(ENV_NVCC)
    if explicit:
        if not Path(explicit).is_file():
            raise RuntimeUnavailableError(f"{ENV_NVCC}={explicit} is not a file")
        return explicit
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    for base in map(Path, sys.path):
        cand = base / "nvidia" / "cuda_nvcc" / "bin" / "nvcc"
        if cand.is_file():
            return str(cand)
    raise RuntimeUnavailableError(
        "no nvcc found: install the CUDA toolkit (or pip install 'grid-rbd[cuda]'), "
        f"or point {ENV_NVCC} at nvcc"
    )


@functools.cache
def nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeUnavailableError(f"{nvcc} --version failed: {exc}") from None
    m = re.search(r"release (\S+), V(\S+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1]


@functools.cache
def _driver():
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if lib.cuInit(0) != 0:
            return None
        return lib
    return None


def device_count() -> int:
    """CUDA devices visible through the driver (0 without a driver or a device)."""
    lib = _driver()
    if lib is None:
        return 0
    n = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return 0
    return n.value


def require_device() -> None:
    if _driver() is None:
        raise RuntimeUnavailableError(
            "no CUDA driver (libcuda.so.1) on this machine: RobotHandle needs an NVIDIA GPU and its "
            "driver; for CPU-only work use grid_core.Reference or grid_core.testing.Emulated"
        )
    if device_count() == 0:
        raise RuntimeUnavailableError("the CUDA driver sees no device (check CUDA_VISIBLE_DEVICES)")


def cuda_arch() -> str:
    """``sm_XY`` from ``GRID_CUDA_ARCH``, else the first device's compute capability."""
    forced = os.environ.get(ENV_ARCH)
    if forced:
        forced = forced.strip()
        return forced if forced.startswith(("sm_", "compute_")) else f"sm_{forced.replace('.', '')}"
    require_device()
    lib = _driver()
    dev = ctypes.c_int(0)
    lib.cuDeviceGet(ctypes.byref(dev), 0)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # COMPUTE_CAPABILITY_MAJOR
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # COMPUTE_CAPABILITY_MINOR
    return f"sm_{major.value}{minor.value}"
