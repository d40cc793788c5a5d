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

// ---- the host thread pool: the CPU build's launches (GRID_HOST_CPU) and the C ABI's staging
// copies (GRID_HOST_POOL, set by the ABI translation unit); host code only ----
#if defined(GRID_HOST_CPU) || defined(GRID_HOST_POOL)
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <sched.h>
#include <unistd.h>
namespace grid_host {
// The machine's cores (at least 1), read once: glibc reads them from /sys on every
// std::thread::hardware_concurrency() call (~6 us here, two calls a launch).  The CPU launches and
// the C ABI's staging copies both size their threads from it.
inline unsigned core_count() {
    static const unsigned cores = [] {
        const unsigned c = std::thread::hardware_concurrency();
        return c > 0 ? c : 1u;
    }();
    return cores;
}

// Whether any of n values is NaN or inf (every exponent bit set), copying them to dst as it reads
// them when COPY: one branch-free pass the compiler vectorises, so a check while copying costs no
// second read.  The CPU entries check their inputs in place (grid_emu::first_nonfinite), the C
// ABI's staging checks what it copies (copy_range).
template <typename T, bool COPY>
inline bool any_nonfinite(T *dst, const T *src, size_t n) {
    using U = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
    const U mask = sizeof(T) == 4 ? U(0x7f800000u) : U(0x7ff0000000000000ull);
    U bad = 0;
    for (size_t i = 0; i < n; ++i) {
        U bits;
        std::memcpy(&bits, src + i, sizeof(T));
        if (COPY) std::memcpy(dst + i, &bits, sizeof(T));
        bad |= U((bits & mask) == mask);
    }
    return bad != 0;
}

// Worker threads.  A job is `items` independent items on up to `threads` threads; the caller and
// every worker awake claim chunks of them as they come, so the caller never waits for a worker
// that is asleep, and works on while one wakes (a sleeping worker takes ~0.1 ms to start here, up
// to 0.3).  A chunk is a share of what is left (remaining / (2 threads), at least `grain` items):
// large ones first, few claims, and small ones at the end, so the threads finish together even
// when one started late or runs slower (a virtual CPU whose host core is busy elsewhere runs at
// 0.7 of the other's speed for tens of ms).  Workers spin after each job, then sleep (Spin).
// Threads are started on demand and live as long as the process.
class WorkerPool {
  public:
    using Job = void (*)(void *context, size_t begin, size_t end);
    using clock = std::chrono::steady_clock;

    // How long the workers spin for the next job after this one, before they sleep: at least
    // `least`; when `paced`, twice the longer of a worker's last two waits for a job while that
    // is under MAX / 2 (jobs coming at a steady pace find it awake).  Waking a sleeping worker
    // costs the caller 10-40 us in notify_all and the worker starts 30-100 us later (measured
    // here, after 0.1-3 ms asleep); spinning costs a core.  The CPU launches pace their spin (a
    // core they would otherwise leave idle); the GPU path's copies spin a fixed 100 us.
    struct Spin {
        std::chrono::microseconds least;
        bool paced;
    };
    static constexpr Spin LAUNCH{std::chrono::microseconds(2000), true};
    static constexpr std::chrono::microseconds MAX{20000};

    static WorkerPool &instance() {
        static WorkerPool *pool = new WorkerPool();
        return *pool;
    }

