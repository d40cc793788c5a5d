"""PyTorch autograd through the ``grid::`` operators (grid_core.runtime.autograd_torch): the
analytic backward of every differentiable call held to finite differences by
``torch.autograd.gradcheck`` in float64 on a fixed arm and two floating bases (the free-flyer
chart: each quaternion coordinate perturbed on its own), the forward to the Reference, and the
operators traced by ``torch.compile(fullgraph=True)``."""

from __future__ import annotations


import numpy as np
import pytest

torch = pytest.importorskip("torch")

import grid_core  # noqa: E402
from conftest import load  # noqa: E402
from grid_core import Reference  # noqa: E402
from grid_core.algorithm import INTEGRATION_METHODS  # noqa: E402
from grid_core.errors import InputError  # noqa: E402
from grid_core.runtime import autograd_torch  # noqa: E402
from grid_core.runtime.derivatives import gradient_backend, registered_rules, second_order_backend  # noqa: E402

from tests.generated import (DERIVATIVE_ROBOTS, DIFFERENTIABLE_PARAMS, SECOND_ORDER_IN_LIBRARY,  # noqa: E402
                             differentiable_call, differentiable_inputs, gradient_gpu_handle, gradient_handle,
                             integrator_handle, second_order_algorithms)

ROBOTS = DERIVATIVE_ROBOTS  # iiwa14 and go2; g1 too under GRID_FULL_SWEEP=1
RULES = registered_rules()
B = 2


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """PyTorch's intra-op threads and the handle's workers spin on the same cores between calls
    (the backward alternates the two): one torch thread here, a hundred times faster on 2 cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


gpu_handle = gradient_gpu_handle
cpu = gradient_handle  # the robot's one handle of the differentiable calls and their kernels


def inputs(name: str, alg: str, rng, n=B) -> dict:
    """Random inputs of ``alg`` as float64 tensors requiring grad (f_ext given)."""
    return {k: torch.tensor(v).requires_grad_() for k, v in differentiable_inputs(name, alg, rng, n).items()}


@pytest.mark.parametrize("alg", sorted(RULES))
@pytest.mark.parametrize("name", ROBOTS)
def test_gradcheck_against_finite_differences(name, alg, rng):
    h = cpu(name)
    assert gradient_backend(h) is h  # one library per robot: it holds its rules' kernels
    x = inputs(name, alg, rng)
    method = differentiable_call(h, alg)
    outs = _outs(method(*x.values()))
    assert all(o.grad_fn is not None and o.dtype == torch.float64 for o in outs)
    expected = _outs(differentiable_call(Reference(load(name)), alg)(*(v.detach().numpy() for v in x.values())))
    for o, e in zip(outs, expected, strict=True):
        np.testing.assert_allclose(o.detach().numpy(), e, rtol=0, atol=1e-9 * max(1.0, np.abs(e).max()))
    # g1's minv and crba (one backward per output element, 2 x 35 x 35 of them: 60 s here in full
    # mode, which passes): the fast mode's random projections
    fast = name == "g1" and alg in ("crba", "minv")
    assert torch.autograd.gradcheck(method, tuple(x.values()), fast_mode=fast)


def _outs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def test_free_flyer_gradient_is_the_references_finite_difference(rng):
    """The q gradient of inverse dynamics on go2 through the chart, against central differences
    of the Reference in each of the 19 coordinates (a quaternion's included, unnormalised)."""
    robot, h = load("go2"), cpu("go2")
    x = {k: v[0].detach().requires_grad_() for k, v in inputs("go2", "inverse_dynamics", rng).items()}
    w = rng.normal(size=robot.nv)
    (h.inverse_dynamics(*x.values()) @ torch.tensor(w)).backward()
    ref, args = Reference(robot), [v.detach().numpy() for v in x.values()]
    fd = np.zeros(robot.nq)
    for i in range(robot.nq):
        e = np.zeros(robot.nq)
        e[i] = 1e-6
        fd[i] = (ref.inverse_dynamics(args[0] + e, *args[1:]) - ref.inverse_dynamics(args[0] - e, *args[1:])) @ w
    fd /= 2e-6
    np.testing.assert_allclose(x["q"].grad.numpy(), fd, rtol=1e-6, atol=1e-6)
    # a change of the quaternion's norm moves nothing
    i = robot.quaternion_indices[0]
    assert abs(x["q"].grad[i:i + 4] @ x["q"].detach()[i:i + 4]) < 1e-9


def test_integrator_free_flyer_gradient_is_the_references_finite_difference(rng):
    """The gradient of go2's q_next alone (qd_next's left to autograd's zeros) with respect to q and
    qd: q_next's rows mapped from the tangent space at it to its 19 coordinates, q's columns through
    the chart at q, against central differences of the Reference in every coordinate of q (a
    quaternion's included, unnormalised) and of qd."""
    robot, h, dt = load("go2"), cpu("go2"), DIFFERENTIABLE_PARAMS["integrator"]["dt"]
    x = {k: v[0].detach().requires_grad_() for k, v in inputs("go2", "integrator", rng).items()}
    w = rng.normal(size=robot.nq)
    q_next, _ = h.integrator(x["q"], x["qd"], x["tau"], dt, f_ext=x["f_ext"])
    (q_next @ torch.tensor(w)).backward()
    ref, a = Reference(robot), {k: v.detach().numpy() for k, v in x.items()}
    for k in ("q", "qd"):
        fd = np.zeros(a[k].size)
        for i in range(a[k].size):
            e = np.zeros(a[k].size)
            e[i] = 1e-6
            plus, minus = dict(a, **{k: a[k] + e}), dict(a, **{k: a[k] - e})
            fd[i] = (ref.integrator(**plus, dt=dt)[0] - ref.integrator(**minus, dt=dt)[0]) @ w / 2e-6
        np.testing.assert_allclose(x[k].grad.numpy(), fd, rtol=1e-6, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("method", INTEGRATION_METHODS)
def test_integrator_method_fixed_at_generation(method, rng):
    """A library whose integrator and gradient are generated for ``method`` differentiates that
    method with its own gradient kernel (the rule calls it with the method the call's code was
    generated with): the forward against the Reference, gradcheck of the backward.  RK4 has no
    f_ext derivative (its stages see f_ext at other configurations): gradcheck over (q, qd, tau)
    with f_ext held, and a backward through f_ext raises in one line."""
    h = integrator_handle(method)
    assert "integrator_gradient" in h._emitted()  # generated for the method, in the integrator's library
    x = inputs("iiwa14", "integrator", rng)
    call = differentiable_call(h, "integrator")
    expected = Reference(load("iiwa14")).integrator(**{k: v.detach().numpy() for k, v in x.items()},
                                                     **DIFFERENTIABLE_PARAMS["integrator"], method=method)
    for o, e in zip(call(*x.values()), expected, strict=True):
        np.testing.assert_allclose(o.detach().numpy(), e, rtol=0, atol=1e-9 * max(1.0, np.abs(e).max()))
    if method != "rk4":
        assert torch.autograd.gradcheck(call, tuple(x.values()))
        return
    f_ext = x["f_ext"].detach()
    assert torch.autograd.gradcheck(lambda q, qd, tau: call(q, qd, tau, f_ext), (x["q"], x["qd"], x["tau"]))
    q_next, qd_next = call(*x.values())
    with pytest.raises(NotImplementedError, match=r"^integrator: no derivative with respect to f_ext for the RK4"):
        (q_next.sum() + qd_next.sum()).backward()


def test_single_state_broadcast_and_float32_inputs(rng):
    h = cpu("go2")
    x = inputs("go2", "forward_dynamics", rng)
    q1 = x["q"][0].detach().requires_grad_()  # one state among a batch: its gradient sums over it
    assert torch.autograd.gradcheck(lambda q, qd: h.forward_dynamics(q, qd, x["tau"]), (q1, x["qd"]))
    assert torch.autograd.gradcheck(lambda q: h.end_effector_pose(q), (q1,))
    # float32 tensors into the float64 handle: converted, differentiably
    q32 = x["q"].detach().float().requires_grad_()
    h.crba(q32).sum().backward()
    assert q32.grad.dtype == torch.float32 and torch.isfinite(q32.grad).all()


def test_grad_mode_and_refusals(rng):
    h = cpu("iiwa14")
    x = inputs("iiwa14", "inverse_dynamics", rng)
    with torch.no_grad():
        assert h.inverse_dynamics(*x.values()).grad_fn is None
    plain = [v.detach() for v in x.values()]
    assert h.inverse_dynamics(*plain).grad_fn is None
    with pytest.raises(InputError, match="out= takes no gradient"):
        h.inverse_dynamics(*x.values(), out=torch.empty(B, 7, dtype=torch.float64))
    # the same checks as any call: a NaN names its argument
    bad = x["qd"].detach().clone()
    bad[1, 2] = float("nan")
    with pytest.raises(InputError, match="'qd'"):
        h.inverse_dynamics(x["q"], bad, x["qdd"])


SECOND = sorted(a for a, r in RULES.items() if r.second is not None)
"""The calls with second derivatives: inverse dynamics (idsva_so), forward dynamics and ABA (fdsva_so), the
end-effector pose (end_effector_pose_hessian)."""


def test_second_derivatives_declared():
    assert SECOND == ["aba", "end_effector_pose", "forward_dynamics", "inverse_dynamics"]


@pytest.mark.parametrize("alg", SECOND)
@pytest.mark.parametrize("name", ROBOTS)
def test_gradgradcheck_of_second_derivatives(name, alg, rng):
    """Double backward in the inputs of the call's second derivatives (the others, f_ext, given and
    held): the gradient formed, under create_graph, from the Jacobians' operator, whose backward is the
    second-order kernels' tensors, and on the free-flyers from the chart at q (differentiated by
    PyTorch), held to finite differences of the analytic first derivatives by gradgradcheck in float64.
    Where the robot's CPU library lacks those kernels (idsva_so and fdsva_so on iiwa14 and go2, the pose
    Hessian on go2) one second-order library of them is built by the first double backward, never by
    the handle or a first backward; g1's CPU library holds them all (SECOND_ORDER_IN_LIBRARY) and is its
    own."""
    h = cpu(name)
    second = RULES[alg].second
    x = inputs(name, alg, rng)
    n = len(second.inputs)
    varied, held = list(x.values())[:n], [v.detach() for v in list(x.values())[n:]]
    assert list(x)[:n] == list(second.inputs)
    method = differentiable_call(h, alg)
    method(*x.values()).sum().backward()
    own = set(second.needs) <= set(h._emitted())
    assert own or name not in SECOND_ORDER_IN_LIBRARY
    second_only = set(second.needs) - set(RULES[alg].needs)
    assert bool(second_only & set(gradient_backend(h)._emitted())) == own

    def call(*xs):
        return method(*xs, *held)

    # g1 (2 x 106 inputs: a double backward per gradient element in full mode): the fast mode's projections
    assert torch.autograd.gradgradcheck(call, tuple(varied), fast_mode=name == "g1")
    sb = second_order_backend(h, alg)
    assert sb is h if own else (sb is h.__dict__["_second_order_backend"] and set(second.needs) <= set(sb.algorithms)
                                and set(sb.algorithms) <= set(second_order_algorithms()))


def test_double_backward_raises_where_no_second_derivative_exists(rng):
    h = cpu("iiwa14")
    x = inputs("iiwa14", "inverse_dynamics", rng)
    # f_ext differentiated: inverse dynamics' second derivatives are in q, qd and qdd alone
    g, = torch.autograd.grad(h.inverse_dynamics(*x.values()).sum(), x["q"], create_graph=True)
    with pytest.raises(NotImplementedError, match="^inverse_dynamics: no second derivative of this gradient "
                       r"\(its second derivatives: in q, qd, qdd alone;"):
        g.sum().backward()
    g, = torch.autograd.grad(h.crba(x["q"]).sum(), x["q"], create_graph=True)
    with pytest.raises(NotImplementedError, match=r"^crba: no second derivative of this gradient \(its second "
                       "derivatives: none declared;"):
        g.sum().backward()


def test_torch_compile_fullgraph(rng):
    """The operators under torch.compile(fullgraph=True): Dynamo traces the call into one graph
    (fake implementation: shapes; autograd formula: the backward graph), same values and
    gradients as eager.  (``aot_eager``: the graphs traced as inductor's are, run without
    generating code, which takes tens of seconds here.)"""
    h = cpu("go2")
    ops = autograd_torch.ops(h)
    x = inputs("go2", "inverse_dynamics", rng)

    def loss(q, qd, qdd, f_ext):
        return (ops.inverse_dynamics(q, qd, qdd, f_ext) ** 2).sum() + ops.crba(q).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    value = compiled(*x.values())
    grads = torch.autograd.grad(value, list(x.values()))
    eager = loss(*x.values())
    expected = torch.autograd.grad(eager, list(x.values()))
    assert torch.equal(value, eager)
    for a, b in zip(grads, expected):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_a_handle_of_the_forward_op_builds_its_gradient_library(rng):
    """The user lists the forward op only: the gradient library is built once, on the first
    backward, and kept."""
    h = grid_core.CpuHandle(load("iiwa14"), ["inverse_dynamics"], quiet=True)
    x = inputs("iiwa14", "inverse_dynamics", rng)
    assert "_gradient_backend" not in h.__dict__
    assert torch.autograd.gradcheck(h.inverse_dynamics, tuple(x.values()))
    gb = gradient_backend(h)
    assert gb is not h and set(RULES["inverse_dynamics"].needs) <= set(gb._emitted())
    assert gradient_backend(h) is gb and gradient_backend(cpu("iiwa14")) is cpu("iiwa14")


@pytest.mark.gpu
@pytest.mark.parametrize("alg", sorted(RULES))
def test_gradcheck_on_cuda_tensors(alg, rng):
    h = gpu_handle()
    x = {k: v.detach().cuda().requires_grad_() for k, v in inputs("iiwa14", alg, rng).items()}
    method = differentiable_call(h, alg)
    assert all(o.is_cuda and o.grad_fn is not None for o in _outs(method(*x.values())))
    assert torch.autograd.gradcheck(method, tuple(x.values()))
