"""First derivatives of the differentiable calls, from the generated gradient kernels: the
Jacobians of one call's output with respect to its state inputs, at the primal, which the
PyTorch custom operators (:mod:`.autograd_torch`) contract with the output's gradient
(vector-Jacobian products) and the JAX rules (:mod:`.jax_rules`) with the inputs' tangents
(Jacobian-vector products; JAX transposes that linear map for reverse mode).

The differentiable algorithms are those whose class declares a rule
(:class:`grid_core.derivatives.Rule`, the attribute ``derivatives``, next to its math in its
module): its differentiable inputs, the kernels its Jacobians call and the chain-rule wiring
from their outputs.  This module asks the registry for them (:func:`registered_rules`,
:func:`rule_of`); it holds no algorithm's wiring.  Every Jacobian has the batch axis first, then
the output's axes, then the input's: ``(B, *out, *in)``.

The gradient kernels differentiate along the tangent space: for a free-flyer, ``q (+) dq`` moves
the base by ``dq[:3]`` in the base frame and rotates it by ``R exp(dq[3:])``.  The derivative
with respect to the seven coordinates of q (position, quaternion ``x y z w``) goes through the
chart of :class:`Chart`: the call is a function of the position and of the normalised quaternion
``quat / |quat|`` (the kernels read a quaternion that way, and refuse one whose norm is more than
``QUATERNION_TOLERANCE`` from 1), so a finite difference in any coordinate of q agrees with it.

The Jacobians are formed with a few operations (``einsum``, ``reshape``, slicing) that PyTorch
tensors and JAX arrays share, given by the framework's namespace ``xp``
(:class:`grid_core.derivatives.Namespace`).
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from ..derivatives import LEVI_CIVITA, Kernels, Namespace, Rule
from ..errors import InputError
from ..model.robot import JointType

__all__ = ["Chart", "Kernels", "Namespace", "Rule", "chart_of", "gradient_backend", "jvps", "call_values",
           "kernel_arguments", "kernels_of", "outputs_of", "registered_rules", "rule_of", "second_order_backend",
           "second_jvps", "second_order_refusal", "second_vjps", "tangent_of_q", "vjps"]


def registered_rules() -> dict[str, Rule]:
    """``{algorithm: rule}`` of the registered algorithms that declare one (``derivatives``)."""
    from ..hooks import registry

    return {n: a.derivatives for n, a in registry().algorithms.items() if a.derivatives is not None}


def rule_of(name: str) -> Rule:
    """The rule of algorithm ``name``; an :class:`InputError` naming the differentiable ones
    when it has none."""
    rule = registered_rules().get(name)
    if rule is None:
        raise InputError(f"{name}: no derivative is defined for it (differentiable: {', '.join(registered_rules())})")
    return rule


def kernels_of(backend, call: Callable, xp: Namespace) -> Kernels:
    """The :class:`Kernels` of ``backend`` (its gradient library): ``call(name, states, params)``
    runs one kernel on the framework's arrays."""
    return Kernels(backend.robot, call, xp, rule_of)


def kernel_arguments(backend, name: str, states, params: dict) -> dict:
    """The keyword arguments of a call of kernel ``name`` on ``backend`` (what a rule's
    ``kernels(name, *states, **params)`` runs): ``states`` by its state ports' names, in their
    order, and the values of ``params`` it has a param or option port for (those None dropped)."""
    from ..hooks import registry

    ports = registry().algorithms[name].inputs(backend.robot)
    names = [p.name for p in ports if p.kind == "state"]
    kw = {n: x for n, x in zip(names, states) if x is not None}
    kw.update({p.name: params[p.name] for p in ports
               if p.kind in ("param", "option") and params.get(p.name) is not None})
    return kw


