"""PyTorch autograd for the differentiable calls: each a ``torch.library`` operator
``grid::<algorithm>`` with a fake (meta) implementation and an autograd formula, so it works
eagerly and under ``torch.compile``.

The backward of ``grid::<algorithm>`` is the operator ``grid::<algorithm>_vjp``: the output's
gradient times the Jacobians of :mod:`~grid_core.runtime.derivatives` (the generated gradient
kernels, through the handle's gradient library:
:func:`~grid_core.runtime.derivatives.gradient_backend`), itself not differentiable.  Where the
rule declares second derivatives (:class:`~grid_core.derivatives.SecondRule`: inverse dynamics in
q, qd and qdd, forward dynamics and ABA in q, qd and tau, the end-effector pose in q) and the
backward runs under ``create_graph``, the gradient is formed instead by PyTorch operations on the Jacobians of the operator ``grid::<algorithm>_jac``, whose backward
``grid::<algorithm>_jac_vjp`` contracts their gradients with the second derivatives (kernels of
:func:`~grid_core.runtime.derivatives.second_order_backend`: the handle's library where it holds
them, else built on the first double backward); elsewhere a double backward raises.  A handle's
methods take this road when a tensor given to them requires grad (under grad mode);
:class:`TorchOps` calls the operators directly, which is what ``torch.compile(fullgraph=True)``
traces.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref

import numpy as np

from ..errors import InputError
from . import adapters
from .derivatives import (Namespace, call_values, chart_of, gradient_backend, kernel_arguments, kernels_of, outputs_of,
                          registered_rules, rule_of, second_order_backend, second_order_refusal, second_vjps, vjp,
                          vjps)

_HANDLES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
"""handle key (the operators' first argument) -> backend"""
_KEYS = itertools.count(1)
_DEFINED: set[str] = set()
_LOCK = threading.Lock()


@functools.cache
def _namespace() -> Namespace:
    """The wiring's namespace for PyTorch tensors."""
    import torch

    return Namespace(torch.einsum, lambda x, k: x.repeat_interleave(k, dim=0),
                     lambda a, like: torch.as_tensor(a, dtype=like.dtype, device=like.device))


def key_of(backend) -> int:
    """The handle's key: the first argument of its operators."""
    key = backend.__dict__.get("_torch_key")
    if key is None:
        with _LOCK:
            key = backend.__dict__.get("_torch_key")
            if key is None:
                key = backend.__dict__["_torch_key"] = next(_KEYS)
                _HANDLES[key] = backend
    return key


def _schema(plan, vjp_of: bool) -> str:
    states = ", ".join(f"Tensor{'?' if p.optional else ''} {p.name}" for p in plan.states)
    params = "".join(f", Tensor {p.name}" for p in plan.params)  # float64 values, never differentiated
    if vjp_of:  # the outputs' gradients, and the outputs themselves where a configuration's chart needs them
        return f"(int handle, Tensor[] grads, Tensor[] outs, {states}{params}, bool[] wanted) -> Tensor[]"
    returns = "Tensor" if plan.n_out == 1 else f"({', '.join(['Tensor'] * plan.n_out)})"
    return f"(int handle, {states}{params}) -> {returns}"


def _split(plan, args):
    """The operator's arguments after the handle: states, then params (float64 tensors)."""
    return list(args[:plan.n_state]), list(args[plan.n_state:plan.n_state + len(plan.params)])


def _host(values) -> list:
    """The params' tensors as float64 numpy values."""
    return [v.detach().cpu().numpy() for v in values]


def define(plan) -> str:
    """Define ``grid::<algorithm>`` and its ``_vjp`` (once per process); the qualified name."""
    name = plan.name
    qualname = f"grid::{name}"
    with _LOCK:
        if name in _DEFINED:
            return qualname
        import torch

        rule = rule_of(name)
        outs_of = outputs_of(rule, plan)
        keeps_outputs = bool(rule.configurations)  # the chart at a configuration output needs its value

        def forward(handle, *args):
            backend = _HANDLES[handle]
            states, params = _split(plan, args)
            kw = {p.name: v for p, v in zip(plan.params, _host(params))}
            kw.update({p.name: x.detach() for p, x in zip(plan.states, states) if x is not None})
            with torch.no_grad():
                out = getattr(backend, name)(**kw)
            return out

        def forward_fake(handle, *args):
            states, _ = _split(plan, args)
            q = states[0]
            lead = tuple(q.shape[:q.dim() - len(plan.states[0].shape)])
            # the outputs' shapes are the robot's: the handle's own plan (``plan`` defined the schema only)
            outs = tuple(q.new_empty((*lead, *o.shape)) for o in _HANDLES[handle]._plan(_algorithm(name)).outs)
            return outs[0] if len(outs) == 1 else outs

        def backward_op(handle, grads, outs, *args):
            backend = _HANDLES[handle]
            gb = gradient_backend(backend)
            states, params = _split(plan, args)
            wanted_flags = args[-1]
            names = [p.name for p in plan.states]
            single = states[0].dim() == len(plan.states[0].shape)

            def batched(a):
                return a[None] if single else a

            x = {n: batched(s).detach() for n, s in zip(names, states) if s is not None}
            wanted = {n for n, w, s in zip(names, wanted_flags, states) if w and s is not None and n in rule.inputs}
            kernels = kernels_of(gb, lambda alg, xs, ps: _kernel(gb, alg, xs, ps), _namespace())
            values = call_values(backend, backend._plan(_algorithm(name)), _host(params))
            with torch.no_grad():
                g = tuple(batched(gr).to(x["q"].dtype) for gr in grads)
                ys = tuple(batched(o).to(x["q"].dtype) for o in outs) or None
                several = len(g) > 1
                found = vjps(rule, kernels, x, values, g if several else g[0], wanted, chart_of(gb), outs_of,
                             ys if several or ys is None else ys[0])
            return [grads[0].new_empty(0) if n not in found else (found[n][0] if single else found[n]).to(s.dtype)
                    for n, s in zip(names, states)]

        def backward_fake(handle, grads, outs, *args):
            states, _ = _split(plan, args)
            return [grads[0].new_empty(0) if s is None or not w else s.new_empty(s.shape)
                    for s, w in zip(states, args[-1])]

        def setup_context(ctx, inputs, output):
            ctx.handle = inputs[0]
            ctx.args = inputs[1:]
            outs = (output if isinstance(output, tuple) else (output,)) if keeps_outputs else ()
            ctx.n_outs = len(outs)
            ctx.save_for_backward(*(x for x in inputs[1:1 + plan.n_state] if x is not None), *outs)

        def backward(ctx, *grads):
            saved = list(ctx.saved_tensors)
            outs = saved[len(saved) - ctx.n_outs:]
            saved = iter(saved[:len(saved) - ctx.n_outs])
            states = [None if x is None else next(saved) for x in ctx.args[:plan.n_state]]
            params = list(ctx.args[plan.n_state:])
            needs = ctx.needs_input_grad[1:1 + plan.n_state]
            wanted = [bool(w) and s is not None and n in rule.inputs
                      for w, s, n in zip(needs, states, (p.name for p in plan.states))]
            refused = [p.name for p, w, s in zip(plan.states, needs, states)
                       if w and s is not None and p.name not in rule.inputs]
            if refused:
                raise InputError(f"{name}: no derivative with respect to '{refused[0]}' (differentiable: "
                                 f"{', '.join(rule.inputs)}); detach it")
            second = rule.second
            names = [p.name for p in plan.states]
            if second is not None and torch.is_grad_enabled() and \
                    all(n in second.inputs for n, w in zip(names, wanted) if w):
                # create_graph: the gradient formed by differentiable operations on the Jacobians (an
                # operator whose own backward is the second derivatives) and, for q, on the chart
                found = _differentiable_vjp(ctx.handle, plan, outs_of[0][0], grads[0], states, params, wanted)
            else:
                found = getattr(torch.ops.grid, f"{name}_vjp")(ctx.handle, list(grads), list(outs), *states,
                                                             *params, wanted)
            return (None, *(gr if w else None for gr, w in zip(found, wanted)), *(None for _ in params))

        torch.library.define(qualname, _schema(plan, False))
        torch.library.impl(qualname, ("cpu", "cuda"), forward)
        torch.library.register_fake(qualname, forward_fake)
        torch.library.define(f"{qualname}_vjp", _schema(plan, True))
        torch.library.impl(f"{qualname}_vjp", ("cpu", "cuda"), backward_op)
        torch.library.register_fake(f"{qualname}_vjp", backward_fake)
        torch.library.register_autograd(qualname, backward, setup_context=setup_context)
        torch.library.register_autograd(f"{qualname}_vjp", _no_second_order(name, rule.second),
                                        setup_context=_keep_nothing)
        if rule.second is not None:
            _define_jacobians(plan, rule)
        _DEFINED.add(name)
    return qualname


def _keep_nothing(ctx, inputs, output):
    pass


def _batched_inputs(plan, states):
    """``(x, single)``: the present state inputs by name with a batch axis (detached), and whether
    they came as one state."""
    single = states[0].dim() == len(plan.states[0].shape)
    return {p.name: (s[None] if single else s).detach() for p, s in zip(plan.states, states) if s is not None}, single


def _define_jacobians(plan, rule) -> None:
    """``grid::<algorithm>_jac``: the rule's tangent Jacobians of the wanted inputs (batched), whose
    backward ``grid::<algorithm>_jac_vjp`` contracts their gradients with the second derivatives
    (:class:`~grid_core.derivatives.SecondRule`, kernels of :func:`second_order_backend`, built on the
    first call); itself not differentiable (no third derivative)."""
    import torch

    name, qualname = plan.name, f"grid::{plan.name}"
    out_shape = plan.outs[0].shape
    states_schema = ", ".join(f"Tensor{'?' if p.optional else ''} {p.name}" for p in plan.states)
    params_schema = "".join(f", Tensor {p.name}" for p in plan.params)

    def shape_of(p):
        return (plan.robot.num_bodies, 6) if p.name == "f_ext" else (plan.robot.nv,)  # tangent shapes

    def jac(handle, *args):
        backend = _HANDLES[handle]
        gb = gradient_backend(backend)
        states, params = _split(plan, args)
        x, _ = _batched_inputs(plan, states)
        wanted = {p.name for p, w, s in zip(plan.states, args[-1], states) if w and s is not None}
        kernels = kernels_of(gb, lambda alg, xs, ps: _kernel(gb, alg, xs, ps), _namespace())
        values = call_values(backend, backend._plan(_algorithm(name)), _host(params))
        with torch.no_grad():
            J = rule.jacobians(kernels, x, values, wanted)
        return [J[p.name].to(x["q"].dtype).contiguous() if p.name in wanted else x["q"].new_empty(0)
                for p in plan.states]

    def jac_fake(handle, *args):
        states, _ = _split(plan, args)
        q = states[0]
        b = 1 if q.dim() == len(plan.states[0].shape) else q.shape[0]
        return [q.new_empty((b, *out_shape, *shape_of(p))) if w and s is not None else q.new_empty(0)
                for p, s, w in zip(plan.states, states, args[-1])]

    def jac_vjp(handle, grads, *args):
        backend = _HANDLES[handle]
        sb = second_order_backend(backend, name)
        states, params = _split(plan, args)
        x, single = _batched_inputs(plan, states)
        wanted = {p.name for p, w, s in zip(plan.states, args[-1], states) if w and s is not None}
        g = {p.name: gr for p, gr in zip(plan.states, grads) if gr.numel() and p.name in rule.second.inputs}
        kernels = kernels_of(sb, lambda alg, xs, ps: _kernel(sb, alg, xs, ps), _namespace())
        values = call_values(backend, backend._plan(_algorithm(name)), _host(params))
        with torch.no_grad():
            found = second_vjps(rule, kernels, x, values, g, wanted, chart_of(backend))
        return [s.new_zeros(s.shape) if p.name in wanted and p.name not in found else
                (found[p.name][0] if single else found[p.name]).to(s.dtype) if p.name in found else
                grads[0].new_empty(0) for p, s in zip(plan.states, states)]

    def jac_vjp_fake(handle, grads, *args):
        states, _ = _split(plan, args)
        return [s.new_empty(s.shape) if s is not None and w else grads[0].new_empty(0)
                for s, w in zip(states, args[-1])]

    def setup_context(ctx, inputs, output):
        ctx.handle, ctx.args = inputs[0], inputs[1:]
        ctx.save_for_backward(*(x for x in inputs[1:1 + plan.n_state] if x is not None))

    def backward(ctx, grads):  # (one list: the gradients of the Jacobians)
        saved = iter(ctx.saved_tensors)
        states = [None if x is None else next(saved) for x in ctx.args[:plan.n_state]]
        params = list(ctx.args[plan.n_state:plan.n_state + len(plan.params)])
        needs = ctx.needs_input_grad[1:1 + plan.n_state]
        wanted = [bool(w) and s is not None for w, s in zip(needs, states)]
        outside = [p.name for p, w in zip(plan.states, wanted) if w and p.name not in rule.second.inputs]
        if outside:
            raise NotImplementedError(f"{name}: no second derivative with respect to '{outside[0]}' (second "
                                      f"derivatives in: {', '.join(rule.second.inputs)}); detach it")
        grads = [states[0].new_empty(0) if g is None else g for g in grads]  # (the Jacobians not formed)
        found = getattr(torch.ops.grid, f"{name}_jac_vjp")(ctx.handle, grads, *states, *params, wanted)
        return (None, *(gr if w else None for gr, w in zip(found, wanted)), *(None for _ in params), None)

    torch.library.define(f"{qualname}_jac", f"(int handle, {states_schema}{params_schema}, bool[] wanted) -> Tensor[]")
    torch.library.impl(f"{qualname}_jac", ("cpu", "cuda"), jac)
    torch.library.register_fake(f"{qualname}_jac", jac_fake)
    torch.library.define(f"{qualname}_jac_vjp",
                         f"(int handle, Tensor[] grads, {states_schema}{params_schema}, bool[] wanted) -> Tensor[]")
    torch.library.impl(f"{qualname}_jac_vjp", ("cpu", "cuda"), jac_vjp)
    torch.library.register_fake(f"{qualname}_jac_vjp", jac_vjp_fake)
    torch.library.register_autograd(f"{qualname}_jac", backward, setup_context=setup_context)
    torch.library.register_autograd(f"{qualname}_jac_vjp", _no_second_order(f"{name}'s Jacobian", third=True),
                                    setup_context=_keep_nothing)


def _differentiable_vjp(handle, plan, out_ndim: int, grad, states, params, wanted) -> list:
    """The gradients of the wanted inputs as differentiable operations: the output's gradient
    times the Jacobians of ``grid::<algorithm>_jac`` (whose backward is the second derivatives),
    q's times the chart at q, formed with PyTorch operations (differentiated by PyTorch)."""
    import torch

    backend = _HANDLES[handle]
    J = getattr(torch.ops.grid, f"{plan.name}_jac")(handle, *states, *params, wanted)
    single = states[0].dim() == len(plan.states[0].shape)
    q = states[0][None] if single else states[0]
    g = (grad[None] if single else grad).to(q.dtype)
    chart, out = chart_of(backend), []
    for p, s, w, j in zip(plan.states, states, wanted, J):
        if not w:
            out.append(grad.new_empty(0))
            continue
        r = vjp(g, j, out_ndim)
        if p.name == "q" and not chart.identity:
            r = (r[:, None] @ chart.matrix(_namespace(), q))[:, 0]
        out.append((r[0] if single else r).to(s.dtype))
    return out


def _no_second_order(name: str, second=None, third: bool = False):
    def backward(ctx, *grads):
        if third:
            raise NotImplementedError(f"{name}: no third derivative")
        raise NotImplementedError(second_order_refusal(name, second))

    return backward


def _kernel(backend, name, states, params):
    return getattr(backend, name)(**kernel_arguments(backend, name, states, params))


class TorchOps:
    """The handle's differentiable methods as calls of its ``grid::`` operators, with the
    handle's signatures (state inputs, params such as ``gravity=`` and ``dt``; an option port only
    at the value its code was generated with): single states or a batch ``(N, ...)`` (a single
    state among a batch broadcast over it), tensors of any real dtype (converted to the handle's,
    differentiably).  What ``torch.compile`` traces; the handle's own methods take the
    same operators for tensors that require grad."""

    def __init__(self, backend):
        import torch

        self._backend, self._key = backend, key_of(backend)
        self._dtype = torch.float32 if backend.dtype == np.float32 else torch.float64
        self._plans, self._defaults = {}, {}
        rules = registered_rules()
        for name in backend._emitted():
            if name in rules:
                plan = backend._plan(_algorithm(name))
                define(plan)
                self._plans[name] = plan
                for p in plan.params:
                    if p.default is not None:
                        self._defaults[(name, p.name)] = torch.as_tensor(np.asarray(p.default, dtype=np.float64))

    def __getattr__(self, name: str):
        plans = self.__dict__.get("_plans", {})
        if name not in plans:
            raise AttributeError(f"no differentiable method '{name}' on this handle "
                                 f"(differentiable: {', '.join(plans) or 'none'})")
        plan = plans[name]

        def method(*args, **kwargs):
            return self.call(plan, args, kwargs)

        method.__name__ = name
        return method

    def call(self, plan, args, kwargs):
        """``args`` bound to the algorithm's inputs in their order, as the handle's method binds them."""
        import torch

        given = dict(zip([p.name for p in plan.ins], args))
        given.update(kwargs)
        built = self._backend._values(plan.alg)
        for p in plan.ins:
            if p.kind == "option" and given.get(p.name) is not None and p.name != "frames" \
                    and given[p.name] != built[p.name]:
                raise InputError(f"{plan.name}: argument '{p.name}' is fixed when the code is generated "
                                 f"({built[p.name]!r} here); for {given[p.name]!r} call the handle's method, or "
                                 f"build a handle with algorithm_options={{'{plan.name}': {{'{p.name}': ...}}}}")
        states = [given.get(p.name) for p in plan.states]
        lead = None
        for x, p in zip(states, plan.states):
            if x is not None and x.dim() == len(p.shape) + 1:
                lead = x.shape[0]
        xs = []
        for x, p in zip(states, plan.states):
            if x is not None:
                x = x.to(self._dtype)
                if lead is not None and x.dim() == len(p.shape):
                    x = x.expand(lead, *p.shape)
            xs.append(x)
        params = []
        for p in plan.params:
            if given.get(p.name) is not None:
                params.append(torch.as_tensor(given[p.name], dtype=torch.float64))
            elif (plan.name, p.name) in self._defaults:
                params.append(self._defaults[(plan.name, p.name)])
            else:
                raise plan.errors(p).required()
        return getattr(torch.ops.grid, plan.name)(self._key, *xs, *params)


def _algorithm(name: str):
    from ..hooks import registry

    return registry().algorithms[name]


def ops(backend) -> TorchOps:
    """The handle's :class:`TorchOps`, made once."""
    t = backend.__dict__.get("_torch_ops")
    if t is None:
        t = backend.__dict__["_torch_ops"] = TorchOps(backend)
    return t


def wants_grad(views) -> bool:
    """Whether a call on these arrays is differentiated: a tensor among them that requires grad,
    under grad mode (PyTorch is not imported for arrays of other kinds: CuPy's)."""
    if not any(getattr(v, "requires_grad", False) for v in views):
        return False
    import torch

    return torch.is_grad_enabled()


def apply(backend, plan, views, batch, params, outs):
    """A checked call whose tensors require grad, through the handle's operator."""
    rules = registered_rules()
    if plan.name not in rules:
        raise InputError(f"{plan.name}: no derivative is defined for it (differentiable: {', '.join(rules)}); "
                         "call it on tensors that do not require grad (detach them)")
    if outs is not None:
        raise InputError(f"{plan.name}: out= takes no gradient; call without out= on tensors that require grad")
    import torch

    kw = {p.name: v for p, v in zip(plan.params, params) if v is not None}
    kw.update({p.name: v if adapters.is_torch(v) else torch.as_tensor(v) for p, v in zip(plan.states, views)
               if v is not None})
    return ops(backend).call(plan, (), kw)
