"""Second-order derivatives of inverse dynamics by IDSVA (Singh, Russell & Wensing).

``(d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, dM_dq) = idsva_so(q, qd, qdd, f_ext=None, gravity=...)``,
four ``(nv, nv, nv)`` tensors:

* ``d2tau_dq2[i, j, k]   = d/dq_k (d tau_i / d q_j)``,
* ``d2tau_dqd2[i, j, k]  = d2 tau_i / (d qd_j d qd_k)``,
* ``d2tau_dqdqd[i, j, k] = d2 tau_i / (d q_j d qd_k)``,
* ``dM_dq[i, j, k]       = d M_ij / d q_k``  (``= d2 tau_i / (d qdd_j d q_k)``).

Every ``q`` derivative is a tangent derivative (``q (+) dq``, as ``computeRNEADerivatives``
takes it, see :func:`grid_core.testing.integrate`), and ``d2tau_dq2[:, :, k]`` is the
tangent derivative along ``q_k`` of the first-order ``dtau_dq`` -- what central differences
of Pinocchio's ``computeRNEADerivatives`` give.  Tangent derivatives of a Lie group do not
commute: on a free-flyer ``d2tau_dq2`` is NOT symmetric in ``(j, k)`` within the base's six
columns.  With ``g = dtau_dq`` and ``[., .]`` the Lie bracket of se(3) in the base's
``[linear; angular]`` coordinates (``[a, b] = (w_a x v_b - w_b x v_a, w_a x w_b)``),

    d2tau_dq2[i, j, k] - d2tau_dq2[i, k, j] = sum_m g[i, m] [e_k, e_j]_m      (BCH),

while the other symmetries are plain (``d2tau_dqd2[i]`` in ``(j, k)``, ``dM_dq[:, :, k]`` in
its first two indices, ``d2tau_dq2[i]`` off the base's columns), up to rounding.

The algorithm is IDSVA-SO (Singh, Russell & Wensing, "Analytical second-order partial
derivatives of rigid-body inverse dynamics", IROS 2022, arXiv:2203.01497, and "On
second-order derivatives of rigid-body dynamics: theory & implementation", T-RO 2024,
arXiv:2302.06001; building on their first-order IDSVA, RA-L 2022): one
forward sweep stores per joint column ``c`` (body ``b(c)``, parent ``lambda``) the motion
subspace ``S_c`` and

    psid_c = v_lambda x S_c,   psidd_c = a_lambda x S_c + v_lambda x psid_c,   Sd_c = v_b x S_c

(``psid``, ``psidd``: the first and second time derivatives of ``S_c`` carried by the parent;
``Sd``: the first, carried by the body itself -- they differ only on a multi-column joint),
and per body the spatial
inertia ``I``, the body-level Coriolis matrix ``B = v x* I - I v x + (I v) bar`` and the
net force ``f``; one backward sweep accumulates the composites ``IC``, ``BC``, ``F`` of each
subtree and, for every chain ``k <= j <= i`` of columns (``<=``: ancestor or same body),
contracts a few 6x6 matrices of body ``i`` with the columns of ``j`` and ``k`` into the
cells of the four tensors indexed by permutations of ``(i, j, k)`` (up to 22 of them; a
triple not on one chain has all cells zero).  The contractions are scalars
of spatial algebra, so they may be evaluated in any frame:

* **body-frame form** (fixed-base trees without mimic joints): everything in the frame of
  the deepest body ``i``; the ancestors' columns are carried down the tree by the joint
  transforms ``Xup`` and the composites accumulated with ``Xup^T (.) Xup``, exactly as the
  first-order algorithms do (no world transform is ever formed);
* **world-frame form** (floating base, mimic joints): every column, inertia and force in the
  world frame once, so composites are plain sums and a multi-column joint (the free-flyer,
  whose six columns satisfy ``d S_c / d q_k = S_k x S_c`` among themselves too) is six
  ordinary columns.

Mimic joints: the sweeps run on the *relaxed* tree (every mimic joint a column of its own,
see :mod:`grid_algorithms._mimic`); since ``q_r = G q + offset`` is affine, the robot's
tensors are the relaxed ones contracted with ``G`` on all three indices.  External forces
are body-fixed and enter through ``f`` (their derivatives follow the same ``S_k x*`` rule as
every body-fixed quantity).
"""

from __future__ import annotations

import attrs
import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.errors import CodegenError
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, matTvec, matvec, render, sum_terms
from grid_core.emit.storage import index_table
from grid_core.model import JointType, Robot
from grid_core.model.joints import body_q, body_v, joint_transform, motion_subspace
from grid_core.model.spatial import crf, crm, gravity_accel, icrf, plux_inv
from grid_core.review import ParallelismReview, done, todo

from ._mimic import relaxed_map


# -- the relaxed columns ---------------------------------------------------------------


def contract3(T: np.ndarray, G: np.ndarray) -> np.ndarray:
    """``T'[i, j, k] = sum G[a, i] G[b, j] G[c, k] T[a, b, c]`` (relaxed -> robot coordinates)."""
    T = np.tensordot(G, T, axes=(0, 0))  # (i, b, c)
    T = np.tensordot(T, G, axes=(2, 0))  # (i, b, k)
    return np.einsum("bj,ibk->ijk", G, T)


# -- forward sweep (body frames) -------------------------------------------------------


def forward_sweep(robot: Robot, q, qd, qdd, f_ext, gravity):
    """Per body, in its own frame: ``Xup``, ``v``, ``a``, the net force ``f``, the inertia,
    the Coriolis matrix ``B``, and the columns ``S``, ``psid``, ``psidd``, ``Sd`` (6 x width)."""
    NB = robot.num_bodies
    out = {k: [None] * NB for k in ("Xup", "v", "a", "f", "I", "B", "S", "psid", "psidd", "Sd")}
    a0 = gravity_accel(gravity)
    for i, body in enumerate(robot.bodies):
        Xup = joint_transform(body, body_q(body, q)) @ body.Xtree
        S = motion_subspace(body)  # relaxed: a mimic joint's own column, no multiplier
        vJ = S @ body_v(body, qd)
        p = body.parent
        vp = Xup @ out["v"][p] if p >= 0 else np.zeros(6)  # the parent's motion, in i's frame
        ap = Xup @ (out["a"][p] if p >= 0 else a0)
        v = vp + vJ
        a = ap + S @ body_v(body, qdd) + crm(v) @ vJ
        I = body.inertia
        h = I @ v
        f = I @ a + crf(v) @ h
        if f_ext is not None:
            fx = f_ext[i]
            f = f - np.concatenate([fx[3:], fx[:3]])  # [force; moment] -> [moment; force]
        psid = crm(vp) @ S
        out["Xup"][i], out["v"][i], out["a"][i], out["f"][i], out["I"][i] = Xup, v, a, f, I
        out["B"][i] = crf(v) @ I - I @ crm(v) + icrf(h)
        out["S"][i], out["psid"][i] = S, psid
        out["psidd"][i] = crm(ap) @ S + crm(vp) @ psid
        out["Sd"][i] = crm(v) @ S
    return out


