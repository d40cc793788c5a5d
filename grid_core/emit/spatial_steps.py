"""Robot-specialised spatial algebra for emitters: the steps every algorithm shares.

Featherstone conventions (motion ``[w; u]``, force ``[n; f]``), as in
:mod:`grid_core.model.spatial`, but emitted: every robot constant is folded into
the code, so a product with a sparse placement or inertia costs only its
non-zero terms.

The only configuration-dependent part of a body transform is kept in the
compact *XI* layout (pattern P4): ``(sin, cos)`` of a revolute joint, the
displacement of a prismatic joint, and ``E`` (9) plus position (3) of a
free-flyer.  :func:`xi_update` fills a body's slot from ``q``;
:func:`body_transform` rebuilds ``X = XJ(q) Xtree`` as ``(E, r)`` scalars from it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import numpy as np

from ..model import Body, JointType, Robot

from ..model.spatial import skew, split_plux
from .expr import ROTATION_TOL, Scalar, Scope, clean, cross, matTvec, matvec, render, sum_terms

Index = Callable[[int], str]
"""Maps an element index to the C++ expression of that array element."""


@attrs.frozen
class XiSlot:
    body: int
    offset: int
    size: int
    kind: str  # "revolute", "prismatic" or "free"


def xi_layout(robot: Robot) -> tuple[XiSlot, ...]:
    """The compact per-body layout of the configuration-dependent transform data."""
    out, off = [], 0
    for b in robot.bodies:
        if b.jtype is JointType.FLOATING:
            kind, size = "free", 12
        elif b.jtype is JointType.PRISMATIC:
            kind, size = "prismatic", 1
        else:
            kind, size = "revolute", 2
        out.append(XiSlot(b.index, off, size, kind))
        off += size
    return tuple(out)


def xi_size(robot: Robot) -> int:
    return sum(s.size for s in xi_layout(robot))


def joint_coordinate(body: Body, q: Index) -> Scalar:
    """The body's own joint coordinate (mimic applied) as an expression."""
    if body.mimic is not None:
        return sum_terms([(body.mimic.multiplier, q(body.q_index))], body.mimic.offset)
    return q(body.q_index)


def joint_rate(body: Body, qd: Index) -> Scalar:
    """The body's own joint velocity (or acceleration): a 1-dof joint's scalar rate."""
    if body.mimic is not None:
        return sum_terms([(body.mimic.multiplier, qd(body.v_index))])
    return qd(body.v_index)


def xi_update(scope: Scope, robot: Robot, body: Body, q: Index, xi: Index) -> None:
    """Statements filling ``body``'s XI slot from the configuration ``q``."""
    slot = xi_layout(robot)[body.index]
    o = slot.offset
    if slot.kind == "revolute":
        angle = render(scope.let(joint_coordinate(body, q), "ang"))
        scope.stmt(f"grid_sincos<T>({angle}, &{xi(o)}, &{xi(o + 1)})")
    elif slot.kind == "prismatic":
        scope.assign(xi(o), joint_coordinate(body, q))
    else:
        qi = body.q_index
        x, y, z, w = (q(qi + 3 + k) for k in range(4))
        inv = scope.let(f"T(1) / grid_sqrt<T>({x}*{x} + {y}*{y} + {z}*{z} + {w}*{w})", "qn")
        x, y, z, w = (scope.let(f"{c}*{inv}", "qu") for c in (x, y, z, w))
        R = [
            [f"T(1) - T(2)*({y}*{y} + {z}*{z})", f"T(2)*({x}*{y} - {z}*{w})", f"T(2)*({x}*{z} + {y}*{w})"],
            [f"T(2)*({x}*{y} + {z}*{w})", f"T(1) - T(2)*({x}*{x} + {z}*{z})", f"T(2)*({y}*{z} - {x}*{w})"],
            [f"T(2)*({x}*{z} - {y}*{w})", f"T(2)*({y}*{z} + {x}*{w})", f"T(1) - T(2)*({x}*{x} + {y}*{y})"],
        ]
        scope.comment("E = R^T: world -> base coordinates; then the base position")
        for r in range(3):
            for c in range(3):
                scope.assign(xi(o + 3 * r + c), R[c][r])
        for k in range(3):
            scope.assign(xi(o + 9 + k), q(qi + k))


