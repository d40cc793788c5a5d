"""The ``grid`` command line: help, list, info, build, review, and its errors (DESIGN §6:
a user mistake is one ``grid: error:`` line and exit 1; a usage error exits 2)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import grid_core
from conftest import load
from grid_core.cli import main

BUILTIN = "grid-rbd 0.1.0"


def grid(*args, env=None):
    return CliRunner().invoke(main, list(args), prog_name="grid", env=env)


def grid_script() -> list[str]:
    here = Path(sys.executable).with_name("grid")
    if here.exists():
        return [str(here)]
    found = shutil.which("grid")
    assert found, "the 'grid' console script is not installed"
    return [found]


def one_error_line(result) -> str:
    """The single ``grid: error:`` line of a run that failed on purpose (exit 1)."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # handled, not escaped
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("grid: error: ")
    assert "Traceback" not in result.output
    return lines[0]


# -- help and version ----------------------------------------------------------------------

def test_group_help():
    result = grid("--help")
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: grid [OPTIONS] COMMAND [ARGS]...")
    for command in main.commands:
        assert re.search(rf"^  {command}\b", result.stdout, re.M), command
    assert "--disable-plugin NAME" in result.stdout


@pytest.mark.parametrize("command", sorted(main.commands))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_subcommand_help(command, flag):
    result = grid(command, flag)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Usage: grid {command} [OPTIONS]")
    assert main.commands[command].help.split("\n")[0].strip()[:40] in " ".join(result.stdout.split())


def test_version():
    result = grid("--version")
    assert result.exit_code == 0
    assert result.stdout == f"grid, version {grid_core.__version__}\n"


# -- list ----------------------------------------------------------------------------------

def test_list_names_builtin_loaders_and_algorithms_with_their_distribution():
    result = grid("list")
    assert result.exit_code == 0, result.output
    algorithms, loaders = result.stdout.split("robot loaders:\n")
    assert algorithms.startswith("algorithms:\n")
    for name in ("urdf", "bundled", "erd"):
        assert re.search(rf"^  {name} +{BUILTIN}  \S", loaders, re.M), name
    reg = grid_core.registry()
    ours = [n for n in reg.algorithms if reg.info_of("algorithm", n).distribution == "grid-rbd"]
    assert "inverse_dynamics" in ours
    for name in ours:
        assert re.search(rf"^  {name} +{BUILTIN}  \S", algorithms, re.M), name
    # every algorithm line is one of the registered ones, nothing invented
    listed = [line.split()[0] for line in algorithms.splitlines()[1:]]
    assert listed == list(reg.algorithms)


def test_list_shows_the_kinematics_generated():
    result = grid("list")
    assert result.exit_code == 0, result.output
    algorithms = result.stdout.split("robot loaders:\n")[0].splitlines()
    table = result.stdout.split("RobotHandle: on the GPU):\n")[1]
    for name in ("forward_kinematics", "end_effector_pose", "end_effector_pose_gradient", "end_effector_pose_hessian",
                 "frame_jacobian_time_variation", "operational_space_inertia"):
        line = next(x for x in algorithms if x.split()[:1] == [name])
        assert "[reference only]" not in line, line
        assert re.search(rf"^  {name} +yes +yes +yes +yes$", table, re.M), name


# -- info ----------------------------------------------------------------------------------

def test_info_hyq():
    result = grid("info", "hyq")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "base: fixed" in out
    assert "nq: 12  nv: 12  bodies: 12" in out
    assert "depth: 3 levels; bodies per BFS level: [4, 4, 4]" in out
    assert "branch groups (4):" in out
    branches = re.findall(r"^  \d: (.+)$", out, re.M)
    assert len(branches) == 4 and all(len(b.split(" -> ")) == 3 for b in branches)
    assert {b.split(" -> ")[0][:2] for b in branches} == {"lf", "lh", "rf", "rh"}


