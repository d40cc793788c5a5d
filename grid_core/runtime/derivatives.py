"""First derivatives of the differentiable calls, from the generated gradient kernels: the
Jacobians of one call's output with respect to its state inputs, at the primal, which the
PyTorch custom operators (:mod:`.autograd_torch`) contract with the output's gradient
(vector-Jacobian products) and the JAX rules (:mod:`.jax_rules`) with the inputs' tangents
(Jacobian-vector products; JAX transposes that linear map for reverse mode).

:data:`RULES` is the one table: per differentiable algorithm, its differentiable inputs, the
kernels its Jacobians call and the chain-rule wiring from their outputs.  Every Jacobian has
the batch axis first, then the output's axes, then the input's: ``(B, *out, *in)``.

- ``inverse_dynamics(q, qd, qdd, f_ext)``: ``dtau/dq`` and ``dtau/dqd`` are
  ``inverse_dynamics_gradient``'s; ``tau`` is linear in ``qdd`` with Jacobian the mass matrix
  (``crba``); and it is affine in ``f_ext``, whose part ``ID(q, 0, 0, f_ext)`` with gravity off
  depends on ``q`` alone (no velocity, acceleration or gravity term is left in the sweeps), so
  ``dtau/df_ext`` is that call on the unit forces, one column each (:func:`force_map`).
- ``forward_dynamics`` and ``aba(q, qd, tau, f_ext)``: ``dqdd/dq`` and ``dqdd/dqd`` are
  ``forward_dynamics_gradient``'s; ``dqdd/dtau = Minv``; ``qdd = Minv (tau - ID(q, qd, 0,
  f_ext))``, so ``dqdd/df_ext = -Minv dtau/df_ext``.
- ``crba(q)``: ``M(q) e_j = ID(q, 0, e_j)`` with gravity off, so column ``j`` of ``dM/dq`` is
  ``inverse_dynamics_gradient``'s ``dtau/dq`` at ``qd = 0``, ``qdd = e_j``, no gravity.
- ``minv(q)``: ``dMinv = -Minv dM Minv``.
- ``end_effector_pose(q)``: the frame Jacobians (``end_effector_pose_gradient``, rows
  ``[linear; angular]`` in world-aligned axes): ``dp/dq = J[:3]``, ``dR/dq_j = skew(J[3:, j]) R``.

The gradient kernels differentiate along the tangent space: for a free-flyer, ``q (+) dq`` moves
the base by ``dq[:3]`` in the base frame and rotates it by ``R exp(dq[3:])``.  The derivative
with respect to the seven coordinates of q (position, quaternion ``x y z w``) goes through the
chart of :class:`Chart`: the call is a function of the position and of the normalised quaternion
``quat / |quat|`` (the kernels read a quaternion that way, and refuse one whose norm is more than
``QUATERNION_TOLERANCE`` from 1), so a finite difference in any coordinate of q agrees with it.

The Jacobians are formed with a few operations (``einsum``, ``reshape``, slicing) that PyTorch
tensors and JAX arrays share, given by the framework's namespace ``xp`` (:class:`Namespace`).
"""

from __future__ import annotations

import math
from typing import Callable

import attrs
import numpy as np

from ..model.robot import JointType

ZERO_GRAVITY = np.zeros(3)
LEVI_CIVITA = np.zeros((3, 3, 3))
for _i, _j, _k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    LEVI_CIVITA[_i, _j, _k], LEVI_CIVITA[_i, _k, _j] = 1.0, -1.0


@attrs.frozen
class Namespace:
    """What the wiring needs of a framework: ``einsum``, ``repeat(x, k)`` (each state ``k``
    times along the batch axis) and ``const(a, like)`` (a numpy array as an array of ``like``'s
    kind, dtype and device)."""

    einsum: Callable
    repeat: Callable
    const: Callable


@attrs.frozen
class Kernels:
    """The generated kernels a rule calls: ``kernels(name, *states, gravity=None)`` on the
    framework's arrays (an omitted optional input as None), outputs of the same kind."""

    robot: object
    call: Callable

    def __call__(self, name: str, *states, gravity=None):
        return self.call(name, states, gravity)


