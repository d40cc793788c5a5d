"""The gridData host layer (layer 3, upstream's host API) host-emulated against the Reference:
every emitted algorithm with a host wrapper (each of its outputs), on a batch small enough for
mapped memory and on the first batch the wrapper moves through the copy engine instead
(:func:`grid_core.emit.layers.mapped_by_size`), float64 rel 1e-9; and that rule, as the header
renders it, against its Python twin and the H100 measurements it was set from.  The GPU side of the same
comparison is bench check's (benchmarks/src/bench.cu, under compute-sanitizer)."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from conftest import load
from grid_core import Reference, algorithms, buildcache
from grid_core.composer import Composer, GenerateOptions, generate
from grid_core.emit.layers import (MAPPED_BLOCK_STATE_BYTES, MAPPED_MAX_WORK, MAPPED_ROW_BYTES,
                                   MAPPED_SCATTERED_BATCH_BYTES, MAPPED_STAGE_MIN_N, MAPPED_STAGED_STATE_BYTES,
                                   mapped_by_size)
from grid_core.errors import InputError
from grid_core.runtime.backend import emulation_command
from grid_core.testing import assert_close, random_state
from tests.algorithms.test_operational_space_inertia import judge as judge_inertia
from tests.generated import PARAM_VALUES, emitted

ROBOTS = ["iiwa14", "go2"]  # a fixed arm and a floating base (a quaternion in q)


def _wrapper(robot, algorithms: list[str]) -> tuple[str, dict]:
    """C source of ``host_<alg>(n, q_qd, u, out)`` for each algorithm: gridData filled from
    [q | qd] and the third input, the host wrapper (compressed form, every flag on), the results
    copied out; and each algorithm's (state input names, output size, first copied batch)."""
    lines = ["#include \"grid.cuh\"", "#include <cstring>", "",
             'extern "C" int mapped_by_size(size_t n, size_t in_values, size_t out_bytes, int block, int staged) {',
             "    return grid::grid_mapped_by_size(n, in_values, out_bytes, block != 0, staged != 0);",
             "}", ""]
    info = {}
    for alg in algorithms:
        L = Composer(robot, GenerateOptions()).layers(alg)
        host = getattr(L, "host", None)
        if host is None:
            continue
        names = [p.name for p in L.states if p.name != "f_ext"]
        targs = ", ".join(["double"] + ["true"] * (len(host.template) - 1))
        params = "".join(", " + PARAM_VALUES[p.name].format(ns="grid::", T="double") for p in L.params)
        lines += [
            f'extern "C" int host_{alg}(int n, const double *q_qd, const double *u, double *out) {{',
            "    grid::robotModel<double> *model = grid::init_robotModel<double>();",
            "    cudaStream_t *streams = grid::init_grid_streams<double>();",
            "    grid::gridData<double> *hd = grid::init_gridData<double>(n);",
            "    std::memcpy(hd->h_q_qd, q_qd, sizeof(double) * n * (grid::NUM_POS + grid::NUM_VEL));",
            "    std::memcpy(hd->h_u, u, sizeof(double) * n * grid::NUM_VEL);",
            f"    grid::{alg}<{targs}>(hd, model{params}, n, dim3(n), dim3(64), streams);",
            *copies_out(L),
            "    grid::close_grid<double>(hd);",
            "    grid::close_grid_streams(streams);",
            "    grid::close_robotModel<double>(model);",
            "    return 0;",
            "}",
            "",
        ]
        lines += [f'extern "C" int mapped_{alg}(int num_timesteps) {{',  # the wrapper's choice by size, as rendered
                  f"    return {L.mapped_rule('num_timesteps', 'grid::LAYOUT_AUTO', 'double', ns='grid::')};",
                  "}", ""]
        info[alg] = (names, [p.shape for p in L.outputs], L.first_copied_batch())
    return "\n".join(lines), info


def ref_inputs(alg: str):
    return [p for p in algorithms()[alg].inputs(load(ROBOTS[0])) if p.kind == "param"]


def copies_out(L) -> list[str]:
    """The results of the gridData fields into ``out``: each output's n states after the last's."""
    lines, off = [], 0
    for p in L.outputs:
        field, size = L.emitter.grid_data_names().get(p.name, p.name), math.prod(p.shape)
        lines.append(f"    std::memcpy(out + size_t(n) * {off}, hd->h_{field}, sizeof(double) * n * {size});")
        off += size
    return lines


