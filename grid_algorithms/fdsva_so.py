"""Second-order derivatives of forward dynamics, composed from IDSVA-SO by the -Minv contraction.

``(d2qdd_dq2, d2qdd_dqd2, d2qdd_dqdqd, d2qdd_dq_dtau) = fdsva_so(q, qd, tau, f_ext=None, gravity=...)``,
four ``(nv, nv, nv)`` tensors of ``qdd = FD(q, qd, tau)``:

* ``d2qdd_dq2[i, j, k]     = d/dq_k (d qdd_i / d q_j)``  (tangent derivatives, as in
  :mod:`grid_algorithms.idsva_so`: on a free-flyer NOT symmetric in ``(j, k)`` within the
  base's columns, ``d2qdd_dq2[i, j, k] - d2qdd_dq2[i, k, j] = sum_m dqdd_dq[i, m] [e_k, e_j]_m``),
* ``d2qdd_dqd2[i, j, k]    = d2 qdd_i / (d qd_j d qd_k)``,
* ``d2qdd_dqdqd[i, j, k]   = d2 qdd_i / (d q_j d qd_k)``,
* ``d2qdd_dq_dtau[i, j, k] = d2 qdd_i / (d q_j d tau_k) = d (M^-1)_ik / d q_j``.

So ``d2qdd_dq2[:, :, k]`` is the tangent derivative along ``q_k`` of Pinocchio's
``computeABADerivatives`` ``ddq_dq``, ``d2qdd_dqd2[:, :, k]`` that of ``ddq_dv`` along
``qd_k``, ``d2qdd_dqdqd[:, j, :]`` that of ``ddq_dv`` along ``q_j`` (equally that of
``ddq_dq[:, j]`` along ``qd_k``), and ``d2qdd_dq_dtau[:, j, :]`` that of ``ddq_dtau = M^-1``
along ``q_j``.

Differentiating ``M(q) dqdd/du + dtau/du (q, qd, qdd) = 0`` once more, with
``qdd = FD(q, qd, tau)``, the IDSVA-SO tensors of :mod:`grid_algorithms.idsva_so` evaluated
there (``d tau/d u`` depends on ``qdd`` only through ``M``, hence the ``dM_dq`` terms) and
``dqdd/dq``, ``dqdd/dqd`` of :mod:`grid_algorithms.forward_dynamics_gradient`:

    d2qdd_dq2[:, j, k]     = -M^-1 (d2tau_dq2[:, j, k] + dM_dq[:, :, j] dqdd_dq[:, k]
                                                        + dM_dq[:, :, k] dqdd_dq[:, j]),
    d2qdd_dqd2[:, j, k]    = -M^-1 d2tau_dqd2[:, j, k],
    d2qdd_dqdqd[:, j, k]   = -M^-1 (d2tau_dqdqd[:, j, k] + dM_dq[:, :, j] dqdd_dqd[:, k]),
    d2qdd_dq_dtau[:, j, k] = -M^-1 dM_dq[:, :, j] M^-1[:, k],

i.e. one contraction ``iL,Ljk->ijk`` of ``-M^-1`` with four ``nv^3`` tensors.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.model import Robot
from grid_core.review import ParallelismReview, not_applicable, todo


def fdsva_so_contract(Minv, d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, dM_dq, dqdd_dq, dqdd_dqd):
    """The -Minv contraction: the four second-order tensors of forward dynamics."""
    dMj = lambda X: np.einsum("imj,mk->ijk", dM_dq, X)  # noqa: E731  [:, j, k] = dM_dq[:, :, j] X[:, k]
    R_qq = d2tau_dq2 + dMj(dqdd_dq) + dMj(dqdd_dq).transpose(0, 2, 1)
    R_qv = d2tau_dqdqd + dMj(dqdd_dqd)
    R_qt = dMj(Minv)
    return tuple(-np.tensordot(Minv, R, axes=(1, 0)) for R in (R_qq, d2tau_dqd2, R_qv, R_qt))


class FdsvaSO(Algorithm):
    name = "fdsva_so"
    summary = ("second-order derivatives of forward dynamics (d2qdd_dq2, d2qdd_dqd2, d2qdd_dqdqd, "
               "d2qdd_dq_dtau), each (nv, nv, nv): -Minv contraction of idsva_so, composed")
    math = r"""
