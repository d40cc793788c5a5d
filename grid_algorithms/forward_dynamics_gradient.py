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
from grid_core.arena import callee_rung, spill_ladder
from grid_core.emit import nodes as n
from grid_core.emit.emitter import Emitter
from grid_core.emit.storage import local_declaration, regions, vector
from grid_core.model import Robot
from grid_core.review import ParallelismReview, done, not_applicable, todo


# -- code generation -------------------------------------------------------------------
#
# An orchestrator on one XImats load: forward dynamics (qdd), the inverse-dynamics gradient at
# that qdd, Minv, then the product -Minv dtau.  The inners are reached by handle through the
# composer; where two of them compose the same algorithm (forward dynamics and this one both
# reach minv; forward dynamics and the gradient both reach inverse dynamics) they share its
# scratch region, so their calls run in turn, a barrier between.  Forward dynamics is composed by
# its Minv method whatever the robot's own forward dynamics uses (compose_options: where that is
# ABA, the composer builds a variant, forward_dynamics_minv): the product needs Minv anyway, and
# that method leaves it (Emitter.leaves), read in place (reuses): in its arena in the block
# layout, a local of the per-state function, which runs forward dynamics' steps inline.  By ABA
# the gradient would run the articulated-body recursions and then minv's, for the same Minv.


def _fields(nv: int) -> tuple:
    """The composed results the product reads."""
    return (vector("qdd", nv, "joint accelerations FD(q, qd, tau, f_ext)"),
            vector("dtau_dq", nv * nv, "d tau / d q of inverse dynamics at (q, qd, qdd)", cols=nv),
            vector("dtau_dqd", nv * nv, "d tau / d qd of inverse dynamics at (q, qd, qdd)", cols=nv),
            vector("inv_M", nv * nv, "the inverse joint-space inertia matrix", cols=nv))


def _product(pfx: str, nv: int, arr: dict, out: dict, cell: str) -> list:
    """``dqdd_du[cell] = -sum_m Minv[r, m] dtau_du[m, c]`` for both derivatives, over the rows ``m``
    where column ``c`` of dtau is not a structural zero (``<PFX>_NZ_START`` / ``_NZ_ROW``); ``arr``:
    the composed results bound (:func:`_fields`), ``out``: the output ports."""
    return [n.Block("", [
        n.Stmt(f"const int r = {cell} / {nv}, c = {cell} % {nv}"),
        n.Stmt("T aq = T(0), av = T(0)"),
        n.For(f"int t = {pfx}_NZ_START[c]", f"t < {pfx}_NZ_START[c + 1]", "++t", [
            n.Stmt(f"const int m = {pfx}_NZ_ROW[t]"),
            n.Stmt(f"const T x = {arr['inv_M'].at('r', 'm')}"),
            n.Stmt(f"aq += x * {arr['dtau_dq'].at('m', 'c')}"),
            n.Stmt(f"av += x * {arr['dtau_dqd'].at('m', 'c')}")]),
        n.Stmt(f"{out['dqdd_dq'](cell)} = -aq"),
        n.Stmt(f"{out['dqdd_dqd'](cell)} = -av")])]


