"""``GRID_SWEEP_LOG=FILE``: a long pytest run (the full sweep, hours on two cores) that can stop and
go on.  Each test's outcome is appended to FILE as it is reported, with the commit it ran at; a later
run with the same FILE leaves out (deselects) every test that passed at a commit whose code and tests
equal the checkout's, so an interrupted sweep resumes where it stopped, and one run that deselects
everything shows that the whole sweep has passed on this code.

"Equal" is ``git diff --quiet C HEAD -- . ':!benchmarks' ':!docs' ':!README.md'``: what differs in
the documentation and the benchmark scripts (which the swept tests do not import) leaves a row valid;
any other change (the generator, an algorithm, a test, a robot, the dependencies) voids it.  The
checkout must be clean outside those paths (a dirty tree has no commit to record): the run then stops
with a usage error.  Rows are tab-separated: node id, outcome (passed, failed, skipped, error),
commit, seconds, UTC time; only the pytest-xdist controller (or a run without xdist) writes them."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ENV = "GRID_SWEEP_LOG"
UNWATCHED = (":!benchmarks", ":!docs", ":!README.md")
"""Paths whose changes leave a logged pass valid (see the module docstring)."""
_STATE: dict[str, tuple[Path, str]] = {}


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def read_rows(path: Path) -> list[list[str]]:
    """The log's rows (a missing file has none; a torn last line is dropped)."""
    if not path.exists():
        return []
    return [r for r in (line.rstrip("\n").split("\t") for line in path.read_text().splitlines()) if len(r) >= 3]


def _test_id(nodeid: str) -> str:
    """A node id without the ``@group`` that pytest-xdist's ``--dist loadgroup`` appends."""
    return nodeid.rsplit("@", 1)[0] if "]@" in nodeid or ("@" in nodeid and "[" not in nodeid) else nodeid


def passed_here(root: Path, rows: list[list[str]], head: str) -> set[str]:
    """Tests (:func:`_test_id`) whose last row passed at a commit whose watched paths equal ``head``'s."""
    valid: dict[str, bool] = {}
    last: dict[str, bool] = {}  # a later row of the same test overrides (a teardown's error after its pass)
    for nodeid, outcome, commit, *_ in rows:
        if commit not in valid:
            valid[commit] = commit == head or _git(root, "diff", "--quiet", commit, head, "--", ".",
                                                   *UNWATCHED).returncode == 0
        if valid[commit]:
            last[_test_id(nodeid)] = outcome == "passed"
    return {nodeid for nodeid, ok in last.items() if ok}


def pytest_configure(config):
    path = os.environ.get(ENV)
    if not path:
        return
    root = Path(str(config.rootpath))
    head = _git(root, "rev-parse", "HEAD").stdout.strip()
    # untracked files count too: a new test module or robot file is code the logged rows did not run
    dirty = _git(root, "status", "--porcelain", "--untracked-files=normal", "--", ".", *UNWATCHED).stdout.strip()
    if not head or dirty:
        raise pytest.UsageError(f"{ENV}: the checkout must be a clean commit outside "
                                f"{', '.join(p[2:] for p in UNWATCHED)} (each logged pass names its commit)"
                                + (f"; changed: {dirty.splitlines()[0].strip()} ..." if dirty else ""))
    config._grid_sweep = _STATE[ENV] = (Path(path).resolve(), head)


@pytest.hookimpl(trylast=True)  # after the markers and groups of conftest.py
def pytest_collection_modifyitems(config, items):
    state = getattr(config, "_grid_sweep", None)
    if state is None:
        return
    path, head = state
    done = passed_here(Path(str(config.rootpath)), read_rows(path), head)
    keep = [item for item in items if _test_id(item.nodeid) not in done]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if _test_id(item.nodeid) in done])
        items[:] = keep


def pytest_runtest_logreport(report):
    """One row per test: its call's outcome, or its setup's or teardown's where that failed or skipped."""
    state = _STATE.get(ENV)
    if state is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    path, head = state
    if report.when == "call" or (report.when == "setup" and not report.passed) or \
            (report.when == "teardown" and report.failed):
        outcome = "error" if report.failed and report.when != "call" else report.outcome
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with open(path, "a") as log:
            log.write(f"{report.nodeid}\t{outcome}\t{head}\t{report.duration:.1f}\t{stamp}\n")

