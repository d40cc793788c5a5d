// Timing and sanitizer driver for one algorithm of a generated header, through its launcher.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -include grid.cuh -DBENCH_ADAPTER='"adapter.h"' bench.cu -o bench
//   ./bench time  --robot NAME --sizes 1,16,... --repeats 200 --warmup 20 --json out.json [--io-max-n N]
//   ./bench once  --sizes 262144       (one launch of the auto layout a size: for Nsight Compute)
//   ./bench check                      (every layout, tier and block size on small batches;
//                                       run under compute-sanitizer memcheck / racecheck)
//
// adapter.h (written by benchmarks/gpu_check.py from the algorithm's layer signatures) names
// the algorithm's launcher, its per-state input and output sizes and its host wrapper, so one
// driver serves every emitted algorithm.
//
// Kernel-only times are single launches bracketed by cudaEvents (median over repeats
// after warm-up), the same way as an empty kernel of the same grid, timed in the same
// run (the launch floor).  "graph" replays a captured CUDA graph of one launch.
// "resident" is host-timed around launch + synchronise (upstream's release method).
// "io" is the host wrapper: pinned inputs copied in, kernel, outputs copied back.
// "stream" (auto rows) is a kernel that only reads the batch's inputs and writes its outputs'
// bytes, coalesced: the store floor, timed in the same run as the launch floor.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#ifndef GRID_NS
#define GRID_NS grid
#endif
namespace g = GRID_NS;
using T = float;
#include BENCH_ADAPTER

__global__ void empty_kernel() {}

// The bytes a batch moves, and nothing else: reads `in_values` values and writes `out_values`,
// coalesced, four at a time, one pass (thread i: values 4i .. 4i+3 of each), no loop: the store
// floor beside the launch floor, what a kernel that only moves the algorithm's inputs and outputs
// takes at this N.
__global__ void stream_kernel(const T *__restrict__ in, size_t in_values, T *__restrict__ out, size_t out_values) {
    const size_t i = 4 * (blockIdx.x * size_t(blockDim.x) + threadIdx.x);
    T acc = 0;
    if (i + 4 <= in_values) {
        const float4 v = *reinterpret_cast<const float4 *>(in + i);
        acc = v.x + v.y + v.z + v.w;
    } else {
        for (size_t k = i; k < in_values; ++k) acc += in[k];
    }
    if (i + 4 <= out_values) *reinterpret_cast<float4 *>(out + i) = make_float4(acc, acc + 1, acc + 2, acc + 3);
    else
        for (size_t k = i; k < out_values; ++k) out[k] = acc;
}