def test_info_g1_floating():
    result = grid("info", "g1")
    assert result.exit_code == 0, result.output
    assert "base: floating (free-flyer root_joint)" in result.stdout
    assert "nq: 36  nv: 35" in result.stdout


def test_info_go2_fixed_base():
    result = grid("info", "go2", "--fixed-base")
    assert result.exit_code == 0, result.output
    assert "base: fixed" in result.stdout
    assert "nq: 12  nv: 12  bodies: 12" in result.stdout
    floating = grid("info", "go2")
    assert "nq: 19  nv: 18" in floating.stdout  # its natural base floats


def test_info_lists_the_frames_and_the_default_ones():
    result = grid("info", "go2")
    assert result.exit_code == 0, result.output
    out = result.stdout
    # go2's feet are fixed-joint links merged into the calves: the default frames all the same
    assert "default frames (4, the leaf frames, used without 'frames'): FL_foot, FR_foot, RL_foot, " \
        "RR_foot\n" in out
    assert "frames (62: 13 joints, 31 links, 18 fixed joints; * a default one), each with the body it rides on:" in out
    rows = re.findall(r"^ +(\d+) ([* ]) (\S+) +(joint|link|fixed joint) +on (\S+)$", out, re.M)
    robot = load("go2")
    assert [(int(k), name, kind) for k, _, name, kind, _ in rows] == \
        [(k, f.name, f.kind.replace("_", " ")) for k, f in enumerate(robot.frames)]
    assert {name for _, mark, name, _, _ in rows if mark == "*"} == {"FL_foot", "FR_foot", "RL_foot", "RR_foot"}
    on = {name: body for _, _, name, _, body in rows}
    assert on["FL_foot"] == on["FL_foot_joint"] == "FL_calf"  # merged into the calf body
    assert on["FL_hip_rotor"] == on["imu"] == on["root_joint"] == "base"


def test_info_frames_stay_readable_on_pr2():
    """163 frames: one aligned line each, none wider than 110 characters; the 16 default ones
    wrapped over lines of at most 100."""
    out = grid("info", "erd:pr2").stdout
    section = out[out.index("default frames (16,"):]
    head, frames = section.split("\nframes (163: 30 joints, 82 links, 51 fixed joints;", 1)
    assert all(len(line) <= 100 for line in head.splitlines())
    assert "r_gripper_r_parallel_link" in head and "base_laser_link" not in head  # a sensor on the base
    rows = frames.splitlines()[1:]
    assert len(rows) == 163 and all(len(line) <= 110 for line in rows)
    assert len({line.index(" on ") for line in rows}) == 1  # one column
    assert re.search(r"^ +0   base_footprint +link +on world$", frames, re.M)  # the fixed base


# -- build ---------------------------------------------------------------------------------

