"""Typed storage (grid_core.emit.storage): fields laid out in key order, bound arrays that fold
known entries and read undeclared keys as exact zeros, and the layer generator's binding of a
composed algorithm's fields to the arena plan's parts."""

from __future__ import annotations

import pytest

from conftest import load
from grid_core.composer import Composer, GenerateOptions
from grid_core.emit.expr import Scope
from grid_core.emit.storage import (Array, Field, Symmetric, Vector, local_declaration, put_symmetric, region, regions,
                                    vector)
from grid_core.errors import CodegenError


def test_field_offsets_and_region():
    f = Field("U", [(2, 0), (0, 1), (5, 0)], 3)
    assert [f.offset(k) for k in f.keys] == [0, 3, 6] and f.size == 9
    with pytest.raises(CodegenError, match="holds no entry"):
        f.offset((1, 1))
    r = region("grp", [f, Field("D", range(2), 1)])
    assert r.parts == (("U", 9), ("D", 2)) and r.elements == 12 + 4  # each part padded to 4


def test_field_of_per_key_widths():
    w = {0: 1, 3: 6, 4: 2}
    f = Field("u", [0, 3, 4], w.__getitem__)
    assert [f.offset(k) for k in f.keys] == [0, 1, 7] and f.size == 9 and f.width_of(3) == 6
    arr = Array(f, "u")
    arr.put(Scope("t"), 4, [0.5, 2.0])
    assert arr.get(4) == [0.5, 2.0] and arr.get(3)[5] == "u[6]"
    assert Array(Field("u", [0, 3], lambda key: 2), "u").get(7) == [0.0, 0.0]  # not held: its width of zeros


def test_array_index_by_expression_and_first():
    P = Array(Field("P", [(1, k) for k in range(6)], 4), "s_P")
    assert P((1, 2), 5, first=3) == "s_P[10]"
    assert P((1, 2), "j", first=3) == "s_P[j + 5]"
    assert P((1, 0), "j", first=3) == "s_P[j - 3]" and P((1, 0), "j") == "s_P[j]"


def test_vector_fields_index_rows_and_columns():
    M = Array(vector("inv_M", 12, "a 3 x 4 matrix", cols=4), "s_inv_M")
    assert M.at(2, 3) == "s_inv_M[11]" and M.at("r", "m") == "s_inv_M[r * 4 + m]"
    assert M.at(1, "c") == "s_inv_M[c + 4]" and M.at("k") == "s_inv_M[k]" and M.at(5) == "s_inv_M[5]"
    r = regions([M.field, vector("bias", 3, "bias forces")])
    assert [(x.name, x.elements, x.doc, x.parts) for x in r] == [("inv_M", 12, "a 3 x 4 matrix", ()),
                                                                  ("bias", 3, "bias forces", ())]


def test_port_vectors_index_row_major_and_symmetric_entries_are_written_once_with_their_mirror():
    M = Vector("s_Minv", 3)
    assert M(4) == "s_Minv[4]" and M.at(1, 2) == "s_Minv[5]" and M.at("r", 0) == "s_Minv[r * 3]"
    assert M.at(2, "j") == "s_Minv[j + 6]" and M.at("r", "c") == "s_Minv[r * 3 + c]"
    scope = Scope("t")
    put_symmetric(scope, M.at, 1, 1, 2.0)
    put_symmetric(scope, M.at, 0, "j", 3.0)
    assert [s.text for s in scope.stmts] == ["s_Minv[4] = T(2.0)", "s_Minv[j] = T(3.0)", "s_Minv[j * 3] = T(3.0)"]


def test_symmetric_reads_either_triangle_and_writes_the_entries_never_put_as_zeros():
    M = Vector("M", 3)
    scope = Scope("t")
    out = Symmetric(3, M.at)
    out.put(scope, 0, 0, "a")
    out.put(scope, 2, 1, "b")  # the lower triangle: recorded as (1, 2)
    assert out(1, 2) == out(2, 1) == "b" and out(0, 2) == 0.0
    out.zeros(scope)
    assert [s.text for s in scope.stmts] == [
        "M[0] = a", "M[7] = b", "M[5] = b",  # (0, 0); (2, 1) and its mirror
        *[f"M[{i}] = T(0.0)" for i in (1, 3, 2, 6, 4, 8)]]  # never put: (0, 1), (0, 2), (1, 1), (2, 2)
    recorded = Symmetric(2)  # no C++ expression: the entries recorded only
    recorded.put(scope, 0, 1, "c")
    assert recorded(1, 0) == "c" and len(scope.stmts) == 9


