// Support code of the generated C ABI (grid_core.abi): workspace and staging buffers, the
// host form's staging copies.  Inlined into every ABI translation unit after the header; it needs
// the header's prelude (the CUDA runtime, or its host emulation) and nothing robot-specific.

// Shared by every translation unit of a library (the GPU library compiles each algorithm's
// entries in a unit of its own): C++17 inline variables and an inline function's statics have one
// definition in the library (-Bsymbolic keeps them its own beside another library's).
namespace grid_abi_shared {
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
inline std::mutex workspace_lock;
// Fill outputs with NaN (all bits set) before each host-path launch: tests see unwritten elements.
inline int poison_outputs = 0;
template <typename T> Workspace<T> &workspace(void *stream) {
    static std::map<void *, Workspace<T>> per_stream;
    return per_stream[stream];
}
}  // namespace grid_abi_shared
using namespace grid_abi_shared;

namespace {
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
// The threads that stage a host call's large batches: the caller and GRID_HOST_THREADS helpers
// (default: up to 3, one fewer than the cores; 0: none), read once.  They are the CPU build's pool
// (grid_host::WorkerPool in the header's prelude), spinning a fixed 100 us after each job.
inline size_t copy_threads() {
    static const size_t threads = [] {
        const unsigned cores = grid_host::core_count();
        const char *env = std::getenv("GRID_HOST_THREADS");
        const int helpers = env != nullptr ? std::max(0, std::atoi(env)) : int(std::min(3u, cores - 1));
        return size_t(helpers) + 1;
    }();
    return threads;
}
constexpr grid_host::WorkerPool::Spin COPY_SPIN{std::chrono::microseconds(100), false};

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
    const bool bad = grid_host::any_nonfinite<T, true>(reinterpret_cast<T *>(s.dst + from),
                                                        reinterpret_cast<const T *>(s.src + from), (to - from) / sizeof(T));
    return bad ? 1u << s.input : 0u;
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
    grid_host::run_on_pool(
        [](void *c, size_t begin, size_t end) {
            Context &x = *static_cast<Context *>(c);
            uint32_t b = 0;
            for (size_t index = begin; index < end; ++index) {
                const Chunk &k = x.chunks[index];
                b |= copy_range<T>(*k.segment, k.from, k.to);
            }
            if (b != 0) x.bad.fetch_or(b);
        },
        &context, context.chunks.size(), 1, copy_threads(), COPY_SPIN);
    return context.bad.load();
}
}  // namespace
