"""Level L3: the headers compile with nvcc for sm_90 (CI: tests.generated.NVCC_SAMPLE; every robot
the emulated tests prove with GRID_FULL_SWEEP=1; the gradients on NVCC_GRADIENT_SAMPLE), every emitted
algorithm's every tier and both precisions instantiated, at rung 0 and with the deepest spill
rung forced (both headers in one translation unit, in two namespaces; a robot's light algorithms
in one unit, each heavy derivative in its own).  The calls are made
from each layer's signature node (grid_core.emit.layers), so a new algorithm needs no edit here.

Each unit is compiled as the runtime builds its GPU libraries (the ptxas and flags of
grid_core.runtime.cuda.toolchain: ptxas 13.0 at -O1, its defect's guard).  A unit that compiled
keeps its ptxas report in the build cache under the hash of its sources, its command and the
versions of nvcc and ptxas (``nvcc-check/``): the same unit is not compiled twice, so the full
sweep, hours of nvcc on two cores, resumes where it stopped and redoes only the units whose headers
changed.  CI starts from an empty cache and compiles every unit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import load
from grid_core import buildcache
from grid_core.composer import Composer, GenerateOptions, generate
from grid_core.resources import describe_kernel, parse_ptxas
from grid_core.runtime.cuda import find_nvcc, nvcc_version, ptxas_beside, ptxas_release, toolchain
from tests.generated import FULL_SWEEP, GRADIENTS, NVCC_ROBOTS, PARAM_VALUES, nvcc_algorithms

DRIVER = """
#include "rung0.cuh"
#include "spill.cuh"
template <typename T> void instantiate() {{
{calls}
}}
template void instantiate<float>();
template void instantiate<double>();
"""


def calls(robot, ns: str, algorithms, **options) -> tuple[list[str], dict[str, int]]:
    """C++ calls of every algorithm's launcher and host wrapper (each template flag both ways),
    and the number of per-state kernels each algorithm must then have (``options``: the header's
    generation options)."""
    out, per_state = [], {}
    composer = Composer(robot, GenerateOptions(**options))
    for name in algorithms:
        layers = composer.layers(name)
        nulls = ", ".join(["nullptr"] * (len(layers.launch.params) - 5))
        out.append(f"    {ns}::{name}_launch<T>({nulls}, 0, {ns}::LaunchConfig(), nullptr, 0, nullptr);")
        host = getattr(layers, "host", None)
        if host is not None:
            params = ", ".join(["nullptr", "nullptr"] + [PARAM_VALUES[p.name].format(ns=f"{ns}::", T="T")
                                                         for p in layers.params]
                               + ["0", "dim3(1)", "dim3(1)", "nullptr"])
            for flag in ("true", "false"):
                targs = ", ".join(["T"] + [flag] * (len(host.template) - 1))
                out.append(f"    {ns}::{name}<{targs}>({params});")
        if layers.has_state:
            per_state[name] = 2 * 2 ** len(layers.nullable)
    return out, per_state


def groups() -> list:
    """``(robot, algorithms)`` of each translation unit: a robot's light algorithms in one header
    (they share it in every library), each of its heavy derivatives (tests.generated.GRADIENTS:
    minutes of nvcc each on a humanoid) in one of its own, so that the units spread over the
    workers and none holds every kernel of a humanoid."""
    out = []
    for name in NVCC_ROBOTS:
        algorithms = nvcc_algorithms(name)
        light = [a for a in algorithms if a not in GRADIENTS]
        for group in [light] + [[a] for a in algorithms if a in GRADIENTS]:
            out.append(pytest.param(name, group, id=f"{name}-{'+'.join(group) if len(group) == 1 else 'light'}"))
    return out


def ptxas_report(sources: dict[str, str], tmp_path: Path) -> str:
    """nvcc -O3 for sm_90 of ``tu.cu`` among ``sources`` (written to ``tmp_path``), with the ptxas and
    its flags every GPU library of the runtime is built with (:func:`~grid_core.runtime.cuda.toolchain`:
    ``-Xptxas -O1`` for a ptxas release with a known defect, ``GRID_PTXAS``): ptxas's report, from
    the build cache where this unit compiled before."""
    nvcc, extra = toolchain(find_nvcc())
    flags = ["-std=c++17", "-O3", "-gencode=arch=compute_90,code=sm_90", *extra, "-Xptxas", "-v", "-c", "tu.cu",
             "-o", "tu.o"]
    key = buildcache.content_key(sources, ["nvcc", *flags],
                                 {"nvcc": nvcc_version(nvcc), "ptxas": ptxas_release(ptxas_beside(nvcc))})
    cached = buildcache.cache_dir() / "nvcc-check" / f"{key[:24]}.log"
    if cached.exists():
        return cached.read_text()
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    res = subprocess.run([nvcc, *flags], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-4000:]
    cached.parent.mkdir(exist_ok=True)
    part = cached.with_suffix(f".{os.getpid()}.part")
    part.write_text(res.stdout + res.stderr)
    part.replace(cached)  # atomic: a concurrent reader sees the whole report or none
    return res.stdout + res.stderr


@pytest.mark.parametrize(("name", "algorithms"), groups())
def test_headers_compile_for_sm90_at_every_tier(name, algorithms, tmp_path):
    compiles_at_every_tier(load(name), algorithms, tmp_path)


RK4_NVCC_ROBOTS = ["erd:double_pendulum_continuous"] + (["iiwa14", "hyq"] if FULL_SWEEP else [])
"""The robots whose integrator gradient generated for RK4 (the forward-dynamics gradient inlined twice:
stage 1, and stages 2-4 in a rolled loop) nvcc compiles: CI's smallest (its nvcc check at its time limit);
a fixed arm and a fixed-base quadruped too under GRID_FULL_SWEEP=1 (each unit holds two copies of the
gradient: on a larger robot hours of nvcc on two cores; the GPU check builds it on GPU_ROBOTS)."""


@pytest.mark.parametrize("name", RK4_NVCC_ROBOTS)
def test_rk4_gradient_compiles_for_sm90_at_every_tier(name, tmp_path):
    compiles_at_every_tier(load(name), ["integrator_gradient"], tmp_path,
                           algorithm_options={"integrator_gradient": {"method": "rk4"}})


def compiles_at_every_tier(robot, algorithms, tmp_path, **options):
    """``algorithms``' header for ``robot`` (generated with ``options``) at rung 0 and the deepest
    rung compiles with nvcc for sm_90, every kernel at every tier in both precisions."""
    lines, per_state = calls(robot, "grid", algorithms, **options)
    lines += calls(robot, "grid_spill", algorithms, **options)[0]
    report = ptxas_report({"rung0.cuh": generate(robot, algorithms, namespace="grid", **options),
                           "spill.cuh": generate(robot, algorithms, namespace="grid_spill", target_shared_mem_bytes=0,
                                                 **options),
                           "tu.cu": DRIVER.format(calls="\n".join(lines))}, tmp_path)
    kernels = [describe_kernel(r["kernel"]) | {"demangled": r["kernel"]} for r in parse_ptxas(report)]
    for ns in ("grid", "grid_spill"):
        mine = [k for k in kernels if f" {ns}::" in f" {k['demangled']}"]
        for alg in algorithms:
            tiers = {(k["T"], k["tier"]) for k in mine if k.get("tier") and k["name"] == f"{alg}_kernel"}
            assert tiers == {(t, tier) for t in ("float", "double") for tier in ("SHARED", "LITE", "MINIMAL")}, \
                (ns, alg)
            if alg in per_state:  # 2 precisions x each combination of the nullable inputs
                assert len([k for k in mine if k["name"] == f"{alg}_per_state_kernel"]) == per_state[alg], (ns, alg)
