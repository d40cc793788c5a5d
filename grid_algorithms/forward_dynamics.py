"""Forward dynamics composed as ``qdd = M^-1 (tau - ID(q, qd, 0, f_ext))``, or by ABA.

The orchestrator that upstream GRiD emits as ``forward_dynamics``: the inverse
inertia (:mod:`grid_algorithms.minv`) applied to the joint forces minus the bias
forces (inverse dynamics at zero acceleration, :mod:`grid_algorithms.inverse_dynamics`).
It equals :mod:`grid_algorithms.aba`, whose inner the generated code composes instead
where the GPU measured it faster (``forward_dynamics.tuning.json``); the Minv route pays
``O(n^2)`` for ``M^-1``, which the gradient (``forward_dynamics_gradient``) needs anyway.
"""

from __future__ import annotations

import attrs
import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.derivatives import Rule, SecondRule
from grid_core.emit import nodes as n
from grid_core.emit.emitter import Emitter, LayerOptions
from grid_core.emit.expr import Scope, sum_terms
from grid_core.emit.storage import Vector, local_declaration, regions, vector
from grid_core.errors import CodegenError
from grid_core.model import Robot
from grid_core.review import ParallelismReview, done, not_applicable, todo

# -- code generation -------------------------------------------------------------------
#
# An orchestrator, two ways: Minv (tau - bias) with the inners of minv and inverse_dynamics
# (the device layer the generator writes loads XImats once; both inners read it), or the
# articulated-body algorithm's inner.  Which one a robot gets is measured on the GPU
# (forward_dynamics.tuning.json) and baked into its header.

METHODS = ("minv", "aba")


@attrs.frozen
class ForwardDynamicsOptions(LayerOptions):
    method: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", *METHODS)))
    """``minv``: Minv (tau - ID(q, qd, 0, f_ext)); ``aba``: the articulated-body algorithm; ``auto``:
    the measured winner for the robot (else ``minv``)."""