def _const3(M) -> list[list[float]]:
    return [[clean(M[r][c], ROTATION_TOL) for c in range(3)] for r in range(3)]


def body_transform(robot: Robot, body: Body, xi: Index) -> tuple[list[list[Scalar]], list[Scalar]]:
    """``X = XJ(q) Xtree`` of ``body`` as ``(E, r)`` with constants folded."""
    E_t, r_t = split_plux(np.asarray(body.Xtree))
    slot = xi_layout(robot)[body.index]
    o = slot.offset
    if slot.kind == "free":
        E = [[xi(o + 3 * r + c) for c in range(3)] for r in range(3)]
        return E, [xi(o + 9 + k) for k in range(3)]
    if slot.kind == "prismatic":
        d = E_t.T @ np.asarray(body.axis)
        r = [sum_terms([(clean(d[k], ROTATION_TOL), xi(o))], clean(r_t[k])) for k in range(3)]
        return _const3(E_t), r
    # revolute: E = R(a, -q) E_t = (I + K^2) E_t - c K^2 E_t - s K E_t
    K = skew(body.axis)
    A0, Ac, As = (np.eye(3) + K @ K) @ E_t, -(K @ K) @ E_t, -K @ E_t
    s, c = xi(o), xi(o + 1)
    rt = ROTATION_TOL
    E = [
        [sum_terms([(clean(Ac[i, j], rt), c), (clean(As[i, j], rt), s)], clean(A0[i, j], rt)) for j in range(3)]
        for i in range(3)
    ]
    return E, [clean(x) for x in r_t]


class Transform:
    """``X = XJ(q) Xtree`` of one body, applied without forming it.

    For a revolute joint about a coordinate axis (+-x, +-y, +-z: most robots) the constant
    tree transform is applied first, with every constant folded, then the joint rotation,
    which touches only the two coordinates across the axis (4 multiplies per 3-vector).
    Otherwise ``E`` is rebuilt from the XI slot (:func:`body_transform`) and applied whole.
    """

    def __init__(self, robot: Robot, body: Body, xi: Index, scope: Scope):
        self.kind = "general"
        E_t, r_t = split_plux(np.asarray(body.Xtree))
        slot = xi_layout(robot)[body.index]
        axis = [clean(x, ROTATION_TOL) for x in body.axis]
        if slot.kind == "revolute" and sorted(abs(a) for a in axis) == [0.0, 0.0, 1.0]:
            self.kind = "aligned"
            self.k = next(i for i, a in enumerate(axis) if a != 0.0)
            sign = axis[self.k]
            self.s = xi(slot.offset) if sign > 0 else sum_terms([(-1.0, xi(slot.offset))])
            self.c = xi(slot.offset + 1)
            self.E_t = _const3(E_t)
            self.r_t = [clean(x) for x in r_t]
        else:
            E, r = body_transform(robot, body, xi)
            self.E = [scope.let_all(row, "E") for row in E]
            self.r = r

    def _joint_rotate(self, v, transpose: bool) -> list[Scalar]:
        """``R(q)^T v`` (``transpose=False``: motion direction) or ``R(q) v``."""
        i, j = (self.k + 1) % 3, (self.k + 2) % 3
        s, c = self.s, self.c
        sg = 1.0 if not transpose else -1.0
        out = list(v)
        out[i] = sum_terms([(c, v[i]), (sg, s, v[j])])
        out[j] = sum_terms([(-sg, s, v[i]), (c, v[j])])
        return out

    def rotate(self, v: Sequence[Scalar], scope: Scope | None = None) -> list[Scalar]:
        """``E v`` for a free vector (no translation)."""
        if self.kind == "general":
            return matvec(self.E, v)
        t = matvec(self.E_t, v)
        if scope is not None:
            t = scope.let_all(t, "R")
        return self._joint_rotate(t, False)

    def motion(self, m: Sequence[Scalar], scope: Scope) -> list[Scalar]:
        """``X m``."""
        if self.kind == "general":
            return x_motion(self.E, self.r, m)
        t = scope.let_all(x_motion(self.E_t, self.r_t, m), "X")
        return self._joint_rotate(t[:3], False) + self._joint_rotate(t[3:], False)

    def force_T(self, f: Sequence[Scalar], scope: Scope) -> list[Scalar]:
        """``X^T f``."""
        if self.kind == "general":
            return xt_force(self.E, self.r, f, scope)
        t = scope.let_all(self._joint_rotate(f[:3], True) + self._joint_rotate(f[3:], True), "XT")
        return xt_force(self.E_t, self.r_t, t, scope)


