"""Golden tests of the node printer: each construct prints exactly this."""

from __future__ import annotations

import pytest

from grid_core.emit import nodes as n
from grid_core.emit.printer import fnum, render


def test_function_with_block_stride_loop_and_sync():
    out = render(
        n.Function(
            "__device__ void f(T *s_x)",
            [n.BlockStrideLoop("i", 7, [n.Stmt("s_x[i] = T(0)")]), n.Sync()],
            template="template <typename T>",
            doc="zero s_x",
        )
    )
    assert out == (
        "// zero s_x\n"
        "template <typename T>\n"
        "__device__ void f(T *s_x) {\n"
        "    for (int i = GRID_TID; i < 7; i += GRID_BLOCK_THREADS) {\n"
        "        s_x[i] = T(0);\n"
        "    }\n"
        "    __syncthreads();\n"
        "}\n"
    )


def test_if_else_constexpr_and_switch_block():
    out = render(
        n.If("FLAG", [n.Block("switch (k)", [n.Block("case 0:", [n.Stmt("x = 1"), n.Stmt("break")])])],
             [n.Comment("none")], constexpr=True)
    )
    assert out == (
        "if constexpr (FLAG) {\n"
        "    switch (k) {\n"
        "        case 0: {\n"
        "            x = 1;\n"
        "            break;\n"
        "        }\n"
        "    }\n"
        "} else {\n"
        "    // none\n"
        "}\n"
    )


def test_const_array_wraps_lines():
    out = render(n.ConstArray("int", "P", [-1, 0, 1, 2, 3], per_line=3, comment="parents"))
    assert out == (
        "// parents\n"
        "static constexpr int P[5] = {\n"
        "    -1, 0, 1,\n"
        "    2, 3\n"
        "};\n"
    )


def test_namespace_and_struct():
    out = render(n.Namespace("grid", [n.Struct("S", [n.Stmt("T x")], template="template <typename T>")]))
    assert out == "namespace grid {\n\ntemplate <typename T>\nstruct S {\n    T x;\n};\n\n} // namespace grid\n"


@pytest.mark.parametrize("x, text", [(1.0, "1.0"), (-0.25, "-0.25"), (1e-5, "1e-05"), (-0.0, "0.0"),
                                     (0.1 + 0.2, "0.30000000000000004"), (3, "3.0")])
def test_numbers_round_trip(x, text):
    assert fnum(x) == text
    assert float(fnum(x)) == float(x)


def test_non_finite_constant_is_refused():
    with pytest.raises(ValueError):
        fnum(float("nan"))


def test_per_warp_loop_runs_one_item_per_warp():
    out = render(n.BlockStrideLoop("k", 3, [n.Stmt("f(k)")], per_warp=True))
    assert out == (
        "for (int k = GRID_TID / 32; k < 3; k += (GRID_BLOCK_THREADS + 31) / 32) {\n"
        "    if (GRID_TID % 32 == 0) {\n"
        "        f(k);\n"
        "    }\n"
        "}\n"
    )


def test_statement_comment_follows_the_semicolon():
    assert render(n.Stmt("int x = 0", comment="a counter")) == "int x = 0;  // a counter\n"
    with pytest.raises(ValueError, match="comment="):
        n.Stmt("int x = 0;  // a counter")
