"""Inverse dynamics by the recursive Newton-Euler algorithm (RNEA).

``tau = ID(q, qd, qdd, f_ext)``: the joint forces that produce ``qdd`` at state
``(q, qd)`` under gravity and the external forces ``f_ext`` (one spatial force
per body, in the body frame, ``[force; moment]`` as Pinocchio orders it).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.arena import spill_ladder
from grid_core.derivatives import ZERO_GRAVITY, Rule, SecondRule
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, sum_terms
from grid_core.emit.storage import Field, region
from grid_core.model import Body, JointType, Robot
from grid_core.model.joints import body_q, body_v, joint_transform, motion_subspace
from grid_core.model.spatial import crf, crm, gravity_accel
from grid_core.review import ParallelismReview, done


def rnea(robot: Robot, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
    """RNEA (Featherstone, RBDA Table 5.1).  Returns ``(tau, v, a, f, Xup)`` per body."""
    NB = robot.num_bodies
    Xup, S, v, a, f = [None] * NB, [None] * NB, [None] * NB, [None] * NB, [None] * NB
    a0 = gravity_accel(gravity)
    for i, body in enumerate(robot.bodies):
        Xup[i] = joint_transform(body, body_q(body, q)) @ body.Xtree
        S[i] = motion_subspace(body)
        vJ = S[i] @ body_v(body, qd)
        aJ = S[i] @ body_v(body, qdd)
        if body.parent < 0:
            v[i] = vJ
            a[i] = Xup[i] @ a0 + aJ
        else:
            v[i] = Xup[i] @ v[body.parent] + vJ
            a[i] = Xup[i] @ a[body.parent] + aJ + crm(v[i]) @ vJ
        f[i] = body.inertia @ a[i] + crf(v[i]) @ body.inertia @ v[i]
        if f_ext is not None:
            fx = f_ext[i]
            f[i] = f[i] - np.concatenate([fx[3:], fx[:3]])  # [force; moment] -> [moment; force]
    tau = np.zeros(robot.nv)
    for i in reversed(range(NB)):
        body = robot.bodies[i]
        tj = S[i].T @ f[i]
        if body.mimic is not None:
            tau[body.v_index] += body.mimic.multiplier * tj[0]
        else:
            tau[body.v_index : body.v_index + body.nv] += tj
        if body.parent >= 0:
            f[body.parent] = f[body.parent] + Xup[i].T @ f[i]
    return tau, v, a, f, Xup


# -- code generation -------------------------------------------------------------------
#
# One set of per-body steps serves both layouts: the block-cooperative one (one block
# per state; the steps run one body per warp, level by level, on shared-memory arrays)
# and the per-state one (one thread per state; the same steps run as straight-line code
# on local arrays the compiler keeps in registers).  The layers around them are the
# generator's (grid_core.emit.layers), the schedules the shared sweep drivers'.


class RneaSteps:
    """RNEA's per-body steps, emitted with every robot constant folded in.

    ``arr`` maps the logical arrays to C++ expressions: ``q``, ``qd``, ``qdd``, ``xi`` and
    ``tau`` (element index -> expression), ``v``, ``a`` and ``f`` (the typed arrays of
    :func:`fields`, by body); ``local``: the code is a per-state function's (which reads ``f_ext``
    under a compile-time flag).  ``every_body``: the arrays among ``v`` and ``a`` stored at every
    body (by default only where a child reads them); an entry known at generation time is never
    stored, but folded where read (:meth:`get`).
    """

    def __init__(self, robot: Robot, arr: dict, local: bool = False, every_body=()):
        self.robot, self.arr, self.local = robot, arr, local
        self.every_body = set(every_body)
        self.a0 = ss.A0

    def get(self, name: str, body: int, k: int):
        return self.arr[name].get(body, k)

    def _X(self, scope: Scope, body: Body) -> ss.Transform:
        return ss.Transform(self.robot, body, self.arr["xi"], scope)

    def forward(self, scope: Scope, body: Body) -> None:
        """v, a and f of ``body`` (v and a stored only where a child reads them)."""
        arr, i = self.arr, body.index
        scope.comment(f"body {i} ({body.joint.name}): v, a, f")
        X = self._X(scope, body)
        if body.jtype is JointType.FLOATING:
            Ea0 = X.rotate(self.a0)
            v = ss.joint_motion(body, arr["qd"])
            aJ = ss.joint_motion(body, arr["qdd"])
            a = aJ[:3] + [sum_terms([(Ea0[k],), (aJ[3 + k],)]) for k in range(3)]
        else:
            vJ = scope.let_all(ss.joint_motion(body, arr["qd"]), "vJ")
            aJ = ss.joint_motion(body, arr["qdd"])
            if body.parent < 0:
                # X a0 with a0 = [0; -g]: the angular part is zero and r x 0 = 0
                Xa0 = [0.0, 0.0, 0.0] + X.rotate(self.a0, scope)
                v = vJ
                a = [sum_terms([(Xa0[k],), (aJ[k],)]) for k in range(6)]
            else:
                p = body.parent
                Xv = X.motion([self.get("v", p, k) for k in range(6)], scope)
                v = scope.let_all([sum_terms([(Xv[k],), (vJ[k],)]) for k in range(6)], "v")
                Xa = X.motion([self.get("a", p, k) for k in range(6)], scope)
                vxvJ = ss.cross_motion(v, vJ)
                a = [sum_terms([(Xa[k],), (aJ[k],), (vxvJ[k],)]) for k in range(6)]
        v = scope.let_all(v, "v")
        a = scope.let_all(a, "a")
        for name, vec in (("v", v), ("a", a)):
            if self.robot.topology.children[i] or name in self.every_body:
                arr[name].put(scope, i, vec)
        I = np.asarray(body.inertia)
        Iv = scope.let_all(ss.inertia_times(I, v), "Iv")
        Ia = ss.inertia_times(I, a)
        vxIv = ss.cross_force(v, Iv)
        for k in range(6):
            scope.assign(arr["f"](i, k), sum_terms([(Ia[k],), (vxIv[k],)]))
        ss.minus_f_ext(scope, [arr["f"](i, k) for k in range(6)], i, self.local)

    def backward(self, scope: Scope, parent: int, children) -> None:
        """``f[parent] += X_c^T f[c]`` for each child ``c``."""
        arr = self.arr
        for c in children:
            body = self.robot.bodies[c]
            scope.comment(f"f[{parent}] += X^T f[{c}] ({body.joint.name})")
            contrib = self._X(scope, body).force_T([arr["f"](c, k) for k in range(6)], scope)
            for k in range(6):
                scope.add_to(arr["f"](parent, k), contrib[k])

    def tau_items(self) -> list[tuple[int, list]]:
        """Each velocity index with its contributions ``(body, multiplier, component)``:
        ``component`` is an ``f`` index for a free-flyer, ``None`` for ``S^T f``."""
        items: dict[int, list] = {}
        for b in self.robot.bodies:
            if b.jtype is JointType.FLOATING:
                for k in range(6):  # tau = S^T f = [force; moment]
                    items.setdefault(b.v_index + k, []).append((b, 1.0, (k + 3) % 6))
            else:
                mult = b.mimic.multiplier if b.mimic is not None else 1.0
                items.setdefault(b.v_index, []).append((b, mult, None))
        return sorted(items.items())

    def tau(self, scope: Scope, dof: int, contributions) -> None:
        arr = self.arr
        terms = []
        for body, mult, comp in contributions:
            f = [arr["f"](body.index, k) for k in range(6)]
            part = f[comp] if comp is not None else ss.subspace_transpose_times(body, f)
            terms.append((mult, part))
        scope.assign(arr["tau"](dof), sum_terms(terms))


def fields(robot: Robot) -> tuple[Field, ...]:
    """RNEA's arrays: the spatial velocity, acceleration and force of every body."""
    nb = range(robot.num_bodies)
    return (Field("v", nb, 6, "spatial velocity"), Field("a", nb, 6, "spatial acceleration"),
            Field("f", nb, 6, "spatial force (after the backward sweep: the subtree's)"))




