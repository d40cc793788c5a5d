"""JAX derivative rules of the differentiable calls (grid_core.runtime.jax_rules) on XLA:CPU with
CpuHandle libraries: ``jax.test_util.check_grads`` (forward and reverse mode, float64) of every
op on a fixed arm and two floating bases, of order 2 for inverse dynamics (its second derivatives
from idsva_so), forward dynamics and ABA (fdsva_so) and the end-effector pose (its Hessian), and
the transformations composed (jit, vmap, grad, jacfwd, jacrev) against central differences of the
Reference."""

from __future__ import annotations


import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import grid_core  # noqa: E402
from conftest import load  # noqa: E402
from grid_core import Reference  # noqa: E402
from grid_core.algorithm import INTEGRATION_METHODS  # noqa: E402
from grid_core.runtime.derivatives import gradient_backend, registered_rules, second_order_backend  # noqa: E402

from tests.generated import (DERIVATIVE_ROBOTS, DIFFERENTIABLE_PARAMS, SECOND_ORDER_IN_LIBRARY,  # noqa: E402
                             differentiable_call, differentiable_inputs, gradient_gpu_handle, gradient_handle,
                             integrator_handle)

ROBOTS = DERIVATIVE_ROBOTS  # iiwa14 and go2; g1 too under GRID_FULL_SWEEP=1
RULES = registered_rules()
B = 2


pytestmark = pytest.mark.usefixtures("x64")


gpu_handle = gradient_gpu_handle
cpu = gradient_handle  # the robot's one handle of the differentiable calls and their kernels


def inputs(name: str, alg: str, rng, n=B) -> list:
    return [jnp.asarray(a) for a in differentiable_inputs(name, alg, rng, n).values()]


@pytest.mark.parametrize("alg", sorted(RULES))
@pytest.mark.parametrize("name", ROBOTS)
def test_check_grads_forward_and_reverse(name, alg, rng):
    method = differentiable_call(cpu(name), alg)
    x = inputs(name, alg, rng)
    expected = differentiable_call(Reference(load(name)), alg)(*map(np.asarray, x))
    for o, e in zip(jax.tree_util.tree_leaves(method(*x)), jax.tree_util.tree_leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(o), e, rtol=0, atol=1e-9 * max(1.0, np.abs(e).max()))
    check_grads(method, tuple(x), order=1, modes=("fwd", "rev"))


def _central_differences(f, q, eps=1e-6):
    cols = []
    for i in range(q.size):
        e = np.zeros(q.size)
        e[i] = eps
        cols.append((f(q + e) - f(q - e)) / (2 * eps))
    return np.stack(cols, axis=-1)


def test_jit_vmap_grad_jacfwd_jacrev_agree_with_the_reference(rng):
    """On go2 (a free-flyer: the chart in both modes): jacfwd and jacrev of one state's
    forward dynamics in q equal central differences of the Reference in each of the 19
    coordinates; jit(grad) of a batch's loss equals vmap of the single state's grad."""
    robot, h = load("go2"), cpu("go2")
    q, qd, tau, f_ext = inputs("go2", "forward_dynamics", rng)
    ref = Reference(robot)
    fd = _central_differences(lambda a: ref.forward_dynamics(a, *map(np.asarray, (qd[0], tau[0], f_ext[0]))),
                              np.asarray(q[0]))
    def one(a, b, c, d):
        return h.forward_dynamics(a, b, c, d)

    fwd = jax.jit(jax.jacfwd(one))(q[0], qd[0], tau[0], f_ext[0])
    rev = jax.jit(jax.jacrev(one))(q[0], qd[0], tau[0], f_ext[0])
    np.testing.assert_allclose(np.asarray(fwd), fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(rev), np.asarray(fwd), rtol=1e-12, atol=1e-12)

    def loss(a, b, c, d):
        return jnp.sum(h.forward_dynamics(a, b, c, d) ** 2)

    batch = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, qd, tau, f_ext)
    each = jax.vmap(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, qd, tau, f_ext)
    for a, b in zip(batch, each):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", INTEGRATION_METHODS)
