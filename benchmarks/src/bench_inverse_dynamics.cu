// Timing and sanitizer driver for a generated header's inverse dynamics.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -include grid.cuh bench_inverse_dynamics.cu -o bench
//   ./bench time  --robot NAME --sizes 1,16,... --repeats 200 --warmup 20 --json out.json
//   ./bench check                      (every layout, tier and block size on small batches;
//                                       run under compute-sanitizer memcheck / racecheck)
//
// Kernel-only times are single launches bracketed by cudaEvents (median over repeats
// after warm-up), the same way as an empty kernel of the same grid, timed in the same
// run (the launch floor).  "graph" replays a captured CUDA graph of one launch.
// "resident" is host-timed around launch + synchronise (upstream's release method).
// "io" is the host wrapper: pinned inputs copied in, kernel, outputs copied back.
#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#ifndef GRID_NS
#define GRID_NS grid
#endif
namespace g = GRID_NS;
using T = float;

__global__ void empty_kernel() {}

#define CHECK(x) gpuErrchk(x)

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Buffers {
    int n;
    T *q, *qd, *qdd, *tau, *ws;
    size_t ws_bytes;
    explicit Buffers(int n_) : n(n_) {
        std::mt19937 rng(1234 + n_);
        std::normal_distribution<float> nd(0.f, 1.f);
        std::vector<T> h_q(size_t(n) * g::NUM_POS), h_v(size_t(n) * g::NUM_VEL);
        for (auto &x : h_q) x = nd(rng);
        CHECK(cudaMalloc(&q, h_q.size() * sizeof(T)));
        CHECK(cudaMemcpy(q, h_q.data(), h_q.size() * sizeof(T), cudaMemcpyHostToDevice));
        for (T **p : {&qd, &qdd}) {
            for (auto &x : h_v) x = nd(rng);
            CHECK(cudaMalloc(p, h_v.size() * sizeof(T)));
            CHECK(cudaMemcpy(*p, h_v.data(), h_v.size() * sizeof(T), cudaMemcpyHostToDevice));
        }
        CHECK(cudaMalloc(&tau, h_v.size() * sizeof(T)));
        ws_bytes = size_t(g::MAX_WORKSPACE_BLOCKS) * g::INVERSE_DYNAMICS_WORKSPACE_BYTES<T, g::TIER_MINIMAL>() + 16;
        CHECK(cudaMalloc(&ws, ws_bytes));
    }
    ~Buffers() { cudaFree(q); cudaFree(qd); cudaFree(qdd); cudaFree(tau); cudaFree(ws); }
};

static cudaError_t launch(Buffers &b, g::LaunchConfig cfg, cudaStream_t s, const T *f_ext = nullptr) {
    return g::inverse_dynamics_launch<T>(b.tau, b.q, b.qd, b.qdd, f_ext, nullptr, b.n, cfg, b.ws, b.ws_bytes, s);
}

