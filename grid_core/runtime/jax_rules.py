"""JAX derivative rules for the differentiable calls (the algorithms declaring a rule:
:func:`~grid_core.runtime.derivatives.registered_rules`).

The XLA FFI call of such an algorithm (:mod:`.jax_ffi`) is a ``jax.custom_jvp`` whose tangent
is the Jacobians of :mod:`~grid_core.runtime.derivatives` at the primal (the generated gradient
kernels, through the handle's gradient library) times the inputs' tangents: a map linear in the
tangents, which JAX transposes for reverse mode.  So ``jax.jvp``, ``jax.jacfwd``, ``jax.grad``,
``jax.vjp`` and ``jax.jacrev`` all hold, under ``jax.jit`` and ``jax.vmap``.  Only the tangents
given are contracted (``symbolic_zeros``): a gradient with respect to q alone calls no ``f_ext``
kernel.

The Jacobians are themselves a ``jax.custom_jvp`` function of the state inputs, whose tangent is
the rule's second derivatives (:class:`~grid_core.derivatives.SecondRule`: idsva_so's tensors for
inverse dynamics in q, qd and qdd, fdsva_so's for forward dynamics and ABA in q, qd and tau,
end_effector_pose_hessian's for the end-effector pose in q, through
:func:`~grid_core.runtime.derivatives.second_order_backend`) times the inputs' tangents; the
contraction and the free-flyer chart are JAX operations.  So a second derivative (``jax.hessian``,
``jax.jacfwd`` of ``jax.grad``, ``jax.grad`` of a vector-Jacobian product) of those calls in those
inputs holds in every mode; one with respect
to another input, or of another call's gradient, raises ``NotImplementedError``.  No third
derivative (the second-order kernels have no rule).
"""

from __future__ import annotations

import functools

import numpy as np

from .derivatives import (Namespace, call_values, chart_of, gradient_backend, jvps, kernels_of, outputs_of,
                          registered_rules, second_jvps, second_order_backend, second_order_refusal)


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
        y = f(*primals)  # (f itself: the primal differentiable again, for a second derivative)
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
        jacobians = _differentiable_jacobians(plan.name, rule, kernels,
                                              lambda: second_order_backend(backend, plan.name),
                                              chart_of(gb), kernel)
        ty = jvps(rule, kernels, x, values, t, chart_of(gb), outs, ys, jacobians)
        return y, jax.tree_util.tree_map(lambda a: a[0] if single else a, ty)

    f.defjvp(_jvp, symbolic_zeros=True)
    return f


def _differentiable_jacobians(name: str, rule, kernels, second, chart, kernel):
    """``rule.jacobians`` as a function ``(x, params, wanted)`` whose result JAX differentiates: a
    ``jax.custom_jvp`` of the state inputs whose tangent is the rule's second derivatives times
    theirs (:func:`~grid_core.runtime.derivatives.second_jvps`), its kernels those of the build
    ``second()`` (asked for on the first second derivative); ``kernel(backend, name, xs, ps)``
    runs one kernel of a build.  A second derivative the rule does not declare raises
    ``NotImplementedError``."""
    import jax
    import jax.numpy as jnp
    from jax.custom_derivatives import SymbolicZero

    def jacobians(x, params, wanted):
        names, wanted = tuple(x), tuple(sorted(wanted))

        @jax.custom_jvp
        def jac(*xs):
            J = rule.jacobians(kernels, dict(zip(names, xs)), params, set(wanted))
            return {k: J[k] for k in wanted}

        def jac_jvp(primals, tangents):
            J = jac(*primals)
            t = {n: d for n, d in zip(names, tangents) if not isinstance(d, SymbolicZero)}
            if not t:
                return J, jax.tree_util.tree_map(jnp.zeros_like, J)
            s = rule.second
            if s is None or not set(t) | set(wanted) <= set(s.inputs):
                raise NotImplementedError(second_order_refusal(name, s))
            sb = second()
            sk = kernels_of(sb, lambda alg, xs, ps: kernel(sb, alg, xs, ps), _namespace())
            dJ = second_jvps(rule, sk, dict(zip(names, primals)), params, t, wanted, chart)
            return J, {k: dJ[k] if k in dJ else jnp.zeros_like(J[k]) for k in wanted}

        jac.defjvp(jac_jvp, symbolic_zeros=True)
        return jac(*(x[n] for n in names))

    return jacobians


def _split(plan, flat) -> list:
    """The params' flat float64 values (the FFI call's attribute) as one array per param."""
    out, k = [], 0
    for p in plan.params:
        n = int(np.prod(p.shape))
        out.append(np.asarray(flat[k:k + n], dtype=np.float64).reshape(p.shape))
        k += n
    return out
