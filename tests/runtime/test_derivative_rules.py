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


@pytest.mark.parametrize("alg", sorted(registered_rules()))
def test_each_rule_is_the_references_central_difference(alg, rng):
    robot = load("iiwa14")
    rule, called = registered_rules()[alg], []
    x = {"q": robot.random_configuration(rng, 1)}
    for k in rule.inputs[1:]:
        x[k] = rng.uniform(-1, 1, (1, *((robot.num_bodies, 6) if k == "f_ext" else (robot.nv,))))
    J = rule.jacobians(kernels(robot, called), x, {}, set(rule.inputs))
    assert set(called) <= set(rule.needs)  # what gradient_backend builds is what the rule calls
    f = getattr(Reference(robot), alg)
    for k in rule.inputs:
        a = x[k][0]
        cols = []
        for i in range(a.size):
            e = np.zeros(a.size)
            e[i] = EPS
            plus, minus = dict(x), dict(x)
            plus[k], minus[k] = (a + e.reshape(a.shape))[None], (a - e.reshape(a.shape))[None]
            cols.append((f(*plus.values()) - f(*minus.values()))[0] / (2 * EPS))
        fd = np.stack(cols, axis=-1).reshape(J[k].shape[1:])
        np.testing.assert_allclose(J[k][0], fd, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(fd).max()), err_msg=k)


def test_an_algorithm_without_a_rule():
    assert "integrator" not in registered_rules() and "aba" in registered_rules()
    with pytest.raises(InputError, match=r"integrator: no derivative is defined for it \(differentiable: aba, "):
        rule_of("integrator")