# -- backward step: the contractions of one column of body i -----------------------------


def _contract_column(T, ip, i, IC, BC, F, cols, J, bJ, dJ):
    """Write the cells of every chain ``k <= j <= i`` for column ``ip`` of body ``i``.

    ``IC``, ``BC``, ``F``: body ``i``'s composites; ``cols = (S, psid, psidd, Sd)``, each
    ``6 x m``, the columns ``J`` of i's support (root first, ``ip`` among them), all in one
    frame; ``bJ``, ``dJ``: their bodies and depths.  ``T = (D2q, D2v, Dqv, DM)``.
    """
    D2q, D2v, Dqv, DM = T
    S, Pd, Pdd, Sd = cols
    at = int(np.flatnonzero(J == ip)[0])
    Si, psid_i, psidd_i, Sd_i = S[:, at], Pd[:, at], Pdd[:, at], Sd[:, at]

    A0 = icrf(IC @ Si)
    A1 = crf(Si) @ IC - IC @ crm(Si)  # d IC / d q_i
    Bic = A1 + A0
    A2 = A0 - A1  # 2 A0 - Bic
    A3 = crf(psid_i) @ IC - IC @ crm(psid_i) + icrf(IC @ psid_i) + crf(Si) @ BC - BC @ crm(Si)
    A4 = icrf(BC.T @ Si)
    A5 = icrf(BC @ psid_i + IC @ psidd_i + crf(Si) @ F)
    A6 = crf(Si) @ IC + A0
    A7 = icrf(BC @ Si + IC @ (psid_i + Sd_i))

    # per column j of the support (as columns of 6 x m matrices)
    U1, U2 = A3.T @ S, A1.T @ S
    U3 = A3 @ Pd + A1 @ Pdd + A5 @ S
    U4, U5 = A6 @ S, A2 @ Pd
    U6 = Bic @ Pd + A7 @ S
    U7 = A3 @ S + A1 @ (Pd + Sd)
    U8, U9, U10 = A4 @ S, A0 @ S, Bic @ S
    U11, U12, U13 = Bic.T @ S, Bic.T @ Pd, A1 @ S

    # per pair (j, k): [j, k] = u_j . w_k
    P1 = U11.T @ Pd
    P2 = U9.T @ Pdd + (U8 - U12).T @ Pd
    P3 = -U11.T @ S
    P4 = U13.T @ S
    P5 = U9.T @ S
    P6 = U10.T @ S
    Q1 = U1.T @ Pd + U2.T @ Pdd
    Q2 = U1.T @ S + U2.T @ (Pd + Sd)
    Q3 = U3.T @ S
    Q4 = (U5 + U8).T @ S + U9.T @ (Pd + Sd)
    Q5 = U6.T @ S
    Q6 = U7.T @ S
    Q7 = U4.T @ S
    Q8 = -U2.T @ S

    m = len(J)
    jj, kk = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    chain = dJ[kk] <= dJ[jj]  # k <= j (the support of i is a chain)
    j_not_i = bJ[jj] != i
    k_not_j = bJ[kk] != bJ[jj]

    # the cells of tau_i (i deepest), then those of tau_j and tau_k where they differ from i
    j, k = J[jj[chain]], J[kk[chain]]
    D2q[ip, j, k] = P2[chain]
    Dqv[ip, k, j] = -P1[chain]

    sel = chain & j_not_i
    j, k = J[jj[sel]], J[kk[sel]]
    D2q[j, k, ip] = D2q[j, ip, k] = Q1[sel]
    Dqv[j, k, ip] = P1[sel]
    Dqv[j, ip, k] = Q2[sel]
    D2v[j, k, ip] = D2v[j, ip, k] = -P3[sel]
    DM[k, j, ip] = DM[j, k, ip] = P4[sel]

    sel = chain & k_not_j
    j, k = J[jj[sel]], J[kk[sel]]
    D2q[ip, k, j] = P2[sel]
    D2q[k, ip, j] = Q3[sel]
    D2v[ip, j, k] = D2v[ip, k, j] = P3[sel]
    Dqv[ip, j, k] = Q4[sel]
    Dqv[k, j, ip] = Q5[sel]
    DM[k, ip, j] = DM[ip, k, j] = P5[sel]

    sel = chain & k_not_j & j_not_i
    j, k = J[jj[sel]], J[kk[sel]]
    D2q[k, j, ip] = Q3[sel]
    D2v[k, ip, j] = D2v[k, j, ip] = P6[sel]
    Dqv[k, ip, j] = Q6[sel]

    sel = chain & k_not_j & ~j_not_i
    D2v[J[kk[sel]], J[jj[sel]], ip] = Q7[sel]

    sel = chain & ~k_not_j
    D2v[ip, J[jj[sel]], J[kk[sel]]] = Q8[sel]


# -- the two forms -------------------------------------------------------------------------


def _support_columns(robot, cols, colbody):
    depth = np.asarray(robot.topology.depth)
    out = []
    for i in range(robot.num_bodies):
        J = np.concatenate([cols[b] for b in robot.topology.support[i]])
        out.append((J, colbody[J], depth[colbody[J]]))
    return out


