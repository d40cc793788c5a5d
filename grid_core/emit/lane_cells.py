"""Outputs the per-state code assigns cell by cell (:meth:`~grid_core.emit.emitter.Emitter.direct_outputs`).

The helper group ``"lane_cells"`` (:data:`~grid_core.emit.lie_steps.SHARED_HELPERS`), emitted once
per header where an algorithm's layers have such outputs: ``grid_zero_run`` (a run of structural
zeros of an output), and in the CPU build ``grid_lane_cells``, the output argument of the
per-state code on ``grid_lanes`` that keeps the cells assigned (index and value of every lane, in
the order assigned), and ``grid_lane_cells_store``, which then writes each lane's row: its cells
scattered into a scratch row in the caches, then the row streamed out line by line by
non-temporal stores of whole 64-byte lines (no line read for ownership), in address order.

Otherwise the CPU build runs the per-state code on a group's local copy of every output and
transposes it out after: for outputs beyond the caches (idsva_so's four nv^3 tensors on atlas,
864 KB a state, 3.5 MB a group of four, 91% structural zeros) that copy costs more than the
computation.  A model of atlas's stores (its cells and zero runs, no arithmetic; batch 64, one
thread, us per state, medians of 25 rounds on a loaded 2-core VM): the local copy 164, cells and
zero runs written in place 150, each group's rows zeroed then its cells scattered 28-31, the cells
kept and each row zeroed then given its cells 18-20; storing every value (numpy's fill) 22-26,
memset of every value 16-17.

A call with ``keep_zeros=True`` (:class:`~grid_core.CpuHandle`: the caller's arrays hold the
structural zeros already) streams only the lines that hold a cell (16% of atlas's), as Pinocchio
writes the cells of its tensors.  Before, each row was zeroed by memset and its cells then stored
one by one, each of their lines read for ownership again (with ``keep_zeros``: the cells alone).
atlas, batch 64, one thread, on an Intel Xeon VM whose memory made storing every value 1.2 times
Pinocchio's whole call: with ``keep_zeros`` 28 us a state (the plain call 54), of which the
per-state code without any store took 11; scattering the cells in index order (a cached permutation) gave 26,
prefetching the next group's lines for writing after each store 37: neither kept.  The scratch row
and streamed lines (session 48, AMD EPYC VM, the old and new libraries called in turn in one
process, 40 rounds, paired medians): plain calls 0.50 of the old time (89 against 164 us a state),
``keep_zeros`` 0.72 (56 against 75).
"""

from __future__ import annotations

from . import nodes as n

