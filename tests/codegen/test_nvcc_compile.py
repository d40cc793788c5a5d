"""Level L3: every header the emulated tests prove compiles with nvcc for sm_90, every tier
and both precisions instantiated, at rung 0 and with the deepest spill rung forced (both
headers in one translation unit, in two namespaces)."""

from __future__ import annotations

import subprocess

import pytest

from conftest import load
from grid_core.composer import generate
from grid_core.resources import describe_kernel, parse_ptxas
from grid_core.runtime.cuda import find_nvcc

from .conftest import CODEGEN_ROBOTS

DRIVER = """
#include "rung0.cuh"
#include "spill.cuh"
template <typename T> void instantiate() {{
{calls}
}}
template void instantiate<float>();
template void instantiate<double>();
"""

CALLS = """    {ns}::inverse_dynamics_launch<T>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0,
                                         {ns}::LaunchConfig(), nullptr, 0, nullptr);
    {ns}::inverse_dynamics<T, true, true>(nullptr, nullptr, {ns}::Gravity<T>(), 0, dim3(1), dim3(1), nullptr);
    {ns}::inverse_dynamics<T, false, false>(nullptr, nullptr, {ns}::Gravity<T>(), 0, dim3(1), dim3(1), nullptr);"""


@pytest.mark.parametrize("name", CODEGEN_ROBOTS)
def test_headers_compile_for_sm90_at_every_tier(name, tmp_path):
    robot = load(name)
    (tmp_path / "rung0.cuh").write_text(generate(robot, ["inverse_dynamics"], namespace="grid"))
    (tmp_path / "spill.cuh").write_text(
        generate(robot, ["inverse_dynamics"], namespace="grid_spill", target_shared_mem_bytes=0))
    calls = "\n".join(CALLS.format(ns=ns) for ns in ("grid", "grid_spill"))
    (tmp_path / "tu.cu").write_text(DRIVER.format(calls=calls))
    res = subprocess.run(
        [find_nvcc(), "-std=c++17", "-O3", "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v",
         "-c", "tu.cu", "-o", "tu.o"],
        cwd=tmp_path, capture_output=True, text=True,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    kernels = [describe_kernel(r["kernel"]) | {"demangled": r["kernel"]} for r in parse_ptxas(res.stdout + res.stderr)]
    for ns in ("grid", "grid_spill"):
        tiers = {(k["T"], k["tier"]) for k in kernels if k.get("tier") and f" {ns}::" in f" {k['demangled']}"}
        assert tiers == {(t, tier) for t in ("float", "double") for tier in ("SHARED", "LITE", "MINIMAL")}, ns
        per_state = [k for k in kernels if k["name"] == "inverse_dynamics_per_state_kernel"
                     and f" {ns}::" in f" {k['demangled']}"]
        assert len(per_state) == 8, ns  # 2 precisions x (with/without qdd) x (with/without f_ext)
