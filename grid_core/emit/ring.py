"""The per-state outputs through each warp's ring of shared memory (the ring schedule).

A per-state kernel writes its state's outputs one value at a time; with one state a thread,
each store instruction of a warp writes 32 states' values, each on its own line (a large
output, nv^2 for an inverse inertia, is then 32 x nv^2 line writes a warp).  The staged kernel
coalesces them by holding every output of the warp's 32 states in shared memory, which a
large robot's outputs do not fit (atlas: 32 x 900 floats, 115 KB a warp).  The ring schedule
needs only ``slots`` values a state: each output value goes to a slot of the warp's ring as it
is computed (lane = state, conflict-free), and whenever the ring is full the warp writes what
it holds to global memory as contiguous runs of each state's output (lanes over a run's
entries, one state after another: a store instruction covers a few lines, not 32).  A value
stored to several outputs (a symmetric matrix's mirror entries, a structural zero) takes one
slot while it is held: the ring is sized to the distinct values, up to ``MAX_SLOTS``, so most
robots' outputs flush once, as whole runs (atlas Minv: 900 outputs, 214 distinct values).

The schedule is planned here, at generation time, from the straight-line per-state code: the
slot of every value, and a table of flush groups (32 entries each: output index and slot) that
``grid_ring_flush`` (prelude.cuh) walks.  H200, float32, atlas Minv at N = 16384: 326 us with
the per-thread stores, 137 with a ring of 256 slots and a slot per output (128 slots: 165; every
store coalesced, a layout the outputs' contract does not allow: 56).  With the shared slots (the
ring sized to the distinct values; atlas Minv's stores a state touch 113 sectors and 29 lines in
29 store instructions, the fewest its 3.6 KB allow, against 196 and 96 with a slot an entry) and
the launch spread over the SMs in whole warps: 66 us (fda5422, graph replay).

A ring that holds every distinct value flushes once, at the end, and may then store the warp's
outputs as the one contiguous block they are (``per_state_ring_flush`` whole, measured per
robot: ``grid_ring_flush_whole`` by each output's slot, whole lines, four values a lane), where the
groups cut the lines at every state's row.  Nsight Compute on atlas CRBA at N = 262144 with the
groups (309de44): 10 warps an SM issuing an instruction every 23 cycles, half of them waiting on
L1TEX, 1.97 TB/s; ten warps an SM took no more states a microsecond than four.  H200 float32 graph
replay, groups / whole, N = 4096 / 16384 / 65536 / 262144: atlas CRBA 18.7 / 19.4, 34.2 / 28.9,
136 / 76.7, 505 / 268 (1.18x the memory floor); g1 CRBA 24.3 / 32.9, 55.1 / 42.4, 205 / 141,
779 / 470; atlas Minv 31.6 / 32.7, 64.5 / 57.4, 231 / 196, 839 / 678 (benchmarks/results/
experiments/).  Tried and not kept, same run kind: a flush by state (each state's row, then the
next: the entries reloaded for each) 1.4-2.3x slower; smaller rings than the fit (64 to 192
slots: more warps resident, more flushes of shorter runs) 1.1-3x slower at N >= 16384; each
state's inputs loaded into registers before its work, no change (ptxas already issues them early).
"""

from __future__ import annotations

import re

import attrs

from . import nodes as n
from .expr import _text

MAX_SLOTS = 416
"""Most values a state the ring holds (a warp's ring: slots x RING_PAD values of T; four warps of
float32 at 416 slots take 214.5 KB, within the 227 KB a block may opt into on an H200)."""
RING_PAD = 33
"""Values between two slots' rows: 32 states and one of padding (odd: no bank conflicts)."""
GROUP = 32
"""Entries of a flush group: one per lane."""
MIN_RUN_SPLIT = 8
"""A run longer than a group's room is split only where at least this much room is left (shorter
pieces cost a store instruction a state for few values); else it starts the next group."""
NONE = 0xFFFF
"""A table entry's output index where the lane has nothing to write."""


@attrs.frozen
class RingPlan:
    """The per-state body with its output stores sent to ring slots, and the flush table."""

    body: tuple
    """The state body's nodes, each output store ``out[i] = v`` now ``tile[slot * RING_PAD + lane] = v``
    and a ``grid_ring_flush`` wherever the ring is full (and at the end)."""
    table: tuple[int, ...]
    """``GROUP`` entries a group: ``index | slot << 16`` (``NONE`` in the index: no entry)."""
    flushes: int
    """Flush points in the body."""
    slots: int
    """Values a state the ring holds."""
    slot_of: tuple[int, ...] | None = None
    """Where the one flush, at the end, stores the whole block of the warp's outputs in order
    (``whole_call``): each output's slot (then ``table`` is empty); else None."""


