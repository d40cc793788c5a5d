"""The ptxas a GPU library is assembled by, and the flags a known defect of it calls for
(grid_core.runtime.cuda.toolchain): nvcc only, no GPU (CI).

ptxas 13.0 (V13.0.88) miscompiles at -O2 and -O3: atlas's forward-dynamics gradient, float64, its
per-state kernel with f_ext, came out wrong in one 6 x 4 block on an H100, where the same PTX
assembled at -O1, or by ptxas 13.5, was right (benchmarks/results/2026-12-06_H100_a878d0d-ptxas.txt).
Libraries built with such a ptxas are assembled at -O1; GRID_PTXAS puts another ptxas behind the
same nvcc, GRID_PTXAS_OPT forces the level.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from grid_core.errors import RuntimeUnavailableError
from grid_core.runtime import cuda
from grid_core.runtime.cuda import (PTXAS_DEFECTS, find_nvcc, nvcc_home, nvcc_version, ptxas_beside, ptxas_flags,
                                    ptxas_release, toolchain)
from grid_core.runtime.handle import nvcc_command

KERNEL = "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"


def fake_ptxas(path: Path, release: str, marker: Path | None = None) -> Path:
    """A ptxas that reports ``release`` (``--version``) and otherwise runs the real one, first
    touching ``marker`` when given (proof that nvcc ran it)."""
    real = ptxas_beside(find_nvcc())
    touch = f'touch "{marker}"\n' if marker else ""
    path.write_text("#!/bin/sh\n"
                    f'if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release {release}, V{release}.1"; '
                    "exit 0; fi\n"
                    f'{touch}exec "{real}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture(autouse=True)
def _clean(monkeypatch, tmp_path):
    for var in (cuda.ENV_PTXAS, cuda.ENV_PTXAS_OPT):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GRID_CACHE_DIR", str(tmp_path / "cache"))
    cuda._warn_defect.cache_clear()


def test_the_ptxas_nvcc_runs_is_its_toolkits():
    """Through /usr/local/bin's wrapper or a link alike, the ptxas beside the nvcc binary: the same
    release as nvcc's own --version says."""
    nvcc = find_nvcc()
    assert (nvcc_home(nvcc) / "nvcc").is_file()
    release = ptxas_release(ptxas_beside(nvcc))
    assert re.fullmatch(r"\d+\.\d+", release)
    assert nvcc_version(nvcc).startswith(release + ".")


def test_a_defective_release_is_assembled_at_O1_and_said(tmp_path):
    bad = fake_ptxas(tmp_path / "ptxas", "13.0")
    with pytest.warns(UserWarning, match=r"ptxas 13\.0 .* assembled at -O1 .*GRID_PTXAS"):
        assert ptxas_flags(str(bad)) == ["-Xptxas", "-O1"]
    assert "13.0" in PTXAS_DEFECTS


def test_a_good_release_keeps_O3(tmp_path):
    good = fake_ptxas(tmp_path / "ptxas", "13.5")
    assert ptxas_flags(str(good)) == []


def test_the_level_can_be_forced(tmp_path, monkeypatch):
    bad = fake_ptxas(tmp_path / "ptxas", "13.0")
    monkeypatch.setenv(cuda.ENV_PTXAS_OPT, "3")
    assert ptxas_flags(str(bad)) == ["-Xptxas", "-O3"]
    monkeypatch.setenv(cuda.ENV_PTXAS_OPT, "fast")
    with pytest.raises(RuntimeUnavailableError, match="GRID_PTXAS_OPT=fast"):
        ptxas_flags(str(bad))


def test_grid_ptxas_puts_that_ptxas_behind_the_same_nvcc(tmp_path, monkeypatch):
    """The shadow toolkit's nvcc runs GRID_PTXAS (the marker it touches) and builds a kernel; the
    flags follow that ptxas's release; the library command carries them."""
    marker = tmp_path / "ran"
    other = fake_ptxas(tmp_path / "ptxas", "13.5", marker)
    monkeypatch.setenv(cuda.ENV_PTXAS, str(other))
    nvcc, flags = toolchain(find_nvcc())
    assert flags == [] and Path(nvcc).parent == nvcc_home(nvcc)
    assert Path(nvcc).resolve().parent != nvcc_home(find_nvcc())
    assert ptxas_release(ptxas_beside(nvcc)) == "13.5"
    (tmp_path / "k.cu").write_text(KERNEL)
    res = subprocess.run([nvcc, "-arch=sm_90", "-c", "k.cu", "-o", "k.o"], cwd=tmp_path, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert marker.exists() and (tmp_path / "k.o").stat().st_size > 0
    assert toolchain(find_nvcc())[0] == nvcc  # made once

    bad = fake_ptxas(tmp_path / "ptxas13.0", "13.0")
    monkeypatch.setenv(cuda.ENV_PTXAS, str(bad))
    with pytest.warns(UserWarning, match=r"13\.0"):
        nvcc, flags = toolchain(find_nvcc())
    assert flags == ["-Xptxas", "-O1"]
    cmd = nvcc_command(nvcc, "sm_90", flags)
    assert cmd[0] == nvcc and cmd[cmd.index("-Xptxas") + 1] == "-O1"


def test_a_missing_grid_ptxas_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv(cuda.ENV_PTXAS, str(tmp_path / "nope"))
    with pytest.raises(RuntimeUnavailableError, match="GRID_PTXAS=.*nope is not a file"):
        toolchain(find_nvcc())
