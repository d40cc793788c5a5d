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

// GRID_HOST_CPU: the optimised CPU build (grid_core.CpuHandle), host emulation without the
// arena asserts and with a launch's blocks split over worker threads.
#if defined(GRID_HOST_CPU) && !defined(GRID_HOST_EMULATION)
#define GRID_HOST_EMULATION
#endif

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

#ifdef GRID_HOST_CPU
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <tuple>
#include <unistd.h>
namespace grid_emu {
// Worker threads for the CPU build's launches.  A job is `parts` independent parts; the caller
// and every worker awake claim parts from one counter, so the caller never waits for a worker
// that is asleep.  Workers spin for SPIN after each job (calls in a loop find them awake),
// then sleep.  Threads are started on demand and live as long as the process.
class WorkerPool {
  public:
    using Job = void (*)(void *context, size_t part);

    static WorkerPool &instance() {
        static WorkerPool *pool = new WorkerPool();
        return *pool;
    }

    // Runs job(context, i) for every i in [0, parts) on up to `parts` threads; returns once all ran.
    void run(Job job, void *context, size_t parts) {
        std::unique_lock<std::mutex> busy(run_lock_, std::try_to_lock);
        // another thread's job under way, or a forked child (it has no workers): serially here
        if (parts <= 1 || !busy.owns_lock() || getpid() != pid_) {
            for (size_t i = 0; i < parts; ++i) job(context, i);
            return;
        }
        {
            std::lock_guard<std::mutex> guard(lock_);
            while (started_ + 1 < parts) {
                std::thread([this] { serve(); }).detach();
                ++started_;
            }
            job_ = job;
            context_ = context;
            parts_ = parts;
            next_.store(0);
            done_.store(0);
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
        claim(job, context, parts);
        for (unsigned spins = 0; done_.load(std::memory_order_acquire) < parts; ++spins) pause(spins);
        {
            std::lock_guard<std::mutex> guard(lock_);
            job_ = nullptr;  // no worker joins this job any more
        }
        for (unsigned spins = 0; joined_.load(std::memory_order_acquire) != 0; ++spins) pause(spins);
    }

  private:
    static constexpr std::chrono::microseconds SPIN{200};

    WorkerPool() : pid_(getpid()) {}

    static void pause(unsigned spins) {
        if (spins < 4096) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            asm volatile("yield");
#endif
        } else {
            std::this_thread::yield();  // the machine is oversubscribed: let the others run
        }
    }

    void claim(Job job, void *context, size_t parts) {
        for (size_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < parts;) {
            job(context, i);
            done_.fetch_add(1, std::memory_order_release);
        }
    }

    void serve() {
        uint64_t seen = 0;
        for (;;) {
            const auto until = std::chrono::steady_clock::now() + SPIN;
            for (unsigned spins = 0; generation_.load(std::memory_order_acquire) == seen &&
                                     std::chrono::steady_clock::now() < until; ++spins)
                pause(spins);
            std::unique_lock<std::mutex> guard(lock_);
            wake_.wait(guard, [&] { return generation_.load() != seen; });
            seen = generation_.load();
            if (job_ == nullptr) continue;  // that job is already over
            const Job job = job_;
            void *const context = context_;
            const size_t parts = parts_;
            joined_.fetch_add(1);
            guard.unlock();
            claim(job, context, parts);
            joined_.fetch_sub(1, std::memory_order_release);
        }
    }

    const pid_t pid_;
    size_t started_ = 0;
    std::mutex run_lock_;  // one job at a time
    std::mutex lock_;      // guards job_, context_, parts_, started_ and the start of a job
    std::condition_variable wake_;
    Job job_ = nullptr;
    void *context_ = nullptr;
    size_t parts_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<size_t> next_{0}, done_{0};
    std::atomic<int> joined_{0};
};

// Worker threads of the launches made from this thread (the CPU ABI entry sets it; <= 0: every core).
inline thread_local int launch_workers = 1;
inline thread_local std::vector<unsigned char> arena;  // this thread's shared memory

// Runs a kernel launch on the host: the blocks in contiguous ranges, one per worker, each
// block with one thread; a worker has its own blockIdx and shared-memory arena.
template <typename... KArgs, typename... Args>
inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 /*block*/, size_t smem_size, Args... args) {
    struct Launch {
        void (*kernel)(KArgs...);
        dim3 grid;
        size_t smem_size;
        size_t parts;
        std::tuple<Args...> args;

        static void part(void *context, size_t i) {
            const Launch &l = *static_cast<const Launch *>(context);
            const unsigned from = unsigned(l.grid.x * i / l.parts), to = unsigned(l.grid.x * (i + 1) / l.parts);
            if (arena.size() < l.smem_size + 16) arena.resize(l.smem_size + 16);
            gridDim = l.grid;
            blockDim = dim3(1, 1, 1);
            threadIdx = dim3(0, 0, 0);
            smem = arena.data();
            smem_bytes = l.smem_size;
            for (unsigned bx = from; bx < to; ++bx) {
                blockIdx = dim3(bx, 0, 0);
                std::apply(l.kernel, l.args);
            }
            smem = nullptr;
            smem_bytes = 0;
        }
    };
    size_t parts = launch_workers > 0 ? size_t(launch_workers) : size_t(std::thread::hardware_concurrency());
    parts = parts < grid.x ? parts : grid.x;
    const Launch l{kernel, grid, smem_size, parts > 0 ? parts : 1, std::tuple<Args...>(args...)};
    WorkerPool::instance().run(&Launch::part, const_cast<Launch *>(&l), l.parts);
}
} // namespace grid_emu
#define GRID_ARENA_ASSERT(bytes) ((void)0)
#define GRID_ASSERT(cond) ((void)0)
#else
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
#define GRID_ARENA_ASSERT(bytes) assert(static_cast<size_t>(bytes) <= grid_emu::smem_bytes)
#define GRID_ASSERT(cond) assert(cond)
#endif
#define GRID_LAUNCH(kernel, grid, block, smem, stream, ...) \
    grid_emu::launch(kernel, dim3(grid), dim3(block), static_cast<size_t>(smem), __VA_ARGS__)
#define GRID_DYNAMIC_SMEM(name) unsigned char *name = grid_emu::smem
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

// Values a thread moves per chunk of a staged kernel's output stores (grid_core.emit.layers): all
// of a chunk's shared-memory loads are in flight together; 64 bytes keep a double chunk's registers
// (values and addresses) within what the per-state code itself needs.
template <typename T> __host__ __device__ constexpr int grid_store_chunk() { return 64 / int(sizeof(T)); }

template <typename T> __host__ __device__ __forceinline__ T grid_sqrt(T x) {
#if defined(__CUDA_ARCH__)
    return sqrt(x);
#else
    return std::sqrt(x);
#endif
}

#endif // GRID_PRELUDE_INCLUDED