    // Runs job(context, begin, end) over chunks covering [0, items), each at least `grain` items
    // (but the last), on up to `threads` threads (the caller's among them); returns once all ran.
    void run(Job job, void *context, size_t items, size_t grain, size_t threads, Spin spin = LAUNCH) {
        std::unique_lock<std::mutex> busy(run_lock_, std::try_to_lock);
        // another thread's job under way, or a forked child (it has no workers): serially here
        threads = threads < items ? threads : items;
        if (items <= grain || threads <= 1 || !busy.owns_lock() || getpid() != pid_) {
            if (items > 0) job(context, 0, items);
            return;
        }
        {
            std::lock_guard<std::mutex> guard(lock_);
            while (started_ + 1 < threads) {
                std::thread([this] { serve(); }).detach();
                ++started_;
            }
            job_ = job;
            context_ = context;
            grain_ = grain > 0 ? grain : 1;
            spin_ = spin;
            helpers_ = threads - 1;
            taken_ = 0;
            caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
            items_ = items;
            next_.store(0);
            done_.store(0);
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
        claim(job, context, items, grain_, threads);
        for (unsigned spins = 0; done_.load(std::memory_order_acquire) < items; ++spins) pause(spins);
        {
            std::lock_guard<std::mutex> guard(lock_);
            job_ = nullptr;  // no worker joins this job any more
        }
        for (unsigned spins = 0; joined_.load(std::memory_order_acquire) != 0; ++spins) pause(spins);
    }

  private:
    static clock::duration spin_for(Spin spin, clock::duration last, clock::duration before) {
        const clock::duration pace = last > before ? last : before, least = spin.least;
        return spin.paced && pace < MAX / 2 && 2 * pace > least ? 2 * pace : least;
    }

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

    // Moves this worker off `cpu`, the caller's.  Linux at times runs a worker on the caller's CPU,
    // with the other CPU idle, and leaves it there for tens of ms: the worker then runs only when
    // the caller is preempted (seen here: whole runs of two-thread calls at one-thread speed, the
    // worker on the caller's CPU).  Narrowing its affinity to the other allowed CPUs migrates it
    // at once; the affinity is then restored as it was.
    static void leave_cpu(int cpu) {
#ifdef __linux__
        cpu_set_t allowed;
        if (cpu < 0 || sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || !CPU_ISSET(cpu, &allowed) ||
            CPU_COUNT(&allowed) < 2)
            return;
        cpu_set_t others = allowed;
        CPU_CLR(cpu, &others);
        if (sched_setaffinity(0, sizeof(others), &others) == 0)
            sched_setaffinity(0, sizeof(allowed), &allowed);
#else
        (void)cpu;
#endif
    }

    // Claims chunks of [next_, items) and runs them, until none is left.
    void claim(Job job, void *context, size_t items, size_t grain, size_t threads) {
        for (size_t begin = next_.load(std::memory_order_relaxed); begin < items;) {
            const size_t share = (items - begin) / (2 * threads);
            const size_t count = share > grain ? share : grain < items - begin ? grain : items - begin;
            if (!next_.compare_exchange_weak(begin, begin + count, std::memory_order_relaxed))
                continue;  // another thread claimed first: begin is reloaded
            job(context, begin, begin + count);
            done_.fetch_add(count, std::memory_order_release);
            begin = next_.load(std::memory_order_relaxed);
        }
    }

    void serve() {
        uint64_t seen = 0;
        Spin spin = LAUNCH;                     // the spin its latest job asked for
        clock::duration last{0}, before{0};  // its last two waits for a job
        for (;;) {
            const clock::time_point idle = clock::now(), until = idle + spin_for(spin, last, before);
            for (unsigned spins = 1; generation_.load(std::memory_order_acquire) == seen; ++spins) {
                if (clock::now() >= until) break;
                pause(spins);
                // spinning on the caller's CPU takes its time: move (sched_getcpu is a load, glibc's rseq)
                if (spins % 64 == 0 && sched_getcpu() == caller_cpu_.load(std::memory_order_relaxed))
                    leave_cpu(sched_getcpu());
            }
            std::unique_lock<std::mutex> guard(lock_);
            wake_.wait(guard, [&] { return generation_.load() != seen; });
            seen = generation_.load();
            before = last;
            last = clock::now() - idle;
            if (job_ == nullptr || taken_ == helpers_) continue;  // that job is over, or has its threads
            ++taken_;
            const Job job = job_;
            void *const context = context_;
            const size_t items = items_, grain = grain_, threads = helpers_ + 1;
            const int caller_cpu = caller_cpu_.load(std::memory_order_relaxed);
            spin = spin_;
            joined_.fetch_add(1);
            guard.unlock();
            if (sched_getcpu() == caller_cpu) leave_cpu(caller_cpu);
            claim(job, context, items, grain, threads);
            joined_.fetch_sub(1, std::memory_order_release);
        }
    }

    const pid_t pid_;
    size_t started_ = 0;
    std::mutex run_lock_;  // one job at a time
    std::mutex lock_;      // guards job_ ... taken_, started_ and the start of a job
    std::condition_variable wake_;
    Job job_ = nullptr;
    void *context_ = nullptr;
    size_t items_ = 0, grain_ = 1;
    Spin spin_ = LAUNCH;
    size_t helpers_ = 0, taken_ = 0;  // workers the job may take (threads but the caller's), and has
    std::atomic<int> caller_cpu_{-1};  // where the caller of the latest job ran when it started it
    std::atomic<uint64_t> generation_{0};
    std::atomic<size_t> next_{0}, done_{0};  // the first item not claimed yet, the items done
    std::atomic<int> joined_{0};
};

// One pool for the process.  Each library built from a header has a WorkerPool of its own; two
// libraries in one process (two robots, or one robot built with other options) would keep two
// sets of workers, each spinning after its jobs on the cores the other library's job wants
// (measured on 2 cores: iiwa14's and hyq's CRBA on two threads, called in turn, 19 -> 35 us and
// 38 -> 54-72 us).  So a library can run its jobs on another library's pool: the runtime takes
// the first library's table (the C ABI's grid_host_pool_lend) and hands it to every library it
// loads after (grid_host_pool_adopt).  A plain C table, versioned: a library built from another
// version of this prelude refuses it and keeps its own pool.  A job is a function of the library
// that submits it, so it runs that library's code (and thread-locals) on the lender's workers.
constexpr uint32_t POOL_TABLE_VERSION = 1;
struct PoolTable {
    uint32_t version, size;
    void (*run)(WorkerPool::Job job, void *context, size_t items, size_t grain, size_t threads,
                long long spin_least_us, int spin_paced);
};

// This library's own pool, as a table.
inline const PoolTable *own_pool() {
    static const PoolTable table{
        POOL_TABLE_VERSION, uint32_t(sizeof(PoolTable)),
        [](WorkerPool::Job job, void *context, size_t items, size_t grain, size_t threads, long long least_us,
           int paced) {
            WorkerPool::instance().run(job, context, items, grain, threads,
                                       WorkerPool::Spin{std::chrono::microseconds(least_us), paced != 0});
        }};
    return &table;
}

// The pool this library's jobs run on: another library's once adopted, else its own.
inline std::atomic<const PoolTable *> &pool_in_use() {
    static std::atomic<const PoolTable *> table{nullptr};
    return table;
}

// What the library lends (grid_host_pool_lend): the pool it runs on, so a chain of adoptions ends
// at one pool.
inline const PoolTable *lend_pool() {
    const PoolTable *t = pool_in_use().load(std::memory_order_acquire);
    return t != nullptr ? t : own_pool();
}

// Whether `table` was adopted (a table of this version).  The runtime adopts at load, before the
// library's first job, so its own pool never starts a worker.
inline bool adopt_pool(const PoolTable *table) {
    if (table == nullptr || table->version != POOL_TABLE_VERSION || table->size != sizeof(PoolTable)) return false;
    pool_in_use().store(table, std::memory_order_release);
    return true;
}

// WorkerPool::run on the pool in use.
inline void run_on_pool(WorkerPool::Job job, void *context, size_t items, size_t grain, size_t threads,
                        WorkerPool::Spin spin = WorkerPool::LAUNCH) {
    lend_pool()->run(job, context, items, grain, threads, static_cast<long long>(spin.least.count()),
                     spin.paced ? 1 : 0);
}
} // namespace grid_host
#endif

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
inline void __syncwarp(unsigned = 0xffffffffu) {}
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
#include <tuple>
namespace grid_emu {
// Worker threads of the launches made from this thread (the CPU ABI entry sets it; <= 0: every core).
inline thread_local int launch_workers = 1;
// Whether the launches made from this thread leave the structural zeros of their outputs as the
// caller's arrays hold them (grid_cpu_keep_zeros, for a call with keep_zeros=True), and whether the
// launch a worker runs now does: grid_lane_image_store then writes the lines holding cells alone.
inline thread_local bool launch_keep_zeros = false;
inline thread_local bool keep_zeros = false;
inline thread_local std::vector<unsigned char> arena;  // this thread's shared memory

// Threads for `workers` (<= 0: every core).
inline size_t launch_threads(int workers) { return workers > 0 ? size_t(workers) : size_t(grid_host::core_count()); }

// Runs a kernel launch on the host: the blocks in contiguous ranges, claimed as the workers come
// (grid_host::WorkerPool: large ranges first, at least 1/64 of a worker's share at the end), each
// block with one thread; a worker has its own blockIdx and shared-memory arena.
template <typename... KArgs, typename... Args>
inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 /*block*/, size_t smem_size, Args... args) {
    struct Launch {
        void (*kernel)(KArgs...);
        dim3 grid;
        size_t smem_size;
        bool keep;  // launch_keep_zeros of the launching thread
        std::tuple<Args...> args;

        static void blocks(void *context, size_t from, size_t to) {
            const Launch &l = *static_cast<const Launch *>(context);
            if (arena.size() < l.smem_size + 16) arena.resize(l.smem_size + 16);
            gridDim = l.grid;
            blockDim = dim3(1, 1, 1);
            threadIdx = dim3(0, 0, 0);
            smem = arena.data();
            smem_bytes = l.smem_size;
            keep_zeros = l.keep;
            for (size_t bx = from; bx < to; ++bx) {
                blockIdx = dim3(unsigned(bx), 0, 0);
                std::apply(l.kernel, l.args);
            }
            smem = nullptr;
            smem_bytes = 0;
            keep_zeros = false;
        }
    };
    const size_t threads = launch_threads(launch_workers);
    const Launch l{kernel, grid, smem_size, launch_keep_zeros, std::tuple<Args...>(args...)};
    grid_host::run_on_pool(&Launch::blocks, const_cast<Launch *>(&l), grid.x, grid.x / (64 * threads), threads);
}

// The index of the first of `count` arrays (inputs[k]: sizes[k] values, none if null) holding a
// NaN or an inf, or -1: branch-free passes the compiler vectorises (NaN and inf have every
// exponent bit set), over `workers` threads as a launch's blocks.  (By the caller alone, the
// check of a batch of 1024 took 2-27 us here, up to a tenth of a two-thread call.)
template <typename T>
inline int first_nonfinite(const T *const *inputs, const size_t *sizes, int count, int workers) {
    struct Check {
        const T *const *inputs;
        const size_t *sizes;
        int count;
        std::atomic<int> first_bad;  // the least k seen with one (count: none)

        size_t size(int k) const { return inputs[k] != nullptr ? sizes[k] : 0; }

        // values [from, to) of the inputs laid end to end
        static void values(void *context, size_t from, size_t to) {
            Check &c = *static_cast<Check *>(context);
            size_t first = 0;  // where inputs[k] starts
            for (int k = 0; k < c.count; first += c.size(k++)) {
                if (to <= first || from >= first + c.size(k)) continue;
                const size_t lo = from > first ? from - first : 0;
                const size_t hi = to - first < c.size(k) ? to - first : c.size(k);
                if (grid_host::any_nonfinite<T, false>(nullptr, c.inputs[k] + lo, hi - lo)) {
                    int least = c.first_bad.load();
                    while (k < least && !c.first_bad.compare_exchange_weak(least, k)) {
                    }
                }
            }
        }
    };
    Check c{inputs, sizes, count, {count}};
    size_t total = 0;
    for (int k = 0; k < count; ++k) total += c.size(k);
    // chunks of at least 4 K values (~0.5 us): a smaller batch is checked by the caller alone
    grid_host::run_on_pool(&Check::values, &c, total, size_t(4096), launch_threads(workers));
    return c.first_bad.load() < count ? c.first_bad.load() : -1;
}
} // namespace grid_emu

