"""Generated operational-space inertias equal the reference (proven against Pinocchio's
computeMinverse and getFrameJacobian in test_operational_space_inertia_reference.py) on host
emulation (CI; the GPU under the `gpu` marker), both layouts, every tier, the deepest spill rung
forced, float64 and float32:

* the default (leaf) frames of CI's sample of robots (tests/generated.py SAMPLE_ROBOTS; every
  CODEGEN_ROBOTS robot with GRID_FULL_SWEEP=1) over all six rows (the shared library);
  where the reference refuses a frame (hyq's lower legs on the knee axis, the two-link arm's tip,
  atlas' head, pr2's cameras, tiago's wheels) every launch raises the reference's InputError, word
  for word;
* the leaf frames the reference accepts, on the robots whose default holds refused ones;
* the linear rows, chosen at generation time (the algorithm option ``rows``) and at run time
  (``rows="linear"`` of a call: the library generated for them);
* a singular pose (a straight arm) refused at run time, in a batch of regular states; and the run-time
  rule against the reference's threshold, a factor 2 either side of it, near the elbow's singularity.

Lambda is the inverse of J Minv J^T, whose condition number reaches 1e5 over all six rows (the
mixed units of force and moment) and 1e7 near a singular pose: it is judged as Minv's solves are
(tests.generated.assert_solves, with A = the reference's J Minv J^T): the forward error against the
reference at rel 1e-9 (float64) and 1e-4 (float32) wherever cond(A) eps allows it, LAPACK's
backward error ratio below 30 elsewhere, A's norm in it joined by the error any code computing A
carries (Minv's forward error, up to cond(M) times its backward error, through the products: on
ur5 near a wrist singularity, cond(A) 1e9 and cond(M) 300, the ratio against A alone reached 500
while the generated A and the reference's differ by that much).  The generated code against Pinocchio directly on a fixed
arm, a floating quadruped and a mimic arm (forward at rel 1e-9 where cond <= 1e6, as the reference
test judges the reference)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.composer import generate
from grid_core.errors import InputError
from grid_core.testing import Emulated, assert_close, random_state
from grid_algorithms.operational_space_inertia import RANK_TOL
from tests.algorithms.test_operational_space_inertia_reference import condition, pin_projected_inverse_inertia
from tests.generated import BACKENDS, assert_solves, emulated, launches, launches_of, robot_cases

ALG = "operational_space_inertia"
N = 4
K = {"linear": 3, "all": 6}
DTYPES = (np.float64, np.float32)
REFUSED_LEAVES = ["atlas", "erd:pr2", "erd:tiago_pro"]
"""Robots whose default (leaf) frames hold frames the reference refuses over all six rows, and others."""
LINEAR = ["iiwa14", "erd:panda", "erd:solo12", "erd:double_pendulum_continuous"]
"""The linear rows' sample: a fixed arm, a mimic arm, a floating quadruped, an arm with too few joints."""


def handle(kind: str, robot, dtype, spill: bool, **options):
    """The generated code of operational_space_inertia alone (and what it composes) on one backend."""
    opts = {**options, **({"target_shared_mem_bytes": 0} if spill else {})}
    if kind == "gpu":
        from grid_core.runtime import RobotHandle

        b = RobotHandle(robot, [ALG], dtype, quiet=True, **opts)
    else:
        b = Emulated(robot, [ALG], dtype, quiet=True, **opts)
    b.set_poison(True)  # outputs start as NaN: an element the kernel never writes fails (refused frames aside)
    return b


def projected(robot, q, frames, rows: str) -> tuple[np.ndarray, np.ndarray]:
    """The reference's ``A = J Minv J^T`` of each frame over ``rows``, ``(N, n_frames, k, k)``, and
    the bound on its computation error (units of eps) that any code computing A from q carries:
    Minv's forward error, up to cond(M) times its backward error, through the products,
    ``cond(M) |J| |Minv| |J|^T``."""
    ref = Reference(robot)
    J, Minv = ref.end_effector_pose_gradient(q, frames)[:, :, :K[rows]], ref.minv(q)
    cond = np.linalg.cond(Minv)[:, None, None, None]
    return (np.einsum("nfrc,ncd,nfsd->nfrs", J, Minv, J),
            cond * np.einsum("nfrc,ncd,nfsd->nfrs", abs(J), abs(Minv), abs(J)))


