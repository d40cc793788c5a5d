"""The generated C ABI over a header: what ctypes (the runtime, the emulated
backend) calls.  It is derived from each algorithm's ports alone (the launch
convention of :mod:`grid_core.emit.emitter`), so a new algorithm needs no edit here.

For every emitted algorithm ``X`` and precision ``f32`` / ``f64``::

    int grid_abi_X_f64(double *out..., const double *in..., const double *param...,
                       int num_timesteps, int layout, int tier, int threads, int blocks,
                       void *stream);

returning a ``cudaError_t``; a host-pointer form ``grid_abi_X_f64_host(..., int transfer)``
(synchronous, staged through reused pinned buffers); packed forms of both
(``grid_abi_X_f64_packed`` / ``_host_packed``) taking one array of 64-bit words, which is what
the Python runtime calls (one ctypes argument instead of a dozen converted ones); plus
``grid_abi_info`` (sizes), ``grid_abi_platform``, ``grid_abi_synchronize`` and
``grid_abi_error_string``.  The
workspace a launch needs is grown on demand (one buffer per precision, guarded by a mutex).

The host form moves small batches through *mapped* pinned memory (the kernel reads and
writes host memory over the bus: no copy-engine transfer to set up, which is most of a
small call's cost) and larger ones through the copy engine (one transfer each way):
``transfer`` 0 picks by size (:func:`mapped_by_default`), 1 forces the copy engine,
2 mapped memory, 3 mapped memory with the launch hint ``stage_io`` (kernels that support it
coalesce their accesses to host memory through shared memory).  Picked by size, mapped memory
takes the hint for the algorithms whose outputs are large (``Layers.stages_mapped``: CRBA, Minv)
from ``MAPPED_STAGE_MIN_N`` states on.
"""

from __future__ import annotations

import importlib.resources
import math

import attrs

from .algorithm import Port
from .composer import resolve_algorithms
from .emit.layers import mapped_by_size  # the rule the gridData wrappers follow too
from .emit.signature import Signature
from .model import Robot
from .model.robot import QUATERNION_TOLERANCE
from .reference import is_configuration

DTYPES = {"f32": "float", "f64": "double"}
TRANSFERS = {"auto": 0, "copy": 1, "mapped": 2, "mapped_staged": 3}


def mapped_by_default(num_timesteps: int, values_per_state: int, output_bytes_per_state: int = 0,
                      block: bool = False, staged: bool = False) -> bool:
    """Whether ``transfer="auto"`` moves this batch through mapped memory (as the C code decides:
    :func:`grid_core.emit.layers.mapped_by_size`): ``values_per_state`` input values and
    ``output_bytes_per_state`` bytes of outputs a state, launched in the block layout or per state
    (staged or not)."""
    return mapped_by_size(num_timesteps, values_per_state, output_bytes_per_state, block, staged)


# Word index layout of the packed entries: the arguments in order, then these.
PACKED_TAIL = ("num_timesteps", "layout", "tier", "threads", "blocks", "stream_or_transfer")

# What a host entry returns for an input it refuses (grid_core/runtime/abi_support.h)
NONFINITE_INPUT = -1000  # GRID_ABI_NONFINITE_INPUT: state input k holds a NaN or an inf: -1000 - k
BAD_QUATERNION = -900  # GRID_ABI_BAD_QUATERNION: a free-flyer quaternion of q not of unit norm


@attrs.frozen
class AbiFunction:
    algorithm: str
    symbol: str
    dtype: str  # "f32" / "f64"
    outputs: tuple[Port, ...]
    inputs: tuple[Port, ...]  # state inputs, in order
    params: tuple[Port, ...]
    launch: Signature  # X_launch's signature node: the entries call it through it
    stage_io: str  # cfg.stage_io of the host form, as Layers.stage_io_rule renders it
    mapped: str  # the host form's choice of mapped memory by size, as Layers.mapped_rule renders it