#define CHECK(x) gpuErrchk(x)

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// Random N(0, 1) inputs (a free-flyer's quaternion is normalised by the kernel), one buffer per
// input and output; optional inputs (f_ext) are timed absent and checked present.
struct Buffers {
    int n;
    T *in[ad::NUM_IN], *out[ad::NUM_OUT], *ws;
    size_t ws_bytes;
    explicit Buffers(int n_) : n(n_) {
        std::mt19937 rng(1234 + n_);
        std::normal_distribution<float> nd(0.f, 1.f);
        for (int k = 0; k < ad::NUM_IN; ++k) {
            std::vector<T> h(size_t(n) * ad::IN_SIZE[k]);
            for (auto &x : h) x = ad::IN_OPTIONAL[k] ? T(0.5) : nd(rng);
            CHECK(cudaMalloc(&in[k], h.size() * sizeof(T)));
            CHECK(cudaMemcpy(in[k], h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
        }
        for (int k = 0; k < ad::NUM_OUT; ++k) CHECK(cudaMalloc(&out[k], size_t(n) * ad::OUT_SIZE[k] * sizeof(T)));
        ws_bytes = size_t(g::MAX_WORKSPACE_BLOCKS) * ad::workspace_bytes_minimal() + 16;
        CHECK(cudaMalloc(&ws, ws_bytes));
    }
    size_t in_values() const {  // the inputs timed (optional ones absent)
        size_t v = 0;
        for (int k = 0; k < ad::NUM_IN; ++k) v += ad::IN_OPTIONAL[k] ? 0 : size_t(n) * ad::IN_SIZE[k];
        return v;
    }
    size_t out_values() const {
        size_t v = 0;
        for (int k = 0; k < ad::NUM_OUT; ++k) v += size_t(n) * ad::OUT_SIZE[k];
        return v;
    }
    ~Buffers() {
        for (T *p : in) cudaFree(p);
        for (T *p : out) cudaFree(p);
        cudaFree(ws);
    }
};

static cudaError_t launch(Buffers &b, g::LaunchConfig cfg, cudaStream_t s, bool optional = false) {
    T *in[ad::NUM_IN];
    for (int k = 0; k < ad::NUM_IN; ++k) in[k] = ad::IN_OPTIONAL[k] && !optional ? nullptr : b.in[k];
    return ad::launch(b.out, in, b.n, cfg, b.ws, b.ws_bytes, s);
}

static void grid_of(const Buffers &b, g::LaunchConfig cfg, int &blocks, int &threads) {
    if (ad::resolve_layout(b.n, cfg.layout) == g::LAYOUT_PER_STATE) {
        // the plain per-state kernel's grid, as its launcher picks it (the staged one's blocks are
        // at most as wide)
        threads = cfg.threads > 0 ? cfg.threads : ad::PER_STATE_SPREAD ?
            ad::spread_threads(b.n, ad::PER_STATE_THREADS) : ad::PER_STATE_THREADS;
        blocks = (b.n + threads - 1) / threads;
    } else {
        threads = cfg.threads > 0 ? cfg.threads : g::MAX_PERF_LEVEL_THREADS;
        blocks = b.n;
    }
}

template <typename F> static double time_events(F f, int repeats, int warmup, cudaStream_t s) {
    cudaEvent_t a, z;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&z));
    std::vector<double> t;
    for (int i = 0; i < warmup + repeats; ++i) {
        CHECK(cudaEventRecord(a, s));
        f();
        CHECK(cudaEventRecord(z, s));
        CHECK(cudaEventSynchronize(z));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, z));
        if (i >= warmup) t.push_back(ms * 1000.0);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(z);
    return median(t);
}

template <typename F> static double time_host(F f, int repeats, int warmup, cudaStream_t s) {
    std::vector<double> t;
    for (int i = 0; i < warmup + repeats; ++i) {
        auto t0 = std::chrono::high_resolution_clock::now();
        f();
        CHECK(cudaStreamSynchronize(s));
        auto t1 = std::chrono::high_resolution_clock::now();
        if (i >= warmup) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return median(t);
}

static double time_graph(Buffers &b, g::LaunchConfig cfg, cudaStream_t s, int repeats, int warmup, bool empty) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    int blocks, threads;
    grid_of(b, cfg, blocks, threads);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    if (empty) empty_kernel<<<blocks, threads, 0, s>>>();
    else CHECK(launch(b, cfg, s));
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    double t = time_events([&] { CHECK(cudaGraphLaunch(exec, s)); }, repeats, warmup, s);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return t;
}

// The stream kernel on buffers of the batch's input and output sizes: kernel and graph times.
static void time_stream(const Buffers &b, cudaStream_t s, int repeats, int warmup, double &kernel, double &graph) {
    T *in, *out;
    const size_t ni = b.in_values(), no = b.out_values();
    CHECK(cudaMalloc(&in, std::max<size_t>(ni, 1) * sizeof(T)));
    CHECK(cudaMalloc(&out, std::max<size_t>(no, 1) * sizeof(T)));
    CHECK(cudaMemset(in, 0, std::max<size_t>(ni, 1) * sizeof(T)));
    const size_t most = std::max(ni, no);
    const int threads = 256, blocks = int(std::max<size_t>(1, (most + 4 * threads - 1) / (4 * threads)));
    kernel = time_events([&] { stream_kernel<<<blocks, threads, 0, s>>>(in, ni, out, no); }, repeats, warmup, s);
    cudaGraph_t g_;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    stream_kernel<<<blocks, threads, 0, s>>>(in, ni, out, no);
    CHECK(cudaStreamEndCapture(s, &g_));
    CHECK(cudaGraphInstantiate(&exec, g_, 0));
    graph = time_events([&] { CHECK(cudaGraphLaunch(exec, s)); }, repeats, warmup, s);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g_);
    cudaFree(in);
    cudaFree(out);
}

