"""Sloppy-but-real data loads with a warning naming the link; strict_inertia makes it an error.

DESIGN §6: zero-mass intermediate links and inertias violating the triangle
inequality are what published robots carry and what Pinocchio accepts, so they
load with an :class:`InertiaWarning`; ``strict_inertia=True`` (``--strict-inertia``)
turns each into a :class:`RobotModelError` with the same text.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import grid_core
from grid_core.cli import main
from grid_core.errors import InertiaWarning, RobotModelError

SLOPPY = Path(__file__).resolve().parent.parent / "data" / "sloppy"

# file -> (the link every warning names, what is wrong with it)
SYNTHETIC = {
    "zero_mass_intermediate.urdf": ("elbow_virtual", r"\(body of joint 'shoulder'\) has zero mass"),
    "triangle_violation.urdf": ("wrist", r"principal moments 0\.01, 0\.01, 0\.05 violate the triangle inequality"),
}

# real robots: source -> (floating_base, the links their warnings name)
REAL = {
    "erd:romeo_small": (True, {"RShoulderYawLink", "RElbowYawLink"}),  # triangle inequality
    "atlas": (None, {"l_lglut", "utorso", "l_foot", "r_foot"}),  # triangle + known negative eigenvalues
}
# erd:romeo: its finger phalanges are zero-mass links, these between two revolute joints
ROMEO_ZERO_MASS = {
    "LFinger21Link", "LFinger22Link", "LFinger31Link", "LFinger32Link", "LThumb1Link", "LThumb2Link",
    "RFinger21Link", "RFinger22Link", "RFinger31Link", "RFinger32Link", "RThumb1Link", "RThumb2Link",
}


def load_warned(source, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        robot = grid_core.load_robot(source, **kw)
    return robot, caught


def warned_links(caught) -> list[str]:
    return [re.search(r"link '([^']+)'", str(w.message)).group(1) for w in caught]


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_loads_with_one_warning_naming_the_link(name):
    link, what = SYNTHETIC[name]
    path = SLOPPY / name
    robot, caught = load_warned(str(path))
    assert [w.category for w in caught] == [InertiaWarning]
    message = str(caught[0].message)
    assert message.startswith(f"{path}: link '{link}'")
    assert re.search(what, message), message
    # it loaded, and as Pinocchio loads it (which accepts the file as it is)
    import pinocchio as pin

    model = pin.buildModelFromUrdf(str(path))
    assert robot.nv == model.nv and robot.nv >= 1
    assert [b.joint.name for b in robot.bodies] == list(model.names)[1:]


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_strict_inertia_is_an_error(name):
    link, what = SYNTHETIC[name]
    path = SLOPPY / name
    _, caught = load_warned(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict raises: it must not warn first
        with pytest.raises(RobotModelError) as info:
            grid_core.load_robot(str(path), strict_inertia=True)
    assert str(info.value) == f"{caught[0].message} (strict_inertia)"
    assert f"link '{link}'" in str(info.value)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_cli_warns_and_strict_fails(name, tmp_path):
    link, what = SYNTHETIC[name]
    path = SLOPPY / name
    runner = CliRunner()
    ok = runner.invoke(main, ["info", str(path)])
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.startswith(f"robot: {path.stem}")
    warning_lines = ok.stderr.splitlines()
    assert len(warning_lines) == 1
    assert warning_lines[0].startswith(f"grid: warning: {path}: link '{link}'")
    out = tmp_path / "grid.cuh"
    strict = runner.invoke(main, ["build", str(path), "--strict-inertia", "-o", str(out)])
    assert strict.exit_code == 1 and isinstance(strict.exception, SystemExit)
    lines = strict.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in strict.output
    assert lines[0].startswith(f"grid: error: {path}: link '{link}'")
    assert re.search(what + r".* \(strict_inertia\)$", lines[0])
    assert not out.exists()


@pytest.mark.parametrize("source", sorted(REAL))
def test_real_robot_loads_with_warnings_naming_its_links(source):
    floating, links = REAL[source]
    robot, caught = load_warned(source, floating_base=floating)
    assert robot.nv > 20
    assert {w.category for w in caught} == {InertiaWarning}
    assert set(warned_links(caught)) == links


@pytest.mark.parametrize("source", sorted(REAL))
def test_real_robot_strict_inertia_is_an_error(source):
    floating, links = REAL[source]
    _, caught = load_warned(source, floating_base=floating)
    with pytest.raises(RobotModelError) as info:
        grid_core.load_robot(source, floating_base=floating, strict_inertia=True)
    # the first doubtful link, word for word
    assert str(info.value) == f"{caught[0].message} (strict_inertia)"
    assert re.search(r"link '([^']+)'", str(info.value)).group(1) in links


def test_romeo_zero_mass_intermediate_links_warn_and_strict_fails():
    robot, caught = load_warned("erd:romeo", floating_base=True)
    assert {w.category for w in caught} == {InertiaWarning}
    assert all("has zero mass" in str(w.message) for w in caught)
    assert ROMEO_ZERO_MASS <= set(warned_links(caught))
    # intermediate: every such body has a child body (the next finger phalanx)
    zero = {b.index for b in robot.bodies if b.name in ROMEO_ZERO_MASS}
    assert zero and all(any(c.parent == i for c in robot.bodies) for i in zero)
    with pytest.raises(RobotModelError) as info:
        grid_core.load_robot("erd:romeo", floating_base=True, strict_inertia=True)
    assert str(info.value) == f"{caught[0].message} (strict_inertia)"


def test_atlas_cli_warns_and_strict_fails():
    runner = CliRunner()
    ok = runner.invoke(main, ["info", "atlas"])
    assert ok.exit_code == 0
    # one summary line: count, topics, first links; -v adds every warning, one a line
    assert ok.stderr.splitlines() == [
        "grid: warning: atlas: 4 warnings: triangle inequality: 1 (l_lglut); negative inertia eigenvalue: 3 "
        "(utorso, l_foot, r_foot) (-v lists them)"
    ]
    verbose = runner.invoke(main, ["-v", "info", "atlas"])
    lines = verbose.stderr.splitlines()
    assert len(lines) == 5 and lines[0].endswith("(utorso, l_foot, r_foot)")
    assert all(line.startswith("grid: warning:   bundled:atlas: link '") for line in lines[1:])
    assert {re.search(r"link '([^']+)'", line).group(1) for line in lines[1:]} == REAL["atlas"][1]
    quiet = runner.invoke(main, ["-q", "info", "atlas"])
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == ok.stdout
    strict = runner.invoke(main, ["info", "atlas", "--strict-inertia"])
    assert strict.exit_code == 1 and isinstance(strict.exception, SystemExit)
    assert strict.stdout == ""
    assert strict.stderr.splitlines() == [
        "grid: error: bundled:atlas: link 'l_lglut': principal moments 0.000242697, 0.00121984, "
        "0.00155746 violate the triangle inequality (strict_inertia)"
    ]


def test_romeo_cli_summarises_24_warnings_in_one_line():
    result = CliRunner().invoke(main, ["info", "erd:romeo"])
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "grid: warning: erd:romeo: 24 warnings: zero mass: 24 (LFinger21Link, LFinger22Link, LFinger23Link, ...) "
        "(-v lists them)"
    ]
    assert len(CliRunner().invoke(main, ["-v", "info", "erd:romeo"]).stderr.splitlines()) == 25


def test_tiago_negligible_negative_eigenvalue_loads_with_a_warning_as_pinocchio_loads_it():
    """tiago's antennas (1e-6 kg) carry placeholder inertias with an eigenvalue of -3.5e-8 kg m^2:
    negligible against the robot's largest principal moment, so a warning, not an error."""
    import pinocchio as pin

    robot, caught = load_warned("erd:tiago")
    assert {w.category for w in caught} == {InertiaWarning}
    assert set(warned_links(caught)) == {"base_antenna_left_link", "base_antenna_right_link"}
    message = str(caught[0].message)
    assert re.search(r"negative eigenvalue -3\.53\d*e-08 .*negligible at the robot's scale", message), message
    from grid_plugins.erd import resolve

    model = pin.buildModelFromUrdf(str(resolve("tiago")))
    assert robot.nv == model.nv
    with pytest.raises(RobotModelError, match="base_antenna_left_link"):
        grid_core.load_robot("erd:tiago", strict_inertia=True)


def test_a_negative_eigenvalue_that_matters_is_still_an_error():
    """The same eigenvalue on a robot whose largest moment is of its own size is an error."""
    urdf = (SLOPPY.parent / "hostile" / "negative_eigenvalue_inertia.urdf")
    with pytest.raises(RobotModelError, match=r"link 'a': inertia has a negative eigenvalue -0\.4 "):
        grid_core.load_robot(str(urdf))