def abi_functions(robot: Robot, algorithms, dtypes=None, frames=None, algorithm_options=None,
                  namespace: str = "grid") -> list[AbiFunction]:
    """The entries of every algorithm in each precision of ``dtypes`` (keys of :data:`DTYPES`;
    ``None``: both), for the header generated with ``frames`` and ``algorithm_options`` (its
    outputs' sizes: the option ports' values) in ``namespace``."""
    from .composer import Composer, GenerateOptions

    dtypes = tuple(DTYPES) if dtypes is None else tuple(dtypes)
    if not set(dtypes) <= set(DTYPES):
        raise ValueError(f"dtypes must be among {tuple(DTYPES)}, not {dtypes!r}")
    out = []
    composer = Composer(robot, GenerateOptions(frames=frames, algorithm_options=algorithm_options or ()))
    for alg in resolve_algorithms(algorithms):
        ins = alg.inputs(robot)
        layers = composer.layers(alg.name)
        for dt in dtypes:
            out.append(
                AbiFunction(
                    algorithm=alg.name,
                    symbol=f"grid_abi_{alg.name}_{dt}",
                    dtype=dt,
                    outputs=layers.outputs,
                    inputs=tuple(p for p in ins if p.kind == "state"),
                    params=tuple(p for p in ins if p.kind == "param"),
                    launch=layers.launch,
                    stage_io=layers.stage_io_rule("transfer", "mapped", "n"),
                    mapped=layers.mapped_rule("n", "layout", DTYPES[dt], "per_state", f"{namespace}::"),
                )
            )
    return out


def support_text() -> str:
    """The robot-independent C++ of the ABI (workspace and staging buffers, the staging copies),
    shipped as ``grid_core/runtime/abi_support.h``."""
    return importlib.resources.files("grid_core.runtime").joinpath("abi_support.h").read_text()


def abi_source(robot: Robot, algorithms, header_name: str, namespace: str = "grid", dtypes=None, frames=None,
               algorithm_options=None) -> str:
    """C++ source of the ABI as one translation unit (``#include``s the header, generated with
    ``frames`` and ``algorithm_options``): the library's own entries, then every algorithm's in
    each precision of ``dtypes`` (``None``: both; only these instantiate the header's templates).
    The host builds (emulation, the CPU build) compile this; the GPU library compiles
    :func:`abi_units`."""
    lines = [*_prologue(header_name), *_library_entries(namespace)]
    for fn in abi_functions(robot, algorithms, dtypes, frames, algorithm_options, namespace):
        lines += _function_source(fn, namespace, robot)
    lines += ['}  // extern "C"', ""]
    return "\n".join(lines)


def abi_units(robot: Robot, algorithms, header_name: str, namespace: str = "grid", dtypes=None, frames=None,
              algorithm_options=None) -> dict[str, str]:
    """The ABI as translation units, each ``#include``-ing the header: ``abi.cu`` (the library's
    own entries) and ``abi_<algorithm>_<dtype>.cu`` per algorithm and precision (its entries
    alone).  The GPU library is built from these, compiled side by side:

    * each algorithm's kernels in units of their own, as the benchmark compiles them: nvcc inlines
      a composed inner into a kernel or calls it depending on how many kernels of the unit use it:
      in one unit with the algorithms it composes, g1's forward-dynamics-gradient block kernel took
      114 registers by ptxas 13.5 (one block of 512 threads an SM) where alone it takes 64 (two),
      and the bench timed the header's kernel at 0.6x the library's;
    * each precision in a unit of its own: the kernels of one precision never call the other's, and
      ptxas assembles a unit's kernels one after another, so the two halves of a large algorithm
      compile at once (go2's inverse-dynamics gradient, ptxas 13.0 -O1: 39 and 46 s against 96 s
      in one unit, on a 2-core Intel VM; the SASS of its 10 kernels identical)."""
    units = {"abi.cu": "\n".join([*_prologue(header_name), *_library_entries(namespace), '}  // extern "C"', ""])}
    functions = abi_functions(robot, algorithms, dtypes, frames, algorithm_options, namespace)
    for alg, dt in dict.fromkeys((fn.algorithm, fn.dtype) for fn in functions):
        lines = [*_prologue(header_name), 'extern "C" {', ""]
        for fn in functions:
            if (fn.algorithm, fn.dtype) == (alg, dt):
                lines += _function_source(fn, namespace, robot)
        units[f"abi_{alg}_{dt}.cu"] = "\n".join([*lines, '}  // extern "C"', ""])
    return units


