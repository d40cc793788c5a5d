"""The framework's pieces an algorithm that moves a configuration needs, apart from any algorithm:

* option ports other than ``frames`` fixed at generation time from the algorithm's options
  (``algorithm_options={name: {port: value}}``), else the port's default;
* the shared helper groups (``Emitter.shared_helpers``): emitted once per header, an unknown one
  refused;
* the ``"lie"`` group's device functions (grid_core.emit.lie_steps) compiled as host C++ equal
  grid_core.model.lie's float64 definitions: the free-flyer's exponential map and the
  derivatives of ``q (+) v`` (Pinocchio's dIntegrate), at angles on both sides of the series'
  threshold (|w| = 1) and at 0.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from grid_core.algorithm import Port, generation_values
from grid_core.composer import GenerateOptions, shared_helpers
from grid_core.emit import lie_steps
from grid_core.emit.printer import render
from grid_core.errors import CodegenError, InputError
from grid_core.model.lie import exp6_xyzquat, se3_inverse_adjoint, se3_right_jacobian


class _Alg:
    name = "stepper"

    def __init__(self, default):
        self.default = default

    def inputs(self, robot):
        return (Port("q", (3,)), Port("scheme", (), kind="option", default=self.default, choices=("a", "b")))


def test_an_option_port_is_fixed_from_the_algorithms_options():
    assert generation_values(_Alg("a"), None, GenerateOptions()) == {"scheme": "a"}
    opts = GenerateOptions(algorithm_options={"stepper": {"scheme": "b"}})
    assert generation_values(_Alg("a"), None, opts) == {"scheme": "b"}
    with pytest.raises(CodegenError, match="scheme"):
        generation_values(_Alg(None), None, GenerateOptions())
    with pytest.raises(InputError, match="argument 'scheme' must be one of a, b, got 'c'"):
        generation_values(_Alg("a"), None, GenerateOptions(algorithm_options={"stepper": {"scheme": "c"}}))


class _Emitter:
    def __init__(self, groups):
        self.shared_helpers = groups


def test_a_helper_group_is_emitted_once():
    once = render(shared_helpers([_Emitter(("lie",))]))
    assert render(shared_helpers([_Emitter(("lie",)), _Emitter(("lie",))])) == once
    assert once.count("void grid_exp6_xyzquat(") == 2  # the scalar form and the CPU build's lanes form
    assert shared_helpers([_Emitter(())]) == []
    with pytest.raises(CodegenError, match="unknown shared helper"):
        shared_helpers([_Emitter(("nope",))])


STANDALONE = """
#include <cmath>
#include <cstdio>
#define __host__
#define __device__
template <typename T> void grid_sincos(T x, T *s, T *c) { *s = std::sin(x); *c = std::cos(x); }
template <typename T> T grid_sqrt(T x) { return std::sqrt(x); }
"""

MAIN = """
int main() {
    double x[7], xi[6], out[7], Dq[36], Dv[36];
    while (std::scanf("%lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", x, x + 1, x + 2, x + 3, x + 4, x + 5,
                      x + 6, xi, xi + 1, xi + 2, xi + 3, xi + 4, xi + 5) == 13) {
        grid_exp6_xyzquat(out, x, xi);
        grid_dintegrate6(Dq, Dv, xi);
        for (int i = 0; i < 7; ++i) std::printf("%.17g ", out[i]);
        for (int i = 0; i < 36; ++i) std::printf("%.17g ", Dq[i]);
        for (int i = 0; i < 36; ++i) std::printf("%.17g ", Dv[i]);
        std::printf("\\n");
    }
}
"""


def test_the_lie_helpers_equal_the_float64_definitions(tmp_path, rng):
    from grid_core import buildcache

    src = tmp_path / "lie.cpp"
    src.write_text(STANDALONE + render(lie_steps.helpers()) + MAIN)
    exe = tmp_path / "lie"
    subprocess.run([*buildcache.host_compiler(), "-std=c++17", "-O0", "-o", str(exe), str(src)], check=True)
    cases = []
    for angle in (0.0, 1e-7, 1e-3, 0.5, 0.999, 1.001, 2.0, 3.1):
        x = np.concatenate([rng.normal(size=3), rng.normal(size=4)])
        xi = rng.normal(size=6)
        xi[3:] *= angle / np.linalg.norm(xi[3:])
        cases.append((x, xi))
    stdin = "\n".join(" ".join(repr(float(v)) for v in np.concatenate(c)) for c in cases)
    rows = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(rows) == len(cases)
    for (x, xi), row in zip(cases, rows):
        got = np.array(row.split(), dtype=float)
        expected = np.concatenate([exp6_xyzquat(x, xi), se3_inverse_adjoint(xi).ravel(), se3_right_jacobian(xi).ravel()])
        assert np.abs(got - expected).max() <= 1e-14 * max(1.0, np.abs(expected).max()), (xi, got - expected)
