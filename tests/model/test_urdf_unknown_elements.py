"""An element GRiD would silently ignore inside a <joint>, <link> or <inertial> (a typo such as
<axsi>, which leaves the axis at x) warns with the element and its line; strict loading makes
it an error.  Simulator extensions published robots carry (<contact>, a <transmission>'s
<joint>) stay silent, as urdfdom and Pinocchio ignore them."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import grid_core
from grid_core.cli import main
from grid_core.errors import RobotModelError, UrdfWarning

URDF = Path(__file__).resolve().parent.parent / "data" / "sloppy" / "misspelt_axis.urdf"
AXSI = (f"{URDF}: <joint name='j1'> <axsi> (line 13): unknown element <axsi> in <joint>, ignored (did you mean "
        "<axis>? known: origin, parent, child, axis, limit, dynamics, mimic, safety_controller, calibration; "
        "strict loading makes it an error)")


def test_misspelt_elements_warn_with_element_and_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        robot = grid_core.load_robot(URDF)
    assert [w.category for w in caught] == [UrdfWarning, UrdfWarning]
    inertai, axsi = (str(w.message) for w in caught)
    assert axsi == AXSI
    assert "<inertai> (line 7): unknown element <inertai> in <inertial>, ignored (did you mean <inertia>?" in inertai
    assert robot.bodies[0].axis.tolist() == [1.0, 0.0, 0.0]  # what the typo did: the default axis


def test_strict_makes_the_first_one_an_error():
    with pytest.raises(RobotModelError) as info:
        grid_core.load_robot(URDF, strict=True)
    assert "<inertai> (line 7)" in str(info.value) and str(info.value).endswith("(strict)")


def test_cli_one_summary_line_and_strict_exit_1():
    runner = CliRunner()
    ok = runner.invoke(main, ["info", str(URDF)])
    assert ok.exit_code == 0
    assert ok.stderr.splitlines() == [
        f"grid: warning: {URDF}: 2 warnings: unknown URDF elements: 2 (<inertai> in arm, <axsi> in j1) "
        "(-v lists them)"
    ]
    strict = runner.invoke(main, ["info", str(URDF), "--strict"])
    assert strict.exit_code == 1 and strict.stdout == ""
    lines = strict.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("grid: error: ") and "<inertai> (line 7)" in lines[0]


@pytest.mark.parametrize("name", ["erd:tiago_pro", "erd:talos_reduced", "erd:ur5_robot", "erd:pr2", "iiwa14", "g1"])
def test_published_robots_load_without_unknown_element_warnings(name):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grid_core.load_robot(name)
    assert not [w for w in caught if issubclass(w.category, UrdfWarning)]