def root_frame(robot: Robot, body: Body, parent_frame, xi: Index, scope: Scope,
               world: bool = False) -> tuple[list, list]:
    """``^bX_root`` of ``body`` as ``(E, r)`` (``X m = [E w; E (u - r x w)]``): the transform from
    the frame of the root of its tree to its own, ``X_b ^pX_root`` given the parent's
    (``E = E_b E_p``, ``r = r_p + E_p^T r_b``); a root's (``parent_frame`` unused) is the identity.
    ``world``: from the world frame instead (a root's is its joint's transform), ``^bX_world``."""
    identity = [[1.0 if r == c else 0.0 for c in range(3)] for r in range(3)], [0.0] * 3
    if body.parent < 0 and not world:
        return identity
    Ep, rp = parent_frame if body.parent >= 0 else identity
    X = Transform(robot, body, xi, scope)
    cols = [X.rotate([Ep[r][k] for r in range(3)], scope) for k in range(3)]  # (E_b E_p)[:, k]
    E = [scope.let_all([cols[k][r] for k in range(3)], "WE") for r in range(3)]
    rb = X.r_t if X.kind == "aligned" else X.r
    return E, scope.let_all([sum_terms([(rp[k],), (t,)]) for k, t in enumerate(matTvec(Ep, rb))], "Wr")


def root_frames(robot: Robot, xi: Index, scope: Scope, world: bool = False,
                bodies: Sequence[int] | None = None) -> dict[int, tuple[list, list]]:
    """:func:`root_frame` of every body (``bodies``: of these only, a set closed under parents such
    as the support of a frame), composed down the tree."""
    out: dict[int, tuple[list, list]] = {}
    for b in range(robot.num_bodies) if bodies is None else sorted(bodies):
        body = robot.bodies[b]
        out[b] = root_frame(robot, body, out.get(body.parent), xi, scope, world)
    return out


# -- frames and poses ----------------------------------------------------------------------
#
# A frame's ^fX_world as (E, r) (root_frame's form): E takes world coordinates to the frame's, r is
# its origin in the world.  Its pose, as forward kinematics outputs it, is [[E^T, r], [0, 1]].


def frame_entries(E, r) -> list[Scalar]:
    """``(E, r)`` as the 12 scalars a sweep stores: ``E`` row-major, then ``r``."""
    return [x for row in E for x in row] + list(r)


def frame_of(entries: Sequence[Scalar]) -> tuple[list, list]:
    """The ``(E, r)`` of :func:`frame_entries`' 12 scalars."""
    return [list(entries[3 * i:3 * i + 3]) for i in range(3)], list(entries[9:12])


def pose_entries(E, r) -> list[Scalar]:
    """The homogeneous pose ``[[R, p], [0, 0, 0, 1]]`` (16 scalars, row-major) of the frame
    ``(E, r)``: ``R = E^T`` takes the frame's coordinates to the world's, ``p = r`` (Pinocchio's
    ``oMi`` and ``oMf``)."""
    return [x for i in range(3) for x in (E[0][i], E[1][i], E[2][i], r[i])] + [0.0, 0.0, 0.0, 1.0]


def pose_frame(entries: Sequence[Scalar]) -> tuple[list, list]:
    """The ``(E, r)`` of a pose's 16 scalars (:func:`pose_entries`)."""
    return [[entries[4 * j + i] for j in range(3)] for i in range(3)], [entries[4 * i + 3] for i in range(3)]


