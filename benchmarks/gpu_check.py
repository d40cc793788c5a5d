"""Driver of benchmarks/gpu_check.sh: build, check and time the generated kernels on the GPU.

Phases (each recorded; a failure does not stop the others, but sets the exit code):
  build     headers and binaries for iiwa14, hyq, atlas, g1 (also the forced-spill and
            per-body-sweep variants), the fused example, and the RobotHandle libraries of
            the gpu tests (into the build cache); runs without a GPU (nvcc only)
  tests     pytest -m gpu
  sanitize  compute-sanitizer memcheck and racecheck over every layout/tier/block size
  time      kernel-only, CUDA-graph, host-timed and with-I/O medians, with an empty kernel
  flops     Nsight Compute's count of the floating-point instructions a state executes (one
            launch at N = 262144): the fp32 compute floor beside the memory floor
  fused     the fused control step at batch 256
  tune      the measured crossover (per-state vs block) and P1 winner per robot, written
            to grid_algorithms/<algorithm>.tuning.json
  peers     MJX beside ours on iiwa14, go2 and g1 (benchmarks/peers.py in its own process;
            needs mujoco-mjx, which gpu_check.sh installs from .whl/ when it is there)
Results: benchmarks/results/<date>_<gpu>_<commit>.json (and $OUT when set).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import attrs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # grid_core from this tree, installed or not
BUILD = ROOT / "benchmarks" / "build"
RESULTS = ROOT / "benchmarks" / "results"
ROBOTS = os.environ.get("GRID_CHECK_ROBOTS", "iiwa14,hyq,atlas,g1").split(",")  # go2 too for its ANCHORS §A cells
# the runtime phase: every robot with an upstream host figure (ANCHORS §A)
RUNTIME_ROBOTS = os.environ.get("GRID_CHECK_RUNTIME_ROBOTS", "iiwa14,go2,g1").split(",")
# the peers phase: the robots and batches of benchmarks/peers.py's documented run
PEER_ROBOTS = os.environ.get("GRID_CHECK_PEER_ROBOTS", "iiwa14,go2,g1")
PEER_SIZES = os.environ.get("GRID_CHECK_PEER_SIZES", "16,256,1024,4096,16384,65536")
SIZES = [int(x) for x in os.environ.get("GRID_CHECK_SIZES", "1,16,64,256,1024,4096,16384,65536,262144,1048576").split(",")]
ARCH = os.environ.get("GRID_CUDA_ARCH", "sm_90")
BUILD_UNITS_PER_WORKER = 4
"""GRID_BUILD_JOBS of each worker of the tests' build run (phase_tests)."""

# ../shared/ANCHORS.md: upstream GRiD, µs.
# §C kernel-only, upstream rebuilt on our H200 (float32, one block per state), per algorithm.
UPSTREAM_H200_KERNEL = {
    "inverse_dynamics": {
        "iiwa14": {1: 9.7, 256: 10.8, 1024: 14.6, 4096: 36.3, 16384: 122.2},
        "hyq": {256: 8.8, 16384: 82.2},
        "atlas": {1: 12.8, 256: 14.2, 1024: 27.8, 4096: 80.9, 16384: 294.2},
    },
    "minv": {
        "iiwa14": {1: 11.8, 256: 12.7, 1024: 19.2, 4096: 51.6, 16384: 176.1},
        "hyq": {256: 11.6, 16384: 170.7},
        "atlas": {1: 23.0, 256: 25.1, 1024: 63.0, 4096: 219.3, 16384: 841.0},
    },
    "forward_dynamics": {
        "iiwa14": {1: 15.0, 256: 15.8, 1024: 25.5, 4096: 71.5, 16384: 257.6},
        "hyq": {256: 13.5, 16384: 222.3},
        "atlas": {1: 27.8, 256: 29.7, 1024: 78.9, 4096: 279.9, 16384: 1067.0},
    },
    "inverse_dynamics_gradient": {
        "iiwa14": {1: 13.7, 256: 14.6, 1024: 24.5, 4096: 75.8, 16384: 281.5},
        "hyq": {256: 12.3, 16384: 200.9},
        "atlas": {1: 24.4, 256: 30.5, 1024: 99.3, 4096: 362.9, 16384: 1394.0},
    },
    "forward_dynamics_gradient": {
        "iiwa14": {1: 20.6, 256: 21.4, 1024: 39.5, 4096: 134.5, 16384: 553.3},
        "hyq": {256: 18.4, 16384: 459.6},
        "atlas": {1: 49.2, 256: 56.8, 1024: 205.5, 4096: 793.6, 16384: 3105.0},
    },
}
UPSTREAM_H200_KERNEL["aba"] = UPSTREAM_H200_KERNEL["forward_dynamics"]  # the same quantity, qdd
# §A published release, RTX 5090: resident (host-timed launch + sync) / host (with I/O).
UPSTREAM_5090 = {
    "inverse_dynamics": {
        "iiwa14": {16: (11.7, 21.0), 256: (11.9, 23.3), 1024: (13.0, 27.4)},
        "go2": {16: (22.7, 32.4), 256: (21.7, 33.5), 1024: (35.1, 54.9)},
        "g1": {16: (40.1, 50.0), 256: (38.3, 53.6), 1024: (73.0, 106.0)},
    },
    "crba": {
        "iiwa14": {16: (11.0, 16.8), 256: (11.2, 19.0), 1024: (16.8, 29.4)},
        "g1": {16: (34.3, 41.8), 256: (34.9, 102.0), 1024: (120.0, 370.0)},
    },
    "minv": {
        "iiwa14": {16: (12.4, 21.5), 256: (12.6, 24.1), 1024: (19.7, 36.0)},
        "g1": {16: (55.6, 66.9), 256: (105.0, 175.0), 1024: (345.0, 593.0)},
    },
    "forward_dynamics": {
        "iiwa14": {16: (15.7, 24.8), 256: (16.0, 26.4), 1024: (26.7, 38.6)},
        "go2": {16: (30.4, 39.7), 256: (31.0, 42.1), 1024: (60.8, 77.0)},
        "g1": {16: (74.2, 83.7), 256: (139.0, 152.0), 1024: (459.0, 487.0)},
    },
    "inverse_dynamics_gradient": {
        "iiwa14": {16: (14.8, 24.3), 256: (15.1, 28.6), 1024: (30.8, 59.5)},
        "go2": {16: (35.2, 45.6), 256: (36.3, 78.7), 1024: (117.0, 257.0)},
        "g1": {16: (126.0, 139.0), 256: (172.0, 305.0), 1024: (649.0, 1132.0)},
    },
    "forward_dynamics_gradient": {
        "iiwa14": {16: (24.2, 33.4), 256: (23.4, 36.2), 1024: (58.7, 81.8)},
        "go2": {16: (53.0, 63.1), 256: (56.2, 98.2), 1024: (199.0, 335.0)},
        "g1": {16: (190.0, 203.0), 256: (241.0, 368.0), 1024: (879.0, 1355.0)},
    },
    "idsva_so": {
        "iiwa14": {16: (34.0, 48.7), 256: (34.1, 112.0), 1024: (70.2, 343.0)},
        "go2": {16: (337.0, 412.0), 256: (382.0, 1478.0), 1024: (978.0, 5386.0)},
        "g1": {16: (854.0, 1361.0), 256: (1339.0, 9404.0), 1024: (4580.0, 37271.0)},
    },
    "fdsva_so": {
        "iiwa14": {16: (73.4, 84.5), 256: (72.6, 147.0), 1024: (209.0, 476.0)},
        "g1": {16: (1651.0, 2159.0), 256: (4061.0, 12166.0), 1024: (14961.0, 47686.0)},
    },
    "end_effector_pose": {
        "iiwa14": {16: (7.53, 16.6), 256: (7.54, 18.1), 1024: (7.81, 19.6)},
        "g1": {16: (31.8, 41.3), 256: (31.9, 44.2), 1024: (65.8, 89.1)},
    },
}
UPSTREAM_5090["aba"] = UPSTREAM_5090["forward_dynamics"]
HBM_BYTES_PER_S = 4.3e12  # ANCHORS §D memory floor
BATCH_BYTES = float(os.environ.get("GRID_CHECK_BATCH_BYTES", 8e9))  # the largest batch timed, its float32 bytes


def fits(robot_name: str, algorithm: str, n: int) -> bool:
    """Whether a batch of ``n`` states' float32 inputs and outputs fits BATCH_BYTES (a Hessian of
    g1's frames is 118 kB a state: at N = 1M more than the device and the pinned host buffers of
    the io rows together)."""
    return n * bytes_per_state(robot_name, algorithm) <= BATCH_BYTES


HOST_LAYER_BYTES = float(os.environ.get("GRID_CHECK_HOST_LAYER_BYTES", 24e9))
"""The most bytes the host layer's rows of a timing may allocate, in pinned host memory and again on the
device: init_gridData allocates every field of the header (all its algorithms' inputs and outputs) for N
states (a g1 header holding idsva_so and fdsva_so: 1.4 MB a state, out of memory at N = 262144 on an H100);
beyond, the bench times the kernels without the host layer (``--io-max-n``)."""


@functools.cache  # the robot loaded and the registry walked once per robot, not per algorithm timed
def header_bytes_per_state(robot_name: str) -> int:
    """float32 bytes a state takes in the gridData of a header of ALGORITHMS: its input fields and each
    algorithm's outputs, one field per name (what init_gridData allocates)."""
    import math

    import grid_core
    from grid_core.composer import INPUT_FIELDS

    robot = grid_core.load_robot(robot_name)
    fields = {name: size(robot) for name, size, _ in INPUT_FIELDS}
    for algorithm in ALGORITHMS:
        for p in grid_core.registry().algorithm(algorithm).outputs(robot):
            fields.setdefault(p.name, math.prod(p.shape))
    return 4 * sum(fields.values())


# the issues' absolute targets: (robot, B, resident µs to stay under)
RESIDENT_LIMITS = {"crba": [("g1", 1024, 60.0)], "forward_dynamics": [("g1", 1024, 200.0)]}


def bytes_per_state(robot_name: str, algorithm: str) -> int:
    """float32 bytes each state moves: its state inputs (optional ones absent) and outputs."""
    import math

    import grid_core

    robot = grid_core.load_robot(robot_name)
    alg = grid_core.registry().algorithm(algorithm)
    ins = [p for p in alg.inputs(robot) if p.kind == "state" and not p.optional]
    return 4 * sum(math.prod(p.shape) for p in [*ins, *alg.outputs(robot)])


_NUM = ARCH.split("_", 1)[-1]
NVCC_FLAGS = ["-std=c++17", "-O3", f"-gencode=arch=compute_{_NUM},code=sm_{_NUM}", "-Xlinker", "--strip-all"]


@functools.cache
def nvcc() -> list[str]:
    """nvcc and NVCC_FLAGS, with the ptxas and flags the libraries are built with
    (grid_core.runtime.cuda.toolchain: GRID_PTXAS, a known ptxas defect), so the bench binaries
    run the code the libraries do."""
    from grid_core.runtime.cuda import find_nvcc, toolchain

    found = find_nvcc()
    path, flags = toolchain(found)
    # "nvcc" from PATH, as before, unless GRID_PTXAS makes another: the build keys stay the same
    # from one machine to another (carried bench binaries)
    return ["nvcc" if path == found else path, *NVCC_FLAGS, *flags]


