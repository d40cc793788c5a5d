"""The per-tier resource record of inverse_dynamics (registers, spills, shared memory) is
what nvcc reports for the generated code, and the review renders it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from grid_core.arena import Tier
from grid_core.cli import main
from grid_core.hooks import registry
from grid_core.resources import load_record, measure, parse_ptxas
from grid_core.runtime.cuda import find_nvcc, nvcc_version

PTXAS = """ptxas info    : Compiling entry function '_ZN4grid23inverse_dynamics_kernelIfLi2EEEvPT_' for 'sm_90'
ptxas info    : Function properties for _ZN4grid23inverse_dynamics_kernelIfLi2EEEvPT_
    32 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 48 registers, used 1 barriers, 32 bytes cumulative stack size
"""


def test_ptxas_output_is_parsed():
    (row,) = parse_ptxas(PTXAS)
    assert (row["registers"], row["stack"], row["spill_stores"], row["spill_loads"]) == (48, 32, 4, 8)
    assert row["kernel"].startswith("void grid::inverse_dynamics_kernel<float, 2>")


def test_record_covers_every_tier_and_matches_a_fresh_compile():
    record = load_record(registry().algorithm("inverse_dynamics"))
    robots = {r["robot"]: r for r in record["robots"]}
    assert set(robots) >= {"iiwa14", "hyq", "atlas", "g1"}
    for rob in robots.values():
        tiers = {(k["T"], k["tier"]) for k in rob["kernels"] if "tier" in k}
        assert tiers == {(t, tier.name) for t in ("float", "double") for tier in Tier}
    fresh = measure("inverse_dynamics", "iiwa14")
    assert fresh["digest"] == robots["iiwa14"]["digest"], "iiwa14 changed: re-run python -m grid_core.resources"
    assert record["nvcc"] == nvcc_version(find_nvcc()), "another nvcc: re-run python -m grid_core.resources --write"
    assert json.dumps(fresh["kernels"], sort_keys=True) == json.dumps(robots["iiwa14"]["kernels"], sort_keys=True), \
        "the committed record is stale: re-run python -m grid_core.resources inverse_dynamics --write"


def test_review_prints_the_resources():
    res = CliRunner().invoke(main, ["review", "inverse_dynamics"])
    assert res.exit_code == 0
    assert "resources per tier" in res.output and "inverse_dynamics_per_state_kernel" in res.output
    assert "measured on the GPU" in res.output