def placed_frame(frame, X) -> tuple[list, list]:
    """``^fX_world = X ^bX_world``: the frame at the constant placement ``X`` (Plücker, body ->
    frame) in a body whose ``^bX_world`` is ``frame`` (None: fixed in the world), its constants
    folded: ``E_f = E_X E``, ``r_f = r + E^T r_X``."""
    EX, rX = split_plux(np.asarray(X))
    EX, rX = _const3(EX), [clean(x) for x in rX]
    if frame is None:
        return EX, rX
    E, r = frame
    cols = [matvec(EX, [E[k][j] for k in range(3)]) for j in range(3)]  # (E_X E)[:, j]
    return [[cols[j][i] for j in range(3)] for i in range(3)], [sum_terms([(r[k],), (t,)])
                                                                for k, t in enumerate(matTvec(E, rX))]


def motion_to_root(E, r, m: Sequence[Scalar], scope: Scope) -> list[Scalar]:
    """``X^-1 m`` for ``X = (E, r)`` (``^bX_root``): ``[E^T w; E^T u + r x E^T w]``."""
    w = scope.let_all(matTvec(E, m[:3]), "Ww")
    rxw = cross(r, w)
    return w + [sum_terms([(t,), (rxw[k],)]) for k, t in enumerate(matTvec(E, m[3:]))]


def in_root_frames(robot: Robot, xi: Index, scope: Scope, forces: dict, motions: dict,
                   names: tuple[str, str]) -> tuple[dict, dict]:
    """Body-frame vectors carried once into the frame of their tree's root (:func:`root_frames`),
    body by body (a root's unchanged): ``forces[b]``, spatial forces of body ``b``, by ``X^T``
    (:func:`xt_force`), ``motions[b]`` by ``X^-1`` (:func:`motion_to_root`); ``names``: their
    variables.  Returns the two dicts carried."""
    F, M = dict(forces), dict(motions)
    for b, (E, r) in root_frames(robot, xi, scope).items():
        if robot.bodies[b].parent >= 0:
            F[b] = [scope.let_all(xt_force(E, r, f, scope), names[0]) for f in forces.get(b, ())]
            M[b] = [scope.let_all(motion_to_root(E, r, m, scope), names[1]) for m in motions.get(b, ())]
    return F, M


# -- gravity -----------------------------------------------------------------------------

A0 = ["a0x", "a0y", "a0z"]
"""The linear part of the fictitious base acceleration ``a0 = [0; -g]`` (gravity folded into a
forward pass), as named by :func:`gravity_statements`."""


def gravity_statements() -> list:
    """``const T a0x = -gravity.x`` ...: the names of :data:`A0`, from a function's ``gravity``."""
    from . import nodes as n

    return [n.Stmt(f"const T {a} = -gravity.{c}") for a, c in zip(A0, "xyz")]


def minus_f_ext(scope: Scope, f: Sequence[str], body: int, local: bool) -> None:
    """``f -= f_ext`` of ``body`` (``f``: its six stored scalars, [moment; force]; ``f_ext`` is
    [force; moment] per body), where the state has external forces: ``USE_F_EXT`` in the per-state
    layout (``local``: a compile-time flag), a non-null ``f_ext`` in the block layout."""
    from . import nodes as n

    sub = [n.Stmt(f"{f[k]} -= f_ext[{6 * body + (k + 3) % 6}]") for k in range(6)]
    scope.stmts.append(n.If("USE_F_EXT" if local else "f_ext != nullptr", sub, constexpr=local))


# -- motion and force algebra ------------------------------------------------------


def x_motion(E, r, m: Sequence[Scalar]) -> list[Scalar]:
    """``X m``: ``[E w; E (u - r x w)]``."""
    w, u = m[:3], m[3:]
    rxw = cross(r, w)
    return matvec(E, w) + matvec(E, [sum_terms([(u[k],), (-1.0, rxw[k])]) for k in range(3)])


def xt_force(E, r, f: Sequence[Scalar], scope: Scope | None = None) -> list[Scalar]:
    """``X^T f``: ``[E^T n + r x (E^T f); E^T f]``."""
    n_, fl = f[:3], f[3:]
    Etf = matTvec(E, fl)
    if scope is not None:
        Etf = scope.let_all(Etf, "xf")
    rx = cross(r, Etf)
    Etn = matTvec(E, n_)
    return [sum_terms([(Etn[k],), (rx[k],)]) for k in range(3)] + list(Etf)