static bool stage_io = false;  // --stage-io 1: the launch hint LaunchConfig::stage_io on every timed launch
// --io-max-n N: the host layer's rows (init_gridData allocates every algorithm of the header, pinned
// and on the device) only up to N states; beyond, they print -1 and the kernel rows are still timed
static long io_max_n = 1L << 40;

// A JSON array of rows, to a file or stdout.
static FILE *json_open(const std::string &json) {
    FILE *out = json.empty() ? stdout : std::fopen(json.c_str(), "w");
    std::fprintf(out, "[\n");
    return out;
}

static void json_close(FILE *out) {
    std::fprintf(out, "\n]\n");
    if (out != stdout) std::fclose(out);
}

static int run_time(const std::string &robot, const std::vector<int> &sizes, int repeats, int warmup,
                    const std::string &json) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    FILE *out = json_open(json);
    bool first = true;
    for (int n : sizes) {
        Buffers b(n);
        for (int layout : {g::LAYOUT_AUTO, g::LAYOUT_BLOCK, g::LAYOUT_PER_STATE}) {
            if (layout == g::LAYOUT_BLOCK && n > 65536) continue;  // one block per state: not this regime
            g::LaunchConfig cfg;
            cfg.layout = layout;
            cfg.stage_io = stage_io;
            int blocks, threads;
            grid_of(b, cfg, blocks, threads);
            auto empty_launch = [&] { empty_kernel<<<blocks, threads, 0, s>>>(); };  // the launch floor's kernel
            double kernel = time_events([&] { CHECK(launch(b, cfg, s)); }, repeats, warmup, s);
            double empty = time_events(empty_launch, repeats, warmup, s);
            double graph = time_graph(b, cfg, s, repeats, warmup, false);
            double graph_empty = time_graph(b, cfg, s, repeats, warmup, true);
            double resident = time_host([&] { CHECK(launch(b, cfg, s)); }, repeats, warmup, s);
            // the resident floor: an empty kernel on the same grid, host-timed launch and synchronisation
            // (what no kernel of this grid can go under on this host and driver)
            double resident_empty = time_host(empty_launch, repeats, warmup, s);
            // the host layer: by size, forced copy, forced mapped, forced mapped and staged
            double io = -1, io_copy = -1, io_mapped = -1, io_mapped_staged = -1;
            double stream = -1, graph_stream = -1;  // the stream kernel (the batch's bytes moved, nothing else)
            if (layout == g::LAYOUT_AUTO) time_stream(b, s, repeats, warmup, stream, graph_stream);
            if (layout == g::LAYOUT_AUTO && n <= io_max_n) {
                g::gridData<T> *hd = g::init_gridData<T>(n);
                cudaStream_t *streams = g::init_grid_streams<T>();
                std::mt19937 rng(7);
                std::normal_distribution<float> nd(0.f, 1.f);
                for (size_t i = 0; i < size_t(n) * (g::NUM_POS + g::NUM_VEL); ++i) hd->h_q_qd[i] = nd(rng);
                for (size_t i = 0; i < size_t(n) * g::NUM_VEL; ++i) hd->h_u[i] = nd(rng);
                for (int transfer : {0, 1, 2, 3}) {
                    hd->transfer = transfer;
                    const double t = time_host([&] {
                        ad::host(hd, nullptr, n, dim3(n), dim3(g::MAX_PERF_LEVEL_THREADS), streams);
                    }, std::max(20, repeats / 4), 5, s);
                    (transfer == 0 ? io : transfer == 1 ? io_copy : transfer == 2 ? io_mapped : io_mapped_staged) = t;
                }
                g::close_grid_streams(streams);
                g::close_grid<T>(hd);
            }
            const char *lname = layout == g::LAYOUT_AUTO ? "auto" : (layout == g::LAYOUT_BLOCK ? "block" : "per_state");
            int resolved = ad::resolve_layout(n, layout);
            std::fprintf(out,
                "%s  {\"robot\": \"%s\", \"algorithm\": \"%s\", \"n\": %d, \"layout\": \"%s\", "
                "\"resolved\": \"%s\", \"blocks\": %d, \"threads\": %d, \"kernel_us\": %.3f, \"empty_us\": %.3f, "
                "\"graph_us\": %.3f, \"graph_empty_us\": %.3f, \"resident_us\": %.3f, \"resident_empty_us\": %.3f, "
                "\"io_us\": %.3f, "
                "\"io_copy_us\": %.3f, \"io_mapped_us\": %.3f, \"io_mapped_staged_us\": %.3f, \"stream_us\": %.3f, \"graph_stream_us\": %.3f}",
                first ? "" : ",\n", robot.c_str(), ad::ALGO, n, lname,
                resolved == g::LAYOUT_PER_STATE ? "per_state" : "block", blocks, threads, kernel, empty, graph,
                graph_empty, resident, resident_empty, io, io_copy, io_mapped, io_mapped_staged, stream, graph_stream);
            first = false;
            std::fflush(out);
        }
    }
    json_close(out);
    return 0;
}

