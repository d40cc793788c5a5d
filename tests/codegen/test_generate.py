"""The composer and `grid build`: determinism, options, the header's contract."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from conftest import load
from grid_core.arena import Tier
from grid_core.cli import main
from grid_core.composer import GenerateOptions, generate, plan_arena
from grid_core.errors import CodegenError
from grid_core.hooks import registry


def test_same_inputs_same_bytes():
    robot = load("hyq")
    assert generate(robot, ["inverse_dynamics"]) == generate(load("hyq"), ["inverse_dynamics"])


def test_namespace_option():
    text = generate(load("iiwa14"), ["inverse_dynamics"], namespace="kuka")
    assert "namespace kuka {" in text and "namespace grid {" not in text
    with pytest.raises(CodegenError, match="not a C\\+\\+ identifier"):
        generate(load("iiwa14"), namespace="not valid")


def test_reference_only_algorithm_is_refused():
    """Every built-in algorithm emits; a plugin's reference-only one (the example third-party
    plugin's total_mass) is refused by name."""
    import importlib.util
    from pathlib import Path

    from grid_core.hooks import build_registry

    assert all(alg.has_emitter() for alg in registry().algorithms.values())
    init = Path(__file__).resolve().parents[1] / "third_party" / "grid_example_thirdparty" / "grid_example_thirdparty"
    spec = importlib.util.spec_from_file_location("grid_example_thirdparty", init / "__init__.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    reg = build_registry(extra_plugins=[("example_thirdparty", plugin)])
    assert not reg.algorithms["total_mass"].has_emitter()
    with pytest.raises(CodegenError, match="'total_mass' has no GPU emitter yet"):
        generate(load("iiwa14"), ["total_mass"], registry=reg)


@pytest.mark.parametrize("name", ["iiwa14", "atlas", "g1"])
def test_header_constants_match_the_robot_and_the_plan(name):
    robot = load(name)
    text = generate(robot, ["inverse_dynamics"])
    assert f"static constexpr int NUM_POS = {robot.nq};" in text
    assert f"static constexpr int NUM_VEL = {robot.nv};" in text
    assert f"static constexpr int NUM_JOINTS = {robot.num_bodies};" in text
    plan = plan_arena(registry().algorithm("inverse_dynamics"), robot, GenerateOptions())
    # the per-tier size constants carry exactly the plan's element counts
    body = re.search(r"constexpr size_t INVERSE_DYNAMICS_SMEM_BYTES\(\) \{\n\s+return size_t\((.*)\)", text).group(1)
    for tier in Tier:
        assert f"TIER == {tier.cpp} ? {plan.smem_elements(plan.rung(tier))} :" in body
    for layer in ("inverse_dynamics_inner", "inverse_dynamics_device", "inverse_dynamics_kernel",
                  "inverse_dynamics_per_state_kernel", "INVERSE_DYNAMICS_DEVICE_DYNAMIC_SHARED_MEM_BYTES",
                  "init_grid_kernel_attr_inverse_dynamics_checked", "init_robotModel", "init_gridData",
                  "close_grid", "load_update_XImats", "MAX_PERF_LEVEL_THREADS"):
        assert layer in text, layer
    assert "__host__ void inverse_dynamics(gridData<T> *hd_data" in text


def test_forced_target_moves_every_tier_to_the_deepest_rung(monkeypatch):
    robot = load("atlas")
    alg = registry().algorithm("inverse_dynamics")
    monkeypatch.setenv("GRID_CUDA_TARGET_SHARED_MEM_BYTES", "0")
    plan = plan_arena(alg, robot, GenerateOptions())
    assert set(plan.rung_of_tier.values()) == {len(plan.rungs) - 1}
    text = generate(robot, ["inverse_dynamics"])
    assert "inverse_dynamics_device<T, false, false>" in text


def test_cli_build_writes_header_and_reports_time(tmp_path):
    out = tmp_path / "grid.cuh"
    res = CliRunner().invoke(main, ["build", "hyq", "-a", "inverse_dynamics", "--namespace", "hq", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert re.search(r"grid: wrote .* in \d+\.\d\d s", res.output)
    assert "namespace hq {" in out.read_text()
    again = tmp_path / "again.cuh"
    CliRunner().invoke(main, ["build", "hyq", "-a", "inverse_dynamics", "--namespace", "hq", "-o", str(again)])
    assert again.read_bytes() == out.read_bytes()


def test_cli_floating_base_flag(tmp_path):
    out = tmp_path / "g.cuh"
    res = CliRunner().invoke(main, ["build", "iiwa14", "--floating-base", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "static constexpr int NUM_POS = 14;" in out.read_text()


def test_the_header_links_into_several_translation_units(tmp_path):
    """Every definition outside a template is inline: two units of one program include the
    header (the GPU library compiles one unit per algorithm) and link.  Host emulation, every
    algorithm; before, 15 layout resolvers and close_grid_streams were defined twice."""
    import subprocess

    from grid_core import buildcache

    (tmp_path / "grid.cuh").write_text(generate(load("iiwa14")))
    for unit, fn in (("a", "NUM_POS"), ("b", "NUM_VEL")):
        (tmp_path / f"{unit}.cpp").write_text(f'#include "grid.cuh"\nint {unit}_size() {{ return grid::{fn}; }}\n')
    cmd = [*buildcache.host_compiler(), "-std=c++17", "-O0", "-fPIC", "-shared", "-DGRID_HOST_EMULATION", "a.cpp",
           "b.cpp", "-o", "ab.so"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "multiple definition" not in res.stderr


def test_block_min_blocks_bounds_the_shared_tier_block_kernel_only():
    """The option asks ptxas for that many resident blocks of TIER_SHARED's block kernel (its
    registers capped to fit them); at 1, no bound and no constant: the header as before.  Unset,
    the tuning file's measured choice (g1's forward-dynamics gradient: 2)."""
    robot = load("g1")
    plain = generate(robot, ["forward_dynamics_gradient"],
                     algorithm_options={"forward_dynamics_gradient": {"block_min_blocks": 1}})
    bound = generate(robot, ["forward_dynamics_gradient"],
                     algorithm_options={"forward_dynamics_gradient": {"block_min_blocks": 2}})
    assert "BLOCK_MIN_BLOCKS" not in plain
    assert "static constexpr int FORWARD_DYNAMICS_GRADIENT_BLOCK_MIN_BLOCKS = 2;" in bound
    assert "registers must allow (option)" in bound
    measured = generate(robot, ["forward_dynamics_gradient"])
    assert "registers must allow (measured)" in measured and measured.replace("(measured)", "(option)") == bound
    assert "BLOCK_MIN_BLOCKS" not in generate(load("atlas"), ["forward_dynamics_gradient"])  # none measured
    kernel = re.compile(r"^__global__ void (__launch_bounds__\(.*?\)) (\w+)\(", re.M)
    heads = {name: bounds for bounds, name in kernel.findall(bound)}
    assert heads["forward_dynamics_gradient_kernel"] == (
        "__launch_bounds__(tier_max_threads<RESOURCE_TIER>(), RESOURCE_TIER == TIER_SHARED ? "
        "FORWARD_DYNAMICS_GRADIENT_BLOCK_MIN_BLOCKS : 1)")
    # the other algorithms' kernels in the header, and the per-state kernel, as without it
    assert {k: b for k, b in heads.items() if k != "forward_dynamics_gradient_kernel"} == \
        {name: bounds for bounds, name in kernel.findall(plain) if name != "forward_dynamics_gradient_kernel"}
