// A computed-torque control step fused into one kernel with GRiD's inverse dynamics,
// checked against the layered path (host loops around the generated host function)
// and timed.  Build and run with build_and_time.sh; see README.md.
//
// Per state:  qdd_cmd = qdd_des + kp (q_des - q) + kd (qd_des - qd)
//             tau     = ID(q, qd, qdd_cmd)
//             q_next  = q + dt qd,   qd_next = qd + dt qdd_cmd
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include GRID_HEADER

using T = float;
constexpr int NQ = grid::NUM_POS;
constexpr int NV = grid::NUM_VEL;
static_assert(NQ == NV, "this example integrates q with qd: fixed-base robots without continuous quaternions");

template <typename S>
__device__ void pd_acceleration(S *s_qdd_cmd, const S *s_q, const S *s_qd, const S *s_q_des, const S *s_qd_des,
                                const S *s_qdd_des, const S kp, const S kd) {
    for (int i = GRID_TID; i < NV; i += GRID_BLOCK_THREADS)
        s_qdd_cmd[i] = s_qdd_des[i] + kp * (s_q_des[i] - s_q[i]) + kd * (s_qd_des[i] - s_qd[i]);
}

template <typename S>
__device__ void euler_step(S *s_q_next, S *s_qd_next, const S *s_q, const S *s_qd, const S *s_qdd_cmd, const S dt) {
    for (int i = GRID_TID; i < NV; i += GRID_BLOCK_THREADS) {
        s_q_next[i] = s_q[i] + dt * s_qd[i];
        s_qd_next[i] = s_qd[i] + dt * s_qdd_cmd[i];
    }
}