def toolchain_record() -> dict:
    """The compilers this run's binaries come from, for the JSON and the summary: nvcc's version and
    the ptxas it runs (GRID_PTXAS: another release behind the same nvcc) with its release and the
    flags the guard gives it (-Xptxas -O1 for a release with a known defect; none: nvcc's -O3)."""
    from grid_core.runtime.cuda import find_nvcc, nvcc_version, ptxas_beside, ptxas_release, toolchain

    try:
        found = find_nvcc()
        path, flags = toolchain(found)
        ptxas = ptxas_beside(path)
        return {"nvcc": nvcc_version(found), "ptxas": ptxas_release(ptxas), "ptxas_path": ptxas,
                "ptxas_flags": " ".join(flags) or "(nvcc's -O3)"}
    except Exception as exc:  # no nvcc here: the JSON says why rather than nothing
        return {"error": str(exc)}


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], text=True, capture_output=True, **kw)


def _has_option(alg: str, option: str) -> bool:
    import attrs

    import grid_core

    a = grid_core.registry().algorithm(alg)
    return a.has_emitter() and option in attrs.fields_dict(a.emitter.Options)


OSI = "operational_space_inertia"


@functools.cache
def osi_rows(name: str) -> str | None:
    """The rows of the operational-space inertia that robot ``name``'s benches generate: ``"all"``
    where each of its default (leaf) frames has one over six rows, else ``"linear"`` where each has
    one over the three linear rows (atlas: its head), else None: some frame has none (hyq: its
    lower legs, 3 dofs each), so the kernel's outputs there are NaN (the reference refuses the frame,
    as the tests check) and the benches leave the algorithm out on that robot (:func:`benched`).
    Judged by the reference at one random configuration."""
    import numpy as np

    import grid_core
    from grid_core.errors import InputError
    from grid_core.testing import random_q

    robot = grid_core.load_robot(name)
    q = random_q(robot, np.random.default_rng(0))
    for rows in ("all", "linear"):
        try:
            grid_core.Reference(robot).operational_space_inertia(q, rows=rows)
            return rows
        except InputError:
            pass
    return None


def benched(label: str) -> list:
    """ALGORITHMS as variant ``label``'s benches build and run them: the operational-space inertia
    left out on a robot whose frames have none (:func:`osi_rows`)."""
    return [a for a in ALGORITHMS if a != OSI or osi_rows(label.split("-")[0]) is not None]


def _with_base(opts: dict, name: str) -> dict:
    """Generate options of a variant of robot ``name``: forward dynamics always by Minv (tau - bias)
    here, so that this run times that method beside aba (the tune phase picks between the two); the
    operational-space inertia over the rows :func:`osi_rows` picks."""
    algo = {"forward_dynamics": {"method": "minv"}} if "forward_dynamics" in ALGORITHMS else {}
    if OSI in ALGORITHMS and osi_rows(name) == "linear":
        algo[OSI] = {"rows": "linear"}
    for a, o in opts.get("algorithm_options", {}).items():
        algo[a] = {**algo.get(a, {}), **o}
    return {**opts, **({"algorithm_options": algo} if algo else {})}


# robots whose per-state kernels are also built at 2 and 4 blocks per SM (launch bounds), every
# algorithm, for the occupancy A/B at large batches
OCC_ROBOTS = [r for r in os.environ.get("GRID_CHECK_OCC_ROBOTS", "atlas,g1").split(",") if r in ROBOTS]
OCCUPANCIES = tuple(int(x) for x in os.environ.get("GRID_CHECK_OCCUPANCIES", "2,4").split(",") if x)


BLOCK_OCCUPANCIES = tuple(int(x) for x in os.environ.get("GRID_CHECK_BLOCK_OCCUPANCIES", "2").split(",") if x)
"""Blocks an SM asked of the block kernels at TIER_SHARED (block_min_blocks), every algorithm,
OCC_ROBOTS, for the block layout's occupancy A/B (g1's forward-dynamics gradient: 114 or 92
registers and one block of 512 threads an SM, or 64 and two)."""
BLOCK_OCC_SIZES = tuple(int(x) for x in os.environ.get("GRID_CHECK_BLOCK_OCC_SIZES", "256,1024,4096").split(",") if x)
"""The batch sizes the block-occupancy variants are timed at (GRID_CHECK_BLOCK_OCC_SIZES: for the crossover
to the per-state layout against the picked block occupancy, every size the base variant is timed at)."""


def _occ_variants() -> list:
    per_state = [(f"{r}-occ{occ}", r, {"algorithm_options": {a: {"per_state_min_blocks": occ} for a in ALGORITHMS}})
                 for r in OCC_ROBOTS for occ in OCCUPANCIES]
    return per_state + [(f"{r}-bocc{occ}", r, {"algorithm_options": {a: {"block_min_blocks": occ} for a in ALGORITHMS}})
                        for r in OCC_ROBOTS for occ in BLOCK_OCCUPANCIES]


def _stage_algorithms() -> list:
    import grid_core

    return [a for a in ALGORITHMS if getattr(grid_core.registry().algorithm(a).emitter, "stage_by_default", False)]


@attrs.frozen
class AB:
    """An A/B of one algorithm option: a build per form (label ``<robot>-<form>``) with the option
    set to the form's value on ``applies``' algorithms, the per-state kernels of ``timed``'s timed
    at every size.  The tune phase reads them (a pick per robot) or the summary only shows them."""

    option: str
    forms: dict
    applies: Callable[[], list]
    timed: Callable[[], list]

    def variants(self) -> list:
        algs = self.applies()
        return [(f"{r}-{form}", r, {"algorithm_options": {a: {self.option: v} for a in algs}})
                for r in ROBOTS for form, v in self.forms.items()] if algs else []


AB_MODES = {
    # staged through shared memory or plain, each forced: from which batch an algorithm that
    # stages by default does (its per_state_stage_min_n)
    "stage": AB("per_state_stage_min_n", {"staged": 1, "plain": 1 << 30}, _stage_algorithms, _stage_algorithms),
    # outputs too large to stage whole through each warp's ring or stored by each thread, each
    # forced: from which batch the ring pays (its per_state_ring_min_n; robots without a ring
    # build the same code twice)
    "ring": AB("per_state_ring_min_n", {"ring": 1, "noring": 1 << 30}, _stage_algorithms, _stage_algorithms),
    # a ring that flushes once: its stores by the table's groups (each state's runs) or as the
    # warp's whole block of outputs in order (every algorithm with a ring)
    "ringflush": AB("per_state_ring_flush", {"flushgroups": "groups", "flushwhole": "whole"}, _stage_algorithms,
                    _stage_algorithms),
    # a small batch spread over every SM or packed into full blocks (every algorithm)
    "spread": AB("per_state_spread", {"spread": True, "packed": False}, lambda: ALGORITHMS, lambda: ALGORITHMS),
}
QUICK_MODES = ("base", "spill", "occ", *AB_MODES)


def _ab_of(label: str) -> tuple[AB, str] | None:
    """(its A/B, its form) of a variant's label, or None."""
    form = label.rsplit("-", 1)[-1]
    return next(((ab, form) for ab in AB_MODES.values() if form in ab.forms), None)


def _ab_algorithms(label: str) -> list | None:
    """The algorithms an A/B variant is built and timed for (None: not one, every algorithm)."""
    of = _ab_of(label)
    return of[0].timed() if of else None


def variants():
    """(label, robot, generate options): normal, forced deepest spill, per-body sweeps, per-state
    occupancy, and the A/Bs of AB_MODES (staged or plain, ring or per-thread stores, spread or
    packed).  GRID_CHECK_VARIANTS=base: the default builds only; =spill, =occ or an A/B's name
    (stage, ring, spread; several joined by commas): those and the default builds
    (a quick run: spill adds the forced deepest rung, which the sanitize phase also covers)."""
    out = []
    modes = _modes()
    if _quick():
        out = [(r, r, {}) for r in ROBOTS] + (_occ_variants() if "occ" in modes else [])
        out += [(f"{r}-spill", r, {"target_shared_mem_bytes": 0}) for r in ROBOTS if "spill" in modes]
        out += [v for m in modes if m in AB_MODES for v in AB_MODES[m].variants()]
        return [(label, r, _with_base(o, r)) for label, r, o in out]
    bodies = {a: {"p1": "bodies"} for a in ALGORITHMS if _has_option(a, "p1")}
    for r in ROBOTS:
        out.append((r, r, {}))
        out.append((f"{r}-spill", r, {"target_shared_mem_bytes": 0}))
        out.append((f"{r}-bodies", r, {"algorithm_options": bodies}))
    out += _occ_variants() + [v for ab in AB_MODES.values() for v in ab.variants()]
    return [(label, r, _with_base(o, r)) for label, r, o in out]


def _modes() -> list:
    return [m for m in (os.environ.get("GRID_CHECK_VARIANTS") or "").split(",") if m]


def _quick() -> bool:
    """Whether GRID_CHECK_VARIANTS names quick modes only (no spill, per-body or runtime builds)."""
    return bool(_modes()) and all(m in QUICK_MODES for m in _modes())


def _build_key(cmd, inputs) -> str:
    """What a build output depends on: its command line (made relative to the tree) and its
    inputs' contents.  Content, not file times: a tree copied onto another machine keeps its
    carried builds."""
    import hashlib

    h = hashlib.sha256(" ".join(str(c).replace(str(ROOT), ".") for c in cmd).encode())
    for path in inputs:
        h.update(Path(path).read_bytes())
    return h.hexdigest()


def _nvcc(cmd, output: Path, inputs, what: str) -> None:
    """Run the nvcc command ``cmd`` making ``output`` from ``inputs``, unless a build of the
    same key is there already."""
    stamp = output.with_name(output.name + ".key")
    key = _build_key(cmd, inputs)
    if output.exists() and stamp.exists() and stamp.read_text() == key:
        return
    res = run(cmd)
    if res.returncode:
        raise RuntimeError(f"nvcc failed for {what}:\n{res.stderr[-4000:]}")
    stamp.write_text(key)


# timed by the generic bench (src/bench.cu); GRID_CHECK_ALGORITHMS=crba,... for a quick rerun of some
def emitted_algorithms() -> list[str]:
    """Every algorithm of the default set, sorted (one library holds them all, the same list as
    tests.generated.emitted, so the test libraries built here are the ones the tests load):
    those with a GPU emitter but the ones a header built without a list leaves out
    (``Emitter.in_default_set``: idsva_so, too large for a humanoid; GRID_CHECK_ALGORITHMS names it)."""
    import grid_core

    return sorted(a for a, x in grid_core.algorithms().items() if x.has_emitter() and x.emitter.in_default_set)


def _emitted() -> str:
    return ",".join(emitted_algorithms())


ALGORITHMS = [a for a in (os.environ.get("GRID_CHECK_ALGORITHMS") or _emitted()).split(",") if a]


PARAM_ARGS = {"gravity": ("nullptr", "g::Gravity<T>()"), "dt": ("&param_dt<T>", "param_dt<T>")}
"""Each param's argument to the launcher (a host pointer; nullptr: its default) and to the host
wrapper (a value): the default gravity; the integration family's time step, 0.01 s."""


