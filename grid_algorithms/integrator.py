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
from grid_core.algorithm import DEFAULT_GRAVITY, RK4_STAGES, RK4_WEIGHTS, check_integration_method, integration_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.derivatives import Rule
from grid_core.emit import nodes as n
from grid_core.emit.emitter import Emitter
from grid_core.emit.lie_steps import move_steps, move_tables
from grid_core.emit.stages import stage_loop
from grid_core.emit.storage import local_declaration, regions, vector
from grid_core.model import Robot
from grid_core.model.lie import integrate
from grid_core.review import ParallelismReview, done, not_applicable, todo

# -- code generation -------------------------------------------------------------------
#
# An orchestrator on one XImats load: forward dynamics' inner (by handle) at the state, then the
# update per cell: each velocity, each joint coordinate adding its increment, a free-flyer's
# [p; quat] by the exponential map (the framework's shared "lie" helpers).  RK4 calls the composed
# inner four times, loading XImats again at each stage's configuration first (stages 2 to 4 in one
# rolled loop, grid_core.emit.stages).


def _fields(robot: Robot, method: str) -> tuple:
    """The intermediate results: the forward dynamics' output and the increment ``q`` moves by; RK4
    adds its stage's configuration and velocity and the two weighted sums."""
    nv = robot.nv
    out = (vector("stage_qdd", nv, "joint accelerations FD at the (stage's) state"),
           vector("increment", nv, "the tangent vector q moves by"))
    if method == "rk4":
        out += (vector("stage_q", robot.nq, "a stage's configuration q (+) c dt v"),
                vector("stage_qd", nv, "a stage's velocity qd + c dt a"),
                vector("sum_qd", nv, "v1 + 2 v2 + 2 v3 + v4 (so far)"),
                vector("sum_qdd", nv, "a1 + 2 a2 + 2 a3 + a4 (so far)"))
    return out


def _move(layers, out: str, q: str, step: str, local: bool) -> list:
    """``out = q (+) step`` (pointers): the framework's move (the tables of
    :meth:`IntegratorEmitter.helpers`)."""
    return move_steps(layers.pfx, layers.robot, out, q, step, local)


class IntegratorEmitter(Emitter):
    global_inputs = ("f_ext",)  # handed, in place, to the composed inner
    nullable_inputs = ("f_ext",)
    composes = ("forward_dynamics",)
    reloads_ximats = True  # RK4's stages
    shared_helpers = ("lie",)

    def fields(self, layers) -> tuple:
        return _fields(layers.robot, _method(layers))

    def helpers(self, layers) -> list:
        return move_tables(layers.pfx, layers.robot)

    def inner_doc(self, layers) -> str:
        return f"Method: {_method(layers)} (fixed at generation time)."

    def inner_body(self, layers) -> list:
        fd = layers.compose("forward_dynamics")
        a = {x: y.base for x, y in layers.arrays(self.fields(layers)).items()}
        io = {p: f"s_{p}" for p in ("q", "qd", "tau", "q_next", "qd_next")}
        return _steps(layers, fd, a, io, local=False)

    def state_body(self, layers) -> list:
        fd = layers.compose("forward_dynamics")
        arr = layers.arrays(self.fields(layers), local=True)
        a = {x: y.base for x, y in arr.items()}
        io = {p: p for p in ("q", "qd", "tau", "q_next", "qd_next")}
        return [local_declaration(arr.values(), comment="the intermediate results, local"),
                *_steps(layers, fd, a, io, local=True)]


def _method(layers) -> str:
    return layers.ctx.values["method"]


