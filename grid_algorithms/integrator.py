"""One time step of the equations of motion: ``(q_next, qd_next) = integrator(q, qd, tau, dt, method)``.

``qdd = FD(q, qd, tau, f_ext)`` (:mod:`grid_algorithms.forward_dynamics`), then

* ``method="semi_implicit_euler"`` (the default; symplectic Euler):
  ``qd_next = qd + dt qdd``, ``q_next = q (+) dt qd_next``;
* ``method="explicit_euler"``: ``q_next = q (+) dt qd``, ``qd_next = qd + dt qdd``;
* ``method="rk4"``: the classical Runge-Kutta scheme, its stages placed on the manifold from
  ``q`` (as Crocoddyl's ``IntegratedActionModelRK4``): ``v1 = qd``, ``a1 = FD(q, v1)``; for
  ``c_k = 1/2, 1/2, 1``: ``q_k = q (+) c_k dt v_{k-1}``, ``v_k = qd + c_k dt a_{k-1}``,
  ``a_k = FD(q_k, v_k)``; then ``qd_next = qd + dt/6 (a1 + 2 a2 + 2 a3 + a4)`` and
  ``q_next = q (+) dt/6 (v1 + 2 v2 + 2 v3 + v4)`` (every velocity taken in ``q``'s coordinates).

``q (+) v`` is Pinocchio's ``integrate``: every joint coordinate adds its increment (a
continuous joint's one angle, mimic joints follow their mimicked joint), and a free-flyer
moves by the SE(3) exponential map, ``M_next = M exp6(v)`` with ``v = [linear; angular]`` in
the base frame: ``R_next = R exp3(w)``, ``p_next = p + R V(w) v_lin`` with
``V(w) = I + (1 - cos t)/t^2 [w]x + (t - sin t)/t^3 [w]x^2`` (``t = |w|``).  The quaternion
is ``quat (x) quat(exp3(w))``, normalised, its sign chosen with a non-negative dot product
with ``quat`` (as Pinocchio does).  To first order this is
:func:`grid_core.testing.integrate`, which moves the position by ``R v_lin`` only; for a
finite step the two differ by ``O(dt^2 |v_lin| |w|)``, and the integrator follows Pinocchio.
"""

from __future__ import annotations

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, check_integration_method, integration_inputs
from grid_core.model import Robot
from grid_core.model.lie import integrate
from grid_core.review import ParallelismReview, not_applicable, todo

RK4_STAGES = (0.5, 0.5, 1.0)
"""Where RK4's stages 2, 3 and 4 sit, as fractions of the step."""


class Integrator(Algorithm):
    name = "integrator"
    summary = ("one time step (q_next, qd_next): semi-implicit (default) or explicit Euler, or RK4, on "
               "qdd = forward_dynamics, exponential map on a free-flyer")
    math = r"""
.. math::

   \ddot q = \mathrm{FD}(q, \dot q, \tau), \qquad
   \text{semi-implicit: } \dot q^+ = \dot q + \Delta t\, \ddot q,\ q^+ = q \oplus \Delta t\, \dot q^+;
   \qquad
   \text{explicit: } q^+ = q \oplus \Delta t\, \dot q,\ \dot q^+ = \dot q + \Delta t\, \ddot q,
   \qquad
   \text{RK4: } q^+ = q \oplus \tfrac{\Delta t}{6}(v_1 + 2 v_2 + 2 v_3 + v_4),\
   \dot q^+ = \dot q + \tfrac{\Delta t}{6}(a_1 + 2 a_2 + 2 a_3 + a_4),

with :math:`q \oplus v` Pinocchio's ``integrate`` (:math:`M \exp_6(v)` on a free-flyer).
"""
    depends_on = ("forward_dynamics",)
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: forward_dynamics' recursions (see its review)"),
        P2=todo("the update is nq + nv independent cells (one exponential map per free-flyer): "
                "fan them across the block after forward dynamics"),
        P3=todo("the explicit-Euler q update needs no qdd: run it concurrently with forward "
                "dynamics; the free-flyer's exp6 coefficients depend on qd (explicit) only"),
        P4=not_applicable("the state vectors are contiguous and read once; there is no structural "
                          "sparsity to compact"),
    )

    def inputs(self, robot: Robot):
        return integration_inputs(robot)

    def outputs(self, robot: Robot, **options):
        return (
            Port("q_next", (robot.nq,), "configuration after the step"),
            Port("qd_next", (robot.nv,), "velocity after the step"),
        )

    def reference(self, ctx, q, qd, tau, dt, method="semi_implicit_euler", f_ext=None,
                  gravity=DEFAULT_GRAVITY):
        method = check_integration_method(method, self.name)
        dt = float(dt)
        robot = ctx.robot
        if method == "rk4":
            v, a = [qd], [ctx.forward_dynamics(q, qd, tau, f_ext, gravity)]
            for c in RK4_STAGES:
                q_k = integrate(robot, q, c * dt * v[-1])
                v.append(qd + c * dt * a[-1])
                a.append(ctx.forward_dynamics(q_k, v[-1], tau, f_ext, gravity))
            qd_next = qd + dt / 6 * (a[0] + 2 * a[1] + 2 * a[2] + a[3])
            return integrate(robot, q, dt / 6 * (v[0] + 2 * v[1] + 2 * v[2] + v[3])), qd_next
        qd_next = qd + dt * ctx.forward_dynamics(q, qd, tau, f_ext, gravity)
        q_next = integrate(robot, q, dt * (qd_next if method == "semi_implicit_euler" else qd))
        return q_next, qd_next


@hookimpl
def grid_register_algorithms():
    return [Integrator]
