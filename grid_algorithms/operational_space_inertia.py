"""Operational-space inertia: the inertia the chosen frames present to forces applied at them.

``Lambda = operational_space_inertia(q, frames=None, rows="all")``, shape ``(n_frames, k, k)``:
for each chosen frame ``Lambda = (J Minv J^T)^-1`` where ``Minv`` is the inverse joint-space
inertia (:mod:`grid_algorithms.minv`) and ``J`` the frame's Jacobian
(:mod:`grid_algorithms.end_effector_pose_gradient`: ``LOCAL_WORLD_ALIGNED``, rows ``[linear;
angular]``, at the frame origin) restricted to the chosen rows: ``rows="linear"`` its three
linear rows (``k = 3``: the translational inertia of the frame origin, a point mass model),
``rows="all"`` all six (``k = 6``: the spatial operational-space inertia, Khatib's
``Lambda``).  Frames as in :mod:`grid_algorithms.end_effector_pose`.

``J Minv J^T`` is symmetric positive semi-definite; it is invertible exactly when the chosen
rows of ``J`` are linearly independent: a frame supported by fewer than ``k`` joint motions (a
frame on the first link of a fixed-base arm with ``rows="all"``, any frame of a two-link arm
with ``rows="linear"``), or one at a singular configuration, has none.  Such a frame is an
:class:`~grid_core.errors.InputError` naming it: the test is the smallest eigenvalue of ``J Minv
J^T`` at most ``RANK_TOL = 1e-10`` times the larger of its largest eigenvalue and ``||Minv||_2``
(SI units).  Relative to the largest, it is a condition number above ``1e10``: there the inverse
has lost all but six of float64's sixteen digits, and a rank-deficient matrix reaches ``1e16``
and more.  Relative to ``||Minv||``, it refuses a frame whose chosen rows are all rounding noise
(a frame on the axes of all the joints that support it, ``iiwa_link_2``'s origin), whose noise
could look well conditioned.  Mimic joints: ``Minv`` and ``J`` are those of the constrained model.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.errors import InputError
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames
from grid_core.review import ParallelismReview, not_applicable, todo

RANK_TOL = 1e-10
"""A frame's ``J Minv J^T`` whose smallest eigenvalue is at most this fraction of the larger of its
largest and ``||Minv||_2`` is rank-deficient (condition number 1e10 or more): an InputError naming
the frame."""

ROWS = {"linear": slice(0, 3), "all": slice(0, 6)}
"""The ``rows`` option: which rows of the ``[linear; angular]`` Jacobian enter."""


def chosen_rows(rows, algorithm: str) -> slice:
    if not isinstance(rows, str) or rows not in ROWS:
        raise InputError(f"{algorithm}: argument 'rows' must be one of {', '.join(map(repr, ROWS))}, got {rows!r}")
    return ROWS[rows]


def operational_space_inertias(robot: Robot, Minv, J, frames, rows: str, algorithm: str) -> np.ndarray:
    """``(n_frames, k, k)``: ``(J Minv J^T)^-1`` of each frame's Jacobian ``J`` (its chosen rows)."""
    out = []
    scale = np.linalg.norm(Minv, 2)
    for Jf, f in zip(J, frames):
        A = Jf @ Minv @ Jf.T
        A = 0.5 * (A + A.T)
        eig = np.linalg.eigvalsh(A)
        floor = RANK_TOL * max(eig[-1], scale)
        if eig[0] <= floor:
            rank = int(np.sum(eig > floor))
            raise InputError(
                f"{algorithm}: frame '{f.name}' of robot '{robot.name}' has no operational-space inertia over "
                f"rows={rows!r}: J Minv J^T has rank {rank} < {len(A)} (eigenvalues under {RANK_TOL:.0e} of the "
                f"largest or of ||Minv||: the frame is supported by too few independent joint motions here); "
                f"choose another frame" + (" or rows='linear'" if rows == "all" else "")
            )
        out.append(np.linalg.inv(A))
    k = J.shape[1]
    return np.stack([0.5 * (L + L.T) for L in out]) if out else np.zeros((0, k, k))


class OperationalSpaceInertia(Algorithm):
    name = "operational_space_inertia"
    summary = ("operational-space inertia (J Minv J^T)^-1 of chosen frames, (n_frames, k, k), "
               "rows 'linear' (k = 3) or 'all' (k = 6)")
    math = r"""
With :math:`J_f` the frame's Jacobian (``LOCAL_WORLD_ALIGNED``, :math:`[\text{linear};
\text{angular}]`) restricted to the chosen rows and :math:`M^{-1}` the inverse joint-space inertia:

.. math::

   \Lambda_f = \left(J_f\, M^{-1} J_f^T\right)^{-1},

defined when the smallest eigenvalue of :math:`J_f M^{-1} J_f^T` exceeds
:math:`10^{-10} \max(\lambda_{\max}, \lVert M^{-1} \rVert_2)` (condition number below
:math:`10^{10}`, rows not all rounding noise); otherwise an ``InputError`` names the frame.
"""
    depends_on = ("minv", "end_effector_pose_gradient")
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: Minv and the Jacobians come from minv and "
                          "end_effector_pose_gradient (see their reviews)"),
        P2=todo("the frames are independent, and so are the k columns of Minv J^T: one thread group "
                "per frame, a thread per column of the product"),
        P3=todo("Minv J^T reads only the columns of Minv in the frame's support: gather them once per "
                "frame and reuse them for all k rows; the k x k inverse (k = 3 or 6) is a closed-form "
                "or Cholesky step per frame"),
        P4=todo("bake each frame's support column map offline (columns outside it are structural zeros "
                "of J) and store only the upper triangle of the symmetric k x k result"),
    )

    def inputs(self, robot: Robot):
        return (*frame_inputs(robot),
                Port("rows", (), "'linear' (the 3 linear rows) or 'all' (the 6)", kind="option", default="all"))

    def outputs(self, robot: Robot, frames=None, rows="all", **options):
        n = len(resolve_frames(robot, frames, self.name))
        k = chosen_rows(rows, self.name).stop
        return (Port("Lambda", (n, k, k), "operational-space inertia of each chosen frame"),)

    def reference(self, ctx, q, frames=None, rows="all"):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        sel = chosen_rows(rows, self.name)
        J = ctx.end_effector_pose_gradient(q, chosen)[:, sel]
        return operational_space_inertias(ctx.robot, ctx.minv(q), J, chosen, rows, self.name)


@hookimpl
def grid_register_algorithms():
    return [OperationalSpaceInertia]
