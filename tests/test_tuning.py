"""The tuner (grid_core.tuning) on hand-made timing rows: each choice and the numbers it keeps."""

from __future__ import annotations

import json

import attrs

from conftest import load
from grid_core import tuning


@attrs.frozen
class AB:
    option: str
    forms: dict


MODES = {"stage": AB("per_state_stage_min_n", {"staged": 1, "plain": 1 << 30}),
         "ring": AB("per_state_ring_min_n", {"ring": 1, "noring": 1 << 30}),
         "ringflush": AB("per_state_ring_flush", {"flushgroups": "groups", "flushwhole": "whole"})}


def row(robot, n, layout, us, algorithm="crba"):
    return {"robot": robot, "n": n, "layout": layout, "algorithm": algorithm, tuning.METRIC: us}


def test_crossover_is_where_per_state_never_loses_again():
    k = {(1, "block"): 5, (1, "per_state"): 4,  # wins at 1, loses at 256: not the crossover
         (256, "block"): 6, (256, "per_state"): 7,
         (1024, "block"): 9, (1024, "per_state"): 8, (4096, "block"): 20, (4096, "per_state"): 10}
    assert tuning.crossover(k) == 1024
    assert tuning.crossover({(1, "block"): 1, (1, "per_state"): 2}) is None


def test_method_by_geometric_mean_and_aba_crossover():
    rows = [row("g1", n, "auto", t, "forward_dynamics") for n, t in ((256, 10), (1024, 40))]
    rows += [row("g1", n, "auto", t, "aba") for n, t in ((256, 12), (1024, 20))]  # geomean 15.5 < 20
    rows += [row("g1", 256, "block", 11, "aba"), row("g1", 256, "per_state", 12, "aba"),
             row("g1", 1024, "block", 30, "aba"), row("g1", 1024, "per_state", 20, "aba")]
    entry = {"per_state_min_n": 64}
    tuning.pick_method(entry, rows, "g1")
    assert entry["method"] == "aba" and entry["method_ab_sizes"] == [256, 1024]
    assert entry["method_ab_geomean_us"] == {"minv": 20.0, "aba": round((12 * 20) ** 0.5, 3)}
    assert entry["per_state_min_n"] == 1024  # aba's own crossover


def test_min_n_allows_three_percent_and_keeps_the_file_without_an_ab():
    rows = [row("hyq-staged", n, "per_state", s) for n, s in ((1024, 11), (4096, 10.2), (16384, 20))]
    rows += [row("hyq-plain", n, "per_state", p) for n, p in ((1024, 10), (4096, 10), (16384, 25))]
    entry = {}
    tuning.pick_min_n(entry, rows, "hyq", {}, "stage", MODES["stage"])
    assert entry["per_state_stage_min_n"] == 4096  # 10.2 <= 1.03 x 10; 11 is not
    kept = {}
    tuning.pick_min_n(kept, rows, "iiwa14", {"per_state_stage_min_n": 7, "other": 1}, "stage", MODES["stage"])
    assert kept == {"per_state_stage_min_n": 7}


def test_form_needs_more_than_the_noise_to_leave_the_default():
    rows = [row("atlas-flushgroups", n, "per_state", 10.0) for n in (1024, 4096, 16384)]
    rows += [row("atlas-flushwhole", n, "per_state", 9.8) for n in (1024, 4096, 16384)]  # 2% faster: noise
    entry = {}
    tuning.pick_form(entry, rows, "atlas", {}, "ringflush", MODES["ringflush"], "flushgroups", 4096)
    assert entry["per_state_ring_flush"] == "groups" and entry["ringflush_ab_sizes"] == [4096, 16384]
    rows += [row("g1-flushgroups", 4096, "per_state", 10.0), row("g1-flushwhole", 4096, "per_state", 9.0)]
    tuning.pick_form(entry, rows, "g1", {}, "ringflush", MODES["ringflush"], "flushgroups", 4096)
    assert entry["per_state_ring_flush"] == "whole"