class InverseDynamicsEmitter(Emitter):
    Options = sweeps.SweepOptions
    global_inputs = ("f_ext",)  # read in place: one spatial force per body, used once
    nullable_inputs = ("qdd", "f_ext")  # no qdd: the bias forces; no f_ext: none
    staged = True

    def block_threads_hint(self, robot: Robot) -> int:
        # one warp per body of the widest level (P1), and enough lanes for the per-body
        # and per-dof fan-outs
        return max(32 * robot.topology.max_level_width, robot.num_bodies, robot.nv)

    def grid_data_names(self):
        return {"tau": "c"}  # upstream's name

    def fields(self, layers) -> tuple:
        return fields(layers.robot)

    def steps(self, layers, arrays, io, *, local, every_body=()):
        """RNEA's steps on ``io``'s q, qd, qdd and xi (a per-state caller without acceleration
        input passes qdd ``None``: zero) and on its own arrays, by handle; ``f_ext`` the caller's."""
        qdd = io["qdd"] if io.get("qdd") is not None else (lambda i: 0.0)
        arr = {**arrays, "q": io["q"], "qd": io["qd"], "qdd": qdd, "xi": io["xi"], "tau": io.get("tau")}
        return RneaSteps(layers.robot, arr, local, every_body)

    def _own(self, layers, local: bool) -> RneaSteps:
        io = layers.vectors(local)
        if local:  # the per-state function takes no acceleration input for the bias forces (USE_QDD false)
            io["qdd"] = lambda i: f"(USE_QDD ? qdd[{i}] : T(0))"
        return self.steps(layers, layers.arrays(fields(layers.robot), local), io, local=local)

    def inner_body(self, layers) -> list:
        robot = layers.robot
        steps = self._own(layers, local=False)
        form = sweeps.form_of(layers.ctx)

        def tau(scope, dof, contributions):
            steps.tau(scope, dof, contributions)

        return [
            *ss.gravity_statements(),
            n.Comment("forward sweep (P1 by levels: the bodies of a level in parallel, on different warps,\n"
                      "whose code differs: in one warp it would serialise)"),
            *sweeps.forward(robot, steps.forward, form),
            n.Comment("backward sweep: each parent gathers its children (no atomics, fixed order)"),
            *sweeps.backward_gather(robot, steps.backward, form),
            n.Comment("joint forces, one velocity index per thread (P2-style fan-out)"),
            *sweeps.fan_out(steps.tau_items(), tau),
        ]

    def state_body(self, layers) -> list:
        robot = layers.robot
        steps = self._own(layers, local=True)
        arr = steps.arr
        scope = Scope("t")
        items = steps.tau_items()
        single = {dof: contrib for dof, contrib in items if len(contrib) == 1}
        by_body: dict[int, list] = {}
        for dof, contrib in single.items():
            by_body.setdefault(contrib[0][0].index, []).append((dof, contrib))

        def complete(scope, c):
            # a finished subtree: its joint forces now, its force to the parent (only the
            # forces of the current root path stay live in registers)
            for dof, contrib in by_body.get(c, ()):
                steps.tau(scope, dof, contrib)
            if robot.bodies[c].parent >= 0:
                steps.backward(scope, robot.bodies[c].parent, [c])

        sweeps.depth_first(robot, scope, arr, steps.forward, complete)
        for dof, contrib in items:
            if dof not in single:
                steps.tau(scope, dof, contrib)
        return [*ss.gravity_statements(), layers.locals([arr[x] for x in ("v", "a", "f")]), *scope.body()]