def idsva_so_body_frame(robot: Robot, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
    """IDSVA-SO with every contraction in the frame of the deepest body (relaxed tensors)."""
    NB = robot.num_bodies
    rel, G, cols, colbody = relaxed_map(robot)
    fw = forward_sweep(robot, q, qd, qdd, f_ext, gravity)
    # each body's support columns, carried down into its frame: X_i (parent's) | own
    names = ("S", "psid", "psidd", "Sd")
    down = [None] * NB
    for i, body in enumerate(robot.bodies):
        own = [fw[n][i] for n in names]
        if body.parent >= 0:
            own = [np.hstack([fw["Xup"][i] @ up, o]) for up, o in zip(down[body.parent], own)]
        down[i] = own
    IC = [I.copy() for I in fw["I"]]
    BC = [B.copy() for B in fw["B"]]
    F = [f.copy() for f in fw["f"]]
    T = tuple(np.zeros((rel.nv,) * 3) for _ in range(4))
    support = _support_columns(robot, cols, colbody)
    for i in reversed(range(NB)):
        J, bJ, dJ = support[i]
        for ip in cols[i]:
            _contract_column(T, ip, i, IC[i], BC[i], F[i], down[i], J, bJ, dJ)
        p = robot.bodies[i].parent
        if p >= 0:
            X = fw["Xup"][i]
            IC[p] += X.T @ IC[i] @ X
            BC[p] += X.T @ BC[i] @ X
            F[p] += X.T @ F[i]
    return T, G


def idsva_so_world_frame(robot: Robot, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
    """IDSVA-SO with every column, inertia and force in the world frame (relaxed tensors)."""
    NB = robot.num_bodies
    rel, G, cols, colbody = relaxed_map(robot)
    fw = forward_sweep(robot, q, qd, qdd, f_ext, gravity)
    names = ("S", "psid", "psidd", "Sd")
    W = {n: np.zeros((6, rel.nv)) for n in names}
    IC, BC, F = [None] * NB, [None] * NB, [None] * NB
    X0 = [None] * NB  # world -> body i (motion)
    for i, body in enumerate(robot.bodies):
        X0[i] = fw["Xup"][i] if body.parent < 0 else fw["Xup"][i] @ X0[body.parent]
        Xw = plux_inv(X0[i])  # body i -> world
        for n in names:
            W[n][:, cols[i]] = Xw @ fw[n][i]
        IC[i] = X0[i].T @ fw["I"][i] @ X0[i]
        BC[i] = X0[i].T @ fw["B"][i] @ X0[i]
        F[i] = X0[i].T @ fw["f"][i]
    T = tuple(np.zeros((rel.nv,) * 3) for _ in range(4))
    support = _support_columns(robot, cols, colbody)
    for i in reversed(range(NB)):
        J, bJ, dJ = support[i]
        world = tuple(W[n][:, J] for n in names)
        for ip in cols[i]:
            _contract_column(T, ip, i, IC[i], BC[i], F[i], world, J, bJ, dJ)
        p = robot.bodies[i].parent
        if p >= 0:
            IC[p] = IC[p] + IC[i]
            BC[p] = BC[p] + BC[i]
            F[p] = F[p] + F[i]
    return T, G


def uses_world_frame(robot: Robot) -> bool:
    """The world-frame form for a floating base or mimic joints, the body-frame form otherwise."""
    return robot.has_mimic or any(b.jtype is JointType.FLOATING for b in robot.bodies)


def idsva_so(robot: Robot, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
    """``(d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, dM_dq)`` in the robot's coordinates."""
    form = idsva_so_world_frame if uses_world_frame(robot) else idsva_so_body_frame
    (D2q, D2v, Dqv, DM), G = form(robot, q, qd, qdd, f_ext, gravity)
    if robot.has_mimic:
        return tuple(contract3(X, G) for X in (D2q, D2v, Dqv, DM))
    return D2q, D2v, Dqv, DM


# -- code generation -------------------------------------------------------------------
#
# The world-frame form, for every robot: every contraction is a scalar of spatial algebra, so
# the world frame serves fixed and floating bases alike and the composites are the plain sums
# the first-order gradient already forms.  Its world-frame pass runs by handle
# (inverse_dynamics_gradient's steps, on RNEA's v, a, f by handle): per dof J = S, dVdq = psid,
# dAdq = psidd, dAdv = psid + Sd (Sd enters only through that sum), per body the composites
# Yc = IC, Bc = BC and the subtree force F.  A mimic dof's columns carry its multiplier, and
# every cell is trilinear in the columns of its three indices, so the robot's cell is the sum
# of the relaxed cells mapped onto it (T = G^(x3) T_r, folded at generation time).  Which
# relaxed cell holds which contraction is found by replaying _contract_column's writes on
# symbols, the last write winning as there; each robot cell is then written once.

_TENSORS = ("d2tau_dq2", "d2tau_dqd2", "d2tau_dqdqd", "dM_dq")
_U = {  # name: (matrix, transposed, column of j it applies to); "+": dVdq + Sd (= dAdv)
    "U1": ("A3", True, "S"), "U2": ("A1", True, "S"), "U4": ("A6", False, "S"), "U5": ("A2", False, "Pd"),
    "U8": ("A4", False, "S"), "U9": ("A0", False, "S"), "U10": ("Bic", False, "S"),
    "U11": ("Bic", True, "S"), "U12": ("Bic", True, "Pd"), "U13": ("A1", False, "S")}
_VALUES = {  # cell value of pair (j, k): sum of (sign, U of j (or U-sum), column of k)
    "P1": [(1, ("U11",), "Pd")], "P2": [(1, ("U9",), "Pdd"), (1, ("U8",), "Pd"), (-1, ("U12",), "Pd")],
    "P3": [(-1, ("U11",), "S")], "P4": [(1, ("U13",), "S")], "P5": [(1, ("U9",), "S")],
    "P6": [(1, ("U10",), "S")], "Q1": [(1, ("U1",), "Pd"), (1, ("U2",), "Pdd")],
    "Q2": [(1, ("U1",), "S"), (1, ("U2",), "+")], "Q3": [(1, ("U3",), "S")],
    "Q4": [(1, ("U5",), "S"), (1, ("U8",), "S"), (1, ("U9",), "+")], "Q5": [(1, ("U6",), "S")],
    "Q6": [(1, ("U7",), "S")], "Q7": [(1, ("U4",), "S")], "Q8": [(-1, ("U2",), "S")]}


def _writes(ip: int, J, bJ, dJ, i: int):
    """_contract_column's writes for column ``ip`` of body ``i``, in its order: ``(tensor, cell,
    value name, sign, j, k)`` (``J``: the support's dofs, ``bJ``, ``dJ`` their bodies and depths)."""
    m = len(J)
    pairs = [(a, b) for a in range(m) for b in range(m) if dJ[b] <= dJ[a]]
    D2q, D2v, Dqv, DM = range(4)
    rules = [  # (condition on (j_not_i, k_not_j), [(tensor, cell of (ip, j, k), value, sign)])
        (lambda jn, kn: True, [(D2q, "ijk", "P2", 1), (Dqv, "ikj", "P1", -1)]),
        (lambda jn, kn: jn, [(D2q, "jki", "Q1", 1), (D2q, "jik", "Q1", 1), (Dqv, "jki", "P1", 1),
                             (Dqv, "jik", "Q2", 1), (D2v, "jki", "P3", -1), (D2v, "jik", "P3", -1),
                             (DM, "kji", "P4", 1), (DM, "jki", "P4", 1)]),
        (lambda jn, kn: kn, [(D2q, "ikj", "P2", 1), (D2q, "kij", "Q3", 1), (D2v, "ijk", "P3", 1),
                             (D2v, "ikj", "P3", 1), (Dqv, "ijk", "Q4", 1), (Dqv, "kji", "Q5", 1),
                             (DM, "kij", "P5", 1), (DM, "ikj", "P5", 1)]),
        (lambda jn, kn: kn and jn, [(D2q, "kji", "Q3", 1), (D2v, "kij", "P6", 1), (D2v, "kji", "P6", 1),
                                    (Dqv, "kij", "Q6", 1)]),
        (lambda jn, kn: kn and not jn, [(D2v, "kji", "Q7", 1)]),
        (lambda jn, kn: not kn, [(D2v, "ijk", "Q8", 1)]),
    ]
    for cond, writes in rules:
        for t, cell, name, sign in writes:  # one numpy statement: every selected pair in turn
            for a, b in pairs:
                if cond(bJ[a] != i, bJ[b] != bJ[a]):
                    idx = {"i": ip, "j": J[a], "k": J[b]}
                    yield t, tuple(idx[c] for c in cell), name, sign, J[a], J[b]


class Cells:
    """The generation-time map of the four tensors: each robot cell's terms ``(coefficient, value
    name, column dof, j dof, k dof)``, dofs as positions in :attr:`dofs` (the relaxed columns)."""

    def __init__(self, robot: Robot):
        self.robot = robot
        self.dofs = []
        """``(body, column, v index)`` of every relaxed column, in body order."""
        for b in robot.bodies:
            self.dofs += [(b.index, k, b.v_index + k) for k in range(motion_subspace(b).shape[1])]
        of_body: dict[int, list] = {}
        for d, (b, *_rest) in enumerate(self.dofs):
            of_body.setdefault(b, []).append(d)
        depth = robot.topology.depth
        last: dict[tuple, tuple] = {}
        for i in reversed(range(robot.num_bodies)):
            J = [d for b in robot.topology.support[i] for d in of_body[b]]
            bJ = [self.dofs[d][0] for d in J]
            dJ = [depth[b] for b in bJ]
            for ip in of_body[i]:
                for t, cell, name, sign, j, k in _writes(ip, J, bJ, dJ, i):
                    last[(t, cell)] = (name, sign, ip, j, k)
        self.terms: dict[tuple, list] = {}
        """``(tensor, flat index)`` -> its terms, in column order."""
        nv = robot.nv
        for (t, cell), (name, sign, ip, j, k) in sorted(last.items()):
            x, y, z = (self.dofs[d][2] for d in cell)
            # the world steps' columns carry the multipliers: a term is the relaxed cell times its three
            self.terms.setdefault((t, (x * nv + y) * nv + z), []).append((float(sign), name, ip, j, k))
        for terms in self.terms.values():
            terms.sort(key=lambda term: term[2])
        # the columns whose terms meet in one robot cell (a mimic's and its mimicked joint's) go together
        group = list(range(len(self.dofs)))

        def root(d):
            while group[d] != d:
                d = group[d]
            return d

        for terms in self.terms.values():
            for term in terms[1:]:
                group[root(term[2])] = root(terms[0][2])
        self.groups: dict[int, list] = {}
        """A group's first column -> the ``(tensor, flat index)`` of the cells its columns write."""
        for key, terms in self.terms.items():
            self.groups.setdefault(root(terms[0][2]), []).append(key)

    def zeros(self, t: int) -> list[tuple[int, int]]:
        """Tensor ``t``'s structural zeros (no chain holds the cell) as ranges of flat indices."""
        from grid_core.emit.sweeps import ranges

        return ranges(self.robot.nv ** 3, lambda c: (t, c) not in self.terms)


def _unit(c: int) -> list[float]:
    return [1.0 if r == c else 0.0 for r in range(6)]


def _mat(cols) -> list[list]:
    """The 6x6 matrix of six column vectors."""
    return [[cols[c][r] for c in range(6)] for r in range(6)]


def _mm(A, B) -> list[list]:
    return [[sum_terms((A[r][m], B[m][c]) for m in range(6)) for c in range(6)] for r in range(6)]


def _madd(*terms) -> list[list]:
    """``sum(sign * M)`` of ``(sign, M)`` pairs."""
    return [[sum_terms((s, M[r][c]) for s, M in terms) for c in range(6)] for r in range(6)]


def _column_matrices(scope: Scope, Yc, Bc, F, Si, Pd, Pdd, Pv) -> dict:
    """A column's matrices A0..A7, Bic (each entry bound once) from its body's composites (``Yc``:
    the 10 inertia parameters, ``Bc``: 36 entries by columns, ``F``) and its columns S, psid, psidd,
    psid + Sd."""
    IC = ss.sym6_full(ss.sym6_from_rbi(Yc))
    BC = [[Bc[6 * c + r] for c in range(6)] for r in range(6)]

    def crm(s):
        return _mat([ss.cross_motion(s, _unit(c)) for c in range(6)])

    def crf(s):
        return _mat([ss.cross_force(s, _unit(c)) for c in range(6)])

    def icrf(h):
        h = scope.let_all(h, "h")
        return _mat([ss.cross_force(_unit(c), h) for c in range(6)])

    def let(M, hint):
        return [scope.let_all(row, hint) for row in M]

    A = {"A0": let(icrf(matvec(IC, Si)), "A")}
    A["A1"] = let(_madd((1.0, _mm(crf(Si), IC)), (-1.0, _mm(IC, crm(Si)))), "A")
    A["Bic"] = let(_madd((1.0, A["A1"]), (1.0, A["A0"])), "A")
    A["A2"] = let(_madd((1.0, A["A0"]), (-1.0, A["A1"])), "A")
    A["A3"] = let(_madd((1.0, _mm(crf(Pd), IC)), (-1.0, _mm(IC, crm(Pd))), (1.0, icrf(matvec(IC, Pd))),
                        (1.0, _mm(crf(Si), BC)), (-1.0, _mm(BC, crm(Si)))), "A")
    A["A4"] = let(icrf(matTvec(BC, Si)), "A")
    A["A5"] = let(icrf(_sum(matvec(BC, Pd), matvec(IC, Pdd), ss.cross_force(Si, F))), "A")
    A["A6"] = let(_madd((1.0, _mm(crf(Si), IC)), (1.0, A["A0"])), "A")
    A["A7"] = let(icrf(_sum(matvec(BC, Si), matvec(IC, Pv))), "A")
    return A


class ColumnSteps:
    """The contractions of every group of columns, on the world-frame arrays ``w`` (the
    first-order gradient's, by handle) and the output vectors ``out`` (name -> flat index)."""

    def __init__(self, cells: Cells, w: dict, out: dict):
        self.cells, self.w, self.out = cells, w, out

    def _col(self, d: int, which: str):
        b, k = self.cells.dofs[d][:2]
        name = {"S": "J", "Pd": "dVdq", "Pdd": "dAdq", "+": "dAdv"}[which]
        return self.w[name].get((b, k))

    def _matrices(self, scope: Scope, ip: int) -> dict:
        """Column ``ip``'s matrices A0..A7, Bic (:func:`_column_matrices`)."""
        w, b = self.w, self.cells.dofs[ip][0]
        return _column_matrices(scope, [w["Yc"](b, x) for x in range(10)], [w["Bc"](b, x) for x in range(36)],
                                w["F"].get(b), *(self._col(ip, x) for x in ("S", "Pd", "Pdd", "+")))

    def group(self, scope: Scope, first: int) -> None:
        """Every cell of the group of columns led by ``first``, written once (a mimic's terms
        summed), its columns' matrices formed in turn."""
        cells = self.cells
        keys = cells.groups[first]
        by_col: dict[int, list] = {}
        for key in keys:
            for term in cells.terms[key]:
                by_col.setdefault(term[2], []).append((key, term))
        started: set = set()
        for ip in sorted(by_col):
            b, k, v = cells.dofs[ip]
            scope.comment(f"column {v} (body {b}, joint column {k}): its matrices, then its cells")
            A = self._matrices(scope, ip)
            U: dict = {}

            def u_vec(name, j):
                if (name, j) not in U:
                    U[(name, j)] = scope.let_all(_u_vector(A, name, lambda x: self._col(j, x)), "u")
                return U[(name, j)]

            for (t, flat), (coef, name, _, j, kk) in by_col[ip]:
                value = _value(name, coef, lambda un: u_vec(un, j), lambda x: self._col(kk, x))
                target = self.out[_TENSORS[t]](flat)
                (scope.add_to if (t, flat) in started else scope.assign)(target, value)
                started.add((t, flat))


LOOP_CELLS = 4000
"""Above this many written cells (on one chain of columns) the contractions are loops over baked
tables (:class:`ColumnLoops`) instead of straight-line code (:class:`ColumnSteps`), unless the
``contractions`` option says otherwise.  Straight-line code grows with the cells and the
(column, support column) pairs: iiwa14's 1232 cells are 0.5 MB of C++ a layout, atlas's 8814 were
3.5 MB and g1's 37128 7.7 MB, too large to compile; the loops' code is the same few hundred lines
for every robot, its tables one entry a cell.  Below it (iiwa14, hyq, panda) the unrolled form
stays: robot constants fold and it runs faster."""

_SLOTS = (*_VALUES, "-P1", "-P3")
"""The values a pair's cells take, in the loops' order: P1..Q8 and the two written negated."""


def contraction_form(robot: Robot, cells: "Cells", option: str) -> str:
    """``unrolled`` or ``loops``: the option where set, else loops above :data:`LOOP_CELLS` cells.
    A robot cell summing several relaxed cells (a mimic joint's) has no loop form yet."""
    summed = any(len(terms) > 1 for terms in cells.terms.values())
    if option == "auto":
        return "loops" if len(cells.terms) > LOOP_CELLS and not summed else "unrolled"
    if option == "loops" and summed:
        raise CodegenError(f"idsva_so: {robot.name}'s mimic cells sum several relaxed cells, which the loop "
                           "form of the contractions does not do yet; take contractions='unrolled'")
    return option


class ColumnLoops:
    """The contractions as loops over baked tables (:func:`~grid_core.emit.storage.index_table`):
    per column its matrices, per support column ``j`` (a row) its vectors U, per pair ``(j, k)``
    the values it writes and then its cells, each robot cell written once (the same cell table as
    :class:`ColumnSteps`, whose form this is, the value of each cell the same expression).  The
    columns are read at offsets from the world arrays' declarations (``w``, the first-order
    gradient's fields, by handle), whose folded constants must be stored first
    (:meth:`~grid_core.emit.storage.Array.store_known`, :meth:`store_known`)."""

    COLUMNS = ("J", "dVdq", "dAdq", "dAdv")
    READ = (*COLUMNS, "Yc", "Bc", "F")

    def __init__(self, cells: Cells, w: dict, out: dict, pfx: str):
        self.cells, self.w, self.out, self.pfx = cells, w, out, pfx
        offsets = {x: w[x].field.offsets([d[:2] for d in cells.dofs]) for x in self.COLUMNS}
        if any(offsets[x] != offsets["J"] for x in self.COLUMNS):
            raise CodegenError("idsva_so: the world columns J, dVdq, dAdq, dAdv are not laid out alike")
        at = offsets["J"]
        tree: dict = {}  # column -> j -> k -> tensor -> [(cell, slot)]
        for (t, flat), [(sign, name, ip, j, k)] in sorted(cells.terms.items()):
            slot = _SLOTS.index(name if sign > 0 else "-" + name)
            tree.setdefault(ip, {}).setdefault(j, {}).setdefault(k, [[] for _ in _TENSORS])[t].append((flat, slot))
        self.slots = sorted({slot for js in tree.values() for ks in js.values() for ts in ks.values()
                             for cells_ in ts for _, slot in cells_})
        """The slots some cell takes (the others are not computed)."""
        body = [cells.dofs[ip][0] for ip in tree]
        self.tables = {"COL_J": [at[ip] for ip in tree], "COL_YC": w["Yc"].field.offsets(body),
                       "COL_BC": w["Bc"].field.offsets(body), "COL_F": w["F"].field.offsets(body)}
        rows, row_j, pairs, pair_k, first, cell, value = [0], [], [0], [], [0], [], []
        for ip, js in tree.items():
            for j, ks in js.items():
                row_j.append(at[j])
                for k, ts in ks.items():
                    pair_k.append(at[k])
                    for t in ts:
                        cell += [flat for flat, _ in t]
                        value += [self.slots.index(slot) for _, slot in t]
                        first.append(len(cell))
                pairs.append(len(pair_k))
            rows.append(len(row_j))
        self.tables.update(COL_ROWS=rows, ROW_J=row_j, ROW_PAIRS=pairs, PAIR_K=pair_k, PAIR_CELLS=first,
                           CELL=cell, CELL_VALUE=value)
        zeros = [cells.zeros(t) for t in range(len(_TENSORS))]
        self.tables.update(ZERO_RUNS=[sum(len(z) for z in zeros[:t]) for t in range(len(zeros) + 1)],
                           ZERO=[x for z in zeros for run in z for x in run])
        self.count = len(tree)

    def helpers(self) -> list:
        docs = {
            "COL_J": "each column's offset in the world columns J, dVdq, dAdq, dAdv (their declarations')",
            "COL_YC": "its body's composites: offsets in Yc, Bc, F",
            "COL_ROWS": "column c's support columns j (rows): COL_ROWS[c] .. COL_ROWS[c + 1]",
            "ROW_J": "row r's column j (offset in the world columns)",
            "ROW_PAIRS": "row r's pairs (j, k), k on j's support: ROW_PAIRS[r] .. ROW_PAIRS[r + 1]",
            "PAIR_K": "pair p's column k (offset in the world columns)",
            "PAIR_CELLS": "pair p's cells of tensor t (" + ", ".join(_TENSORS) + "): PAIR_CELLS[4 p + t] .. "
                          "PAIR_CELLS[4 p + t + 1]",
            "CELL": "each cell's index in its tensor, and the value it takes (of the pair's values)",
            "ZERO_RUNS": "tensor t's runs of structural zeros: ZERO_RUNS[t] .. ZERO_RUNS[t + 1]",
            "ZERO": "run z's cells: ZERO[2 z] .. ZERO[2 z + 1]",
        }
        return [index_table(f"{self.pfx}_{name}", values, docs.get(name, ""), per_line=16)
                for name, values in self.tables.items()]

    def store_known(self, scope: Scope) -> None:
        """Store the world arrays' folded constants the loops read (exact zeros, robot constants)."""
        for x in self.READ:
            self.w[x].store_known(scope)

    def zeros(self, z: str, t: int) -> list:
        """Zero run ``z`` (a C++ int expression) of tensor ``t``."""
        return [n.For(f"int x = {self.pfx}_ZERO[2 * {z}]", f"x < {self.pfx}_ZERO[2 * {z} + 1]", "++x",
                      [n.Stmt(f"{self.out[_TENSORS[t]]('x')} = T(0)")])]

    def zero_run(self, z: str, t: int) -> n.Stmt:
        """Zero run ``z`` of tensor ``t`` in the per-state code (``grid_zero_run``: nothing to store
        in the CPU build, which zeroes each row whole before storing its cells)."""
        return n.Stmt(f"grid_zero_run({self.out[_TENSORS[t]].base}, {self.pfx}_ZERO[2 * {z}], "
                      f"{self.pfx}_ZERO[2 * {z} + 1])")

    def zero_runs(self, t: int) -> tuple[int, int]:
        """Tensor ``t``'s zero runs ``[first, end)`` (indices of the ZERO table's runs)."""
        return self.tables["ZERO_RUNS"][t], self.tables["ZERO_RUNS"][t + 1]

    def column(self, c: str) -> list:
        """The statements of column ``c`` (a C++ int expression): its rows and their pairs, in loops."""
        pfx, w = self.pfx, self.w
        scope = Scope("a")
        scope.stmt(f"const int cj = {pfx}_COL_J[{c}], yc = {pfx}_COL_YC[{c}], bc = {pfx}_COL_BC[{c}], "
                   f"cf = {pfx}_COL_F[{c}]")

        def cols(offset):
            return lambda x: [w[{"S": "J", "Pd": "dVdq", "Pdd": "dAdq", "+": "dAdv"}[x]].indexed(offset, r)
                              for r in range(6)]

        A = _column_matrices(scope, [w["Yc"].indexed("yc", x) for x in range(10)],
                             [w["Bc"].indexed("bc", x) for x in range(36)], [w["F"].indexed("cf", x) for x in range(6)],
                             *(cols("cj")(x) for x in ("S", "Pd", "Pdd", "+")))
        row = Scope("u")
        row.stmt(f"const int rj = {pfx}_ROW_J[r]")
        U = {name: row.let_all(_u_vector(A, name, cols("rj")), "u") for name in (*_U, "U3", "U6", "U7")}
        pair = Scope("v")
        pair.stmt(f"const int pk = {pfx}_PAIR_K[p]")
        values = []
        for slot in self.slots:
            name = _SLOTS[slot]
            values.append(pair.let(_value(name.lstrip("-"), -1.0 if name[0] == "-" else 1.0, U.get, cols("pk")), "v"))
        pair.stmt(f"const T value[{len(values)}] = {{{', '.join(render(x) for x in values)}}}")
        for t, name in enumerate(_TENSORS):
            pair.extend([n.For(f"int e = {pfx}_PAIR_CELLS[4 * p + {t}]", f"e < {pfx}_PAIR_CELLS[4 * p + {t + 1}]", "++e",
                               [n.Stmt(f"{self.out[name](f'{pfx}_CELL[e]')} = value[{pfx}_CELL_VALUE[e]]")])])
        row.extend([n.For(f"int p = {pfx}_ROW_PAIRS[r]", f"p < {pfx}_ROW_PAIRS[r + 1]", "++p", pair.body())])
        scope.extend([n.For(f"int r = {pfx}_COL_ROWS[{c}]", f"r < {pfx}_COL_ROWS[{c} + 1]", "++r", row.body())])
        return scope.body()


def _u_vector(A: dict, name: str, col) -> list:
    """Vector ``name`` (U1..U13) of a column's matrices ``A`` and a support column ``j`` (``col(x)``:
    its S, Pd, Pdd or "+" = psid + Sd)."""
    if name == "U3":  # A3 Pd + A1 Pdd + A5 S
        return _sum(matvec(A["A3"], col("Pd")), matvec(A["A1"], col("Pdd")), matvec(A["A5"], col("S")))
    if name == "U6":  # Bic Pd + A7 S
        return _sum(matvec(A["Bic"], col("Pd")), matvec(A["A7"], col("S")))
    if name == "U7":  # A3 S + A1 (Pd + Sd)
        return _sum(matvec(A["A3"], col("S")), matvec(A["A1"], col("+")))
    M, transposed, which = _U[name]
    return (matTvec if transposed else matvec)(A[M], col(which))


def _value(name: str, coef: float, u, col):
    """``coef`` times cell value ``name`` (P1..Q8) of a pair ``(j, k)``: ``u(U)`` is j's vector U,
    ``col(x)`` k's column x."""
    return sum_terms((sign * coef, x, y) for sign, (un,), which in _VALUES[name] for x, y in zip(u(un), col(which)))


def _sum(*vs) -> list:
    return [sum_terms([(x,) for x in xs]) for xs in zip(*vs)]


def _out(layers, local: bool) -> dict:
    io = layers.vectors(local)
    return {name: io[name] for name in _TENSORS}


@attrs.frozen
class IdsvaSOOptions(sweeps.SweepOptions):
    """idsva_so's options: the block layout's sweep form, and the form of the contractions."""

    contractions: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", "unrolled", "loops")))
    """``unrolled`` (straight-line code per cell, robot constants folded), ``loops`` (loops over baked
    tables of columns, pairs and cells: code of one size for every robot), or ``auto``: loops above
    :data:`LOOP_CELLS` written cells (go2, atlas, g1), unrolled below (iiwa14, hyq, panda)."""


class IdsvaSOEmitter(Emitter):
    Options = IdsvaSOOptions
    global_inputs = ("f_ext",)  # read in place by RNEA's forward step
    nullable_inputs = ("f_ext",)
    global_outputs = _TENSORS  # 4 nv^3 values: written in place (atlas: 864 KB in float64)
    composes = ("inverse_dynamics", "inverse_dynamics_gradient")
    in_default_set = False  # a large library even in the loop form (the -O3 build of its world pass); name it to build it
    sweep_doc = "Sweep form (RNEA's and the world frame's)"

    def block_threads_hint(self, robot: Robot) -> int:
        return 32 * robot.nv  # the column groups, one warp each

    @staticmethod
    def _form(layers) -> str:
        return contraction_form(layers.robot, Cells(layers.robot), layers.ctx.knob("contractions", "auto", "auto")[0])

    def helpers(self, layers) -> list:
        if self._form(layers) == "unrolled":
            return []
        return self._steps(layers, False)[2].helpers()

    def inner_doc(self, layers) -> str:
        if self._form(layers) == "unrolled":
            return ""
        return (f"Contractions: loops over baked tables ({len(Cells(layers.robot).terms)} cells written, above the "
                f"{LOOP_CELLS} of the unrolled form).")

    def direct_outputs(self, layers) -> frozenset[str]:
        # the loop form assigns each written cell once (its zeros in runs): on the CPU into a thread's
        # image of each tensor, the rows written from it, not a group's local copy (3.5 MB on atlas)
        return frozenset(_TENSORS) if self._form(layers) == "loops" else frozenset()

    def _steps(self, layers, local: bool):
        rnea = layers.steps("inverse_dynamics", local=local, every_body=("v",))
        world = layers.steps("inverse_dynamics_gradient", local=local, rnea=rnea)
        cells, out = Cells(layers.robot), _out(layers, local)
        if self._form(layers) == "loops":
            return rnea, world, ColumnLoops(cells, world.w, out, layers.pfx)
        return rnea, world, ColumnSteps(cells, world.w, out)

    def inner_body(self, layers) -> list:
        robot = layers.robot
        rnea, world, cols = self._steps(layers, False)
        form = sweeps.form_of(layers.ctx)
        zeros = [sweeps.span(a, b, lambda sc, c, t=t: sc.assign(cols.out[_TENSORS[t]](c), 0.0), var="c")
                 for t in range(4) for a, b in cols.cells.zeros(t)]
        head = [
            *ss.gravity_statements(),
            n.Comment("RNEA's sweeps (inverse dynamics' steps, by handle): v of every body, a, f summed over subtrees"),
            *sweeps.forward(robot, rnea.forward, form),
            *sweeps.backward_gather(robot, rnea.backward, form),
            n.Comment("the world frame (the first-order gradient's steps, by handle): per dof J, psid, psidd,\n"
                      "psid + Sd; per body Y, B and F, then the composites IC, BC, leaves to root"),
            *sweeps.forward(robot, world.forward, form),
        ]
        if isinstance(cols, ColumnLoops):
            known = Scope("t")
            cols.store_known(known)
            return [
                *head,
                n.Comment("the constants the world pass folded, stored: the loops read the columns at run-time offsets"),
                n.If("GRID_TID == 0", known.body()), n.Sync(),
                *sweeps.backward_gather(robot, world.gather, form),
                n.Comment(f"the contractions of each column ({cols.count}), a thread each: loops over its support "
                          "columns j and the pairs (j, k), and the structural zeros"),
                n.BlockStrideLoop("c", cols.count, cols.column("c")),
                *sweeps.fan_out_runs([sweeps.span(*cols.zero_runs(t), lambda sc, z, t=t: sc.extend(cols.zeros(z, t)),
                                                  var="z") for t in range(4)]),
            ]
        return [
            *head,
            *sweeps.backward_gather(robot, world.gather, form),
            n.Comment(f"the contractions of each group of columns, one warp each ({len(cols.cells.groups)} groups), "
                      "and the structural zeros"),
            *sweeps.fan_out([(g,) for g in sorted(cols.cells.groups)], cols.group, per_warp=True),
            *sweeps.fan_out_runs(zeros),
        ]

    def state_body(self, layers) -> list:
        robot = layers.robot
        rnea, world, cols = self._steps(layers, True)
        scope = Scope("t")

        def complete(sc, c):
            if robot.bodies[c].parent >= 0:
                rnea.backward(sc, robot.bodies[c].parent, [c])

        sweeps.depth_first(robot, scope, rnea.arr, rnea.forward, complete)
        for b in robot.bodies:
            world.forward(scope, b)
        for b in reversed(robot.bodies):
            if robot.topology.children[b.index]:
                world.gather(scope, b.index, robot.topology.children[b.index])
        if isinstance(cols, ColumnLoops):
            cols.store_known(scope)
            scope.extend([n.For("int c = 0", f"c < {cols.count}", "++c", cols.column("c"))])
        else:
            for g in sorted(cols.cells.groups):
                cols.group(scope, g)
        zeros = []
        for t in range(4):
            if isinstance(cols, ColumnLoops):
                first, end = cols.zero_runs(t)
                zeros.append(n.For(f"int z = {first}", f"z < {end}", "++z", [cols.zero_run("z", t)]))
                continue
            for a, b in cols.cells.zeros(t):
                zeros.append(n.For(f"int c = {a}", f"c < {b}", "++c", [n.Stmt(f"{cols.out[_TENSORS[t]]('c')} = T(0)")]))
        where = ("the stack: the contractions' loops read the world arrays at run-time offsets"
                 if isinstance(cols, ColumnLoops) else "registers (or the stack): every index is a constant")
        return [*ss.gravity_statements(),
                layers.locals([*(rnea.arr[x] for x in ("v", "a", "f")), *world.w.values()], where),
                *scope.body(), *zeros]


class IdsvaSO(Algorithm):
    name = "idsva_so"
    summary = ("second-order derivatives of inverse dynamics (d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, "
               "dM_dq), each (nv, nv, nv), by IDSVA (tangent-space q)")
    math = r"""
Forward sweep, per column :math:`c` of body :math:`b` with parent :math:`\lambda`:
:math:`\dot\Psi_c = v_\lambda \times S_c`, :math:`\ddot\Psi_c = a_\lambda \times S_c + v_\lambda
\times \dot\Psi_c`, :math:`\dot S_c = v_b \times S_c`; per body
:math:`B_b = v_b \times^* I_b - I_b\, v_b \times + \overline{I_b v_b}` (with
:math:`\bar h\, x = x \times^* h`).  Backward sweep: composites :math:`I^C_i, B^C_i, f^C_i` of
the subtree of :math:`i`, and for each column :math:`S_i` of body :math:`i`

.. math::

   A_0 = \overline{I^C_i S_i}, \quad A_1 = S_i \times^* I^C_i - I^C_i\, S_i \times, \quad
   B^{ic} = A_1 + A_0, \quad A_2 = A_0 - A_1,

   A_3 = \dot\Psi_i \times^* I^C_i - I^C_i\, \dot\Psi_i \times + \overline{I^C_i \dot\Psi_i}
         + S_i \times^* B^C_i - B^C_i\, S_i \times, \quad A_4 = \overline{B^{C\,T}_i S_i},

   A_5 = \overline{B^C_i \dot\Psi_i + I^C_i \ddot\Psi_i + S_i \times^* f^C_i}, \quad
   A_6 = S_i \times^* I^C_i + A_0, \quad
   A_7 = \overline{B^C_i S_i + I^C_i (\dot\Psi_i + \dot S_i)} ;

then for every chain :math:`k \preceq j \preceq i` the cells are bilinear forms of these
matrices in the columns of :math:`j` and :math:`k`, e.g.
:math:`\partial^2 \tau_i / \partial q_j \partial q_k = S_j^T A_0^T \ddot\Psi_k +
(A_4 S_j - B^{ic\,T} \dot\Psi_j)^T \dot\Psi_k` and
:math:`\partial M_{ki} / \partial q_j = S_k^T A_0 S_j` (Singh, Russell & Wensing, IROS 2022 and
T-RO 2024; the full list of cells is in :func:`grid_algorithms.idsva_so._contract_column`).  Body-frame form:
all of it in the frame of :math:`i`; world-frame form: all in the world frame.  Mimic:
:math:`T = G^{\otimes 3} T_r` on the relaxed tree.  On a free-flyer,
:math:`\partial^2\tau/\partial q_j\partial q_k - \partial^2\tau/\partial q_k\partial q_j =
\partial_q \tau\, [e_k, e_j]` (tangent derivatives do not commute).
"""
    review = ParallelismReview(
        P1=done("block layout: RNEA's sweeps and the world-frame pass with its composite gather (the "
                "first-order gradient's steps, by handle) run level by level, the bodies of a level in "
                "parallel, one barrier per level; the contractions need only the finished composites, so "
                "they leave the sweep entirely"),
        P2=todo("done: every column's contractions at once, one warp each (a mimic joint's column with its "
                "mimicked joint's: their cells sum), no barrier between them, and the structural zeros a "
                "fan-out of index ranges; above LOOP_CELLS written cells (go2, atlas, g1) the loop form: code of "
                "one size for every robot (loops over baked tables of columns, (j, k) pairs and cells, the "
                "columns read at offsets from the world arrays' declarations), one column a thread, the zero "
                "runs a thread each. Left, the dominant lever: a column's lane walks the k <= j pairs of its support "
                "serially (the deepest column's m^2 / 2 pairs are the critical path); fan the (i, j, k) "
                "chain cells over threads by storing the per-column matrices A0..A7, Bic and the per-(i, j) "
                "vectors u in a spillable arena region"),
        P3=done("only the composites IC, BC, F carry through the backward sweep; per column the matrices "
                "A0..A7 are formed once and per (column, support column) pair the vectors u once, so a cell "
                "costs one to three dot products of 6; Sd enters only as psid + Sd (the gradient's dAdv); "
                "one XImats pass"),
        P4=todo("done: the cell table (which contraction lands in which cell, the reference's writes "
                "replayed on symbols; a mimic's relaxed cells summed into the robot's) and the structural "
                "zeros (triples off every chain) are baked at generation time, each cell written once; robot "
                "constants folded (the loop form: the cell table and zero runs baked as index tables, each "
                "pair computing only the values some cell of the robot takes). Left: the four nv^3 outputs are written in place in global memory: a warp "
                "of states does not fit 48 KB of staging (iiwa14: 11 KB a state), and the ring of "
                "grid_core.emit.ring takes one output; a ring over several outputs would coalesce the stores"),
        notes="the generated code takes the world-frame form for every robot (fixed or floating base, mimic "
              "joints: every cell is trilinear in its three columns, so the mimic's multiplier rides on its "
              "column); the reference takes the body-frame form for fixed-base trees without mimic joints",
    )

    depends_on = ("inverse_dynamics", "inverse_dynamics_gradient")
    emitter = IdsvaSOEmitter

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "qdd")

    def outputs(self, robot: Robot, **options):
        n = robot.nv
        return (
            Port("d2tau_dq2", (n, n, n), "[i, j, k] = d/dq_k (d tau_i / d q_j), tangent space"),
            Port("d2tau_dqd2", (n, n, n), "[i, j, k] = d2 tau_i / (d qd_j d qd_k)"),
            Port("d2tau_dqdqd", (n, n, n), "[i, j, k] = d2 tau_i / (d q_j d qd_k)"),
            Port("dM_dq", (n, n, n), "[i, j, k] = d M_ij / d q_k"),
        )

    def reference(self, ctx, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
        return idsva_so(ctx.robot, q, qd, qdd, f_ext, gravity)

    def arenas(self, robot: Robot, options=None):
        return ()  # the world-frame arrays are the first-order gradient's, the sweep state RNEA's

    def spill_rungs(self, robot: Robot, options=None):
        grad = "inverse_dynamics_gradient"
        return spill_ladder(("RNEA's sweep state in global", {callee_rung(grad, 1)},
                             "what the first-order gradient's rung 1 spills: the v/a/f band"),
                            ("the world-frame band too", {callee_rung(grad, 2)},
                             "its rung 2: the world-frame arrays (columns, composites) go to d_workspace as well"))


@hookimpl
def grid_register_algorithms():
    return [IdsvaSO]
