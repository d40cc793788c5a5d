"""Documentation-local Sphinx extension of GRiD: the benchmark results page and the
optional reference-timings page.

* ``_generated/benchmark_results.inc`` (included by ``benchmarks.rst``): plots and
  tables of the committed GPU results, ``benchmarks/results/*.json`` as written by
  ``benchmarks/gpu_check.py``, held against the upstream anchors that module quotes
  (``UPSTREAM_H200_KERNEL``, ``UPSTREAM_5090``: upstream rebuilt on the H200, and its published RTX 5090 figures).  With no
  result committed yet the page says so.  A run's ``"peers"`` rows (``benchmarks/peers.py``:
  ours against MJX in the same run) get a plot per algorithm, times and the ratio, and a
  table with the agreement, beside the peers' published figures the run quotes.  Plots are
  drawn with matplotlib (Agg): no GPU, no network.
* ``_generated/reference_timings.rst``: when ``docs/reference_timings.md`` exists, a page
  showing it, linked from the index through ``grid-optional-toctree``.  The docs stay
  reStructuredText without a Markdown parser: the small subset that page uses (headings,
  paragraphs, lists, pipe tables, code spans and fences) is converted here, and a file
  whose conversion is not clean reStructuredText is shown as written, in a literal block.
* ``grid-optional-toctree``: a toctree that keeps only the entries whose document
  exists, so an optional page is linked when present and a build without it stays
  free of warnings.
* ``grid-run-example``: a script of ``examples/``, its source and its output, run while the
  docs build (the training guide's PyTorch and JAX examples).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.directives.other import TocTree
from sphinx.util import logging

from grid_core.sphinxext import escape, heading, list_table

GENERATED = "_generated"
ROBOT_ORDER = ["iiwa14", "hyq", "atlas", "go2", "g1"]
logger = logging.getLogger(__name__)


# -- optional toctree -------------------------------------------------------------------


class OptionalTocTree(TocTree):
    """``toctree`` without its entries whose document does not exist."""

    def run(self):
        from sphinx.util import docname_join

        found = self.env.found_docs
        keep = [line for line in self.content
                if not line.strip() or docname_join(self.env.docname, line.strip()) in found]
        self.content = StringList(keep, source=self.content.source(0) if self.content else "")
        return super().run()


# -- upstream anchors -------------------------------------------------------------------


@functools.cache
def _gpu_check(root: Path):
    """benchmarks/gpu_check.py as a module (None where the tree has none): the one source of the
    anchors and of the rules its summary judges them by."""
    path = root / "benchmarks" / "gpu_check.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_grid_gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def anchors(root: Path) -> tuple[dict, dict]:
    """``(UPSTREAM_H200_KERNEL, UPSTREAM_5090)`` from benchmarks/gpu_check.py (one source)."""
    module = _gpu_check(root)
    return getattr(module, "UPSTREAM_H200_KERNEL", {}), getattr(module, "UPSTREAM_5090", {})


def per_algorithm(rtx5090: dict) -> bool:
    """Whether the published 5090 figures are by algorithm (``{alg: {robot: {N: ...}}}``); older
    runs' module kept them flat, for inverse dynamics (``{robot: {N: ...}}``)."""
    return bool(rtx5090) and all(isinstance(v, dict) and all(isinstance(k, str) for k in v)
                                 for v in rtx5090.values())


# -- benchmark results ----------------------------------------------------------------


def _robots(rows) -> list[str]:
    names = {r["robot"] for r in rows if "-" not in r["robot"]}
    return sorted(names, key=lambda x: (ROBOT_ORDER.index(x) if x in ROBOT_ORDER else 99, x))


def _us(x) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x) or x < 0)):
        return "\\-"
    return f"{x:.2f}"


