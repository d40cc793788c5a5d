"""JAX derivative rules for the differentiable calls (the algorithms declaring a rule:
:func:`~grid_core.runtime.derivatives.registered_rules`).

The XLA FFI call of such an algorithm (:mod:`.jax_ffi`) is a ``jax.custom_jvp`` whose tangent
is the Jacobians of :mod:`~grid_core.runtime.derivatives` at the primal (the generated gradient
kernels, through the handle's gradient library, each an FFI call itself, never differentiated)
times the inputs' tangents: a map linear in the tangents, which JAX transposes for reverse mode.  So
``jax.jvp``, ``jax.jacfwd``, ``jax.grad``, ``jax.vjp`` and ``jax.jacrev`` all hold, under
``jax.jit`` and ``jax.vmap``.  Only the tangents given are contracted (``symbolic_zeros``): a
gradient with respect to q alone calls no ``f_ext`` kernel.  No second derivative: the
tangent's own derivative would differentiate the gradient kernels, which have no rule (no
second-order kernel yet), and JAX says so.
"""

from __future__ import annotations

import functools

import numpy as np

from .derivatives import Namespace, chart_of, gradient_backend, jvps, kernels_of, registered_rules


@functools.cache
def _namespace() -> Namespace:
    """The wiring's namespace for JAX arrays."""
    import jax.numpy as jnp

    return Namespace(jnp.einsum, lambda x, k: jnp.repeat(x, k, axis=0),
                     lambda a, like: jnp.asarray(a, dtype=like.dtype))


def differentiable(backend, plan, present, params, core, raw):
    """``core`` (the FFI call on the present state inputs, converted and broadcast) with the
    algorithm's rule, or ``core`` itself for an algorithm without one.  ``raw(backend, plan,
    present, params)``: the FFI call of another algorithm, without a rule (the kernels)."""
    rule = registered_rules().get(plan.name)
    if rule is None:
        return core
    import jax
    import jax.numpy as jnp
    from jax.custom_derivatives import SymbolicZero

    names = [p.name for p, here in zip(plan.states, present) if here]
    gravity = np.asarray(params[:3], dtype=np.float64) if plan.params else None
    out_ndim, q_ndim = len(plan.outs[0].shape), len(plan.states[0].shape)

    def kernel(gb, name, xs, g):
        from ..hooks import registry

        p = gb._plan(registry().algorithms[name])
        given = tuple(x is not None for x in xs) + (False,) * (p.n_state - len(xs))
        values = [g if g is not None and q.name == "gravity" else q.default for q in p.params]
        flat = tuple(float(v) for a in values for v in np.ravel(a))
        return raw(gb, p, given, flat)(*(x for x in xs if x is not None))

    f = jax.custom_jvp(core)

    def _jvp(primals, tangents):
        y = core(*primals)
        given = {n: t for n, t in zip(names, tangents) if n in rule.inputs and not isinstance(t, SymbolicZero)}
        if not given:
            return y, jnp.zeros_like(y)
        single = primals[0].ndim == q_ndim
        x = {n: p[None] if single else p for n, p in zip(names, primals)}
        t = {n: (v[None] if single else v).astype(y.dtype) for n, v in given.items()}
        gb = gradient_backend(backend)
        kernels = kernels_of(gb, lambda name, xs, g: kernel(gb, name, xs, g), _namespace())
        ty = jvps(rule, kernels, x, gravity, t, chart_of(gb), out_ndim)
        return y, ty[0] if single else ty

    f.defjvp(_jvp, symbolic_zeros=True)
    return f