// Every layout, tier and block size on small batches (with and without the optional inputs),
// plus the host wrapper; every config's results must equal the first block-layout run's.
// Normwise per state and output, as the tests judge (rel_error): an entry of Minv or qdd near zero
// beside large ones differs between layouts by the rounding of the large ones (float32 on a
// humanoid, cond(M) ~ 1e5), which an elementwise comparison would call a mismatch.
static bool same(const std::vector<T> &a, const std::vector<T> &b, const char *what = nullptr) {
    size_t per_state = 0;
    for (int o = 0; o < ad::NUM_OUT; ++o) per_state += ad::OUT_SIZE[o];
    const size_t n = a.size() / per_state;
    size_t at = 0;  // fetch's layout: each output's states one after another
    double worst = 0;  // the largest diff / (1 + scale) over the states and outputs, the first NaN else
    int output = -1, state = -1;
    for (int o = 0; o < ad::NUM_OUT; ++o) {
        for (size_t k = 0; k < n; ++k) {
            double diff = 0, scale = 0;
            for (size_t i = 0; i < ad::OUT_SIZE[o]; ++i, ++at) {
                // a NaN stays (std::max would drop it): a cell left as poison() wrote it, or not finite
                const double d = double(std::abs(a[at] - b[at]));
                if (std::isnan(d) || d > diff) diff = d;
                scale = std::max(scale, double(std::abs(b[at])));
            }
            const double rel = diff / (1.0 + scale);
            if (!std::isnan(worst) && (std::isnan(rel) || rel > worst)) { worst = rel; output = o; state = int(k); }
        }
    }
    const bool ok = worst <= 1e-4;
    // what differs, and by how much: a layout's rounding (float32, an ill-conditioned M) or a defect
    if (!ok && what) std::printf("check: %s differs: output %d, state %d, %.3g of 1 + its largest value\n", what, output,
                                 state, worst);
    return ok;
}

static void fetch(const Buffers &b, std::vector<T> &got) {
    size_t at = 0;
    for (int k = 0; k < ad::NUM_OUT; ++k) {
        const size_t count = size_t(b.n) * ad::OUT_SIZE[k];
        CHECK(cudaMemcpy(got.data() + at, b.out[k], count * sizeof(T), cudaMemcpyDeviceToHost));
        at += count;
    }
}

static void poison(const Buffers &b) {
    for (int k = 0; k < ad::NUM_OUT; ++k) CHECK(cudaMemset(b.out[k], 0xff, size_t(b.n) * ad::OUT_SIZE[k] * sizeof(T)));
}

