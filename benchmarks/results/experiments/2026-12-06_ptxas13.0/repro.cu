// session 40: atlas forward_dynamics_gradient float64 per-state kernel with f_ext, alone
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cstdlib>
#include "grid.cuh"
int main(int argc, char **argv) {
    // argv: in.bin out.bin [N]: the 2 states of in.bin, repeated to N states when N is given
    // (then 20 timed launches follow the checked one, their median printed)
    const int N0 = 2, NV = 30, NF = 180;
    const int N = argc > 3 ? atoi(argv[3]) : N0;
    std::vector<double> in0(N0 * (3 * NV + NF)), in(N * (3 * NV + NF));
    FILE *f = fopen(argv[1], "rb"); fread(in0.data(), sizeof(double), in0.size(), f); fclose(f);
    for (int part = 0, off = 0, off0 = 0; part < 4; ++part) {  // q, qd, tau, f_ext, each N x width
        const int w = part < 3 ? NV : NF;
        for (int k = 0; k < N; ++k)
            for (int j = 0; j < w; ++j) in[off + k * w + j] = in0[off0 + (k % N0) * w + j];
        off += N * w; off0 += N0 * w;
    }
    double *d_in, *d_out;
    cudaMalloc(&d_in, in.size() * sizeof(double));
    cudaMalloc(&d_out, 2 * N * NV * NV * sizeof(double));
    cudaMemcpy(d_in, in.data(), in.size() * sizeof(double), cudaMemcpyHostToDevice);
    cudaMemset(d_out, 0xff, 2 * N * NV * NV * sizeof(double));
    const double *q = d_in, *qd = d_in + N * NV, *tau = d_in + 2 * N * NV, *fx = d_in + 3 * N * NV;
    grid::forward_dynamics_gradient_per_state_kernel<double, true><<<1, 32>>>(
        d_out, d_out + N * NV * NV, q, NV, qd, NV, tau, NV, fx, grid::Gravity<double>(0.0, 0.0, -9.81), N);
    cudaError_t e = cudaDeviceSynchronize();
    printf("kernel: %s\n", cudaGetErrorString(e));
    if (argc > 3) {
        std::vector<float> ms(20);
        cudaEvent_t a, b;
        cudaEventCreate(&a); cudaEventCreate(&b);
        for (int r = 0; r < 20; ++r) {
            cudaEventRecord(a);
            grid::forward_dynamics_gradient_per_state_kernel<double, true><<<(N + 127) / 128, 128>>>(
                d_out, d_out + N * NV * NV, q, NV, qd, NV, tau, NV, fx, grid::Gravity<double>(0.0, 0.0, -9.81), N);
            cudaEventRecord(b); cudaEventSynchronize(b);
            cudaEventElapsedTime(&ms[r], a, b);
        }
        std::sort(ms.begin(), ms.end());
        printf("N=%d median %.1f us\n", N, 1000.0 * ms[10]);
    }
    std::vector<double> out(2 * N0 * NV * NV);
    cudaMemcpy(out.data(), d_out, N0 * NV * NV * sizeof(double), cudaMemcpyDeviceToHost);
    cudaMemcpy(out.data() + N0 * NV * NV, d_out + N * NV * NV, N0 * NV * NV * sizeof(double), cudaMemcpyDeviceToHost);
    f = fopen(argv[2], "wb"); fwrite(out.data(), sizeof(double), out.size(), f); fclose(f);
    return e != cudaSuccess;
}