def test_build_writes_the_header_and_one_status_line(tmp_path):
    out = tmp_path / "grid.cuh"
    result = grid("build", "iiwa14", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    (status,) = result.stderr.splitlines()
    assert re.fullmatch(rf"grid: wrote {re.escape(str(out))} \(\d+\.\d kB, robot iiwa14\) in \d+\.\d\d s", status)
    text = out.read_text()
    assert re.search(r"\bNUM_JOINTS = 7\b", text)
    kb = float(re.search(r"\((\d+\.\d) kB", status).group(1))
    assert abs(kb - len(text.encode()) / 1024) <= 0.05


def test_build_is_byte_identical_and_stdout_matches(tmp_path):
    a, b = tmp_path / "a.cuh", tmp_path / "b.cuh"
    assert grid("build", "iiwa14", "-o", str(a)).exit_code == 0
    assert grid("build", "iiwa14", "-o", str(b)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    to_stdout = grid("build", "iiwa14")
    assert to_stdout.exit_code == 0
    assert to_stdout.stdout == a.read_text()
    assert re.fullmatch(r"grid: generated iiwa14 in \d+\.\d\d s\n", to_stdout.stderr)


def test_build_with_the_real_console_script(tmp_path):
    out = tmp_path / "grid.cuh"
    proc = subprocess.run([*grid_script(), "build", "iiwa14", "-o", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(f"grid: wrote {out} (") and proc.stderr.count("\n") == 1
    in_process = tmp_path / "in_process.cuh"
    assert grid("build", "iiwa14", "-o", str(in_process)).exit_code == 0
    assert out.read_bytes() == in_process.read_bytes()


# -- mistakes: exit 1, one line --------------------------------------------------------------

def test_unknown_robot(tmp_path):
    out = tmp_path / "grid.cuh"
    line = one_error_line(grid("build", "nosuchrobot", "-o", str(out)))
    assert line.startswith("grid: error: unknown robot 'nosuchrobot': not a file, not a bundled name (")
    assert "iiwa14" in line and "erd:" in line
    assert not out.exists()


def test_unwritable_output(tmp_path):
    out = tmp_path / "no" / "such" / "dir" / "grid.cuh"
    line = one_error_line(grid("build", "iiwa14", "-o", str(out)))
    assert line == f"grid: error: cannot write {out}: No such file or directory"


def test_review_of_an_unknown_algorithm():
    line = one_error_line(grid("review", "nosuchalgo"))
    assert line.startswith("grid: error: no algorithm named 'nosuchalgo' (registered: ")
    assert "inverse_dynamics" in line


def test_review_of_a_builtin_algorithm():
    result = grid("review", "inverse_dynamics")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"inverse_dynamics ({BUILTIN}): ")
    assert [m for m in re.findall(r"^(P[1-4]) ", result.stdout, re.M)] == ["P1", "P2", "P3", "P4"]


def test_ambiguous_erd_name_lists_the_candidates():
    line = one_error_line(grid("info", "erd:anymal"))
    assert line == (
        "grid: error: erd:anymal is ambiguous: use one of erd:anymal_b_simple/anymal, erd:anymal_c_simple/anymal"
    )
    result = grid("info", "erd:anymal_c_simple/anymal", "--floating-base")
    assert result.exit_code == 0 and "nv: 18" in result.stdout


def test_unknown_erd_name():
    line = one_error_line(grid("info", "erd:nosuchrobot"))
    assert line.startswith("grid: error: erd:nosuchrobot not found (")
    assert line.endswith("`grid robots` lists every name)")


def test_disable_plugin_applies_to_robot_loading(monkeypatch):
    """``--disable-plugin`` reaches every registry of the command, not only ``grid list``."""
    monkeypatch.delenv("GRID_DISABLE_PLUGINS", raising=False)
    line = one_error_line(grid("--disable-plugin", "bundled", "info", "iiwa14"))
    assert line.startswith("grid: error: unknown robot 'iiwa14'")
    assert "GRID_DISABLE_PLUGINS" not in os.environ  # restored after the command
    assert grid("info", "iiwa14").exit_code == 0


# -- usage errors: exit 2 --------------------------------------------------------------------

@pytest.mark.parametrize(
    "args, usage, message",
    [
        (["build", "iiwa14", "--bogus"], "grid build [OPTIONS] SOURCE", "Error: No such option '--bogus'."),
        (["--bogus", "list"], "grid [OPTIONS] COMMAND [ARGS]...", "Error: No such option '--bogus'."),
        (["nosuchcommand"], "grid [OPTIONS] COMMAND [ARGS]...", "Error: No such command 'nosuchcommand'."),
        (["build"], "grid build [OPTIONS] SOURCE", "Error: Missing argument 'SOURCE'."),
        (["info", "hyq", "-x"], "grid info [OPTIONS] SOURCE", "Error: No such option '-x'."),
    ],
)
def test_usage_errors_exit_2(args, usage, message):
    result = grid(*args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == "" and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert lines[0] == f"Usage: {usage}"
    assert lines[-1].startswith(message)


def test_usage_error_exit_2_in_a_real_process(tmp_path):
    proc = subprocess.run([*grid_script(), "build", "iiwa14", "--bogus"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


# -- loaders that say what went wrong ----------------------------------------------------------

def test_unknown_loader_prefix_is_named_as_such():
    line = one_error_line(grid("info", "nosuchloader:foo"))
    loaders = ", ".join(f"{n}:" for n in grid_core.registry().loaders)
    assert line == f"grid: error: unknown loader 'nosuchloader' in 'nosuchloader:foo' (loaders: {loaders})"


def test_a_directory_is_named_as_such(tmp_path):
    (tmp_path / "arm.urdf").write_text("<robot/>")
    line = one_error_line(grid("info", str(tmp_path)))
    assert line == f"grid: error: '{tmp_path}' is a directory, not a robot description: give the file (it holds arm.urdf)"
    line = one_error_line(grid("info", f"urdf:{tmp_path}"))
    assert line == f"grid: error: {tmp_path}: is a directory, not a URDF file (give the .urdf file inside it)"


def test_floating_and_fixed_base_together_is_a_usage_error():
    result = grid("info", "iiwa14", "--floating-base", "--fixed-base")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "Error: --floating-base and --fixed-base contradict each other: give one of them")
    assert "nv: 13" in grid("info", "iiwa14", "--floating-base").stdout
    assert "base: fixed" in grid("info", "g1", "--fixed-base").stdout


def test_disable_plugin_of_an_unknown_name_warns(monkeypatch):
    monkeypatch.delenv("GRID_DISABLE_PLUGINS", raising=False)
    result = grid("--disable-plugin", "nosuch", "info", "iiwa14")
    assert result.exit_code == 0 and result.stdout.startswith("robot: iiwa14")
    (line,) = result.stderr.splitlines()
    assert line.startswith("grid: warning: --disable-plugin nosuch: no plugin of that name is installed (plugins: ")
    assert "bundled" in line and "inverse_dynamics" in line
    assert grid("--disable-plugin", "erd", "info", "iiwa14").stderr == ""  # a real plugin: silent


def test_quiet_silences_warnings_and_status_lines(tmp_path):
    out = tmp_path / "grid.cuh"
    result = grid("-q", "build", "atlas", "-o", str(out))
    assert result.exit_code == 0 and result.stderr == "" and out.exists()


# -- robot names one can find ------------------------------------------------------------------

def test_robots_lists_bundled_and_erd_names_with_sizes_base_and_mimics():
    result = grid("robots")
    assert result.exit_code == 0 and result.stderr == ""
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line.startswith("  ")}
    assert rows["iiwa14"] == ["7", "7", "fixed", "-"]
    assert rows["g1"] == ["36", "35", "floating", "-"]
    assert rows["erd:panda"] == ["8", "8", "fixed", "panda_finger_joint2"]
    assert rows["erd:solo12"] == ["12", "12", "fixed", "-"]
    # a shared stem is listed under its packages, a broken file says why in one line
    assert "erd:anymal_b_simple/anymal" in rows and "erd:anymal_c_simple/anymal" in rows
    assert " ".join(rows["erd:romeo_laas_small"]).startswith("does not load: link 'body': inertia has a negative")
    assert "erd:ur5 (ur5_robot)" in result.stdout and "erd:talos (talos_reduced)" in result.stdout


@pytest.mark.parametrize("short, stem, nv", [("ur5", "ur5_robot", 6), ("talos", "talos_reduced", 32),
                                              ("hyq", "hyq_no_sensors", 12), ("solo", "solo", 8)])
def test_short_erd_names_resolve(short, stem, nv):
    from grid_plugins.erd import resolve

    assert resolve(short).stem == stem
    result = grid("info", f"erd:{short}")
    assert result.exit_code == 0 and f"nv: {nv} " in result.stdout


def test_unknown_erd_name_suggests_close_names_not_the_whole_list():
    line = one_error_line(grid("info", "erd:pandaa"))
    assert line == "grid: error: erd:pandaa not found (did you mean erd:panda? `grid robots` lists every name)"
    assert len(one_error_line(grid("info", "erd:nosuchrobot"))) < 200