static int run_check() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    const int n = 37;
    Buffers b(n);
    std::vector<T> first(b.out_values()), got(first.size());
    int failures = 0, runs = 0;
    const int tier_max[3] = {g::tier_max_threads<g::TIER_SHARED>(), g::tier_max_threads<g::TIER_LITE>(),
                             g::tier_max_threads<g::TIER_MINIMAL>()};
    for (int optional = 0; optional < (ad::HAS_OPTIONAL ? 2 : 1); ++optional) {
        bool have_first = false;
        for (int tier = 0; tier < 3; ++tier) {
            for (int threads : {32, 64, 128, g::MAX_PERF_LEVEL_THREADS, tier_max[tier]}) {
                if (threads > tier_max[tier]) continue;
                for (int blocks : {0, 5}) {
                    g::LaunchConfig cfg;
                    cfg.layout = g::LAYOUT_BLOCK; cfg.tier = tier; cfg.threads = threads; cfg.blocks = blocks;
                    poison(b);
                    CHECK(launch(b, cfg, s, optional));
                    CHECK(cudaStreamSynchronize(s));
                    fetch(b, got);
                    if (!have_first) { first = got; have_first = true; }
                    char what[96];
                    std::snprintf(what, sizeof what, "block tier %d threads %d blocks %d%s", tier, threads, blocks,
                                  optional ? " optional inputs" : "");
                    failures += !same(got, first, what);
                    ++runs;
                }
            }
        }
        // per-state, plain and staged through shared memory (stage_io), a few blocks too: grid-stride.
        // A robot too large to stage whole takes stage_io through each warp's ring (where it has
        // one): 40 threads make a partial second warp, 1 and 8 a lone partial warp (the launch spread
        // over the SMs), one block rounds of states
        for (int threads : {32, 64, 128, -32, -40, -64, -1, -8}) {
            g::LaunchConfig cfg;
            cfg.layout = g::LAYOUT_PER_STATE; cfg.threads = std::abs(threads);
            cfg.stage_io = threads < 0;
            const bool whole = ad::staged_threads() > 0;
            if (cfg.stage_io && whole && (cfg.threads > ad::staged_threads() || cfg.threads % 32)) continue;
            if (cfg.stage_io) cfg.blocks = 1;
            poison(b);
            CHECK(launch(b, cfg, s, optional));
            CHECK(cudaStreamSynchronize(s));
            fetch(b, got);
            char what[96];
            std::snprintf(what, sizeof what, "per_state threads %d%s%s", cfg.threads, cfg.stage_io ? " staged" : "",
                          optional ? " optional inputs" : "");
            failures += !same(got, first, what);
            ++runs;
        }
    }
    // the host layer (gridData, streams, robotModel): block and per-state regimes through mapped
    // memory, and a batch through the copy engine; its results must equal the launcher's on the
    // same inputs (those gridData holds, optional inputs absent)
    g::robotModel<T> *model = g::init_robotModel<T>();
    cudaStream_t *streams = g::init_grid_streams<T>();
    std::mt19937 hrng(99);
    std::normal_distribution<float> hnd(0.f, 1.f);
    // (batch, transfer): by size on both sides of the rule, and each forced the other way
    const int cases[][2] = {{3, 0}, {300, 0}, {ad::HOST_COPY_N, 0}, {3, 1}, {ad::HOST_COPY_N, 2}};
    for (const auto &c : cases) {
        const int m = c[0];
        g::gridData<T> *hd = g::init_gridData<T>(m);
        hd->transfer = c[1];
        for (size_t i = 0; i < size_t(m) * (g::NUM_POS + g::NUM_VEL); ++i) hd->h_q_qd[i] = hnd(hrng);
        for (size_t i = 0; i < size_t(m) * g::NUM_VEL; ++i) hd->h_u[i] = hnd(hrng);
        ad::host(hd, model, m, dim3(m), dim3(64), streams);
        Buffers hb(m);
        std::vector<T> hin[ad::NUM_IN];
        for (int k = 0; k < ad::NUM_IN; ++k) hin[k].assign(size_t(m) * ad::IN_SIZE[k], T(0));
        ad::host_inputs(hd, m, hin);
        for (int k = 0; k < ad::NUM_IN; ++k)
            CHECK(cudaMemcpy(hb.in[k], hin[k].data(), hin[k].size() * sizeof(T), cudaMemcpyHostToDevice));
        poison(hb);
        CHECK(launch(hb, g::LaunchConfig(), s));
        CHECK(cudaStreamSynchronize(s));
        std::vector<T> want(hb.out_values()), have;
        fetch(hb, want);
        for (int k = 0; k < ad::NUM_OUT; ++k) {
            const T *h = ad::host_out(hd, k);
            have.insert(have.end(), h, h + size_t(m) * ad::OUT_SIZE[k]);
        }
        const bool ok = same(have, want);
        if (!ok) std::printf("check: the host layer differs from the launcher at %d states (transfer %d)\n", m, c[1]);
        failures += !ok;
        g::close_grid<T>(hd);
        ++runs;
    }
    g::close_grid_streams(streams);
    g::close_robotModel<T>(model);
    std::printf("check: %s, %d runs, %d mismatches\n", ad::ALGO, runs, failures);
    return failures ? 1 : 0;
}

