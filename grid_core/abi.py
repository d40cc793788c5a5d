"""The generated C ABI over a header: what ctypes (the runtime, the emulated
backend) calls.  It is derived from each algorithm's ports alone (the launch
convention of :mod:`grid_core.emit.emitter`), so a new algorithm needs no edit here.

For every emitted algorithm ``X`` and precision ``f32`` / ``f64``::

    int grid_abi_X_f64(double *out..., const double *in..., const double *param...,
                       int num_timesteps, int layout, int tier, int threads, int blocks,
                       void *stream);

returning a ``cudaError_t``; plus ``grid_abi_info`` (sizes), ``grid_abi_synchronize``
and ``grid_abi_error_string``.  The workspace a launch needs is grown on demand
(one buffer per precision, guarded by a mutex).
"""

from __future__ import annotations

import attrs

from .algorithm import Port
from .composer import resolve_algorithms
from .model import Robot

DTYPES = {"f32": "float", "f64": "double"}


@attrs.frozen
class AbiFunction:
    algorithm: str
    symbol: str
    dtype: str  # "f32" / "f64"
    outputs: tuple[Port, ...]
    inputs: tuple[Port, ...]  # state inputs, in order
    params: tuple[Port, ...]


def abi_functions(robot: Robot, algorithms) -> list[AbiFunction]:
    out = []
    for alg in resolve_algorithms(algorithms):
        ins = alg.inputs(robot)
        for dt in DTYPES:
            out.append(
                AbiFunction(
                    algorithm=alg.name,
                    symbol=f"grid_abi_{alg.name}_{dt}",
                    dtype=dt,
                    outputs=tuple(alg.outputs(robot)),
                    inputs=tuple(p for p in ins if p.kind == "state"),
                    params=tuple(p for p in ins if p.kind == "param"),
                )
            )
    return out


def abi_source(robot: Robot, algorithms, header_name: str, namespace: str = "grid") -> str:
    """C++ source of the ABI translation unit (``#include``s the header)."""
    ns = namespace
    lines = [
        "// Generated C ABI over a GRiD header (grid_core.abi); do not edit.",
        f'#include "{header_name}"',
        "#include <mutex>",
        "",
        "namespace {",
        "template <typename T> struct Workspace {",
        "    std::mutex lock;",
        "    T *ptr = nullptr;",
        "    size_t bytes = 0;",
        "    cudaError_t ensure(size_t need) {",
        "        if (need <= bytes) return cudaSuccess;",
        "        if (ptr) cudaFree(ptr);",
        "        ptr = nullptr; bytes = 0;",
        "        cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&ptr), need);",
        "        if (err == cudaSuccess) bytes = need;",
        "        return err;",
        "    }",
        "};",
        "template <typename T> Workspace<T> &workspace() { static Workspace<T> ws; return ws; }",
        "}  // namespace",
        "",
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
    ]
    for fn in abi_functions(robot, algorithms):
        T = DTYPES[fn.dtype]
        args = [f"{T} *{p.name}" for p in fn.outputs]
        args += [f"const {T} *{p.name}" for p in fn.inputs]
        args += [f"const {T} *{p.name}" for p in fn.params]
        args += ["int num_timesteps", "int layout", "int tier", "int threads", "int blocks", "void *stream"]
        call = [p.name for p in fn.outputs] + [p.name for p in fn.inputs] + [p.name for p in fn.params]
        lines += [
            f"int {fn.symbol}({', '.join(args)}) {{",
            f"    {ns}::LaunchConfig cfg;",
            "    cfg.layout = layout; cfg.tier = tier; cfg.threads = threads; cfg.blocks = blocks;",
            f"    const size_t need = {ns}::{fn.algorithm}_workspace_bytes<{T}>(num_timesteps, cfg);",
            f"    Workspace<{T}> &ws = workspace<{T}>();",
            "    std::lock_guard<std::mutex> guard(ws.lock);",
            "    cudaError_t err = ws.ensure(need);",
            "    if (err != cudaSuccess) return int(err);",
            f"    return int({ns}::{fn.algorithm}_launch<{T}>({', '.join(call)}, num_timesteps, cfg, ws.ptr, ws.bytes, "
            "static_cast<cudaStream_t>(stream)));",
            "}",
            "",
        ]
    lines += ['}  // extern "C"', ""]
    return "\n".join(lines)
