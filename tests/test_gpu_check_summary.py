"""The GPU script's summary of the block layout's tiers (benchmarks/gpu_check.py tiers_table) on
hand-made rows of bench's tiers mode: the default pair and the fastest one, per robot, algorithm
and batch."""

from __future__ import annotations

from pathlib import Path

from conftest import script_module

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _script():
    return script_module("gpu_check_under_test", SCRIPT)


def test_tiers_table_sets_the_fastest_pair_against_the_default():
    rows = [{"robot": "g1", "algorithm": "forward_dynamics_gradient", "n": n, "tier": t, "threads": th,
             "kernel_us": us}
            for n, t, th, us in ((1024, "shared", 512, 1734.0), (1024, "shared", 128, 1500.0),
                                 (1024, "lite", 128, 700.0), (1024, "minimal", 64, 900.0),
                                 (16, "shared", 512, 185.0), (16, "lite", 256, 190.0))]
    lines = _script().tiers_table(rows)
    assert lines[1].startswith("block layout by tier and block size")
    assert lines[2].split() == ["g1", "forward_dynamics_gradient", "1024", "1734.0", "700.0", "(lite,", "128)",
                                "x2.48"]
    assert lines[3].split() == ["g1", "forward_dynamics_gradient", "16", "185.0", "185.0", "(shared,", "512)",
                                "x1.00"]
    assert _script().tiers_table([]) == []
