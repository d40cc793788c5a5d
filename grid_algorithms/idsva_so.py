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

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.model import JointType, Robot
from grid_core.model.joints import body_q, body_v, joint_transform, motion_subspace
from grid_core.model.spatial import crf, crm, gravity_accel, icrf, plux_inv
from grid_core.review import ParallelismReview, todo

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
        P1=todo("the forward sweep (v, a, psid, psidd, Sd per column) and the composite "
                "accumulation are per-body chains; bodies of one BFS level are independent, the "
                "composites' parent accumulation an atomicAdd or a per-level segmented reduction. "
                "The contractions need only the finished composites of i, so they leave the "
                "sweep entirely (P3)"),
        P2=todo("the dominant lever: every chain cell (i, j, k) of the four nv^3 tensors is an "
                "independent handful of 6-vector dot products once the per-column 6x6 matrices "
                "A0..A7 (per i) and the vectors u1..u13 (per (i, j)) are known. Plan: one parallel "
                "pass builds the A's for all columns, one the u's for all (i, j) ancestor pairs, "
                "and one fans the (i, j, k) chain cells across the block (upstream's per-column "
                "forward sweep, and a world-frame slab per (i, j) pair)"),
        P3=todo("only the composites IC, BC, F need the serial backward carry: store them per "
                "body (two 6x6 matrices and a 6-vector) and run every contraction after the sweep as one "
                "parallel pass (the A's of body i depend on nothing else of the recursion)"),
        P4=todo("the nonzero cells are exactly the chains of the tree: bake the (i, j, k) chain "
                "list (or the (i, j) ancestor pairs with each k-range) offline and write only "
                "those cells; the body-frame form needs the ancestors' columns in each body's frame "
                "(nv x depth columns), laid out per (i, j) so a pair's reads coalesce; the "
                "world-frame form shares one 6 x nv column band. The free-flyer's six columns "
                "share a body: its cells with two root columns are the only doubly-written "
                "(symmetric dM_dq) ones, and need a designated single writer"),
        notes="form: body-frame for fixed-base trees without mimic joints, world-frame for a "
              "floating base or mimic joints (the relaxed tree, contracted with G afterwards)",
    )

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


@hookimpl
def grid_register_algorithms():
    return [IdsvaSO]