def adapter(robot, algorithm: str, header: str = "", options: dict | None = None) -> str:
    """adapter.h of src/bench.cu for one algorithm: its launcher, its per-state input and
    output sizes and its host wrapper, all from the layer generator's signature nodes (of the
    header's generate ``options``: the operational-space inertia's rows size its output).  A
    previous generator's header (``header``, its text) that predates the spread launch gets
    the packed one."""
    import math

    from grid_core.composer import Composer, GenerateOptions

    L = Composer(robot, GenerateOptions(**(options or {}))).layers(algorithm)
    pfx = algorithm.upper()
    ins = [f"in[{k}]" for k in range(len(L.states))]
    args = ["out[0]" if len(L.outputs) == 1 else None]
    unknown = [p.name for p in L.params if p.name not in PARAM_ARGS]
    if unknown:
        raise ValueError(f"{algorithm}: bench.cu has no value for its param(s) {unknown} (PARAM_ARGS)")
    args = [f"out[{k}]" for k in range(len(L.outputs))] + ins + [PARAM_ARGS[p.name][0] for p in L.params]
    host = getattr(L, "host", None)
    host_call = "(void)hd; (void)model; (void)n; (void)b; (void)t; (void)streams;"
    # the host layer's inputs as the launcher takes them (q and qd from h_q_qd, the third from
    # h_u: the compressed form; f_ext absent) and its results, for bench check's comparison
    gather, outs = ["(void)hd; (void)n; (void)in;"], ["(void)hd; (void)k; return nullptr;"]
    copy_n = 0
    if host is not None:
        targs = ", ".join(["T"] + ["true"] * (len(host.template) - 1))
        params = "".join(f", {PARAM_ARGS[p.name][1]}" for p in L.params)
        host_call = f"g::{algorithm}<{targs}>(hd, model{params}, n, b, t, streams);"
        src = {"q": ("h_q_qd", "g::NUM_POS + g::NUM_VEL", "0"), "qd": ("h_q_qd", "g::NUM_POS + g::NUM_VEL", "g::NUM_POS")}
        gather = []
        for k, p in enumerate(L.states):
            if p.name == "f_ext":
                continue
            field, stride, at = src.get(p.name, ("h_u", "g::NUM_VEL", "0"))
            size = math.prod(p.shape)
            gather.append(f"for (int i = 0; i < n; ++i) for (int j = 0; j < {size}; ++j) "
                          f"in[{k}][size_t(i) * {size} + j] = hd->{field}[size_t(i) * ({stride}) + {at} + j];")
        fields = L.emitter.grid_data_names()
        outs = [f"if (k == {k}) return hd->h_{fields.get(p.name, p.name)};" for k, p in enumerate(L.outputs)]
        outs.append("return nullptr;")
        copy_n = L.first_copied_batch(4)  # bench.cu times float32
    staged = f"g::{pfx}_STAGED_THREADS<T>()" if L.emitter.staged else "0"
    return "\n".join([
        f"// adapter of benchmarks/src/bench.cu to {algorithm} (written by benchmarks/gpu_check.py)",
        "namespace ad {",
        f'static const char *ALGO = "{algorithm}";',
        *(["template <typename T> static const T param_dt = T(0.01);  // the integration family's time step"]
          if any(p.name == "dt" for p in L.params) else []),
        f"static constexpr int NUM_IN = {len(L.states)};",
        f"static constexpr size_t IN_SIZE[] = {{{', '.join(str(math.prod(p.shape)) for p in L.states)}}};",
        f"static constexpr bool IN_OPTIONAL[] = {{{', '.join('true' if p.optional else 'false' for p in L.states)}}};",
        f"static constexpr bool HAS_OPTIONAL = {'true' if any(p.optional for p in L.states) else 'false'};",
        f"static constexpr int NUM_OUT = {len(L.outputs)};",
        f"static constexpr size_t OUT_SIZE[] = {{{', '.join(str(math.prod(p.shape)) for p in L.outputs)}}};",
        f"static constexpr int PER_STATE_THREADS = g::{pfx}_PER_STATE_THREADS;",
        *([f"static constexpr bool PER_STATE_SPREAD = g::{pfx}_PER_STATE_SPREAD;",
           "inline int spread_threads(int n, int most) { return g::grid_spread_threads(n, most); }"]
          if f"{pfx}_PER_STATE_SPREAD" in header or not header else
          ["static constexpr bool PER_STATE_SPREAD = false;  // a header before the spread launch",
           "inline int spread_threads(int, int most) { return most; }"]),
        "template <typename T> inline cudaError_t launch(T *const *out, T *const *in, int n, g::LaunchConfig cfg,",
        "                                                T *ws, size_t ws_bytes, cudaStream_t s) {",
        f"    return g::{algorithm}_launch<T>({', '.join(args)}, n, cfg, ws, ws_bytes, s);",
        "}",
        f"inline int resolve_layout(int n, int layout) {{ return g::{algorithm}_resolve_layout(n, layout); }}",
        f"inline int staged_threads() {{ return {staged.replace('<T>', '<float>')}; }}",
        f"inline size_t workspace_bytes_minimal() {{ return g::{pfx}_WORKSPACE_BYTES<float, g::TIER_MINIMAL>(); }}",
        "inline void host(g::gridData<T> *hd, const g::robotModel<T> *model, int n, dim3 b, dim3 t, cudaStream_t *streams) {",
        f"    {host_call}",
        "}",
        f"static constexpr int HOST_COPY_N = {max(copy_n, 1)};  // from here the host layer copies (below: mapped)",
        "inline void host_inputs(const g::gridData<T> *hd, int n, std::vector<T> *in) {",
        *[f"    {x}" for x in gather],
        "}",
        "inline const T *host_out(const g::gridData<T> *hd, int k) {",
        *[f"    {x}" for x in outs],
        "}",
        "}  // namespace ad",
        "",
    ])


def _bench(d: Path, header: Path, algorithm: str, robot, label: str, options: dict | None = None) -> Path:
    """The bench binary of one algorithm over one header generated with ``options`` (src/bench.cu +
    its adapter)."""
    src = ROOT / "benchmarks" / "src" / "bench.cu"
    ad = d / f"adapter_{algorithm}.h"
    ad.write_text(adapter(robot, algorithm, header.read_text(), options))
    exe = d / f"bench_{algorithm}"
    _nvcc([*nvcc(), "-include", header, f'-DBENCH_ADAPTER="{ad}"', src, "-o", exe], exe, [header, ad, src],
          f"{label} {algorithm}")
    return exe