def check(robot, q, runs, frames=None, rows: str = "all", call: dict | None = None) -> bool:
    """Each ``(label, method, dtype)`` of ``runs`` on ``q`` (``call``: its keyword arguments) against
    the reference's ``frames`` (default: the leaf frames) over ``rows``: its InputError word for word
    where it refuses (False), else Lambda judged by :func:`tests.generated.assert_solves` (True)."""
    call = call or {}
    try:
        expected = Reference(robot).operational_space_inertia(q, frames, rows=rows)
    except InputError as exc:
        for label, fn, dtype in runs:
            with pytest.raises(InputError) as info:
                fn(q, **call)
            assert str(info.value) == str(exc), f"{label}: {info.value}"
        return False
    for label, fn, dtype in runs:
        judge(robot, q, fn(q, **call), expected, dtype, f"{robot.name} {ALG} rows={rows} {label}", frames, rows)
    return True


def judge(robot, q, out, expected, dtype, what: str, frames=None, rows: str = "all") -> None:
    """``out`` (the generated code's Lambda at ``q``, one state or a batch) against the reference's
    ``expected``: symmetric, and solving ``A Lambda = I`` with ``A`` the reference's J Minv J^T
    (:func:`tests.generated.assert_solves`: forward where cond(A) eps(dtype) allows, else backward)."""
    k = K[rows]
    A, A_error = projected(robot, np.atleast_2d(q), robot.leaf_frames() if frames is None else frames, rows)
    eye = np.broadcast_to(np.eye(k), (A.shape[0] * A.shape[1], k, k))
    assert out.shape == expected.shape and out.dtype == dtype, what
    assert_close(out, np.swapaxes(out, -1, -2), 0.0, f"{what}: not symmetric")
    assert_solves(out.reshape(-1, k, k), expected.reshape(-1, k, k), A.reshape(-1, k, k), eye, dtype, what,
                  M_error=A_error.reshape(-1, k, k))


def accepts(robot, q, frame, rows: str = "all") -> bool:
    """Whether the reference gives ``frame`` an operational-space inertia at every state of ``q``."""
    try:
        Reference(robot).operational_space_inertia(q, [frame], rows=rows)
    except InputError:
        return False
    return True


def every(b, dtype) -> list:
    return [(f"{np.dtype(dtype).name} {what}", fn, dtype) for what, fn in launches_of(b, ALG)]


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases())
def test_operational_space_inertia(kind, name, spill, rng):
    robot = load(name)
    q = random_state(robot, rng, N)[0]
    runs = [(f"{np.dtype(dtype).name} {what}", fn, dtype) for dtype in DTYPES
            for what, fn in launches(kind, name, spill, dtype, ALG)]
    accepted = check(robot, q, runs)
    assert accepted == (name not in ("hyq", "erd:double_pendulum_continuous", *REFUSED_LEAVES)), name


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases(robots=REFUSED_LEAVES))
def test_the_leaf_frames_with_an_inverse(kind, name, spill, rng):
    robot = load(name)
    q = random_state(robot, rng, N)[0]
    leaves = robot.leaf_frames()
    good = [f.name for f in leaves if accepts(robot, q, f)]
    assert 0 < len(good) < len(leaves), good
    runs = [x for dtype in DTYPES for x in every(handle(kind, robot, dtype, spill, frames=good), dtype)]
    assert check(robot, q, runs, good)


