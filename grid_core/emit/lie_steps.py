"""The configuration space's Lie-group math as device functions: the SE(3) exponential of a
free-flyer's ``[p; quat]`` and the derivatives of ``q (+) v`` (:mod:`grid_core.model.lie`, the
float64 definitions these follow).

A header carries them once, when an algorithm it emits declares them
(:attr:`~grid_core.emit.emitter.Emitter.shared_helpers`, ``"lie"``): an algorithm that moves a
configuration by a free-flyer's twist, and one that differentiates that move, call the same
functions.  Scalar functions on ``T`` (one state, both layouts; the so(3) coefficients by their
series below ``|w| = 1``, where the closed forms cancel), and in the CPU build their lane-by-lane
form for the per-state code's ``grid_lanes`` (a branch per lane: once per free-flyer and state).
"""

from __future__ import annotations

import math

from ..model import JointType, Robot
from . import lane_cells
from . import nodes as n

SERIES_TERMS = 12
"""Terms of each so(3) coefficient's series below ``|w| = 1`` (as the reference: the 12th is below 1e-30)."""


def _series(denominator) -> str:
    """Horner form in ``t2`` of ``sum_n (-1)^n t2^n / denominator(n)``."""
    coef = [(-1) ** k / denominator(k) for k in range(SERIES_TERMS)]
    out = f"T({coef[-1]!r})"
    for c in reversed(coef[:-1]):
        out = f"T({c!r}) + t2 * ({out})"
    return out


def _coefficients() -> n.Function:
    f = math.factorial
    series = [_series(lambda k: f(2 * k + 2)), _series(lambda k: f(2 * k + 3)), _series(lambda k: f(2 * k + 4)),
              _series(lambda k: f(2 * k + 5) / (k + 1))]
    return n.Function(
        "__host__ __device__ inline void grid_so3_coefficients(const T t, T *k)",
        [n.Stmt("const T t2 = t * t"),
         n.Block("if (t < T(1))", [n.Stmt(f"k[{i}] = {s}") for i, s in enumerate(series)]),
         n.Block("else", [
             n.Stmt("T s, c"),
             n.Stmt("grid_sincos<T>(t, &s, &c)"),
             n.Stmt("k[0] = (T(1) - c) / t2"),
             n.Stmt("k[1] = (t - s) / (t2 * t)"),
             n.Stmt("k[2] = (t2 + T(2) * c - T(2)) / (T(2) * t2 * t2)"),
             n.Stmt("k[3] = (T(2) * t - T(3) * s + t * c) / (T(2) * t2 * t2 * t)")])],
        template="template <typename T>")


_CROSS = n.Function(
    "__host__ __device__ inline void grid_cross3(T *out, const T *a, const T *b)",
    [n.Stmt("out[0] = a[1] * b[2] - a[2] * b[1]"),
     n.Stmt("out[1] = a[2] * b[0] - a[0] * b[2]"),
     n.Stmt("out[2] = a[0] * b[1] - a[1] * b[0]")],
    template="template <typename T>")

_SKEW = n.Function(
    "__host__ __device__ inline void grid_skew3(T *S, const T *a)",
    [n.Stmt("S[0] = T(0)"), n.Stmt("S[1] = -a[2]"), n.Stmt("S[2] = a[1]"),
     n.Stmt("S[3] = a[2]"), n.Stmt("S[4] = T(0)"), n.Stmt("S[5] = -a[0]"),
     n.Stmt("S[6] = -a[1]"), n.Stmt("S[7] = a[0]"), n.Stmt("S[8] = T(0)")],
    template="template <typename T>")

_MUL = n.Function(
    "__host__ __device__ inline void grid_mul3(T *C, const T *A, const T *B)",
    [n.For("int i = 0", "i < 3", "++i", [n.For("int j = 0", "j < 3", "++j", [
        n.Stmt("C[3 * i + j] = A[3 * i] * B[j] + A[3 * i + 1] * B[3 + j] + A[3 * i + 2] * B[6 + j]")])])],
    template="template <typename T>")

def _twist() -> list:
    """A function's start on twist ``xi``: its parts, ``t = |w|`` and the so(3) coefficients ``k``."""
    return [n.Stmt("const T *rho = xi, *w = xi + 3"),
            n.Stmt("const T t = grid_sqrt<T>(w[0] * w[0] + w[1] * w[1] + w[2] * w[2])"),
            n.Stmt("T k[4]"),
            n.Stmt("grid_so3_coefficients<T>(t, k)")]


