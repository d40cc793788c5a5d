"""The shared emitted spatial steps, evaluated: the straight-line code they write (as text) is
run here by a small interpreter of its statements and compared with the numpy model
(grid_core.model), robot constants folded, on bodies of every transform kind."""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import load
from grid_core.emit import dense
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit.expr import Scope, render, sum_terms
from grid_core.model.joints import body_q, joint_transform, motion_subspace
from grid_core.testing import random_q

_DECL = re.compile(r"^const T (\w+) = (.*)$")
_ASSIGN = re.compile(r"^(\w+\[\d+\]) (=|\+=|-=) (.*)$")
_SINCOS = re.compile(r"^grid_sincos<T>\((.*), &(\w+)\[(\d+)\], &(\w+)\[(\d+)\]\)$")


def _py(expr: str) -> str:
    return expr.replace("grid_sqrt<T>", "np.sqrt").replace("T(", "float(")


def run(scope: Scope, env: dict) -> dict:
    """Executes the scope's statements (declarations, array element stores, grid_sincos)."""
    for st in scope.stmts:
        if isinstance(st, n.Comment):
            continue
        text = st.text
        if m := _DECL.match(text):
            env[m.group(1)] = eval(_py(m.group(2)), {"np": np}, env)
        elif m := _SINCOS.match(text):
            ang = eval(_py(m.group(1)), {"np": np}, env)
            env[m.group(2)][int(m.group(3))], env[m.group(4)][int(m.group(5))] = np.sin(ang), np.cos(ang)
        elif m := _ASSIGN.match(text):
            val = eval(_py(m.group(3)), {"np": np}, env)
            name, idx = m.group(1).split("[")
            i = int(idx[:-1])
            env[name][i] = val if m.group(2) == "=" else env[name][i] + (val if m.group(2) == "+=" else -val)
        else:
            raise AssertionError(f"statement the test interpreter does not know: {text}")
    return env


def value(x, env) -> float:
    return float(x) if isinstance(x, (int, float)) else float(eval(_py(render(x)), {"np": np}, env))


def _sym(rng) -> np.ndarray:
    A = rng.standard_normal((6, 6))
    return A @ A.T + 6 * np.eye(6)


# iiwa14: axis-aligned revolute joints; hyq: general axes; go2: a free-flyer; a prismatic joint
CASES = [("iiwa14", 3), ("hyq", 2), ("go2", 0), ("erd:pr2", None)]


def _bodies():
    out = []
    for name, index in CASES:
        robot = load(name)
        if index is None:  # the first prismatic joint
            index = next(b.index for b in robot.bodies if b.jtype.name == "PRISMATIC")
        out.append(pytest.param(name, index, id=f"{name}-{robot.bodies[index].joint.name}"))
    return out


@pytest.mark.parametrize(("name", "index"), _bodies())
def test_sym6_to_parent_and_outer(name, index, rng):
    robot = load(name)
    body = robot.bodies[index]
    q = random_q(robot, rng, 1)[0]
    X = joint_transform(body, body_q(body, q)) @ body.Xtree
    A = _sym(rng)
    env = {"XI": np.zeros(ss.xi_size(robot)), "q": q, "A": np.array(ss.sym6_of(A))}
    scope = Scope("t")
    ss.xi_update(scope, robot, body, lambda i: f"q[{i}]", lambda i: f"XI[{i}]")
    Xs = ss.Transform(robot, body, lambda i: f"XI[{i}]", scope)
    a = [f"A[{k}]" for k in range(21)]
    parent = ss.sym6_to_parent(Xs, a, scope)
    S = motion_subspace(body)
    w = S.shape[1]
    U = [ss.sym6_times(a, col) for col in ss.subspace_columns(body)]
    U = [scope.let_all(u, "U") for u in U]
    D = [[sum_terms((col[r], U[c][r]) for r in range(6)) for c in range(w)] for col in ss.subspace_columns(body)]
    Dinv = dense.spd_inverse(scope, D)
    Ia = ss.sym6_sub_outer(a, U, Dinv, scope)
    run(scope, env)
    got = np.array([[value(ss.sym6_full(parent)[i][j], env) for j in range(6)] for i in range(6)])
    np.testing.assert_allclose(got, X.T @ A @ X, rtol=1e-12, atol=1e-12)
    Un = A @ S
    expected = A - Un @ np.linalg.inv(S.T @ Un) @ Un.T
    got = np.array([[value(ss.sym6_full(Ia)[i][j], env) for j in range(6)] for i in range(6)])
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_sym6_from_rbi_and_layout(rng):
    robot = load("atlas")
    for body in robot.bodies[:5]:
        I = np.asarray(body.inertia)
        np.testing.assert_allclose(np.array(ss.sym6_full(ss.sym6_from_rbi(ss.rbi_of(I)))), I, atol=1e-15)
        np.testing.assert_allclose(np.array(ss.sym6_full(ss.sym6_of(I))), I, atol=1e-15)
    assert sorted(ss.sym6_index(i, j) for i in range(6) for j in range(i, 6)) == list(range(21))
    assert ss.sym6_index(4, 1) == ss.sym6_index(1, 4) == 9
    A = _sym(rng)
    m = rng.standard_normal(6)
    np.testing.assert_allclose(np.array(ss.sym6_times(ss.sym6_of(A), list(m))), A @ m, rtol=1e-13)


@pytest.mark.parametrize("m", [1, 2, 6, 10])
def test_dense_spd_solve_and_inverse(m, rng):
    R = rng.standard_normal((m, m))
    K = R @ R.T + m * np.eye(m)
    B = rng.standard_normal((m, 3))
    env = {"K": K.ravel(), "B": B.ravel()}
    Ks = [[f"K[{i * m + j}]" for j in range(m)] for i in range(m)]
    scope = Scope("t")
    X = dense.spd_solve(scope, Ks, [[f"B[{i * 3 + j}]" for j in range(3)] for i in range(m)])
    Kinv = dense.spd_inverse(scope, Ks)
    run(scope, env)
    np.testing.assert_allclose(np.array([[value(x, env) for x in row] for row in X]), np.linalg.solve(K, B),
                               rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(np.array([[value(x, env) for x in row] for row in Kinv]), np.linalg.inv(K),
                               rtol=1e-11, atol=1e-13)


def test_dense_folds_constants():
    scope = Scope("t")
    assert dense.spd_inverse(scope, [[4.0, 0.0], [0.0, 0.25]]) == [[0.25, 0.0], [0.0, 4.0]]
    assert scope.stmts == []
    with pytest.raises(ValueError, match="positive definite"):
        dense.cholesky(Scope("t"), [[-1.0]])
