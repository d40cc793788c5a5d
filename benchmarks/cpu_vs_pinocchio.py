"""Time ``grid_core.CpuHandle`` against plain Pinocchio in C++, per state, on this machine.

Both in the same run, on the same URDFs (``robots/*.urdf``, Pinocchio with
``JointModelFreeFlyer`` where the robot's natural base floats): Pinocchio's ``rnea``,
``crba``, ``computeMinverse``, ``aba``, ``computeRNEADerivatives``,
``computeABADerivatives``, ``ComputeRNEASecondOrderDerivatives`` (into one reused set of tensors, and
into a set per state: ``[kept]``), one semi-implicit Euler step
(``aba`` + ``integrate``) and its derivatives' ingredients (``computeABADerivatives`` + ``dIntegrate``
d/dq and d/dv), the same for an RK4 step (at its four stages, against our gradient generated for
RK4), and those RK4 ingredients composed by hand into the step's Jacobians (the chain rule's
products in Eigen, ``dIntegrateTransport``: what ours returns) and, for every default (leaf) frame, the frame placements and frame
Jacobians (LOCAL_WORLD_ALIGNED) over a batch of random states on one core
(``benchmarks/src/pinocchio_timing.cpp``, built against the ``pin`` wheel's headers and
libraries), and every algorithm the header emits through ``CpuHandle`` at the same batch
size with 1 and 2 worker threads (one call per round, ``out=`` reused; the two called
alternately, and the speed-up taken call by call; then again against one thread on each
of two cores in turn, :func:`each_core`).  Times are ns per state: the median of the
rounds, with their range, of the least disturbed of several bursts (:data:`BURSTS`), each in a
process of its own, on both sides alike (ours: :func:`time_ours_apart`).  In the same rounds, the floor of each of ours: only storing its outputs into the same
buffers, one thread (:func:`store_floor`), printed as a ``floor`` line per row (the ratio to
Pinocchio no code that writes the outputs goes below; idsva_so's outputs on atlas are 55 MB at
batch 64, beyond the caches, where Pinocchio's timing writes one reused set).

    pip install -e .[test] cmeel-eigen cmeel-urdfdom-headers   # Pinocchio's C++ dependencies' headers
    python benchmarks/cpu_vs_pinocchio.py [--robots iiwa14 hyq go2 atlas g1] [--n 1024] [--rounds 21]
        [--algorithms integrator integrator_gradient]

writes ``benchmarks/results/cpu/<date>_<commit>.json`` and ``cpu_vs_pinocchio.rst`` there (the
table the docs' benchmark page includes).

Pinocchio is compiled at ``-O3`` for the wheel's generic x86-64 target, as its libraries
are (``-march=native`` would change Eigen's alignment and break the ABI with the wheel's
URDF parser), using the wheel's instantiated algorithms; ``CpuHandle`` at its own flags
(``grid_core.runtime.cpu.FLAGS``, ``-O3 -march=native``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import tomllib
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ("iiwa14", "hyq", "go2", "atlas", "g1")
RK4 = ":rk4"
"""The suffix of an algorithm timed with its code generated for RK4 (its own library)."""
KEEP = ":keep_zeros"
"""The suffix of an algorithm timed with ``keep_zeros=True``: its ``out=`` arrays hold the structural
zeros already (an earlier call's results), and the call writes only the cells it computes, as
Pinocchio writes its tensors (the same library)."""
# Pinocchio's function (after a "|": the row's variant) -> our algorithms computing the same thing (the
# first one emitted is timed), and the target: at most this fraction of Pinocchio's time
PAIRS = {
    "rnea": (("inverse_dynamics",), 0.5),
    "crba": (("crba",), 0.5),
    "computeMinverse": (("minv",), 0.5),
    "aba": (("forward_dynamics", "aba"), 0.5),
    "computeRNEADerivatives": (("inverse_dynamics_gradient",), 0.5),
    "computeABADerivatives": (("forward_dynamics_gradient",), 0.5),
    "ComputeRNEASecondOrderDerivatives": (("idsva_so",), 0.5),
    # the same, ours with keep_zeros=True: Pinocchio writes the cells it computes and leaves the rest of
    # its tensors as they are; ours then too
    "ComputeRNEASecondOrderDerivatives|keep_zeros": ((f"idsva_so{KEEP}",), 0.5),
    # the two again against Pinocchio writing each state's tensors into a set of their own, allocated zero
    # (as a batch's results are kept, and as ours writes them): in its one reused set the 864 KB a state
    # of atlas's stay in the caches while ours store 55 MB at batch 64; the program leaves the row out
    # where its sets would take more than 256 MB (atlas at batch 1024)
    "ComputeRNEASecondOrderDerivatives[kept]": (("idsva_so",), 0.5),
    "ComputeRNEASecondOrderDerivatives[kept]|keep_zeros": ((f"idsva_so{KEEP}",), 0.5),
    # one semi-implicit Euler step (dt = 0.01): aba + integrate; its derivatives: computeABADerivatives
    # and dIntegrate's two Jacobians (ours also forms the six blocks from them)
    "abaIntegrate": (("integrator",), 0.5),
    "abaDerivativesDIntegrate": (("integrator_gradient",), 0.5),
    # RK4's step derivatives: computeABADerivatives at its four stages, dIntegrate at each stage's and the
    # step's increment (ours also forms the chain rule's products through the stages)
    "abaDerivativesDIntegrateRK4": ((f"integrator_gradient{RK4}",), 0.5),
    # the same ingredients composed into RK4's step Jacobians by hand (the chain rule's products in Eigen,
    # dIntegrateTransport): what a Pinocchio user computes to get what ours returns
    "rk4GradientByHand": ((f"integrator_gradient{RK4}",), 0.5),
    # every default (leaf) frame: forwardKinematics + updateFramePlacements, and
    # computeJointJacobians + getFrameJacobian (LOCAL_WORLD_ALIGNED) per frame
    "framePlacements": (("end_effector_pose",), 0.5),
    "frameJacobians": (("end_effector_pose_gradient",), 0.5),
}
TIMED = tuple(dict.fromkeys(a for algorithms, _ in PAIRS.values() for a in algorithms if ":" not in a))
"""Our algorithms with a Pinocchio counterpart: the only ones built and timed (an algorithm without
one, such as the operational-space inertia, which refuses hyq's lower legs, is left out)."""
SECOND_ORDER_ROBOTS = ("iiwa14", "hyq", "atlas")
"""The robots idsva_so (not in the default set) is timed on without --algorithms: the acceptance's
three (atlas in the loop form of its contractions, its CPU library about 130 CPU seconds); go2's
and g1's libraries leave it out to bound the script's builds, and their rows read "not generated"
(name it with --algorithms to time it there)."""
PIN_DEFINES = ("PINOCCHIO_ENABLE_TEMPLATE_INSTANTIATION", "PINOCCHIO_WITH_URDFDOM", "BOOST_MPL_LIMIT_LIST_SIZE=30",
               "BOOST_MPL_LIMIT_VECTOR_SIZE=30", "BOOST_MPL_CFG_NO_PREPROCESSED_HEADERS",
               "BOOST_FUSION_INVOKE_MAX_ARITY=12", "PINOCCHIO_URDFDOM_HEADERS_MAJOR_VERSION=3",
               "PINOCCHIO_URDFDOM_HEADERS_MINOR_VERSION=0", "PINOCCHIO_URDFDOM_HEADERS_PATCH_VERSION=0")


def pinocchio_flags() -> tuple[list[str], list[str]]:
    """``(compile flags, link flags)`` of the timing program: the ``pin`` wheel's headers, and those
    of Eigen and urdfdom_headers it includes (the test extras' ``cmeel-eigen`` and
    ``cmeel-urdfdom-headers``), under site-packages/cmeel.prefix."""
    import pinocchio

    prefix = Path(pinocchio.__file__).resolve()
    while prefix.name != "cmeel.prefix":
        prefix = prefix.parent
    inc = prefix / "include"
    return ([*(f"-D{d}" for d in PIN_DEFINES), f"-I{inc}", f"-I{inc / 'eigen3'}", f"-I{inc / 'urdfdom_headers'}",
             f"-I{inc / 'urdfdom'}"],
            [f"-L{prefix / 'lib'}", f"-Wl,-rpath,{prefix / 'lib'}", "-lpinocchio_parsers", "-lpinocchio_default",
             "-lurdfdom_model", "-lconsole_bridge", "-ltinyxml2"])


def pinocchio_program() -> Path:
    """The timing program, built once per content (grid_core.buildcache)."""
    import pinocchio

    from grid_core import buildcache

    compile_flags, link_flags = pinocchio_flags()
    cmd = [*buildcache.host_compiler(), "-std=c++17", "-O3", "-DNDEBUG", *compile_flags,
           "pinocchio_timing.cpp", "-o", "{out}", *link_flags]
    source = (ROOT / "benchmarks" / "src" / "pinocchio_timing.cpp").read_text()
    print("building the Pinocchio timing program (minutes the first time)...", file=sys.stderr, flush=True)
    path, _ = buildcache.build("pinocchio-timing", {"pinocchio_timing.cpp": source}, cmd, "pinocchio_timing",
                               extra={"pinocchio": pinocchio.__version__})
    return path


def spread(values) -> dict:
    v = np.asarray(values, dtype=float)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}


def time_pinocchio(program: Path, urdf: Path, floating: bool, n: int, rounds: int, frames=()) -> dict:
    """Pinocchio's ns per state, per function (``frames``: the frame names its kinematics visit)."""
    bursts: dict[str, list] = {}
    for _ in range(BURSTS):
        out = subprocess.run([str(program), str(urdf), "1" if floating else "0", str(n), str(rounds),
                              *([",".join(frames)] if frames else [])],
                             capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            name, *values = line.split()
            bursts.setdefault(name, []).append([float(v) for v in values if v != "nv"])  # first line: nq N nv N
    return {name: b[0] if name == "nq" else least_disturbed(b) for name, b in bursts.items()}


def time_ours(robot, n: int, rounds: int, rng, algorithms=None, cores: bool = True) -> dict:
    """Per emitted algorithm ``(one thread, two threads, their paired ratios)``, ns per state: the
    two handles called alternately, call by call, so that each pair meets the same load of the
    machine (on a shared VM the second core's availability drifts within minutes), and the
    speed-up taken pair by pair: one burst of ``rounds`` calls each (:func:`time_ours_apart` keeps
    the least disturbed of several processes'); ``cores``: :func:`each_core` too."""
    import grid_core
    from grid_core.testing import random_state

    from grid_core.composer import resolve_algorithms

    if algorithms is None:  # every emitted algorithm with a Pinocchio counterpart
        algorithms = [a.name for a in resolve_algorithms(None) if a.name in TIMED]
        algorithms += ["idsva_so"] if robot.name in SECOND_ORDER_ROBOTS else []
    handles = {t: grid_core.CpuHandle(robot, algorithms, threads=t) for t in (1, 2)}
    q, qd, qdd = random_state(robot, rng, n)
    tau = rng.uniform(-1, 1, qd.shape)
    values = {"q": q, "qd": qd, "qdd": qdd, "tau": tau, "dt": 0.01}
    result = {}
    for name in [a for a in handles[1]._emitted() if a in TIMED and a in algorithms]:
        result[name] = _time_pair({t: getattr(h, name) for t, h in handles.items()}, _args(robot, name, values), n,
                                  rounds, cores=cores)
    if "integrator_gradient" in algorithms:  # and generated for RK4, in a library of its own
        opts = {"algorithm_options": {"integrator_gradient": {"method": "rk4"}}}
        rk4 = {t: grid_core.CpuHandle(robot, ["integrator_gradient"], threads=t, **opts) for t in (1, 2)}
        fns = {t: (lambda *a, h=h, **k: h.integrator_gradient(*a, method="rk4", **k)) for t, h in rk4.items()}
        result[f"integrator_gradient{RK4}"] = _time_pair(fns, _args(robot, "integrator_gradient", values), n, rounds,
                                                         cores=cores)
    if "idsva_so" in result:  # and with keep_zeros=True (no store floor: filling its out= would break that)
        fns = {t: (lambda *a, h=h, out=None: h.idsva_so(*a) if out is None else h.idsva_so(*a, out=out, keep_zeros=True))
               for t, h in handles.items()}
        result[f"idsva_so{KEEP}"] = _time_pair(fns, _args(robot, "idsva_so", values), n, rounds, floor=False,
                                               cores=cores)
    return result


def _args(robot, name: str, values: dict) -> list:
    """Algorithm ``name``'s positional arguments: its required states and params."""
    import grid_core

    return [values[p.name] for p in grid_core.algorithms()[name].inputs(robot)
            if (p.kind == "state" and not p.optional) or (p.kind == "param" and p.default is None)]


def _time_pair(fns: dict, args: list, n: int, rounds: int, floor: bool = True, cores: bool = True) -> tuple:
    """``(one thread, two threads, their paired ratios, each core, store floor)`` of the calls ``fns``
    (by thread count), ns per state; the floor (:func:`store_floor`, on the one-thread call's outputs,
    timed in the same rounds) by kind: ``(ns per state, the call's paired ratios to it)``; each core
    (:func:`each_core`) only with ``cores``."""
    outs = {t: fn(*args) for t, fn in fns.items()}
    for _ in range(3):
        for t, fn in fns.items():
            fn(*args, out=outs[t])
    stores = store_floor(outs[1]) if floor else {}
    samples = {1: [], 2: [], **{k: [] for k in stores}}
    for _ in range(rounds):
        for t, fn in fns.items():
            t0 = time.perf_counter()
            fn(*args, out=outs[t])
            samples[t].append((time.perf_counter() - t0) / n * 1e9)
        for k, store in stores.items():
            t0 = time.perf_counter()
            store()
            samples[k].append((time.perf_counter() - t0) / n * 1e9)
    floors = {k: (samples[k], [a / b for a, b in zip(samples[1], samples[k])]) for k in stores} if stores else None
    return (samples[1], samples[2], [a / b for a, b in zip(samples[1], samples[2])],
            each_core(fns, args, outs, n, CORE_ROUNDS * rounds) if cores else None, floors)


def store_floor(outs) -> dict:
    """What only storing an algorithm's outputs costs, one thread, on the same buffers as the
    one-thread call's ``out=`` (timed in the same rounds as the calls): ``fill``, numpy writing
    every value of every output (plain vector stores, each line read for ownership first), and
    ``memset``, the C library's memset of them (at these sizes its non-temporal or ``rep stos``
    path, which need not read the lines).  Outputs beyond the caches (idsva_so on atlas: 864 KB a
    state, 55 MB at batch 64) make this the floor of any code that writes them; Pinocchio's
    timing writes one reused set, which stays in the caches."""
    import ctypes

    arrays = list(outs) if isinstance(outs, tuple) else [outs]

    def fill():
        for a in arrays:
            a.fill(0.5)

    def memset():
        for a in arrays:
            ctypes.memset(a.ctypes.data, 0, a.nbytes)
    return {"fill": fill, "memset": memset}


CORE_ROUNDS = 3
"""The each-core measurement takes this many times ``rounds`` rounds."""


def each_core(fns, args, outs, n: int, rounds: int) -> dict | None:
    """Two threads against one thread on each core: per round, the one-thread handle's call with
    this thread pinned to each of two CPUs in turn, then the two-thread handle's unpinned; each
    call after two untimed ones (the caches and the worker warm after a move, as calls in a loop
    find them).  A round's ratio is the mean of the two cores' one-thread times over the
    two-thread time.  On this shared VM one core alone runs the same call 1.0-1.4x slower than
    the other, and which one it is changes within minutes: the paired ratio of
    :func:`time_ours` compares two threads with whichever core the caller was on, this one with
    both.  ``None`` where this thread cannot be pinned to two CPUs.  The two-thread handle's
    worker already exists (started unpinned by the calls before)."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None
    if len(allowed) < 2:
        return None
    cores = sorted(allowed)[:2]

    def timed(fn, out):
        fn(*args, out=out)
        fn(*args, out=out)
        t0 = time.perf_counter()
        fn(*args, out=out)
        return (time.perf_counter() - t0) / n * 1e9

    times = {c: [] for c in cores}
    two = []
    try:
        for _ in range(rounds):
            for c in cores:
                os.sched_setaffinity(0, {c})
                times[c].append(timed(fns[1], outs[1]))
            os.sched_setaffinity(0, allowed)
            two.append(timed(fns[2], outs[2]))
    finally:
        os.sched_setaffinity(0, allowed)
    ratio = [(a + b) / 2 / t for a, b, t in zip(times[cores[0]], times[cores[1]], two)]
    return {"cores": {str(c): v for c, v in times.items()}, "two": two, "ratio": ratio}


def _median(values) -> float:
    return sorted(values)[len(values) // 2]


BURSTS = 5
"""Each side is measured in several bursts of ``rounds`` calls, and the burst of the smallest
median kept: on a shared 2-core VM a burst that meets another tenant's load reads up to 2x
(seen on the committed runs of d41c11c and 7763f3e); the same rule for Pinocchio and for us
(ours: one and two threads together, their medians' sum), each burst in a process of its own on
both sides (since session 49: before, ours ran its bursts in one process)."""


def least_disturbed(bursts: list[list[float]]) -> list[float]:
    return min(bursts, key=_median)


def time_ours_apart(name: str, n: int, rounds: int, algorithms=None) -> dict:
    """:func:`time_ours` as Pinocchio's side is timed: each of :data:`BURSTS` bursts in a process
    of its own (this script, ``--child``), the least disturbed kept per algorithm (the smallest sum
    of the one- and two-thread medians); the first process also times each core.  On this VM a
    process keeps its speed: atlas's integrator gradient took 13-15 us a state in some processes
    and 20-25 in others, every burst alike (the arrays at any offset in their lines, address-space
    randomisation off, alike), so bursts in one process sampled one such draw where Pinocchio's
    five processes sampled five."""
    import pickle
    import tempfile

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(BURSTS):
            path = Path(tmp) / f"{i}.pickle"
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", name, str(path), str(i == 0),
                            "--n", str(n), "--rounds", str(rounds),
                            *(["--algorithms", *algorithms] if algorithms else [])], check=True)
            runs.append(pickle.loads(path.read_bytes()))
    ours = {}
    for key in runs[0]:
        best = min(runs, key=lambda r: _median(r[key][0]) + _median(r[key][1]))[key]
        ours[key] = (*best[:3], runs[0][key][3], best[4])
    return ours


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def spread_x(s: dict | None) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})" if s else "—"


def rst_table(data: dict) -> str:
    def fmt(s):
        return f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})" if s else "—"

    lines = [
        (f"CPU results of ``benchmarks/cpu_vs_pinocchio.py``: {data['date'][:10]}, {data['cpu']} "
         f"({data['cores']} cores), commit ``{data['commit']}``, batch {data['n']}, {data['rounds']} rounds.  "
         "ns per state, median (range); *ratio*: ours on one thread over Pinocchio; *target*: the ratio to reach; "
         "*2 threads x*: the speed-up of two worker threads over one, the median (range) of the calls' paired "
         "ratios (the two handles called alternately, one thread on whichever core the caller is on); "
         "*each core*: the same against the mean of one thread's time on each of the two cores, "
         "this thread pinned to each in turn (on this VM one core alone runs 1.0-1.4x slower than the "
         "other, and which one changes within minutes)."),
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "",
    ]
    header = ["robot", "Pinocchio", "ns/state", "GRiD", "1 thread", "2 threads", "ratio", "target", "2 threads x",
              "each core"]
    lines.append("   * - " + "\n     - ".join(header))
    for row in data["rows"]:
        ours1, ours2 = row.get("ours_1"), row.get("ours_2")
        ratio = f"{ours1['median'] / row['pinocchio']['median']:.2f}" if ours1 else "—"
        holds = ours1 and ours1["median"] <= row["target"] * row["pinocchio"]["median"]
        held = "" if not ours1 else (" ✓" if holds else " ✗")
        sp = row.get("speedup_2")
        scale = (f"{sp['median']:.2f} ({sp['min']:.2f}-{sp['max']:.2f})" if sp else
                 f"{ours1['median'] / ours2['median']:.2f}" if ours1 and ours2 else "—")
        cells = [row["robot"], f"``{row['pinocchio_fn']}``", fmt(row["pinocchio"]),
                 f"``{row['ours']}``" if row["ours"] else "not generated", fmt(ours1), fmt(ours2), ratio + held,
                 f"≤ {row['target']:g}", scale, spread_x(row.get("speedup_2_cores"))]
        lines.append("   * - " + "\n     - ".join(cells))
    return "\n".join(lines) + "\n"


def each_core_summary(core: dict | None) -> dict:
    """The row's fields of :func:`each_core`: each core's one-thread time, the two-thread
    time, and the ratio (ns per state; median and range)."""
    if core is None:
        return {"speedup_2_cores": None}
    return {"ours_1_core": {c: spread(v) for c, v in core["cores"].items()}, "ours_2_cores": spread(core["two"]),
            "speedup_2_cores": spread(core["ratio"])}


def floor_summary(floor: dict | None, pin: list) -> dict:
    """The row's store floor (:func:`store_floor`): per way of storing, its ns per state, our
    one-thread time over it round by round, and it over Pinocchio's median and over Pinocchio's
    fastest round (the ratio no code that writes the outputs can go below; Pinocchio's timing,
    whose data stays in the caches, reads up to 2.7x slower while other tenants share them, so
    its fastest round is the steadier reference)."""
    if floor is None:
        return {}
    med, fastest = float(np.median(pin)), float(np.min(pin))
    return {"floor": {k: {"ns": spread(t), "ours_over_floor": spread(r), "floor_over_pinocchio": spread(np.asarray(t) / med),
                          "floor_over_pinocchio_fastest": spread(np.asarray(t) / fastest)}
                      for k, (t, r) in floor.items()}}


def floor_line(row: dict) -> str:
    """One printed line of a row's store floor."""
    parts = [f"{k} {f['ns']['median']:.0f} ns/state = {f['floor_over_pinocchio']['median']:.2f} of Pinocchio's "
             f"median ({f['floor_over_pinocchio_fastest']['median']:.2f} of its fastest round), ours "
             f"{f['ours_over_floor']['median']:.2f}x it" for k, f in row["floor"].items()]
    ratio = row["ours_1"]["median"] / row["pinocchio"]["median"]
    fastest = row["ours_1"]["min"] / row["pinocchio"]["min"]
    return (f"floor {row['robot']} {row['ours']} (storing its outputs, one thread; ours {ratio:.2f} of "
            f"{row['pinocchio_fn']}, fastest rounds {fastest:.2f}): " + "; ".join(parts))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--robots", nargs="+", default=list(ROBOTS))
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--algorithms", nargs="+", default=None,
                    help="time only these of ours (and the rows they answer); default: every emitted one")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cpu")
    ap.add_argument("--child", nargs=3, metavar=("ROBOT", "PICKLE", "CORES"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import grid_core
    from grid_core.model.frames import resolve_frames

    if args.child:  # one burst of ours (time_ours_apart), pickled
        import pickle

        name, path, cores = args.child
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            robot = grid_core.load_robot(name)
        ours = time_ours(robot, args.n, args.rounds, np.random.default_rng(0), args.algorithms, cores=cores == "True")
        Path(path).write_bytes(pickle.dumps(ours))
        return 0

    program = pinocchio_program()
    manifest = tomllib.loads((ROOT / "robots" / "robots.toml").read_text())
    rows = []
    for name in args.robots:
        entry = manifest[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            robot = grid_core.load_robot(name)
        frames = [f.name for f in resolve_frames(robot, None, "cpu_vs_pinocchio")]  # the default (leaf) frames
        pin = time_pinocchio(program, ROOT / "robots" / entry["file"], entry.get("floating_base", False), args.n,
                             args.rounds, frames)
        nq, nv = pin.pop("nq")
        if (nq, nv) != (robot.nq, robot.nv):
            raise SystemExit(f"{name}: Pinocchio's model has nq {nq:g} nv {nv:g}, ours {robot.nq} {robot.nv}")
        ours = time_ours_apart(name, args.n, args.rounds, args.algorithms)
        for fn, (candidates, target) in PAIRS.items():
            if args.algorithms and not {c.split(":")[0] for c in candidates} & set(args.algorithms):
                continue
            mine = next((c for c in candidates if c in ours), None)
            pfn = fn.split("|")[0]
            if pfn not in pin:  # a row the program left out (the [kept] sets beyond its memory bound)
                continue
            rows.append({"robot": name, "nv": robot.nv, "pinocchio_fn": pfn, "pinocchio": spread(pin[pfn]),
                         "ours": mine, "target": target,
                         **{f"ours_{t}": spread(ours[mine][k]) if mine else None for k, t in ((0, 1), (1, 2))},
                         "speedup_2": spread(ours[mine][2]) if mine else None,
                         **each_core_summary(ours[mine][3] if mine else None),
                         **floor_summary(ours[mine][4] if mine else None, pin[pfn])})
            if mine and "floor" in rows[-1]:
                print(floor_line(rows[-1]), flush=True)
        print(f"{name}: done", file=sys.stderr, flush=True)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else "?"
    data = {"date": stamp, "commit": commit(), "cpu": cpu, "cores": os.cpu_count(), "n": args.n,
            "rounds": args.rounds, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stamp[:10]}_{data['commit']}.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "cpu_vs_pinocchio.rst").write_text(rst_table(data))
    print(rst_table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