def call_values(backend, plan, params) -> dict:
    """``params`` of a call of ``plan``'s algorithm (its params' values in order, None: the
    default) by name, with the values its option ports were generated with: a rule's ``params``."""
    values = {p.name: v for p, v in zip(plan.params, params)}
    for k, v in backend._values(plan.alg).items():
        values[k] = tuple(f.name for f in v) if k == "frames" else v
    return values


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

    def _rotation(self, xp, quat):
        """``(R, E, v, w)`` of quaternions ``quat`` (``(B, 4)``): the rotation of the normalised
        quaternion and the class docstring's ``E``."""
        v, w = quat[:, :3], quat[:, 3, None, None]
        n2 = (quat * quat).sum(-1)[:, None, None]
        eye, eps = xp.const(np.eye(3), quat), xp.const(LEVI_CIVITA, quat)
        vx = -(eps @ v[:, None, :, None])[..., 0]  # [v]x
        # R of the normalised quaternion: ((w^2 - v.v) I + 2 v v^T + 2 w [v]x) / |quat|^2
        R = ((w * w - (v * v).sum(-1)[:, None, None]) * eye + 2 * v[:, :, None] * v[:, None, :] + 2 * w * vx) / n2
        E = 2 * ((w * eye - vx) @ xp.const(np.eye(3, 4), quat) - v[:, :, None] * xp.const(np.eye(4)[3], quat)) / n2
        return R, E, vx, w

    def _picks(self, qi: int, vi: int):
        """The free-flyer's selection matrices: of its position and quaternion among q's
        coordinates, of its linear and angular speeds among v's."""
        pick_p, pick_quat = np.zeros((3, self.nq)), np.zeros((4, self.nq))
        pick_p[:, qi:qi + 3], pick_quat[:, qi + 3:qi + 7] = np.eye(3), np.eye(4)
        at_v, at_w = np.zeros((self.nv, 3)), np.zeros((self.nv, 3))
        at_v[vi:vi + 3], at_w[vi + 3:vi + 6] = np.eye(3), np.eye(3)
        return pick_p, pick_quat, at_v, at_w

    def matrix(self, xp, q):
        """``d(tangent)/dq`` at ``q`` (``(B, nq)``): ``(B, nv, nq)``; a gradient with respect to q is
        the tangent one times it, a tangent the q tangent's product with it."""
        out = xp.const(self.base[None], q)
        for qi, vi in self.free:
            R, E, _, _ = self._rotation(xp, q[:, qi + 3:qi + 7])
            pick_p, pick_quat, at_v, at_w = self._picks(qi, vi)
            out = out + xp.const(at_v, q) @ R.swapaxes(-1, -2) @ xp.const(pick_p, q) + \
                xp.const(at_w, q) @ E @ xp.const(pick_quat, q)
        return out

    def lift(self, xp, q):
        """``dq/d(tangent)`` at a configuration ``q`` of unit quaternions (``(B, nq)``, an output
        such as the integrator's ``q_next``): ``(B, nq, nv)``, a right inverse of :meth:`matrix`:
        ``q (+) dt`` moves a free-flyer's position by ``R dv`` and its quaternion by
        ``quat (x) (dw / 2, 0)``, ``(w I + [v]x; -v^T) dw / 2``.  An output's gradient in q's
        coordinates times it is its gradient in the tangent space at it; a tangent at it times it,
        the coordinates' tangent."""
        out = xp.const(self.base.T[None], q)
        for qi, vi in self.free:
            quat = q[:, qi + 3:qi + 7]
            R, _, vx, w = self._rotation(xp, quat)
            half = (w * xp.const(np.eye(4, 3), q) + xp.const(np.eye(4, 3), q) @ vx
                    - xp.const(np.eye(4)[3][:, None], q) * quat[:, None, :3]) / 2
            pick_p, pick_quat, at_v, at_w = self._picks(qi, vi)
            out = out + xp.const(pick_p.T, q) @ R @ xp.const(at_v.T, q) + \
                xp.const(pick_quat.T, q) @ half @ xp.const(at_w.T, q)
        return out


def outputs_of(rule: Rule, plan) -> tuple[tuple[int, bool], ...]:
    """Each output of ``plan``'s algorithm as the wiring sees it: ``(its number of axes, whether
    it is a configuration of the rule's)``."""
    return tuple((len(p.shape), p.name in rule.configurations) for p in plan.outs)


def vjps(rule: Rule, kernels: Kernels, x: dict, params: dict, grads, wanted: set, chart: Chart, outs,
         primal=None) -> dict:
    """The gradients of ``wanted`` inputs for the outputs' gradients ``grads`` (batched,
    ``(B, *out)``; a tuple of them for several outputs, ``outs`` as :func:`outputs_of` gives
    them); q's through the chart at q, a configuration output's through the chart at it
    (``primal``: the outputs, batched, as ``grads``)."""
    J = rule.jacobians(kernels, x, params, wanted)
    several = len(outs) > 1
    gs, ys = (tuple(grads), tuple(primal or (None,) * len(outs))) if several else ((grads,), (primal,))
    gs = tuple((g[:, None] @ chart.lift(kernels.xp, y))[:, 0] if conf and not chart.identity else g
               for g, y, (_, conf) in zip(gs, ys, outs))
    result = {}
    for k, v in J.items():
        if k not in wanted:
            continue
        terms = [vjp(g, j, nd) for g, j, (nd, _) in zip(gs, v if several else (v,), outs)]
        result[k] = sum(terms[1:], terms[0])
    if "q" in result and not chart.identity:
        result["q"] = (result["q"][:, None] @ chart.matrix(kernels.xp, x["q"]))[:, 0]
    return result


def jvps(rule: Rule, kernels: Kernels, x: dict, params: dict, tangents: dict, chart: Chart, outs, primal=None,
         jacobians: Callable | None = None):
    """The outputs' tangents (a tuple for several outputs) for the inputs' ``tangents``
    (batched; those absent are zero), or None when none is given; q's through the chart at q, a
    configuration output's through the chart at it (``primal``: the outputs, batched).
    ``jacobians(x, params, wanted)``: the Jacobians (``rule.jacobians`` through ``kernels`` when
    None; the JAX rules pass a differentiable form of them)."""
    if not tangents:
        return None
    tangents = tangents_in_v(chart, kernels.xp, x, tangents)
    J = (jacobians or functools.partial(rule.jacobians, kernels))(x, params, set(tangents))
    several = len(outs) > 1
    totals = []
    for o, (nd, conf) in enumerate(outs):
        total = None
        for k, t in tangents.items():
            term = jvp(J[k][o] if several else J[k], t, nd)
            total = term if total is None else total + term
        if conf and not chart.identity:
            total = (chart.lift(kernels.xp, (primal if several else (primal,))[o]) @ total[..., None])[..., 0]
        totals.append(total)
    return tuple(totals) if several else totals[0]


