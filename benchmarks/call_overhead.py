"""The cost of a ``CpuHandle`` call on PyTorch tensors over the same call on numpy arrays.

The acceptance (issue 40): a call on torch CPU tensors at B = 16 within 2 µs of the same call
on numpy, in the same run, median.  For each differentiable op on one robot (default iiwa14),
one handle with one worker thread (``CpuHandle(..., threads=1)``, PyTorch on one thread too),
the same inputs as numpy arrays and as tensors sharing their memory (``torch.from_numpy``,
contiguous float64, no grad), called positionally as a user would (the integrator with its
``dt``); ``--calls`` calls of each kind, timed one by one and alternating (:func:`time_pair`),
and the medians printed with their difference (and the median of the pairs' differences).

    python benchmarks/call_overhead.py [--robot iiwa14] [--n 16] [--calls 20000]
        [--json benchmarks/results/cpu/<date>_<commit>_call_overhead.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from cpu_vs_pinocchio import commit  # (this script's folder is on the path when it runs)

ROOT = Path(__file__).resolve().parents[1]
LIMIT_US = 2.0
"""The acceptance: torch's median at most this much over numpy's."""
DT = 0.01
"""The integrator's time step (its one param without a default)."""


def _median(values) -> float:
    return float(np.median(values))


def time_pair(f, a_args, b_args, calls: int) -> tuple[np.ndarray, np.ndarray]:
    """µs of each of ``calls`` calls of ``f(*a_args)`` and of ``f(*b_args)``, timed one by one and
    alternating call by call (their order swapped every other pair): on a shared machine, whose
    disturbances come in bursts of milliseconds that can make a call 20x slower, a burst meets
    both sides alike, and the medians are of calls outside the bursts."""
    clock = time.perf_counter_ns
    a, b = np.empty(calls), np.empty(calls)
    for _ in range(20):  # warm both (plans, lean paths)
        f(*a_args)
        f(*b_args)
    for i in range(calls):
        swap = i & 1
        first, second = (b_args, a_args) if swap else (a_args, b_args)
        t0 = clock()
        f(*first)
        t1 = clock()
        f(*second)
        t2 = clock()
        x, y = (t2 - t1, t1 - t0) if swap else (t1 - t0, t2 - t1)
        a[i], b[i] = x, y
    return a / 1e3, b / 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robot", default="iiwa14")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--json", type=Path, default=None, help="write the figures there")
    args = ap.parse_args(argv)

    import torch

    import grid_core
    from grid_core.loader import load_robot
    from grid_core.runtime.derivatives import registered_rules

    torch.set_num_threads(1)
    robot = load_robot(args.robot)
    rules = registered_rules()
    ops = sorted(rules)
    needs = sorted(set(ops) | {k for r in rules.values() for k in r.needs})  # the tests' gradient library
    handle = grid_core.CpuHandle(robot, needs, threads=1, quiet=True)
    rng = np.random.default_rng(0)
    rows = []
    print(f"{args.robot}, B = {args.n}, one thread, {args.calls} calls of each kind; µs per call, median")
    print(f"{'op':22s} {'numpy':>8s} {'torch':>8s} {'torch-numpy':>12s}  within {LIMIT_US} µs")
    for op in ops:
        state = {"q": robot.random_configuration(rng, args.n)}
        for k in rules[op].inputs[1:]:
            if k == "f_ext":
                continue  # the common call: no external forces
            state[k] = rng.uniform(-1, 1, (args.n, robot.nv))
        extra = (DT,) if op == "integrator" else ()
        xs = tuple(np.ascontiguousarray(v) for v in state.values()) + extra
        ts = tuple(torch.from_numpy(v) for v in xs[:len(state)]) + extra
        f = getattr(handle, op)
        a, b = time_pair(f, xs, ts, args.calls)
        np_us, torch_us = _median(a), _median(b)
        diff = _median(b - a)
        ok = torch_us - np_us <= LIMIT_US
        rows.append({"op": op, "numpy_us": np_us, "torch_us": torch_us, "paired_difference_us": diff,
                     "numpy_quartiles_us": np.percentile(a, [25, 75]).tolist(),
                     "torch_quartiles_us": np.percentile(b, [25, 75]).tolist(), "within": ok})
        print(f"{op:22s} {np_us:8.2f} {torch_us:8.2f} {torch_us - np_us:12.2f}  {'yes' if ok else 'NO'}"
              f"   (pairs' median difference {diff:.2f})")
    if args.json is not None:
        data = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "commit": commit(), "cpu": platform.processor() or platform.machine(), "robot": args.robot,
                "n": args.n, "calls": args.calls, "threads": 1,
                "torch": torch.__version__, "python": sys.version.split()[0], "limit_us": LIMIT_US, "rows": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(r["within"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