def _prologue(header_name: str) -> list[str]:
    """A unit's includes and the ABI's support code."""
    return [
        "// Generated C ABI over a GRiD header (grid_core.abi); do not edit.",
        "#define GRID_HOST_POOL  // the prelude's thread pool: the host form's staging copies",
        f'#include "{header_name}"',
        "#include <unistd.h>",
        "",
        "#include <algorithm>",
        "#include <atomic>",
        "#include <chrono>",
        "#include <condition_variable>",
        "#include <cstdint>",
        "#include <cstdlib>",
        "#include <cstring>",
        "#include <map>",
        "#include <mutex>",
        "#include <thread>",
        "#include <type_traits>",
        "#include <vector>",
        "",
        *support_text().splitlines(),
        "",
    ]


def _library_entries(ns: str) -> list[str]:
    """The library's own entries (sizes, platform, memory, errors, the pool), opening ``extern "C"``."""
    return [
        'extern "C" {',
        "",
        "int grid_abi_info(int *out, int n) {",
        f"    const int values[] = {{{ns}::NUM_POS, {ns}::NUM_VEL, {ns}::NUM_BODIES, {ns}::MAX_PERF_LEVEL_THREADS}};",
        "    const int count = int(sizeof(values) / sizeof(values[0]));",
        "    for (int i = 0; i < n && i < count; ++i) out[i] = values[i];",
        "    return count;",
        "}",
        "",
        "int grid_abi_synchronize(void) { return int(cudaDeviceSynchronize()); }",
        "",
        "// Where the entries run: 0 on a CUDA device, 1 on the host (GRID_HOST_EMULATION).",
        "int grid_abi_platform(void) {",
        "#ifdef GRID_HOST_EMULATION",
        "    return 1;",
        "#else",
        "    return 0;",
        "#endif",
        "}",
        "",
        "int grid_abi_device_count(void) {",
        "    int n = 0;",
        "    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;",
        "}",
        "",
        "void *grid_abi_malloc(size_t bytes) {",
        "    void *p = nullptr;",
        "    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : nullptr;",
        "}",
        "",
        "int grid_abi_free(void *p) { return int(cudaFree(p)); }",
        "",
        "int grid_abi_memcpy(void *dst, const void *src, size_t bytes, int to_device) {",
        "    return int(cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));",
        "}",
        "",
        "const char *grid_abi_error_string(int err) { return cudaGetErrorString(cudaError_t(err)); }",
        "",
        "void grid_abi_set_poison(int on) { poison_outputs = on; }",
        "",
        "// The process's one thread pool (grid_host::PoolTable): the table this library's jobs run on,",
        "// and the adoption of another library's (1: adopted; 0: another version's, refused).",
        "const void *grid_host_pool_lend(void) { return grid_host::lend_pool(); }",
        "",
        "int grid_host_pool_adopt(const void *table) {",
        "    return grid_host::adopt_pool(static_cast<const grid_host::PoolTable *>(table)) ? 1 : 0;",
        "}",
        "",
    ]


def quaternion_check(fn: AbiFunction, robot: Robot | None, T: str, staged: bool = True) -> list[str]:
    """A host entry's check of the free-flyer quaternions of q (unit norm, as
    :func:`grid_core.reference.check_quaternions` requires; ``GRID_ABI_BAD_QUATERNION`` else):
    one pass over N x 4 values, of the staged copy (the host form) or of the caller's array (the
    CPU build's entry, ``staged=False``)."""
    q = next((p for p in fn.inputs if is_configuration(p, robot)), None) if robot is not None else None
    if q is None:
        return []
    lo, hi = (1 - QUATERNION_TOLERANCE) ** 2, (1 + QUATERNION_TOLERANCE) ** 2
    source = f"reinterpret_cast<const {T} *>(h_in + i_{q.name})" if staged else q.name
    lines = [
        "    // free-flyer quaternions (x y z w) of unit norm: a zero one would give NaN silently",
        f"    if ({q.name} != nullptr) {{",
        f"        const {T} *qs = {source};",
        "        for (size_t k = 0; k < n; ++k) {",
    ]
    for i in robot.quaternion_indices:
        lines += [
            f"            const {T} *x = qs + k * {robot.nq} + {i};",
            "            const double nn = double(x[0]) * x[0] + double(x[1]) * x[1] + double(x[2]) * x[2] + "
            "double(x[3]) * x[3];",
            f"            if (!(nn >= {lo!r} && nn <= {hi!r})) return GRID_ABI_BAD_QUATERNION;",
        ]
    return lines + ["        }", "    }"]