static void grid_of(const Buffers &b, g::LaunchConfig cfg, int &blocks, int &threads) {
    if (g::inverse_dynamics_resolve_layout(b.n, cfg.layout) == g::LAYOUT_PER_STATE) {
        threads = cfg.threads > 0 ? cfg.threads : g::INVERSE_DYNAMICS_PER_STATE_THREADS;
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

static int run_time(const std::string &robot, const std::vector<int> &sizes, int repeats, int warmup,
                    const std::string &json) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    FILE *out = json.empty() ? stdout : std::fopen(json.c_str(), "w");
    std::fprintf(out, "[\n");
    bool first = true;
    for (int n : sizes) {
        Buffers b(n);
        for (int layout : {g::LAYOUT_AUTO, g::LAYOUT_BLOCK, g::LAYOUT_PER_STATE}) {
            if (layout == g::LAYOUT_BLOCK && n > 65536) continue;  // one block per state: not this regime
            g::LaunchConfig cfg;
            cfg.layout = layout;
            int blocks, threads;
            grid_of(b, cfg, blocks, threads);
            double kernel = time_events([&] { CHECK(launch(b, cfg, s)); }, repeats, warmup, s);
            double empty = time_events([&] { empty_kernel<<<blocks, threads, 0, s>>>(); }, repeats, warmup, s);
            double graph = time_graph(b, cfg, s, repeats, warmup, false);
            double graph_empty = time_graph(b, cfg, s, repeats, warmup, true);
            double resident = time_host([&] { CHECK(launch(b, cfg, s)); }, repeats, warmup, s);
            double io = -1;
            if (layout == g::LAYOUT_AUTO) {
                g::gridData<T> *hd = g::init_gridData<T>(n);
                cudaStream_t *streams = g::init_grid_streams<T>();
                std::mt19937 rng(7);
                std::normal_distribution<float> nd(0.f, 1.f);
                for (size_t i = 0; i < size_t(n) * (g::NUM_POS + g::NUM_VEL); ++i) hd->h_q_qd[i] = nd(rng);
                for (size_t i = 0; i < size_t(n) * g::NUM_VEL; ++i) hd->h_qdd[i] = nd(rng);
                io = time_host([&] {
                    g::inverse_dynamics<T, true, true>(hd, nullptr, g::Gravity<T>(), n, dim3(n), dim3(g::MAX_PERF_LEVEL_THREADS), streams);
                }, std::max(20, repeats / 4), 5, s);
                g::close_grid_streams(streams);
                g::close_grid<T>(hd);
            }
            const char *lname = layout == g::LAYOUT_AUTO ? "auto" : (layout == g::LAYOUT_BLOCK ? "block" : "per_state");
            int resolved = g::inverse_dynamics_resolve_layout(n, layout);
            std::fprintf(out,
                "%s  {\"robot\": \"%s\", \"algorithm\": \"inverse_dynamics\", \"n\": %d, \"layout\": \"%s\", "
                "\"resolved\": \"%s\", \"blocks\": %d, \"threads\": %d, \"kernel_us\": %.3f, \"empty_us\": %.3f, "
                "\"graph_us\": %.3f, \"graph_empty_us\": %.3f, \"resident_us\": %.3f, \"io_us\": %.3f}",
                first ? "" : ",\n", robot.c_str(), n, lname,
                resolved == g::LAYOUT_PER_STATE ? "per_state" : "block", blocks, threads, kernel, empty, graph,
                graph_empty, resident, io);
            first = false;
            std::fflush(out);
        }
    }
    std::fprintf(out, "\n]\n");
    if (out != stdout) std::fclose(out);
    return 0;
}

// Every layout, tier and block size on small batches (with and without f_ext), plus the
// host wrapper; results of the block layout at every config must equal the first one.
static int run_check() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    const int n = 37;
    Buffers b(n);
    T *f_ext;
    std::vector<T> h_f(size_t(n) * 6 * g::NUM_BODIES, T(0.5));
    CHECK(cudaMalloc(&f_ext, h_f.size() * sizeof(T)));
    CHECK(cudaMemcpy(f_ext, h_f.data(), h_f.size() * sizeof(T), cudaMemcpyHostToDevice));
    std::vector<T> first(size_t(n) * g::NUM_VEL), got(first.size());
    int failures = 0, runs = 0;
    const int tier_max[3] = {g::tier_max_threads<g::TIER_SHARED>(), g::tier_max_threads<g::TIER_LITE>(),
                             g::tier_max_threads<g::TIER_MINIMAL>()};
    for (int use_f = 0; use_f < 2; ++use_f) {
        bool have_first = false;
        for (int tier = 0; tier < 3; ++tier) {
            for (int threads : {32, 64, 128, g::MAX_PERF_LEVEL_THREADS, tier_max[tier]}) {
                if (threads > tier_max[tier]) continue;
                for (int blocks : {0, 5}) {
                    g::LaunchConfig cfg;
                    cfg.layout = g::LAYOUT_BLOCK; cfg.tier = tier; cfg.threads = threads; cfg.blocks = blocks;
                    CHECK(cudaMemset(b.tau, 0xff, first.size() * sizeof(T)));
                    CHECK(launch(b, cfg, s, use_f ? f_ext : nullptr));
                    CHECK(cudaStreamSynchronize(s));
                    CHECK(cudaMemcpy(got.data(), b.tau, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
                    if (!have_first) { first = got; have_first = true; }
                    for (size_t i = 0; i < got.size(); ++i)
                        if (!(std::abs(got[i] - first[i]) <= 1e-4f * (1.f + std::abs(first[i])))) { ++failures; break; }
                    ++runs;
                }
            }
        }
        // per-state, plain and staged through shared memory (stage_io), a few blocks too: grid-stride
        for (int threads : {32, 64, 128, -32, -64}) {
            g::LaunchConfig cfg;
            cfg.layout = g::LAYOUT_PER_STATE; cfg.threads = std::abs(threads);
            cfg.stage_io = threads < 0;
            if (cfg.stage_io && cfg.threads > g::INVERSE_DYNAMICS_STAGED_THREADS<T>()) continue;
            if (cfg.stage_io) cfg.blocks = 1;
            CHECK(cudaMemset(b.tau, 0xff, first.size() * sizeof(T)));
            CHECK(launch(b, cfg, s, use_f ? f_ext : nullptr));
            CHECK(cudaStreamSynchronize(s));
            CHECK(cudaMemcpy(got.data(), b.tau, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < got.size(); ++i)
                if (!(std::abs(got[i] - first[i]) <= 1e-4f * (1.f + std::abs(first[i])))) { ++failures; break; }
            ++runs;
        }
    }
    // the host layer (gridData, streams, robotModel) once, block and per-state regimes
    g::robotModel<T> *model = g::init_robotModel<T>();
    cudaStream_t *streams = g::init_grid_streams<T>();
    for (int m : {3, 300}) {
        g::gridData<T> *hd = g::init_gridData<T>(m);
        for (size_t i = 0; i < size_t(m) * (g::NUM_POS + g::NUM_VEL); ++i) hd->h_q_qd[i] = T(0.1) * (i % 7);
        for (size_t i = 0; i < size_t(m) * g::NUM_VEL; ++i) hd->h_qdd[i] = T(0.2);
        g::inverse_dynamics<T, true, true>(hd, model, g::Gravity<T>(), m, dim3(m), dim3(64), streams);
        g::close_grid<T>(hd);
        ++runs;
    }
    g::close_grid_streams(streams);
    g::close_robotModel<T>(model);
    cudaFree(f_ext);
    std::printf("check: %d runs, %d mismatches\n", runs, failures);
    return failures ? 1 : 0;
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
        else if (k == "--sizes") {
            sizes.clear();
            size_t p = 0;
            while (p < v.size()) { size_t q = v.find(',', p); sizes.push_back(std::stoi(v.substr(p, q - p))); if (q == std::string::npos) break; p = q + 1; }
        }
    }
    if (mode == "time") return run_time(robot, sizes, repeats, warmup, json);
    return run_check();
}
