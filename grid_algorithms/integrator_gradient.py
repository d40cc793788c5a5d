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
  ``dq_next_dqd = dt Dv``, ``dq_next_dtau = 0``;
* RK4 (the integrator's stages ``(q_k, v_k, a_k)``, ``q_k = q (+) c_k dt v_{k-1}``): the chain
  rule through the stages, each derivative a ``nv x 3 nv`` block row over ``(q, qd, tau)``, a
  stage's ``q_k`` row block in the tangent space at ``q_k``: ``Q_1 = [I 0 0]``, ``V_1 = [0 I 0]``,
  ``A_k = dqdd_dq(k) Q_k + dqdd_dqd(k) V_k + [0 0 M^-1(q_k)]``;
  ``Q_{k+1} = Dq Q_1 + c dt Dv V_k`` and ``V_{k+1} = V_1 + c dt A_k`` (``(Dq, Dv)`` at ``(q, c dt v_k)``);
  then ``dq_next = Dq Q_1 + dt/6 Dv (V_1 + 2 V_2 + 2 V_3 + V_4)`` (``(Dq, Dv)`` at the final
  increment) and ``dqd_next = V_1 + dt/6 (A_1 + 2 A_2 + 2 A_3 + A_4)``.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, check_integration_method, integration_inputs
from grid_core.model import Robot
from grid_core.model.lie import dintegrate, integrate
from grid_core.review import ParallelismReview, not_applicable, todo

RK4_STAGES = (0.5, 0.5, 1.0)
"""Where RK4's stages 2, 3 and 4 sit, as fractions of the step (the integrator's scheme)."""


class IntegratorGradient(Algorithm):
    name = "integrator_gradient"
    summary = ("derivatives of one integrator step: (dq_next_dq, dq_next_dqd, dq_next_dtau, "
               "dqd_next_dq, dqd_next_dqd, dqd_next_dtau) of the Euler or RK4 step, q_next's rows in the "
               "tangent space at q_next")
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
        return integration_inputs(robot)

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
        method = check_integration_method(method, self.name)
        dt = float(dt)
        robot = ctx.robot
        if method == "rk4":
            return _rk4(ctx, robot, q, qd, tau, dt, f_ext, gravity)
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


def _rk4(ctx, robot: Robot, q, qd, tau, dt: float, f_ext, gravity) -> tuple:
    """The RK4 step's six blocks (the module docstring's chain rule)."""
    n = robot.nv
    eye, zero = np.eye(n), np.zeros((n, n))
    Q1, V1 = np.hstack([eye, zero, zero]), np.hstack([zero, eye, zero])

    def stage(q_k, v_k, Q_k, V_k):
        """``(a_k, A_k)`` at the stage ``(q_k, v_k)``."""
        a = ctx.forward_dynamics(q_k, v_k, tau, f_ext, gravity)
        dq, dqd = ctx.forward_dynamics_gradient(q_k, v_k, tau, f_ext, gravity)
        return a, dq @ Q_k + dqd @ V_k + np.hstack([zero, zero, ctx.minv(q_k)])

    a1, A1 = stage(q, qd, Q1, V1)
    v, V, a, A = [qd], [V1], [a1], [A1]
    for c in RK4_STAGES:
        Dq, Dv = dintegrate(robot, q, c * dt * v[-1])
        Q_k = Dq @ Q1 + c * dt * Dv @ V[-1]
        q_k = integrate(robot, q, c * dt * v[-1])
        v.append(qd + c * dt * a[-1])
        V.append(V1 + c * dt * A[-1])
        a_k, A_k = stage(q_k, v[-1], Q_k, V[-1])
        a.append(a_k)
        A.append(A_k)
    Dq, Dv = dintegrate(robot, q, dt / 6 * (v[0] + 2 * v[1] + 2 * v[2] + v[3]))
    dq_next = Dq @ Q1 + dt / 6 * Dv @ (V[0] + 2 * V[1] + 2 * V[2] + V[3])
    dqd_next = V1 + dt / 6 * (A[0] + 2 * A[1] + 2 * A[2] + A[3])
    return (*np.hsplit(dq_next, 3), *np.hsplit(dqd_next, 3))


@hookimpl
def grid_register_algorithms():
    return [IntegratorGradient]