// Several states in the lanes of one SIMD register, for the CPU build's per-state kernels: the
// per-state code is straight-line arithmetic on T, front-end bound on the CPU (g1's Minv is some
// 200 KB of machine code against a 32 KB instruction cache), so each instruction fetched does
// the work of LANES states.  Lane-wise + - * / and the functions the per-state code calls
// (grid_sqrt, grid_sincos); sin and cos lane by lane, as the scalar build computes them.
template <typename S, int L> struct grid_lanes {
    typedef S V __attribute__((vector_size(sizeof(S) * L)));
    static constexpr int LANES = L;
    V v;
    grid_lanes() = default;
    grid_lanes(S s) : v(V{} + s) {}  // every lane s
    static grid_lanes of(V x) {
        grid_lanes r;
        r.v = x;
        return r;
    }
    friend grid_lanes operator+(grid_lanes a, grid_lanes b) { return of(a.v + b.v); }
    friend grid_lanes operator-(grid_lanes a, grid_lanes b) { return of(a.v - b.v); }
    friend grid_lanes operator*(grid_lanes a, grid_lanes b) { return of(a.v * b.v); }
    friend grid_lanes operator/(grid_lanes a, grid_lanes b) { return of(a.v / b.v); }
    friend grid_lanes operator-(grid_lanes a) { return of(-a.v); }
    friend grid_lanes operator+(grid_lanes a) { return a; }
    grid_lanes &operator+=(grid_lanes b) { v += b.v; return *this; }
    grid_lanes &operator-=(grid_lanes b) { v -= b.v; return *this; }
    grid_lanes &operator*=(grid_lanes b) { v *= b.v; return *this; }
    grid_lanes &operator/=(grid_lanes b) { v /= b.v; return *this; }
};
// The lanes of T in a 32-byte register (AVX2: 4 doubles, 8 floats).
template <typename T> using grid_lanes_of = grid_lanes<T, int(32 / sizeof(T))>;