def _in_parallel(jobs) -> None:
    """Run independent build jobs (each an nvcc process) on every core; the first failure raises."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        for f in [pool.submit(j) for j in jobs]:
            f.result()


def phase_build(state: dict) -> None:
    import warnings

    import grid_core
    from grid_core.composer import generate
    from grid_core.runtime.handle import build_gpu_library

    warnings.simplefilter("ignore")
    BUILD.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("GRID_CACHE_DIR", str(BUILD / "cache"))
    jobs = []
    for label, name, opts in variants():
        d = BUILD / label
        d.mkdir(exist_ok=True)
        robot = grid_core.load_robot(name)
        hpath = d / "grid.cuh"
        text = generate(robot, ALGORITHMS, **opts)
        if not hpath.exists() or hpath.read_text() != text:
            hpath.write_text(text)
        for alg in benched(label):
            if _ab_algorithms(label) is not None and alg not in _ab_algorithms(label):
                continue
            jobs.append(lambda d=d, h=hpath, a=alg, r=robot, lb=label, o=opts: _bench(d, h, a, r, lb, o))
    # the previous generator's inverse dynamics (headers carried in BUILD/<robot>-prev), timed in the
    # same run: the layer generator must leave the kernel table unchanged within noise
    for name in ROBOTS if "inverse_dynamics" in ALGORITHMS else ():
        d = BUILD / f"{name}-prev"
        if (d / "grid.cuh").exists():
            jobs.append(lambda d=d, r=grid_core.load_robot(name), lb=f"{name}-prev":
                        _bench(d, d / "grid.cuh", "inverse_dynamics", r, lb))
    # the fused example (iiwa14)
    d = BUILD / "fused"
    d.mkdir(exist_ok=True)
    (d / "grid.cuh").write_text(generate(grid_core.load_robot("iiwa14"), ["inverse_dynamics"]))
    example = ROOT / "examples" / "cuda" / "fused_control_step" / "fused_control_step.cu"
    jobs.append(lambda: _nvcc([*nvcc(), f'-DGRID_HEADER="{d / "grid.cuh"}"', example, "-o", d / "fused"],
                              d / "fused", [d / "grid.cuh", example], "the fused example"))
    # the RobotHandle libraries the gpu tests load (same content hash there): tests.generated, one
    # library per robot and rung holding every emitted algorithm (GRID_CHECK_TEST_LIBS=1 with the
    # quick variants: a short run's tests phase otherwise compiles them one after another)
    emitted = emitted_algorithms()
    tests = [lambda name=name, opts=opts: build_gpu_library(  # the robot loaded only if the job runs
        grid_core.load_robot(name), emitted, arch=ARCH, quiet=True, **opts)
        for name in ROBOTS for opts in ({}, {"target_shared_mem_bytes": 0})]
    if _quick():
        _in_parallel((tests if os.environ.get("GRID_CHECK_TEST_LIBS") == "1" else []) + jobs)
        state["build"] = f"ok ({os.environ['GRID_CHECK_VARIANTS']} variants)"
        return
    # the raw C++ launch as a library, for the runtime phase's same-process comparison
    raw_src = ROOT / "benchmarks" / "src" / "raw_launch.cu"
    for name in RUNTIME_ROBOTS:
        lib, header = BUILD / name / "libraw.so", BUILD / name / "grid.cuh"
        if name not in ROBOTS:  # no bench build of its own: its header here
            header.parent.mkdir(exist_ok=True)
            header.write_text(generate(grid_core.load_robot(name), ["inverse_dynamics"]))
        jobs.append(lambda lib=lib, header=header: _nvcc(
            [*nvcc(), "-Xcompiler", "-fPIC", "-shared", "-include", header, raw_src, "-o", lib], lib,
            [header, raw_src], str(lib)))
    _in_parallel(tests + jobs)  # the long poles first
    state["build"] = "ok"


def _test_groups(args: list[str]) -> dict[str, list[str]]:
    """The selected tests' node ids by robot: a test whose parameters name one of ROBOTS goes to
    that robot's group, one that names no bundled robot (the runtime's) to "other"; one that names
    a bundled robot outside ROBOTS (GRID_CHECK_ROBOTS narrows the run) is left out, and counted."""
    import re

    res = run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args], cwd=ROOT)
    if res.returncode not in (0, 5):
        print((res.stdout + res.stderr)[-4000:])
        raise RuntimeError("collecting the gpu tests failed")
    bundled = {p.stem for p in (ROOT / "robots").glob("*.urdf")}
    groups: dict[str, list[str]] = {}
    left_out = 0
    for line in res.stdout.splitlines():
        if "::" not in line:
            continue
        params = set(re.split(r"[\[\]\-]", line.split("::", 1)[1]))
        robot = next((r for r in ROBOTS if r in params), None)
        if robot is None and params & bundled:
            left_out += 1
            continue
        groups.setdefault(robot or "other", []).append(line.strip())
    if left_out:
        print(f"tests phase: {left_out} selected tests of robots outside GRID_CHECK_ROBOTS "
              f"({','.join(ROBOTS)}) left out")
    return groups


def phase_tests(state: dict) -> None:
    # the gpu tests, and the backend-parametrised algorithm tests on the bundled robots (the
    # example-robot-data ones need that package, which the GPU machine does not have)
    # the generated-code tests of each algorithm (tests/algorithms/test_<algo>.py; the reference
    # tests there need Pinocchio, which the GPU machine does not have)
    generated = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests" / "algorithms").glob("test_*.py"))
                 if not p.stem.endswith(("_reference", "_reviews"))]
    # (tests/codegen has no gpu tests, and one of its modules draws example-robot-data robots while
    # collecting; tests/runtime has the runtime's gpu tests).  GRID_CHECK_TEST_K: a pytest -k
    # expression the selection must also match (one robot's tests, one algorithm's)
    extra = os.environ.get("GRID_CHECK_TEST_K")
    select = ["-m", "gpu", "tests/gpu", "tests/runtime", *generated, "-p", "no:cacheprovider",
              "-k", "not erd" + (f" and ({extra})" if extra else "")]
    # First every library the selected tests load, built in one run over all of them (conftest.py's
    # GRID_GPU_BUILD_ONLY: each test builds its libraries and stops): a test worker would otherwise wait
    # on each of its tests' builds in turn (a humanoid's gpu tests load nine libraries, each minutes of
    # nvcc).  Then the tests, robot by robot, side by side.  The build run has pytest-xdist workers x
    # GRID_BUILD_JOBS units (BUILD_UNITS_PER_WORKER) at once, twice the cores, no more than the memory
    # holds at 4 GB a unit (GRID_CHECK_BUILD_UNITS overrides): a worker waiting on another's library (its
    # lock) or on its own library's last long unit leaves its cores to the rest.  The 4 GB is above atlas's
    # (its gradient units' cicc and ptxas seen under 1 GB on the H100); a humanoid's gradient unit reaches
    # about 10 GB (grid_core.buildcache.UNIT_MEMORY_BYTES): for g1, 12 units.  H100, session 48: one build
    # run per robot group, the memory-bound default of 12 units shared over the groups, ran 6 units at a
    # time for atlas alone once the small group had finished, and had not built atlas's libraries after 27
    # minutes.  GRID_CHECK_TEST_WORKERS=N: pytest-xdist workers for a group's tests, handed out one at a
    # time (--dist load; the CI default, --dist loadgroup, keeps a robot's tests on one worker).
    # GRID_CHECK_TESTS_PTXAS_OPT=0..3: the tests' libraries assembled at that ptxas level (GRID_PTXAS_OPT;
    # the level is in each library's cache key): at 0 a unit's ptxas takes a fifth of its time at the -O1
    # the libraries ship with (atlas's ID gradient, float32: 96 against 488 s of one core; cicc's 250 s
    # the same), the build about half; the tests then check the generated code on the GPU, not -O1's
    # assembly of it (the run's JSON and summary say which level)
    from concurrent.futures import ThreadPoolExecutor

    opt = os.environ.get("GRID_CHECK_TESTS_PTXAS_OPT", "").strip()
    if opt and opt not in ("0", "1", "2", "3"):
        raise RuntimeError(f"GRID_CHECK_TESTS_PTXAS_OPT={opt}: a ptxas optimisation level, 0 to 3")
    env = {**os.environ, **({"GRID_PTXAS_OPT": opt} if opt else {})}

    groups = _test_groups(select)
    if not groups:
        raise RuntimeError("no gpu test selected")
    from grid_core.buildcache import available_memory

    cores = 2 * (os.cpu_count() or 1)
    available = available_memory()
    units = int(os.environ.get("GRID_CHECK_BUILD_UNITS", cores if available is None else min(cores, max(1, available >> 32))))
    build_workers = max(1, units // BUILD_UNITS_PER_WORKER)
    workers = os.environ.get("GRID_CHECK_TEST_WORKERS")
    base = ["-m", "gpu", "-p", "no:cacheprovider"]
    t0 = time.time()
    everything = [i for ids in groups.values() for i in ids]
    pre = run([sys.executable, "-m", "pytest", "-q", *base, *everything, "-n", str(build_workers), "--dist", "load",
               "-rf"], cwd=ROOT,
              env={**env, "GRID_GPU_BUILD_ONLY": ARCH, "GRID_BUILD_JOBS": str(BUILD_UNITS_PER_WORKER)})
    built = time.time() - t0
    BUILD.mkdir(parents=True, exist_ok=True)
    (BUILD / "tests-build.log").write_text(pre.stdout + pre.stderr)
    print(f"== libraries of {len(everything)} tests built in {built:.0f} s "
          f"({build_workers} workers x {BUILD_UNITS_PER_WORKER} units{f', ptxas -O{opt}' if opt else ''})")
    if pre.returncode:
        print((pre.stdout + pre.stderr)[-4000:])
        state["tests"] = {"build": {"returncode": pre.returncode, "build_s": round(built), "ptxas_opt": opt or None,
                                    "tail": ["building the libraries failed"]}}
        raise RuntimeError("building the gpu tests' libraries failed")

    def one(name: str, ids: list[str]) -> dict:
        t0 = time.time()
        res = run([sys.executable, "-m", "pytest", "-q", *base, *ids,
                   *(["-n", workers, "--dist", "load"] if workers else []), "-rA", "--durations=12"], cwd=ROOT, env=env)
        BUILD.mkdir(parents=True, exist_ok=True)  # the whole report (a PASSED line a test), beside the build
        (BUILD / f"tests-{name}.log").write_text(res.stdout + res.stderr)
        tested = time.time() - t0
        tail = [ln for ln in (res.stdout + res.stderr).strip().splitlines() if not ln.startswith("PASSED ")][-30:]
        print(f"== {name}: {len(ids)} tests in {tested:.0f} s{f' (libraries at ptxas -O{opt})' if opt else ''}")
        print("\n".join(tail))
        return {"returncode": res.returncode, "tests": len(ids), "build_s": round(built), "ptxas_opt": opt or None,
                "test_s": round(tested), "tail": tail}

    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        futures = {name: pool.submit(one, name, ids) for name, ids in groups.items()}
        state["tests"] = {name: f.result() for name, f in futures.items()}
    bad = [name for name, r in state["tests"].items() if r["returncode"]]
    if bad:
        raise RuntimeError(f"gpu tests failed: {bad}")


SANITIZER_ERROR = 3
"""compute-sanitizer's exit status where it found an error (``--error-exitcode``); bench check's own
failure (a layout that disagrees with the first block run) exits 1."""


def phase_sanitize(state: dict) -> None:
    """compute-sanitizer memcheck and racecheck over bench check (every layout, tier and block size,
    float32) of each benched algorithm.  A run's sanitizer verdict and its check's are recorded
    apart (``sanitizer_clean``, ``check_ok``), the JSON saved after each run (a call's deadline
    keeps what ran); the phase fails on either, naming which."""
    import threading

    out = {}
    bad, mismatched = [], []
    built = {label for label, _, _ in variants()}
    lock = threading.Lock()
    from concurrent.futures import ThreadPoolExecutor

    def one(label: str, alg: str, tool: str) -> None:
        exe = BUILD / label / f"bench_{alg}"
        res = run(["compute-sanitizer", "--tool", tool, "--error-exitcode", SANITIZER_ERROR, exe, "check"])
        text = (res.stdout + res.stderr).strip()
        summary = [ln for ln in text.splitlines() if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln
                   or ln.startswith("check:")]
        verdicts = [ln for ln in summary if "SUMMARY" in ln]
        clean = res.returncode != SANITIZER_ERROR and bool(verdicts) and all(
            "SUMMARY: 0 errors" in ln or "0 hazards displayed (0 errors" in ln for ln in verdicts)
        key = f"{label}:{alg}:{tool}"
        with lock:
            out[key] = {"returncode": res.returncode, "summary": summary, "sanitizer_clean": clean,
                        "check_ok": res.returncode == 0}
            if not clean:
                bad.append(key)
            elif res.returncode:
                mismatched.append(key)
            state["sanitize"] = dict(out)
            _save(state)
        log(f"{key}: sanitizer {'clean' if clean else 'ERRORS'}, check {'ok' if res.returncode == 0 else 'FAILED'}")
        if res.returncode:
            print(text[-3000:], flush=True)

    # GRID_CHECK_SANITIZE_JOBS: sanitizer processes at once (each checks its own binary; the GPU is
    # shared, which the checks do not time)
    jobs = [(label, alg, tool) for label in [x for r in ROBOTS for x in (r, f"{r}-spill") if x in built]
            for alg in benched(label) for tool in ("memcheck", "racecheck")]
    with ThreadPoolExecutor(max_workers=int(os.environ.get("GRID_CHECK_SANITIZE_JOBS", "1"))) as pool:
        for f in [pool.submit(one, *j) for j in jobs]:
            f.result()
    state["sanitize"] = out
    if bad:
        raise RuntimeError(f"sanitizer reported errors (or no verdict): {bad}")
    if mismatched:
        raise RuntimeError(f"sanitizers clean; bench check found layouts that disagree: {mismatched}")


def _time(label: str, alg: str, repeats: int, sizes, stage_io: bool = False) -> list:
    sizes = [n for n in sizes if fits(label.split("-")[0], alg, n)] or list(sizes)[:1]
    path = BUILD / label / f"time_{alg}{'_staged' if stage_io else ''}.json"
    io_max_n = int(HOST_LAYER_BYTES // header_bytes_per_state(label.split("-")[0]))
    res = run([BUILD / label / f"bench_{alg}", "time", "--robot", label + ("-staged" if stage_io else ""),
               "--repeats", repeats, "--sizes", ",".join(map(str, sizes)), "--json", path,
               "--stage-io", int(stage_io), "--io-max-n", io_max_n])
    if res.returncode:
        raise RuntimeError(f"timing {label} {alg} failed: {res.stderr[-2000:]}")
    return json.loads(path.read_text())


TIER_SIZES = [int(x) for x in os.environ.get("GRID_CHECK_TIER_SIZES", "16,256,1024,4096").split(",") if x]


def _tiers(label: str, alg: str, repeats: int) -> list:
    """The block layout at every tier and block size (bench's tiers mode), at TIER_SIZES: whether
    a tier that spills, carving less shared memory, fits more blocks an SM and pays."""
    path = BUILD / label / f"tiers_{alg}.json"
    res = run([BUILD / label / f"bench_{alg}", "tiers", "--robot", label, "--repeats", repeats,
               "--sizes", ",".join(map(str, TIER_SIZES)), "--json", path])
    if res.returncode:
        raise RuntimeError(f"tiers of {label} {alg} failed: {res.stderr[-2000:]}")
    return json.loads(path.read_text())


def phase_time(state: dict, repeats: int) -> None:
    rows, tiers = [], []
    for label in ROBOTS:
        for alg in benched(label):
            rows += _time(label, alg, repeats, SIZES)
            tiers += _tiers(label, alg, max(5, repeats // 2)) if TIER_SIZES else []
            state["time"], state["tiers"] = list(rows), list(tiers)
            _save(state)  # after each algorithm: a run cut short keeps what it timed
        # the per-state layout staged through shared memory (coalesced stores), where it fits
        if "crba" in ALGORITHMS and os.environ.get("GRID_CHECK_STAGED_AB", "1") == "1":
            rows += [x for x in _time(label, "crba", repeats, [n for n in SIZES if n >= 1024], stage_io=True)
                     if x["layout"] == "per_state"]
        # the previous generator's inverse dynamics in the same run (kernel table unchanged?)
        if "inverse_dynamics" in ALGORITHMS and (BUILD / f"{label}-prev" / "bench_inverse_dynamics").exists():
            rows += _time(f"{label}-prev", "inverse_dynamics", repeats, SIZES)
    # P1 A/B: the per-body sweep form, block layout, at the batch sizes of the block regime
    built = {label for label, _, _ in variants()}
    for r in ROBOTS:
        for alg in benched(r):
            if f"{r}-bodies" in built:
                rows += _time(f"{r}-bodies", alg, repeats, (1, 256, 1024))
    # per-state occupancy A/B (launch bounds min blocks), every algorithm, large batches
    for r in OCC_ROBOTS:
        for occ in OCCUPANCIES:
            if f"{r}-occ{occ}" in built:
                for alg in benched(r):
                    rows += [x for x in _time(f"{r}-occ{occ}", alg, repeats, (4096, 16384, 262144, 1048576))
                             if x["layout"] == "per_state"]
        # block occupancy A/B (the TIER_SHARED block kernels' launch bounds), the block layout's sizes
        for occ in BLOCK_OCCUPANCIES:
            if f"{r}-bocc{occ}" in built:
                for alg in benched(r):
                    rows += [x for x in _time(f"{r}-bocc{occ}", alg, repeats, BLOCK_OCC_SIZES) if x["layout"] == "block"]
    # the A/Bs of AB_MODES: each form's per-state kernels at every size
    for r in ROBOTS:
        for ab in AB_MODES.values():
            for form in ab.forms:
                if f"{r}-{form}" in built:
                    for alg in ab.timed():
                        rows += [x for x in _time(f"{r}-{form}", alg, repeats, SIZES) if x["layout"] == "per_state"]
                    state["time"] = list(rows)
                    _save(state)  # after each form: a run cut short keeps the A/B rows it timed
    state["time"] = rows


# the floating-point instructions a thread executed, as Nsight Compute counts them (SASS, predicated on)
FLOP_METRICS = {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 2,
                "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1,
                "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 1}
FLOPS_N = int(os.environ.get("GRID_CHECK_FLOPS_N", 262144))


def fp32_peak() -> float:
    """The fp32 FLOP/s of this GPU's CUDA cores: SMs x 128 lanes x 2 (an FMA) x the SM clock."""
    res = run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"])
    mhz = float(res.stdout.split()[0])
    import torch  # the SM count (torch is on the GPU machine)

    return torch.cuda.get_device_properties(0).multi_processor_count * 128 * 2 * mhz * 1e6


def phase_flops(state: dict) -> None:
    """FLOPs a state executes, counted by Nsight Compute over one launch of the auto layout at
    N = FLOPS_N (FMA counted as two), and the fp32 compute floor they give at each timed N:
    N x FLOPs over the GPU's fp32 peak.  float32, per robot and algorithm."""
    import csv
    import io

    out = {"n": FLOPS_N, "fp32_peak_flops": fp32_peak(), "per_state": {}}
    for label in ROBOTS:
        for alg in benched(label):
            n = FLOPS_N if fits(label, alg, FLOPS_N) else 4096
            res = run(["ncu", "--csv", "--metrics", ",".join(FLOP_METRICS), BUILD / label / f"bench_{alg}", "once",
                       "--sizes", n])
            if res.returncode:
                raise RuntimeError(f"ncu {label} {alg} failed: {(res.stdout + res.stderr)[-1500:]}")
            total = 0.0
            rows = csv.DictReader(io.StringIO("\n".join(ln for ln in res.stdout.splitlines() if ln.startswith('"'))))
            for row in rows:
                value = float(row["Metric Value"].replace(",", ""))
                total += FLOP_METRICS[row["Metric Name"]] * value
            out["per_state"][f"{label}:{alg}"] = total / n
            log(f"{label} {alg}: {total / n:.0f} FLOP a state (N = {n})")
    state["flops"] = out


def compute_floor_us(state: dict, robot: str, alg: str, n: int) -> float | None:
    f = state.get("flops", {})
    per = f.get("per_state", {}).get(f"{robot}:{alg}")
    return None if per is None else n * per / f["fp32_peak_flops"] * 1e6


def phase_fused(state: dict) -> None:
    path = BUILD / "fused" / "fused.json"
    res = run([BUILD / "fused" / "fused", "--batch", 256, "--repeats", 200, "--threads", 128, "--json", path])
    print(res.stdout.strip())
    state["fused"] = json.loads(path.read_text()) if path.exists() else {"error": res.stderr[-2000:]}
    if res.returncode:
        raise RuntimeError("fused example failed its correctness check")


def _paired(ours: list, raw: list) -> dict:
    """Rounds of ours measured each beside a raw C++ round: the medians of both, and of the
    per-round differences with their range (drift between rounds cancels)."""
    d = sorted(a - b for a, b in zip(ours, raw))
    m = len(d) // 2
    return {"ours": sorted(ours)[m], "raw": sorted(raw)[m], "over": d[m], "range": [d[0], d[-1]]}


def _median_us(fn, repeats=300, warmup=30) -> float:
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e6)
    t.sort()
    return t[len(t) // 2]


def _cupy_row(row: dict, h, state_in, nv: int, sync, expected, rawlib) -> None:
    """CuPy per call: out= + sync, round by round against the raw C++ launch + sync on the
    same CuPy buffers (7 paired rounds, as torch)."""
    import numpy as np

    try:
        import cupy
    except ImportError:  # pragma: no cover - the device image has it
        return
    cq = [cupy.asarray(x) for x in state_in]
    co = cupy.empty((state_in[0].shape[0], nv), dtype=cupy.float32)
    ptrs = (co.data.ptr, *(x.data.ptr for x in cq))

    def call():
        h.inverse_dynamics(*cq, out=co)
        sync()

    ours, raw = [], []
    for _ in range(7):
        raw.append(rawlib.raw_resident_us(*ptrs, co.shape[0], None, 100))
        ours.append(_median_us(call, repeats=100))
    p = _paired(ours, raw)
    row["cupy_out_us"], row["overhead_cupy_sync_us"], row["overhead_cupy_sync_range"] = p["ours"], p["over"], p["range"]
    h.inverse_dynamics(*cq, out=co)
    row["cupy_matches_numpy"] = bool(np.allclose(cupy.asnumpy(co), expected, rtol=1e-5, atol=1e-5))


CHAIN = 11  # calls in the chained JAX program of the runtime phase


def _measure_jax(state: dict) -> None:
    """JAX arrays in, JAX arrays out, in a process of its own: XLA's streams in the same CUDA
    context slowed every other framework's launches and synchronisations (run wip-pool:
    cudaDeviceSynchronize 0.6 -> 1.9 µs, the raw C++ launch 3.9 -> 5.0 µs).  Per row: eager,
    inside jax.jit, JAX's floor (a trivial jitted program on the same arrays), and the cost of
    each further call in one jitted chain of CHAIN calls against the raw C++ launch chained
    alike (on a stream of its own, buffers from the library's allocator)."""
    import ctypes
    import warnings

    import numpy as np

    import grid_core
    from grid_core.runtime import RobotHandle
    from grid_core.testing import random_state

    warnings.simplefilter("ignore")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:  # pragma: no cover - the device image has it
        state["jax"] = []
        return
    rows = []
    for name in RUNTIME_ROBOTS:
        robot = grid_core.load_robot(name)
        h = RobotHandle(robot, ["inverse_dynamics"], np.float32, quiet=True)
        lib = h._lib()
        lib.grid_abi_malloc.restype = ctypes.c_void_p
        lib.grid_abi_malloc.argtypes = [ctypes.c_size_t]
        lib.grid_abi_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.grid_abi_free.argtypes = [ctypes.c_void_p]
        rawlib = ctypes.CDLL(str(BUILD / name / "libraw.so"))
        rawlib.raw_chain_us.restype = ctypes.c_double
        rawlib.raw_chain_us.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_void_p] + [ctypes.c_int] * 2
        rawlib.raw_stream_create.restype = ctypes.c_void_p
        stream = rawlib.raw_stream_create()
        rng = np.random.default_rng(0)
        for n in (16, 256, 1024, 4096):
            state_in = [x.astype(np.float32) for x in random_state(robot, rng, n)]
            expected = h.inverse_dynamics(*state_in)
            row = {"robot": name, "n": n}
            jq = [jnp.asarray(x) for x in state_in]
            in_program = jax.jit(lambda a, b, c: h.inverse_dynamics(a, b, c))
            floor = jax.jit(lambda a, b, c: a * 2.0)
            row["jax_us"] = _median_us(lambda: h.inverse_dynamics(*jq).block_until_ready())
            row["jax_jit_us"] = _median_us(lambda: in_program(*jq).block_until_ready())
            row["jax_floor_us"] = _median_us(lambda: floor(*jq).block_until_ready())
            row["jax_matches_numpy"] = bool(np.allclose(np.asarray(in_program(*jq)), expected, rtol=1e-5, atol=1e-5))
            # the raw chain's buffers: tau, q, qd, qdd, scratch
            sizes = [expected.nbytes, *(x.nbytes for x in state_in), expected.nbytes]
            bufs = [lib.grid_abi_malloc(b) for b in sizes]
            for buf, x in zip(bufs[1:4], state_in):
                lib.grid_abi_memcpy(buf, x.ctypes.data, x.nbytes, 1)
            programs = {k: jax.jit(lambda a, b, c, k=k: _chained(h, a, b, c, k)) for k in (1, CHAIN)}

            def jax_chain(k):
                return _median_us(lambda: programs[k](*jq).block_until_ready(), repeats=100, warmup=10)

            def raw_chain(k):
                return rawlib.raw_chain_us(*bufs, n, stream, k, 100)

            ours, raw = [], []
            for _ in range(5):
                raw.append((raw_chain(CHAIN) - raw_chain(1)) / (CHAIN - 1))
                ours.append((jax_chain(CHAIN) - jax_chain(1)) / (CHAIN - 1))
            p = _paired(ours, raw)
            row["jax_chain_us"], row["raw_chain_us"] = p["ours"], p["raw"]
            row["jax_chain_overhead_us"], row["jax_chain_overhead_range"] = p["over"], p["range"]
            for buf in bufs:
                lib.grid_abi_free(buf)
            rows.append(row)
    state["jax"] = rows


