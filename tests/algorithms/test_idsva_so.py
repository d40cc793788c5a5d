"""Generated idsva_so equals the reference (proven against central differences of Pinocchio's
first derivatives in test_idsva_so_reference.py) on host emulation of the GPU code (every tier of
the block layout and the per-state layout) and on the CPU backend.

Each library holds idsva_so alone (it is not in the default set, Emitter.in_default_set: 25-40 s
of host compilation a robot, rung and precision here), so CI's sample is small: iiwa14 (a chain: every
triple of columns on one chain) at rung 0 and the deepest rung in both precisions, hyq (a fixed-base tree:
the structural zeros of separate legs) at rung 0, panda (a mimic finger: the relaxed cells
summed onto the mimicked joint's) at rung 0; solo12 (a free-flyer: six columns on one body) at
rung 0 (in the loop form now, 7720 cells: 105 s to build and run here, where its unrolled library
alone took 265 s to compile).
float64 at rel 1e-9 (the norm of the whole batch's tensor); float32 at rel 1e-4 of each state's
tensor norm: the tensors are polynomials in the state (no solve, no condition number to amplify
rounding), and on iiwa14 the worst of 64 random states measured 1.2e-6 .. 2.5e-6 across the four
tensors, both layouts (40x inside the bound).

Above LOOP_CELLS written cells the contractions are loops over baked tables (the contractions
option, 'auto'): atlas (30 dofs, 8814 cells), the humanoid of the sample, runs in that form at
rung 0 (its LITE and MINIMAL tiers on deeper rungs) in both precisions; iiwa14 with the loops forced
checks the form on a chain whose constants the unrolled form folds (the loops read them from the stored arrays).  On the
CPU backend the loop form (hyq with the loops forced; atlas under GRID_FULL_SWEEP=1) is held to the
reference and to central differences of Pinocchio's first derivatives.

GRID_FULL_SWEEP=1: every CODEGEN_ROBOTS robot (the five bundled ones and nine of example-robot-data:
the humanoids talos_reduced, 38 dofs, and simple_humanoid; the mimic robots panda, pr2, tiago_pro) at
every rung of the ladder forced in turn (the default target, the deepest rung, then the shared-memory
target of each rung no tier reached: tests/generated.py rung_targets; on iiwa14 rungs 1 and 2 cost
17.0 and 13.6 CPU s of host compilation) in both precisions, and on the CPU in both precisions.

The GPU (the ``gpu`` marker, ids ``gpu-...``): the same check on GPU_ROBOTS (iiwa14, hyq, atlas and g1,
the humanoids in the loop form) at the default target and the deepest rung, both precisions
(tests/generated.py gpu_rung_cases; every rung under GRID_FULL_SWEEP=1).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.errors import InputError
from grid_core.testing import assert_close, random_state
from tests.generated import CODEGEN_ROBOTS, FULL_SWEEP, gpu_rung_cases, library, rung_cases, rung_options

N = 4
TOL = {np.float64: 1e-9, np.float32: 1e-4}
BOTH = (np.float64, np.float32)
SHALLOW = ("rung0", "deepest-rung")
CI = {"iiwa14": SHALLOW, "hyq": ("rung0",), "erd:panda": ("rung0",), "atlas": ("rung0",), "erd:solo12": ("rung0",)}
"""CI's emulated builds (tests/generated.py rung_cases), as the module docstring says; every
CODEGEN_ROBOTS robot at every rung forced in turn in both precisions under GRID_FULL_SWEEP=1."""
F32 = {"iiwa14", "atlas"}
"""CI's robots checked in float32 too (an emulated library holds both precisions: no build more)."""
CPU_ROBOTS = CODEGEN_ROBOTS if FULL_SWEEP else ["iiwa14"]
LOOPS = {"algorithm_options": {"idsva_so": {"contractions": "loops"}}}


@functools.cache
def generated(kind: str, name: str, target: int | None, dtype, loops: bool = False):
    """idsva_so's library (tests/generated.py library: outputs start as NaN, a cell the kernel never
    writes fails), host-emulated or on the GPU."""
    return library(kind, name, ["idsva_so"], dtype, **rung_options(target), **(LOOPS if loops else {}))


def _states(robot, rng, n=N):
    q, qd, qdd = random_state(robot, rng, n)
    return q, qd, qdd, rng.normal(size=(n, robot.num_bodies, 6))


