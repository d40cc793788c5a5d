"""First derivatives of forward dynamics, ``d qdd / d q`` and ``d qdd / d qd``.

Differentiating ``ID(q, qd, FD(q, qd, tau)) = tau`` gives

    d qdd / d u = -M^-1 (d tau / d u)   at qdd = FD(q, qd, tau),   u in {q, qd},

(Carpentier & Mansard 2018, the identity behind Pinocchio's
``computeABADerivatives``), composed here from ``forward_dynamics``, ``minv`` and
``inverse_dynamics_gradient``; ``q`` derivatives are in the tangent space as there.
"""

from __future__ import annotations

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.model import Robot
from grid_core.review import ParallelismReview, not_applicable, todo


class ForwardDynamicsGradient(Algorithm):
    name = "forward_dynamics_gradient"
    summary = "(dqdd_dq, dqdd_dqd) = -Minv (dtau_dq, dtau_dqd) at qdd = FD(q, qd, tau), composed"
    math = r"""
.. math::

   \ddot q = \mathrm{FD}(q, \dot q, \tau), \qquad
   \frac{\partial \ddot q}{\partial u} = -M^{-1}(q)\,
   \frac{\partial\, \mathrm{ID}}{\partial u}(q, \dot q, \ddot q), \quad u \in \{q, \dot q\} .
"""
    depends_on = ("forward_dynamics", "minv", "inverse_dynamics_gradient")
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the recursions are those of the algorithms "
                          "it composes (see their reviews)"),
        P2=todo("the two nv x nv products -Minv dtau are 2 nv^2 independent dot products: fan "
                "the output cells across threads"),
        P3=todo("forward_dynamics already forms Minv: the orchestrator must compute it once and "
                "reuse it for the product (the reference calls minv twice, for clarity)"),
        P4=todo("read Minv from minv's upper-triangle layout and lay dtau out column-major so the "
                "product's warp reads coalesce"),
    )

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "tau")

    def outputs(self, robot: Robot, **options):
        return (
            Port("dqdd_dq", (robot.nv, robot.nv), "d qdd / d q (tangent space: columns are v coordinates)"),
            Port("dqdd_dqd", (robot.nv, robot.nv), "d qdd / d qd"),
        )

    def reference(self, ctx, q, qd, tau, f_ext=None, gravity=DEFAULT_GRAVITY):
        qdd = ctx.forward_dynamics(q, qd, tau, f_ext, gravity)
        dtau_dq, dtau_dqd = ctx.inverse_dynamics_gradient(q, qd, qdd, f_ext, gravity)
        Minv = ctx.minv(q)
        return -Minv @ dtau_dq, -Minv @ dtau_dqd


@hookimpl
def grid_register_algorithms():
    return [ForwardDynamicsGradient]