// sin and cos of every lane at once: x = k pi/2 + r (Cody-Waite, pi/2 in two parts), |r| <= pi/4,
// the Taylor series of sin r to r^15 and cos r to r^16 (truncation below 1e-16 there), then the
// quadrant k mod 4 swaps and negates.  Within a few ulp of std::sin and std::cos; a group with an
// angle beyond `limit` (where k pi/2 loses digits) takes them lane by lane.
template <typename S, int L> inline void grid_host_sincos(grid_lanes<S, L> x, grid_lanes<S, L> *s, grid_lanes<S, L> *c) {
    using V = typename grid_lanes<S, L>::V;
    typedef typename std::conditional<sizeof(S) == 8, uint64_t, uint32_t>::type B;
    typedef B U __attribute__((vector_size(sizeof(S) * L)));
    constexpr bool wide = sizeof(S) == 8;
    const S limit = wide ? S(1e5) : S(1e3);
    bool far = false;
    for (int j = 0; j < L; ++j) far |= !(std::fabs(x.v[j]) <= limit);
    if (far) {
        for (int j = 0; j < L; ++j) {
            s->v[j] = std::sin(x.v[j]);
            c->v[j] = std::cos(x.v[j]);
        }
        return;
    }
    const S magic = wide ? S(6755399441055744.0) : S(12582912.0f);  // 1.5 * 2^52, 1.5 * 2^23
    const S pio2_hi = wide ? S(1.5707963267948966) : S(1.5707963705062866);
    const S pio2_lo = wide ? S(6.123233995736766e-17) : S(-4.371138828673793e-08);
    const V t = x.v * S(0.6366197723675814) + magic;  // k = nearest integer to x 2/pi, in t's low bits
    const V k = t - magic;
    const V r = (x.v - k * pio2_hi) - k * pio2_lo;
    const V z = r * r;
    const V sr = r + r * z * (S(-1.0 / 6) + z * (S(1.0 / 120) + z * (S(-1.0 / 5040) + z * (S(1.0 / 362880) +
                 z * (S(-1.0 / 39916800) + z * (S(1.0 / 6227020800.0) + z * S(-1.0 / 1307674368000.0)))))));
    const V cr = S(1) - S(0.5) * z + z * z * (S(1.0 / 24) + z * (S(-1.0 / 720) + z * (S(1.0 / 40320) +
                 z * (S(-1.0 / 3628800) + z * (S(1.0 / 479001600) + z * (S(-1.0 / 87178291200.0) +
                 z * S(1.0 / 20922789888000.0)))))));
    const U q = (U)t;  // k mod 2^(mantissa bits), two's complement: k & 3 is the quadrant
    const U swap = -(q & 1);
    const U sb = (U)sr, cb = (U)cr;
    constexpr int sign = 8 * sizeof(S) - 2;
    s->v = (V)(((sb & ~swap) | (cb & swap)) ^ ((q & 2) << sign));
    c->v = (V)(((cb & ~swap) | (sb & swap)) ^ (((q + 1) & 2) << sign));
}
template <typename S, int L> inline grid_lanes<S, L> grid_host_sqrt(grid_lanes<S, L> x) {
    grid_lanes<S, L> r;
    for (int j = 0; j < L; ++j) r.v[j] = std::sqrt(x.v[j]);
    return r;
}