_EXP6 = n.Function(
    "__host__ __device__ inline void grid_exp6_xyzquat(T *out, const T *x, const T *xi)",
    [*_twist(),
     n.Comment("u = V(w) rho = rho + a w x rho + b w x (w x rho)"),
     n.Stmt("T wr[3], wwr[3], u[3]"),
     n.Stmt("grid_cross3<T>(wr, w, rho)"),
     n.Stmt("grid_cross3<T>(wwr, w, wr)"),
     n.For("int i = 0", "i < 3", "++i", [n.Stmt("u[i] = rho[i] + k[0] * wr[i] + k[1] * wwr[i]")]),
     n.Comment("the base's orientation, normalised; p + R u (R u = u + 2 qw (qv x u) + 2 qv x (qv x u))"),
     n.Stmt("const T qn = T(1) / grid_sqrt<T>(x[3] * x[3] + x[4] * x[4] + x[5] * x[5] + x[6] * x[6])"),
     n.Stmt("const T qv[3] = {x[3] * qn, x[4] * qn, x[5] * qn}, qw = x[6] * qn"),
     n.Stmt("T c1[3], c2[3]"),
     n.Stmt("grid_cross3<T>(c1, qv, u)"),
     n.Stmt("grid_cross3<T>(c2, qv, c1)"),
     n.For("int i = 0", "i < 3", "++i", [n.Stmt("out[i] = x[i] + u[i] + T(2) * (qw * c1[i] + c2[i])")]),
     n.Comment("quat (x) [w sin(t/2)/t; cos(t/2)], normalised, on the side of quat"),
     n.Stmt("T s, c"),
     n.Stmt("grid_sincos<T>(T(0.5) * t, &s, &c)"),
     n.Stmt("const T h = t > T(0) ? s / t : T(0.5)"),
     n.Stmt("const T dx = w[0] * h, dy = w[1] * h, dz = w[2] * h"),
     n.Stmt("T r[4] = {qw * dx + qv[0] * c + qv[1] * dz - qv[2] * dy, qw * dy - qv[0] * dz + qv[1] * c + qv[2] * dx,\n"
            "         qw * dz + qv[0] * dy - qv[1] * dx + qv[2] * c, qw * c - qv[0] * dx - qv[1] * dy - qv[2] * dz}"),
     n.Stmt("const T rn = T(1) / grid_sqrt<T>(r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + r[3] * r[3])"),
     n.Stmt("const T sign = r[0] * qv[0] + r[1] * qv[1] + r[2] * qv[2] + r[3] * qw < T(0) ? -rn : rn"),
     n.For("int i = 0", "i < 4", "++i", [n.Stmt("out[3 + i] = sign * r[i]")])],
    template="template <typename T>")

