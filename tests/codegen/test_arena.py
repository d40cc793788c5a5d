"""Arena plans: rung selection per tier, sizes and placements from one declaration."""

from __future__ import annotations

import pytest

from grid_core.arena import (ALL_SCRATCH, ArenaRegion, SpillRung, Tier, expand_rungs, padded, select_rungs,
                             spill_ladder)
from grid_core.errors import PluginError

REGIONS = (
    ArenaRegion("io", 10, spillable=False),
    ArenaRegion("hot", 1000),
    ArenaRegion("cold", 6000),
)
RUNGS = (SpillRung(0, "none"), SpillRung(1, "cold", {"cold"}), SpillRung(2, "all", {"cold", "hot"}))


def test_everything_fits_keeps_rung_zero_except_minimal():
    plan = select_rungs("x", REGIONS, RUNGS, target_smem_bytes=227 * 1024)
    assert plan.rung_of_tier == {Tier.SHARED: 0, Tier.LITE: 1, Tier.MINIMAL: 2}
    # LITE's 48 KB target: rung 0 needs (12 + 1000 + 6000) * 8 B = 56 KB, rung 1 8 KB
    assert plan.smem_elements(plan.rungs[0]) == padded(10) + 1000 + 6000
    assert plan.smem_elements(plan.rungs[1]) == padded(10) + 1000


def test_small_target_falls_through_to_the_deepest_rung():
    plan = select_rungs("x", REGIONS, RUNGS, target_smem_bytes=0)
    assert set(plan.rung_of_tier.values()) == {2}
    deepest = plan.rungs[2]
    assert plan.smem_elements(deepest) == padded(10)
    assert plan.workspace_elements(deepest) == 1000 + 6000


def test_env_variable_forces_the_deepest_rung(monkeypatch):
    monkeypatch.setenv("GRID_CUDA_TARGET_SHARED_MEM_BYTES", "64")
    plan = select_rungs("x", REGIONS, RUNGS)
    assert plan.rung_of_tier[Tier.SHARED] == 2


def test_placements_are_packed_per_space():
    plan = select_rungs("x", REGIONS, RUNGS, target_smem_bytes=0)
    pl = plan.placements(plan.rungs[1])
    assert (pl["io"].space, pl["io"].offset) == ("smem", 0)
    assert (pl["hot"].space, pl["hot"].offset) == ("smem", padded(10))
    assert (pl["cold"].space, pl["cold"].offset) == ("workspace", 0)


@pytest.mark.parametrize(
    "rungs, match",
    [
        ((SpillRung(0, "a", {"hot"}),), "rung 0 must exist and spill nothing"),
        ((SpillRung(0, "a"), SpillRung(2, "b")), "levels must be 0, 1, 2"),
        ((SpillRung(0, "a"), SpillRung(1, "b", {"nope"})), "undeclared regions"),
        ((SpillRung(0, "a"), SpillRung(1, "b", {"io"})), "unspillable"),
        ((SpillRung(0, "a"), SpillRung(1, "b", {"hot"}), SpillRung(2, "c", {"cold"})), "at least what rung 1"),
    ],
)
def test_malformed_ladders_are_rejected(rungs, match):
    with pytest.raises(PluginError, match=match):
        select_rungs("x", REGIONS, rungs)


def test_orchestrator_rungs_follow_the_callees_and_all_scratch():
    from grid_core.arena import ALL_SCRATCH, callee_rung, expand_rungs

    callee = select_rungs("callee", REGIONS, RUNGS, target_smem_bytes=227 * 1024)
    regions = (ArenaRegion("out", 4, spillable=False), ArenaRegion("mine", 8), *REGIONS[1:])
    rungs = (SpillRung(0, "none"), SpillRung(1, "callee's", {callee_rung("callee", 1)}),
             SpillRung(2, "callee's deepest and mine", {callee_rung("callee", 7), "mine"}),
             SpillRung(3, "all", {ALL_SCRATCH}))
    out = expand_rungs("orch", rungs, regions, {"callee": callee})
    assert [set(r.spilled) for r in out] == [set(), {"cold"}, {"cold", "hot", "mine"}, {"mine", "hot", "cold"}]
    # an alternative the orchestrator declares but does not compose for this robot spills nothing
    alt = expand_rungs("orch", (SpillRung(0, "none"), SpillRung(1, "x", {callee_rung("other", 1), "mine"})),
                       regions, {}, declared=("callee", "other"))
    assert set(alt[1].spilled) == {"mine"}
    with pytest.raises(PluginError, match="does not compose"):
        expand_rungs("orch", (SpillRung(0, "none"), SpillRung(1, "x", {callee_rung("other", 1)})), regions, {})


def test_the_usual_ladder_starts_in_shared_memory_and_ends_with_all_scratch_in_global():
    ladder = spill_ladder(("cold in global", {"cold"}, "the cold band"))
    assert [(r.level, r.name, set(r.spilled)) for r in ladder] == [
        (0, "all in shared memory", set()), (1, "cold in global", {"cold"}),
        (2, "all scratch in global", {ALL_SCRATCH})]
    plan = select_rungs("algo", REGIONS, expand_rungs("algo", ladder, REGIONS, {}), 0)
    assert plan.rungs[-1].spilled == {"hot", "cold"}
