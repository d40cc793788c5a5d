"""``CpuHandle``: the generated kernels compiled as optimised host C++, on the CPU's cores.

The same header and C ABI as the GPU library, built with ``GRID_HOST_CPU`` (host emulation
without the arena asserts, grid_core/emit/prelude.cuh) at ``-O3 -march=native``: the per-state
layout's straight-line code with the robot's constants folded, run on a group of states at
once, one in each lane of a SIMD register (``grid_lanes_of<T>``: 4 doubles or 8 floats), one
group per block, the launch's blocks split over worker threads in contiguous ranges.  Its numpy entry
(``grid_abi_X_f64_cpu``) checks the inputs finite and calls the ABI's device form in place:
in host emulation a device pointer is a host pointer, so nothing is staged.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import subprocess

import numpy as np

from .. import buildcache
from ..errors import InputError
from .backend import AbiBackend
from .handle import RobotHandle

FLAGS = ("-std=c++17", "-O3", "-march=native", "-fno-math-errno", "-fPIC", "-shared", "-pthread",
         "-DGRID_HOST_CPU", "-DNDEBUG")


def cpu_command() -> list[str]:
    return [*buildcache.host_compiler(), *FLAGS, *buildcache.private_symbols(), "-o", "{out}", "abi.cpp"]


@functools.cache
def compiler_identity(compiler: str) -> dict:
    """What the build depends on beyond its command: the compiler's version and the CPU
    ``-march=native`` resolves to here (a shared cache directory never hands one machine
    another's instructions)."""
    def ask(*args):
        try:
            proc = subprocess.run([compiler, *args], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return proc.stdout.strip()

    target = [line.split()[-1] for line in ask("-march=native", "-Q", "--help=target").splitlines()
              if line.strip().startswith("-march=")]
    return {"compiler": ask("--version").splitlines()[0] if ask("--version") else compiler,
            "march": target[0] if target else platform.processor() or platform.machine()}


def cpu_entries(robot, algorithms, dtypes=None, frames=None, algorithm_options=None) -> str:
    """The numpy entries of the CPU build: per algorithm and precision, the host form's
    signature with ``workers`` in place of ``transfer``; NaN and inf in a state input
    return ``GRID_ABI_NONFINITE_INPUT - k`` and a free-flyer quaternion of q not of unit norm
    ``GRID_ABI_BAD_QUATERNION``, as the host form does."""
    from ..abi import DTYPES, PACKED_TAIL, abi_functions, quaternion_check

    lines = ['extern "C" {',
             "// keep_zeros=True: this thread's calls leave their outputs' structural zeros as the arrays hold",
             "// them (CpuHandle sets it around such a call; grid_lane_image_store reads it; poison off then)",
             "void grid_cpu_keep_zeros(int on) { grid_emu::launch_keep_zeros = on != 0; }",
             ""]
    for fn in abi_functions(robot, algorithms, dtypes, frames, algorithm_options):
        T = DTYPES[fn.dtype]
        ports = [*fn.outputs, *fn.inputs, *fn.params]
        args = [f"{T} *{p.name}" for p in fn.outputs] + [f"const {T} *{p.name}" for p in (*fn.inputs, *fn.params)]
        tail = ("int num_timesteps", "int layout", "int tier", "int threads", "int blocks", "int workers")
        tail_names = ("num_timesteps", "layout", "tier", "threads", "blocks")
        lines += [
            f"// {fn.algorithm}: host pointers, synchronous, the launch's blocks over `workers` threads.",
            f"int {fn.symbol}_cpu({', '.join([*args, *tail])}) {{",
            "    const size_t n = size_t(num_timesteps > 0 ? num_timesteps : 0);",
        ]
        if fn.inputs:  # one pass over them all, on the workers too (grid_emu::first_nonfinite)
            lines += [
                f"    const {T} *const inputs[] = {{{', '.join(p.name for p in fn.inputs)}}};",
                f"    const size_t sizes[] = {{{', '.join(f'n * {math.prod(p.shape)}' for p in fn.inputs)}}};",
                f"    const int bad = grid_emu::first_nonfinite(inputs, sizes, {len(fn.inputs)}, workers);",
                "    if (bad >= 0) return GRID_ABI_NONFINITE_INPUT - bad;",
                *quaternion_check(fn, robot, T, staged=False),
            ]
        lines += [f"    if (poison_outputs && !grid_emu::launch_keep_zeros) "
                  f"std::memset({p.name}, 0xff, n * {math.prod(p.shape)} * sizeof({T}));" for p in fn.outputs]
        lines += [
            "    grid_emu::launch_workers = workers;",
            f"    return {fn.symbol}({', '.join([*(p.name for p in ports), *tail_names])}, nullptr);",
            "}",
        ]
        k = len(ports)
        unpack = [f"reinterpret_cast<{'' if i < len(fn.outputs) else 'const '}{T} *>(uintptr_t(a[{i}]))"
                  for i in range(k)]
        lines += [
            f"int {fn.symbol}_cpu_packed(const uint64_t *a) {{",
            f"    return {fn.symbol}_cpu({', '.join(unpack + [f'int(a[{k + j}])' for j in range(len(PACKED_TAIL))])});",
            "}",
            "",
        ]
    lines += ['}  // extern "C"', ""]
    return "\n".join(lines)


def cpu_sources(robot, algorithms=None, dtypes=None, **generate_options) -> dict[str, str]:
    """The translation unit of the CPU library: header, C ABI, the CPU entries (in each
    precision of ``dtypes``, ``"f32"`` / ``"f64"``; ``None``: both)."""
    from ..abi import abi_source
    from ..composer import generate

    header = generate(robot, algorithms, **generate_options)
    ns, frames = generate_options.get("namespace", "grid"), generate_options.get("frames")
    opts = generate_options.get("algorithm_options")
    return {"grid.cuh": header, "abi.cpp": abi_source(robot, algorithms, "grid.cuh", ns, dtypes, frames, opts) + "\n" +
            cpu_entries(robot, algorithms, dtypes, frames, opts)}


def build_cpu_library(robot, algorithms=None, *, dtypes=None, quiet: bool = False, **generate_options):
    """Compile header + C ABI as optimised host C++, the entries of ``dtypes`` only (``None``:
    both precisions; one precision compiles in about half the time); cached by content
    (sources, flags, compiler, CPU).  Says so while the compiler runs, and prints one status
    line after."""
    from ..composer import resolve_algorithms

    names = ",".join(a.name for a in resolve_algorithms(algorithms))
    precision = "" if dtypes is None else " " + ",".join(dtypes)
    cmd = cpu_command()
    path, _ = buildcache.build_reported(f"{names}[{robot.name}]{precision}", "the CPU", "the CPU build failed",
                                        f"cpu-{robot.name.replace('/', '_')}",
                                        cpu_sources(robot, algorithms, dtypes, **generate_options),
                                        cmd, "libgrid_cpu.so", quiet=quiet, extra=compiler_identity(cmd[0]))
    return path


def default_threads() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CpuHandle(AbiBackend):
    """The generated kernels on the CPU, with the same methods as ``Reference`` and
    ``RobotHandle``: numpy arrays, PyTorch tensors or JAX arrays in host memory in, the same kind
    out (one state ``(nq,)`` or a batch ``(N, nq)``; :mod:`grid_core.runtime.plan`).

    The header is compiled as optimised host C++ in the handle's precision (cached by content;
    ``float64`` by default, ``dtype=np.float32`` builds a library of its own) and every call
    runs the per-state layout, its batch split over ``threads`` worker threads (``None``: every
    core this process may use; ``1``: the calling thread only).
    ``generate_options`` go to :func:`grid_core.generate` (``frames=``: the frames of the
    end-effector algorithms; a call with other ``frames`` builds, once, the library for those).

    ``keep_zeros=True`` with ``out=`` (a call's keyword): the arrays of ``out=`` already hold the
    outputs' structural zeros (an earlier call's results, or zeros), and the call writes only the
    64-byte cache lines that hold a cell its kernels compute (their structural zeros as zeros), as
    Pinocchio writes the cells of its tensors.  It pays where an output is mostly structural zeros
    and written cell by cell: ``idsva_so`` in its loop form (atlas: 16% of its tensors' cache lines
    hold a computed cell); elsewhere the call is the same.  The caller vouches for the zeros: a
    cell that is not zero there, in a line without a computed cell, stays as it was.
    """

    host_form = "_cpu"

    def __init__(self, robot, algorithms=None, dtype=np.float64, threads: int | None = None, *, quiet: bool = False,
                 **generate_options):
        # one group of states per block: the workers take contiguous ranges of groups
        super().__init__(robot, algorithms, dtype, layout="per_state", threads=1)
        if threads is not None and (int(threads) != threads or threads < 1):
            raise ValueError(f"threads must be None (every core) or a positive integer, not {threads!r}")
        self.workers = default_threads() if threads is None else int(threads)
        self.generate_options, self.quiet = generate_options, quiet
        self._build()

    def _build(self) -> None:
        # its own precision only: the other's entries would double the compile for nothing
        self._path = build_cpu_library(self.robot, self.algorithms, dtypes=(self._suffix(),), quiet=self.quiet,
                                       **self.generate_options)
        self._handle = None

    def with_launch(self, **kw):
        """The same build with another launch configuration; the layout stays per-state (the
        CPU build compiles no block kernels)."""
        if kw.get("layout", "per_state") != "per_state":
            raise ValueError(f"CpuHandle runs the per-state layout only (its build has no block kernels), "
                             f"not layout={kw['layout']!r}")
        return super().with_launch(**kw)

    def _call(self, alg, args, kwargs, out=None):
        """The checked path, and ``keep_zeros=True``: the call writes only the cache lines holding cells
        its kernels compute, leaving the outputs' other lines as ``out=`` holds them (the class docstring)."""
        if not kwargs.pop("keep_zeros", False):
            return super()._call(alg, args, kwargs, out)
        if out is None:
            raise InputError(f"{alg.name}: keep_zeros=True needs out=, arrays that already hold the outputs' "
                             "structural zeros (an earlier call's results, or zeros)")
        lib = self._lib()
        lib.grid_cpu_keep_zeros(1)
        try:
            return super()._call(alg, args, kwargs, out)
        finally:
            lib.grid_cpu_keep_zeros(0)

    def _settings_of(self, name: str) -> tuple[int, int, int, int, int]:
        # the CPU entry takes the worker count where the host form takes ``transfer``
        return (*super()._settings_of(name)[:4], self.workers)

    # the library at self._path, loaded on first use, as the GPU handle's
    _lib = RobotHandle._lib
    _library_file = RobotHandle._library_file