@attrs.frozen
class Rule:
    """One differentiable algorithm: its differentiable state inputs, the kernels its
    Jacobians call, and ``jacobians(kernels, xp, x, gravity, wanted)``: the Jacobian of the
    output with respect to each input of ``wanted`` (``x``: the inputs by name, batched; q's
    in the tangent space)."""

    inputs: tuple[str, ...]
    needs: tuple[str, ...]
    jacobians: Callable


def _basis(xp, n: int, shape: tuple, like):
    """``n`` copies of the unit arrays of ``shape``: ``(n * prod(shape), *shape)``."""
    k = int(np.prod(shape))
    return xp.const(np.tile(np.eye(k), (n, 1)).reshape(n * k, *shape), like)


def force_map(kernels, xp, q):
    """``dtau/df_ext`` of inverse dynamics, ``(B, nv, NB, 6)``: ``ID(q, 0, 0, e)`` with gravity off
    for each unit force ``e``."""
    robot = kernels.robot
    shape, (b, nv) = (robot.num_bodies, 6), (q.shape[0], robot.nv)
    k = 6 * robot.num_bodies
    zero = xp.const(np.zeros((b * k, nv)), q)
    tau = kernels("inverse_dynamics", xp.repeat(q, k), zero, zero, _basis(xp, b, shape, q), gravity=ZERO_GRAVITY)
    return xp.einsum("bkcv->bvkc", tau.reshape(b, robot.num_bodies, 6, nv))


def mass_matrix_derivative(kernels, xp, q):
    """``dM/dq``, ``(B, nv, nv, nv)`` (``[i, j, k] = dM_ij/dq_k``): column ``j`` is the
    inverse-dynamics gradient's ``dtau/dq`` at ``qd = 0``, ``qdd = e_j``, gravity off."""
    b, nv = q.shape[0], kernels.robot.nv
    zero = xp.const(np.zeros((b * nv, nv)), q)
    dq, _ = kernels("inverse_dynamics_gradient", xp.repeat(q, nv), zero, _basis(xp, b, (nv,), q), None,
                    gravity=ZERO_GRAVITY)
    return xp.einsum("bjik->bijk", dq.reshape(b, nv, nv, nv))


def _inverse_dynamics(kernels, xp, x, gravity, wanted):
    J = {}
    if wanted & {"q", "qd"}:
        J["q"], J["qd"] = kernels("inverse_dynamics_gradient", x["q"], x["qd"], x["qdd"], x.get("f_ext"),
                                  gravity=gravity)
    if "qdd" in wanted:
        J["qdd"] = kernels("crba", x["q"])
    if "f_ext" in wanted:
        J["f_ext"] = force_map(kernels, xp, x["q"])
    return J


def _forward_dynamics(kernels, xp, x, gravity, wanted):
    J = {}
    if wanted & {"q", "qd"}:
        J["q"], J["qd"] = kernels("forward_dynamics_gradient", x["q"], x["qd"], x["tau"], x.get("f_ext"),
                                  gravity=gravity)
    if wanted & {"tau", "f_ext"}:
        J["tau"] = kernels("minv", x["q"])
    if "f_ext" in wanted:
        J["f_ext"] = -xp.einsum("bij,bjkc->bikc", J["tau"], force_map(kernels, xp, x["q"]))
    return J


def _crba(kernels, xp, x, gravity, wanted):
    return {"q": mass_matrix_derivative(kernels, xp, x["q"])}


def _minv(kernels, xp, x, gravity, wanted):
    Minv = kernels("minv", x["q"])
    dM = xp.einsum("bijk->bkij", mass_matrix_derivative(kernels, xp, x["q"]))
    return {"q": -xp.einsum("bkic->bick", Minv[:, None] @ dM @ Minv[:, None])}


_EMBED_R = np.eye(4, 3)  # 3 rows into 4
_EMBED_C = np.eye(3, 4)
_LAST = np.eye(4)[3]


