// Support code of the generated C ABI (grid_core.abi): workspace and staging buffers, the
// host form's copy pool.  Inlined into every ABI translation unit after the header; it needs
// the header's prelude (the CUDA runtime, or its host emulation) and nothing robot-specific.
namespace {
// Global workspace for spilled tiers, one per stream (concurrent launches never share one).
template <typename T> struct Workspace {
    T *ptr = nullptr;
    size_t bytes = 0;
    cudaError_t ensure(size_t need) {
        if (need <= bytes) return cudaSuccess;
        if (ptr) cudaFree(ptr);
        ptr = nullptr; bytes = 0;
        cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&ptr), need);
        if (err == cudaSuccess) bytes = need;
        return err;
    }
};
std::mutex workspace_lock;
// Fill outputs with NaN (all bits set) before each host-path launch: tests see unwritten elements.
int poison_outputs = 0;
template <typename T> Workspace<T> &workspace(void *stream) {
    static std::map<void *, Workspace<T>> per_stream;
    return per_stream[stream];
}

#ifdef GRID_HOST_EMULATION
// The pinned/mapped-memory subset the host form uses, on host memory.
enum : unsigned { cudaStreamNonBlocking = 1, cudaHostAllocMapped = 2, cudaHostAllocWriteCombined = 4 };
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { return cudaStreamCreate(s); }
inline cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) { return cudaMalloc(p, n); }
inline cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned) { *d = h; return cudaSuccess; }
#endif

// Host-form buffers, one set per entry point: pinned staging + device copies (copy engine),
// or mapped pinned memory the kernel reads and writes in place.
struct Buffer { void *device = nullptr; void *pinned = nullptr; size_t bytes = 0; bool mapped = false; };
struct Staging {
    std::mutex lock;
    cudaStream_t stream = nullptr;
    bool has_stream = false;
    std::vector<Buffer> buffers;
    // index 0/1: outputs/inputs through the copy engine; 2/3: outputs/inputs mapped
    cudaError_t ensure(size_t index, size_t bytes) {
        if (!has_stream) {
            // non-blocking: never serialised against other libraries' work on the legacy stream
            cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
            if (err != cudaSuccess) return err;
            has_stream = true;
        }
        if (buffers.size() <= index) buffers.resize(index + 1);
        Buffer &b = buffers[index];
        if (bytes <= b.bytes) return cudaSuccess;
        if (b.device && !b.mapped) cudaFree(b.device);
        if (b.pinned) cudaFreeHost(b.pinned);
        b.device = b.pinned = nullptr;
        b.bytes = 0;
        b.mapped = index >= 2;
        cudaError_t err;
        if (b.mapped) {
            // inputs are only written by the CPU (write-combined is faster there); outputs are read back
            err = cudaHostAlloc(&b.pinned, bytes, index == 3 ? cudaHostAllocMapped | cudaHostAllocWriteCombined
                                                             : cudaHostAllocMapped);
            if (err == cudaSuccess) err = cudaHostGetDevicePointer(&b.device, b.pinned, 0);
        } else {
            err = cudaMalloc(&b.device, bytes);
            if (err == cudaSuccess) err = cudaMallocHost(&b.pinned, bytes);
        }
        if (err == cudaSuccess) b.bytes = bytes;
        return err;
    }
};
}  // namespace

#define GRID_ABI_TRY(expr) do { cudaError_t e_ = (expr); if (e_ != cudaSuccess) return int(e_); } while (0)
// Host-path return code for a NaN or inf in state input k (k counted from 0): -1000 - k.
#define GRID_ABI_NONFINITE_INPUT (-1000)
// Host-path return code for a free-flyer quaternion of q that is not of unit norm.
#define GRID_ABI_BAD_QUATERNION (-900)

