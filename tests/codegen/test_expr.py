"""The constant-folding expression layer: exact algebra, zeros dropped, temporaries pruned."""

from __future__ import annotations

from grid_core.emit import nodes as n
from grid_core.emit.expr import Poly, Scope, clean, cross, render, sum_terms


def test_zero_and_unit_factors_fold():
    assert sum_terms([(0.0, "a"), (1.0, "b")]) == "b"
    assert sum_terms([(2.0, 3.0)]) == 6.0
    assert render(sum_terms([(-1.0, "a"), (0.5, "b", "c")])) == "-a + T(0.5)*b*c"


def test_like_terms_combine_and_cancel():
    assert sum_terms([("a",), ("a",), (-2.0, "a")]) == 0.0
    assert render(sum_terms([("a", "b"), ("b", "a")])) == "T(2.0)*a*b"


def test_products_of_sums_expand_exactly():
    p = sum_terms([(Poly.of("a") + Poly.of("b"), Poly.of("a") + Poly({("b",): -1.0}))])
    assert render(p) == "a*a - b*b"


def test_cross_product_of_sparse_vectors():
    assert cross([0.0, 0.0, 1.0], ["x", "y", "z"]) == [sum_terms([(-1.0, "y")]), "x", 0.0]


def test_clean_snaps_rounding_noise_only():
    assert clean(6e-17) == 0.0 and clean(1 - 1e-15) == 1.0 and clean(3.5e-9) == 3.5e-9


def test_scope_prunes_unused_temporaries():
    s = Scope("t")
    a = s.let(sum_terms([("x", "y")]))
    s.let(sum_terms([("x", "z")]))  # never used
    s.assign("out", sum_terms([(2.0, a)]))
    texts = [st.text for st in s.body() if isinstance(st, n.Stmt)]
    assert texts == ["const T t1 = x*y", "out = T(2.0)*t1"]