With :math:`\ddot q = \mathrm{FD}(q, \dot q, \tau)` and the inverse-dynamics tensors at that
:math:`\ddot q`:

.. math::

   \frac{\partial^2 \ddot q}{\partial q_j \partial q_k} = -M^{-1}\Big(
       \frac{\partial^2 \tau}{\partial q_j \partial q_k}
       + \frac{\partial M}{\partial q_j} \frac{\partial \ddot q}{\partial q_k}
       + \frac{\partial M}{\partial q_k} \frac{\partial \ddot q}{\partial q_j}\Big), \qquad
   \frac{\partial^2 \ddot q}{\partial \dot q_j \partial \dot q_k} = -M^{-1}
       \frac{\partial^2 \tau}{\partial \dot q_j \partial \dot q_k},

   \frac{\partial^2 \ddot q}{\partial q_j \partial \dot q_k} = -M^{-1}\Big(
       \frac{\partial^2 \tau}{\partial q_j \partial \dot q_k}
       + \frac{\partial M}{\partial q_j} \frac{\partial \ddot q}{\partial \dot q_k}\Big), \qquad
   \frac{\partial^2 \ddot q}{\partial q_j \partial \tau_k} = -M^{-1}
       \frac{\partial M}{\partial q_j} M^{-1} e_k .
"""
    depends_on = ("idsva_so", "minv", "forward_dynamics", "forward_dynamics_gradient")
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the recursions are those of idsva_so, "
                          "minv and forward_dynamics (see their reviews)"),
        P2=todo("the dominant lever: the contraction is 4 nv^3 independent output cells, each an "
                "nv-long dot product of a row of Minv with a column of a right-hand-side tensor, and "
                "the right-hand sides (dM_dq times the first derivatives) are 3 nv^3 independent "
                "cells too; fan both over the block, register-tiled along i (one "
                "contraction kernel)"),
        P3=todo("Minv, qdd and the first derivatives are computed once and shared (the reference "
                "calls forward_dynamics_gradient, which recomputes minv and qdd, for clarity): the "
                "orchestrator loads XImats once and calls the placement-free inners in sequence"),
        P4=todo("dM_dq is symmetric in (i, j) and the tensors are zero off the tree's chains: "
                "keep the idsva_so layout ([k][j][i], so a cell's reads along the contraction "
                "index coalesce) and skip the structurally zero cells of the right-hand sides"),
    )

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "tau")

    def outputs(self, robot: Robot, **options):
        n = robot.nv
        return (
            Port("d2qdd_dq2", (n, n, n), "[i, j, k] = d/dq_k (d qdd_i / d q_j), tangent space"),
            Port("d2qdd_dqd2", (n, n, n), "[i, j, k] = d2 qdd_i / (d qd_j d qd_k)"),
            Port("d2qdd_dqdqd", (n, n, n), "[i, j, k] = d2 qdd_i / (d q_j d qd_k)"),
            Port("d2qdd_dq_dtau", (n, n, n), "[i, j, k] = d2 qdd_i / (d q_j d tau_k) = d Minv_ik / d q_j"),
        )

    def reference(self, ctx, q, qd, tau, f_ext=None, gravity=DEFAULT_GRAVITY):
        qdd = ctx.forward_dynamics(q, qd, tau, f_ext, gravity)
        d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, dM_dq = ctx.idsva_so(q, qd, qdd, f_ext, gravity)
        dqdd_dq, dqdd_dqd = ctx.forward_dynamics_gradient(q, qd, tau, f_ext, gravity)
        return fdsva_so_contract(ctx.minv(q), d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, dM_dq, dqdd_dq, dqdd_dqd)


@hookimpl
def grid_register_algorithms():
    return [FdsvaSO]
