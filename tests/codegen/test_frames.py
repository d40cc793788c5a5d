"""Frames chosen at generation time: ``generate(..., frames=[...])``, ``grid build --frame``, part
of the header's identity; an unknown name is the InputError of resolve_frames."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from conftest import load
from grid_core.cli import main
from grid_core.composer import GenerateOptions, generate
from grid_core.errors import InputError


def test_frames_are_part_of_the_options_identity():
    assert GenerateOptions(frames="iiwa_link_7").frames == ("iiwa_link_7",)
    assert GenerateOptions(frames=["a", "b"]).key()["frames"] == ("a", "b")
    assert GenerateOptions().key()["frames"] is None
    assert GenerateOptions(frames=["a"]) != GenerateOptions(frames=["b"])


def test_unknown_frame_is_the_input_error_of_resolve_frames():
    with pytest.raises(InputError, match="robot 'iiwa14' has no frame 'nope'"):
        generate(load("iiwa14"), ["inverse_dynamics"], frames=["nope"])


def test_cli_build_frame_unknown_is_one_error_line():
    result = CliRunner().invoke(main, ["build", "iiwa14", "-a", "inverse_dynamics", "--frame", "nope"],
                                prog_name="grid")
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("grid: error: ") and "has no frame 'nope'" in lines[0]


def test_cli_build_frames_give_the_header_of_generate():
    args = ["build", "iiwa14", "-a", "end_effector_pose", "--frame", "iiwa_link_7", "--frame", "iiwa_joint_4"]
    result = CliRunner().invoke(main, args, prog_name="grid")
    assert result.exit_code == 0, result.output
    assert result.stdout == generate(load("iiwa14"), ["end_effector_pose"], frames=["iiwa_link_7", "iiwa_joint_4"])
    assert "static constexpr int FRAME_BODY[2] = {6, 3};" in result.stdout