namespace {
// Copies n values and tells whether all are finite (NaN and inf have every exponent bit set):
// one branch-free pass the compiler vectorises, so the check costs no second read.
template <typename T> bool copy_finite(T *dst, const T *src, size_t n) {
    using U = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
    const U mask = sizeof(T) == 4 ? U(0x7f800000u) : U(0x7ff0000000000000ull);
    U bad = 0;
    for (size_t i = 0; i < n; ++i) {
        U bits;
        std::memcpy(&bits, src + i, sizeof(T));
        std::memcpy(dst + i, &bits, sizeof(T));
        bad |= U((bits & mask) == mask);
    }
    return bad == 0;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Helper threads for the host form's copies.  A job is `count` independent chunks; the caller
// and every helper awake claim chunks from one counter, so the caller never waits for a helper
// that is asleep: it takes whatever nobody else has.  Helpers spin for HELPER_SPIN after each
// job (calls in a loop find them awake), then sleep.  GRID_HOST_THREADS sets how many helpers
// there are (default: up to 3, one fewer than the cores; 0: none).  The pool is never
// destroyed: its threads end with the process.
class HostPool {
  public:
    using Job = void (*)(void *context, size_t index);

    static HostPool &instance() {
        static HostPool *pool = new HostPool();
        return *pool;
    }

    // Runs job(context, i) for every i in [0, count); returns once all have run.
    void run(Job job, void *context, size_t count) {
        std::unique_lock<std::mutex> busy(run_lock_, std::try_to_lock);
        // no helpers, another thread's job under way, or a forked child (no threads there)
        if (helpers_ == 0 || !busy.owns_lock() || getpid() != pid_) {
            for (size_t i = 0; i < count; ++i) job(context, i);
            return;
        }
        {
            std::lock_guard<std::mutex> guard(lock_);
            job_ = job;
            context_ = context;
            count_ = count;
            next_.store(0);
            done_.store(0);
            generation_.fetch_add(1, std::memory_order_release);
            if (sleeping_ > 0) wake_.notify_all();
        }
        claim(job, context, count);
        while (done_.load(std::memory_order_acquire) < count) cpu_relax();
        {
            std::lock_guard<std::mutex> guard(lock_);
            job_ = nullptr;  // no helper joins this job any more
        }
        while (joined_.load(std::memory_order_acquire) != 0) cpu_relax();  // those in it find no chunk left
    }

  private:
    static constexpr std::chrono::microseconds HELPER_SPIN{100};

    HostPool() : pid_(getpid()) {
        const unsigned cores = std::thread::hardware_concurrency();
        const char *env = std::getenv("GRID_HOST_THREADS");
        helpers_ = env != nullptr ? std::max(0, std::atoi(env)) : int(std::min(3u, cores > 1 ? cores - 1 : 0u));
        for (int i = 0; i < helpers_; ++i) std::thread([this] { serve(); }).detach();
    }

    void claim(Job job, void *context, size_t count) {
        for (size_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < count;) {
            job(context, i);
            done_.fetch_add(1, std::memory_order_release);
        }
    }

    void serve() {
        uint64_t seen = generation_.load();
        for (;;) {
            const auto until = std::chrono::steady_clock::now() + HELPER_SPIN;
            while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until)
                cpu_relax();
            std::unique_lock<std::mutex> guard(lock_);
            if (generation_.load() == seen) {
                ++sleeping_;
                wake_.wait(guard, [&] { return generation_.load() != seen; });
                --sleeping_;
            }
            seen = generation_.load();
            if (job_ == nullptr) continue;  // that job is already over
            const Job job = job_;
            void *const context = context_;
            const size_t count = count_;
            joined_.fetch_add(1);
            guard.unlock();
            claim(job, context, count);
            joined_.fetch_sub(1, std::memory_order_release);
        }
    }

    const pid_t pid_;
    int helpers_ = 0;
    std::mutex run_lock_;  // one job at a time
    std::mutex lock_;      // guards job_, context_, count_, sleeping_ and the start of a job
    std::condition_variable wake_;
    Job job_ = nullptr;
    void *context_ = nullptr;
    size_t count_ = 0;
    int sleeping_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<size_t> next_{0}, done_{0};
    std::atomic<int> joined_{0};
};

// One contiguous copy of a host call: a state input into staging, its finiteness reported as
// bit `input` of copy_segments' result, or an output out of staging (input < 0).
struct Segment {
    char *dst;
    const char *src;
    size_t bytes;
    int input;
};

// Batches from this many bytes are copied in chunks of GRID_ABI_CHUNK_BYTES by the pool.
#define GRID_ABI_PARALLEL_MIN_BYTES (size_t(64) << 10)
#define GRID_ABI_CHUNK_BYTES (size_t(16) << 10)

template <typename T> uint32_t copy_range(const Segment &s, size_t from, size_t to) {
    if (s.input < 0) {
        std::memcpy(s.dst + from, s.src + from, to - from);
        return 0;
    }
    const bool finite = copy_finite(reinterpret_cast<T *>(s.dst + from), reinterpret_cast<const T *>(s.src + from),
                                    (to - from) / sizeof(T));
    return finite ? 0u : 1u << s.input;
}

// Runs every copy; returns the bits of the inputs holding a NaN or inf.
template <typename T> uint32_t copy_segments(const Segment *segments, int count) {
    size_t total = 0;
    for (int i = 0; i < count; ++i) total += segments[i].bytes;
    uint32_t bad = 0;
    if (total < GRID_ABI_PARALLEL_MIN_BYTES) {
        for (int i = 0; i < count; ++i) bad |= copy_range<T>(segments[i], 0, segments[i].bytes);
        return bad;
    }
    struct Chunk {
        const Segment *segment;
        size_t from, to;  // bytes, multiples of sizeof(T)
    };
    struct Context {
        std::vector<Chunk> chunks;
        std::atomic<uint32_t> bad{0};
    } context;
    for (int i = 0; i < count; ++i)
        for (size_t from = 0; from < segments[i].bytes; from += GRID_ABI_CHUNK_BYTES)
            context.chunks.push_back({&segments[i], from, std::min(from + GRID_ABI_CHUNK_BYTES, segments[i].bytes)});
    HostPool::instance().run(
        [](void *c, size_t index) {
            Context &x = *static_cast<Context *>(c);
            const Chunk &k = x.chunks[index];
            const uint32_t b = copy_range<T>(*k.segment, k.from, k.to);
            if (b != 0) x.bad.fetch_or(b);
        },
        &context, context.chunks.size());
    return context.bad.load();
}
}  // namespace