def _force_map(kernels, q):
    """``dtau/df_ext``, ``(B, nv, NB, 6)``: tau is affine in ``f_ext``, and its part ``ID(q, 0, 0,
    f_ext)`` with gravity off depends on ``q`` alone (no velocity, acceleration or gravity term is
    left in the sweeps), so the Jacobian is that call on each unit force, one column each."""
    robot, xp = kernels.robot, kernels.xp
    shape, (b, nv) = (robot.num_bodies, 6), (q.shape[0], robot.nv)
    k = 6 * robot.num_bodies
    zero = xp.const(np.zeros((b * k, nv)), q)
    tau = kernels("inverse_dynamics", xp.repeat(q, k), zero, zero, kernels.basis(b, shape, q), gravity=ZERO_GRAVITY)
    return xp.einsum("bkcv->bvkc", tau.reshape(b, robot.num_bodies, 6, nv))


def _jacobians(kernels, x, params, wanted):
    """``dtau/dq``, ``dtau/dqd``: the inverse-dynamics gradient's; ``dtau/dqdd = M`` (tau is linear
    in qdd); ``dtau/df_ext``: :func:`_force_map`."""
    J = {}
    if wanted & {"q", "qd"}:
        J["q"], J["qd"] = kernels("inverse_dynamics_gradient", x["q"], x["qd"], x["qdd"], x.get("f_ext"),
                                  **params)
    if "qdd" in wanted:
        J["qdd"] = kernels("crba", x["q"])
    if "f_ext" in wanted:
        J["f_ext"] = _force_map(kernels, x["q"])
    return J


