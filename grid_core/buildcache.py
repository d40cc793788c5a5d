"""Content-hash build cache for compiled artefacts (host-emulated libraries now,
GPU libraries for the runtime).

An artefact is keyed by a sha256 of everything that affects it (sources,
compiler command, generator version); it is built in a temporary directory
beside the cache and renamed into place, so concurrent builders (pytest-xdist
workers, several processes) never see a half-written file and leave one entry.
A failed build raises :class:`BuildError` carrying the compiler's log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .errors import BuildError

ENV_CACHE = "GRID_CACHE_DIR"
ENV_JOBS = "GRID_BUILD_JOBS"
"""Compiler processes a build of several units runs at once (default: :func:`build_jobs`)."""
UNIT_MEMORY_BYTES = 10 << 30
"""What one unit's compiler may take at its peak: ptxas on a humanoid's gradient unit reaches
about 10 GB, so a build runs no more units at once than the memory available holds."""


def cache_dir() -> Path:
    root = os.environ.get(ENV_CACHE)
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = Path(base) / "grid"
    path.mkdir(parents=True, exist_ok=True)
    return path


def content_key(sources: dict[str, str], command: list[str], extra: dict | None = None) -> str:
    from .composer import GENERATOR_VERSION

    h = hashlib.sha256()
    h.update(json.dumps({"command": command, "extra": extra or {}, "version": GENERATOR_VERSION},
                        sort_keys=True).encode())
    for name in sorted(sources):
        h.update(name.encode() + b"\0" + sources[name].encode() + b"\0")
    return h.hexdigest()


def build(
    label: str,
    sources: dict[str, str],
    command: list[str],
    output: str,
    *,
    units: list[list[str]] = (),
    extra: dict | None = None,
    key_command: list[str] | None = None,
    key_units: list[list[str]] | None = None,
    quiet: bool = True,
) -> tuple[Path, bool]:
    """Build ``output`` from ``sources`` with ``command`` (run in the build directory;
    ``{out}`` in it is replaced by the output file name), after ``units``: commands run first, at
    most :func:`build_jobs` at once (each compiles one source into an object ``command`` links).
    ``key_command`` (``key_units``) stand for the commands in the key where they name the
    compiler by path and ``extra`` already identifies it.  Returns ``(path, cached)``."""
    kc = key_command or command
    key = content_key(sources, [*(key_units or units), kc] if units else kc, extra)
    suffix = Path(output).suffix
    final = cache_dir() / f"{label}-{key[:20]}{suffix}"
    if final.exists():
        return final, True
    with _exclusive(f"{label}-{key[:20]}"):
        if final.exists():  # built by the process that held the lock
            return final, True
        return _compile(label, sources, command, output, key, final, quiet, units=list(units)), False


def build_jobs(units: int) -> int:
    """Compiler processes for ``units`` units at once: ``GRID_BUILD_JOBS``, else one a core, no
    more than the memory available holds at :data:`UNIT_MEMORY_BYTES` each, at least one."""
    forced = os.environ.get(ENV_JOBS)
    if forced:
        if not forced.strip().isdigit() or int(forced) < 1:
            raise BuildError(f"{ENV_JOBS}={forced}: a number of compiler processes, 1 or more")
        return min(units, int(forced))
    jobs = os.cpu_count() or 1
    available = available_memory()
    if available is not None:
        jobs = min(jobs, available // UNIT_MEMORY_BYTES)
    return max(1, min(units, jobs))


def available_memory() -> int | None:
    """The memory available to new processes now (``MemAvailable``, bytes), or None where the system
    does not say (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None


@contextlib.contextmanager
def _exclusive(name: str):
    """One builder of an artefact at a time across processes (pytest-xdist workers reaching the
    same library): the others wait on its lock file and then find it in the cache, where each
    compiled it again before.  A lock file stays (empty) under ``locks/``; without ``fcntl``
    (not POSIX) builders race as before, harmlessly."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    locks = cache_dir() / "locks"
    locks.mkdir(exist_ok=True)
    with open(locks / f"{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(label: str, cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise BuildError(f"{label}: compiler not found: {cmd[0]} ({exc.strerror})") from None


def _failed(label: str, cmd: list[str], proc: subprocess.CompletedProcess) -> BuildError:
    log = (proc.stdout + proc.stderr).strip()
    return BuildError(f"{label}: build failed (exit {proc.returncode}): {' '.join(cmd)}\n{log[-20000:]}")


def _compile(label: str, sources: dict[str, str], command: list[str], output: str, key: str, final: Path,
             quiet: bool, units: list[list[str]] = ()) -> Path:
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{label}-", dir=cache_dir()))
    try:
        for name, text in sources.items():
            (tmp / name).write_text(text)
        if units:
            with ThreadPoolExecutor(build_jobs(len(units))) as pool:
                done = list(pool.map(lambda cmd: (cmd, _run(label, cmd, tmp)), units))
            for cmd, proc in done:
                if proc.returncode != 0:
                    raise _failed(label, cmd, proc)
        cmd = [c.replace("{out}", output) for c in command]
        proc = _run(label, cmd, tmp)
        if proc.returncode != 0 or not (tmp / output).exists():
            raise _failed(label, cmd, proc)
        os.replace(tmp / output, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print(f"grid: {label} {key[:7]} compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return final


def build_reported(what: str, target: str, failure: str, label: str, sources: dict[str, str], command: list[str],
                   output: str, *, quiet: bool = False, **options) -> tuple[Path, bool]:
    """:func:`build` as a user sees it (Warp's build UX): while the compiler runs, a progress
    line every 5 s (``grid: compiling inverse_dynamics[g1] for sm_90... 10 s``), then one status
    line (``grid: inverse_dynamics[g1] 3f2a9c1 compiled in 41.2 s`` / ``(cached)``); none with
    ``quiet``.  ``what`` names the artefact, ``target`` what it is built for, and a failure is a
    :class:`BuildError` ``what: failure: <the compiler's log>``."""
    done = threading.Event()
    t0 = time.perf_counter()

    def progress():
        while not done.wait(5.0):
            print(f"grid: compiling {what} for {target}... {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)

    if not quiet:
        threading.Thread(target=progress, daemon=True).start()
    try:
        path, cached = build(label, sources, command, output, **options)
    except BuildError as exc:
        raise BuildError(f"{what}: {failure}: {exc}") from None
    finally:
        done.set()
    if not quiet:
        key = path.stem.rsplit("-", 1)[-1][:7]
        status = "(cached)" if cached else f"compiled in {time.perf_counter() - t0:.1f} s"
        print(f"grid: {what} {key} {status}", file=sys.stderr, flush=True)
    return path, cached


def host_compiler() -> list[str]:
    return [os.environ.get("CXX", "g++")]


def private_symbols(nvcc: bool = False) -> list[str]:
    """Compiler flags that keep a library's symbols its own when several are loaded in one process.

    g++ makes a function-local static of an inline function or a template (a launcher's once-only
    shared-memory opt-in, its block size, the device queries) a process-wide unique symbol, which
    the dynamic linker shares between every library that defines it, ``RTLD_LOCAL`` or not: with
    two libraries in one process (two robots, or one robot built with other options) the second
    took the first's ``static`` opt-in as its own and launched its kernel without it (CUDA
    "invalid argument").  ``-fno-gnu-unique`` keeps those statics per library; ``-Bsymbolic``
    binds the library's calls to its own definitions even where it is loaded ``RTLD_GLOBAL``."""
    return ["-Xcompiler", "-fno-gnu-unique", "-Xlinker", "-Bsymbolic"] if nvcc else ["-fno-gnu-unique",
                                                                                    "-Wl,-Bsymbolic"]