class ForwardDynamicsEmitter(Emitter):
    Options = ForwardDynamicsOptions
    global_inputs = ("f_ext",)  # handed, in place, to the composed inner
    composes = ("inverse_dynamics", "minv", "aba")
    staged = True

    def resolve_options(self, options, tuning):
        if options.method != "auto":
            return options
        return attrs.evolve(options, method=tuning.get("method", "minv"))

    def composed(self, options, tuning):
        return ("aba",) if options.method == "aba" else ("inverse_dynamics", "minv")

    def inner_doc(self, layers) -> str:
        how = ("the articulated-body algorithm (aba_inner)" if _method(layers) == "aba"
               else "Minv (tau - bias): minv_inner and inverse_dynamics_inner")
        return f"Method: {how}."

    def fields(self, layers) -> tuple:
        return _fields(layers.robot.nv)

    def leaves(self, layers) -> tuple[str, ...]:
        return ("Minv",) if _method(layers) == "minv" else ()  # the product reads it last

    def inner_body(self, layers) -> list:
        if _method(layers) == "aba":
            return [layers.call_inner(layers.compose("aba"), s_qdd="s_qdd", s_q="s_q", s_qd="s_qd", s_tau="s_tau",
                                      f_ext="f_ext")]
        rnea, minv = layers.compose("inverse_dynamics"), layers.compose("minv")
        arr = layers.arrays(self.fields(layers))
        zero, bias, Minv = (arr[x] for x in ("zero", "bias", "Minv"))
        io = layers.vectors()
        return [
            n.Comment("the bias forces ID(q, qd, 0, f_ext): the composed inverse dynamics on a zero band"),
            n.BlockStrideLoop("i", "NUM_VEL", [n.Stmt(f"{zero.at('i')} = T(0)")]),
            n.Sync(),
            layers.call_inner(rnea, s_tau=bias.base, s_q="s_q", s_qd="s_qd", s_qdd=zero.base, f_ext="f_ext"),
            n.Comment("no barrier between the two: Minv reads only q and XImats, and writes none of what\n"
                      "inverse dynamics reads or writes (their scratch regions are apart in the arena)"),
            layers.call_inner(minv, s_Minv=Minv.base, s_q="s_q"),
            n.Sync(),
            n.Comment("qdd = Minv (tau - bias), one row per thread"),
            n.BlockStrideLoop("i", "NUM_VEL", [
                n.Stmt("T acc = T(0)"),
                n.For("int j = 0", "j < NUM_VEL", "++j",
                      [n.Stmt(f"acc += {Minv.at('i', 'j')} * ({io['tau']('j')} - {bias.at('j')})")]),
                n.Stmt(f"{io['qdd']('i')} = acc")]),
        ]

    def steps(self, layers, arrays, io, *, local, qdd=None):
        """The per-state layout's forward dynamics on the per-state function's ``q``, ``qd``,
        ``tau``, ``f_ext``, into the array named ``qdd`` (default: ``io``'s): by the Minv method its
        ``arrays`` declared in the caller's function (Minv left there: :meth:`leaves`), by ABA aba's
        per-state function.  The block layout calls the inner instead."""
        if not local:
            raise CodegenError("forward_dynamics: its steps are the per-state layout's (call the inner)")
        qdd = Vector(qdd) if qdd else io["qdd"]
        if _method(layers) == "aba":
            return [layers.call_state(layers.compose("aba"), {"USE_F_EXT": "USE_F_EXT"},
                                      qdd=qdd.base, q="q", qd="qd", tau="tau", f_ext="f_ext")]
        rnea, minv = layers.compose("inverse_dynamics"), layers.compose("minv")
        nv = layers.robot.nv
        bias, Minv = arrays["bias"], arrays["Minv"]
        scope = Scope("t")
        u = scope.let_all([sum_terms([(io["tau"](j),), (-1.0, bias.at(j))]) for j in range(nv)], "u")
        for i in range(nv):
            scope.assign(qdd(i), sum_terms([(Minv.at(i, j), u[j]) for j in range(nv)]))
        return [
            local_declaration([bias, Minv], comment="registers (or local memory): constant indices"),
            layers.call_state(rnea, {"USE_QDD": "false", "USE_F_EXT": "USE_F_EXT"},
                              tau=bias.base, q="q", qd="qd", qdd="nullptr", f_ext="f_ext"),
            layers.call_state(minv, Minv=Minv.base, q="q"),
            n.Comment("qdd = Minv (tau - bias)"),
            *scope.body(),
        ]

    def state_body(self, layers) -> list:
        return layers.own_steps(local=True)


def _fields(nv: int) -> tuple:
    """The Minv method's intermediate results (the zero band only in the block layout)."""
    return (vector("bias", nv, "bias forces ID(q, qd, 0, f_ext)"),
            vector("zero", nv, "zeros, the acceleration the composed inverse dynamics reads"),
            vector("Minv", nv * nv, "inverse joint-space inertia matrix", cols=nv))


def _method(layers) -> str:
    return layers.ctx.algorithm_options.method


def _jacobians(kernels, x, params, wanted):
    """``dqdd/dq``, ``dqdd/dqd``: the forward-dynamics gradient's; ``dqdd/dtau = Minv``; ``qdd =
    Minv (tau - ID(q, qd, 0, f_ext))``, so ``dqdd/df_ext = -Minv dtau/df_ext``, inverse dynamics'
    Jacobian in ``f_ext`` (its rule, by name)."""
    J = {}
    if wanted & {"q", "qd"}:
        J["q"], J["qd"] = kernels("forward_dynamics_gradient", x["q"], x["qd"], x["tau"], x.get("f_ext"),
                                  **params)
    if wanted & {"tau", "f_ext"}:
        J["tau"] = kernels("minv", x["q"])
    if "f_ext" in wanted:
        J["f_ext"] = -kernels.xp.einsum("bij,bjkc->bikc", J["tau"],
                                        kernels.jacobian("inverse_dynamics", "f_ext", {"q": x["q"]}))
    return J


