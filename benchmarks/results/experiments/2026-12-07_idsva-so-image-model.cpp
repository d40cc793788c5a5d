// A model of idsva_so's CPU stores on atlas (session 49, 2026-12-07): the recording of the per-state
// code's cells and the store of each lane's row, without the arithmetic.  argv[1]: the cells' indices in
// the loop form's order (int32, the four tensors one after another, 27000 values each; written from
// atlas's generated IDSVA_SO_CELL / IDSVA_SO_PAIR_CELLS tables), argv[2]: 4 (compare), argv[3]: the rows'
// offset in values from a 64-byte line.  Modes, every one each round, 40 rounds, 64 states a round:
//   0 / 1  the cells kept in assignment order (value, index, count), scattered into a scratch row (d2dc28f),
//          plain / keep_zeros
//   2 / 3  a first image (a mark a block of 8 cells: not the keep_zeros contract at offsets other than 0)
//   4 / 5  the image: cf893e7's grid_lane_image and grid_lane_image_store (bool mark a cell, two 4x4 transposes
//          a line)
// The outputs of 2-5 are checked against 0 / 1 first (plain, and keep_zeros into arrays of sentinels).
// The helpers it times, from the repository (run in this directory):
//   h() { git show $1:grid_core/emit/lane_cells.py | python3 -c 'import sys; print(sys.stdin.read().split("_HELPERS = r\"\"\"")[1].split("\"\"\"")[0])'; }
//   h d2dc28f > old_helpers.h; h cf893e7 > new_helpers.h
//   git show cf893e7:grid_core/emit/prelude.cuh | sed -n '/^template <typename W> inline void grid_transpose4/,/^}/p' > transpose4.h
//   g++ -std=c++17 -O3 -march=native -o model 2026-12-07_idsva-so-image-model.cpp
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <vector>
#include <chrono>
#include <algorithm>
#include <cstdlib>
#define __host__
#define __device__
#define GRID_HOST_CPU
namespace grid_emu { bool keep_zeros = false; }
template <typename S, int L> struct grid_lanes { typedef S V __attribute__((vector_size(sizeof(S) * L))); static constexpr int LANES = L; V v; grid_lanes() = default; grid_lanes(S s) : v(V{} + s) {} };
namespace old {  // d2dc28f's grid_lane_cells and grid_lane_cells_store
#include "old_helpers.h"
}
#include "transpose4.h"  // the prelude's grid_transpose4
namespace g2 {  // cf893e7's grid_lane_image, grid_lane_image_buffer and grid_lane_image_store
#include "new_helpers.h"
}
using V = grid_lanes<double, 4>;
typedef double V4 __attribute__((vector_size(32)));
static std::vector<int> load(const char *f) { FILE *p = fopen(f, "rb"); fseek(p,0,SEEK_END); long n=ftell(p)/4; fseek(p,0,SEEK_SET); std::vector<int> v(n); fread(v.data(), 4, n, p); fclose(p); return v; }