def test_integrator_method_fixed_at_generation(method, rng):
    """The integrator's rule differentiates the method its library was generated for, with that
    library's gradient kernel (the Reference's values, check_grads); RK4 over (q, qd, tau) with
    f_ext held (its stages see f_ext at other configurations: no f_ext derivative, which raises)."""
    h = integrator_handle(method)
    assert "integrator_gradient" in h._emitted()  # generated for the method, in the integrator's library
    x = inputs("iiwa14", "integrator", rng)
    call = differentiable_call(h, "integrator")
    expected = Reference(load("iiwa14")).integrator(**dict(zip(RULES["integrator"].inputs, map(np.asarray, x))),
                                                     **DIFFERENTIABLE_PARAMS["integrator"], method=method)
    for o, e in zip(call(*x), expected, strict=True):
        np.testing.assert_allclose(np.asarray(o), e, rtol=0, atol=1e-9 * max(1.0, np.abs(e).max()))
    if method != "rk4":
        check_grads(call, tuple(x), order=1, modes=("fwd", "rev"))
        return
    check_grads(lambda q, qd, tau: call(q, qd, tau, x[3]), tuple(x[:3]), order=1, modes=("fwd", "rev"))
    with pytest.raises(NotImplementedError, match=r"^integrator: no derivative with respect to f_ext for the RK4"):
        jax.grad(lambda *a: sum(jnp.sum(o) for o in call(*a)), argnums=3)(*x)


def test_a_handle_of_the_forward_op_builds_its_gradient_library(rng):
    h = grid_core.CpuHandle(load("iiwa14"), ["crba"], quiet=True)
    (q,) = inputs("iiwa14", "crba", rng)
    check_grads(h.crba, (q,), order=1, modes=("rev",))
    assert gradient_backend(h) is not h and "inverse_dynamics_gradient" in gradient_backend(h)._emitted()


