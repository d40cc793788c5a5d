"""The second-order algorithms and the integrators: each its own plugin, each with its
parallelism review (the GPU emitter of fdsva_so does not exist yet: the review states the plan)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from grid_core import algorithms, registry
from grid_core.cli import main
from grid_core.review import PATTERNS, Verdict

SECOND_ORDER = (
    "idsva_so",
    "fdsva_so",
    "end_effector_pose_hessian",
    "integrator",
    "integrator_gradient",
)
EMITTED = ("end_effector_pose_hessian", "idsva_so", "integrator", "integrator_gradient")
NOT_EMITTED = tuple(name for name in SECOND_ORDER if name not in EMITTED)


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_registered_by_its_own_entry_point(name):
    reg = registry()
    assert name in algorithms()
    assert reg.origin[f"algorithm:{name}"] == name
    assert reg.info_of("algorithm", name).module == f"grid_algorithms.{name}"


@pytest.mark.parametrize("name", NOT_EMITTED)
def test_grid_review_prints_the_plan(name):
    result = CliRunner().invoke(main, ["review", name])
    assert result.exit_code == 0, result.output
    alg = algorithms()[name]
    assert not alg.has_emitter()
    assert "not yet emitted" in result.output
    for key, title in PATTERNS.items():
        verdict = getattr(alg.review, key)
        assert verdict.verdict is not Verdict.DONE  # nothing is emitted yet
        assert f"{key} {title}: {verdict.verdict.value}" in result.output
        assert verdict.reason in result.output


@pytest.mark.parametrize("name", ["integrator", "integrator_gradient"])
def test_the_integrators_are_emitted_and_their_reviews_printed(name):
    alg = algorithms()[name]
    result = CliRunner().invoke(main, ["review", alg.name])
    assert result.exit_code == 0, result.output
    assert alg.has_emitter() and "not yet emitted" not in result.output
    assert "layouts: block-cooperative" in result.output and f"{name.upper()}_PER_STATE_MIN_N" in result.output
    for key, title in PATTERNS.items():
        verdict = getattr(alg.review, key)
        assert f"{key} {title}: {verdict.verdict.value}" in result.output
        assert verdict.reason in result.output


def test_the_pose_hessian_is_emitted_and_its_review_done():
    alg = algorithms()["end_effector_pose_hessian"]
    result = CliRunner().invoke(main, ["review", alg.name])
    assert result.exit_code == 0, result.output
    assert alg.has_emitter() and "not yet emitted" not in result.output
    assert all(getattr(alg.review, key).verdict is Verdict.DONE for key in PATTERNS)


def test_idsva_so_is_emitted_and_its_review_says_what_is_left():
    alg = algorithms()["idsva_so"]
    result = CliRunner().invoke(main, ["review", alg.name])
    assert result.exit_code == 0, result.output
    assert alg.has_emitter() and "not yet emitted" not in result.output
    assert alg.review.P1.verdict is Verdict.DONE and alg.review.P3.verdict is Verdict.DONE
    assert "(i, j, k)" in alg.review.P2.reason  # the chain cells over threads: not yet


@pytest.mark.parametrize("name", ["idsva_so", "fdsva_so"])
def test_p2_is_the_planned_lever_of_the_per_cell_tensors(name):
    review = algorithms()[name].review
    assert review.P2.verdict is Verdict.TODO
    assert "dominant lever" in review.P2.reason