// One block per state (grid-stride over the batch); the three stages meet in shared memory.
template <typename S>
__global__ void fused_control_step_kernel(S *d_tau, S *d_q_next, S *d_qd_next, const S *d_q, const S *d_qd,
                                          const S *d_q_des, const S *d_qd_des, const S *d_qdd_des, const int B,
                                          const grid::robotModel<S> *d_robotModel, const S gravity, const S kp,
                                          const S kd, const S dt) {
    __shared__ S s_q[NQ], s_qd[NV], s_q_des[NQ], s_qd_des[NV], s_qdd_des[NV];
    __shared__ S s_qdd_cmd[NV], s_tau[NV], s_q_next[NQ], s_qd_next[NV];
    for (int k = blockIdx.x; k < B; k += gridDim.x) {
        for (int i = GRID_TID; i < NV; i += GRID_BLOCK_THREADS) {
            s_q[i] = d_q[k * NQ + i];
            s_qd[i] = d_qd[k * NV + i];
            s_q_des[i] = d_q_des[k * NQ + i];
            s_qd_des[i] = d_qd_des[k * NV + i];
            s_qdd_des[i] = d_qdd_des[k * NV + i];
        }
        __syncthreads();
        pd_acceleration<S>(s_qdd_cmd, s_q, s_qd, s_q_des, s_qd_des, s_qdd_des, kp, kd);
        __syncthreads();
        // GRiD's inverse dynamics, inline: scratch from this kernel's dynamic shared memory
        grid::inverse_dynamics_device<S>(s_tau, s_q, s_qd, s_qdd_cmd, d_robotModel, nullptr, gravity);
        __syncthreads();
        euler_step<S>(s_q_next, s_qd_next, s_q, s_qd, s_qdd_cmd, dt);
        __syncthreads();
        for (int i = GRID_TID; i < NV; i += GRID_BLOCK_THREADS) {
            d_tau[k * NV + i] = s_tau[i];
            d_q_next[k * NQ + i] = s_q_next[i];
            d_qd_next[k * NV + i] = s_qd_next[i];
        }
        __syncthreads();
    }
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double worst_rel(const std::vector<T> &a, const std::vector<T> &b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += double(a[i] - b[i]) * double(a[i] - b[i]);
        den += double(b[i]) * double(b[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

int main(int argc, char **argv) {
    int B = 256, repeats = 200, threads = 128;
    std::string json;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        if (k == "--batch") B = std::atoi(argv[i + 1]);
        else if (k == "--repeats") repeats = std::atoi(argv[i + 1]);
        else if (k == "--threads") threads = std::atoi(argv[i + 1]);
        else if (k == "--json") json = argv[i + 1];
        else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    const T gravity = 9.81f, kp = 100.f, kd = 20.f, dt = 0.001f;

    // a deterministic batch of current and desired states
    std::vector<T> q(B * NQ), qd(B * NV), q_des(B * NQ), qd_des(B * NV), qdd_des(B * NV);
    for (int e = 0; e < B * NV; ++e) {
        q[e] = 0.3f * std::sin(0.37f * e);
        qd[e] = 0.5f * std::cos(0.11f * e);
        q_des[e] = q[e] + 0.05f * std::sin(1.3f * e);
        qd_des[e] = qd[e] - 0.1f * std::cos(0.7f * e);
        qdd_des[e] = 0.2f * std::sin(0.9f * e);
    }

    cudaStream_t *streams = grid::init_grid_streams<T>();
    gpuErrchk(grid::init_grid_kernel_attr_inverse_dynamics_checked<T>());
    grid::robotModel<T> *d_robotModel = grid::init_robotModel<T>();
    const size_t smem = grid::INVERSE_DYNAMICS_DEVICE_DYNAMIC_SHARED_MEM_BYTES<T>();
    gpuErrchk(cudaFuncSetAttribute(fused_control_step_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(smem)));

    // fused path buffers
    T *d_q, *d_qd, *d_q_des, *d_qd_des, *d_qdd_des, *d_tau, *d_q_next, *d_qd_next;
    for (T **p : {&d_q, &d_qd, &d_q_des, &d_qd_des, &d_qdd_des, &d_tau, &d_q_next, &d_qd_next})
        gpuErrchk(cudaMalloc(p, sizeof(T) * B * NV));
    gpuErrchk(cudaMemcpy(d_q, q.data(), sizeof(T) * B * NQ, cudaMemcpyHostToDevice));
    gpuErrchk(cudaMemcpy(d_qd, qd.data(), sizeof(T) * B * NV, cudaMemcpyHostToDevice));
    gpuErrchk(cudaMemcpy(d_q_des, q_des.data(), sizeof(T) * B * NQ, cudaMemcpyHostToDevice));
    gpuErrchk(cudaMemcpy(d_qd_des, qd_des.data(), sizeof(T) * B * NV, cudaMemcpyHostToDevice));
    gpuErrchk(cudaMemcpy(d_qdd_des, qdd_des.data(), sizeof(T) * B * NV, cudaMemcpyHostToDevice));
    auto fused = [&] {
        fused_control_step_kernel<T><<<B, threads, smem, streams[0]>>>(d_tau, d_q_next, d_qd_next, d_q, d_qd, d_q_des,
                                                                       d_qd_des, d_qdd_des, B, d_robotModel, gravity,
                                                                       kp, kd, dt);
        gpuErrchk(cudaPeekAtLastError());
    };

    // layered path: host loops around the generated host function
    grid::gridData<T> *hd = grid::init_gridData<T>(B);
    std::vector<T> qdd_cmd(B * NV), tau_l(B * NV), q_next_l(B * NQ), qd_next_l(B * NV);
    auto layered = [&] {
        for (int k = 0; k < B; ++k)
            for (int i = 0; i < NV; ++i) {
                const int e = k * NV + i;
                qdd_cmd[e] = qdd_des[e] + kp * (q_des[e] - q[e]) + kd * (qd_des[e] - qd[e]);
                hd->h_q_qd[k * (NQ + NV) + i] = q[e];
                hd->h_q_qd[k * (NQ + NV) + NQ + i] = qd[e];
                hd->h_u[e] = qdd_cmd[e];
            }
        grid::inverse_dynamics<T, true, true>(hd, d_robotModel, grid::Gravity<T>(gravity), B, dim3(B), dim3(threads),
                                               streams);
        for (int e = 0; e < B * NV; ++e) {
            tau_l[e] = hd->h_c[e];
            q_next_l[e] = q[e] + dt * qd[e];
            qd_next_l[e] = qd[e] + dt * qdd_cmd[e];
        }
    };

    // correctness: both paths on the same batch
    fused();
    gpuErrchk(cudaDeviceSynchronize());
    std::vector<T> tau_f(B * NV), q_next_f(B * NQ), qd_next_f(B * NV);
    gpuErrchk(cudaMemcpy(tau_f.data(), d_tau, sizeof(T) * B * NV, cudaMemcpyDeviceToHost));
    gpuErrchk(cudaMemcpy(q_next_f.data(), d_q_next, sizeof(T) * B * NQ, cudaMemcpyDeviceToHost));
    gpuErrchk(cudaMemcpy(qd_next_f.data(), d_qd_next, sizeof(T) * B * NV, cudaMemcpyDeviceToHost));
    layered();
    const double e_tau = worst_rel(tau_f, tau_l), e_q = worst_rel(q_next_f, q_next_l),
                 e_qd = worst_rel(qd_next_f, qd_next_l);
    const bool ok = e_tau <= 1e-4 && e_q <= 1e-4 && e_qd <= 1e-4;
    std::printf("correctness: fused vs layered over %d states, rel_err tau=%.2e q_next=%.2e qd_next=%.2e "
                "(tol 1e-04) %s\n", B, e_tau, e_q, e_qd, ok ? "OK" : "FAIL");

    // timing: medians of cudaEvent-timed runs after warm-up
    cudaEvent_t a, z;
    cudaEventCreate(&a);
    cudaEventCreate(&z);
    auto time_it = [&](auto f) {
        std::vector<double> t;
        for (int i = 0; i < repeats + 20; ++i) {
            cudaEventRecord(a, streams[0]);
            f();
            cudaEventRecord(z, streams[0]);
            cudaEventSynchronize(z);
            float ms;
            cudaEventElapsedTime(&ms, a, z);
            if (i >= 20) t.push_back(ms * 1000.0);
        }
        return median(t);
    };
    const double t_fused = time_it(fused), t_layered = time_it(layered);
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    std::printf("timing: batch=%d threads=%d repeats=%d  fused=%.2f us  layered=%.2f us  ratio=%.2fx  (medians; sm_%d%d)\n",
                B, threads, repeats, t_fused, t_layered, t_layered / t_fused, major, minor);
    if (!json.empty()) {
        FILE *f = std::fopen(json.c_str(), "w");
        std::fprintf(f, "{\"example\": \"fused_control_step\", \"batch\": %d, \"threads\": %d, \"fused_us\": %.3f, "
                        "\"layered_us\": %.3f, \"repeats\": %d, \"arch\": \"sm_%d%d\", \"rel_err_tau\": %.3e}\n",
                     B, threads, t_fused, t_layered, repeats, major, minor, e_tau);
        std::fclose(f);
    }
    grid::close_grid<T>(hd);
    grid::close_robotModel<T>(d_robotModel);
    grid::close_grid_streams(streams);
    return ok ? 0 : 1;
}