def _function_source(fn: AbiFunction, ns: str, robot: Robot | None = None) -> list[str]:
    """The device form, the host form and their packed forms of one algorithm in one precision."""
    T = DTYPES[fn.dtype]
    if len(fn.inputs) > 32:  # copy_segments reports a NaN or inf as one bit per state input
        raise ValueError(f"{fn.algorithm}: the C ABI takes at most 32 state inputs, not {len(fn.inputs)}")
    ports = list(fn.outputs) + list(fn.inputs) + list(fn.params)
    args = [f"{T} *{p.name}" for p in fn.outputs]
    args += [f"const {T} *{p.name}" for p in fn.inputs]
    args += [f"const {T} *{p.name}" for p in fn.params]
    tail = ["int num_timesteps", "int layout", "int tier", "int threads", "int blocks"]
    cfg = [
        f"    {ns}::LaunchConfig cfg;",
        "    cfg.layout = layout; cfg.tier = tier; cfg.threads = threads; cfg.blocks = blocks;",
    ]
    names = [f"d_{p.name}" for p in fn.outputs] + [f"d_{p.name}" for p in fn.inputs] + [f"h_{p.name}" for p in fn.params]

    def call(values) -> str:
        """The launcher's call, checked against its signature node (grid_core.emit.layers)."""
        args = dict(zip(names, values))
        args.update(num_timesteps="num_timesteps", cfg="cfg", d_workspace="ws.ptr", workspace_bytes="ws.bytes",
                    stream="static_cast<cudaStream_t>(stream)")
        return f"{ns}::" + fn.launch.call(args, [T]).expr()

    lines = [
        f"// {fn.algorithm}: device pointers, asynchronous on `stream`.",
        f"int {fn.symbol}({', '.join(args + tail + ['void *stream'])}) {{",
        *cfg,
        f"    const size_t need = {ns}::{fn.algorithm}_workspace_bytes<{T}>(num_timesteps, cfg);",
        "    std::lock_guard<std::mutex> guard(workspace_lock);",
        f"    Workspace<{T}> &ws = workspace<{T}>(stream);",
        "    GRID_ABI_TRY(ws.ensure(need));",
        f"    return int({call([p.name for p in ports])});",
        "}",
        "",
    ]
    # the host form: inputs staged into one buffer and outputs out of one, through mapped
    # memory (small batches) or the copy engine (one transfer each way)
    out_sizes = [f"n * {math.prod(p.shape)} * sizeof({T})" for p in fn.outputs]
    in_sizes = [f"n * {math.prod(p.shape)} * sizeof({T})" for p in fn.inputs]
    in_elements = " + ".join(f"({p.name} != nullptr ? {math.prod(p.shape)} : 0)" for p in fn.inputs) or "0"
    body = [
        f"// {fn.algorithm}: host pointers, synchronous.  transfer: 0 by size, 1 copy engine, 2 mapped memory,",
        "// 3 mapped memory with coalesced (staged) accesses.",
        f"int {fn.symbol}_host({', '.join(args + tail + ['int transfer'])}) {{",
        "    static Staging staging;",
        "    std::lock_guard<std::mutex> guard(staging.lock);",
        "    const size_t n = size_t(num_timesteps);",
        "    // 256-byte aligned slices of one input and one output buffer",
        "    auto slice = [](size_t bytes) { return (bytes + 255) / 256 * 256; };",
        "    size_t out_bytes = 0, in_bytes = 0;",
    ]
    for p, size in zip(fn.outputs, out_sizes):
        body.append(f"    const size_t o_{p.name} = out_bytes; out_bytes += slice({size});")
    for p, size in zip(fn.inputs, in_sizes):
        body.append(f"    const size_t i_{p.name} = in_bytes; if ({p.name} != nullptr) in_bytes += slice({size});")
    body += [
        f"    const size_t per_state = {in_elements};  // input values per state",
        f"    const bool mapped = transfer >= 2 || (transfer == 0 && {fn.mapped});",
        "    const size_t first = mapped ? 2 : 0;  // the buffer pair used",
        "    GRID_ABI_TRY(staging.ensure(first, out_bytes));",
        "    GRID_ABI_TRY(staging.ensure(first + 1, in_bytes > 0 ? in_bytes : 256));",
        "    char *h_out = static_cast<char *>(staging.buffers[first].pinned);",
        "    char *d_out = static_cast<char *>(staging.buffers[first].device);",
        "    char *h_in = static_cast<char *>(staging.buffers[first + 1].pinned);",
        "    char *d_in = static_cast<char *>(staging.buffers[first + 1].device);",
    ]
    dev = [f"reinterpret_cast<{T} *>(d_out + o_{p.name})" for p in fn.outputs]
    body += [
        "    // the inputs into staging, checked finite on the way",
        f"    Segment copies[{max(len(fn.inputs), 1)}];",
        "    int count = 0;",
    ]
    for k, p in enumerate(fn.inputs):
        body.append(f"    if ({p.name} != nullptr) copies[count++] = {{h_in + i_{p.name}, "
                    f"reinterpret_cast<const char *>({p.name}), {in_sizes[k]}, {k}}};")
    body += [
        f"    const uint32_t nonfinite = copy_segments<{T}>(copies, count);",
        f"    for (int k = 0; nonfinite != 0 && k < {len(fn.inputs)}; ++k)",
        "        if (nonfinite >> k & 1u) return GRID_ABI_NONFINITE_INPUT - k;",
        *quaternion_check(fn, robot, T),
    ]
    for p in fn.inputs:
        body.append(f"    const {T} *d_{p.name} = {p.name} != nullptr ? reinterpret_cast<const {T} *>(d_in + i_{p.name}) "
                    ": nullptr;")
        dev.append(f"d_{p.name}")
    dev += [p.name for p in fn.params]
    body += [
        "    void *stream = staging.stream;",
        "    if (mapped) {",
        "        if (poison_outputs) std::memset(h_out, 0xff, out_bytes);",
        "    } else {",
        "        if (in_bytes > 0)",
        "            GRID_ABI_TRY(cudaMemcpyAsync(d_in, h_in, in_bytes, cudaMemcpyHostToDevice, staging.stream));",
        "        if (poison_outputs) GRID_ABI_TRY(cudaMemsetAsync(d_out, 0xff, out_bytes, staging.stream));",
        "    }",
        *cfg,
        f"    cfg.stage_io = {fn.stage_io};  // coalesced accesses to host memory",
        f"    const size_t need = {ns}::{fn.algorithm}_workspace_bytes<{T}>(num_timesteps, cfg);",
        "    {",
        "        std::lock_guard<std::mutex> wguard(workspace_lock);",
        f"        Workspace<{T}> &ws = workspace<{T}>(stream);",
        "        GRID_ABI_TRY(ws.ensure(need));",
        f"        GRID_ABI_TRY({call(dev)});",
        "    }",
        "    if (!mapped)",
        "        GRID_ABI_TRY(cudaMemcpyAsync(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost, staging.stream));",
        "    GRID_ABI_TRY(cudaStreamSynchronize(staging.stream));",
    ]
    body.append(f"    const Segment results[] = {{{', '.join(f'{{reinterpret_cast<char *>({p.name}), h_out + o_{p.name}, {size}, -1}}' for p, size in zip(fn.outputs, out_sizes))}}};")
    body.append(f"    copy_segments<{T}>(results, {len(fn.outputs)});")
    body += ["    return 0;", "}", ""]
    lines += body
    # packed forms: word i is argument i (pointers as integers, 0 for none), then PACKED_TAIL
    k = len(ports)
    unpack = [f"reinterpret_cast<{'' if i < len(fn.outputs) else 'const '}{T} *>(uintptr_t(a[{i}]))"
              for i in range(k)]
    ints = [f"int(a[{k + j}])" for j in range(5)]
    lines += [
        f"// {fn.algorithm}: packed forms ({k} argument words, then {', '.join(PACKED_TAIL)}).",
        f"int {fn.symbol}_packed(const uint64_t *a) {{",
        f"    return {fn.symbol}({', '.join(unpack + ints)}, reinterpret_cast<void *>(uintptr_t(a[{k + 5}])));",
        "}",
        f"int {fn.symbol}_host_packed(const uint64_t *a) {{",
        f"    return {fn.symbol}_host({', '.join(unpack + ints)}, int(a[{k + 5}]));",
        "}",
        "",
    ]
    return lines
