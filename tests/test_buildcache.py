"""The content-hash build cache (grid_core.buildcache): builders of one artefact at the same time
(pytest-xdist workers reaching the same library) compile it once."""

from __future__ import annotations

import threading

import pytest

from grid_core import buildcache
from grid_core.errors import BuildError


def test_concurrent_builders_of_one_artefact_compile_it_once(tmp_path, monkeypatch):
    monkeypatch.setenv(buildcache.ENV_CACHE, str(tmp_path / "cache"))
    runs = tmp_path / "runs"
    # a "compiler" that leaves one line per run and is slow enough for the builders to overlap
    command = ["sh", "-c", f"echo run >> {runs}; sleep 1; cat in.txt > {{out}}"]
    results, errors = [], []

    def builder():
        try:
            results.append(buildcache.build("lock-test", {"in.txt": "artefact"}, command, "out.bin"))
        except Exception as exc:  # noqa: BLE001  (reported below, not lost in the thread)
            errors.append(exc)

    threads = [threading.Thread(target=builder) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert runs.read_text().splitlines() == ["run"]  # one compile
    assert sorted(cached for _, cached in results) == [False, True, True]
    assert len({path for path, _ in results}) == 1 and results[0][0].read_text() == "artefact"
    assert buildcache.build("lock-test", {"in.txt": "artefact"}, command, "out.bin") == (results[0][0], True)
    assert runs.read_text().splitlines() == ["run"]


def test_units_compile_side_by_side_then_link(tmp_path, monkeypatch):
    """Units run at most GRID_BUILD_JOBS at once before the link; their commands key the artefact;
    a failing unit fails the build with its command and log."""
    monkeypatch.setenv(buildcache.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv(buildcache.ENV_JOBS, "2")
    log = tmp_path / "log"
    # each unit notes its start, waits for the other to start (both running at once), copies its source
    units = [["sh", "-c", f"echo start {u} >> {log}; for i in $(seq 50); do [ $(grep -c start {log}) -ge 2 ] && break; "
                          f"sleep 0.1; done; grep -c start {log} > {u}.n; cat {u}.txt > {u}.o"] for u in ("a", "b")]
    link = ["sh", "-c", "cat a.o b.o a.n b.n > {out}"]
    sources = {"a.txt": "A\n", "b.txt": "B\n"}
    path, cached = buildcache.build("units-test", sources, link, "lib.bin", units=units)
    assert not cached and path.read_text().split() == ["A", "B", "2", "2"]  # both ran before either ended
    assert buildcache.build("units-test", sources, link, "lib.bin", units=units) == (path, True)
    # another unit command: another artefact
    other = [*units[:1], [*units[1][:-1], units[1][-1] + "; true"]]
    assert buildcache.build("units-test", sources, link, "lib.bin", units=other)[0] != path
    bad = [units[0], ["sh", "-c", "echo no such header >&2; exit 3"]]
    with pytest.raises(BuildError, match=r"(?s)exit 3.*no such header"):
        buildcache.build("units-test", sources, link, "lib.bin", units=bad)


def test_build_jobs_follow_the_setting_the_cores_and_the_memory(monkeypatch):
    monkeypatch.setenv(buildcache.ENV_JOBS, "3")
    assert buildcache.build_jobs(8) == 3 and buildcache.build_jobs(2) == 2
    monkeypatch.setenv(buildcache.ENV_JOBS, "0")
    with pytest.raises(BuildError, match="GRID_BUILD_JOBS=0"):
        buildcache.build_jobs(2)
    monkeypatch.delenv(buildcache.ENV_JOBS)
    monkeypatch.setattr(buildcache.os, "cpu_count", lambda: 64)
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    assert buildcache.build_jobs(100) == max(1, min(64, available // buildcache.UNIT_MEMORY_BYTES))
    assert buildcache.build_jobs(1) == 1