def plot_robot(rows, robot: str, h200: dict, rtx5090: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=110)
    mine = [r for r in rows if r["robot"] == robot]
    styles = {"auto": ("C0", "o", "kernel, auto layout"), "block": ("C1", "s", "kernel, block layout"),
              "per_state": ("C2", "^", "kernel, per-state layout")}
    for layout, (color, marker, label) in styles.items():
        pts = sorted((r["n"], r["kernel_us"]) for r in mine if r["layout"] == layout)
        if pts:
            ax.plot(*zip(*pts), marker=marker, color=color, label=label, lw=1.6 if layout == "auto" else 1.0,
                    ms=4, alpha=1.0 if layout == "auto" else 0.7)
    graph = sorted((r["n"], r["graph_us"]) for r in mine if r["layout"] == "auto" and r.get("graph_us", -1) > 0)
    if graph:
        ax.plot(*zip(*graph), color="C4", ls="-.", lw=1.0, label="CUDA-graph replay, auto layout")
    empty = sorted((r["n"], r["empty_us"]) for r in mine if r["layout"] == "auto")
    if empty:
        ax.plot(*zip(*empty), color="0.45", ls="--", lw=1.2, label="empty kernel (launch floor)")
    if robot in h200:
        ax.plot(list(h200[robot]), list(h200[robot].values()), ls="none", marker="X", ms=8, color="C3",
                label="upstream GRiD on the H200, kernel")
    if robot in rtx5090:
        pts = rtx5090[robot]
        ax.plot(list(pts), [v[0] for v in pts.values()], ls="none", marker="D", ms=6, mfc="none", color="C5",
                label="upstream GRiD, RTX 5090, resident (host-timed, §A)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size N (states)")
    ax.set_ylabel("time per launch (µs)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _robot_table(rows, robot: str, h200: dict, rtx5090: dict) -> list[str]:
    out = []
    table = []
    for r in sorted((x for x in rows if x["robot"] == robot and x["layout"] == "auto"), key=lambda x: x["n"]):
        n = r["n"]
        up = []
        if n in h200.get(robot, {}):
            up.append(f"H200 kernel {h200[robot][n]}")
        if n in rtx5090.get(robot, {}):
            res, host = rtx5090[robot][n]
            up.append(f"5090 resident {res} / host {host}")
        kernel, empty = r.get("kernel_us"), r.get("empty_us")
        table.append([str(n), r.get("resolved", "\\-"), _us(kernel), _us(empty),
                      _us(kernel - empty if kernel is not None and empty is not None else None),
                      _us(r.get("graph_us")), _us(r.get("graph_empty_us")), _us(r.get("resident_us")),
                      _us(r.get("io_us")), escape("; ".join(up)) or "\\-"])
    if table:
        out += list_table(["N", "auto picks", "kernel", "empty", "kernel - empty", "graph", "graph empty", "resident",
                           "with I/O", "upstream (µs)"], table)
    return out


def _ab_table(rows) -> list[str]:
    """The P1 A/B: level-batched sweeps (the default build) vs one body per step."""
    table = []
    for robot in _robots(rows):
        for r in sorted((x for x in rows if x["robot"] == f"{robot}-bodies" and x["layout"] == "block"),
                        key=lambda x: x["n"]):
            lv = next((x for x in rows if x["robot"] == robot and x["layout"] == "block" and x["n"] == r["n"]), None)
            table.append([robot, str(r["n"]), _us(lv["kernel_us"] if lv else None), _us(r["kernel_us"])])
    if not table:
        return []
    return [".. rubric:: P1 A/B, block layout: the default build (level-batched sweeps unless the baked tuning "
            "chose otherwise) vs one body per step (kernel µs)", "",
            *list_table(["robot", "N", "default build", "one body per step"], table)]


def _variants_table(rows) -> list[str]:
    """Other build variants of the run (``ROBOT-LABEL`` rows, e.g. an occupancy knob), each
    beside the default build at the same N and layout."""
    table = []
    for r in sorted((x for x in rows if "-" in x["robot"] and not x["robot"].endswith("-bodies")),
                    key=lambda x: (x["robot"], x["layout"], x["n"])):
        base_name = r["robot"].split("-", 1)[0]
        base = next((x for x in rows if x["robot"] == base_name and x["layout"] == r["layout"]
                     and x["n"] == r["n"]), None)
        table.append([escape(r["robot"]), str(r["n"]), escape(r["layout"]), _us(r["kernel_us"]),
                      _us(base["kernel_us"] if base else None)])
    if not table:
        return []
    return [".. rubric:: Other build variants (kernel µs, beside the default build)", "",
            *list_table(["variant", "N", "layout", "variant", "default"], table)]


def _runtime_tables(runtime: dict) -> list[str]:
    """The Python runtime's own measurements, when the run recorded them."""
    out = []
    build = runtime.get("build") or {}
    if build:
        out += [".. rubric:: RobotHandle build time (s): first build, then from the cache", "",
                *list_table(["robot", "cold", "warm"],
                            [[escape(r), _us(v.get("cold_s")), _us(v.get("warm_s"))] for r, v in build.items()])]
    rows = runtime.get("overhead") or []
    if rows:
        keys = [k for k, v in rows[0].items()
                if k not in ("robot", "n") and isinstance(v, (int, float)) and not isinstance(v, bool)]
        out += [".. rubric:: Per call through Python (µs), beside the kernel alone", "",
                *list_table(["robot", "N", *(escape(k.removesuffix("_us")) for k in keys)],
                            [[escape(r["robot"]), str(r["n"]), *(_us(r.get(k)) for k in keys)] for r in rows])]
    rows = runtime.get("algorithms") or []
    if rows:
        out += [".. rubric:: Every algorithm through RobotHandle (µs, float32): numpy in and out beside the C++ host "
                "wrapper with copies; torch CUDA tensors in and out beside launch + synchronise", "",
                *list_table(["robot", "algorithm", "N", "numpy", "io C++", "torch", "resident C++"],
                            [[escape(r["robot"]), escape(r["algorithm"]), str(r["n"]), _us(r.get("numpy_us")),
                              _us(r.get("io_us")), _us(r.get("torch_us")), _us(r.get("resident_us"))] for r in rows])]
    return out


def plot_peers(rows, path: Path, title: str) -> None:
    """Left: time per call against N, ours and the peer's, one colour per robot; right: the
    ratio peer / ours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_ratio) = plt.subplots(1, 2, figsize=(9.0, 4.0), dpi=110)
    for k, robot in enumerate(_robots(rows)):
        mine = sorted((r for r in rows if r["robot"] == robot), key=lambda r: r["N"])
        for key, style, label in (("grid_us", "-", "GRiD"), ("peer_us", "--", "MJX")):
            pts = [(r["N"], r[key]) for r in mine if r.get(key)]
            if pts:
                ax.plot(*zip(*pts), ls=style, marker="o" if key == "grid_us" else "s", ms=4, color=f"C{k}",
                        label=f"{label}, {robot}")
        pts = [(r["N"], r["peer_us"] / r["grid_us"]) for r in mine if r.get("grid_us") and r.get("peer_us")]
        if pts:
            ax_ratio.plot(*zip(*pts), marker="o", ms=4, color=f"C{k}", label=robot)
    ax.set_yscale("log")
    ax.set_ylabel("time per call (µs)")
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    ax_ratio.axhline(1.0, color="0.45", ls=":", lw=1.0)
    ax_ratio.set_ylabel("MJX time / GRiD time")
    ax_ratio.set_ylim(bottom=0)
    ax_ratio.legend(fontsize=7, loc="upper left")
    for a in (ax, ax_ratio):
        a.set_xscale("log")
        a.set_xlabel("batch size N (states)")
        a.grid(True, which="both", lw=0.3, alpha=0.5)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def kernel_note(rows) -> str | None:
    """What the *GRiD kernel* column is, from how the run measured it (None: not measured)."""
    methods = {r["grid_kernel_method"] for r in rows if r.get("grid_kernel_us") is not None}
    if not methods:
        return None
    how = ("replayed from a CUDA graph" if methods == {"graph"} else
           "; ".join(sorted(escape(m) for m in methods)))
    return f"  *GRiD kernel* is our call alone on torch tensors, timed by CUDA events: {how}."


def _err(x) -> str:
    return "\\-" if x is None else f"{x:.1e}"


def peers_section(d: dict, path: Path, outdir: Path) -> list[str]:
    """The peer rows of one run (``benchmarks/peers.py``): per algorithm a plot and a table of
    ours against MJX with the ratio and the agreement; then the peers' published figures, as the
    run quotes them."""
    rows = d.get("peers") or []
    vers = d.get("versions") or {}
    out = [f"Measured in one run: {escape(d.get('backend', 'RobotHandle'))} against MJX "
           f"{escape(vers.get('mujoco-mjx') or '?')} (MuJoCo {escape(vers.get('mujoco') or '?')}, JAX "
           f"{escape(vers.get('jax') or '?')}), {escape(d.get('dtype', 'float32'))}"
           + (f" (JAX's float32 dot products at precision *{escape(d['matmul_precision'])}*)" if d.get("matmul_precision") else "")
           + ", the same robots and random "
           f"states; {escape(d.get('timing', ''))}.  Times in µs; *MJX / GRiD* is the ratio of the two; the "
           "errors are relative, ours against MJX over the batch, and each against our float64 reference."
           + (kernel_note(rows) or ""), ""]
    for alg in sorted({r["algorithm"] for r in rows}, key=lambda a: (a != "inverse_dynamics", a)):
        mine = [r for r in rows if r["algorithm"] == alg]
        img = outdir / f"bench_peers_{path.stem}_{alg}.png"
        plot_peers(mine, img, f"{alg}: GRiD and MJX, {d.get('dtype', 'float32')} — {d.get('gpu', '?')}, "
                              f"{d.get('date', '?')[:10]}")
        calls = sorted({(r.get("grid_call") or alg, r.get("peer_call") or r.get("peer", "MJX")) for r in mine})
        chunks = sorted({(r["robot"], r["peer_chunk"]) for r in mine if r.get("peer_chunk")})
        out += [f".. rubric:: {alg}", "",
                "; ".join(f"GRiD ``{ours}``, against {escape(theirs)}" for ours, theirs in calls)
                + "".join(f"; MJX on {escape(robot)} through ``jax.lax.map``, {c} states at a time" for robot, c in chunks)
                + ".", "",
                f".. image:: /{GENERATED}/{img.name}", f"   :alt: {alg}, GRiD and MJX, time vs N", "   :width: 100%", ""]
        # K calls on distinct batches in one jax.jit (peers.py --calls): JAX's dispatch paid once for K
        ks = sorted({r["calls"] for r in mine if r.get("calls")})
        table = []
        for r in sorted(mine, key=lambda r: (_robots(mine).index(r["robot"]), r["N"])):
            ratio = r.get("ratio") or (r["peer_us"] / r["grid_us"] if r.get("grid_us") and r.get("peer_us") else None)
            table.append([escape(r["robot"]), str(r["N"]), _us(r.get("grid_us")), _us(r.get("peer_us")),
                          f"{ratio:.1f}x" if ratio else "\\-", _us(r.get("grid_kernel_us")), _err(r.get("rel_err")),
                          f"{_err(r.get('ref_err_grid'))} / {_err(r.get('ref_err_peer'))}"]
                         + ([_us(r.get("grid_us_calls")), _us(r.get("peer_us_calls")),
                             f"{r['ratio_calls']:.1f}x" if r.get("ratio_calls") else "\\-"] if ks else []))
        k = "/".join(map(str, ks))
        if ks:
            out += [f"*{k} calls*: each side called {k} times on distinct batches in one ``jax.jit``, time per "
                    "call (JAX's dispatch paid once for them all), where the row was timed so.", ""]
        out += list_table(["robot", "N", "GRiD", "MJX", "MJX / GRiD", "GRiD kernel", "GRiD vs MJX",
                           "vs reference: GRiD / MJX"]
                          + ([f"GRiD, {k} calls", f"MJX, {k} calls", f"MJX / GRiD, {k} calls"] if ks else []), table)
    published = d.get("peers_published") or []
    if published:
        out += [".. rubric:: MuJoCo Warp: published, not measured here", "",
                "warp-lang is too large to carry to the GPU machine; its own published figures, on its "
                "own GPU, in ns per world:", ""]
        out += list_table(["peer", "robot", "worlds", "algorithm", "ns per world", "GPU, date", "status"],
                          [[escape(p["peer"]), escape(p["robot"]), str(p["worlds"]), escape(p["algorithm"]),
                            f"{p['ns_per_world']:g}", escape(f"{p.get('gpu', '?')}, {p.get('date', '?')}"),
                            escape(p.get("label", ""))] for p in published])
    return out


def _baked_fd_method(root: Path | None, robot: str) -> str:
    """Forward dynamics' method the tuning file bakes into ``robot``'s header today, by the rule of
    ``root``'s gpu_check (``minv`` where there is none or the robot does not load)."""
    module = _gpu_check(root) if root is not None else None
    if module is None:
        return "minv"
    try:
        return module._baked_method(robot)
    except Exception as exc:  # a robot that no longer loads: its cells keep the Minv rows
        logger.warning(f"grid_docs: forward dynamics' method of {robot}: {exc}")
        return "minv"


def anchor_table(data: list, rtx5090: dict, root: Path | None = None) -> list[str]:
    """Each cell of upstream's published release table (``rtx5090``: µs by algorithm,
    robot and N, resident / host) beside the newest run of ``data`` (``(path, run)`` pairs, newest
    first) that timed it: ours resident (host-timed launch and synchronisation, the auto layout as
    that run's header resolved it) and with copies (the host layer), and the fastest layout that run
    timed, resident.  A cell is beaten when both of ours (auto) are below upstream's.

    The bench builds forward dynamics by Minv (tau - bias) beside aba, so that its tune phase can
    pick between them; a robot whose tuning bakes ABA into its header ships aba's code, and its
    forward-dynamics cells are judged on the aba rows (the rule of gpu_check's targets, read from
    ``root``'s benchmarks/gpu_check.py)."""
    table, beaten, timed = [], 0, 0
    for alg, robots in rtx5090.items():
        if alg == "aba":  # the same table as forward dynamics (the same quantity, qdd)
            continue
        for robot, cells in robots.items():
            timed_as = "aba" if alg == "forward_dynamics" and _baked_fd_method(root, robot) == "aba" else alg
            label = alg if timed_as == alg else f"{alg} (by ABA: the aba rows)"
            for n, (up_res, up_host) in sorted(cells.items()):
                run, rows = next(((d, rows) for _, d in data
                                  if (rows := [r for r in d.get("time") or [] if r.get("algorithm", "inverse_dynamics")
                                               == timed_as and r["robot"] == robot and r["n"] == n])), (None, []))
                auto = next((r for r in rows if r["layout"] == "auto"), None)
                if auto is None:
                    table.append([label, robot, str(n), "not timed", "\\-", f"{up_res:g}", "\\-", f"{up_host:g}",
                                  "\\-", "\\-"])
                    continue
                fastest = min((r for r in rows if r.get("resident_us", -1) > 0), key=lambda r: r["resident_us"])
                res, io = auto["resident_us"], auto.get("io_us", -1)
                timed += 1
                won = res < up_res and 0 < io < up_host
                beaten += won
                verdict = "yes" if won else ("resident only" if res < up_res else
                                             ("with copies only" if 0 < io < up_host else "no"))
                table.append([label, robot, str(n), f"{_us(res)} ({auto.get('resolved', '?')})",
                              f"{_us(fastest['resident_us'])} ({fastest.get('resolved', fastest['layout'])})", f"{up_res:g}", _us(io),
                              f"{up_host:g}", verdict, escape(f"{run.get('gpu', '?').split(',')[0]}, "
                                                             f"{run.get('date', '?')[:10]}")])
    if not table:
        return []
    return [".. rubric:: Against upstream's published release (RTX 5090)", "",
            f"Of the {sum(len(c) for a, r in rtx5090.items() if a != 'aba' for c in r.values())} cells of "
            "upstream's published table (float32, µs), the newest runs timed "
            f"{timed}; {beaten} of them are beaten both resident and with copies by the layout the header "
            "picked.  The GPUs differ (upstream's figures are an RTX 5090's; ours the GPU named in each "
            "row), so a cell compares loosely, not like for like.  *Fastest layout* is the best of the "
            "three layouts the run timed at that N (the layout choice baked into a header comes from the "
            "tuning files and can differ from what the run's header picked).", "",
            *list_table(["algorithm", "robot", "N", "ours resident (layout)", "fastest layout, resident",
                         "upstream resident", "ours with copies", "upstream with copies", "beaten", "run"], table)]


def _algorithms_of(d: dict) -> list[str]:
    rows = d.get("time") or []
    return sorted({r.get("algorithm", "inverse_dynamics") for r in rows}, key=lambda a: (a != "inverse_dynamics", a))


def _run_body(path: Path, d: dict, outdir: Path, h200: dict, rtx5090: dict,
              parts=("time", "peers", "runtime", "fused", "tuning"), only: str | None = None,
              robots: set[str] | None = None) -> list[str]:
    """The plots and tables of one run, those of ``parts`` only (the timings of algorithm ``only``
    and of ``robots`` only, with their variants such as ``atlas-ring``, where given)."""
    out: list[str] = []
    all_rows = [r for r in d.get("time") or [] if robots is None or _robot_of(r["robot"], robots)]
    algs = [a for a in _algorithms_of(d) if only is None or a == only]
    if "time" in parts:
        for alg in algs:
            rows = [r for r in all_rows if r.get("algorithm", "inverse_dynamics") == alg]
            # anchors: upstream on the H200 measured inverse dynamics only; the published 5090 figures
            # are per algorithm (older runs' module kept them flat, for inverse dynamics)
            h200_a = h200 if alg == "inverse_dynamics" else {}
            rtx_a = rtx5090.get(alg, {}) if per_algorithm(rtx5090) else (rtx5090 if alg == "inverse_dynamics" else {})
            if len(algs) > 1:
                out += heading(alg, "~")
            for robot in _robots(rows):
                img = outdir / f"bench_{path.stem}_{alg}_{robot}.png"
                plot_robot(rows, robot, h200_a, rtx_a, img,
                           f"{alg}, {robot}, float32 — {d.get('gpu', '?')}, {d.get('date', '?')[:10]}")
                out += heading(f"{alg}, {robot}", "^" if len(algs) > 1 else "~")
                out += [f".. image:: /{GENERATED}/{img.name}", f"   :alt: {alg} kernel time vs N, {robot}",
                        "   :width: 100%", ""]
                out += _robot_table(rows, robot, h200_a, rtx_a)
            out += _ab_table(rows)
            out += _variants_table(rows)
    if "peers" in parts and d.get("peers"):
        out += peers_section(d, path, outdir)
    if "runtime" in parts and isinstance(d.get("runtime"), dict):
        out += _runtime_tables(d["runtime"])
    fused = d.get("fused")
    if "fused" in parts and isinstance(fused, dict) and "fused_us" in fused:
        ratio = fused["layered_us"] / fused["fused_us"] if fused.get("fused_us") else float("nan")
        out += [".. rubric:: Fused control step (examples/cuda/fused_control_step)", "",
                *list_table(["robot", "batch", "fused µs", "layered µs", "ratio", "upstream (RTX 5090)"],
                            [["iiwa14", str(fused.get("batch", "?")), _us(fused["fused_us"]),
                              _us(fused["layered_us"]), f"{ratio:.2f}x", "7.65 / 28.70 µs, 3.75x"]])]
    tunings = d.get("tuning") or {}
    if "robots" in tunings:  # older runs: inverse dynamics only
        tunings = {"inverse_dynamics": tunings}
    for alg, tun in tunings.items():
        tuning = (tun or {}).get("robots") or {}
        if "tuning" in parts and tuning:
            out += [f".. rubric:: Tuning baked into the header (grid_algorithms/{alg}.tuning.json)", "",
                    *list_table(["robot", "per-state layout from N", "P1 sweep form", "block N=256: levels / bodies µs"],
                                [[r, str(v.get("per_state_min_n")), str(v.get("p1")),
                                  f"{_us((v.get('ab_block_n256_us') or {}).get('levels'))} / "
                                  f"{_us((v.get('ab_block_n256_us') or {}).get('bodies'))}"]
                                 for r, v in tuning.items()])]
    return out


def results_text(root: Path, outdir: Path) -> str:
    """The reStructuredText of the results section; writes the plots into ``outdir``."""
    results = sorted((root / "benchmarks" / "results").glob("*.json"))
    if not results:
        return "\n".join([
            ".. note::", "",
            "   No benchmark results are committed yet: ``benchmarks/results/`` holds no JSON file.  "
            "``bash benchmarks/gpu_check.sh`` on a GPU machine writes one "
            "(``benchmarks/results/<date>_<gpu>_<commit>.json``); this page plots it at the next build.",
            "",
        ])
    h200, rtx5090 = anchors(root)
    data = []
    for path in results:
        try:
            data.append((path, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError) as exc:
            logger.warning(f"grid_docs: cannot read benchmark result {path}: {exc}")
    data.sort(key=lambda pd: pd[1].get("date", ""), reverse=True)
    out = []

    def compilers(d: dict) -> str:  # the run's toolchain, where it recorded one (runs since session 52)
        tc = d.get("toolchain") or {}
        return escape(f"nvcc {tc['nvcc']}, ptxas {tc['ptxas']} {tc['ptxas_flags']}") if "nvcc" in tc else "\\-"

    runs = [[literal_path(p.name), escape(d.get("date", "?")), escape(d.get("gpu", "?")), compilers(d),
             f"``{d.get('commit', '?')}``", escape("; ".join(f"{k} {v}" for k, v in d.get("phases", {}).items()))]
            for p, d in data]
    # the page opens with a summary: of each kind of result, the newest run that has it
    out += heading("Summary: the newest results", "-")
    out += anchor_table(data, rtx5090 if per_algorithm(rtx5090) else {}, root)
    algs = sorted({a for _, d in data for a in _algorithms_of(d)}, key=lambda a: (a != "inverse_dynamics", a))
    def algorithm_of(r: dict) -> str:
        return r.get("algorithm", "inverse_dynamics")

    # kernel timings: of each algorithm and robot, the newest run that timed it (a run of a few
    # robots leaves the others' newest figures where they were)
    for alg in algs:
        robots = _robots([r for _, d in data for r in d.get("time") or [] if algorithm_of(r) == alg])
        picks: dict[Path, set[str]] = {}
        for robot in robots:
            path = next(p for p, d in data
                        if any(algorithm_of(r) == alg and r["robot"] == robot for r in d.get("time") or []))
            picks.setdefault(path, set()).add(robot)
        for path, d in data:
            if path in picks:
                names = ", ".join(x for x in robots if x in picks[path])
                out += [f"**kernel timings of {alg}** ({escape(names)}), from the run of {escape(d.get('date', '?'))} "
                        f"({escape(d.get('gpu', '?'))}, commit ``{d.get('commit', '?')}``):", ""]
                out += _run_body(path, d, outdir, h200, rtx5090, ("time",), only=alg, robots=picks[path])
    # the other results: the newest run that has each
    for part, what in (("peers", "peers side by side (MJX)"), ("runtime", "runtime overheads"),
                       ("fused", "fused control step"), ("tuning", "tuning")):
        newest = next(((path, d) for path, d in data if d.get(part)), None)
        if newest is not None:
            path, d = newest
            out += [f"**{what}**, from the run of {escape(d.get('date', '?'))} ({escape(d.get('gpu', '?'))}, "
                    f"commit ``{d.get('commit', '?')}``):", ""]
            out += _run_body(path, d, outdir, h200, rtx5090, (part,))
    out += heading("Run log", "-")
    out += list_table(["file", "date", "GPU", "compilers", "commit", "phases"], runs)
    for path, d in data:
        out += heading(f"{d.get('date', '?')}, {d.get('gpu', '?')}, commit {d.get('commit', '?')}", "-")
        if not d.get("time") and not d.get("peers"):
            out += ["This run recorded no kernel timings.", ""]
        out += _run_body(path, d, outdir, h200, rtx5090)
    return "\n".join(out) + "\n"


def _robot_of(name: str, robots: set[str]) -> bool:
    """Whether a timing row's robot (``atlas``, or a variant such as ``atlas-ring``) is one of ``robots``."""
    return name in robots or any(name.startswith(f"{x}-") for x in robots)


def literal_path(name: str) -> str:
    return f"``{name}``"


def _write_if_changed(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


# -- the reference-timings page: a small Markdown subset, converted ----------------------


def _md_inline(text: str) -> str:
    """Code spans become literals (fenced by escaped spaces, so they may touch any character);
    everything else is plain text, its markup characters escaped."""
    parts = text.split("`")
    out = []
    for k, part in enumerate(parts):
        if k % 2 and part:
            before = out[-1][-1:] if out else ""
            after = parts[k + 1][:1] if k + 1 < len(parts) else ""
            out.append(("\\ " if before and not before.isspace() else "") + f"``{part}``"
                       + ("\\ " if after and not after.isspace() else ""))
        elif part:
            core = escape(part)
            lead = " " if part[0].isspace() and core else ""
            trail = " " if part[-1].isspace() and core else ""
            out.append(lead + core + trail if core else " ")
    return "".join(out).strip()


def _md_cells(row: str) -> list[str]:
    row = row.strip().strip("|")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)]


def markdown_to_rst(md: str) -> str:
    """Headings, paragraphs, bullet lists, pipe tables and fenced code of Markdown as
    reStructuredText; other Markdown shows as written (its characters escaped)."""
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    levels = "=-~^"
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.startswith("```"):
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1
            out += ["::", "", *("   " + b if b else "" for b in body), ""]
            continue
        m = re.match(r"(#{1,4})\s+(.*)", line)
        if m:
            title = _md_inline(m.group(2))
            out += [title, levels[len(m.group(1)) - 1] * len(title), ""]
            i += 1
            continue
        block = []
        while i < len(lines) and lines[i].strip() and not lines[i].startswith(("```", "#")):
            block.append(lines[i])
            i += 1
        if all(b.lstrip().startswith("|") for b in block):
            rows = [_md_cells(b) for b in block if not re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", b)]
            out += list_table([_md_inline(c) for c in rows[0]], [[_md_inline(c) or "\\-" for c in r] for r in rows[1:]])
        elif re.match(r"\s*[-*] ", block[0]):
            items: list[str] = []
            for b in block:
                if re.match(r"\s*[-*] ", b):
                    items.append(b.strip()[2:])
                else:
                    items[-1] += " " + b.strip()
            out += [f"* {_md_inline(it)}" for it in items] + [""]
        else:
            out += [_md_inline(" ".join(b.strip() for b in block)), ""]
    return "\n".join(out)


def _valid_rst(text: str) -> bool:
    from docutils.core import publish_doctree
    try:
        publish_doctree(text, settings_overrides={"report_level": 5, "halt_level": 2, "warning_stream": False})
    except Exception:  # SystemMessage, or anything else: in doubt, show the file as written
        return False
    return True


def reference_timings_page(md: Path) -> str:
    """The page of ``docs/reference_timings.md``: converted when the conversion is clean
    reStructuredText, else the file as written in a literal block."""
    head = [".. Generated by docs/_ext/grid_docs.py from docs/reference_timings.md; do not edit.", ""]
    text = md.read_text()
    body = markdown_to_rst(text)
    if re.match(r"#\s", text.lstrip()) and _valid_rst(body):  # a title of its own, and clean
        return "\n".join(head) + "\n" + body + "\n"
    return "\n".join([*head, *heading("Reference timings", "="),
                      "As recorded in ``docs/reference_timings.md``:", "",
                      f".. literalinclude:: /{md.name}", "   :language: text", ""])


def _builder_inited(app) -> None:
    root = Path(app.config.grid_docs_root)
    src = Path(app.srcdir)
    gen = src / GENERATED
    gen.mkdir(exist_ok=True)
    for old in gen.glob("bench_*.png"):
        old.unlink()
    _write_if_changed(gen / "benchmark_results.inc", results_text(root, gen))
    md = src / "reference_timings.md"
    page = gen / "reference_timings.rst"
    if md.is_file():
        _write_if_changed(page, reference_timings_page(md))
    elif page.exists():
        page.unlink()


def _always_reread(app, env, added, changed, removed):
    """Pages that depend on what Sphinx does not track, read again at every build: the
    benchmark page (result files come and go) and every page with an optional toctree
    (its entries' documents come and go)."""
    out = []
    for docname in env.found_docs:
        try:
            text = Path(env.doc2path(docname)).read_text()
        except OSError:
            continue
        if ".. grid-optional-toctree::" in text or "/_generated/benchmark_results.inc" in text:
            out.append(docname)
    return out


class BackendTable(Directive):
    """``grid-backend-table``: which backend runs each registered algorithm (the table ``grid
    list`` prints, from :func:`grid_core.algorithm.backend_table`), so the page stays true as
    emitters land."""

    def run(self):
        import grid_core
        from grid_core.algorithm import backend_table

        header, rows = backend_table(grid_core.algorithms())
        rows = [[f":ref:`{name} <algorithm-{name}>`", *cells] for name, *cells in rows]
        lines = StringList(list_table(header, rows), source="grid-backend-table")
        node = nodes.container()
        self.state.nested_parse(lines, self.content_offset, node)
        return node.children


class RunExample(Directive):
    """``grid-run-example:: examples/x.py``: a script of the repository, its source and what it
    prints, run while the docs build (a failing script fails the build).  ``:needs:`` names the
    modules it imports beyond GRiD's own; where one is not installed the page says so instead of
    running it."""

    required_arguments = 1
    option_spec = {"needs": lambda text: (text or "").split()}

    def run(self):
        import subprocess
        import sys

        env = self.state.document.settings.env
        path = Path(env.config.grid_docs_root) / self.arguments[0]
        env.note_dependency(str(path))
        code = nodes.literal_block(text=path.read_text().rstrip("\n"), language="python")
        missing = [m for m in self.options.get("needs", []) if importlib.util.find_spec(m) is None]
        if missing:
            logger.info(f"grid-run-example: {self.arguments[0]} not run ({', '.join(missing)} not installed)")
            said = f"Not run in this build of the documentation: {', '.join(missing)} is not installed."
            return [code, nodes.paragraph(text=said)]
        proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=900,
                              cwd=env.config.grid_docs_root)
        if proc.returncode != 0:
            raise self.error(f"{self.arguments[0]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        out = nodes.literal_block(text=proc.stdout.rstrip("\n"), language="none")
        return [code, nodes.paragraph(text="What it printed when this page was built:"), out]


def setup(app):
    app.add_config_value("grid_docs_root", "..", "env")
    app.add_directive("grid-optional-toctree", OptionalTocTree)
    app.add_directive("grid-backend-table", BackendTable)
    app.add_directive("grid-run-example", RunExample)
    app.connect("builder-inited", _builder_inited)
    app.connect("env-get-outdated", _always_reread)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