@pytest.fixture(scope="module", params=ROBOTS)
def host_layer(request):
    robot = load(request.param)
    algorithms = emitted()
    source, info = _wrapper(robot, algorithms)
    path, _ = buildcache.build(f"host-layer-{robot.name}", {"grid.cuh": generate(robot, algorithms), "host.cpp": source},
                               emulation_command("host.cpp"), "libhost_layer.so")
    return robot, ctypes.CDLL(str(path)), info


def test_every_host_wrapper_equals_the_reference_mapped_and_copied(host_layer, rng):
    robot, lib, info = host_layer
    assert {"inverse_dynamics", "crba", "minv", "aba", "forward_dynamics", "inverse_dynamics_gradient",
            "forward_dynamics_gradient", "forward_kinematics", "end_effector_pose",
            "end_effector_pose_gradient", "end_effector_pose_hessian", "frame_jacobian_time_variation",
            "operational_space_inertia"} <= set(info)
    ref = Reference(robot)
    for alg, (names, shapes, copied) in info.items():
        for n in (3, copied):
            q, qd, qdd = random_state(robot, rng, n)
            third = names[2] if len(names) > 2 else None  # qdd or tau (h_u), else none read
            u = qdd if third == "qdd" else rng.normal(size=(n, robot.nv))
            q_qd = np.ascontiguousarray(np.concatenate([q, qd], axis=1))
            flat = np.full(n * sum(math.prod(s) for s in shapes), np.nan)
            fn = getattr(lib, f"host_{alg}")
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            fn(n, q_qd.ctypes.data, np.ascontiguousarray(u).ctypes.data, flat.ctypes.data)
            bounds = np.cumsum([0, *(n * math.prod(s) for s in shapes)])
            outs = [flat[a:b].reshape(n, *s) for a, b, s in zip(bounds[:-1], bounds[1:], shapes)]
            inputs = {"q": q, "qd": qd, **({third: u} if third else {})}
            # every state written, but those the algorithm refuses (NaN: refusals_as_nan) where the reference
            # refuses them too (an operational-space inertia at a singular pose); the Reference on the first and
            # last few (a copied batch is thousands)
            marked = np.flatnonzero(~np.all([np.isfinite(o.reshape(n, -1)).all(axis=1) for o in outs], axis=0))
            assert not marked.size or algorithms()[alg].emitter.refusals_as_nan, \
                f"{robot.name} {alg} n={n}: states left unwritten"
            for s in marked:
                with pytest.raises(InputError):
                    getattr(ref, alg)(*[inputs[x][s] for x in names])
            pick = np.setdiff1d(np.r_[0:min(n, 8), max(n - 8, 0):n], marked)
            args = [inputs[x][pick] for x in names]
            what = f"{robot.name} {alg} host layer, {n} states ({'copy engine' if n >= copied else 'mapped'})"
            expected = getattr(ref, alg)(*args, **({"dt": 0.01} if "dt" in {p.name for p in ref_inputs(alg)} else {}))
            for out, exp in zip(outs, expected if len(outs) > 1 else (expected,)):
                if alg == "operational_space_inertia":  # an inverse (cond up to 1e7): its own tests' judge
                    judge_inertia(robot, inputs["q"][pick], out[pick], exp, np.float64, what)
                    continue
                assert_close(out[pick], exp, 1e-9, what)