def _hessians(kernels, x, params, wanted):
    """The derivatives of the Jacobians in ``q``, ``qd``, ``tau``: fdsva_so's four tensors.
    ``d(dqdd/dq)/d(q, qd, tau)`` is ``d2qdd_dq2``, ``d2qdd_dqdqd`` and ``d2qdd_dq_dtau``;
    ``d(dqdd/dqd)/dq`` is ``d2qdd_dqdqd[i, k, j]`` (the derivatives along q and along qd commute: qd is
    a vector space), ``/dqd`` ``d2qdd_dqd2``; ``d(Minv)/dq`` is ``d2qdd_dq_dtau[i, k, j]``; ``dqdd/dqd =
    -Minv dID/dqd`` and ``Minv`` do not depend on ``tau`` (inverse dynamics is linear in qdd), nor
    ``Minv`` on ``qd``."""
    d2q, d2qd, d2qqd, d2qtau = kernels("fdsva_so", x["q"], x["qd"], x["tau"], x.get("f_ext"), **params)
    swap = kernels.xp.einsum
    H = {"q": {"q": d2q, "qd": d2qqd, "tau": d2qtau},
         "qd": {"q": swap("bikj->bijk", d2qqd), "qd": d2qd},
         "tau": {"q": swap("bikj->bijk", d2qtau)}}
    return {a: {b: h for b, h in hs.items() if b in wanted} for a, hs in H.items()}


class ForwardDynamics(Algorithm):
    name = "forward_dynamics"
    summary = "joint accelerations qdd = Minv(q) (tau - ID(q, qd, 0, f_ext)), composed (or by ABA)"
    math = r"""
.. math::

   \ddot q = M^{-1}(q)\,\big(\tau - \mathrm{ID}(q, \dot q, 0, f^{ext})\big) .
"""
    depends_on = ("minv", "inverse_dynamics", "aba")
    emitter = ForwardDynamicsEmitter
    derivatives = Rule(("q", "qd", "tau", "f_ext"), ("forward_dynamics_gradient", "minv", "inverse_dynamics"),
                       _jacobians, second=SecondRule(("q", "qd", "tau"), ("fdsva_so",), _hessians))
    """The f_ext column calls inverse dynamics' rule, whose f_ext Jacobian calls ``inverse_dynamics``.
    Second derivatives (a PyTorch double backward, a JAX Hessian) in q, qd and tau from fdsva_so."""
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the recursions are its callees' (minv's and "
                          "inverse_dynamics', or aba's: see their reviews)"),
        P2=done("the final matrix-vector product is nv independent row dot products, one thread each"),
        P3=done("minv and the bias forces are independent: their inners run back to back with no barrier "
                "between them, on the one XImats load of the device layer; running them side by side on "
                "two halves of the block is left (each inner is written for the whole block)"),
        P4=todo("Minv is symmetric: read its upper triangle in the product and let minv skip the mirror; "
                "the bias forces' zero acceleration is still read and multiplied (IEEE rules keep the "
                "compiler from folding x * 0)"),
        notes="two methods: Minv (tau - bias) composed from minv and inverse_dynamics, or the "
              "articulated-body algorithm (aba's inner); the method of each robot is measured on the GPU "
              "(forward_dynamics.tuning.json, figures below) and baked into its header",
    )

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "tau")

    def outputs(self, robot: Robot, **options):
        return (Port("qdd", (robot.nv,), "joint accelerations"),)

    def arenas(self, robot: Robot, options=None):
        if options is not None and options.method == "aba":
            return ()  # the composed aba brings its own
        return regions(_fields(robot.nv))

    def spill_rungs(self, robot: Robot, options=None):
        # the callee's own analysis (minv's F region first: seed 004's F-region spill; or aba's
        # cold sub-band), then everything
        return spill_ladder(("the callee's first spill",
                             {callee_rung(c, 1) for c in ("minv", "aba") if c in ForwardDynamicsEmitter.composes},
                             "what the composed minv's (or aba's) rung 1 spills"))

    def reference(self, ctx, q, qd, tau, f_ext=None, gravity=DEFAULT_GRAVITY):
        bias = ctx.inverse_dynamics(q, qd, np.zeros(ctx.robot.nv), f_ext, gravity)
        return ctx.minv(q) @ (tau - bias)


@hookimpl
def grid_register_algorithms():
    return [ForwardDynamics]