// The 4x4 transpose of rows a, b, c, d (lane j of the results: element j of each row).
template <typename W> inline void grid_transpose4(W &a, W &b, W &c, W &d) {
    const W ab0 = __builtin_shufflevector(a, b, 0, 4, 2, 6), ab1 = __builtin_shufflevector(a, b, 1, 5, 3, 7);
    const W cd0 = __builtin_shufflevector(c, d, 0, 4, 2, 6), cd1 = __builtin_shufflevector(c, d, 1, 5, 3, 7);
    a = __builtin_shufflevector(ab0, cd0, 0, 1, 4, 5);
    b = __builtin_shufflevector(ab1, cd1, 0, 1, 4, 5);
    c = __builtin_shufflevector(ab0, cd0, 2, 3, 6, 7);
    d = __builtin_shufflevector(ab1, cd1, 2, 3, 6, 7);
}

// dst[i], lane j = src[j * stride + i] for i < size: the lanes from `count` rows of src, the spare
// lanes of a partial group from row 0 (a state the caller holds valid, whose results it drops).
// Four lanes: four values of every row at a time, transposed (4 loads, not 16).
template <typename V, typename S> inline void grid_lanes_load(V *dst, const S *src, size_t stride, int size, int count) {
    const S *rows[V::LANES];
    for (int j = 0; j < V::LANES; ++j) rows[j] = src + size_t(j < count ? j : 0) * stride;
    int i = 0;
    if constexpr (V::LANES == 4) {
        for (; i + 4 <= size; i += 4) {
            typename V::V w[4];
            for (int j = 0; j < 4; ++j) std::memcpy(&w[j], rows[j] + i, sizeof(w[j]));
            grid_transpose4(w[0], w[1], w[2], w[3]);
            for (int j = 0; j < 4; ++j) dst[i + j].v = w[j];
        }
    }
    for (; i < size; ++i)
        for (int j = 0; j < V::LANES; ++j) dst[i].v[j] = rows[j][i];
}
// dst[j * stride + i] = src[i], lane j, for i < size and the first `count` lanes (four lanes: by
// transposes, as grid_lanes_load).
template <typename V, typename S> inline void grid_lanes_store(S *dst, size_t stride, const V *src, int size, int count) {
    int i = 0;
    if constexpr (V::LANES == 4) {
        for (; i + 4 <= size; i += 4) {
            typename V::V w[4] = {src[i].v, src[i + 1].v, src[i + 2].v, src[i + 3].v};
            grid_transpose4(w[0], w[1], w[2], w[3]);
            for (int j = 0; j < count; ++j) std::memcpy(dst + size_t(j) * stride + i, &w[j], sizeof(w[j]));
        }
    }
    for (; i < size; ++i)
        for (int j = 0; j < count; ++j) dst[size_t(j) * stride + i] = src[i].v[j];
}
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

