"""Outputs the per-state code assigns cell by cell (:meth:`~grid_core.emit.emitter.Emitter.direct_outputs`).

The helper group ``"lane_cells"`` (:data:`~grid_core.emit.lie_steps.SHARED_HELPERS`), emitted once
per header where an algorithm's layers have such outputs: ``grid_zero_run`` (a run of structural
zeros of an output), and in the CPU build ``grid_lane_cells``, the output argument of the
per-state code on ``grid_lanes`` that keeps the cells assigned (index and value of every lane, in
the order assigned), and ``grid_lane_cells_store``, which then writes each lane's row: zeroed
whole (one memset), then its cells.

Otherwise the CPU build runs the per-state code on a group's local copy of every output and
transposes it out after: for outputs beyond the caches (idsva_so's four nv^3 tensors on atlas,
864 KB a state, 3.5 MB a group of four, 91% structural zeros) that copy costs more than the
computation.  A model of atlas's stores (its cells and zero runs, no arithmetic; batch 64, one
thread, us per state, medians of 25 rounds on a loaded 2-core VM): the local copy 164, cells and
zero runs written in place 150, each group's rows zeroed then its cells scattered 28-31, the cells
kept and each row zeroed then given its cells 18-20; storing every value (numpy's fill) 22-26,
memset of every value 16-17.

A call with ``keep_zeros=True`` (:class:`~grid_core.CpuHandle`: the caller's arrays hold the
structural zeros already) skips each row's memset and writes the cells alone, as Pinocchio writes
its tensors.  atlas, batch 64, one thread, on an Intel Xeon VM whose memory made storing every value
1.2 times Pinocchio's whole call: 28 us a state against 54, of which the per-state code without
any store took 11; the rest is the cells' lines (16% of the tensors', each read for ownership).
Scattering the cells in index order (a cached permutation) gave 26, prefetching the next group's
lines for writing after each store 37: neither kept.
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
// The rows of the first `count` lanes (each `size` values, contiguous): zeroed, then the `cells`
// kept (value, index), in the order assigned, a row at a time (its lines still in the cache).  In
// a launch that keeps zeros (grid_emu::keep_zeros: the caller's rows hold them already, from an
// earlier call) the cells alone: the lines of the structural zeros are not touched.
template <typename V, typename S>
inline void grid_lane_cells_store(S *rows, int size, int count, const V *value, const int *index, int cells) {
    for (int j = 0; j < count; ++j) {
        S *row = rows + size_t(j) * size;
        if (!grid_emu::keep_zeros) std::memset(row, 0, size_t(size) * sizeof(S));
        for (int c = 0; c < cells; ++c) row[index[c]] = value[c].v[j];
    }
}
#endif"""


def helpers() -> list:
    """The device functions of the group ``"lane_cells"``, once per header."""
    return [n.Raw(_HELPERS)]