def cross_motion(v: Sequence[Scalar], m: Sequence[Scalar]) -> list[Scalar]:
    """``v x m`` (crm): ``[w x mw; w x mu + u x mw]``."""
    w, u = v[:3], v[3:]
    a = cross(w, m[:3])
    b1, b2 = cross(w, m[3:]), cross(u, m[:3])
    return a + [sum_terms([(b1[k],), (b2[k],)]) for k in range(3)]


def cross_force(v: Sequence[Scalar], f: Sequence[Scalar]) -> list[Scalar]:
    """``v x* f`` (crf): ``[w x n + u x f; w x f]``."""
    w, u = v[:3], v[3:]
    a1, a2 = cross(w, f[:3]), cross(u, f[3:])
    return [sum_terms([(a1[k],), (a2[k],)]) for k in range(3)] + cross(w, f[3:])


def inertia_times(I: np.ndarray, m: Sequence[Scalar]) -> list[Scalar]:
    """``I m`` for a constant spatial inertia (zeros folded)."""
    return [sum_terms((clean(I[r, c]), m[c]) for c in range(6)) for r in range(6)]


def joint_motion(body: Body, rates: Index) -> list[Scalar]:
    """``S u`` of the body's joint for its rates ``u`` (``rates``: v index -> expression; qd gives
    the joint velocity vJ, qdd the acceleration term), a mimic's multiplier applied."""
    if body.jtype is JointType.FLOATING:
        u = [rates(body.v_index + k) for k in range(6)]
        return u[3:] + u[:3]  # S maps v = [linear; angular] to [angular; linear]
    return motion_subspace_times(body, joint_rate(body, rates))


def combine(cols: Sequence[Sequence[Scalar]], xs: Sequence[Scalar]) -> list[Scalar]:
    """``sum_c xs[c] cols[c]`` of spatial vectors: ``S x`` for the columns ``S`` of a motion
    subspace, ``U x`` for a joint's ``U = IA S``."""
    return [sum_terms([(col[r], x) for col, x in zip(cols, xs)]) for r in range(6)]


def motion_subspace_times(body: Body, rate: Scalar) -> list[Scalar]:
    """``S qd`` for a 1-dof joint (revolute: ``[a; 0]``, prismatic: ``[0; a]``)."""
    a = [clean(x, ROTATION_TOL) for x in body.axis]
    zero = [0.0, 0.0, 0.0]
    lin = [sum_terms([(a[k], rate)]) for k in range(3)]
    return lin + zero if body.jtype is not JointType.PRISMATIC else zero + lin


def subspace_transpose_times(body: Body, f: Sequence[Scalar]) -> Scalar:
    """``S^T f`` for a 1-dof joint."""
    a = [clean(x, ROTATION_TOL) for x in body.axis]
    part = f[:3] if body.jtype is not JointType.PRISMATIC else f[3:]
    return sum_terms(zip(a, part))


# -- rigid-body inertias in ten parameters -----------------------------------------------
#
# A spatial inertia about a frame's origin is [[Ibar, h x], [-h x, m 1]] (Ibar about the
# origin, h = m c): ten numbers (m, h, and Ibar's xx xy xz yy yz zz) instead of 36, and a sum
# of rigid-body inertias (a composite inertia) is one again.


def rbi_of(I: np.ndarray) -> list[float]:
    """The ten parameters of a constant spatial inertia (6x6)."""
    I = np.asarray(I)
    return [clean(x) for x in (I[5, 5], I[2, 4], I[0, 5], I[1, 3], I[0, 0], I[0, 1], I[0, 2], I[1, 1], I[1, 2],
                               I[2, 2])]


def _sym(rbi) -> list[list[Scalar]]:
    xx, xy, xz, yy, yz, zz = rbi[4:]
    return [[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]]


def rbi_add(a: Sequence[Scalar], b: Sequence[Scalar]) -> list[Scalar]:
    return [sum_terms([(x,), (y,)]) for x, y in zip(a, b)]


