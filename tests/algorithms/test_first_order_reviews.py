"""The first-order algorithms: each its own plugin, each with its parallelism review."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from grid_core import algorithms, registry
from grid_core.cli import main
from grid_core.emit.emitter import Emitter
from grid_core.review import PATTERNS

FIRST_ORDER = (
    "crba",
    "minv",
    "aba",
    "forward_dynamics",
    "inverse_dynamics_gradient",
    "forward_dynamics_gradient",
    "forward_kinematics",
    "end_effector_pose",
    "end_effector_pose_gradient",
    "frame_jacobian_time_variation",
    "operational_space_inertia",
)


@pytest.mark.parametrize("name", FIRST_ORDER)
def test_registered_by_its_own_entry_point(name):
    reg = registry()
    assert name in algorithms()
    assert reg.origin[f"algorithm:{name}"] == name
    assert reg.info_of("algorithm", name).module == f"grid_algorithms.{name}"


@pytest.mark.parametrize("name", FIRST_ORDER)
def test_grid_review_prints_the_plan(name):
    result = CliRunner().invoke(main, ["review", name])
    assert result.exit_code == 0, result.output
    alg = algorithms()[name]
    assert result.output.startswith(f"{name} (")
    assert ("not yet emitted" in result.output) == (not alg.has_emitter())
    # the layouts line is written from the emitter's declarations, not from the module's notes
    assert ("layouts: block-cooperative" in result.output) == alg.has_emitter()
    if alg.has_emitter() and alg.emitter.state_body is not Emitter.state_body:
        assert f"{name.upper()}_PER_STATE_MIN_N" in result.output
    for key, title in PATTERNS.items():
        verdict = getattr(alg.review, key)
        assert f"{key} {title}: {verdict.verdict.value}" in result.output
        assert verdict.reason in result.output
