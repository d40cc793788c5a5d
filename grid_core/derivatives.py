"""The declaration of an algorithm's first derivatives: a :class:`Rule`, the class attribute
``derivatives`` of its :class:`~grid_core.algorithm.Algorithm` (None: not differentiable).

A rule names the algorithm's differentiable state inputs, the generated kernels its Jacobians
call (built into the handle's gradient library when the handle's own lacks them), and the
function forming the Jacobians at the primal from those kernels' outputs: the chain-rule wiring,
written next to the algorithm's math, in its module.  It calls kernels by name through
:class:`Kernels`, and another algorithm's Jacobian by name too (``kernels.jacobian("crba", "q",
x)``): a rule never imports another algorithm's module.  The call's values other than its state
inputs reach the rule as ``params``, a dict by port name: its params (``gravity``, ``dt``; float64
arrays, None: the kernel's default) and the values its option ports were generated with (the
integrator's ``method``); a kernel call takes them as keywords (``kernels(name, *states,
**params)``), each kernel the ones it has a port for.  The runtime
(:mod:`grid_core.runtime.derivatives`) contracts the Jacobians with an output's gradient
(PyTorch) or the inputs' tangents (JAX).

Every Jacobian has the batch axis first, then the output's axes, then the input's:
``(B, *out, *in)``; an algorithm of several outputs gives a tuple of them per input, one per
output in order.  A Jacobian in ``q`` is in the tangent space (a free-flyer's ``q (+) dq``
moves the base by ``dq[:3]`` in the base frame and rotates it by ``R exp(dq[3:])``, as the
gradient kernels differentiate); so are the rows of an output the rule names a configuration
(``Rule.configurations``: the integrator's ``q_next``, its rows in the tangent space at it); the
runtime maps both to q's coordinates.  The wiring uses a few
operations that PyTorch tensors and JAX arrays share (``einsum``, ``@``, ``reshape``, slicing)
and :attr:`Kernels.xp` (:class:`Namespace`) for the rest.

Light on purpose: an algorithm module imports it without loading the runtime.
"""

from __future__ import annotations

from typing import Callable

import attrs
import numpy as np

ZERO_GRAVITY = np.zeros(3)
"""Gravity off, for a kernel call isolating the terms that do not depend on it."""
LEVI_CIVITA = np.zeros((3, 3, 3))
for _i, _j, _k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    LEVI_CIVITA[_i, _j, _k], LEVI_CIVITA[_i, _k, _j] = 1.0, -1.0


def _names(_, attribute, value) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) and v.isidentifier() for v in value):
        raise TypeError(f"Rule.{attribute.name} must be a tuple of names, got {value!r}")


@attrs.frozen
class SecondRule:
    """An algorithm's second derivatives, for a double backward (PyTorch) or a Hessian (JAX): the
    derivatives of its rule's Jacobians.  ``inputs``: those it differentiates (a subset of the
    rule's; a Jacobian of another input, or a derivative with respect to one, is not defined).
    ``needs``: the generated kernels it calls (a library of its own, built on the first second
    derivative, unless the handle's holds them).
    ``hessians(kernels, x, params, wanted)``: ``{a: {b: H}}`` for the inputs ``a`` and ``b`` of
    ``inputs`` (``b`` in the set ``wanted``; an absent pair is zero), ``H[batch, *out, *in_a, *in_b]`` the
    derivative of the Jacobian in ``a`` with respect to ``b``, both in the tangent space for q (the
    first derivative along q of the tangent Jacobian)."""

    inputs: tuple[str, ...] = attrs.field(validator=_names)
    needs: tuple[str, ...] = attrs.field(validator=_names)
    hessians: Callable = attrs.field(validator=attrs.validators.is_callable())


@attrs.frozen
class Rule:
    """An algorithm's first derivatives.

    ``inputs``: its differentiable state inputs, ``q`` first (the others by their port names).
    ``needs``: every generated kernel its Jacobians call, those called for it by the rules it
    composes by name included (the handle's gradient library holds them).
    ``jacobians(kernels, x, params, wanted)``: ``{input: Jacobian}`` (a tuple of them, one per
    output, for an algorithm of several outputs) for each input of the set ``wanted`` (more may be
    returned), at the batched inputs ``x`` (by name; an omitted optional input absent), ``params``
    the call's other values by name (its params, None or absent: the kernels' default; its option
    ports' generated values); through ``kernels`` (:class:`Kernels`) only.
    ``configurations``: the outputs that are configurations (their Jacobians' rows in the tangent
    space at them).  ``second``: its second derivatives (:class:`SecondRule`), or None (a double
    backward raises)."""

    inputs: tuple[str, ...] = attrs.field(validator=_names)
    needs: tuple[str, ...] = attrs.field(validator=_names)
    jacobians: Callable = attrs.field(validator=attrs.validators.is_callable())
    configurations: tuple[str, ...] = attrs.field(default=(), validator=_names)
    second: SecondRule | None = attrs.field(default=None)


def same_as(name: str, inputs: tuple[str, ...], needs: tuple[str, ...],
            second: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> Rule:
    """The rule of an algorithm that computes algorithm ``name``'s quantity by another method (ABA's
    forward dynamics): its Jacobians are ``name``'s rule's, and with ``second`` (its ``(inputs,
    needs)``) so are its second derivatives, that rule found by name when called (no import of the
    other algorithm's module).  ``inputs`` and ``needs`` as :class:`Rule`'s, those of ``name``'s rule."""

    def jacobians(kernels, x, params, wanted):
        return kernels.jacobians(name, x, params, wanted)

    def hessians(kernels, x, params, wanted):
        return kernels.rule(name).second.hessians(kernels, x, params, wanted)

    return Rule(inputs, needs, jacobians, second=None if second is None else SecondRule(*second, hessians))


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
    """What a rule calls: ``kernels(name, *states, **params)`` runs the generated kernel ``name``
    on the framework's arrays, its state inputs in its ports' order (an omitted optional input as
    None; outputs of the same kind), with the values of ``params`` it has a port for (None: its
    default); :meth:`jacobian` and :meth:`jacobians` evaluate another algorithm's rule, found by
    name (``rule_of``: the registry's); ``robot`` the handle's robot, ``xp`` the framework's
    :class:`Namespace`."""

    robot: object
    call: Callable
    xp: Namespace
    rule_of: Callable

    def __call__(self, name: str, *states, **params):
        return self.call(name, states, params)

    def rule(self, name: str) -> Rule:
        """The rule of algorithm ``name``."""
        return self.rule_of(name)

    def jacobians(self, name: str, x: dict, params: dict, wanted: set) -> dict:
        """Algorithm ``name``'s Jacobians of ``wanted`` at ``x`` (its inputs by name, batched)."""
        J = self.rule(name).jacobians(self, x, params, wanted)
        return {k: v for k, v in J.items() if k in wanted}

    def jacobian(self, name: str, wrt: str, x: dict, params: dict | None = None):
        """Algorithm ``name``'s Jacobian with respect to its input ``wrt`` at ``x`` (``params``:
        None, the defaults)."""
        return self.jacobians(name, x, params or {}, {wrt})[wrt]

    def basis(self, n: int, shape: tuple, like):
        """``n`` copies of the unit arrays of ``shape`` (one column each of a Jacobian formed
        column by column): ``(n * prod(shape), *shape)``, of ``like``'s kind."""
        k = int(np.prod(shape))
        return self.xp.const(np.tile(np.eye(k), (n, 1)).reshape(n * k, *shape), like)
