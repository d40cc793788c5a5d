"""The content-hash build cache (grid_core.buildcache): builders of one artefact at the same time
(pytest-xdist workers reaching the same library) compile it once."""

from __future__ import annotations

import threading

from grid_core import buildcache


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
