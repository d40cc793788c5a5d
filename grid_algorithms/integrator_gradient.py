"""Derivatives of one integrator step with respect to the state and the joint forces.

``(dq_next_dq, dq_next_dqd, dq_next_dtau, dqd_next_dq, dqd_next_dqd, dqd_next_dtau) =
integrator_gradient(q, qd, tau, dt, method)``, each ``nv x nv``, of
:mod:`grid_algorithms.integrator`'s ``(q_next, qd_next)``.

Tangent spaces: a derivative *with respect to* ``q`` is along ``q (+) dq`` (its columns are
v coordinates, as everywhere); a derivative *of* ``q_next`` is expressed in the tangent
space at ``q_next``: row block ``dq_next_dx`` is ``d/dx log(q_next(x)^-1 q_next(x + dx))``,
i.e. ``q_next(x (+) dx) = q_next(x) (+) (dq_next_dx dx) + O(dx^2)`` -- Pinocchio's
``dIntegrate`` convention (on every non-free-flyer coordinate, a plain derivative).

With ``qdd = FD(q, qd, tau)``, its derivatives ``dqdd_dq``, ``dqdd_dqd``
(:mod:`grid_algorithms.forward_dynamics_gradient`) and ``dqdd_dtau = M^-1``, and
``(Dq, Dv) = dIntegrate(q, v)`` at the increment ``v`` (``Ad(exp6(v)^-1)`` and
``Jexp6(v)`` on a free-flyer, the identity elsewhere):

* semi-implicit Euler, ``v = dt qd_next``:
  ``dqd_next_dq = dt dqdd_dq``, ``dqd_next_dqd = I + dt dqdd_dqd``, ``dqd_next_dtau = dt M^-1``;
  ``dq_next_dq = Dq + dt Dv dqd_next_dq``, ``dq_next_dqd = dt Dv dqd_next_dqd``,
  ``dq_next_dtau = dt Dv dqd_next_dtau``;
* explicit Euler, ``v = dt qd``: the same ``qd_next`` rows; ``dq_next_dq = Dq``,
  ``dq_next_dqd = dt Dv``, ``dq_next_dtau = 0``.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY
from grid_core.model import Robot
from grid_core.review import ParallelismReview, not_applicable, todo

from .integrator import check_method, dintegrate, state_ports


class IntegratorGradient(Algorithm):
    name = "integrator_gradient"
    summary = ("derivatives of one integrator step: (dq_next_dq, dq_next_dqd, dq_next_dtau, "
               "dqd_next_dq, dqd_next_dqd, dqd_next_dtau), q_next's rows in the tangent space at q_next")
    math = r"""
Semi-implicit Euler (:math:`v = \Delta t\, \dot q^+`), with :math:`(D_q, D_v)` Pinocchio's
``dIntegrate`` at :math:`(q, v)`:

.. math::

   \frac{\partial \dot q^+}{\partial (q, \dot q, \tau)} =
     \Big(\Delta t \frac{\partial \ddot q}{\partial q},\ I + \Delta t \frac{\partial \ddot q}{\partial \dot q},\
          \Delta t\, M^{-1}\Big), \qquad
   \frac{\partial q^+}{\partial q} = D_q + \Delta t\, D_v \frac{\partial \dot q^+}{\partial q}, \quad
   \frac{\partial q^+}{\partial (\dot q, \tau)} = \Delta t\, D_v \frac{\partial \dot q^+}{\partial (\dot q, \tau)} .

Explicit Euler (:math:`v = \Delta t\, \dot q`): the same :math:`\dot q^+` rows,
:math:`\partial q^+ / \partial (q, \dot q, \tau) = (D_q,\ \Delta t\, D_v,\ 0)`.
"""
    depends_on = ("forward_dynamics", "forward_dynamics_gradient", "minv")
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the recursions are those of "
                          "forward_dynamics_gradient and minv (see their reviews)"),
        P2=todo("the six nv x nv blocks are 6 nv^2 independent cells (the Dv products only "
                "touch the free-flyer's six rows): fan them across the block"),
        P3=todo("Minv is computed inside forward_dynamics_gradient already: the orchestrator "
                "must reuse it for dqd_next_dtau instead of a second minv (the reference calls "
                "minv again, for clarity)"),
        P4=todo("Dq and Dv are the identity except one 6x6 block per free-flyer: apply them as "
                "that block (a row-band update), never as dense nv x nv products"),
    )

    def inputs(self, robot: Robot):
        return state_ports(robot)

    def outputs(self, robot: Robot, **options):
        n = robot.nv
        return (
            Port("dq_next_dq", (n, n), "d q_next / d q (tangent at q -> tangent at q_next)"),
            Port("dq_next_dqd", (n, n), "d q_next / d qd (tangent at q_next)"),
            Port("dq_next_dtau", (n, n), "d q_next / d tau (tangent at q_next)"),
            Port("dqd_next_dq", (n, n), "d qd_next / d q (tangent at q)"),
            Port("dqd_next_dqd", (n, n), "d qd_next / d qd"),
            Port("dqd_next_dtau", (n, n), "d qd_next / d tau"),
        )

    def reference(self, ctx, q, qd, tau, dt, method="semi_implicit_euler", f_ext=None,
                  gravity=DEFAULT_GRAVITY):
        method = check_method(method, self.name)
        dt = float(dt)
        robot = ctx.robot
        qdd = ctx.forward_dynamics(q, qd, tau, f_ext, gravity)
        dqdd_dq, dqdd_dqd = ctx.forward_dynamics_gradient(q, qd, tau, f_ext, gravity)
        dqd_dq, dqd_dqd, dqd_dtau = dt * dqdd_dq, np.eye(robot.nv) + dt * dqdd_dqd, dt * ctx.minv(q)
        if method == "semi_implicit_euler":
            Dq, Dv = dintegrate(robot, q, dt * (qd + dt * qdd))
            dq_dq, dq_dqd, dq_dtau = Dq + dt * Dv @ dqd_dq, dt * Dv @ dqd_dqd, dt * Dv @ dqd_dtau
        else:
            Dq, Dv = dintegrate(robot, q, dt * qd)
            dq_dq, dq_dqd, dq_dtau = Dq, dt * Dv, np.zeros((robot.nv, robot.nv))
        return dq_dq, dq_dqd, dq_dtau, dqd_dq, dqd_dqd, dqd_dtau


@hookimpl
def grid_register_algorithms():
    return [IntegratorGradient]