def _steps(layers, fd, a: dict, io: dict, local: bool) -> list:
    """Both layouts' steps: ``a`` the intermediate results' arrays, ``io`` the ports' arrays."""
    nv = layers.robot.nv

    def each(stmts: list) -> list:  # a loop over the velocity cells: one per thread, or all in turn
        return [n.For("int i = 0", f"i < {nv}", "++i", stmts) if local else n.BlockStrideLoop("i", nv, stmts)]

    sync = [] if local else [n.Sync()]

    def fd_at(q: str, qd: str, qdd: str) -> list:
        if local:
            return [layers.call_state(fd, {"USE_F_EXT": "USE_F_EXT"}, qdd=qdd, q=q, qd=qd, tau=io["tau"], f_ext="f_ext")]
        return [layers.call_inner(fd, s_qdd=qdd, s_q=q, s_qd=qd, s_tau=io["tau"], f_ext="f_ext"), n.Sync()]

    q, qd, acc, step = io["q"], io["qd"], a["stage_qdd"], a["increment"]
    method = _method(layers)
    if method != "rk4":
        v = "v" if method == "semi_implicit_euler" else f"{qd}[i]"
        return [
            n.Comment("qdd = FD(q, qd, tau, f_ext): the composed forward dynamics"),
            *fd_at(q, qd, acc),
            n.Comment(f"qd_next = qd + dt qdd; q moves by dt {'qd_next' if v == 'v' else 'qd'}"),
            *each([n.Stmt(f"const T v = {qd}[i] + dt * {acc}[i]"), n.Stmt(f"{io['qd_next']}[i] = v"),
                   n.Stmt(f"{step}[i] = dt * {v}")]),
            *sync,
            n.Comment("q_next = q (+) increment"),
            *_move(layers, io["q_next"], q, step, local)]
    sq, sv, sum_v, sum_a = a["stage_q"], a["stage_qd"], a["sum_qd"], a["sum_qdd"]
    out = [n.Comment("RK4, stage 1: a1 = FD(q, qd)"),
           *fd_at(q, qd, acc),
           *each([n.Stmt(f"{sv}[i] = {qd}[i]"), n.Stmt(f"{sum_v}[i] = {qd}[i]"), n.Stmt(f"{sum_a}[i] = {acc}[i]")])]

    def stage_k(cdt: str, w: str) -> list:  # stage k's statements (its c dt and weight: C++ names)
        return [*each([n.Stmt(f"{step}[i] = {cdt} * {sv}[i]"), n.Stmt(f"{sv}[i] = {qd}[i] + {cdt} * {acc}[i]"),
                       n.Stmt(f"{sum_v}[i] += {w} * {sv}[i]")]),
                *sync,
                *_move(layers, sq, q, step, local),
                *sync,
                *([] if local else [n.Comment("XImats at the stage's configuration, for the composed inner"),
                                    n.Stmt(f"load_update_XImats<T>(s_XI, {sq})"), n.Sync()]),
                *fd_at(sq, sv, acc),
                *each([n.Stmt(f"{sum_a}[i] += {w} * {acc}[i]")])]

    out += stage_loop(RK4_STAGES, RK4_WEIGHTS, stage_k, "q_k = q (+) c dt v_(k-1), v_k = qd + c dt a_(k-1), "
                      "a_k = FD(q_k, v_k), in a rolled loop (the composed call once for the three)")
    return [*out,
            n.Comment("qd_next = qd + dt/6 (a1 + 2 a2 + 2 a3 + a4); q moves by dt/6 (v1 + 2 v2 + 2 v3 + v4)"),
            *each([n.Stmt(f"{io['qd_next']}[i] = {qd}[i] + dt / T(6) * {sum_a}[i]"),
                   n.Stmt(f"{step}[i] = dt / T(6) * {sum_v}[i]")]),
            *sync,
            *_move(layers, io["q_next"], q, step, local)]


def _jacobians(kernels, x, params, wanted):
    """``d(q_next, qd_next) / d(q, qd, tau)``: the integrator gradient's six blocks (the method the
    call's code was generated with, ``params["method"]``; ``q_next``'s rows in the tangent space at
    it).  ``f_ext`` enters the Euler step only through ``qdd = FD(q, qd, tau - dID/df_ext f_ext)``
    at ``q`` (inverse dynamics is affine in ``f_ext``), so its columns are the ``tau`` columns times
    ``-dID/df_ext``, inverse dynamics' Jacobian (its rule, by name); RK4 evaluates ``qdd`` at other
    configurations, where that Jacobian differs: no ``f_ext`` derivative for it."""
    dq_dq, dq_dqd, dq_dtau, dqd_dq, dqd_dqd, dqd_dtau = kernels(
        "integrator_gradient", x["q"], x["qd"], x["tau"], x.get("f_ext"), **params)
    J = {"q": (dq_dq, dqd_dq), "qd": (dq_dqd, dqd_dqd), "tau": (dq_dtau, dqd_dtau)}
    if "f_ext" in wanted:
        if params.get("method") == "rk4":
            raise NotImplementedError("integrator: no derivative with respect to f_ext for the RK4 method (its "
                                      "stages see f_ext at other configurations); the Euler methods have one")
        force = kernels.jacobian("inverse_dynamics", "f_ext", {"q": x["q"]})
        J["f_ext"] = tuple(-kernels.xp.einsum("bij,bjkc->bikc", d, force) for d in (dq_dtau, dqd_dtau))
    return J


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
    emitter = IntegratorEmitter
    derivatives = Rule(("q", "qd", "tau", "f_ext"), ("integrator_gradient", "inverse_dynamics"), _jacobians,
                       configurations=("q_next",))
    """The gradient is generated for every method (the one the call's code was generated with); the
    f_ext columns (Euler methods) call inverse dynamics' rule, whose f_ext Jacobian calls
    ``inverse_dynamics``."""
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: forward_dynamics' recursions (see its review)"),
        P2=done("the update is independent cells fanned across the block, one thread each: the nv "
                "velocities, then each coordinate that adds its increment and each free-flyer's exponential "
                "map (a baked table of q and v indices)"),
        P3=todo("the explicit-Euler q update needs no qdd: it could run beside forward dynamics instead of "
                "after it; RK4's stages are sequential (each needs the one before)"),
        P4=not_applicable("the state vectors are contiguous and read once; there is no structural "
                          "sparsity to compact"),
        notes="an orchestrator on one XImats load (forward_dynamics' inner, by handle; RK4 calls it four "
              "times, loading XImats again at each stage's configuration, stages 2 to 4 in one rolled loop); "
              "the method is fixed at generation time (algorithm_options={'integrator': {'method': ...}}; a "
              "call with another builds its code)",
    )

    def inputs(self, robot: Robot):
        return integration_inputs(robot)

    def outputs(self, robot: Robot, **options):
        return (
            Port("q_next", (robot.nq,), "configuration after the step"),
            Port("qd_next", (robot.nv,), "velocity after the step"),
        )

    def arenas(self, robot: Robot, options=None, method="semi_implicit_euler"):
        return regions(_fields(robot, method))

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("the callee's first spill", {callee_rung("forward_dynamics", 1)},
                             "what the composed forward dynamics' rung 1 spills"))

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