@pytest.mark.parametrize(("kind", "name", "target", "dtypes", "loops"), [
    *(pytest.param("emulated", *c.values, BOTH if FULL_SWEEP or c.values[0] in F32 else (np.float64,), False, id=c.id)
      for c in rung_cases("idsva_so", CI)),
    pytest.param("emulated", "iiwa14", None, BOTH, True, id="iiwa14-rung0-loops"),
    pytest.param("emulated", "iiwa14", 0, (np.float64,), True, id="iiwa14-deepest-rung-loops"),
    # the GPU (gpu marker): GPU_ROBOTS (atlas and g1 in the loop form) at both rungs, both precisions
    *(pytest.param("gpu", *c.values, BOTH, False, id=c.id, marks=c.marks) for c in gpu_rung_cases("idsva_so"))])
def test_idsva_so_emulated(kind, name, target, dtypes, loops, rng):
    robot = load(name)
    q, qd, qdd, f_ext = _states(robot, rng)
    ref = Reference(robot)
    for f in (None, f_ext):
        expected = ref.idsva_so(q, qd, qdd, f)
        for dtype in dtypes:
            b = generated(kind, name, target, dtype, loops)
            for layout, tier in [("block", 0), ("block", 1), ("block", 2), ("per_state", 0)]:
                got = b.with_launch(layout=layout, tier=tier).idsva_so(q, qd, qdd, f)
                what = f"{name} {np.dtype(dtype).name} {layout} tier {tier} target={target} f_ext={f is not None}"
                for port, x, e in zip(("d2tau_dq2", "d2tau_dqd2", "d2tau_dqdqd", "dM_dq"), got, expected):
                    assert x.shape == (N, robot.nv, robot.nv, robot.nv)
                    if dtype is np.float32:  # each state against its own tensor's norm
                        for k in range(N):
                            assert_close(x[k], e[k], TOL[dtype], f"{what} {port} state {k}")
                    else:
                        assert_close(x, e, TOL[dtype], f"{what} {port}")


@pytest.mark.parametrize("name", CPU_ROBOTS)
def test_idsva_so_cpu_handle(name, rng):
    """The CPU backend (the per-state code, compiled for the host) on iiwa14 (every CODEGEN_ROBOTS robot,
    float32 too, under GRID_FULL_SWEEP=1), a state batch that is not a multiple of the worker count,
    and a gravity of its own."""
    robot = load(name)
    q, qd, qdd, f_ext = _states(robot, rng, 37)
    g = np.array([0.3, -1.2, -9.0])
    expected = Reference(robot).idsva_so(q, qd, qdd, f_ext, gravity=g)
    for dtype in BOTH if FULL_SWEEP else (np.float64,):
        got = cpu_handle(name, dtype).idsva_so(q, qd, qdd, f_ext, gravity=g)
        for port, x, e in zip(("d2tau_dq2", "d2tau_dqd2", "d2tau_dqdqd", "dM_dq"), got, expected):
            what = f"{name} cpu {np.dtype(dtype).name} {port}"
            if dtype is np.float64:
                assert_close(x, e, TOL[dtype], what)
            else:  # each state against its own tensor's norm, as the emulated check
                for k in range(len(x)):
                    assert_close(x[k], e[k], TOL[dtype], f"{what} state {k}")


@functools.cache
def cpu_handle(name: str, dtype=np.float64, loops: bool = False):
    from grid_core import CpuHandle

    handle = CpuHandle(load(name), ["idsva_so"], dtype, threads=2, quiet=True, **(LOOPS if loops else {}))
    handle.set_poison(True)
    return handle


LOOP_FORM_CPU = ("atlas", False) if FULL_SWEEP else ("hyq", True)
"""The CPU checks of the loop form, ``(robot, whether the loops are forced)``: atlas (30 dofs: the loops by
its cells) under GRID_FULL_SWEEP=1; in CI hyq with the loops forced (a tree of four legs, its tensors
mostly structural zeros as a humanoid's): atlas's CPU library of idsva_so took 307 CPU s of CI's
compilation, and its loop form runs in emulation there at both rungs and precisions."""


