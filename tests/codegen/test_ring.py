"""The ring schedule of the per-state outputs (grid_core.emit.ring), on hand-built bodies: the
slots and flush table a small body gets, derived by hand, and the bodies it refuses."""

from __future__ import annotations

from grid_core.emit import nodes as n
from grid_core.emit import ring


def flush_call(g0, g1):
    return n.Stmt(f"flush({g0}, {g1})")


def test_groups_pack_runs_in_index_order():
    pending = {10: 0, 0: 1, 1: 2, 2: 3}
    assert ring.groups_of(pending) == [[0, 1, 2, 10]]
    # a run longer than a group is split at the group's size; a short room starts a new group
    long = {i: i for i in range(40)}
    assert ring.groups_of(long) == [list(range(32)), list(range(32, 40))]
    runs = {**{i: i for i in range(28)}, **{100 + i: 28 + i for i in range(10)}}
    assert ring.groups_of(runs) == [list(range(28)), [100 + i for i in range(10)]]


def test_plan_slots_and_table():
    body = [n.Stmt("const T t1 = q[0] * q[1]"), n.Stmt("M[2] = t1"), n.Stmt("M[0] = q[0]"),
            n.Stmt("M[1] = -t1"), n.Comment("end")]
    plan = ring.plan(body, "M", 3, flush_call, slots=2)
    pad = ring.RING_PAD
    assert [x.text for x in plan.body if isinstance(x, n.Stmt)] == [
        "const T t1 = q[0] * q[1]", f"tile[{0 * pad} + lane] = t1", f"tile[{1 * pad} + lane] = q[0]",
        "flush(0, 1)",  # the ring full: M[0] (slot 1) and M[2] (slot 0), one group in index order
        f"tile[{0 * pad} + lane] = -t1", "flush(1, 2)"]
    none = [ring.NONE] * 30
    assert plan.table == (0 | 1 << 16, 2 | 0 << 16, *none, 1 | 0 << 16, *none, ring.NONE)
    assert plan.flushes == 2


def test_plan_refuses_what_it_cannot_schedule():
    ok = [n.Stmt("M[0] = a"), n.Stmt("M[1] = b")]
    assert ring.plan(ok, "M", 2, flush_call) is not None
    assert ring.plan([*ok, n.Stmt("x = M[0]")], "M", 2, flush_call) is None  # read back
    assert ring.plan([n.Stmt("M[0] = a"), n.Stmt("M[0] = b")], "M", 2, flush_call) is None  # twice
    assert ring.plan([n.Stmt("M[0] = a")], "M", 2, flush_call) is None  # M[1] never written
    assert ring.plan([n.Stmt("M[0] = M[1] + a"), n.Stmt("M[1] = b")], "M", 2, flush_call) is None
    assert ring.plan([n.If("c", [n.Stmt("M[0] = a")]), n.Stmt("M[1] = b")], "M", 2, flush_call) is None


def test_a_value_stored_twice_takes_one_slot():
    """A const temporary (maybe mirrored) or a number stored to several outputs is held once; a
    name that is not a const temporary (it may change between the stores) is held each time."""
    body = [n.Stmt("const T t1 = q[0] * q[1]"), n.Stmt("M[0] = t1"), n.Stmt("M[1] = T(0.0)"),
            n.Stmt("M[3] = t1"), n.Stmt("M[2] = T(0.0)"), n.Stmt("M[4] = x"), n.Stmt("M[5] = x")]
    plan = ring.plan(body, "M", 6, flush_call)
    assert plan.slots == 32  # four distinct values (t1, T(0.0), x twice), a multiple of 32
    pad = ring.RING_PAD
    assert [x.text for x in plan.body if isinstance(x, n.Stmt)] == [
        "const T t1 = q[0] * q[1]", "tile[0 + lane] = t1", f"tile[{pad} + lane] = T(0.0)",
        f"tile[{2 * pad} + lane] = x", f"tile[{3 * pad} + lane] = x", "flush(0, 1)"]
    assert plan.table[:7] == (0 | 0 << 16, 1 | 1 << 16, 2 | 1 << 16, 3 | 0 << 16, 4 | 2 << 16, 5 | 3 << 16,
                              ring.NONE)


def test_a_ring_smaller_than_its_values_flushes_when_full():
    """The ring's default size is the distinct values rounded up to 32; a ring of fewer slots
    flushes whenever it is full, each output once in the table."""
    body = [n.Stmt(f"M[{i}] = q[{i}]") for i in range(70)]
    assert ring.plan(body, "M", 70, flush_call).slots == 96
    small = ring.plan(body, "M", 70, flush_call, slots=32)
    assert (small.slots, small.flushes) == (32, 3)
    assert [x.text for x in small.body if x.text.startswith("flush")] == ["flush(0, 1)", "flush(1, 2)", "flush(2, 3)"]
    # every entry's slot within the ring; every output in the table once
    entries = [e for e in small.table if e & 0xFFFF != ring.NONE]
    assert all(e >> 16 < 32 for e in entries) and sorted(e & 0xFFFF for e in entries) == list(range(70))