def tangents_in_v(chart: Chart, xp: Namespace, x: dict, tangents: dict) -> dict:
    """``tangents`` (a dict by input) with q's, given in q's coordinates, as its tangent-space one at
    ``x["q"]`` (:func:`tangent_of_q`); the others as they are."""
    tangents = dict(tangents)
    if "q" in tangents and not chart.identity:
        tangents["q"] = tangent_of_q(chart, xp, x["q"], tangents["q"])
    return tangents


def tangent_of_q(chart: Chart, xp: Namespace, q, dq):
    """A tangent ``dq`` of q's coordinates (``(B, nq)``) at ``q`` as the tangent-space one (``(B, nv)``)."""
    return (chart.matrix(xp, q) @ dq[..., None])[..., 0]


def second_jvps(rule: Rule, kernels: Kernels, x: dict, params: dict, tangents: dict, wanted, chart: Chart) -> dict:
    """The tangents of the rule's tangent Jacobians of the ``wanted`` inputs (``{input: (B, *out,
    *in)}``) for the inputs' ``tangents`` (batched, q's in its coordinates; those absent zero): the
    second derivatives (:class:`~grid_core.derivatives.SecondRule`) times them, q's through the chart
    at q; an input of ``wanted`` without a term is absent.  :func:`second_vjps` transposed."""
    tangents = tangents_in_v(chart, kernels.xp, x, tangents)
    H = rule.second.hessians(kernels, x, params, set(tangents))
    result = {}
    for a in wanted:
        for b, h in H.get(a, {}).items():
            if b in tangents:
                term = jvp(h, tangents[b], h.ndim - tangents[b].ndim)
                result[a] = term if a not in result else result[a] + term
    return result


def second_order_refusal(name: str, second) -> str:
    """The one line refusing a second derivative of algorithm ``name``'s gradient (``second``: its
    :class:`~grid_core.derivatives.SecondRule`, or None) where an input differentiated is not among
    its second derivatives' (or it has none)."""
    where = f"in {', '.join(second.inputs)} alone" if second is not None else "none declared"
    return (f"{name}: no second derivative of this gradient (its second derivatives: {where}; a second "
            "derivative needs every input differentiated among them); differentiate once, or use finite differences")


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
    rules = registered_rules()
    needs = {n for a in own if a in rules for n in rules[a].needs}
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


def second_vjps(rule: Rule, kernels: Kernels, x: dict, params: dict, grads: dict, wanted: set, chart: Chart) -> dict:
    """The gradients of ``wanted`` inputs (of ``rule.second.inputs``) for the gradients ``grads`` of
    the rule's tangent Jacobians (``{input: (B, *out, *in)}``, those absent zero): the Jacobians'
    derivatives (:class:`~grid_core.derivatives.SecondRule`) contracted with them, q's through the
    chart at q."""
    H = rule.second.hessians(kernels, x, params, wanted)
    result = {}
    for a, g in grads.items():
        for b, h in H.get(a, {}).items():
            if b in wanted:
                term = vjp(g, h, g.ndim - 1)
                result[b] = term if b not in result else result[b] + term
    if "q" in result and not chart.identity:
        result["q"] = (result["q"][:, None] @ chart.matrix(kernels.xp, x["q"]))[:, 0]
    return result


def second_order_backend(backend, name: str):
    """The build holding the kernels of the second derivatives of algorithm ``name``'s rule
    (:attr:`~grid_core.derivatives.SecondRule.needs`: idsva_so for inverse dynamics, fdsva_so for
    forward dynamics): ``backend`` itself where its library holds them (a handle built with them
    listed), else the build of its robot holding the second derivatives' kernels of every rule of
    ``backend`` whose kernels its library lacks, and nothing else: one build, made on the first
    second derivative and kept on ``backend`` (a handle's gradient library never holds them: the
    first derivatives do not need them, and idsva_so's and fdsva_so's code is the largest of a
    robot's)."""
    rules, own = registered_rules(), set(backend._emitted())
    if set(rules[name].second.needs) <= own:
        return backend
    sb = backend.__dict__.get("_second_order_backend")
    if sb is None:
        from ..hooks import registry

        needs = {n for a in own if a in rules and rules[a].second is not None
                 and not set(rules[a].second.needs) <= own for n in rules[a].second.needs}
        sb = backend._copy("_port_cache", "_frame_builds", "_jax_functions", "_gradient_backend", "_torch_key",
                           "_second_order_backend")
        sb.algorithms = [a for a in registry().algorithms if a in needs]
        sb._build()
        backend.__dict__["_second_order_backend"] = sb
    return sb
