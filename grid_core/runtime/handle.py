"""``RobotHandle``: the generated kernels on the GPU behind the Reference's methods."""

from __future__ import annotations

import os

import numpy as np

from .. import buildcache
from .backend import AbiBackend, load_abi
from .cuda import ENV_PTXAS, cuda_arch, find_nvcc, nvcc_version, ptxas_beside, ptxas_release, require_device, toolchain


ENV_SPLIT = "GRID_NVCC_SPLIT_COMPILE"
"""nvcc's ``-split-compile`` threads for each unit of a library (0: one per CPU): its kernels
optimised and assembled in parallel.  Part of the commands, so of the cache key."""


def nvcc_command(nvcc: str, arch: str, flags=(), unit: str = "abi.cu") -> list[str]:
    """One unit of a library compiled to machine code for this GPU only (the library is built
    where it runs): ``unit`` into ``<unit>.o``; ``flags``: the toolchain's
    (:func:`~grid_core.runtime.cuda.toolchain`)."""
    num = arch.split("_", 1)[-1]
    split = os.environ.get(ENV_SPLIT)
    return [nvcc, "-std=c++17", "-O3", f"-gencode=arch=compute_{num},code=sm_{num}", *flags,
            *(["-split-compile", split] if split else []), "-Xcompiler", "-fPIC",
            *buildcache.private_symbols(nvcc=True), "-c", unit, "-o", f"{unit}.o"]


def nvcc_link_command(nvcc: str, units) -> list[str]:
    """The units' objects linked into the library (``{out}``), stripped."""
    return [nvcc, "-shared", *buildcache.private_symbols(nvcc=True), "-Xlinker", "--strip-all", "-o", "{out}",
            *(f"{u}.o" for u in units)]


def build_gpu_library(robot, algorithms=None, *, arch: str | None = None, quiet: bool = False, **generate_options):
    """Compile header + C ABI for ``arch`` (default: this machine's GPU); cached by content.  Each
    algorithm's entries in each precision are a unit of their own (:func:`grid_core.abi.abi_units`),
    compiled side by side (``GRID_BUILD_JOBS``), then linked."""
    from ..abi import abi_units
    from ..composer import generate, resolve_algorithms

    nvcc, flags = toolchain(find_nvcc())
    arch = arch or cuda_arch()
    header = generate(robot, algorithms, **generate_options)
    ns = generate_options.get("namespace", "grid")
    units = abi_units(robot, algorithms, "grid.cuh", ns, frames=generate_options.get("frames"),
                      algorithm_options=generate_options.get("algorithm_options"))
    sources = {"grid.cuh": header, **units}
    names = ",".join(a.name for a in resolve_algorithms(algorithms))
    label = f"gpu-{robot.name.replace('/', '_')}"
    extra = {"nvcc": nvcc_version(nvcc), "arch": arch}
    if os.environ.get(ENV_PTXAS):  # another toolkit's ptxas behind this nvcc: its release keys the library too
        extra["ptxas"] = ptxas_release(ptxas_beside(nvcc))
    # keyed by nvcc's version, not its path: the same compiler elsewhere (another machine,
    # another install prefix) finds the same library
    path, _ = buildcache.build_reported(f"{names}[{robot.name}]", arch, f"nvcc failed for {arch}", label, sources,
                                        nvcc_link_command(nvcc, units), "libgrid.so", quiet=quiet, extra=extra,
                                        units=[nvcc_command(nvcc, arch, flags, u) for u in units],
                                        key_command=nvcc_link_command("nvcc", units),
                                        key_units=[nvcc_command("nvcc", arch, flags, u) for u in units])
    return path


class RobotHandle(AbiBackend):
    """The generated kernels on the GPU, with the same methods as ``Reference``.

    numpy in -> numpy out, staged through reused pinned buffers: small batches through
    mapped memory the kernel reads in place, larger ones through the copy engine
    (``transfer``: ``auto``, ``mapped``, ``copy``); PyTorch tensors in host memory likewise,
    tensors out.  CUDA arrays in -> the same kind out, on
    the framework's current stream; JAX arrays through an XLA FFI call, eagerly or inside
    ``jax.jit`` / ``jax.vmap`` (:mod:`grid_core.runtime.jax_ffi`).  ``layout`` (``auto``, ``block``, ``per_state``),
    ``tier``, ``threads`` and ``blocks`` select the launch; :meth:`configure` sets them per
    algorithm.  ``generate_options`` go to :func:`grid_core.generate` (``frames=``: the frames of
    the end-effector algorithms; a call with other ``frames`` builds, once, the library for those).
    """

    accepts_device_arrays = True

    def __init__(self, robot, algorithms=None, dtype=np.float32, *, layout="auto", tier=0, threads=0, blocks=0,
                 transfer="auto", quiet: bool = False, **generate_options):
        super().__init__(robot, algorithms, dtype, layout=layout, tier=tier, threads=threads, blocks=blocks,
                         transfer=transfer)
        require_device()
        self.generate_options, self.quiet = generate_options, quiet
        self._build()

    def _build(self) -> None:
        self._path = build_gpu_library(self.robot, self.algorithms, quiet=self.quiet, **self.generate_options)
        self._handle = None

    def _lib(self):
        if self._handle is None:
            self._handle = load_abi(self._path)
        return self._handle

    def _library_file(self):
        return self._path
