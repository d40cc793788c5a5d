"""Outputs the per-state code assigns cell by cell (:meth:`~grid_core.emit.emitter.Emitter.direct_outputs`).

The helper group ``"lane_cells"`` (:data:`~grid_core.emit.lie_steps.SHARED_HELPERS`), emitted once
per header where an algorithm's layers have such outputs: ``grid_zero_run`` (a run of structural
zeros of an output), and in the CPU build ``grid_lane_image``, the output argument of the
per-state code on ``grid_lanes``: an image of the whole output in a thread's buffer
(``grid_lane_image_buffer``, every lane's value of a cell side by side, a mark for each cell
assigned), and ``grid_lane_image_store``, which then writes each lane's row from it line by line:
a line's cells transposed out of the image and written by non-temporal stores of whole 64-byte
lines (no line read for ownership), in address order, the image zeroed again behind it.

Otherwise the CPU build runs the per-state code on a group's local copy of every output and
transposes it out after: for outputs beyond the caches (idsva_so's four nv^3 tensors on atlas,
864 KB a state, 3.5 MB a group of four, 91% structural zeros) that copy costs more than the
computation.  A model of atlas's stores (its cells and zero runs, no arithmetic; batch 64, one
thread, us per state, medians of 25 rounds on a loaded 2-core VM): the local copy 164, cells and
zero runs written in place 150, each group's rows zeroed then its cells scattered 28-31, the cells
kept and each row zeroed then given its cells 18-20; storing every value (numpy's fill) 22-26,
memset of every value 16-17.

A call with ``keep_zeros=True`` (:class:`~grid_core.CpuHandle`: the caller's arrays hold the
structural zeros already) writes only the lines that hold a cell (16% of atlas's), as Pinocchio
writes the cells of its tensors.  History on atlas (batch 64, one thread): each row zeroed by
memset, then its cells stored one by one (each line read for ownership again); then (session 48)
the cells kept in assignment order (value and index, a count through memory), each lane's cells
scattered into a scratch row, marked line by line in a bit set, and the row streamed out: plain
calls 0.50 of the time before, ``keep_zeros`` 0.72.  The scatter was the cost: atlas's 8814 cells
a state in no order of address (1% of consecutive cells share a line), four scattered stores and
four read-modify-writes of the bit set a cell, 13-17 us a state of a store that streams its lines
in 8 (a model of the stores alone: the cells' addresses in the loop form's order, AMD EPYC VM).
The image (session 49) costs one store and one mark a cell as it is assigned, and a line's 8
cells come out of it by two 4x4 transposes: in the same model, recording and storing 0.49-0.52
of the scratch row's time with ``keep_zeros`` (14 against 28 us a state), 0.75-0.76 plain (34-36
against 44-47).  The libraries of atlas's idsva_so called in turn in one process (batch 64, one
thread, 40 rounds, paired medians, outputs bit-identical): ``keep_zeros`` 0.76 of the scratch
row's time (63-66 against 83-88 us a state), plain 0.87-0.94.  Kept out: the cells streamed in
address order from a cached sort of the cells kept (a gather a cell and a branch a line: slower
than the scatter).
"""

from __future__ import annotations

from . import nodes as n

