"""The algorithms' derivative rules (their ``derivatives`` declarations) evaluated in numpy with
the Reference as their kernels, no library built: each rule's Jacobians against central
differences of the Reference on a fixed arm (the tangent space is q's there), the rules that
compose another by name (minv through crba's, forward dynamics' f_ext through inverse dynamics',
aba through forward dynamics') included, and the registry's answer for an algorithm without one."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load
from grid_core import Reference
from grid_core.derivatives import Namespace
from grid_core.errors import InputError
from grid_core.runtime.derivatives import kernel_arguments, kernels_of, registered_rules, rule_of
from tests.generated import DIFFERENTIABLE_PARAMS

NUMPY = Namespace(np.einsum, lambda x, k: np.repeat(x, k, axis=0), lambda a, like: np.asarray(a, dtype=like.dtype))
EPS = 1e-6


class _Backend:
    def __init__(self, robot):
        self.robot = robot


def kernels(robot, called: list):
    ref = Reference(robot)

    def call(name, states, params):
        called.append(name)
        return getattr(ref, name)(**kernel_arguments(ref, name, states, params))

    return kernels_of(_Backend(robot), call, NUMPY)


CASES = [(alg, None) for alg in sorted(registered_rules()) if alg != "integrator"] + \
    [("integrator", m) for m in ("semi_implicit_euler", "explicit_euler", "rk4")]


@pytest.mark.parametrize(("alg", "method"), CASES)
def test_each_rule_is_the_references_central_difference(alg, method, rng):
    """(The integrator's for each method: RK4's gradient is the Reference's, its f_ext column none.)"""
    robot = load("iiwa14")
    rule, called = registered_rules()[alg], []
    x = {"q": robot.random_configuration(rng, 1)}
    for k in rule.inputs[1:]:
        x[k] = rng.uniform(-1, 1, (1, *((robot.num_bodies, 6) if k == "f_ext" else (robot.nv,))))
    params = dict(DIFFERENTIABLE_PARAMS.get(alg, {}), **({} if method is None else {"method": method}))
    wanted = set(rule.inputs) - ({"f_ext"} if method == "rk4" else set())
    J = rule.jacobians(kernels(robot, called), x, params, wanted)
    assert set(called) <= set(rule.needs)  # what gradient_backend builds is what the rule calls
    f = getattr(Reference(robot), alg)
    for k in wanted:
        a = x[k][0]
        cols = []
        for i in range(a.size):
            e = np.zeros(a.size)
            e[i] = EPS
            plus, minus = dict(x), dict(x)
            plus[k], minus[k] = (a + e.reshape(a.shape))[None], (a - e.reshape(a.shape))[None]
            # (the arm's tangent space is q's: a configuration output's rows too)
            cols.append(np.concatenate([(p - m)[0].ravel() / (2 * EPS) for p, m in
                                        zip(_outs(f(**plus, **params)),
                                            _outs(f(**minus, **params)))]))
        fd = np.stack(cols, axis=-1)
        got = np.concatenate([j[0].reshape(-1, a.size) for j in (J[k] if isinstance(J[k], tuple) else (J[k],))])
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(fd).max()), err_msg=k)
    if method == "rk4":
        with pytest.raises(NotImplementedError, match="integrator: no derivative with respect to f_ext for the RK4"):
            rule.jacobians(kernels(robot, []), x, params, {"f_ext"})


def _outs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def test_an_algorithm_without_a_rule():
    assert "integrator_gradient" not in registered_rules() and "aba" in registered_rules()
    with pytest.raises(InputError, match=r"integrator_gradient: no derivative is defined for it \(differentiable: "):
        rule_of("integrator_gradient")


@pytest.mark.parametrize("alg", ["inverse_dynamics", "forward_dynamics", "aba"])
def test_second_rule_is_the_central_difference_of_its_jacobians(alg, rng):
    """The second derivatives of inverse_dynamics (idsva_so), forward_dynamics (fdsva_so) and aba
    (forward_dynamics' rule, by name: grid_core.derivatives.same_as), the Reference's kernels here,
    against central differences of the rule's own Jacobians in q, qd and qdd or tau (an arm: q's
    tangent space is q's), every pair, those the rule leaves out zero."""
    robot = load("iiwa14")
    rule, called = registered_rules()[alg], []
    third = rule.inputs[2]
    x = {"q": robot.random_configuration(rng, 1), "qd": rng.uniform(-1, 1, (1, robot.nv)),
         third: rng.uniform(-1, 1, (1, robot.nv)), "f_ext": rng.uniform(-1, 1, (1, robot.num_bodies, 6))}
    inputs = set(rule.second.inputs)
    H = rule.second.hessians(kernels(robot, called), x, {}, inputs)
    assert set(called) <= set(rule.second.needs) and inputs == {"q", "qd", third}

    def jacobians(y):
        return rule.jacobians(kernels(robot, []), y, {}, inputs)

    for b in sorted(inputs):
        cols = {a: [] for a in inputs}
        for i in range(robot.nv):
            plus, minus = dict(x), dict(x)
            plus[b], minus[b] = x[b].copy(), x[b].copy()
            plus[b][0, i] += EPS
            minus[b][0, i] -= EPS
            jp, jm = jacobians(plus), jacobians(minus)
            for a in inputs:
                cols[a].append((jp[a][0] - jm[a][0]) / (2 * EPS))
        for a in sorted(inputs):
            fd = np.stack(cols[a], axis=-1)
            got = H.get(a, {}).get(b, np.zeros((1, *fd.shape)))[0]
            np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(fd).max()), err_msg=f"{a}/{b}")
