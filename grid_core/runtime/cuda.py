"""Finding the CUDA pieces: nvcc, the driver, the device's architecture, and the ptxas flags a
known defect of the toolchain's ptxas calls for.

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
import warnings
from pathlib import Path

from ..errors import RuntimeUnavailableError

ENV_NVCC = "GRID_NVCC"
ENV_ARCH = "GRID_CUDA_ARCH"
ENV_PTXAS = "GRID_PTXAS"
ENV_PTXAS_OPT = "GRID_PTXAS_OPT"

PTXAS_DEFECTS = {
    "13.0": "ptxas 13.0 (V13.0.88) miscompiles at -O2 and -O3: atlas's forward-dynamics gradient, float64, "
            "per-state kernel with f_ext, came out wrong in one 6 x 4 block on an H100, where the same PTX "
            "assembled at -O1, or by ptxas 13.5, is right",
}
"""ptxas releases (``major.minor``) known to miscompile generated code, and what was seen: the GPU
library is then assembled at ``-O1`` (:func:`ptxas_flags`)."""


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
def nvcc_home(nvcc: str) -> Path:
    """The directory of the nvcc binary that ``nvcc`` runs (``_HERE_`` of its dry run: through a
    wrapper script or a link, the toolkit's own ``bin``)."""
    try:
        out = subprocess.run([nvcc, "--dryrun", "-c", "grid_probe.cu"], capture_output=True, text=True).stderr
    except OSError as exc:
        raise RuntimeUnavailableError(f"{nvcc} --dryrun failed: {exc}") from None
    m = re.search(r"^#\$ _HERE_=(.+)$", out, re.M)
    return Path(m.group(1).strip()) if m else Path(nvcc).resolve().parent


def ptxas_beside(nvcc: str) -> str:
    """The ptxas ``nvcc`` runs: the one beside the nvcc binary (nvcc.profile puts that directory
    first on the PATH it gives its tools), else the first on ``PATH``."""
    cand = nvcc_home(nvcc) / "ptxas"
    return str(cand) if cand.is_file() else (shutil.which("ptxas") or "ptxas")


@functools.cache
def _version_text(tool: str) -> str:
    """``tool --version``'s output (nvcc and ptxas print ``release X.Y, VX.Y.Z``)."""
    try:
        return subprocess.run([tool, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeUnavailableError(f"{tool} --version failed: {exc}") from None


def ptxas_release(ptxas: str) -> str:
    """``major.minor`` of ``ptxas --version`` (``""`` when it does not say)."""
    m = re.search(r"release (\d+\.\d+)", _version_text(ptxas))
    return m.group(1) if m else ""


def toolchain(nvcc: str) -> tuple[str, list[str]]:
    """``(nvcc, flags)`` to build a GPU library with: ``nvcc``, or with ``GRID_PTXAS`` set an nvcc
    of the same toolkit that assembles with that ptxas (:func:`with_ptxas`), and the flags of
    :func:`ptxas_flags` for the ptxas it runs."""
    ptxas = os.environ.get(ENV_PTXAS)
    if ptxas:
        if not Path(ptxas).is_file():
            raise RuntimeUnavailableError(f"{ENV_PTXAS}={ptxas} is not a file")
        nvcc = with_ptxas(nvcc, ptxas)
    return nvcc, ptxas_flags(ptxas_beside(nvcc))


def ptxas_flags(ptxas: str) -> list[str]:
    """``-Xptxas -O<n>`` where ``GRID_PTXAS_OPT`` sets ``n``; else ``-Xptxas -O1`` for a ptxas
    release of :data:`PTXAS_DEFECTS` (said once, with the way out); else none (nvcc's -O3)."""
    forced = os.environ.get(ENV_PTXAS_OPT)
    if forced:
        if forced.strip() not in ("0", "1", "2", "3"):
            raise RuntimeUnavailableError(f"{ENV_PTXAS_OPT}={forced}: a ptxas optimisation level, 0 to 3")
        return ["-Xptxas", f"-O{forced.strip()}"]
    release = ptxas_release(ptxas)
    if release in PTXAS_DEFECTS:
        _warn_defect(release)
        return ["-Xptxas", "-O1"]
    return []


@functools.cache
def _warn_defect(release: str) -> None:
    warnings.warn(f"{PTXAS_DEFECTS[release]}; GPU libraries are assembled at -O1 with this ptxas (about 20% "
                  f"slower on that kernel). For -O3, point {ENV_PTXAS} at a newer ptxas (pip install "
                  f"'nvidia-cuda-nvcc>=13.5' has one) or install CUDA 13.5 or later", stacklevel=3)


def with_ptxas(nvcc: str, ptxas: str) -> str:
    """An nvcc that runs ``ptxas``: a shadow of nvcc's toolkit in the build cache (each entry a
    link to the original, nvcc and nvcc.profile copied so that nvcc finds its tools beside the copy,
    ptxas linked to ``ptxas``), made once per (nvcc, ptxas)."""
    import hashlib

    from .. import buildcache

    bindir, ptxas_path = nvcc_home(nvcc), Path(ptxas).resolve()
    nvcc_path, top = bindir / "nvcc", bindir.parent
    tag = hashlib.sha256(f"{nvcc_path}\0{ptxas_path}".encode()).hexdigest()[:16]
    root = buildcache.cache_dir() / "toolkits" / tag
    shadow = root / bindir.name / "nvcc"
    if shadow.is_file():
        return str(shadow)
    part = root.with_name(f"{tag}.{os.getpid()}.part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    for entry in top.iterdir():
        if entry.name != bindir.name:
            (part / entry.name).symlink_to(entry)
    (part / bindir.name).mkdir()
    for entry in bindir.iterdir():
        target = part / bindir.name / entry.name
        if entry.name in ("nvcc", "nvcc.profile"):
            shutil.copy2(entry, target)
        elif entry.name != "ptxas":
            target.symlink_to(entry)
    (part / bindir.name / "ptxas").symlink_to(ptxas_path)
    try:
        part.rename(root)
    except OSError:  # another process made it first
        shutil.rmtree(part, ignore_errors=True)
    return str(shadow)


def nvcc_version(nvcc: str) -> str:
    out = _version_text(nvcc)
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
