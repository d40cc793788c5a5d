"""The GPU library's translation units (grid_core.abi.abi_units): each algorithm's entries in a
unit of their own per precision, the library's own entries in another, the same code as the
one-unit ABI."""

from __future__ import annotations

import re

from conftest import load
from grid_core.abi import abi_source, abi_units
from grid_core.composer import resolve_algorithms

ENTRY = re.compile(r"^(?:int|void|const char|const void) \*?(grid_\w+)\(", re.M)


def entries(text: str) -> list[str]:
    return ENTRY.findall(text)


def definitions(text: str) -> dict[str, str]:
    """Each entry's definition, from its first line to the blank line after it."""
    return {m.group(1): text[m.start():text.index("\n\n", m.start())] for m in ENTRY.finditer(text)}


def test_each_algorithm_is_a_unit_of_its_own_with_the_one_unit_code():
    robot = load("iiwa14")
    algorithms = ["forward_dynamics_gradient", "minv"]
    units = abi_units(robot, algorithms, "grid.cuh")
    resolved = [a.name for a in resolve_algorithms(algorithms)]
    assert "forward_dynamics" in resolved and "inverse_dynamics_gradient" in resolved  # composed ones come along
    assert list(units) == ["abi.cu", *(f"abi_{a}_{dt}.cu" for a in resolved for dt in ("f32", "f64"))]
    library = entries(units["abi.cu"])
    assert {"grid_abi_info", "grid_abi_set_poison", "grid_host_pool_adopt"} <= set(library)
    assert not [e for e in library if any(e.startswith(f"grid_abi_{a}_") for a in resolved)]
    for alg in resolved:
        for dt, T in (("f32", "float"), ("f64", "double")):
            unit = units[f"abi_{alg}_{dt}.cu"]
            assert entries(unit) == [f"grid_abi_{alg}_{dt}{form}" for form in ("", "_host", "_packed", "_host_packed")]
            # the only launcher the unit instantiates is its algorithm's, in its precision only
            assert set(re.findall(r"grid::(\w+)_launch\w*<", unit)) == {alg}
            assert set(re.findall(r"grid::\w+_launch\w*<(\w+)", unit)) == {T}
    single = abi_source(robot, algorithms, "grid.cuh")
    assert sorted(entries(single)) == sorted(e for text in units.values() for e in entries(text))
    # every entry's code is the one-unit ABI's, character for character
    split = {name: code for text in units.values() for name, code in definitions(text).items()}
    assert split == definitions(single)