def groups_of(pending: dict[int, int]) -> list[list[int]]:
    """The output indices held in the ring (``pending``: index -> slot) as flush groups of at most
    ``GROUP`` indices: maximal runs of consecutive indices, packed in index order, a run split
    only where the group's room is at least ``MIN_RUN_SPLIT`` (or the run is longer than a group)."""
    runs: list[list[int]] = []
    for i in sorted(pending):
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    groups: list[list[int]] = []
    group: list[int] = []
    for run in runs:
        while run:
            room = GROUP - len(group)
            if len(run) <= room:
                group, run = group + run, []
            elif room >= MIN_RUN_SPLIT:
                group, run = group + run[:room], run[room:]
            else:
                groups.append(group)
                group = []
                continue
            if len(group) == GROUP:
                groups.append(group)
                group = []
    if group:
        groups.append(group)
    return groups


_PURE = re.compile(r"-?(?:[A-Za-z_]\w*|T\([-+0-9.eE]+\)|[-+0-9.eE]+)")
_CONST_DECL = re.compile(r"^const \w+ (\w+) = ")


def _identity(value: str, consts: set[str]) -> str | None:
    """A stored value's identity where the text alone fixes it (a number, ``T(number)``, or a
    const temporary declared before, maybe negated), else None."""
    if not _PURE.fullmatch(value):
        return None
    name = value.lstrip("-")
    if (name[:1].isalpha() or name[:1] == "_") and not name.startswith("T(") and name not in consts:
        return None
    return value


def _stores(body: list, out: str):
    """``(node, index, value, identity)`` of each top-level store to ``out``, else
    ``(node, None, None, None)``, in order."""
    store = re.compile(rf"^{re.escape(out)}\[(\d+)\] = (.*)$", re.S)
    consts: set[str] = set()
    for node in body:
        text = node.text if isinstance(node, n.Stmt) else ""
        decl = _CONST_DECL.match(text)
        if decl:
            consts.add(decl.group(1))
        m = store.match(text)
        if m is None:
            yield node, None, None, None
        else:
            yield node, int(m.group(1)), m.group(2), _identity(m.group(2), consts)


def plan(body: list, out: str, size: int, flush_call, slots: int | None = None, whole_call=None) -> RingPlan | None:
    """The ring schedule of a straight-line per-state ``body`` whose output array ``out`` (``size``
    values) is written by top-level statements ``out[<constant>] = <expression>``, each index
    exactly once, and never read; None where the body is not of that form (the plain and staged
    kernels remain).  ``flush_call(g0, g1)`` gives the statement that flushes groups g0 .. g1 - 1.
    A value stored again while it is held (the same number, or the same const temporary, maybe
    negated) reuses its slot.  ``slots``: the ring's size (default: the distinct values, rounded
    up to a multiple of 32, at most ``MAX_SLOTS``).  ``whole_call()``, where given, is the statement
    of a flush that holds every output (the ring flushes once, at the end): it stores the warp's
    outputs as one block, by ``slot_of``."""
    if size >= NONE:
        return None
    if slots is None:
        distinct, seen = 0, set()
        for _, index, _, ident in _stores(body, out):
            if index is not None and (ident is None or ident not in seen):
                distinct += 1
                seen.add(ident)
        slots = min(MAX_SLOTS, -(-max(distinct, 1) // GROUP) * GROUP)
    if slots >= 1 << 16:
        return None
    mention = re.compile(rf"\b{re.escape(out)}\b")
    written: set[int] = set()
    new: list = []
    table: list[int] = []
    pending: dict[int, int] = {}  # output index -> slot, since the last flush
    held: dict[str, int] = {}  # value identity -> its slot, since the last flush
    used = 0  # slots taken since the last flush
    flushes = 0

    def flush() -> None:
        nonlocal flushes, used
        if not pending:
            return
        g0 = len(table) // GROUP
        for group in groups_of(pending):
            table.extend([i | pending[i] << 16 for i in group] + [NONE] * (GROUP - len(group)))
        new.append(flush_call(g0, len(table) // GROUP))
        pending.clear()
        held.clear()
        used = 0
        flushes += 1

    for node, index, value, ident in _stores(body, out):
        if index is None:
            if mention.search(_text(node)):
                return None  # read, or written where the schedule cannot see it
            new.append(node)
            continue
        if index >= size or index in written or mention.search(value):
            return None
        written.add(index)
        if ident is not None and ident in held:
            pending[index] = held[ident]  # the same value, already in its slot
            continue
        if used == slots:
            flush()
        pending[index] = used
        if ident is not None:
            held[ident] = used
        new.append(n.Stmt(f"tile[{used * RING_PAD} + lane] = {value}", comment=node.comment))
        used += 1
    if len(written) != size:
        return None  # an output the code never writes (the plain kernel leaves it as it was)
    if whole_call is not None and flushes == 0:
        new.append(whole_call())
        return RingPlan(tuple(new), (), 1, slots, tuple(pending[i] for i in range(size)))
    flush()
    return RingPlan(tuple(new), tuple(table), flushes, slots)