def rbi_transform(rbi: Sequence[Scalar], ET: Callable, r: Sequence[Scalar], scope: Scope) -> list[Scalar]:
    """``X^T I X`` for ``X = plux(E, r)`` (parent -> child): the child's inertia in the parent
    frame.  ``ET(v)`` applies ``E^T`` to a 3-vector.  With ``Eh = E^T h``:
    ``h' = Eh + m r`` and ``Ibar' = E^T Ibar E - r x Eh x - h' x r x`` (RBDA eq. 2.66), where
    ``a x b x = b a^T - (a . b) 1``."""
    m, h, Ib = rbi[0], list(rbi[1:4]), _sym(rbi)
    Eh = scope.let_all(ET(h), "Eh")
    cols = [scope.let_all(ET([Ib[0][j], Ib[1][j], Ib[2][j]]), "EI") for j in range(3)]  # E^T Ibar
    rows = [ET([cols[0][i], cols[1][i], cols[2][i]]) for i in range(3)]  # (E^T Ibar) E, by rows
    pairs = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))
    if all(isinstance(x, float) and x == 0.0 for x in r):
        return [m, *Eh, *[rows[i][j] for i, j in pairs]]
    hA = scope.let_all([sum_terms([(Eh[k],), (m, r[k])]) for k in range(3)], "h")
    rEh = sum_terms([(r[k], Eh[k]) for k in range(3)])
    rhA = sum_terms([(r[k], hA[k]) for k in range(3)])
    out = []
    for i, j in pairs:
        terms = [(rows[i][j],), (-1.0, Eh[i], r[j]), (-1.0, r[i], hA[j])]
        if i == j:
            terms += [(rEh,), (rhA,)]
        out.append(sum_terms(terms))
    return [m, *hA, *out]


def rbi_times_motion(rbi: Sequence[Scalar], v: Sequence[Scalar]) -> list[Scalar]:
    """``I v`` for ``v = [w; u]``: ``[Ibar w + h x u; m u - h x w]``."""
    m, h, Ib = rbi[0], list(rbi[1:4]), _sym(rbi)
    w, u = list(v[:3]), list(v[3:])
    Iw = matvec(Ib, w)
    hu, hw = cross(h, u), cross(h, w)
    return ([sum_terms([(Iw[k],), (hu[k],)]) for k in range(3)]
            + [sum_terms([(m, u[k]), (-1.0, hw[k])]) for k in range(3)])


def inertia_to_parent(X: "Transform", rbi: Sequence[Scalar], scope: Scope) -> list[Scalar]:
    """``X^T I X`` of a body's inertia, its transform applied without forming it (for an
    axis-aligned revolute joint: the joint rotation, then the constant tree transform)."""
    if X.kind == "general":
        return [*scope.let_all(rbi_transform(rbi, lambda v: matTvec(X.E, v), X.r, scope), "IC")]
    mid = scope.let_all(rbi_transform(rbi, lambda v: X._joint_rotate(v, True), [0.0, 0.0, 0.0], scope), "IJ")
    return scope.let_all(rbi_transform(mid, lambda v: matTvec(X.E_t, v), X.r_t, scope), "IC")


# -- symmetric 6x6 matrices (articulated inertias) in 21 scalars ---------------------------
#
# An articulated-body inertia is symmetric but not a rigid-body inertia, so it takes 21 numbers:
# the upper triangle, row by row ((0,0), (0,1) .. (0,5), (1,1) .. (5,5)).  Recursions that divide
# by a joint's inertia (ABA, Carpentier's Minv) carry these; ABA packs a multi-dof joint's
# D^-1 (w x w) the same way.


def sym6_index(i: int, j: int, n: int = 6) -> int:
    """Position of entry ``(i, j)`` (either triangle) in the 21-scalar layout (``n``: of an
    ``n x n``'s packed upper triangle)."""
    if i > j:
        i, j = j, i
    return n * i - i * (i - 1) // 2 + (j - i)


_SYM6_PAIRS = [(i, j) for i in range(6) for j in range(i, 6)]


def sym6_of(M: np.ndarray) -> list[float]:
    """A constant symmetric 6x6 (a spatial inertia, say) as 21 scalars."""
    M = np.asarray(M)
    return [clean(M[i, j]) for i, j in _SYM6_PAIRS]