def test_the_transfer_rule_in_the_header_is_the_rule_in_python(host_layer):
    """``grid_mapped_by_size`` (what the gridData wrappers and the C ABI call) decides as
    :func:`~grid_core.emit.layers.mapped_by_size` does, on both sides of each of its bounds; and each
    host wrapper's call of it, as :meth:`~grid_core.emit.layers.Layers.mapped_rule` renders it (the
    layout its batch resolves, the staging it would take), decides as ``Layers.mapped_by_size`` does,
    around the batches where the layout, the staging and the rule turn."""
    robot, lib, info = host_layer
    rule = lib.mapped_by_size
    rule.argtypes, rule.restype = [ctypes.c_size_t] * 3 + [ctypes.c_int] * 2, ctypes.c_int
    edges = {1, 2, 16, 64, 256, 1024, 9000, 81633, 81634}
    for b in (MAPPED_BLOCK_STATE_BYTES, MAPPED_STAGED_STATE_BYTES, MAPPED_ROW_BYTES):
        edges |= {MAPPED_SCATTERED_BATCH_BYTES // b, MAPPED_SCATTERED_BATCH_BYTES // b + 1}
    for ins in (7, 21, 55, 106):
        for out in (28, 72, MAPPED_ROW_BYTES, MAPPED_ROW_BYTES + 4, 1296, MAPPED_STAGED_STATE_BYTES + 4, 9800,
                    MAPPED_BLOCK_STATE_BYTES, MAPPED_BLOCK_STATE_BYTES + 4, 93312):
            for n in edges | {MAPPED_MAX_WORK // ins ** 2, MAPPED_MAX_WORK // ins ** 2 + 1}:
                for block, staged in ((True, False), (False, True), (False, False)):
                    assert bool(rule(n, ins, out, block, staged)) == mapped_by_size(n, ins, out, block, staged), \
                        (n, ins, out, block, staged)
    for alg, (_, _, copied) in info.items():
        L = Composer(robot, GenerateOptions()).layers(alg)
        wrapper = getattr(lib, f"mapped_{alg}")
        wrapper.argtypes, wrapper.restype = [ctypes.c_int], ctypes.c_int
        turns = {copied, MAPPED_STAGE_MIN_N, L.per_state_min_n() or 1, MAPPED_MAX_WORK // L.host_values_per_state() ** 2}
        for n in sorted(({m + d for m in turns for d in (-1, 0, 1)} | {1, 16, 256, 1024, 4096}) - {0}):
            assert bool(wrapper(n)) == L.mapped_by_size(n), (alg, n)


# H100, c2c26cd, float32 (benchmarks/results/2026-12-06_H100_c2c26cd-gradients.json; 2026-12-05_H100_b10591c-anchors
# for iiwa14 and the end-effector pose; others named), with copies, mapped / copy engine in us:
# (what, batch, input values a state, output values a state, block layout, staged, mapped faster)
MEASURED = [
    ("go2 dID N = 1024, per state: 327 / 135", 1024, 55, 2 * 18 ** 2, False, False, False),
    ("go2 dFD N = 1024, per state: 919 / 309", 1024, 55, 2 * 18 ** 2, False, False, False),
    ("iiwa14 dID N = 256, per state: 51 / 35", 256, 21, 2 * 7 ** 2, False, False, False),
    ("go2 end-effector poses N = 1024, per state: 113 / 32", 1024, 19, 64, False, False, False),
    ("g1 idsva_so N = 16, block: 1999 / 828", 16, 106, 4 * 35 ** 3, True, False, False),
    ("go2 idsva_so N = 16, block: 339 / 218", 16, 55, 4 * 18 ** 3, True, False, False),
    ("go2 idsva_so N = 256, block: 5482 / 808", 256, 55, 4 * 18 ** 3, True, False, False),
    ("atlas Minv N = 4096, per state (H200 fda5422): 382 / 336", 4096, 30, 30 ** 2, False, True, False),
    ("g1 Minv N = 1024, per state (H100 b10591c): 215 / 167", 1024, 36, 35 ** 2, False, True, False),
    ("go2 dID N = 256, block: 64 / 85", 256, 55, 2 * 18 ** 2, True, False, True),
    ("go2 dFD N = 256, block: 87 / 102", 256, 55, 2 * 18 ** 2, True, False, True),
    ("g1 dID N = 256, block: 202 / 210", 256, 106, 2 * 35 ** 2, True, False, True),
    ("g1 dFD N = 256, block: 462 / 489", 256, 106, 2 * 35 ** 2, True, False, True),
    ("go2 Minv N = 4096, per state staged (H200 b3cf4ce): 129 / 143", 4096, 19, 18 ** 2, False, True, True),
    ("g1 inverse dynamics N = 256, per state (H100 b10591c): 26 / 35", 256, 106, 35, False, False, True),
]


@pytest.mark.parametrize(("case", "n", "ins", "outs", "block", "staged", "mapped"), MEASURED, ids=[m[0] for m in MEASURED])
def test_the_transfer_rule_takes_the_faster_way_where_measured(case, n, ins, outs, block, staged, mapped):
    """The measurements the output bounds were set from: where mapped memory or the copy engine was
    the faster way for a batch, the rule (float32) picks it."""
    assert mapped_by_size(n, ins, outs * 4, block, staged) is mapped, case