// The host's sin and cos, square root (the CPU build adds them for grid_lanes).
template <typename T> inline void grid_host_sincos(T x, T *s, T *c) {
    *s = std::sin(x);
    *c = std::cos(x);
}
template <typename T> inline T grid_host_sqrt(T x) { return std::sqrt(x); }

// States per call of a per-state function: lanes of grid_lanes_of<T> in the CPU build, else one.
template <typename T> __host__ __device__ constexpr int grid_state_lanes() {
#ifdef GRID_HOST_CPU
    return grid_lanes_of<T>::LANES;
#else
    return 1;
#endif
}

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
    grid_host_sincos(x, s, c);
#endif
}

// Values a thread moves per chunk of a staged kernel's output stores (grid_core.emit.layers): all
// of a chunk's shared-memory loads are in flight together; 64 bytes keep a double chunk's registers
// (values and addresses) within what the per-state code itself needs.
template <typename T> __host__ __device__ constexpr int grid_store_chunk() { return 64 / int(sizeof(T)); }

// One flush of a per-state kernel's output ring (grid_core.emit.ring): groups g0 .. g1 - 1 of the
// table, 32 entries a group (output index | slot << 16; index 0xffff: nothing).  Entry l of a group
// is the lane l's (l, l + width, ... in a warp of width threads under 32), which writes that
// value of each of the warp's count states (SIZE outputs a state): one store instruction a state
// covers the group's runs of consecutive outputs.  tile: the warp's ring, slot s of state t at
// s * 33 + t.  A whole warp's 32 values of an entry are all loaded before any is stored (one
// shared-memory latency an entry, not one a state).  Not inlined on the GPU: one copy of the loop
// serves every flush point of the straight-line code.
#ifdef GRID_HOST_EMULATION
#define GRID_RING_NOINLINE inline
#else
#define GRID_RING_NOINLINE __noinline__
#endif
template <typename T, int SIZE>
__device__ GRID_RING_NOINLINE void grid_ring_flush(T *__restrict__ out, const T *__restrict__ tile,
                                                   const unsigned *__restrict__ table, int g0, int g1, int lane,
                                                   int width, unsigned mask, int count) {
    __syncwarp(mask);  // every lane's values in its slots
    for (int g = g0; g < g1; ++g) {
        for (int l = lane; l < 32; l += width) {
            const unsigned e = table[g * 32 + l];
            const int o = int(e & 0xffffu);
            if (o == 0xffff) continue;
            const T *t = tile + int(e >> 16) * 33;
            T *d = out + o;
            if (count == 32) {
                T v[32];
                #pragma unroll
                for (int s = 0; s < 32; ++s) v[s] = t[s];
                #pragma unroll
                for (int s = 0; s < 32; ++s) d[s * SIZE] = v[s];
            } else {
                for (int s = 0; s < count; ++s) d[size_t(s) * SIZE] = t[s];
            }
        }
    }
    __syncwarp(mask);  // the slots free for the next values
}