_HELPERS = r"""// Cells [first, end) of an output set to zero (a run of its structural zeros).
template <typename T> __host__ __device__ inline void grid_zero_run(T *out, int first, int end) {
    for (int x = first; x < end; ++x) out[x] = T(0);
}
#ifdef GRID_HOST_CPU
// An output of the per-state code on grid_lanes kept as the cells it assigns: out[i] = v appends
// (i, v) (every lane's value); read by grid_lane_cells_store.  Its zero runs need no store there.
template <typename V> struct grid_lane_cells {
    V *value;
    int *index;
    int *count;
    struct cell {
        const grid_lane_cells *c;
        int i;
        cell &operator=(V x) {
            c->index[*c->count] = i;
            c->value[(*c->count)++] = x;
            return *this;
        }
    };
    cell operator[](int i) const { return {this, i}; }
};
template <typename V> inline void grid_zero_run(const grid_lane_cells<V> &, int, int) {}
#if defined(__SSE2__) && defined(__GNUC__)
typedef long long grid_v16 __attribute__((vector_size(16)));
// 16 bytes stored at dst (on a 16-byte boundary) by a non-temporal store: the four of a 64-byte line
// write it whole, without reading it for ownership first.
inline void grid_stream16(grid_v16 *dst, grid_v16 v) {
#if defined(__clang__)
    __builtin_nontemporal_store(v, dst);
#else
    __builtin_ia32_movntdq(dst, v);
#endif
}
#endif
// The rows of the first `count` lanes (each `size` values, contiguous), from the `cells` kept (value,
// index).  Each lane's cells are first scattered into a zeroed scratch row of this thread (in the
// caches), at the row's offset within a 64-byte line, marking the lines they touch; the row is then
// written out in address order, its whole lines by non-temporal stores, which need not read a line
// for ownership first: every line (a touched one from the scratch, any other as zeros), or in a
// launch that keeps zeros (grid_emu::keep_zeros: the caller's rows hold the structural zeros already,
// from an earlier call) the touched lines alone, their structural zeros written again as zeros; the
// cells of the partial lines before its first whole line and after its last one by plain stores (in
// a launch that keeps zeros only where such a line holds a cell).  The scratch is zeroed
// again as it goes.  Without SSE2: each row zeroed by memset unless zeros are kept, then given its
// cells.
template <typename V, typename S>
inline void grid_lane_cells_store(S *rows, int size, int count, const V *value, const int *index, int cells) {
#if defined(__SSE2__) && defined(__GNUC__)
    constexpr int per_line = 64 / int(sizeof(S));
    thread_local std::vector<S> scratch;
    thread_local std::vector<std::uint64_t> touched;
    if (scratch.size() < size_t(size) + 2 * per_line) scratch.assign(size_t(size) + 2 * per_line, S(0));
    if (touched.size() < size_t(size / per_line / 64 + 1)) touched.assign(size_t(size / per_line / 64 + 1), 0);
    S *const base = scratch.data() + (per_line - reinterpret_cast<std::uintptr_t>(scratch.data()) % 64 / sizeof(S)) % per_line;
    for (int j = 0; j < count; ++j) {
        S *row = rows + size_t(j) * size;
        const int off = int(reinterpret_cast<std::uintptr_t>(row) % 64 / sizeof(S));  // the row's place in its line
        S *buf = base + off;  // the scratch row, its lines where the row's are
        const int head = off ? (per_line - off < size ? per_line - off : size) : 0;  // before the first whole line
        const int lines = (size - head) / per_line, tail = head + lines * per_line;
        bool head_hit = false, tail_hit = false;  // a cell in the partial line before, after the whole ones
        for (int c = 0; c < cells; ++c) {
            const int i = index[c];
            buf[i] = value[c].v[j];
            if (i >= head && i < tail)
                touched[(i - head) / per_line / 64] |= std::uint64_t(1) << ((i - head) / per_line % 64);
            else
                (i < head ? head_hit : tail_hit) = true;
        }
        for (int w = 0; w < (lines + 63) / 64; ++w) {
            std::uint64_t bits = touched[w];
            touched[w] = 0;
            if (grid_emu::keep_zeros) {  // the touched lines alone
                for (; bits; bits &= bits - 1) {
                    const size_t at = head + size_t(w * 64 + __builtin_ctzll(bits)) * per_line;
                    grid_v16 *src = reinterpret_cast<grid_v16 *>(buf + at), *dst = reinterpret_cast<grid_v16 *>(row + at);
                    for (int k = 0; k < 4; ++k) grid_stream16(dst + k, src[k]), src[k] = grid_v16{};
                }
                continue;
            }
            for (int l = w * 64, end = l + 64 < lines ? l + 64 : lines; l < end; ++l, bits >>= 1) {
                const size_t at = head + size_t(l) * per_line;
                grid_v16 *src = reinterpret_cast<grid_v16 *>(buf + at), *dst = reinterpret_cast<grid_v16 *>(row + at);
                if (bits & 1)
                    for (int k = 0; k < 4; ++k) grid_stream16(dst + k, src[k]), src[k] = grid_v16{};
                else
                    for (int k = 0; k < 4; ++k) grid_stream16(dst + k, grid_v16{});
            }
        }
        if (head_hit || !grid_emu::keep_zeros)
            for (int x = 0; x < head; ++x) row[x] = buf[x], buf[x] = S(0);
        if (tail_hit || !grid_emu::keep_zeros)
            for (int x = tail; x < size; ++x) row[x] = buf[x], buf[x] = S(0);
    }
    __builtin_ia32_sfence();  // the streamed lines ordered before what follows (another thread reads the rows)
#else
    for (int j = 0; j < count; ++j) {
        S *row = rows + size_t(j) * size;
        if (!grid_emu::keep_zeros) std::memset(row, 0, size_t(size) * sizeof(S));
        for (int c = 0; c < cells; ++c) row[index[c]] = value[c].v[j];
    }
#endif
}
#endif"""


def helpers() -> list:
    """The device functions of the group ``"lane_cells"``, once per header."""
    return [n.Raw(_HELPERS)]