@pytest.mark.parametrize("name", ROBOTS)
def test_check_grads_of_order_two_of_inverse_dynamics(name, rng):
    """Second derivatives of inverse dynamics in q, qd and qdd (f_ext given, held), through the
    Jacobians' rule (idsva_so's tensors) and on the free-flyers the chart (differentiated by JAX):
    check_grads of order 2 in both modes (forward over forward, reverse over reverse and their
    mixes) against finite differences of the analytic first derivatives, in float64; the values
    against the Reference, and the Hessian in qd of a weighted sum of tau (jax.jit of jax.hessian,
    jax.jacfwd and jax.jacrev of jax.grad) against the Reference's d2tau_dqd2.  iiwa14's and go2's second-order
    library is built by the first second derivative; g1's CPU library holds idsva_so
    (SECOND_ORDER_IN_LIBRARY) and is its own."""
    h = cpu(name)
    q, qd, qdd, f_ext = inputs(name, "inverse_dynamics", rng)
    ref = Reference(load(name))

    def call(a, b, c):
        return h.inverse_dynamics(a, b, c, f_ext)

    expected = ref.inverse_dynamics(*map(np.asarray, (q, qd, qdd, f_ext)))
    np.testing.assert_allclose(np.asarray(call(q, qd, qdd)), expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    check_grads(call, (q, qd, qdd), order=2, modes=("fwd", "rev"))
    w = jnp.asarray(rng.normal(size=qd.shape[1]))

    def weighted(b):
        return h.inverse_dynamics(q[0], b, qdd[0], f_ext[0]) @ w

    d2qd = ref.idsva_so(*(np.asarray(a[0]) for a in (q, qd, qdd, f_ext)))[1]
    for hessian in (jax.jit(jax.hessian(weighted)), jax.jacfwd(jax.grad(weighted)), jax.jacrev(jax.grad(weighted))):
        np.testing.assert_allclose(np.asarray(hessian(qd[0])), np.einsum("i,ijk->jk", np.asarray(w), d2qd),
                                   rtol=1e-9, atol=1e-9 * np.abs(d2qd).max())
    assert second_order_backend(h, "inverse_dynamics") is h if name in SECOND_ORDER_IN_LIBRARY else \
        "idsva_so" in h.__dict__["_second_order_backend"].algorithms


@pytest.mark.parametrize("alg", ["forward_dynamics", "aba"])
@pytest.mark.parametrize("name", ROBOTS)
def test_check_grads_of_order_two_of_forward_dynamics(name, alg, rng):
    """Second derivatives of forward dynamics (and of ABA, the same rule by name) in q, qd and tau
    (f_ext given, held), through the Jacobians' rule (fdsva_so's tensors) and on the free-flyers the
    chart: check_grads of order 2 in both modes against finite differences of the analytic first
    derivatives, in float64; the Hessian in qd of a weighted sum of qdd (jax.jit of jax.hessian,
    jax.jacfwd and jax.jacrev of jax.grad) and the mixed one in (tau, q) against the Reference's
    fdsva_so (d2qdd_dqd2 and d2qdd_dq_dtau; q's columns on iiwa14, whose q is its tangent)."""
    h = cpu(name)
    q, qd, tau, f_ext = inputs(name, alg, rng)
    ref = Reference(load(name))

    def call(a, b, c):
        return getattr(h, alg)(a, b, c, f_ext)

    expected = getattr(ref, alg)(*map(np.asarray, (q, qd, tau, f_ext)))
    np.testing.assert_allclose(np.asarray(call(q, qd, tau)), expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    check_grads(call, (q, qd, tau), order=2, modes=("fwd", "rev"))
    w = jnp.asarray(rng.normal(size=qd.shape[1]))

    def weighted(a, b, c):
        return getattr(h, alg)(a, b, c, f_ext[0]) @ w

    so = ref.fdsva_so(*(np.asarray(a[0]) for a in (q, qd, tau, f_ext)))
    d2qd = np.einsum("i,ijk->jk", np.asarray(w), so[1])
    for hessian in (jax.jit(jax.hessian(weighted, argnums=1)), jax.jacfwd(jax.grad(weighted, argnums=1), argnums=1),
                    jax.jacrev(jax.grad(weighted, argnums=1), argnums=1)):
        np.testing.assert_allclose(np.asarray(hessian(q[0], qd[0], tau[0])), d2qd, rtol=1e-9,
                                   atol=1e-9 * np.abs(d2qd).max())
    if name == "iiwa14":
        mixed = jax.jacfwd(jax.grad(weighted, argnums=2), argnums=0)(q[0], qd[0], tau[0])  # [tau_k, q_j]
        d2 = np.einsum("i,ijk->kj", np.asarray(w), so[3])
        np.testing.assert_allclose(np.asarray(mixed), d2, rtol=1e-9, atol=1e-9 * np.abs(d2).max())


@pytest.mark.parametrize("name", ROBOTS)
def test_check_grads_of_order_two_of_the_end_effector_pose(name, rng):
    """Second derivatives of the end-effector poses in q, through the Jacobians' rule (the pose
    Hessian's tensor) and on the free-flyers the chart: check_grads of order 2 in both modes against
    finite differences of the analytic first derivatives, in float64; on iiwa14 (q its tangent) the
    Hessian of the frames' origins against the Reference's end_effector_pose_hessian (its linear rows,
    symmetric on a fixed base)."""
    h = cpu(name)
    q, = inputs(name, "end_effector_pose", rng)
    check_grads(h.end_effector_pose, (q,), order=2, modes=("fwd", "rev"))
    if name == "iiwa14":
        origins = jax.hessian(lambda a: h.end_effector_pose(a)[:, :3, 3])(q[0])
        H = Reference(load(name)).end_effector_pose_hessian(np.asarray(q[0]))[:, :3]
        np.testing.assert_allclose(np.asarray(origins), H, rtol=1e-9, atol=1e-9 * np.abs(H).max())


def test_second_derivatives_not_declared_raise(rng):
    """A second derivative whose first was taken in f_ext (inverse dynamics' second derivatives are
    in q, qd and qdd alone), or of a call without second derivatives, raises in one line."""
    h = cpu("iiwa14")
    q, qd, qdd, f_ext = inputs("iiwa14", "inverse_dynamics", rng)
    with pytest.raises(NotImplementedError, match=r"^inverse_dynamics: no second derivative of this gradient "
                       r"\(its second derivatives: in q, qd, qdd alone;"):
        jax.jacfwd(jax.grad(lambda a, e: jnp.sum(h.inverse_dynamics(a, qd, qdd, e)), argnums=(0, 1)))(q, f_ext)
    with pytest.raises(NotImplementedError, match=r"^crba: no second derivative of this gradient \(its second "
                       "derivatives: none declared;"):
        jax.hessian(lambda a: jnp.sum(h.crba(a)))(q)


@pytest.mark.gpu
@pytest.mark.parametrize("alg", sorted(RULES))
def test_check_grads_on_the_gpu(alg, rng):
    """The same rules on XLA:GPU with a RobotHandle: the FFI calls on XLA's stream."""
    gpu = next((d for d in jax.devices() if d.platform == "gpu"), None)
    if gpu is None:
        pytest.skip("no JAX GPU device")
    h = gpu_handle()
    x = [jax.device_put(a, gpu) for a in inputs("iiwa14", alg, rng)]
    check_grads(differentiable_call(h, alg), tuple(x), order=1, modes=("fwd", "rev"))