def _chained(h, q, qd, x, k):
    for _ in range(k):
        x = h.inverse_dynamics(q, qd, x)
    return x


def phase_runtime(state: dict) -> None:
    """RobotHandle: cold build and warm cache times; per-call overhead over the raw kernel.
    Measured in a fresh interpreter (as a user's process), not in this one."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        rows = Path(tmp) / "time.json"
        rows.write_text(json.dumps(state.get("time", [])))
        results = {}
        # numpy, torch and CuPy in one process; JAX in another (see _measure_jax); every algorithm
        # in a third (GRID_CHECK_RUNTIME_PARTS: some of them)
        for part in os.environ.get("GRID_CHECK_RUNTIME_PARTS", "arrays,jax,algorithms").split(","):
            result = Path(tmp) / f"{part}.json"
            res = subprocess.run([sys.executable, __file__, "--runtime-child", part, str(rows), str(result)], cwd=ROOT)
            if res.returncode or not result.exists():
                raise RuntimeError(f"the runtime measurement ({part}) failed (exit {res.returncode})")
            results[part] = json.loads(result.read_text())
    runtime = results.get("arrays", {"build": {}, "overhead": []})
    jax_rows = {(x["robot"], x["n"]): x for x in results.get("jax", [])}
    for row in runtime["overhead"]:
        row.update(jax_rows.get((row["robot"], row["n"]), {}))
    runtime["algorithms"] = results.get("algorithms", [])
    state["runtime"] = runtime


def _runtime_child(part: str, rows_path: str, result_path: str) -> None:
    state = {"time": json.loads(Path(rows_path).read_text())}
    if part == "jax":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        _measure_jax(state)
        Path(result_path).write_text(json.dumps(state["jax"]))
    elif part == "algorithms":
        Path(result_path).write_text(json.dumps(_measure_every_algorithm(state)))
    else:
        _measure_runtime(state)
        Path(result_path).write_text(json.dumps(state["runtime"]))


def _measure_runtime(state: dict) -> None:
    import ctypes
    import tempfile
    import warnings

    import numpy as np

    import grid_core
    from grid_core.runtime import RobotHandle
    from grid_core.testing import random_state

    warnings.simplefilter("ignore")
    out = {"build": {}, "overhead": []}
    saved = os.environ.get("GRID_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GRID_CACHE_DIR"] = tmp
        for name in RUNTIME_ROBOTS:
            t0 = time.perf_counter()
            RobotHandle(name, ["inverse_dynamics"], np.float32, quiet=True)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            RobotHandle(name, ["inverse_dynamics"], np.float32, quiet=True)
            warm = time.perf_counter() - t0
            out["build"][name] = {"cold_s": round(cold, 2), "warm_s": round(warm, 3)}
    if saved is not None:
        os.environ["GRID_CACHE_DIR"] = saved
    try:
        import torch
    except ImportError:  # pragma: no cover - the device image has it
        torch = None
    raw = {(x["robot"], x["n"]): x for x in state.get("time", [])
           if x["layout"] == "auto" and x.get("algorithm", "inverse_dynamics") == "inverse_dynamics"}
    alg = grid_core.registry().algorithm("inverse_dynamics")
    for name in RUNTIME_ROBOTS:
        robot = grid_core.load_robot(name)
        h = RobotHandle(robot, ["inverse_dynamics"], np.float32, quiet=True)
        lib = h._lib()
        rng = np.random.default_rng(0)
        for n in (16, 256, 1024, 4096):
            q, qd, qdd = random_state(robot, rng, n)
            q, qd, qdd = (x.astype(np.float32) for x in (q, qd, qdd))
            # numpy in -> numpy out: as chosen by size, each transfer forced, and the Python form of
            # the call path (what runs where the C form cannot be built)
            rounds = sorted(_median_us(lambda: h.inverse_dynamics(q, qd, qdd), repeats=150) for _ in range(5))
            row = {"robot": name, "n": n, "numpy_us": rounds[2], "numpy_range": [rounds[0], rounds[-1]]}
            for transfer in ("copy", "mapped", "mapped_staged"):
                hx = h.with_launch(transfer=transfer)
                row[f"numpy_{transfer}_us"] = _median_us(lambda: hx.inverse_dynamics(q, qd, qdd))
            hp = h.with_launch()
            hp._plan(alg).fastcall = None
            row["numpy_python_path_us"] = _median_us(lambda: hp.inverse_dynamics(q, qd, qdd))
            if torch is not None:
                tq, tqd, tqdd = (torch.from_numpy(x).cuda() for x in (q, qd, qdd))
                o = torch.empty((n, robot.nv), device="cuda")
                sync = lib.grid_abi_synchronize  # cudaDeviceSynchronize through ctypes, like the C++ loop's

                def call_out():
                    h.inverse_dynamics(tq, tqd, tqdd, out=o)
                    sync()

                def call_alloc():
                    h.inverse_dynamics(tq, tqd, tqdd)
                    sync()

                def call_out_torch_sync():
                    h.inverse_dynamics(tq, tqd, tqdd, out=o)
                    torch.cuda.synchronize()

                def back_to_back():
                    # host time per call among 100 back-to-back calls (as the C++ "launch" column)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(100):
                        h.inverse_dynamics(tq, tqd, tqdd, out=o)
                    t1 = time.perf_counter()
                    torch.cuda.synchronize()
                    return (t1 - t0) * 1e4

                # round by round against the raw C++ launch in this process (drift cancels)
                rawlib = ctypes.CDLL(str(BUILD / name / "libraw.so"))
                for f in (rawlib.raw_resident_us, rawlib.raw_launch_us):
                    f.restype = ctypes.c_double
                    f.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
                ptrs = (o.data_ptr(), tq.data_ptr(), tqd.data_ptr(), tqdd.data_ptr())
                ours_sync, ours_async, raw_sync, raw_async = [], [], [], []
                back_to_back()
                for _ in range(7):
                    raw_sync.append(rawlib.raw_resident_us(*ptrs, n, None, 100))
                    ours_sync.append(_median_us(call_out, repeats=100))
                    raw_async.append(rawlib.raw_launch_us(*ptrs, n, None, 5))
                    ours_async.append(sorted(back_to_back() for _ in range(5))[2])
                ps, pa = _paired(ours_sync, raw_sync), _paired(ours_async, raw_async)
                row["torch_out_us"], row["raw_resident_us"] = ps["ours"], ps["raw"]
                row["torch_async_us"], row["raw_launch_us"] = pa["ours"], pa["raw"]
                row["overhead_sync_us"], row["overhead_sync_range"] = ps["over"], ps["range"]
                row["overhead_async_us"], row["overhead_async_range"] = pa["over"], pa["range"]
                row["torch_alloc_us"] = _median_us(call_alloc)
                row["torch_out_torch_sync_us"] = _median_us(call_out_torch_sync)
                row["sync_only_us"] = _median_us(sync)
                row["torch_sync_only_us"] = _median_us(torch.cuda.synchronize)
                torch.cuda.synchronize()
                expected = h.inverse_dynamics(q, qd, qdd)
                got = h.inverse_dynamics(tq, tqd, tqdd, out=o)
                row["torch_matches_numpy"] = bool(np.allclose(got.cpu().numpy(), expected, rtol=1e-5, atol=1e-5))
                _cupy_row(row, h, (q, qd, qdd), robot.nv, sync, expected, rawlib)
            r = raw.get((name, n))
            if r:
                row.update(kernel_us=r["kernel_us"], resident_us=r["resident_us"], io_us=r["io_us"])
            out["overhead"].append(row)
    state["runtime"] = out


def _measure_every_algorithm(state: dict) -> list:
    """Every emitted algorithm through RobotHandle (float32, one library a robot): numpy in and
    out, and torch CUDA tensors in and out (allocated by the call) + torch.cuda.synchronize,
    against the same algorithm's C++ figures of the time phase (io: the host wrapper with copies;
    resident: launch + synchronise), at N = 16, 256, 1024.  Each a median of 100 calls."""
    import warnings

    import numpy as np

    import grid_core
    from grid_core.runtime import RobotHandle
    from grid_core.testing import random_q

    warnings.simplefilter("ignore")
    try:
        import torch
    except ImportError:  # pragma: no cover - the device image has it
        torch = None
    emitted = emitted_algorithms()
    timed = {(x["robot"], x["n"], x.get("algorithm", "inverse_dynamics")): x for x in state.get("time", [])
             if x["layout"] == "auto"}
    rows = []
    for name in RUNTIME_ROBOTS:
        robot = grid_core.load_robot(name)
        h = RobotHandle(robot, emitted, np.float32, quiet=True)
        rng = np.random.default_rng(0)
        for alg in emitted:
            ports = [p for p in grid_core.registry().algorithm(alg).inputs(robot) if p.kind == "state" and not p.optional]
            for n in (16, 256, 1024):
                args = [random_q(robot, rng, n) if p.name == "q" else rng.normal(size=(n, *p.shape)) for p in ports]
                args = [a.astype(np.float32) for a in args]
                method = getattr(h, alg)
                row = {"robot": name, "algorithm": alg, "n": n,
                       "numpy_us": _median_us(lambda: method(*args), repeats=100, warmup=10)}
                if torch is not None:
                    targs = [torch.from_numpy(a).cuda() for a in args]

                    def call():
                        method(*targs)
                        torch.cuda.synchronize()

                    row["torch_us"] = _median_us(call, repeats=100, warmup=10)
                c = timed.get((name, n, alg))
                if c:
                    row.update(io_us=c["io_us"], resident_us=c["resident_us"])
                rows.append(row)
    return rows


def phase_tune(state: dict) -> None:
    """Per algorithm and robot, the measured choices (grid_core.tuning: the crossover to the
    per-state layout, the P1 form of the block layout, the per-state occupancy, the A/B options,
    forward dynamics' method) written to grid_algorithms/<algorithm>.tuning.json, which the
    composer bakes into headers."""
    import warnings

    import grid_core
    from grid_core import tuning

    warnings.simplefilter("ignore")
    rows = state.get("time", [])
    state["tuning"] = {}
    # GRID_CHECK_TUNE=a,b: rewrite only these tuning files (a base-variants run has no P1 A/B)
    tune = [a for a in (os.environ.get("GRID_CHECK_TUNE") or ",".join(ALGORITHMS)).split(",") if a in ALGORITHMS]
    for alg in tune:
        path = ROOT / "grid_algorithms" / f"{alg}.tuning.json"
        on_file = json.loads(path.read_text()).get("robots", {}) if path.exists() else {}
        entries = {}
        for r in ROBOTS:
            header = BUILD / r / "grid.cuh"
            entry = tuning.tune_entry(
                alg, grid_core.load_robot(r), rows, on_file.get(r, {}), modes=AB_MODES, occupancies=OCCUPANCIES,
                block_occupancies=BLOCK_OCCUPANCIES,
                staged=alg in _stage_algorithms(), gpu=state.get("gpu", ""),
                has_ring=header.exists() and f"{alg.upper()}_RING_SLOTS" in header.read_text())
            if entry is not None:
                entries[r] = entry
        state["tuning"][alg] = tuning.write_tuning(path, entries)


def phase_peers(state: dict) -> None:
    """MJX beside ours (benchmarks/peers.py, in a child process: JAX stays out of this one).
    Its rows, versions and timing method go into this run's JSON, where the docs render them;
    the child rewrites its own JSON after each robot (under $OUT when set), so a run cut short
    keeps the robots it finished."""
    probe = subprocess.run([sys.executable, "-c", "import mujoco.mjx"], capture_output=True, text=True, check=False)
    if probe.returncode:
        raise RuntimeError("mujoco-mjx does not import (pip install -e '.[test]', or on the offline GPU machine "
                           f"the wheels of .whl/, which gpu_check.sh installs): {probe.stderr.strip().splitlines()[-1:]}")
    path = Path(os.environ.get("OUT") or BUILD) / "peers.json"
    path.unlink(missing_ok=True)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "peers.py"), "--robots", PEER_ROBOTS, "--sizes", PEER_SIZES,
           "--json", str(path)]
    log(" ".join(cmd[1:]))
    res = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "GRID_COMMIT": state["commit"], "PYTHONUNBUFFERED": "1"}, check=False)
    if not path.exists():
        raise RuntimeError(f"peers.py wrote no rows (exit {res.returncode})")
    got = json.loads(path.read_text())
    for key in ("backend", "dtype", "matmul_precision", "versions", "timing", "peers", "peers_published"):
        state[key] = got.get(key)
    if res.returncode:
        raise RuntimeError("peers.py: a row's agreement is beyond its tolerance (its rows are kept; see above)")


def gpu_name() -> str:
    res = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return res.stdout.strip().splitlines()[0] if res.returncode == 0 and res.stdout.strip() else "unknown GPU"


def _baked_method(robot_name: str) -> str:
    """Forward dynamics' method that the tuning file bakes into ``robot_name``'s header."""
    import grid_core
    from grid_core.composer import tuning_for

    return tuning_for(grid_core.algorithms()["forward_dynamics"], grid_core.load_robot(robot_name)).get("method", "minv")


def targets(rows: list, state: dict | None = None) -> list[str]:
    """The issue targets of each algorithm's kernels, each line with its figures and a verdict:
    near the launch floor up to N = 16384 (iiwa14, hyq), within 3x of the larger of the memory
    and fp32 compute floors from N = 262144, every published upstream cell (resident and with
    copies) beaten."""
    out = []
    for alg in ALGORITHMS:
        auto = {(x["robot"], x["n"]): x for x in rows
                if x.get("algorithm", "inverse_dynamics") == alg and x["layout"] == "auto" and "-" not in x["robot"]}
        if not auto:
            continue
        out += ["", f"targets of {alg}:"]
        if alg == "forward_dynamics":
            # the bench builds forward dynamics by Minv (tau - bias) beside aba (see _with_base); a
            # robot whose header bakes ABA is judged on the aba rows: that is the code it ships
            baked = [r for r in {r for r, _ in auto} if _baked_method(r) == "aba"]
            for (r, n), x in list(auto.items()):
                if r in baked:
                    by_aba = next((y for y in rows if y.get("algorithm") == "aba" and y["robot"] == r
                                   and y["n"] == n and y["layout"] == "auto"), None)
                    if by_aba is None:
                        del auto[(r, n)]
                    else:
                        auto[(r, n)] = by_aba
            if baked:
                out.append(f"  ({', '.join(sorted(baked))}: the aba rows, the method baked in by the tuning file)")
        for r in ("iiwa14", "hyq"):
            for what, of, empty in (("kernel - empty", "kernel_us", "empty_us"), ("graph - graph empty", "graph_us",
                                                                                   "graph_empty_us")):
                over = [(n, x[of] - x[empty]) for (rr, n), x in sorted(auto.items()) if rr == r and n <= 16384]
                if over:
                    worst = max(over, key=lambda t: t[1])
                    # the store floor at that N: a kernel that only moves the batch's bytes (bench's
                    # stream kernel, same run), over the same empty kernel
                    x = auto[(r, worst[0])]
                    stream = x.get("stream_us" if of == "kernel_us" else "graph_stream_us", -1)
                    moved = f" (moving its bytes alone: {stream - x[empty]:.2f})" if stream > 0 else ""
                    out.append(f"  {r}: {what} <= 2 us for N <= 16384: worst {worst[1]:.2f} at N={worst[0]}"
                               f"{moved}  {'yes' if worst[1] <= 2.0 else 'NO'}")
        for (r, n), x in sorted(auto.items()):
            if n >= 262144:
                # the larger of the memory floor and the fp32 compute floor (the flops phase's count);
                # within 3x of it (the GPU-run issue)
                floor = n * bytes_per_state(r, alg) / HBM_BYTES_PER_S * 1e6
                comp = compute_floor_us(state or {}, r, alg, n)
                top = max(floor, comp or 0.0)
                out.append(f"  {r} N={n}: kernel {x['kernel_us']:.1f} us, memory floor {floor:.1f} us, compute floor "
                           f"{'-' if comp is None else format(comp, '.1f')} us, ratio to the larger "
                           f"{x['kernel_us'] / top:.2f}  {'yes' if x['kernel_us'] <= 3 * top else 'NO'}")
        for r, cells in UPSTREAM_5090.get(alg, {}).items():
            for n, (res_, host) in cells.items():
                x = auto.get((r, n))
                if x:
                    ok = x["resident_us"] < res_ and 0 < x["io_us"] < host
                    forced = (f" [copy engine {x['io_copy_us']:.1f}, mapped {x['io_mapped_us']:.1f}"
                              + (f", mapped staged {x['io_mapped_staged_us']:.1f}" if "io_mapped_staged_us" in x else "")
                              + "]" if "io_copy_us" in x else "")
                    out.append(f"  {r} B={n}: resident {x['resident_us']:.1f} vs {res_}, with copies "
                               f"{x['io_us']:.1f}{forced} vs {host} (upstream, RTX 5090)  {'yes' if ok else 'NO'}")
        # §C: upstream's kernels rebuilt on this H200; the forward-dynamics issue asks >= 10x
        need = 10.0 if alg in ("minv", "forward_dynamics") else None
        for r, cells in UPSTREAM_H200_KERNEL.get(alg, {}).items():
            for n, up in cells.items():
                x = auto.get((r, n))
                if x:
                    verdict = "" if need is None else ("  yes" if up / x["kernel_us"] >= need else "  NO")
                    out.append(f"  {r} N={n}: kernel {x['kernel_us']:.2f} vs upstream on this H200 {up} "
                               f"({up / x['kernel_us']:.1f}x){verdict}")
        for r, n, limit in RESIDENT_LIMITS.get(alg, ()):
            x = auto.get((r, n))
            if x:
                out.append(f"  {r} B={n}: resident {x['resident_us']:.1f} us, target under {limit}  "
                           f"{'yes' if x['resident_us'] < limit else 'NO'}")
    return out


def tiers_table(rows: list) -> list[str]:
    """The block layout's tier x block-size rows (bench's tiers mode): per robot, algorithm and
    batch, the fastest pair against the default (TIER_SHARED at the header's widest block)."""
    if not rows:
        return []
    lines = ["", "block layout by tier and block size, kernel µs: the default (shared, widest block) vs the fastest pair"]
    by: dict = {}
    for x in rows:
        by.setdefault((x["robot"], x["algorithm"], x["n"]), []).append(x)
    for (r, alg, n), xs in by.items():
        shared = [x for x in xs if x["tier"] == "shared"]
        default = max(shared or xs, key=lambda x: x["threads"])
        best = min(xs, key=lambda x: x["kernel_us"])
        lines.append(f"  {r:<8}{alg:<28}{n:>6}  {default['kernel_us']:>9.1f}  {best['kernel_us']:>9.1f} "
                     f"({best['tier']}, {best['threads']})  x{default['kernel_us'] / best['kernel_us']:.2f}")
    return lines


def summary(state: dict) -> str:
    lines = ["", "=" * 118, f"SUMMARY  {state['gpu']}  commit {state['commit']}  {state['date']}", "=" * 118]
    tc = state.get("toolchain") or {}
    if tc:
        lines.append("  toolchain: " + (f"nvcc {tc['nvcc']}, ptxas {tc['ptxas']} {tc['ptxas_flags']} ({tc['ptxas_path']})"
                                        if "error" not in tc else tc["error"]))
    for ph, res in state["phases"].items():
        lines.append(f"  phase {ph:<9} {res}")
    runs = state.get("sanitize") or {}
    if runs:  # the sanitizers' verdicts apart from bench check's (float32 layouts against each other)
        lines.append(f"  sanitize: {len(runs)} runs, {sum(bool(v.get('sanitizer_clean')) for v in runs.values())} "
                     f"sanitizer-clean, {sum(bool(v.get('check_ok')) for v in runs.values())} with every layout agreeing")
    rows = state.get("time", [])
    for alg in ALGORITHMS:
        mine = [x for x in rows if x.get("algorithm", "inverse_dynamics") == alg]
        if not mine:
            continue
        up_kernel = UPSTREAM_H200_KERNEL.get(alg, {})
        up_5090 = UPSTREAM_5090.get(alg, {})
        lines.append("")
        lines.append(f"{alg}, float32, µs (median). kernel = one launch in cudaEvents; empty = empty kernel, "
                     "same grid, same run;")
        lines.append("graph = CUDA-graph replay; resident = host-timed launch+sync (r-empty: an empty kernel's, the "
                     "resident floor; -1: not measured); io = host wrapper with copies; "
                     "floor = the larger of bytes in + out at 4.3 TB/s and FLOPs at the fp32 peak; upstream: H200 kernel (GRiD 032ed02 on this GPU) / "
                     "5090 res/host (published)")
        hdr = (f"{'robot':<8}{'N':>9} {'layout':<10}{'kernel':>8}{'empty':>8}{'k-e':>7}{'graph':>8}{'g-empty':>8}"
               f"{'resident':>9}{'r-empty':>8}{'io':>9}{'floor':>8}  upstream")
        lines.append(hdr)
        for x in mine:
            if x["layout"] != "auto" or "-" in x["robot"]:
                continue
            r, n = x["robot"], x["n"]
            up = []
            if n in up_kernel.get(r, {}):
                up.append(f"H200 kernel {up_kernel[r][n]}")
            if n in up_5090.get(r, {}):
                res_, host = up_5090[r][n]
                up.append(f"5090 res {res_} / host {host}")
            floor = ""
            if n >= 262144:
                comp = compute_floor_us(state, r, alg, n)
                floor = f"{max(n * bytes_per_state(r, alg) / HBM_BYTES_PER_S * 1e6, comp or 0.0):.1f}"
            lines.append(
                f"{r:<8}{n:>9} {x['resolved']:<10}{x['kernel_us']:>8.2f}{x['empty_us']:>8.2f}"
                f"{x['kernel_us'] - x['empty_us']:>7.2f}{x['graph_us']:>8.2f}{x['graph_empty_us']:>8.2f}"
                f"{x['resident_us']:>9.2f}{x.get('resident_empty_us', -1.0):>8.2f}{x['io_us']:>9.2f}{floor:>8}  "
                f"{'; '.join(up)}"
            )
    lines += targets(rows, state)
    lines += tiers_table(state.get("tiers", []))
    staged = {(x["robot"][:-7], x["n"]): x["kernel_us"] for x in rows if x["robot"].endswith("-staged")}
    if staged:
        lines += ["", "crba per-state layout, kernel µs: plain vs staged through shared memory (coalesced stores):"]
        for x in rows:
            key = (x["robot"], x["n"])
            if x.get("algorithm") == "crba" and x["layout"] == "per_state" and key in staged:
                lines.append(f"  {x['robot']:<8}{x['n']:>9}{x['kernel_us']:>10.2f}{staged[key]:>10.2f}")
    prev = {(x["robot"][:-5], x["n"], x["layout"]): x["kernel_us"] for x in rows if x["robot"].endswith("-prev")}
    if prev:
        lines.append("")
        lines.append("inverse_dynamics kernel µs, this generator vs the previous one (same run; ratio = new / prev):")
        for x in rows:
            key = (x["robot"], x["n"], x["layout"])
            if x.get("algorithm") == "inverse_dynamics" and key in prev and x["layout"] in ("block", "per_state"):
                lines.append(f"  {x['robot']:<8}{x['n']:>9} {x['layout']:<10}{x['kernel_us']:>8.2f}{prev[key]:>8.2f}"
                             f"  {x['kernel_us'] / prev[key]:.3f}")
    t = state.get("tuning", {})
    for alg, tun in t.items():
        if not isinstance(tun, dict) or not tun.get("robots"):
            continue
        lines.append("")
        lines.append(f"tuning of {alg} (block layout A/B of the P1 sweep form; crossover to the per-state layout):")
        for r, v in tun["robots"].items():
            if "method" in v:
                lines.append(f"  {r:<8} method={v['method']} (kernel geomean over N={v['method_ab_sizes']}: "
                             f"Minv (tau - bias) {v['method_ab_geomean_us']['minv']} us, "
                             f"ABA {v['method_ab_geomean_us']['aba']} us)")
            lines.append(f"  {r:<8} per_state_min_n={v['per_state_min_n']:<8} P1 winner={v['p1']:<7} "
                         f"N=256 levels {v['ab_block_n256_us']['levels']} us vs bodies {v['ab_block_n256_us']['bodies']} us;"
                         f" N=1024 levels {v['ab_block_n1024_us']['levels']} vs bodies {v['ab_block_n1024_us']['bodies']}")
    rt = state.get("runtime")
    if rt:
        lines.append("")
        lines.append("RobotHandle (float32): build " + ", ".join(
            f"{k} cold {v['cold_s']} s / warm {v['warm_s']} s" for k, v in rt["build"].items()))
        lines.append("numpy in/out (µs, one call, synchronous): auto = transfer chosen by size; copy / mapped / "
                     "mapped_staged forced;")
        lines.append("py = the Python form of the call path; target: at or under upstream's published host figure (5090)")
        lines.append("(auto: median of 5 rounds [min, max])")
        lines.append(f"{'robot':<8}{'N':>6}{'auto':>8}{'range':>15}{'copy':>8}{'mapped':>8}{'staged':>8}{'py':>8}"
                     f"{'io C++':>8}   upstream host  met")
        for x in rt["overhead"]:
            up = UPSTREAM_5090["inverse_dynamics"].get(x["robot"], {}).get(x["n"])
            met = "-" if not up else ("yes" if x["numpy_us"] <= up[1] else "NO")
            lo, hi = x["numpy_range"]
            lines.append(f"{x['robot']:<8}{x['n']:>6}{x['numpy_us']:>8.1f}{f'[{lo:.1f}, {hi:.1f}]':>15}"
                         f"{x['numpy_copy_us']:>8.1f}{x['numpy_mapped_us']:>8.1f}"
                         f"{x.get('numpy_mapped_staged_us', float('nan')):>8.1f}{x['numpy_python_path_us']:>8.1f}"
                         f"{format(x['io_us'], '.1f') if 'io_us' in x else '-':>8}   {up[1] if up else '-':>13}  {met}")
        lines.append("torch CUDA tensors (µs): out= + sync; alloc + sync; out= + torch.cuda.synchronize; raw = the C++ "
                     "launch + sync in the same process;")
        lines.append("overhead = ours - raw, median of 7 paired rounds [min, max] (sync: one call + cudaDeviceSynchronize; "
                     "async: per call among 100 back-to-back); target < 10")
        lines.append(f"{'robot':<8}{'N':>6}{'out=':>7}{'alloc':>7}{'t.sync':>7}{'raw':>7}{'async':>7}{'raw':>6}"
                     f"{'over sync':>20}{'over async':>20}  met")
        for x in rt["overhead"]:
            if "torch_out_us" not in x:
                continue
            o_s, o_a = x["overhead_sync_us"], x["overhead_async_us"]
            met = "yes" if o_s < 10 and o_a < 10 else "NO"
            rs, ra = x["overhead_sync_range"], x["overhead_async_range"]
            lines.append(f"{x['robot']:<8}{x['n']:>6}{x['torch_out_us']:>7.1f}{x['torch_alloc_us']:>7.1f}"
                         f"{x['torch_out_torch_sync_us']:>7.1f}{x['raw_resident_us']:>7.1f}{x['torch_async_us']:>7.1f}"
                         f"{x['raw_launch_us']:>6.1f}{o_s:>8.1f} [{rs[0]:.1f}, {rs[1]:.1f}]{o_a:>8.1f} "
                         f"[{ra[0]:.1f}, {ra[1]:.1f}]  {met}{'' if x.get('torch_matches_numpy', True) else '  MISMATCH'}")
        lines.append("CuPy out= + sync and its overhead over the C++ resident, median of 7 paired rounds [min, max] "
                     "(target < 10); JAX array in, JAX array out, "
                     "ready: eager, inside jax.jit, and JAX's floor (a trivial jitted program on the same arrays; JAX measured "
                     "in a process of its own); upstream's JAX wrapper adds 200-300")
        for x in rt["overhead"]:
            if "cupy_out_us" in x:
                o = x.get("overhead_cupy_sync_us")
                nan = float("nan")
                lo, hi = x.get("overhead_cupy_sync_range", (nan, nan))
                lines.append(f"  {x['robot']:<8}{x['n']:>6}  cupy {x['cupy_out_us']:>6.1f}  over "
                             f"{o if o is None else round(o, 1)} [{lo:.1f}, {hi:.1f}] "
                             f"{'yes' if o is not None and o < 10 else 'NO'}"
                             f"{'' if x.get('cupy_matches_numpy', True) else ' MISMATCH'}"
                             f"   jax {x.get('jax_us', nan):>6.1f}  in jit {x.get('jax_jit_us', nan):>6.1f}  floor "
                             f"{x.get('jax_floor_us', nan):>6.1f}{'' if x.get('jax_matches_numpy', True) else '  MISMATCH'}")
        if any("jax_chain_us" in x for x in rt["overhead"]):
            lines.append(f"JAX inside one jitted program: each further call of a chain of {CHAIN} (µs), against the raw "
                         "C++ launch chained alike in the same process; overhead = ours - raw, median of 5 paired rounds "
                         "[min, max]; target < 10")
            for x in rt["overhead"]:
                if "jax_chain_us" in x:
                    lo, hi = x["jax_chain_overhead_range"]
                    o = x["jax_chain_overhead_us"]
                    lines.append(f"  {x['robot']:<8}{x['n']:>6}  jax {x['jax_chain_us']:>6.2f}  raw {x['raw_chain_us']:>6.2f}"
                                 f"  overhead {o:>6.2f} [{lo:.2f}, {hi:.2f}]  {'yes' if o < 10 else 'NO'}")
    if rt and rt.get("algorithms"):
        lines += ["", "every algorithm through RobotHandle (float32, µs, median of 100 calls): numpy in/out against the C++ "
                  "host wrapper with copies (io); torch CUDA tensors in/out + synchronize against launch + synchronise "
                  "(resident)"]
        lines.append(f"{'robot':<8}{'algorithm':<28}{'N':>6}{'numpy':>9}{'io C++':>9}{'torch':>9}{'resident':>9}")
        nan = float("nan")
        for x in rt["algorithms"]:
            lines.append(f"{x['robot']:<8}{x['algorithm']:<28}{x['n']:>6}{x['numpy_us']:>9.1f}{x.get('io_us', nan):>9.1f}"
                         f"{x.get('torch_us', nan):>9.1f}{x.get('resident_us', nan):>9.1f}")
    f = state.get("fused")
    if isinstance(f, dict) and "fused_us" in f:
        lines.append("")
        lines.append(f"fused example (iiwa14, batch {f['batch']}): fused {f['fused_us']:.2f} us, layered "
                     f"{f['layered_us']:.2f} us, ratio {f['layered_us'] / f['fused_us']:.2f}x (upstream 5090: 3.75x)")
    if state.get("peers"):
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import peers  # numpy and attrs only at import; JAX stays in its own process

        slower = [r for r in state["peers"] if not (r.get("ratio") or 0) > 1]
        apart = [r for r in state["peers"] if not peers.agrees(r)]
        lines += ["", (f"peers: GRiD against MJX, {state.get('dtype')}, JAX matmul precision "
                       f"{state.get('matmul_precision')}; {state.get('timing')}"),
                  peers.table(state["peers"]),
                  (f"every row ours faster: {'yes' if not slower else 'NO (' + str(len(slower)) + ' rows)'}; "
                   f"every row within the ladder's tolerance: "
                   f"{'yes' if not apart else 'NO (' + str(len(apart)) + ' rows)'}")]
    return "\n".join(lines)


def _save(state: dict) -> None:
    """The results JSON (benchmarks/results/, and $OUT when set, with this run's algorithms' tuning
    files in one tarball beside it: a device call returns only a few files)."""
    import tarfile

    RESULTS.mkdir(parents=True, exist_ok=True)
    gpu = state["gpu"].split(",")[0].replace("NVIDIA ", "").replace(" ", "")
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in state["commit"])
    name = f"{state['date'][:10]}_{gpu}_{safe}.json"
    (RESULTS / name).write_text(json.dumps(state, indent=1) + "\n")
    out = os.environ.get("OUT")
    if out:
        shutil.copy(RESULTS / name, Path(out) / name)
        tunings = [t for t in (ROOT / "grid_algorithms" / f"{alg}.tuning.json" for alg in ALGORITHMS) if t.exists()]
        if tunings:
            with tarfile.open(Path(out) / f"{Path(name).stem}-tuning.tgz", "w:gz") as tar:
                for t in tunings:
                    tar.add(t, arcname=f"grid_algorithms/{t.name}")