def sym6_from_rbi(rbi: Sequence[Scalar]) -> list[Scalar]:
    """A rigid-body inertia in ten parameters as 21: ``[[Ibar, h x], [(h x)^T, m 1]]``."""
    m, (hx, hy, hz), Ib = rbi[0], rbi[1:4], _sym(rbi)
    neg = lambda x: sum_terms([(-1.0, x)])
    hk = [[0.0, neg(hz), hy], [hz, 0.0, neg(hx)], [neg(hy), hx, 0.0]]  # h x
    full = [[Ib[r][c] for c in range(3)] + hk[r] for r in range(3)]
    full += [[hk[c][r] for c in range(3)] + [m if r == c else 0.0 for c in range(3)] for r in range(3)]
    return [full[i][j] for i, j in _SYM6_PAIRS]


def sym6_full(a: Sequence[Scalar], n: int = 6) -> list[list[Scalar]]:
    """The 6x6 view (rows of entries) of 21 scalars (``n``: the ``n x n`` view of a packed upper
    triangle)."""
    return [[a[sym6_index(i, j, n)] for j in range(n)] for i in range(n)]


def sym6_times(a: Sequence[Scalar], m: Sequence[Scalar]) -> list[Scalar]:
    """``A m``."""
    return matvec(sym6_full(a), m)


def sym6_add(a: Sequence[Scalar], b: Sequence[Scalar]) -> list[Scalar]:
    return [sum_terms([(x,), (y,)]) for x, y in zip(a, b)]


def unit_axes(S: Sequence[Sequence[float]]) -> set[int]:
    """The coordinates ``k`` of the columns of ``S`` that are unit vectors ``±e_k`` (an
    axis-aligned joint's, a free-flyer's)."""
    return {s.index(x) for s in S for x in s if abs(x) == 1.0 and sum(y != 0.0 for y in s) == 1}


def sym6_sub_outer(a: Sequence[Scalar], U: Sequence[Sequence[Scalar]], Dinv: Sequence[Sequence[Scalar]],
                   scope: Scope, S: Sequence[Sequence[float]] | None = None) -> list[Scalar]:
    """``A - U Dinv U^T`` for ``U = A S`` given as ``w`` columns (6-vectors) and ``Dinv`` ``w x w``
    (symmetric, ``(S^T A S)^-1``): the articulated inertia a joint passes on to its parent.

    With ``S`` given: ``(A - U Dinv U^T) S = U - U Dinv D = 0`` exactly, so a column of ``S``
    that is a unit vector ``e_k`` makes the result's row and column ``k`` zero; they are folded
    to zero (and everything computed from them drops out), not left to rounding."""
    w = len(U)
    axes = unit_axes(S) if S is not None else set()
    UD = [scope.let_all([0.0 if r in axes else sum_terms([(U[k][r], Dinv[k][c]) for k in range(w)])
                         for r in range(6)], "UD")
          for c in range(w)]  # columns of U Dinv (rows on an axis feed only the zeroed entries)
    return [0.0 if i in axes or j in axes else
            sum_terms([(a[sym6_index(i, j)],), *[(-1.0, UD[c][i], U[c][j]) for c in range(w)]])
            for i, j in _SYM6_PAIRS]


def sym6_to_parent(X: Transform, a: Sequence[Scalar], scope: Scope) -> list[Scalar]:
    """``X^T A X``: a body's articulated inertia in its parent's frame.  ``W = X^T A`` column by
    column (A's columns as forces), then ``(X^T A X)[:, j] = X^T (row j of W)``; symmetric, so only
    the upper triangle is kept."""
    full = sym6_full(a)
    W = [scope.let_all(X.force_T([full[r][k] for r in range(6)], scope), "W") for k in range(6)]  # W[:, k]
    cols = [X.force_T([W[k][j] for k in range(6)], scope) for j in range(6)]  # row j of W, as a vector
    return scope.let_all([cols[j][i] for i, j in _SYM6_PAIRS], "IA")


def subspace_columns(body: Body) -> list[list[float]]:
    """The joint's own motion subspace ``S`` as columns (the mimic multiplier NOT applied: a
    relaxed-tree recursion's), constants cleaned; a free-flyer's six."""
    from ..model.joints import motion_subspace

    S = motion_subspace(body)
    return [[clean(x, ROTATION_TOL) for x in S[:, k]] for k in range(S.shape[1])]