def test_array_folds_known_entries_and_zero_keys():
    arr = Array(Field("v", [0, 2], 3), "s_v")
    scope = Scope("t")
    arr.put(scope, 2, [1.5, "x", 0.0])
    assert [s.text for s in scope.stmts] == ["s_v[4] = x"]
    assert arr.get(2) == [1.5, "s_v[4]", 0.0]
    assert arr.get(1) == [0.0, 0.0, 0.0]  # a key the field does not hold
    assert arr.get(0, 1) == "s_v[1]"
    assert local_declaration([arr], ["XI[XI_SIZE]"]).text == "T XI[XI_SIZE], s_v[6]"


def test_table_driven_reads_take_offsets_from_the_field_and_see_its_folded_constants():
    """A loop over entries reads them at offsets from the declaration (a baked table), and the
    constants put() folded are stored for it (store_known), while get() still folds them."""
    from grid_core.emit.printer import render
    from grid_core.emit.storage import index_table

    field = Field("J", [(0, 0), (1, 0), (1, 1)], 6)
    assert field.offsets([(1, 1), (0, 0)]) == [12, 0]
    arr = Array(field, "s_J")
    scope = Scope("t")
    arr.put(scope, (0, 0), [0.0, 0.0, 1.0, "a", 0.0, 0.0])
    arr.put(scope, (1, 1), ["b", 2.0, 0.0, 0.0, 0.0, 0.0])
    assert [s.text for s in scope.stmts] == ["s_J[3] = a", "s_J[12] = b"]
    stored = Scope("t")
    arr.store_known(stored)
    assert [s.text for s in stored.stmts] == [
        "s_J[0] = T(0.0)", "s_J[1] = T(0.0)", "s_J[2] = T(1.0)", "s_J[4] = T(0.0)", "s_J[5] = T(0.0)",
        "s_J[13] = T(2.0)", "s_J[14] = T(0.0)", "s_J[15] = T(0.0)", "s_J[16] = T(0.0)", "s_J[17] = T(0.0)"]
    assert arr.get((0, 0), 2) == 1.0  # still folded where read by key
    assert arr.indexed("cj", 4) == "s_J[cj + 4]" and arr.indexed("cj") == "s_J[cj]"
    text = render([index_table("X_COL", field.offsets(field.keys), "each column's offset")])
    assert "static __device__ const int X_COL[3] = {0, 6, 12};" in text and "// each column's offset" in text


def test_layers_bind_fields_to_the_plan():
    layers = Composer(load("iiwa14"), GenerateOptions()).layers("inverse_dynamics")
    fields = layers.emitter.fields(layers)
    arrays = layers.arrays(fields)
    assert arrays["f"](3, 2) == "s_f[20]"
    assert layers.arrays(fields, local=True)["a"](1, 0) == "a[6]"
    with pytest.raises(CodegenError, match="no arena region or part .w. of 18 scalars"):
        layers.arrays([Field("w", range(3), 6)])
    with pytest.raises(CodegenError, match="no arena region or part .v. of 6 scalars"):
        layers.arrays([Field("v", range(1), 6)])  # the plan's v is 6 per body


def test_accumulate_assigns_an_entry_first_and_adds_after():
    from grid_core.emit.printer import render

    acc = Array(Field("IC", range(2), 2), "s_IC")
    scope = Scope("t")
    acc.accumulate(scope, 1, [["x", "y"]], first=[1.0, 0.0])
    acc.accumulate(scope, 1, [["z", 0.0], ["w", 0.0]])
    assert acc.started == {1}
    assert render(scope.body()) == "s_IC[2] = x + T(1.0);\ns_IC[3] = y;\ns_IC[2] += w + z;\n"
