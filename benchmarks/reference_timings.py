"""Time the float64 numpy references of the second-order algorithms (and the integrators).

One state per call, through ``grid_core.Reference`` (input validation and dispatch
included), median of repeated calls after one warm-up call; prints a Markdown table
(rows: algorithms, columns: robots) with the machine and the date, as recorded in
docs/reference_timings.md.

    python benchmarks/reference_timings.py [--seconds 1.0] [--robots iiwa14 hyq atlas g1]

BLAS runs single-threaded (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` are set to 1 before numpy is imported; ``--blas-threads N`` changes
it): the references' products are small, and a threaded BLAS on a busy machine makes them
up to 200x slower and the table noisy (measured: one product of ``fdsva_so``'s 35^4
contraction, 0.08 ms single-threaded, 16 ms two-threaded while the other core was busy).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
import warnings


def _blas_threads(argv) -> str:
    """``--blas-threads N`` / ``--blas-threads=N``, read before numpy (and argparse) loads."""
    for k, a in enumerate(argv):
        if a.startswith("--blas-threads="):
            return a.split("=", 1)[1]
        if a == "--blas-threads" and k + 1 < len(argv):
            return argv[k + 1]
    return "1"


BLAS_THREADS = _blas_threads(sys.argv)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = BLAS_THREADS

import numpy as np  # noqa: E402  (after the BLAS thread count)

ALGORITHMS = ("idsva_so", "fdsva_so", "end_effector_pose_hessian", "integrator", "integrator_gradient")
ROBOTS = ("iiwa14", "hyq", "atlas", "g1")


def inputs(name: str, robot, rng):
    from grid_core.testing import random_state

    q, qd, x = random_state(robot, rng)
    if name == "end_effector_pose_hessian":
        return (q,)
    if name in ("integrator", "integrator_gradient"):
        return (q, qd, x, 0.01)
    return (q, qd, x)


def median_seconds(fn, args, budget: float, min_calls: int = 11) -> tuple[float, int]:
    fn(*args)  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < budget:
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times), len(times)


def cpu_name() -> str:
    """``platform.processor()``, or where that is empty (Linux) the model name of /proc/cpuinfo."""
    name = platform.processor()
    if not name:
        try:
            with open("/proc/cpuinfo") as f:
                name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        except (OSError, StopIteration):
            name = ""
    return f"{name or 'unknown'} ({platform.machine()})"


def fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time budget per cell (s)")
    parser.add_argument("--robots", nargs="+", default=list(ROBOTS))
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS))
    parser.add_argument("--blas-threads", default="1", help="BLAS threads (default 1)")
    args = parser.parse_args()

    import grid_core

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        robots = [grid_core.load_robot(name) for name in args.robots]
    rng = np.random.default_rng(0)
    cells = {}
    for robot in robots:
        ref = grid_core.Reference(robot)
        for name in args.algorithms:
            cells[name, robot.name] = median_seconds(getattr(ref, name), inputs(name, robot, rng), args.seconds)

    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; Python {platform.python_version()}, "
          f"numpy {np.__version__}, BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}; "
          f"{datetime.date.today().isoformat()}")
    print()
    heads = [f"{r.name} (nv={r.nv}{', floating' if r.floating_base else ''})" for r in robots]
    print("| algorithm | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(robots))
    for name in args.algorithms:
        print(f"| {name} | " + " | ".join(fmt(cells[name, r.name][0]) for r in robots) + " |")
    print()
    print(f"median of at least {min(n for _, n in cells.values())} calls per cell (a {args.seconds:g} s budget "
          "each), after one warm-up call; single state, float64")


if __name__ == "__main__":
    main()