def test_entry_of_a_robot_and_the_merge_into_the_file(tmp_path):
    robot = load("iiwa14")
    rows = [row("iiwa14", n, layout, t) for n, layout, t in
            ((256, "block", 6), (256, "per_state", 8), (1024, "block", 9), (1024, "per_state", 7),
             (1024, "auto", 7))]
    rows += [row("iiwa14-bodies", 256, "block", 5), row("iiwa14-bodies", 1024, "block", 10),
             row("iiwa14-occ2", 1024, "per_state", 6.0)]
    entry = tuning.tune_entry("crba", robot, rows, {"p1": "levels"}, modes=MODES, occupancies=(2,), gpu="H200")
    assert entry["digest"] == robot.digest[:16]
    assert entry["per_state_min_n"] == 1024 and entry["p1"] == "bodies"  # 5 < 6 at N = 256
    assert entry["per_state_min_blocks"] == 2 and entry["per_state_occupancy_ab_us"] == {"1": 7, "2": 6.0}
    assert tuning.tune_entry("minv", robot, rows, {}, modes=MODES) is None  # no minv rows: no entry
    path = tmp_path / "crba.tuning.json"
    path.write_text(json.dumps({"robots": {"g1": {"p1": "levels"}, "iiwa14": {"p1": "x"}}}))
    written = tuning.write_tuning(path, {"iiwa14": entry})
    assert json.loads(path.read_text()) == written
    assert written["robots"] == {"g1": {"p1": "levels"}, "iiwa14": entry}


def test_block_occupancy_is_picked_by_geometric_mean_beyond_the_noise():
    """g1's forward-dynamics gradient: two blocks an SM (64 registers) against one (92 or 114)."""
    rows = [row("g1", n, "block", t) for n, t in ((256, 197.0), (1024, 1300.0), (4096, 5200.0))]
    rows += [row("g1-bocc2", n, "block", t) for n, t in ((256, 150.0), (1024, 760.0), (4096, 2850.0))]
    rows += [row("g1-bocc2", 16384, "per_state", 1.0)]  # another layout: not the block kernel's A/B
    entry = {}
    tuning.pick_block_occupancy(entry, rows, "g1", {}, (2,))
    assert entry["block_min_blocks"] == 2 and entry["block_occupancy_ab_sizes"] == [256, 1024, 4096]
    assert entry["block_occupancy_ab_geomean_us"] == {"1": round((197.0 * 1300.0 * 5200.0) ** (1 / 3), 3),
                                                      "2": round((150.0 * 760.0 * 2850.0) ** (1 / 3), 3)}
    # 2% faster: within the noise, the default stays
    close = [row("g1", 1024, "block", 100.0), row("g1-bocc2", 1024, "block", 98.0)]
    entry = {}
    tuning.pick_block_occupancy(entry, close, "g1", {}, (2,))
    assert entry["block_min_blocks"] == 1
    # no A/B in this run: the choice on file stays, with its figures
    on_file = {"block_min_blocks": 2, "block_occupancy_ab_geomean_us": {"1": 9.0, "2": 5.0}, "p1": "levels"}
    entry = {}
    tuning.pick_block_occupancy(entry, rows[:3], "g1", on_file, (2,))
    assert entry == {"block_min_blocks": 2, "block_occupancy_ab_geomean_us": {"1": 9.0, "2": 5.0}}
    # bounded builds timed but not the default: no A/B either
    entry = {}
    bounded = rows[3:] + [row("g1-bocc4", n, "block", 900.0) for n in (256, 1024, 4096)]
    tuning.pick_block_occupancy(entry, bounded, "g1", on_file, (2, 4))
    assert entry == {"block_min_blocks": 2, "block_occupancy_ab_geomean_us": {"1": 9.0, "2": 5.0}}
