"""Forward dynamics composed as ``qdd = M^-1 (tau - ID(q, qd, 0, f_ext))``.

The orchestrator that upstream GRiD emits as ``forward_dynamics``: the inverse
inertia (:mod:`grid_algorithms.minv`) applied to the joint forces minus the bias
forces (inverse dynamics at zero acceleration, :mod:`grid_algorithms.inverse_dynamics`).
It equals :mod:`grid_algorithms.aba`; it pays ``O(n^2)`` for ``M^-1``, which the
gradient (``forward_dynamics_gradient``) needs anyway, and it is the path upstream
GRiD takes on mimic robots.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.model import Robot
from grid_core.review import ParallelismReview, not_applicable, todo


class ForwardDynamics(Algorithm):
    name = "forward_dynamics"
    summary = "joint accelerations qdd = Minv(q) (tau - ID(q, qd, 0, f_ext)), composed"
    math = r"""
.. math::

   \ddot q = M^{-1}(q)\,\big(\tau - \mathrm{ID}(q, \dot q, 0, f^{ext})\big) .
"""
    depends_on = ("minv", "inverse_dynamics")
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the recursions are minv's and "
                          "inverse_dynamics' (see their reviews)"),
        P2=todo("the final matrix-vector product is nv independent row dot products: fan them "
                "across threads"),
        P3=todo("minv and the bias forces are independent of each other: run the two inners "
                "concurrently (split block or back-to-back without a sync), sharing one XImats load"),
        P4=todo("keep Minv in the layout minv writes (upper triangle) and read it symmetrically in "
                "the product, instead of mirroring it first"),
    )

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "tau")

    def outputs(self, robot: Robot, **options):
        return (Port("qdd", (robot.nv,), "joint accelerations"),)

    def reference(self, ctx, q, qd, tau, f_ext=None, gravity=DEFAULT_GRAVITY):
        bias = ctx.inverse_dynamics(q, qd, np.zeros(ctx.robot.nv), f_ext, gravity)
        return ctx.minv(q) @ (tau - bias)


@hookimpl
def grid_register_algorithms():
    return [ForwardDynamics]