// The one flush of a ring that holds every output of its states (grid_core.emit.ring: a single
// flush, at the end).  The warp's count states' outputs are one contiguous block of count x SIZE
// values from out, written in order: value f of the block is output f % SIZE of state f / SIZE,
// held in slot slot_of[f % SIZE] (tile: slot s of state t at s * 33 + t).  Consecutive lanes take
// consecutive values, so a store instruction writes whole lines (the group flush cuts them at
// each state's row); on the GPU, in float and with the block 16-byte aligned, four values a lane
// and one 16-byte store (a quad of a SIZE divisible by 4 never leaves its state, and its four
// slots are one 8-byte load).
template <typename T, int SIZE>
__device__ GRID_RING_NOINLINE void grid_ring_flush_whole(T *__restrict__ out, const T *__restrict__ tile,
                                                         const unsigned short *__restrict__ slot_of, int lane,
                                                         int width, unsigned mask, int count) {
    __syncwarp(mask);  // every lane's values in its slots
    const int total = count * SIZE;
    int first = 0;  // the values before it stored four at a time
#ifdef __CUDA_ARCH__
    if (sizeof(T) == 4 && width == 32 && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
        const int quads = total / 4;
        #pragma unroll 4
        for (int k = lane; k < quads; k += 32) {
            const int f = 4 * k, s = f / SIZE, o = f - s * SIZE;
            float v[4];
            if (SIZE % 4 == 0) {
                const uint2 w = *reinterpret_cast<const uint2 *>(slot_of + o);  // slots o .. o + 3
                v[0] = float(tile[int(w.x & 0xffffu) * 33 + s]);
                v[1] = float(tile[int(w.x >> 16) * 33 + s]);
                v[2] = float(tile[int(w.y & 0xffffu) * 33 + s]);
                v[3] = float(tile[int(w.y >> 16) * 33 + s]);
            } else {
                #pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int su = o + u < SIZE ? s : s + 1, ou = o + u < SIZE ? o + u : o + u - SIZE;
                    v[u] = float(tile[int(slot_of[ou]) * 33 + su]);
                }
            }
            reinterpret_cast<float4 *>(out)[k] = make_float4(v[0], v[1], v[2], v[3]);
        }
        first = 4 * quads;
    }
#endif
    for (int f = first + lane; f < total; f += width) {
        const int s = f / SIZE;
        out[f] = tile[int(slot_of[f - s * SIZE]) * 33 + s];
    }
    __syncwarp(mask);  // the slots free for the next values
}

template <typename T> __host__ __device__ __forceinline__ T grid_sqrt(T x) {
#if defined(__CUDA_ARCH__)
    return sqrt(x);
#else
    return grid_host_sqrt(x);
#endif
}

#endif // GRID_PRELUDE_INCLUDED
