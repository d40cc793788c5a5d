// ---- GRiD prelude: shared by every generated header (guarded, namespace-free macros) ----
#ifndef GRID_PRELUDE_INCLUDED
#define GRID_PRELUDE_INCLUDED

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#ifdef GRID_HOST_EMULATION
// Host emulation (DESIGN §4): the same header compiles as plain C++ so CI, which has
// no GPU, executes the generated math.  One thread per block (threadIdx = 0,
// blockDim = 1): every parallel region is a block-stride loop, so it covers all the
// work; __syncthreads() is a no-op, atomicAdd a plain add, shared memory ordinary
// memory, and the dynamic shared-memory arena is bounds-checked.
#include <cassert>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __shared__
#define __constant__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
namespace grid_emu {
inline thread_local dim3 threadIdx{0, 0, 0};
inline thread_local dim3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};
inline thread_local unsigned char *smem = nullptr;
inline thread_local size_t smem_bytes = 0;
} // namespace grid_emu
using grid_emu::blockDim;
using grid_emu::blockIdx;
using grid_emu::gridDim;
using grid_emu::threadIdx;
inline void __syncthreads() {}
template <typename T> inline T atomicAdd(T *address, T value) { T old = *address; *address += value; return old; }

// The CUDA runtime subset the host layer uses, on host memory.
typedef int cudaError_t;
enum : int { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
typedef struct grid_emu_stream *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                      cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaDevAttrMultiProcessorCount = 16 };
inline cudaError_t cudaMalloc(void **p, size_t n) { *p = std::malloc(n ? n : 1); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc(reinterpret_cast<void **>(p), n); }
inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
template <typename T> inline cudaError_t cudaMallocHost(T **p, size_t n) { return cudaMalloc(reinterpret_cast<void **>(p), n); }
inline cudaError_t cudaFree(void *p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaFreeHost(void *p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { if (n) std::memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t = nullptr) { return cudaMemcpy(d, s, n, k); }
inline cudaError_t cudaMemset(void *d, int v, size_t n) { std::memset(d, v, n); return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t = nullptr) { return cudaMemset(d, v, n); }
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = nullptr; return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
inline const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated CUDA error"; }
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    *v = (a == cudaDevAttrMaxSharedMemoryPerBlockOptin) ? 232448 : 1;
    return cudaSuccess;
}
template <typename F> inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }

namespace grid_emu {
// Runs a kernel launch on the host: each block in turn, one thread per block.
template <typename... KArgs, typename... Args>
inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 /*block*/, size_t smem_size, Args... args) {
    std::vector<unsigned char> arena(smem_size + 16);
    gridDim = grid;
    blockDim = dim3(1, 1, 1);
    threadIdx = dim3(0, 0, 0);
    for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = dim3(bx, 0, 0);
        smem = arena.data();
        smem_bytes = smem_size;
        kernel(args...);
    }
    smem = nullptr;
    smem_bytes = 0;
}
} // namespace grid_emu
#define GRID_LAUNCH(kernel, grid, block, smem, stream, ...) \
    grid_emu::launch(kernel, dim3(grid), dim3(block), static_cast<size_t>(smem), __VA_ARGS__)
#define GRID_DYNAMIC_SMEM(name) unsigned char *name = grid_emu::smem
#define GRID_ARENA_ASSERT(bytes) assert(static_cast<size_t>(bytes) <= grid_emu::smem_bytes)
#define GRID_ASSERT(cond) assert(cond)
#else
#include <cuda_runtime.h>
#define GRID_LAUNCH(kernel, grid, block, smem, stream, ...) \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define GRID_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#define GRID_ARENA_ASSERT(bytes) ((void)0)
#define GRID_ASSERT(cond) ((void)0)
#endif

// Linear thread index and thread count of a block: every parallel region is a
// block-stride loop over these, so any block size is correct.
#define GRID_TID (threadIdx.x + threadIdx.y * blockDim.x)
#define GRID_BLOCK_THREADS (blockDim.x * blockDim.y)

#define gpuErrchk(ans) grid_prelude::gpu_assert((ans), __FILE__, __LINE__)

namespace grid_prelude {
inline void gpu_assert(cudaError_t code, const char *file, int line) {
    if (code != cudaSuccess) {
        std::fprintf(stderr, "GPU error: %s at %s:%d\n", cudaGetErrorString(code), file, line);
        std::exit(code);
    }
}
} // namespace grid_prelude

// sin and cos of a joint angle.  float on the GPU: Cody-Waite reduction to [-pi, pi], then the
// special-function unit (absolute error 2^-21.4 there, against float's 2^-24 rounding), a few
// instructions instead of sincosf's reduction for any argument.  double: sincos.
template <typename T> __host__ __device__ __forceinline__ void grid_sincos(T x, T *s, T *c) {
#if defined(__CUDA_ARCH__)
    if constexpr (std::is_same<T, float>::value) {
        const float k = rintf(x * 0.159154943091895336f);
        const float r = fmaf(-k, -1.74845553e-07f, fmaf(-k, 6.28318548202514648f, x));
        __sincosf(r, s, c);
    } else {
        sincos(x, s, c);
    }
#else
    *s = std::sin(x);
    *c = std::cos(x);
#endif
}

template <typename T> __host__ __device__ __forceinline__ T grid_sqrt(T x) {
#if defined(__CUDA_ARCH__)
    return sqrt(x);
#else
    return std::sqrt(x);
#endif
}

#endif // GRID_PRELUDE_INCLUDED