// the new output image: every lane's value of cell i at img[i], blocks of 8 cells marked
struct image { V *img; unsigned char *mark; };
__attribute__((noinline)) void record_new(image *im, const int *const *idx, const int *n, const V *src) {
    for (int t = 0; t < 4; ++t) { V *img = im[t].img; unsigned char *m = im[t].mark; for (int c = 0; c < n[t]; ++c) { int i = idx[t][c]; img[i] = *src++; m[i >> 3] = 1; } }
}
__attribute__((noinline)) void record_old(old::grid_lane_cells<V> *cl, const int *const *idx, const int *n, const V *src) {
    for (int t = 0; t < 4; ++t) { auto c = cl[t]; for (int e = 0; e < n[t]; ++e) c[idx[t][e]] = *src++; }
}
typedef long long v16 __attribute__((vector_size(16)));
static inline void nt32(double *dst, V4 x) {  // 32 bytes as two non-temporal 16-byte stores
    __builtin_ia32_movntdq((v16 *)dst, (v16)__builtin_shufflevector(x, x, 0, 1));
    __builtin_ia32_movntdq((v16 *)dst + 1, (v16)__builtin_shufflevector(x, x, 2, 3));
}
// the store: each lane's row line by line from 8 consecutive cells of the image (a 4x8 transpose)
static void store_img(double *rows, int size, int count, image im, bool keep) {
    V *img = im.img; unsigned char *m = im.mark;
    const int off = int(reinterpret_cast<std::uintptr_t>(rows) % 64 / 8);  // (size % 8 == 0: every row's)
    const int blocks = (size + 7) / 8;
    // line L of a row holds cells [8L - off, 8L + 8 - off)
    const int first = off ? 1 : 0, lines = (size + off) / 8;  // whole lines [first, lines)
    for (int L = first; L < lines; ++L) {
        const int c0 = 8 * L - off;
        const bool hit = m[c0 >> 3] | m[(c0 + 7) >> 3];
        if (!hit) { if (!keep) for (int j = 0; j < count; ++j) { double *d = rows + size_t(j) * size + c0; nt32(d, V4{}); nt32(d + 4, V4{}); } continue; }
        V4 a0 = img[c0].v, a1 = img[c0+1].v, a2 = img[c0+2].v, a3 = img[c0+3].v, a4 = img[c0+4].v, a5 = img[c0+5].v, a6 = img[c0+6].v, a7 = img[c0+7].v;
        // 4x4 transposes of (a0..a3) and (a4..a7)
        V4 t0 = __builtin_shufflevector(a0, a1, 0, 4, 2, 6), t1 = __builtin_shufflevector(a0, a1, 1, 5, 3, 7);
        V4 t2 = __builtin_shufflevector(a2, a3, 0, 4, 2, 6), t3 = __builtin_shufflevector(a2, a3, 1, 5, 3, 7);
        V4 r0 = __builtin_shufflevector(t0, t2, 0, 1, 4, 5), r1 = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
        V4 r2 = __builtin_shufflevector(t0, t2, 2, 3, 6, 7), r3 = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
        V4 u0 = __builtin_shufflevector(a4, a5, 0, 4, 2, 6), u1 = __builtin_shufflevector(a4, a5, 1, 5, 3, 7);
        V4 u2 = __builtin_shufflevector(a6, a7, 0, 4, 2, 6), u3 = __builtin_shufflevector(a6, a7, 1, 5, 3, 7);
        V4 s0 = __builtin_shufflevector(u0, u2, 0, 1, 4, 5), s1 = __builtin_shufflevector(u1, u3, 0, 1, 4, 5);
        V4 s2 = __builtin_shufflevector(u0, u2, 2, 3, 6, 7), s3 = __builtin_shufflevector(u1, u3, 2, 3, 6, 7);
        V4 lo[4] = {r0, r1, r2, r3}, hi[4] = {s0, s1, s2, s3};
        for (int j = 0; j < count; ++j) { double *d = rows + size_t(j) * size + c0; nt32(d, lo[j]); nt32(d + 4, hi[j]); }
        for (int x = 0; x < 8; ++x) img[c0 + x].v = V4{};
    }
    // partial lines: plain stores
    for (int j = 0; j < count; ++j) {
        double *row = rows + size_t(j) * size;
        for (int i = 0; i < (off ? 8 - off : 0) && i < size; ++i) if (!keep || m[i >> 3]) row[i] = img[i].v[j];
        for (int i = 8 * lines - off; i < size; ++i) if (!keep || m[i >> 3]) row[i] = img[i].v[j];
    }
    for (int i = 0; i < (off ? 8 - off : 0) && i < size; ++i) img[i].v = V4{};
    for (int i = 8 * lines - off; i < size; ++i) img[i].v = V4{};
    memset(m, 0, blocks);
    __builtin_ia32_sfence();
}
int main(int argc, char **argv) {
    const int N = 64, SZ = 27000, rounds = 40;
    std::vector<int> all = load(argv[1]);
    int mode = atoi(argv[2]), OFF = argc > 3 ? atoi(argv[3]) : 0;
    std::vector<int> idx[4];
    for (int i : all) idx[i / SZ].push_back(i % SZ);
    const int *ip[4] = {idx[0].data(), idx[1].data(), idx[2].data(), idx[3].data()};
    int nn[4] = {(int)idx[0].size(), (int)idx[1].size(), (int)idx[2].size(), (int)idx[3].size()};
    double *out[4], *ref[4];
    for (int t = 0; t < 4; ++t) { out[t] = (double *)aligned_alloc(64, size_t(N) * SZ * 8 + 64) + OFF; ref[t] = (double *)aligned_alloc(64, size_t(N) * SZ * 8 + 64) + OFF; memset(out[t], 0, size_t(N) * SZ * 8); }
    std::vector<V> src(8814); for (int c = 0; c < 8814; ++c) for (int j = 0; j < 4; ++j) src[c].v[j] = 1.0 + c + 0.25 * j;
    // old-path buffers
    std::vector<V> val[4]; std::vector<int> ix[4]; int cnt[4];
    for (int t = 0; t < 4; ++t) { val[t].resize(nn[t]); ix[t].resize(nn[t]); }
    // new-path images
    std::vector<V> img[4]; std::vector<unsigned char> mk[4];
    for (int t = 0; t < 4; ++t) { img[t].assign(SZ + 8, V{}); mk[t].assign(SZ / 8 + 2, 0); }
    image im[4]; for (int t = 0; t < 4; ++t) im[t] = {img[t].data(), mk[t].data()};
    bool keep = mode % 2;
    g2::grid_lane_image_buffer<V> *gim[4]; for (int t = 0; t < 4; ++t) gim[t] = new g2::grid_lane_image_buffer<V>(SZ);
    auto once = [&](int k, int md) {
        if (md < 2) {
            old::grid_lane_cells<V> cl[4]; for (int t = 0; t < 4; ++t) { cnt[t] = 0; cl[t] = {val[t].data(), ix[t].data(), &cnt[t]}; }
            record_old(cl, ip, nn, src.data());
            for (int t = 0; t < 4; ++t) old::grid_lane_cells_store(out[t] + size_t(k) * SZ, SZ, 4, val[t].data(), ix[t].data(), cnt[t]);
        } else if (md >= 4) {
            g2::grid_lane_image<V> gi[4]; for (int t = 0; t < 4; ++t) gi[t] = gim[t]->image();
            { const V *sp = src.data(); for (int t = 0; t < 4; ++t) { auto o = gi[t]; for (int e = 0; e < nn[t]; ++e) o[ip[t][e]] = *sp++; } }
            for (int t = 0; t < 4; ++t) g2::grid_lane_image_store(out[t] + size_t(k) * SZ, SZ, 4, gi[t]);
        } else {
            record_new(im, ip, nn, src.data());
            for (int t = 0; t < 4; ++t) store_img(out[t] + size_t(k) * SZ, SZ, 4, im[t], md == 3);
        }
    };
    // check: new equals old (plain, and keep into arrays of 7s)
    for (int kp = 0; kp < 2; ++kp) {
        for (int t = 0; t < 4; ++t) for (size_t x = 0; x < size_t(N) * SZ; ++x) out[t][x] = kp ? 7 : 3;
        grid_emu::keep_zeros = kp; for (int k = 0; k < N; k += 4) once(k, kp);
        for (int t = 0; t < 4; ++t) memcpy(ref[t], out[t], size_t(N) * SZ * 8);
        for (int t = 0; t < 4; ++t) for (size_t x = 0; x < size_t(N) * SZ; ++x) out[t][x] = kp ? 7 : 3;
        for (int k = 0; k < N; k += 4) once(k, (mode >= 4 ? 4 : 2) + kp);
        for (int t = 0; t < 4; ++t) if (memcmp(ref[t], out[t], size_t(N) * SZ * 8)) printf("MISMATCH keep=%d t=%d\n", kp, t);
    }
    std::vector<double> ts[6];
    for (int r = 0; r < rounds; ++r)
        for (int md = 0; md < 6; ++md) {
            grid_emu::keep_zeros = md % 2;
            auto t0 = std::chrono::steady_clock::now();
            for (int k = 0; k < N; k += 4) once(k, md);
            ts[md].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / N);
        }
    for (int md = 0; md < 6; ++md) {
        std::vector<double> v(ts[md].begin() + 5, ts[md].end()), q;
        for (int r = 5; r < rounds; ++r) q.push_back(ts[md][r] / ts[md % 2][r]);
        std::sort(v.begin(), v.end()); std::sort(q.begin(), q.end());
        printf("off %d %s mode %d: median %.1f us/state, paired ratio to old %.2f\n", OFF, md % 2 ? "keep " : "plain", md, v[v.size() / 2], q[q.size() / 2]);
    }
}