_DEXP6 = n.Function(
    "__host__ __device__ inline void grid_dintegrate6(T *Dq, T *Dv, const T *xi)",
    [n.Comment("Dq = Ad(exp6(xi)^-1), Dv = Jr(xi) = Jl(-xi), 6 x 6 row-major, [linear; angular]"),
     *_twist(),
     n.Stmt("T P[9], R[9], P2[9], J3[9], E[9], PR[9], RP[9], PRP[9], PPR[9], RPP[9], PRPP[9], PPRP[9]"),
     n.Comment("E = exp3(w) = I + (sin t / t) [w] + a [w]^2, sin t / t = 1 - b t^2"),
     n.Stmt("grid_skew3<T>(P, w)"),
     n.Stmt("grid_mul3<T>(P2, P, P)"),
     n.Stmt("const T sinc = T(1) - k[1] * t * t"),
     n.For("int i = 0", "i < 9", "++i", [n.Stmt("const T I = (i % 4 == 0) ? T(1) : T(0)"),
                                         n.Stmt("E[i] = I + sinc * P[i] + k[0] * P2[i]"),
                                         n.Stmt("J3[i] = I - k[0] * P[i] + k[1] * P2[i]")]),
     n.Comment("p = V(w) rho (V = J3 at +w: I + a P + b P^2)"),
     n.Stmt("T p[3]"),
     n.For("int i = 0", "i < 3", "++i", [n.Stmt(
         "p[i] = rho[i] + k[0] * (P[3 * i] * rho[0] + P[3 * i + 1] * rho[1] + P[3 * i + 2] * rho[2])\n"
         "     + k[1] * (P2[3 * i] * rho[0] + P2[3 * i + 1] * rho[1] + P2[3 * i + 2] * rho[2])")]),
     n.Comment("Jl(-xi): the same blocks at -rho, -w: J3 = I - a P + b P^2, Q with R = [-rho], P = [-w]"),
     n.Stmt("T mrho[3] = {-rho[0], -rho[1], -rho[2]}, mw[3] = {-w[0], -w[1], -w[2]}"),
     n.Stmt("grid_skew3<T>(P, mw)"),
     n.Stmt("grid_skew3<T>(R, mrho)"),
     n.Stmt("grid_mul3<T>(PR, P, R)"), n.Stmt("grid_mul3<T>(RP, R, P)"), n.Stmt("grid_mul3<T>(PRP, PR, P)"),
     n.Stmt("grid_mul3<T>(PPR, P, PR)"), n.Stmt("grid_mul3<T>(RPP, RP, P)"), n.Stmt("grid_mul3<T>(PRPP, PRP, P)"),
     n.Stmt("grid_mul3<T>(PPRP, P, PRP)"),
     n.For("int i = 0", "i < 3", "++i", [n.For("int j = 0", "j < 3", "++j", [
         n.Stmt("const int e = 3 * i + j"),
         n.Stmt("const T Et = E[3 * j + i]"),
         n.Comment("Ad(exp^-1) = [E^T, -E^T [p]x; 0, E^T]; -E^T [p]x [row i, col j] = -sum_m E[m][i] [p]x[m][j]"),
         n.Stmt("T ep = T(0)"),
         n.Stmt("ep -= E[i] * (j == 0 ? T(0) : j == 1 ? -p[2] : p[1])"),
         n.Stmt("ep -= E[3 + i] * (j == 0 ? p[2] : j == 1 ? T(0) : -p[0])"),
         n.Stmt("ep -= E[6 + i] * (j == 0 ? -p[1] : j == 1 ? p[0] : T(0))"),
         n.Stmt("Dq[6 * i + j] = Et"), n.Stmt("Dq[6 * (i + 3) + j + 3] = Et"), n.Stmt("Dq[6 * (i + 3) + j] = T(0)"),
         n.Stmt("Dq[6 * i + j + 3] = ep"),
         n.Stmt("Dv[6 * i + j] = J3[e]"), n.Stmt("Dv[6 * (i + 3) + j + 3] = J3[e]"), n.Stmt("Dv[6 * (i + 3) + j] = T(0)"),
         n.Stmt("Dv[6 * i + j + 3] = T(0.5) * R[e] + k[1] * (PR[e] + RP[e] + PRP[e])\n"
                "                  + k[2] * (PPR[e] + RPP[e] - T(3) * PRP[e]) + k[3] * (PRPP[e] + PPRP[e])")])])],
    template="template <typename T>")


def _lanes(name: str, outs: tuple[tuple[str, int], ...], ins: tuple[tuple[str, int], ...]) -> str:
    """The CPU build's form of scalar function ``name`` on ``grid_lanes``: lane by lane."""
    params = ", ".join([f"grid_lanes<S, L> *{o}" for o, _ in outs] + [f"const grid_lanes<S, L> *{i}" for i, _ in ins])
    decl = " ".join(f"S s_{x}[{k}];" for x, k in (*outs, *ins))
    load = " ".join(f"for (int i = 0; i < {k}; ++i) s_{x}[i] = {x}[i].v[j];" for x, k in ins)
    store = " ".join(f"for (int i = 0; i < {k}; ++i) {x}[i].v[j] = s_{x}[i];" for x, k in outs)
    args = ", ".join(f"s_{x}" for x, _ in (*outs, *ins))
    return (f"template <typename S, int L> inline void {name}({params}) {{\n"
            f"    for (int j = 0; j < L; ++j) {{\n"
            f"        {decl}\n        {load}\n        {name}<S>({args});\n        {store}\n    }}\n}}")