def phases_of(state: dict, args) -> list:
    """(name, run) of every phase, in order; with --build only the build."""
    phases = [("build", lambda: phase_build(state))]
    if not args.build:
        phases += [
            ("tests", lambda: phase_tests(state)),
            ("sanitize", lambda: phase_sanitize(state)),
            ("time", lambda: phase_time(state, args.repeats)),
            ("flops", lambda: phase_flops(state)),
            ("fused", lambda: phase_fused(state)),
            ("runtime", lambda: phase_runtime(state)),
            ("tune", lambda: phase_tune(state)),
            ("peers", lambda: phase_peers(state)),
        ]
    return phases


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="store_true", help="only build (no GPU needed)")
    ap.add_argument("--skip", default="", help="comma-separated phases to skip")
    ap.add_argument("--only", default="", help="comma-separated phases to run (the others skipped)")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--runtime-child", nargs=3, metavar=("PART", "TIME_JSON", "OUT_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.runtime_child:
        _runtime_child(*args.runtime_child)
        return 0
    os.environ.setdefault("GRID_CACHE_DIR", str(BUILD / "cache"))
    os.environ.setdefault("GRID_CUDA_ARCH", ARCH)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    state = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "commit": os.environ.get("GRID_COMMIT") or commit.stdout.strip() or "unknown",
        "gpu": "build only" if args.build else gpu_name(),
        "toolchain": toolchain_record(),
        "phases": {},
    }
    skip = set(filter(None, args.skip.split(",")))
    only = set(filter(None, args.only.split(",")))
    phases = phases_of(state, args)
    unknown = (skip | only) - {name for name, _ in phases}
    if unknown:
        ap.error(f"unknown phases {', '.join(sorted(unknown))}")
    failed = False
    for name, fn in phases:
        if name in skip or (only and name not in only):
            state["phases"][name] = "skipped"
            continue
        t0 = time.perf_counter()
        try:
            fn()
            state["phases"][name] = f"ok ({time.perf_counter() - t0:.0f} s)"
        except Exception as exc:  # record and carry on: the summary shows every phase
            failed = True
            state["phases"][name] = f"FAILED: {str(exc).splitlines()[0][:200]}"
            traceback.print_exc()
        if not args.build:
            _save(state)  # after every phase: a run cut short keeps what it measured
    print(summary(state))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
