"""JAX derivative rules for the differentiable calls (the algorithms declaring a rule:
:func:`~grid_core.runtime.derivatives.registered_rules`).

The XLA FFI call of such an algorithm (:mod:`.jax_ffi`) is a ``jax.custom_jvp`` whose tangent
is the Jacobians of :mod:`~grid_core.runtime.derivatives` at the primal (the generated gradient
kernels, through the handle's gradient library, each an FFI call itself, never differentiated)
times the inputs' tangents: a map linear in the tangents, which JAX transposes for reverse mode.  So
``jax.jvp``, ``jax.jacfwd``, ``jax.grad``, ``jax.vjp`` and ``jax.jacrev`` all hold, under
``jax.jit`` and ``jax.vmap``.  Only the tangents given are contracted (``symbolic_zeros``): a
gradient with respect to q alone calls no ``f_ext`` kernel.  No second derivative: the
tangent's own derivative would differentiate the gradient kernels, which have no rule here (the
second derivatives of inverse dynamics are wired into PyTorch's double backward only), and JAX
says so.
"""

from __future__ import annotations

import functools

import numpy as np

from .derivatives import Namespace, call_values, chart_of, gradient_backend, jvps, kernels_of, outputs_of, registered_rules


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
    values = call_values(backend, plan, _split(plan, params))
    outs, q_ndim = outputs_of(rule, plan), len(plan.states[0].shape)

    def kernel(gb, name, xs, ps):
        from ..hooks import registry

        alg = registry().algorithms[name]
        options = {p.name: ps[p.name] for p in alg.inputs(gb.robot)
                   if p.kind == "option" and ps.get(p.name) is not None}
        target = gb._generated_for(alg, (), options)[2] if options else gb  # the code of those option values
        p = target._plan(alg)
        given = tuple(x is not None for x in xs) + (False,) * (p.n_state - len(xs))
        chosen = [ps[q.name] if ps.get(q.name) is not None else q.default for q in p.params]
        flat = tuple(float(v) for a in chosen for v in np.ravel(a))
        return raw(target, p, given, flat)(*(x for x in xs if x is not None))

    f = jax.custom_jvp(core)

    def _jvp(primals, tangents):
        y = core(*primals)
        given = {n: t for n, t in zip(names, tangents) if n in rule.inputs and not isinstance(t, SymbolicZero)}
        if not given:
            return y, jax.tree_util.tree_map(jnp.zeros_like, y)
        single = primals[0].ndim == q_ndim
        dtype = jax.tree_util.tree_leaves(y)[0].dtype
        x = {n: p[None] if single else p for n, p in zip(names, primals)}
        t = {n: (v[None] if single else v).astype(dtype) for n, v in given.items()}
        gb = gradient_backend(backend)
        kernels = kernels_of(gb, lambda name, xs, ps: kernel(gb, name, xs, ps), _namespace())
        ys = jax.tree_util.tree_map(lambda a: a[None] if single else a, y)
        ty = jvps(rule, kernels, x, values, t, chart_of(gb), outs, ys)
        return y, jax.tree_util.tree_map(lambda a: a[0] if single else a, ty)

    f.defjvp(_jvp, symbolic_zeros=True)
    return f


def _split(plan, flat) -> list:
    """The params' flat float64 values (the FFI call's attribute) as one array per param."""
    out, k = [], 0
    for p in plan.params:
        n = int(np.prod(p.shape))
        out.append(np.asarray(flat[k:k + n], dtype=np.float64).reshape(p.shape))
        k += n
    return out