class ForwardDynamicsGradientEmitter(Emitter):
    global_inputs = ("f_ext",)  # handed, in place, to the composed inners
    nullable_inputs = ("f_ext",)
    composes = ("forward_dynamics", "minv", "inverse_dynamics_gradient")
    reuses = {"inv_M": ("forward_dynamics", "Minv")}  # by its Minv method: no second minv, either layout
    compose_options = {"forward_dynamics": {"method": "minv"}}  # where the robot's is ABA: a variant

    def block_threads_hint(self, robot: Robot) -> int:
        return robot.nv * robot.nv  # the product's cells, one thread each

    def helpers(self, layers) -> list:
        """The structure of dtau (the composed gradient's): each column's rows that are not
        structural zeros, as a compressed table the products walk."""
        grad = layers.compose("inverse_dynamics_gradient")
        rows: dict[int, list] = {c: [] for c in range(layers.robot.nv)}
        for r, c in grad.emitter.structure(grad):
            rows[c].append(r)
        start = [0]
        for c in range(layers.robot.nv):
            start.append(start[-1] + len(rows[c]))
        return [n.ConstArray("int", f"{layers.pfx}_NZ_START", start, qualifiers="static __device__ const",
                             comment="column c of dtau: rows NZ_ROW[NZ_START[c] .. NZ_START[c + 1]] (P4)"),
                n.ConstArray("int", f"{layers.pfx}_NZ_ROW", [r for c in range(layers.robot.nv) for r in rows[c]],
                             qualifiers="static __device__ const")]

    def fields(self, layers) -> tuple:
        return _fields(layers.robot.nv)

    def inner_body(self, layers) -> list:
        fd, minv, grad = (layers.compose(x) for x in self.composes)
        nv = layers.robot.nv
        arr = layers.arrays(self.fields(layers))
        a = {x: y.base for x, y in arr.items()}
        return [
            n.Comment("qdd = FD(q, qd, tau, f_ext): the composed forward dynamics"),
            layers.call_inner(fd, s_qdd=a["qdd"], s_q="s_q", s_qd="s_qd", s_tau="s_tau", f_ext="f_ext"),
            n.Sync(),
            n.Comment("d tau / d (q, qd) at that qdd: the composed inverse-dynamics gradient"),
            layers.call_inner(grad, s_dtau_dq=a["dtau_dq"], s_dtau_dqd=a["dtau_dqd"], s_q="s_q", s_qd="s_qd",
                              s_qdd=a["qdd"], f_ext="f_ext"),
            n.Sync(),
            *([] if "inv_M" in layers.reused else [layers.call_inner(minv, s_Minv=a["inv_M"], s_q="s_q"), n.Sync()]),
            n.Comment("d qdd / d u = -Minv d tau / d u, one output cell (both derivatives) per thread (P2)"),
            n.BlockStrideLoop("k", nv * nv, _product(layers.pfx, nv, arr, layers.vectors(), "k")),
        ]

    def state_body(self, layers) -> list:
        minv, grad = layers.compose("minv"), layers.compose("inverse_dynamics_gradient")
        nv = layers.robot.nv
        use = {"USE_F_EXT": "USE_F_EXT"}
        arr = layers.arrays(self.fields(layers), local=True)  # inv_M: forward dynamics' Minv where reused
        a = {x: y.base for x, y in arr.items()}
        return [
            local_declaration([x for k, x in arr.items() if k not in layers.reused],
                              comment="the composed results, local"),
            n.Comment("qdd = FD(q, qd, tau, f_ext): forward dynamics' steps, inline"
                      + (" (the Minv they leave is read below)" if layers.reused else "")),
            *layers.steps("forward_dynamics", local=True, qdd=a["qdd"]),
            layers.call_state(grad, use, dtau_dq=a["dtau_dq"], dtau_dqd=a["dtau_dqd"], q="q", qd="qd", qdd=a["qdd"],
                              f_ext="f_ext"),
            *([] if "inv_M" in layers.reused else [layers.call_state(minv, Minv=a["inv_M"], q="q")]),
            n.Comment("d qdd / d u = -Minv d tau / d u"),
            n.For("int k = 0", f"k < {nv * nv}", "++k", _product(layers.pfx, nv, arr, layers.vectors(local=True), "k")),
        ]


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
    emitter = ForwardDynamicsGradientEmitter
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the recursions are those of the algorithms "
                          "it composes (forward_dynamics, minv, inverse_dynamics_gradient: see their reviews)"),
        P2=done("the two nv x nv products -Minv dtau are 2 nv^2 independent dot products: one output cell "
                "(both derivatives, one Minv load for two products) per thread in the block layout"),
        P3=todo("done: forward dynamics is composed by its Minv method on every robot (where the robot's "
                "own forward dynamics runs ABA, a variant of it): Minv (tau - bias) leaves Minv (in its arena in "
                "the block layout; a local of this function in the per-state one, which runs its steps inline) "
                "and the product reads it there: no second minv, no array of its own, where ABA would add its "
                "recursions to minv's for the same Minv. Left: Minv is symmetric: half of it would do"),
        P4=todo("done: dtau's structural zeros are skipped (the gradient's cell table, baked: each column's "
                "rows as a compressed table the products walk). Left: the products read Minv by rows and "
                "dtau by columns, strided in shared memory; a column-major dtau would coalesce them"),
        notes="an orchestrator on one XImats load (forward_dynamics, inverse_dynamics_gradient and minv "
              "inners, by handle); its per-state layout runs the composed per-state functions, then the "
              "products as loops",
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

    def arenas(self, robot: Robot, options=None):
        return regions(_fields(robot.nv))

    def spill_rungs(self, robot: Robot, options=None):
        composes = ForwardDynamicsGradientEmitter.composes
        return spill_ladder(("the callees' first spill", {callee_rung(c, 1) for c in composes},
                             "what the composed algorithms' rung 1 spills"))


@hookimpl
def grid_register_algorithms():
    return [ForwardDynamicsGradient]