def _hessians(kernels, x, params, wanted):
    """The derivatives of the Jacobians in ``q``, ``qd``, ``qdd``: idsva_so's four tensors.
    ``d(dtau/dq)/d(q, qd, qdd)`` is ``d2tau_dq2``, ``d2tau_dqdqd`` and ``dM_dq[i, k, j]`` (``tau = M qdd
    + ...``); ``d(dtau/dqd)/dq`` is ``d2tau_dqdqd[i, k, j]`` (the derivatives along q and along qd
    commute: qd is a vector space), ``/dqd`` ``d2tau_dqd2``; ``dM/dq`` is ``dM_dq``; ``dtau/dqd`` and
    ``M`` do not depend on ``qdd``, nor ``M`` on ``qd``."""
    d2q, d2qd, d2qqd, dM = kernels("idsva_so", x["q"], x["qd"], x["qdd"], x.get("f_ext"), **params)
    swap = kernels.xp.einsum
    H = {"q": {"q": d2q, "qd": d2qqd, "qdd": swap("bikj->bijk", dM)},
         "qd": {"q": swap("bikj->bijk", d2qqd), "qd": d2qd},
         "qdd": {"q": dM}}
    return {a: {b: h for b, h in hs.items() if b in wanted} for a, hs in H.items()}


class InverseDynamics(Algorithm):
    name = "inverse_dynamics"
    summary = "joint forces tau = ID(q, qd, qdd, f_ext) by the recursive Newton-Euler algorithm"
    math = r"""
Forward pass, root to leaves, for each body :math:`i` with parent :math:`\lambda(i)`:

.. math::

   X_i = X_J(q_i)\,X_{T,i}, \quad
   v_i = X_i v_{\lambda(i)} + S_i \dot q_i, \quad
   a_i = X_i a_{\lambda(i)} + S_i \ddot q_i + v_i \times S_i \dot q_i,

   f_i = I_i a_i + v_i \times^* I_i v_i - f^{ext}_i,

with :math:`a_0 = -a_g` (gravity as a fictitious base acceleration).  Backward pass,
leaves to root: :math:`\tau_i = S_i^T f_i`, :math:`f_{\lambda(i)} \mathrel{+}= X_i^T f_i`.
"""
    review = ParallelismReview(
        P1=done("block layout: the forward sweep runs level by level, the bodies of a level in "
                "parallel (one thread each, one barrier per level); the backward sweep has each parent "
                "of a level gather its children's forces (no atomics, deterministic order). The "
                "per-body form stays available (p1='bodies') for the A/B; a chain is the same either way"),
        P2=done("the joint forces are a fan-out over velocity indices (one thread each); no other "
                "independent columns exist in a vector output"),
        P3=done("the configuration-dependent transform data (sin/cos, free-flyer rotation) is hoisted "
                "out of the sweep into one parallel pass over bodies (load_update_XImats)"),
        P4=done("robot constants (placements, inertias, axes) are folded into the code, their zeros "
                "dropped; per body only sin/cos (or E and p of a free-flyer) is stored: 2 scalars "
                "instead of a 36-entry transform"),
    )
    emitter = InverseDynamicsEmitter
    derivatives = Rule(("q", "qd", "qdd", "f_ext"), ("inverse_dynamics_gradient", "crba", "inverse_dynamics"),
                       _jacobians, second=SecondRule(("q", "qd", "qdd"), ("idsva_so",), _hessians))
    """Second derivatives (a PyTorch double backward, a JAX Hessian) in q, qd and qdd from idsva_so, built on
    the first one."""

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "qdd")

    def outputs(self, robot: Robot):
        return (Port("tau", (robot.nv,), "joint forces"),)

    def reference(self, ctx, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
        return rnea(ctx.robot, q, qd, qdd, f_ext, gravity)[0]

    def arenas(self, robot: Robot, options=None):
        return (region("vaf", fields(robot), "spatial velocity, acceleration and force of every body"),)

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("sweep state in global", {"vaf"}, "the v/a/f band goes to d_workspace"))


@hookimpl
def grid_register_algorithms():
    return [InverseDynamics]