def test_idsva_so_cpu_handle_loop_form(rng):
    """The loop form on the CPU backend (LOOP_FORM_CPU) equals the reference, and central differences
    of Pinocchio's first derivatives (computeRNEADerivatives along the tangent of q and along qd, crba
    along q: the reference test's steps and tolerance, see test_idsva_so_reference.py)."""
    from grid_core.testing import central_fd, tangent_fd
    from tests.algorithms.second_order_support import pin_crba, pin_rnea_derivatives

    name, loops = LOOP_FORM_CPU
    robot = load(name)
    cpu = cpu_handle(name, loops=loops)
    q, qd, qdd, f_ext = _states(robot, rng, 9)  # not a multiple of the SIMD lanes
    got = cpu.idsva_so(q, qd, qdd, f_ext)
    for x, e in zip(got, Reference(robot).idsva_so(q, qd, qdd, f_ext)):
        assert_close(x, e, 1e-9, f"{name} cpu")
    d2q, d2qd, dqdqd, dM = (x[0] for x in got)
    q, qd, qdd, f = q[0], qd[0], qdd[0], f_ext[0]
    by_q = tangent_fd(robot, lambda x: np.stack(pin_rnea_derivatives(robot, x, qd, qdd, f)), q, 1e-5)
    by_qd = central_fd(lambda x: np.stack(pin_rnea_derivatives(robot, q, x, qdd, f)), qd, 0.1)
    assert_close(d2q, by_q[0], 1e-6, f"{name}: d2tau_dq2 vs Pinocchio")
    assert_close(d2qd, by_qd[1], 1e-6, f"{name}: d2tau_dqd2 vs Pinocchio")
    assert_close(dqdqd, by_qd[0], 1e-6, f"{name}: d2tau_dqdqd vs Pinocchio")
    assert_close(dM, tangent_fd(robot, lambda x: pin_crba(robot, x), q, 1e-5), 1e-6, f"{name}: dM_dq vs Pinocchio")


def _lines_of(x: np.ndarray) -> np.ndarray:
    """Each element's 64-byte cache line (its address over 64) in a C-contiguous array."""
    return (x.ctypes.data + np.arange(x.size) * x.itemsize).reshape(x.shape) // 64


KEEP_ZEROS_CASES = [(*LOOP_FORM_CPU, np.float64), ("hyq", True, np.float32), ("iiwa14", True, np.float64)]
"""The keep_zeros checks, ``(robot, whether the loops are forced, precision)``: LOOP_FORM_CPU; hyq in
float32 (eight lanes and 16 values a line: each line's cells out of the image lane by lane, not by
the 4x4 transposes of four double lanes); iiwa14 (343 values a row, odd: the rows of a group at
different places in their lines, each row written by its own lines)."""


