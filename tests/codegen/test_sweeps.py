"""Golden tests of the shared sweep drivers' schedules (grid_core.emit.sweeps)."""

from __future__ import annotations

from grid_core.emit import sweeps
from grid_core.emit.printer import render


def test_fan_out_runs_places_runs_side_by_side_and_long_items_on_warps_of_their_own():
    runs = [
        sweeps.Run(3, lambda scope, k: scope.stmt(f"a[{k}] = T(1)"), comment="three items, one code path"),
        sweeps.Run(1, lambda scope, k: scope.stmt(f"b[{k}] = T(2)")),
        sweeps.Run(2, lambda scope, k: scope.stmt(f"c[{k}] = T(3)"), per_warp=True),
        sweeps.Run(1, lambda scope, k: scope.stmt(f"d[{k}] = T(4)"), per_warp=True),
        sweeps.Run(0, lambda scope, k: scope.stmt("never()")),
    ]
    assert sweeps.runs_width(runs) == 128
    assert render(sweeps.fan_out_runs(runs)) == (
        "for (int k = GRID_TID; k < 128; k += GRID_BLOCK_THREADS) {\n"
        "    if (k < 3) {\n"
        "        // three items, one code path\n"
        "        a[k] = T(1);\n"
        "    }\n"
        "    if (k == 3) {\n"
        "        b[0] = T(2);\n"
        "    }\n"
        "    if (k >= 32 && k < 96 && (k - 32) % 32 == 0) {\n"
        "        c[(k - 32) / 32] = T(3);\n"
        "    }\n"
        "    if (k == 96) {\n"
        "        d[0] = T(4);\n"
        "    }\n"
        "}\n"
    )


def test_fan_out_runs_of_nothing_is_nothing():
    assert sweeps.fan_out_runs([]) == []
    assert sweeps.fan_out_runs([sweeps.Run(0, lambda scope, k: None)]) == []


def test_a_span_binds_its_index_and_phases_put_a_barrier_between_non_empty_stages():
    cols = sweeps.span(4, 7, lambda scope, j: scope.stmt(f"a[{j}] = T(1)"), comment="columns 4 <= j < 7")
    one = sweeps.Run(1, lambda scope, k: scope.stmt(f"b[{k}] = T(2)"))
    assert sweeps.span(2, 2, lambda scope, j: None).count == 0
    assert render(sweeps.phases([[cols], [], [one]], ["the columns", "never", "then b"])) == (
        "// the columns\n"
        "for (int k = GRID_TID; k < 3; k += GRID_BLOCK_THREADS) {\n"
        "    if (k < 3) {\n"
        "        // columns 4 <= j < 7\n"
        "        const int j = k + 4;\n"
        "        a[j] = T(1);\n"
        "    }\n"
        "}\n"
        "__syncthreads();\n"
        "// then b\n"
        "for (int k = GRID_TID; k < 1; k += GRID_BLOCK_THREADS) {\n"
        "    if (k == 0) {\n"
        "        b[0] = T(2);\n"
        "    }\n"
        "}\n"
    )


def test_ranges_are_the_maximal_runs_of_kept_indices():
    support = {1, 2, 5}
    assert sweeps.ranges(8, lambda c: c not in support) == [(0, 1), (3, 5), (6, 8)]
    assert sweeps.ranges(3, lambda c: True) == [(0, 3)] and sweeps.ranges(3, lambda c: False) == []
    assert sweeps.ranges(0, lambda c: True) == []


def test_groups_are_the_levels_or_one_body_each():
    from conftest import load

    robot = load("hyq")
    assert sweeps.groups(robot, "levels") == [list(level) for level in robot.topology.levels]
    assert sweeps.groups(robot, "bodies") == [[b] for b in range(robot.num_bodies)]


def test_depth_first_loads_xi_and_sums_each_subtree_into_its_parent():
    from conftest import load
    from grid_core.emit.expr import Scope

    robot = load("hyq")
    scope, seen = Scope("t"), []
    io = {"q": lambda i: f"q[{i}]", "xi": lambda i: f"XI[{i}]"}

    def finish(sc, c, total):  # the number of bodies in c's subtree, folded
        seen.append((c, total[0]))
        return total

    sweeps.depth_first_sums(robot, scope, io, lambda b: [1.0], finish, "n")
    assert sorted(seen) == [(b, float(len(robot.topology.subtree[b]))) for b in range(robot.num_bodies)]
    assert [c for c, _ in seen].index(1) < [c for c, _ in seen].index(0)  # children before parents
    assert "XI[" in "".join(str(x) for x in scope.body())
