"""The second-order algorithms and the integrators: each its own plugin, each with its
parallelism review, each emitted."""

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


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_registered_by_its_own_entry_point(name):
    reg = registry()
    assert name in algorithms()
    assert reg.origin[f"algorithm:{name}"] == name
    assert reg.info_of("algorithm", name).module == f"grid_algorithms.{name}"


@pytest.mark.parametrize("name", ["integrator", "integrator_gradient", "fdsva_so"])
def test_the_integrators_and_fdsva_so_are_emitted_and_their_reviews_printed(name):
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


def test_p2_is_idsva_so_s_planned_lever():
    review = algorithms()["idsva_so"].review
    assert review.P2.verdict is Verdict.TODO
    assert "dominant lever" in review.P2.reason


def test_fdsva_so_fans_its_contraction_over_the_block():
    """fdsva_so's P2 (the cells of its right-hand sides and its register-tiled contraction) is
    done; what is left is said under P3 and P4."""
    review = algorithms()["fdsva_so"].review
    assert review.P2.verdict is Verdict.DONE and "register-tiled" in review.P2.reason
    assert review.P3.verdict is Verdict.TODO and review.P4.verdict is Verdict.TODO
