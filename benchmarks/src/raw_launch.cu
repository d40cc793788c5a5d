// The raw C++ launch of the generated inverse dynamics, as a shared library the runtime
// benchmark (benchmarks/gpu_check.py, phase runtime) calls in the same process as
// RobotHandle: its per-call overhead is measured against these, round by round, so that the
// machine's drift between rounds cancels.  Build: nvcc -include <robot>/grid.cuh -shared.
#include <algorithm>
#include <chrono>
#include <vector>

namespace {
using T = float;
using Clock = std::chrono::high_resolution_clock;

cudaError_t launch(T *tau, const T *q, const T *qd, const T *qdd, int n, cudaStream_t s) {
    grid::LaunchConfig cfg;
    return grid::inverse_dynamics_launch<T>(tau, q, qd, qdd, nullptr, nullptr, n, cfg, nullptr, 0, s);
}

double median(std::vector<double> &t) {
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}
}  // namespace

extern "C" {
// Median µs of launch + cudaStreamSynchronize over `repeats` (after 20 warm-ups); -1 on error.
double raw_resident_us(T *tau, const T *q, const T *qd, const T *qdd, int n, void *stream, int repeats) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    std::vector<double> t;
    for (int i = 0; i < repeats + 20; ++i) {
        auto t0 = Clock::now();
        if (launch(tau, q, qd, qdd, n, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess) return -1;
        auto t1 = Clock::now();
        if (i >= 20) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return median(t);
}

// Host µs per launch among 100 back-to-back launches (one synchronisation per round), median of rounds.
double raw_launch_us(T *tau, const T *q, const T *qd, const T *qdd, int n, void *stream, int rounds) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    std::vector<double> t;
    for (int r = 0; r < rounds + 2; ++r) {
        if (cudaStreamSynchronize(s) != cudaSuccess) return -1;
        auto t0 = Clock::now();
        for (int i = 0; i < 100; ++i) launch(tau, q, qd, qdd, n, s);
        auto t1 = Clock::now();
        if (cudaStreamSynchronize(s) != cudaSuccess) return -1;
        if (r >= 2) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 100);
    }
    return median(t);
}

// Median µs of `k` launches in a row and one synchronisation, each launch's qdd the previous
// one's tau (alternating between tau and scratch), over `repeats` (after 10 warm-ups): what a
// chain of calls inside one program costs, as JAX's jitted chain in the runtime phase.
double raw_chain_us(T *tau, const T *q, const T *qd, const T *qdd, T *scratch, int n, void *stream, int k,
                    int repeats) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    std::vector<double> t;
    for (int r = 0; r < repeats + 10; ++r) {
        auto t0 = Clock::now();
        for (int i = 0; i < k; ++i) {
            T *out = i % 2 == 0 ? tau : scratch;
            const T *acc = i == 0 ? qdd : (i % 2 == 0 ? scratch : tau);
            if (launch(out, q, qd, acc, n, s) != cudaSuccess) return -1;
        }
        if (cudaStreamSynchronize(s) != cudaSuccess) return -1;
        auto t1 = Clock::now();
        if (r >= 10) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return median(t);
}

// A non-blocking stream of its own (never serialised against another library's streams).
void *raw_stream_create() {
    cudaStream_t s = nullptr;
    return cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess ? static_cast<void *>(s) : nullptr;
}
}