_HELPERS = r"""// Cells [first, end) of an output set to zero (a run of its structural zeros).
template <typename T> __host__ __device__ inline void grid_zero_run(T *out, int first, int end) {
    for (int x = first; x < end; ++x) out[x] = T(0);
}
#ifdef GRID_HOST_CPU
// An output of the per-state code on grid_lanes kept as an image of the whole output: out[i] = v
// puts every lane's value of cell i at cell[i] and sets mark[i] (bool: a store to it aliases no
// pointer, so the code keeps its own in registers).  Its zero runs need no store: the image is zero
// where no cell was assigned.  grid_lane_image_store writes each lane's row from it.
template <typename V> struct grid_lane_image {
    V *cell;
    bool *mark;
    struct ref {
        V *cell;
        bool *mark;
        int i;
        ref &operator=(V x) {
            cell[i] = x;
            mark[i] = true;
            return *this;
        }
    };
    ref operator[](int i) const { return {cell, mark, i}; }
};
template <typename V> inline void grid_zero_run(const grid_lane_image<V> &, int, int) {}
// A thread's image of one output of `size` values (a thread_local of the per-state kernel): zero,
// and unmarked, between stores (each store clears what it read).
template <typename V> struct grid_lane_image_buffer {
    std::vector<V> cell;
    std::vector<char> mark;  // read as bool
    explicit grid_lane_image_buffer(int size) : cell(size_t(size), V(0)), mark(size_t(size) + 8, 0) {}
    grid_lane_image<V> image() { return {cell.data(), reinterpret_cast<bool *>(mark.data())}; }
};
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
// The rows of the first `count` lanes (each `size` values, contiguous) from the image `im`, which is
// left zero and unmarked.  Where every row has its lines at the same cells (size a whole number of
// lines, or one row), line by line: the image's values of a line's cells transposed into each lane's
// line (two 4x4 transposes for four double lanes) and written by non-temporal stores of whole lines,
// which read no line for ownership first: a line with a marked cell, or in a launch that keeps zeros
// (grid_emu::keep_zeros: the caller's rows hold the structural zeros already, from an earlier call)
// only such a line, its structural zeros written again as zeros; any other line as zeros.  The cells
// of the partial lines before the first whole line and after the last one by plain stores (in a
// launch that keeps zeros only where such a part holds a marked cell).  Rows at different places in
// their lines, or without SSE2: row by row, line by line, by plain stores.
template <typename V, typename S> inline void grid_lane_image_store(S *rows, int size, int count, grid_lane_image<V> im) {
    constexpr int L = int(sizeof(V) / sizeof(S));
    V *const cell = im.cell;
    bool *const mark = im.mark;
    const bool keep = grid_emu::keep_zeros;
    constexpr int per_line = 64 / int(sizeof(S));
#if defined(__SSE2__) && defined(__GNUC__)
    if (count == 1 || size % per_line == 0) {
        const int off = int(reinterpret_cast<std::uintptr_t>(rows) % 64 / sizeof(S));  // every row's place in its line
        const int head = off ? (per_line - off < size ? per_line - off : size) : 0;  // before the first whole line
        const int lines = (size - head) / per_line, tail = head + lines * per_line;
        for (int l = 0; l < lines; ++l) {
            const int c0 = head + l * per_line;
            std::uint64_t hit = 0;  // the line's marks, eight at a time
            for (int x = 0; x < per_line; x += 8) {
                std::uint64_t w;
                std::memcpy(&w, mark + c0 + x, 8);
                hit |= w;
            }
            if (!hit) {
                if (!keep)
                    for (int j = 0; j < count; ++j)
                        for (int k = 0; k < 4; ++k) grid_stream16(reinterpret_cast<grid_v16 *>(rows + size_t(j) * size + c0) + k, grid_v16{});
                continue;
            }
            if constexpr (L == 4 && per_line == 8) {  // lane j's line: w[j] then u[j]
                typename V::V w[4] = {cell[c0].v, cell[c0 + 1].v, cell[c0 + 2].v, cell[c0 + 3].v};
                typename V::V u[4] = {cell[c0 + 4].v, cell[c0 + 5].v, cell[c0 + 6].v, cell[c0 + 7].v};
                grid_transpose4(w[0], w[1], w[2], w[3]);
                grid_transpose4(u[0], u[1], u[2], u[3]);
                for (int j = 0; j < count; ++j) {
                    grid_v16 *dst = reinterpret_cast<grid_v16 *>(rows + size_t(j) * size + c0);
                    grid_stream16(dst, (grid_v16)__builtin_shufflevector(w[j], w[j], 0, 1));
                    grid_stream16(dst + 1, (grid_v16)__builtin_shufflevector(w[j], w[j], 2, 3));
                    grid_stream16(dst + 2, (grid_v16)__builtin_shufflevector(u[j], u[j], 0, 1));
                    grid_stream16(dst + 3, (grid_v16)__builtin_shufflevector(u[j], u[j], 2, 3));
                }
            } else {
                alignas(64) S t[L][per_line];
                for (int x = 0; x < per_line; ++x)
                    for (int j = 0; j < L; ++j) t[j][x] = cell[c0 + x].v[j];
                for (int j = 0; j < count; ++j)
                    for (int k = 0; k < 4; ++k)
                        grid_stream16(reinterpret_cast<grid_v16 *>(rows + size_t(j) * size + c0) + k, reinterpret_cast<const grid_v16 *>(t[j])[k]);
            }
            for (int x = 0; x < per_line; ++x) cell[c0 + x] = V(0);
            std::memset(mark + c0, 0, per_line);
        }
        bool head_hit = false, tail_hit = false;
        for (int x = 0; x < head; ++x) head_hit |= mark[x];
        for (int x = tail; x < size; ++x) tail_hit |= mark[x];
        for (int j = 0; j < count; ++j) {
            S *row = rows + size_t(j) * size;
            if (head_hit || !keep)
                for (int x = 0; x < head; ++x) row[x] = cell[x].v[j];
            if (tail_hit || !keep)
                for (int x = tail; x < size; ++x) row[x] = cell[x].v[j];
        }
        for (int x = 0; x < head; ++x) cell[x] = V(0), mark[x] = false;
        for (int x = tail; x < size; ++x) cell[x] = V(0), mark[x] = false;
        __builtin_ia32_sfence();  // the streamed lines ordered before what follows (another thread reads the rows)
        return;
    }
#endif
    for (int j = 0; j < count; ++j) {  // each row by its own lines (plain stores)
        S *row = rows + size_t(j) * size;
        const int off = int(reinterpret_cast<std::uintptr_t>(row) % 64 / sizeof(S));
        for (int first = 0, end; first < size; first = end) {
            end = first + per_line - (first + off) % per_line;
            end = end < size ? end : size;
            bool hit = !keep;
            for (int x = first; x < end; ++x) hit |= mark[x];
            if (hit)
                for (int x = first; x < end; ++x) row[x] = cell[x].v[j];
        }
    }
    for (int x = 0; x < size; ++x)
        if (mark[x]) cell[x] = V(0), mark[x] = false;
}
#endif"""


def helpers() -> list:
    """The device functions of the group ``"lane_cells"``, once per header."""
    return [n.Raw(_HELPERS)]