def _end_effector_pose(kernels, xp, x, gravity, wanted):
    q = x["q"]
    T, J = kernels("end_effector_pose", q), kernels("end_effector_pose_gradient", q)
    eps, E, C, e4 = (xp.const(a, q) for a in (LEVI_CIVITA, _EMBED_R, _EMBED_C, _LAST))
    # skew(w) R, skew(w)[x, y] = -eps[x, y, z] w[z]
    dR = -xp.einsum("xyz,bfzj,bfyd->bfxdj", eps, J[:, :, 3:], T[:, :, :3, :3])
    dT = xp.einsum("rx,bfxdj,dc->bfrcj", E, dR, C) + xp.einsum("rx,bfxj,c->bfrcj", E, J[:, :, :3], e4)
    return {"q": dT}


_DYNAMICS_NEEDS = ("inverse_dynamics_gradient", "crba", "inverse_dynamics")
_FD_NEEDS = ("forward_dynamics_gradient", "minv", "inverse_dynamics")
RULES: dict[str, Rule] = {
    "inverse_dynamics": Rule(("q", "qd", "qdd", "f_ext"), _DYNAMICS_NEEDS, _inverse_dynamics),
    "forward_dynamics": Rule(("q", "qd", "tau", "f_ext"), _FD_NEEDS, _forward_dynamics),
    "aba": Rule(("q", "qd", "tau", "f_ext"), _FD_NEEDS, _forward_dynamics),
    "crba": Rule(("q",), ("inverse_dynamics_gradient",), _crba),
    "minv": Rule(("q",), ("minv", "inverse_dynamics_gradient"), _minv),
    "end_effector_pose": Rule(("q",), ("end_effector_pose", "end_effector_pose_gradient"), _end_effector_pose),
}
"""The differentiable algorithms and their wiring (integrator: not yet generated; no second
derivatives: no second-order kernel yet)."""


class Chart:
    """The derivative of the tangent coordinates with respect to the coordinates of q.  A
    one-coordinate joint is its own column.  A free-flyer ``(p, quat)``, ``quat = (x, y, z, w)``:
    the tangent ``(dv, dw)`` moves ``p`` by ``R dv`` and rotates by ``R exp(dw)``, ``R`` the
    rotation of ``quat / |quat|``, so ``d/dp = d/dv R^T`` and ``d/dquat = d/dw E`` with
    ``E dquat = 2 vec(conj(quat) dquat) / |quat|^2`` (quaternion product):
    ``E = 2 [w I + [v]x^T | -v] / |quat|^2``, ``v = (x, y, z)``; a change of the quaternion's norm
    moves nothing."""

    def __init__(self, robot):
        self.nq, self.nv = robot.nq, robot.nv
        self.base = np.zeros((robot.nv, robot.nq))
        self.free: list[tuple[int, int]] = []
        for b in robot.bodies:
            if b.jtype is JointType.FLOATING:
                self.free.append((b.q_index, b.v_index))
            elif b.nq:
                if b.nq != b.nv:
                    raise NotImplementedError(f"no chart for joint {b.joint.name} ({b.nq} coordinates, {b.nv} speeds)")
                self.base[b.v_index:b.v_index + b.nv, b.q_index:b.q_index + b.nq] = np.eye(b.nq)
        self.identity = not self.free and self.nq == self.nv

    def matrix(self, xp, q):
        """``d(tangent)/dq`` at ``q`` (``(B, nq)``): ``(B, nv, nq)``; a gradient with respect to q is
        the tangent one times it, a tangent the q tangent's product with it."""
        out = xp.const(self.base[None], q)
        for qi, vi in self.free:
            quat = q[:, qi + 3:qi + 7]
            v, w = quat[:, :3], quat[:, 3, None, None]
            n2 = (quat * quat).sum(-1)[:, None, None]
            eye, eps = xp.const(np.eye(3), q), xp.const(LEVI_CIVITA, q)
            vx = -(eps @ v[:, None, :, None])[..., 0]  # [v]x
            # R of the normalised quaternion: ((w^2 - v.v) I + 2 v v^T + 2 w [v]x) / |quat|^2
            R = ((w * w - (v * v).sum(-1)[:, None, None]) * eye + 2 * v[:, :, None] * v[:, None, :] + 2 * w * vx) / n2
            E = 2 * ((w * eye - vx) @ xp.const(np.eye(3, 4), q) - v[:, :, None] * xp.const(np.eye(4)[3], q)) / n2
            pick_p, pick_quat = np.zeros((3, self.nq)), np.zeros((4, self.nq))
            pick_p[:, qi:qi + 3], pick_quat[:, qi + 3:qi + 7] = np.eye(3), np.eye(4)
            at_v, at_w = np.zeros((self.nv, 3)), np.zeros((self.nv, 3))
            at_v[vi:vi + 3], at_w[vi + 3:vi + 6] = np.eye(3), np.eye(3)
            out = out + xp.const(at_v, q) @ R.swapaxes(-1, -2) @ xp.const(pick_p, q) + \
                xp.const(at_w, q) @ E @ xp.const(pick_quat, q)
        return out


