"""The tuner: from a GPU run's timings to the measured choices of ``<module>.tuning.json``.

``benchmarks/gpu_check.sh`` times every emitted algorithm (``benchmarks/src/bench.cu``, one row
per robot, batch size N and layout) on the robots and on forced variants of them, labelled
``<robot>-<form>`` (``iiwa14-bodies``: the per-body sweep form of P1; ``g1-occ2``: two blocks an
SM; ``atlas-staged`` / ``atlas-plain``: an A/B of one option).  This module turns those rows into
the entry of each robot: the batch from which the per-state layout takes over
(``per_state_min_n``), the P1 sweep form, the per-state occupancy, the A/B options, and forward
dynamics' method.  The composer reads the file back (:func:`grid_core.composer.tuning_for`) and
bakes the entry into the robot's header.

Every pick compares the CUDA-graph replay of one launch (:data:`METRIC`), keeps a default unless
the alternative is more than 3% faster (the noise of a quiet H200), and keeps what is on file
where this run measured no alternative.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Protocol

METRIC = "graph_us"
"""What the tuner compares: the CUDA-graph replay of one launch (the launch's own time without the
host's enqueue jitter, which moves a single event-timed launch by up to a microsecond)."""
NOISE = 0.97
"""An alternative replaces a default only when faster than this fraction of it."""
SLOWER = 1.03
"""A form takes over from a batch size on only when never slower than this multiple of the other."""


class Forms(Protocol):
    """An A/B of one generate option: its forms (the label suffix of each forced build) and the
    option's value in each."""

    option: str
    forms: dict


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def crossover(k: dict) -> int | None:
    """The smallest N from which the per-state layout is never slower than one block per state
    (``k``: µs by (N, layout)), or None."""
    sizes = sorted({n for n, _ in k})
    for n in sizes:
        if (n, "block") in k and all(k[(m, "per_state")] <= k[(m, "block")]
                                     for m in sizes if m >= n and (m, "block") in k):
            return n
    return None


def pick_method(entry: dict, rows: list, robot: str) -> None:
    """Forward dynamics by Minv (tau - bias) or by ABA: the method whose auto-layout times have
    the smaller geometric mean over the batch sizes both were timed at (the rows of
    forward_dynamics, built by Minv, and of aba).  With ABA the crossover is aba's own."""

    def auto(alg):
        return {x["n"]: x[METRIC] for x in rows if x.get("algorithm") == alg and x["robot"] == robot
                and x["layout"] == "auto"}

    fd, aba = auto("forward_dynamics"), auto("aba")
    common = sorted(set(fd) & set(aba))
    if not common:
        return
    gm = {m: geomean(t[n] for n in common) for m, t in (("minv", fd), ("aba", aba))}
    entry["method"] = min(gm, key=gm.get)
    entry["method_ab_geomean_us"] = {m: round(v, 3) for m, v in gm.items()}
    entry["method_ab_sizes"] = common
    if entry["method"] == "aba":
        cross = crossover({(x["n"], x["layout"]): x[METRIC] for x in rows
                           if x.get("algorithm") == "aba" and x["robot"] == robot})
        if cross is not None:
            entry["per_state_min_n"] = cross


def pick_min_n(entry: dict, rows: list, robot: str, on_file: dict, mode: str, ab: Forms) -> None:
    """From which batch the first form of A/B ``mode`` (staged vs plain, ring vs per-thread
    stores) takes over from the second: the smallest N from which it is never slower than
    :data:`SLOWER` times the second, as the A/B's option, with its figures (``rows``: the
    algorithm's)."""
    fast, slow = ab.forms
    t = {form: {x["n"]: x[METRIC] for x in rows if x["robot"] == f"{robot}-{form}"} for form in (fast, slow)}
    common = sorted(set(t[fast]) & set(t[slow]))
    figures = f"{mode}_ab_us"
    if not common:
        entry.update({k: on_file[k] for k in (ab.option, figures) if k in on_file})
        return
    entry[ab.option] = next((n for n in common if all(t[fast][m] <= SLOWER * t[slow][m] for m in common if m >= n)),
                            max(common) + 1)
    entry[figures] = {str(n): {fast: t[fast][n], slow: t[slow][n]} for n in common}


def _fastest(times: dict, default, least_n: int = 0) -> tuple:
    """Of ``times`` (form -> {batch size: us}), over the sizes from ``least_n`` where every form was
    timed: the form of smallest geometric mean, ``default`` unless another is faster beyond the
    noise; with the means by form and those sizes.  ``(None, {}, [])`` where no size is common."""
    common = [n for n in sorted(set.intersection(*(set(v) for v in times.values()))) if n >= least_n]
    if not common:
        return None, {}, []
    gm = {form: geomean(t[n] for n in common) for form, t in times.items()}
    best = min(gm, key=gm.get)
    if gm[best] > NOISE * gm[default]:
        best = default
    return best, gm, common


def pick_form(entry: dict, rows: list, robot: str, on_file: dict, mode: str, ab: Forms, default: str,
              least_n: int = 0) -> None:
    """The form of A/B ``mode`` whose per-state times (``rows``: the algorithm's) have the
    smallest geometric mean over the batch sizes from ``least_n`` where every form was timed;
    ``default`` unless another is faster beyond the noise.  Its option's value and the means go
    into ``entry``."""
    t = {form: {x["n"]: x[METRIC] for x in rows if x["robot"] == f"{robot}-{form}" and x["layout"] == "per_state"}
         for form in ab.forms}
    best, gm, common = _fastest(t, default, least_n)
    figures = f"{mode}_ab_geomean_us"
    if not common:
        entry.update({k: on_file[k] for k in (ab.option, figures) if k in on_file})
        return
    entry[ab.option] = ab.forms[best]
    entry[figures] = {form: round(v, 3) for form, v in gm.items()}
    entry[f"{mode}_ab_sizes"] = common


def pick_block_occupancy(entry: dict, rows: list, robot: str, on_file: dict, occupancies: Iterable[int]) -> None:
    """The blocks an SM asked of the block kernel at TIER_SHARED (``block_min_blocks``): the one of
    smallest geometric mean over the sizes where the default (``rows`` of ``robot``, 1) and each of
    ``occupancies`` (``<robot>-bocc<k>``) were timed in the block layout; 1 unless another is
    faster beyond the noise.  The choice and the means go into ``entry``; without this run's A/B,
    the entry on file's."""
    t = {1: {x["n"]: x[METRIC] for x in rows if x["robot"] == robot and x["layout"] == "block"}}
    for occ in occupancies:
        t[occ] = {x["n"]: x[METRIC] for x in rows if x["robot"] == f"{robot}-bocc{occ}" and x["layout"] == "block"}
    t = {o: v for o, v in t.items() if v}
    best, gm, common = _fastest(t, 1) if 1 in t and len(t) > 1 else (None, {}, [])
    if not common:
        entry.update({k: on_file[k] for k in ("block_min_blocks", "block_occupancy_ab_geomean_us") if k in on_file})
        return
    entry["block_min_blocks"] = best
    entry["block_occupancy_ab_geomean_us"] = {str(o): round(v, 3) for o, v in gm.items()}
    entry["block_occupancy_ab_sizes"] = common


def tune_entry(alg: str, robot, rows: list, on_file: dict, *, modes: dict, occupancies: Iterable[int] = (),
               block_occupancies: Iterable[int] = (), staged: bool = False, has_ring: bool = False,
               gpu: str = "") -> dict | None:
    """The tuning entry of ``robot`` (a Robot) for algorithm ``alg`` from a run's ``rows`` (every
    algorithm's: forward dynamics reads aba's), or None where the run timed neither layout.
    ``on_file``: the robot's entry on file (kept where this run measured no alternative);
    ``modes``: the A/Bs by name (``stage``, ``ring``, ``ringflush``, each with its
    option and forms); ``occupancies``: the per-state blocks an SM timed as ``<robot>-occ<k>``;
    ``staged``: whether the algorithm stages by default (its stage and ring A/Bs apply);
    ``has_ring``: whether the robot's header has the algorithm's ring."""
    r = robot.name
    mine = [x for x in rows if x.get("algorithm", "inverse_dynamics") == alg]
    k = {(x["n"], x["layout"]): x[METRIC] for x in mine if x["robot"] == r}
    kb = {x["n"]: x[METRIC] for x in mine if x["robot"] == f"{r}-bodies" and x["layout"] == "block"}
    sizes = sorted({n for n, _ in k})
    if not sizes:
        return None
    cross = crossover(k)
    levels_256, bodies_256 = k.get((256, "block")), kb.get(256)
    if levels_256 is None or bodies_256 is None:  # no P1 A/B in this run: the measured one on file
        p1 = on_file.get("p1", "levels")
    else:
        p1 = "levels" if levels_256 <= bodies_256 else "bodies"
    entry = {"digest": robot.digest[:16], "per_state_min_n": cross if cross is not None else max(sizes) + 1}
    # occupancy of the per-state kernel: the fastest at the largest batch where this run measured
    # the alternatives; within the noise of the default the compiler's register budget stays
    big = max(sizes)
    occ_times = {1: k.get((big, "per_state"))}
    for occ in occupancies:
        for x in mine:
            if x["robot"] == f"{r}-occ{occ}" and x["n"] == big and x["layout"] == "per_state":
                occ_times[occ] = x[METRIC]
    occ_times = {o: t for o, t in occ_times.items() if t is not None}
    if len(occ_times) > 1:
        best = min(occ_times, key=occ_times.get)
        if 1 in occ_times and occ_times[best] > NOISE * occ_times[1]:
            best = 1
        entry.update(per_state_min_blocks=best, per_state_occupancy_ab_us={str(o): t for o, t in occ_times.items()})
    elif "per_state_min_blocks" in on_file:
        entry.update({key: on_file[key] for key in ("per_state_min_blocks", "per_state_occupancy_ab_us")
                      if key in on_file})
    if bodies_256 is None and "ab_block_n256_us" in on_file:
        # no P1 A/B in this run: the A/B on file stays with the choice it made
        entry.update({key: on_file[key] for key in ("ab_block_n256_us", "ab_block_n1024_us") if key in on_file},
                     p1=p1, gpu=gpu)
    else:
        entry.update(p1=p1, ab_block_n256_us={"levels": levels_256, "bodies": bodies_256},
                     ab_block_n1024_us={"levels": k.get((1024, "block")), "bodies": kb.get(1024)}, gpu=gpu)
    pick_block_occupancy(entry, mine, r, on_file, block_occupancies)
    if alg == "forward_dynamics":
        pick_method(entry, rows, r)
    if staged:
        for mode in ("stage", "ring"):
            pick_min_n(entry, mine, r, on_file, mode, modes[mode])
        if has_ring:
            ring_from = entry.get("per_state_ring_min_n", on_file.get("per_state_ring_min_n", 0))
            pick_form(entry, mine, r, on_file, "ringflush", modes["ringflush"], "flushgroups", max(ring_from, 4096))
    return entry


def write_tuning(path: Path, robots: dict, *, gpu: str = "") -> dict:
    """Merge ``robots`` (entries by robot name) into the tuning file at ``path`` (robots this run
    did not measure keep theirs) and write it."""
    on_file = json.loads(path.read_text()).get("robots", {}) if path.exists() else {}
    tuning = {"note": "measured by benchmarks/gpu_check.sh; baked into headers by the composer",
              "robots": {**on_file, **robots}}
    path.write_text(json.dumps(tuning, indent=1) + "\n")
    return tuning