@pytest.mark.parametrize(("kind", "name", "spill"), robot_cases(robots=LINEAR))
def test_the_linear_rows(kind, name, spill, rng):
    """Chosen at generation time (the algorithm option); at run time in the singular pose's test."""
    robot = load(name)
    q = random_state(robot, rng, N)[0]
    built = {"algorithm_options": {ALG: {"rows": "linear"}}}
    runs = [x for dtype in DTYPES for x in every(handle(kind, robot, dtype, spill, **built), dtype)]
    accepted = check(robot, q, runs, rows="linear")
    assert accepted == (name != "erd:double_pendulum_continuous"), name


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_singular_pose_is_refused_at_run_time(kind, rng):
    """iiwa14 straight up (q = 0): its tool frame moves in one direction (rank 1 of 3 linear rows,
    3 of 6), a configuration's singularity, not the frame's: the generated code's own test refuses it,
    in a batch of regular states, on every launch, over either rows chosen at run time (rows=)."""
    robot = load("iiwa14")
    q = random_state(robot, rng, 3)[0]
    q[1] = 0.0
    for rows in K:
        with pytest.raises(InputError, match=rf"rank \d < {K[rows]} "):
            Reference(robot).operational_space_inertia(q, rows=rows)
        runs = [x for dtype in DTYPES for x in every(handle(kind, robot, dtype, False), dtype)]
        assert not check(robot, q, runs, rows=rows, call={"rows": rows})


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_run_time_rule_is_the_reference_s(kind, rng):
    """Near iiwa14's elbow singularity (q[3] -> 0, the arm straight: rho, the reference's smallest
    eigenvalue of J Minv J^T over the larger of its largest and ||Minv||_2, goes as q[3]^2): a state
    under the reference's threshold RANK_TOL by a factor 2 is refused by the generated code as by the
    reference, one over it by a factor 2 is not (only what the reference refuses is refused; the
    run-time bounds' slack, measured within 1.6, lies between).  float64: float32's rounding (1e-7 of
    J Minv J^T) cannot resolve such a state."""
    robot = load("iiwa14")
    ref, q0 = Reference(robot), random_state(robot, rng)[0]

    def state(t):
        q = q0.copy()
        q[3] = t
        return q

    def rho(t):
        q = state(t)
        e = np.linalg.eigvalsh(projected(robot, q[None], robot.leaf_frames(), "all")[0][0, 0])
        return e[0] / max(e[-1], np.linalg.norm(ref.minv(q), 2))

    runs = [(what, fn, np.float64) for what, fn in launches(kind, "iiwa14", False, np.float64, ALG)]
    for factor, refused in ((0.5, True), (2.0, False)):
        lo, hi = -9.0, -1.0  # log10 q[3]: rho rises with it
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if rho(10 ** mid) < factor * RANK_TOL else (lo, mid)
        q = state(10 ** hi)[None]
        assert abs(rho(10 ** hi) / (factor * RANK_TOL) - 1) < 1e-3
        assert check(robot, q, runs) is not refused, f"rho = {factor} RANK_TOL"


@pytest.mark.parametrize("name", ["iiwa14", "go2", "erd:panda"])
def test_the_generated_code_against_pinocchio(name, rng):
    robot = load(name)
    b = emulated(name, False)
    leaves = list(robot.leaf_frames())
    for q in random_state(robot, rng, N)[0]:
        A, _ = pin_projected_inverse_inertia(robot, q, leaves, "all")
        for L, a, f in zip(b.operational_space_inertia(q), A, leaves):
            what = f"{name}: frame {f.name}, cond {condition(a):.1e}"
            if condition(a) <= 1e6:
                assert_close(L, np.linalg.inv(a), 1e-9, what)
            else:  # near a singular pose: the equation, as the reference test judges it
                backward = np.linalg.norm(a @ L - np.eye(6)) / (np.linalg.norm(a) * np.linalg.norm(L))
                assert backward <= 1e-9, f"{what}: backward error {backward:.1e}"


def test_the_rows_and_the_refused_frames_are_fixed_at_generation_time():
    robot = load("iiwa14")
    header = generate(robot, [ALG], algorithm_options={ALG: {"rows": "linear", "p1": "bodies"}})
    assert "// Rows: linear (k = 3).  Sweep form: bodies." in header  # the option port beside the emitter's knob
    assert "void operational_space_inertia_invert(const T *A, T *Lambda, const T minv_norm)" in header
    assert "OPERATIONAL_SPACE_INERTIA_CELL_ROW[6] = {0, 0, 0, 1, 1, 2};" in header
    assert header != generate(robot, [ALG]) and "// Rows: all (k = 6)." in generate(robot, [ALG])
    with pytest.raises(InputError, match=r"argument 'rows' must be one of 'linear', 'all', got 'angular'"):
        generate(robot, [ALG], algorithm_options={ALG: {"rows": "angular"}})
    with pytest.raises(InputError, match=r"argument 'rows' must be one of 'linear', 'all', got 'angular'"):
        Emulated(robot, [ALG], quiet=True).operational_space_inertia(np.zeros(robot.nq), rows="angular")
    # hyq's lower legs sit on their knee axes: refused at every configuration, NaN, nothing computed
    hyq = generate(load("hyq"), [ALG], algorithm_options={ALG: {"rows": "linear"}})
    assert "// Refused everywhere (NaN): lf_lowerleg, lh_lowerleg, rf_lowerleg, rh_lowerleg." in hyq
    inner = hyq[hyq.index("void operational_space_inertia_inner"):hyq.index("void operational_space_inertia_device")]
    assert "T(NAN)" in inner and "minv_inner" not in inner and "OPERATIONAL_SPACE_INERTIA_FIRST" not in hyq