def jacobians(rule: Rule, kernels, xp, x: dict, gravity, wanted: set) -> dict:
    """The rule's Jacobians of ``wanted`` at the batched inputs ``x`` (q's in the tangent space)."""
    J = rule.jacobians(kernels, xp, x, gravity, wanted)
    return {k: v for k, v in J.items() if k in wanted}


def vjps(rule: Rule, kernels, xp, x: dict, gravity, g, wanted: set, chart: Chart, out_ndim: int) -> dict:
    """The gradients of ``wanted`` inputs for the output gradient ``g`` (batched, ``(B, *out)``);
    q's through the chart."""
    grads = {k: vjp(g, J, out_ndim) for k, J in jacobians(rule, kernels, xp, x, gravity, wanted).items()}
    if "q" in grads and not chart.identity:
        grads["q"] = (grads["q"][:, None] @ chart.matrix(xp, x["q"]))[:, 0]
    return grads


def jvps(rule: Rule, kernels, xp, x: dict, gravity, tangents: dict, chart: Chart, out_ndim: int):
    """The output's tangent for the inputs' ``tangents`` (batched; those absent are zero), or
    None when none is given; q's through the chart."""
    if not tangents:
        return None
    tangents = dict(tangents)
    if "q" in tangents and not chart.identity:
        tangents["q"] = (chart.matrix(xp, x["q"]) @ tangents["q"][..., None])[..., 0]
    J = jacobians(rule, kernels, xp, x, gravity, set(tangents))
    total = None
    for k, t in tangents.items():
        term = jvp(J[k], t, out_ndim)
        total = term if total is None else total + term
    return total


def vjp(g, J, out_ndim: int):
    """``g`` (``(B, *out)``) times ``J`` (``(B, *out, *in)``): ``(B, *in)``."""
    b, outer, inner = J.shape[0], J.shape[1:1 + out_ndim], J.shape[1 + out_ndim:]
    return (g.reshape(b, 1, math.prod(outer)) @ J.reshape(b, math.prod(outer), math.prod(inner))).reshape(b, *inner)


def jvp(J, t, out_ndim: int):
    """``J`` (``(B, *out, *in)``) times ``t`` (``(B, *in)``): ``(B, *out)``."""
    b, outer, inner = J.shape[0], J.shape[1:1 + out_ndim], J.shape[1 + out_ndim:]
    return (J.reshape(b, math.prod(outer), math.prod(inner)) @ t.reshape(b, math.prod(inner), 1)).reshape(b, *outer)


def chart_of(backend) -> Chart:
    """The backend's robot's :class:`Chart`, made once."""
    chart = backend.__dict__.get("_chart")
    if chart is None:
        chart = backend.__dict__["_chart"] = Chart(backend.robot)
    return chart


def gradient_backend(backend):
    """The backend whose library holds every kernel the rules of ``backend``'s differentiable
    algorithms call: ``backend`` itself where its library has them all, else the same build
    with them added, built once (on first use) and kept on ``backend``."""
    gb = backend.__dict__.get("_gradient_backend")
    if gb is not None:
        return gb
    own = backend._emitted()
    needs = {n for a in own if a in RULES for n in RULES[a].needs}
    if needs <= set(own):
        gb = backend
    else:
        from ..hooks import registry

        wanted = needs | set(own)
        gb = backend._copy("_port_cache", "_frame_builds", "_jax_functions", "_gradient_backend", "_torch_key")
        gb.algorithms = [a for a in registry().algorithms if a in wanted]
        gb._build()
    backend.__dict__["_gradient_backend"] = gb
    return gb