def move_cells(robot: Robot) -> tuple[list, list]:
    """``(plain, free_flyers)`` of ``q (+) v``: the ``(q index, v index)`` of every coordinate that
    adds its increment, and of every free-flyer's first coordinate (mimic joints have none of their
    own)."""
    plain, ff = [], []
    for b in robot.bodies:
        if b.mimic is not None:
            continue
        if b.jtype is JointType.FLOATING:
            ff.append((b.q_index, b.v_index))
        else:
            plain += [(b.q_index + j, b.v_index + j) for j in range(b.nq)]
    covered = sorted([qi for qi, _ in plain] + [qi + j for qi, _ in ff for j in range(7)])
    assert covered == list(range(robot.nq)), "every coordinate of q is moved once"
    return plain, ff


def move_tables(pfx: str, robot: Robot) -> list:
    """The tables :func:`move_steps` reads in the block layout, ``<PFX>_Q_OF`` and ``<PFX>_V_OF``:
    an algorithm that moves a configuration declares them among its helpers."""
    plain, ff = move_cells(robot)
    cells = plain + ff
    return [n.ConstArray("int", f"{pfx}_Q_OF", [qi for qi, _ in cells], qualifiers="static __device__ const",
                         comment="cell i of the update: q index (a free-flyer's first, after the coordinates "
                                 "that add their increment)"),
            n.ConstArray("int", f"{pfx}_V_OF", [vi for _, vi in cells], qualifiers="static __device__ const",
                         comment="... and its v index")]


def move_steps(pfx: str, robot: Robot, out: str, q: str, step: str, local: bool) -> list:
    """``out = q (+) step`` (pointers; Pinocchio's ``integrate``): one cell per thread in the block
    layout (the tables of :func:`move_tables`, prefix ``pfx``), straight-line code in the per-state
    one (``local``).  A free-flyer moves by ``grid_exp6_xyzquat`` (the group ``"lie"``)."""
    plain, ff = move_cells(robot)
    if local:
        return ([n.Stmt(f"{out}[{qi}] = {q}[{qi}] + {step}[{vi}]") for qi, vi in plain]
                + [n.Stmt(f"grid_exp6_xyzquat(&{out}[{qi}], &{q}[{qi}], &{step}[{vi}])") for qi, vi in ff])
    body = [n.Stmt(f"const int qi = {pfx}_Q_OF[i], vi = {pfx}_V_OF[i]")]
    plain_stmt = n.Stmt(f"{out}[qi] = {q}[qi] + {step}[vi]")
    if ff:
        body += [n.If(f"i < {len(plain)}", [plain_stmt]),
                 n.Block("else", [n.Stmt(f"grid_exp6_xyzquat(&{out}[qi], &{q}[qi], &{step}[vi])")])]
    else:
        body.append(plain_stmt)
    return [n.BlockStrideLoop("i", len(plain) + len(ff), body)]


def helpers() -> list:
    """The device functions of the group ``"lie"``, once per header."""
    return [
        n.Comment("The configuration space's Lie-group math (grid_core.model.lie): the so(3) coefficients\n"
                  "a = (1 - cos t)/t^2, b = (t - sin t)/t^3, c = (t^2 + 2 cos t - 2)/(2 t^4),\n"
                  "d = (2t - 3 sin t + t cos t)/(2 t^5) (their series below t = 1), a free-flyer's [p; quat]\n"
                  "moved by exp6 of a [linear; angular] twist, and the derivatives of that move (Pinocchio's\n"
                  "dIntegrate: Ad(exp6(xi)^-1), Jr(xi)).  Called unqualified: the CPU build's lanes take their\n"
                  "lane-by-lane forms."),
        _coefficients(), _CROSS, _SKEW, _MUL, _EXP6, _DEXP6,
        n.Raw("#ifdef GRID_HOST_CPU"),
        n.Raw(_lanes("grid_exp6_xyzquat", (("out", 7),), (("x", 7), ("xi", 6)))),
        n.Raw(_lanes("grid_dintegrate6", (("Dq", 36), ("Dv", 36)), (("xi", 6),))),
        n.Raw("#endif"),
    ]


SHARED_HELPERS = {"lie": helpers, "lane_cells": lane_cells.helpers}
"""The helper groups an emitter may declare (:attr:`~grid_core.emit.emitter.Emitter.shared_helpers`)."""
