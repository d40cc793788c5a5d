"""GRID_SWEEP_LOG (tests/sweep_log.py): a run logs each test's outcome and commit; a later run leaves
out what passed on equal code, runs again what failed, and starts over when the code changes.  Run
in a subprocess on a throwaway git repository holding two passing tests and a failing one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = """
def test_one():
    assert 1 + 1 == 2

def test_two():
    assert sorted([2, 1]) == [1, 2]

def test_three():
    assert {flag}
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def _pytest(repo: Path, log: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GRID_SWEEP_LOG": str(log), "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)  # the child is a controller of its own
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.sweep_log", "-p", "no:cacheprovider",
                           *args, "test_sample.py"], cwd=repo, env=env, capture_output=True, text=True)


def _rows(log: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split("\t")[:3]) for line in log.read_text().splitlines()]


def test_a_sweep_resumes_on_equal_code_and_restarts_on_changed_code(tmp_path):
    repo, log = tmp_path / "repo", tmp_path / "sweep.tsv"
    repo.mkdir()
    (repo / "test_sample.py").write_text(SAMPLE.format(flag="False"))
    (repo / "README.md").write_text("a\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    first = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    run = _pytest(repo, log, "-n", "2")  # pytest-xdist: the controller alone writes, one row a test
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 2 passed" in run.stdout
    assert sorted(_rows(log)) == [("test_sample.py::test_one", "passed", first),
                                  ("test_sample.py::test_three", "failed", first),
                                  ("test_sample.py::test_two", "passed", first)]

    # equal code: the two passes are left out, the failure runs again (without pytest-xdist, and with
    # the "@group" suffix that its --dist loadgroup gives a node id in the log: the same test)
    log.write_text(log.read_text().replace("test_two\t", "test_two@robot-x\t"))
    run = _pytest(repo, log)
    assert "1 failed, 2 deselected" in run.stdout, run.stdout

    # a commit that changes a test voids every row: all three run (and pass, the third fixed)
    (repo / "README.md").write_text("b\n")
    (repo / "test_sample.py").write_text(SAMPLE.format(flag="True"))
    _git(repo, "commit", "-q", "-am", "fix")
    run = _pytest(repo, log)
    assert "3 passed" in run.stdout, run.stdout
    run = _pytest(repo, log)
    assert run.returncode == 5 and "3 deselected" in run.stdout, run.stdout  # the whole sweep passed here

    # a documentation commit leaves them valid
    (repo / "README.md").write_text("c\n")
    _git(repo, "commit", "-q", "-am", "docs")
    run = _pytest(repo, log)
    assert run.returncode == 5 and "3 deselected" in run.stdout, run.stdout

    # a dirty watched file: refused, nothing logged
    before = log.read_text()
    (repo / "test_sample.py").write_text(SAMPLE.format(flag="1"))
    run = _pytest(repo, log)
    assert run.returncode == 4 and "must be a clean commit" in run.stderr, run.stdout + run.stderr
    assert log.read_text() == before

    # an untracked file outside the documentation (a new test module) too
    _git(repo, "checkout", "-q", "--", "test_sample.py")
    (repo / "test_new.py").write_text("def test_new():\n    pass\n")
    run = _pytest(repo, log)
    assert run.returncode == 4 and "test_new.py" in run.stderr, run.stdout + run.stderr
    assert log.read_text() == before
