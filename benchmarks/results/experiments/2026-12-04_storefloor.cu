// The store floor, round robin: every variant launched once per round, 400 rounds after a
// 2 s warm-up, so that clock and power drift fall on all alike; absolute medians (us) of
// event-timed single launches and of single-kernel graph launches.  Variants: empty kernels
// on several grids, and pure-store kernels writing B bytes (vector width, values per thread,
// block size, grid-stride, cache hints), cudaMemsetAsync.
#include <cstdio>
#include <vector>
#include <algorithm>
#include <functional>
#include <string>
#include <chrono>
__global__ void empty_kernel() {}
template <int K, int HINT> __global__ void store_k(float4 *out, size_t n4) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    const float4 v = make_float4(i, 1.f, 2.f, 3.f);
#pragma unroll
    for (int k = 0; k < K; ++k, i += stride)
        if (i < n4) {
            if (HINT == 0) out[i] = v;
            else if (HINT == 1) __stcs(out + i, v);
            else __stwt(out + i, v);
        }
}
__global__ void store_loop(float4 *out, size_t n4) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n4; i += size_t(gridDim.x) * blockDim.x)
        out[i] = make_float4(i, 1.f, 2.f, 3.f);
}
struct Variant { std::string name; std::function<void(cudaStream_t)> f; cudaGraphExec_t g; std::vector<float> tk, tg; };
static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
int main() {
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    struct Case { const char *name; size_t bytes; };
    std::vector<Case> cases = {{"hyq (12 dofs) CRBA/Minv output, N=16384, float32", size_t(16384) * 144 * 4},
                               {"iiwa14 Minv output, N=16384, float32", size_t(16384) * 49 * 4}};
    float4 *out; cudaMalloc(&out, cases[0].bytes + 64);
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (auto &c : cases) {
        const size_t n4 = c.bytes / 16;
        std::vector<Variant> vs;
        for (auto gb : std::vector<std::pair<unsigned, unsigned>>{{1, 32}, {128, 128}, {sms, 128}, {256, 64}, {unsigned(n4 / 256), 256}})
            vs.push_back({"empty <<<" + std::to_string(gb.first) + ", " + std::to_string(gb.second) + ">>>",
                          [gb](cudaStream_t s) { empty_kernel<<<gb.first, gb.second, 0, s>>>(); }});
#define V(K, H, T) { unsigned t = T, bl = unsigned((n4 + size_t(K) * t - 1) / (size_t(K) * t)); \
        vs.push_back({std::string("store ") + #K + " float4/thread, hint " + #H + ", " + #T + " threads", [=](cudaStream_t s) { store_k<K, H><<<bl, t, 0, s>>>(out, n4); }}); }
        V(1, 0, 128) V(1, 0, 256) V(1, 0, 512) V(1, 0, 1024) V(2, 0, 256) V(4, 0, 256) V(8, 0, 256) V(4, 0, 512)
        V(1, 1, 256) V(4, 1, 256) V(1, 2, 256)
        for (int m : {1, 2, 4, 8}) {
            unsigned bl = sms * m, t = m > 2 ? 512 : 1024;
            vs.push_back({"grid-stride " + std::to_string(bl) + " x " + std::to_string(t), [=](cudaStream_t s) { store_loop<<<bl, t, 0, s>>>(out, n4); }});
        }
        const size_t bytes = c.bytes;
        vs.push_back({"cudaMemsetAsync", [=](cudaStream_t s) { cudaMemsetAsync(out, 0, bytes, s); }});
        for (auto &v : vs) {
            cudaGraph_t g;
            cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); v.f(s); cudaStreamEndCapture(s, &g);
            cudaGraphInstantiate(&v.g, g, 0);
        }
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (std::chrono::steady_clock::now() < until) for (auto &v : vs) v.f(s);
        cudaStreamSynchronize(s);
        float ms;
        for (int r = 0; r < 400; ++r)
            for (auto &v : vs) {
                cudaEventRecord(a, s); v.f(s); cudaEventRecord(b, s); cudaEventSynchronize(b);
                cudaEventElapsedTime(&ms, a, b); v.tk.push_back(ms * 1e3f);
                cudaEventRecord(a, s); cudaGraphLaunch(v.g, s); cudaEventRecord(b, s); cudaEventSynchronize(b);
                cudaEventElapsedTime(&ms, a, b); v.tg.push_back(ms * 1e3f);
            }
        printf("== %s: %.2f MB (%.2f us at 4.8 TB/s); %d SMs; medians of 400 rounds, us\n", c.name, c.bytes / 1e6, c.bytes / 4.8e6, sms);
        printf("%-44s %8s %8s\n", "variant", "kernel", "graph");
        float bk = 1e9, bg = 1e9;
        for (auto &v : vs) {
            const float k = median(v.tk), g = median(v.tg);
            printf("%-44s %8.2f %8.2f\n", v.name.c_str(), k, g);
            if (v.name.rfind("empty", 0) != 0) { bk = std::min(bk, k); bg = std::min(bg, g); }
        }
        printf("fastest store: kernel %.2f, graph %.2f\n\n", bk, bg);
    }
    cudaError_t e = cudaGetLastError();
    printf("last error: %s\n", cudaGetErrorString(e));
    return e != cudaSuccess;
}