@pytest.mark.parametrize("name, loops, dtype", KEEP_ZEROS_CASES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_keep_zeros_writes_the_lines_of_the_computed_cells_alone(name, loops, dtype, rng):
    """``keep_zeros=True`` with ``out=`` on the CPU backend (the loop form, two worker threads, poison
    on): the 64-byte lines holding a computed cell are written, bit for bit those of a plain call, and
    every other line keeps what ``out=`` held (a sentinel), the same cells for every sentinel, each a
    zero of the plain call; from zeros the whole result equals the reference.  The arrays start 1, 2
    and 3 values into a line in turn (numpy's large arrays start 16 bytes into a page): each row's
    partial first and last lines too.  Without ``out=`` it is refused."""
    robot = load(name)
    cpu = cpu_handle(name, dtype, loops=loops)
    q, qd, qdd, f_ext = _states(robot, rng, 9)
    plain = cpu.idsva_so(q, qd, qdd, f_ext)
    per_line = 64 // np.dtype(dtype).itemsize
    left = []
    for sentinel, shift in ((7.0, 1), (-3.5, 2), (2.25, 3)):
        out = []
        for x in plain:  # x.size values starting `shift` values past a 64-byte boundary
            buf = np.empty(x.size + 2 * per_line, dtype)
            start = (-(buf.ctypes.data // buf.itemsize) % per_line + shift) % per_line
            out.append(buf[start:start + x.size].reshape(x.shape))
            out[-1][...] = sentinel
            assert out[-1].ctypes.data % 64 == buf.itemsize * shift
        out = tuple(out)
        assert cpu.idsva_so(q, qd, qdd, f_ext, out=out, keep_zeros=True) is out
        kept = [x == dtype(sentinel) for x in out]
        for x, p, k in zip(out, plain, kept):
            assert np.array_equal(x[~k], p[~k])
            assert np.all(p[k] == 0)
            lines = _lines_of(x)
            for s in range(x.shape[0]):  # within a state's row, a line is written whole or left whole
                written = np.unique(lines[s][~k[s]])
                assert not np.isin(lines[s][k[s]], written).any()
            if x[0].nbytes % 64 == 0:  # every row at the same place in its lines: the same lines left
                assert np.all(k == k[0])
        left.append(kept)
    # structural zeros whose lines the call left alone: most of a tree of legs' tensors (hyq with its
    # loops forced: 78-83% of each tensor's cells), a few lines of a chain's (iiwa14: 1% of dM_dq's cells)
    assert sum(k.sum() for k in left[0]) > (0.5 if name == "hyq" else 0) * sum(x.size for x in plain)
    zeros = tuple(np.zeros(x.shape, dtype) for x in plain)
    cpu.idsva_so(q, qd, qdd, f_ext, out=zeros, keep_zeros=True)
    for x, e in zip(zeros, Reference(robot).idsva_so(q, qd, qdd, f_ext)):
        if dtype is np.float64:
            assert_close(x, e, TOL[dtype], f"{name} cpu keep_zeros from zeros")
        else:
            for k in range(len(x)):
                assert_close(x[k], e[k], TOL[dtype], f"{name} cpu float32 keep_zeros from zeros, state {k}")
    with pytest.raises(InputError, match="keep_zeros=True needs out="):
        cpu.idsva_so(q, qd, qdd, f_ext, keep_zeros=True)


def test_contraction_form_is_chosen_by_the_cells_and_the_option():
    """Above LOOP_CELLS written cells the loops (go2, atlas, g1), below the unrolled form (iiwa14, hyq,
    panda); the option forces either; a mimic robot's summed cells have no loop form yet."""
    import grid_core
    from grid_algorithms.idsva_so import LOOP_CELLS, Cells, contraction_form
    from grid_core.errors import CodegenError

    for name, form in [("iiwa14", "unrolled"), ("hyq", "unrolled"), ("erd:panda", "unrolled"), ("go2", "loops"),
                       ("atlas", "loops"), ("g1", "loops")]:
        robot = load(name)
        cells = Cells(robot)
        assert contraction_form(robot, cells, "auto") == form, name
        assert (len(cells.terms) > LOOP_CELLS) == (name in ("go2", "atlas", "g1"))
        assert contraction_form(robot, cells, "unrolled") == "unrolled"
    assert contraction_form(load("iiwa14"), Cells(load("iiwa14")), "loops") == "loops"
    with pytest.raises(CodegenError, match="mimic"):
        contraction_form(load("erd:panda"), Cells(load("erd:panda")), "loops")
    header = grid_core.generate(load("g1"), ["idsva_so"])

    def function(name):  # its text, up to its closing brace at column 0
        start = header.index(f" {name}(")
        return header[start:header.index("\n}\n", start)]

    # the loops' code is of one size for every robot: what is left grows with the bodies as the
    # first-order gradient's own per-state code does (g1's unrolled idsva_so_state was 6.4 MB, 8x it)
    assert "IDSVA_SO_CELL[e]" in function("idsva_so_state")
    assert len(function("idsva_so_state")) < len(function("inverse_dynamics_gradient_state"))
    assert len(header) < 4_500_000  # the unrolled form's was 16.4 MB


def test_structural_zeros_are_the_triples_off_every_chain():
    """hyq: a cell is written by a contraction exactly where its three columns lie on one chain of
    the tree (else it is a structural zero, stored once); on the chain iiwa14 none is zero."""
    from grid_algorithms.idsva_so import Cells

    for name in ("hyq", "iiwa14"):
        robot = load(name)
        topo = robot.topology
        body = {b.v_index: b.index for b in robot.bodies}
        nv = robot.nv

        def on_chain(*cols):
            bs = sorted({body[c] for c in cols}, key=lambda b: topo.depth[b])
            return all(a in topo.support[b] for a, b in zip(bs, bs[1:]))

        chains = {(i * nv + j) * nv + k for i in range(nv) for j in range(nv) for k in range(nv) if on_chain(i, j, k)}
        cells = Cells(robot)
        for t in range(4):
            written = {c for (tt, c) in cells.terms if tt == t}
            assert written <= chains
            zeros = {c for a, b in cells.zeros(t) for c in range(a, b)}
            assert zeros == set(range(nv ** 3)) - written
        assert (name == "iiwa14") == (len(chains) == nv ** 3)


def test_left_out_of_the_default_set_built_when_named():
    """A header or library built without a list of algorithms leaves idsva_so out (even in the loop
    form its library is the largest of a robot's: atlas's CPU build 129 CPU s); named, it comes with
    what it composes."""
    from grid_core.composer import resolve_algorithms

    default = [a.name for a in resolve_algorithms(None)]
    assert "idsva_so" not in default and "inverse_dynamics_gradient" in default
    assert [a.name for a in resolve_algorithms(["idsva_so"])] == ["inverse_dynamics", "inverse_dynamics_gradient",
                                                                  "idsva_so"]