// The block layout at every tier and block size (kernel time by events), per size: what the
// spill tiers cost or buy when shared memory, not work, bounds the blocks an SM holds (a tier that
// spills more carves less, so more blocks of it fit).  One JSON row per (size, tier, threads).
static int run_tiers(const std::string &robot, const std::vector<int> &sizes, int repeats, int warmup,
                     const std::string &json) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    FILE *out = json_open(json);
    const int tier_max[3] = {g::tier_max_threads<g::TIER_SHARED>(), g::tier_max_threads<g::TIER_LITE>(),
                             g::tier_max_threads<g::TIER_MINIMAL>()};
    const char *tier_name[3] = {"shared", "lite", "minimal"};
    bool first = true;
    for (int n : sizes) {
        if (n > 65536) continue;  // one block per state: not this regime
        Buffers b(n);
        for (int tier = 0; tier < 3; ++tier) {
            for (int threads : {64, 128, 256, 512}) {
                if (threads > tier_max[tier]) continue;
                g::LaunchConfig cfg;
                cfg.layout = g::LAYOUT_BLOCK; cfg.tier = tier; cfg.threads = threads;
                const double kernel = time_events([&] { CHECK(launch(b, cfg, s)); }, repeats, warmup, s);
                std::fprintf(out, "%s  {\"robot\": \"%s\", \"algorithm\": \"%s\", \"n\": %d, \"tier\": \"%s\", "
                             "\"threads\": %d, \"kernel_us\": %.3f}", first ? "" : ",\n", robot.c_str(), ad::ALGO, n,
                             tier_name[tier], threads, kernel);
                first = false;
                std::fflush(out);
            }
        }
    }
    json_close(out);
    return 0;
}

// One launch of the auto layout per size, nothing else on the device: what Nsight Compute counts
// (gpu_check's flops phase: the floating-point instructions a state executes).
static int run_once(const std::vector<int> &sizes) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (int n : sizes) {
        Buffers b(n);
        g::LaunchConfig cfg;
        CHECK(launch(b, cfg, s));
        CHECK(cudaStreamSynchronize(s));
    }
    cudaStreamDestroy(s);
    return 0;
}

int main(int argc, char **argv) {
    std::string mode = argc > 1 ? argv[1] : "check";
    std::string robot = "robot", json;
    std::vector<int> sizes = {1, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576};
    int repeats = 200, warmup = 20;
    for (int i = 2; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--robot") robot = v;
        else if (k == "--json") json = v;
        else if (k == "--repeats") repeats = std::stoi(v);
        else if (k == "--warmup") warmup = std::stoi(v);
        else if (k == "--stage-io") stage_io = std::stoi(v) != 0;
        else if (k == "--io-max-n") io_max_n = std::stol(v);
        else if (k == "--sizes") {
            sizes.clear();
            size_t p = 0;
            while (p < v.size()) { size_t q = v.find(',', p); sizes.push_back(std::stoi(v.substr(p, q - p))); if (q == std::string::npos) break; p = q + 1; }
        }
    }
    if (mode == "time") return run_time(robot, sizes, repeats, warmup, json);
    if (mode == "tiers") return run_tiers(robot, sizes, repeats, warmup, json);
    if (mode == "once") return run_once(sizes);
    return run_check();
}
