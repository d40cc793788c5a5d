"""Per-tier resource usage of the generated kernels, from ``nvcc -Xptxas -v``.

``python -m grid_core.resources ALGO [ROBOT ...] --write`` compiles the header (every
tier instantiated through the C ABI) for sm_90 and records, per robot, kernel,
precision and tier: registers, static shared memory, stack, spill stores and
loads, plus the dynamic shared memory and workspace of the tier's rung.  The
record lives beside the algorithm's module (``<module>.resources.json``) and is
rendered in its review (``grid review``, the docs).
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from .arena import Tier

DEFAULT_ROBOTS = ("iiwa14", "hyq", "atlas", "g1")
ARCH = "sm_90"

_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\S+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")


def _demangle(names: list[str]) -> dict[str, str]:
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return dict(zip(names, out.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def parse_ptxas(text: str) -> list[dict]:
    """Kernel records from ``-Xptxas -v`` output."""
    rows, cur = [], None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            cur = {"mangled": m.group(1), "arch": m.group(2)}
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = _STACK.search(line)
        if m and "stack" not in cur:
            cur.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = _USED.search(line)
        if m:
            cur.update(registers=int(m.group(1)), static_smem=int(m.group(2) or 0))
    names = _demangle([r["mangled"] for r in rows])
    for r in rows:
        r["kernel"] = names[r["mangled"]]
    return rows


def describe_kernel(demangled: str) -> dict:
    """``void grid::inverse_dynamics_kernel<float, 2>(...)`` -> name, precision, template args."""
    m = re.search(r"(\w+)<([^()]*)>\(", demangled)
    if not m:
        return {"name": demangled}
    name, args = m.group(1), [a.strip() for a in m.group(2).split(",")]
    out = {"name": name, "T": args[0]}
    if name.endswith("_kernel") and len(args) == 2 and args[1].lstrip("-").isdigit():
        out["tier"] = Tier(int(args[1])).name
    elif len(args) > 1:
        out["variant"] = ",".join(args[1:])
    return out


def measure(algorithm: str, robot_name: str, arch: str = ARCH) -> dict:
    from .abi import DTYPES, abi_units
    from .composer import GenerateOptions, generate, plan_arena
    from .hooks import registry
    from .loader import load_robot
    from .runtime.cuda import find_nvcc, nvcc_version, toolchain
    from .runtime.handle import nvcc_command

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        robot = load_robot(robot_name)
    nvcc, flags = toolchain(find_nvcc())  # the ptxas and flags the libraries are built with
    report = ""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "grid.cuh").write_text(generate(robot, [algorithm]))
        # the algorithm's own units (a precision each), as the GPU library compiles them (its kernels
        # alone), each by the library's own command, with ptxas's report
        units = abi_units(robot, [algorithm], "grid.cuh")
        for name in (f"abi_{algorithm}_{dt}.cu" for dt in DTYPES):
            Path(tmp, name).write_text(units[name])
            res = subprocess.run([*nvcc_command(nvcc, arch, flags, name), "-Xptxas", "-v"], cwd=tmp,
                                 capture_output=True, text=True)
            if res.returncode:
                from .errors import BuildError

                raise BuildError(f"nvcc failed for {algorithm}[{robot_name}]:\n{res.stderr[-4000:]}")
            report += res.stdout + res.stderr
    plan = plan_arena(registry().algorithm(algorithm), robot, GenerateOptions(target_shared_mem_bytes=None))
    kernels = []
    for row in parse_ptxas(report):
        info = describe_kernel(row["kernel"])
        if not info.get("name", "").startswith(algorithm):
            continue
        entry = {**info, **{k: row.get(k) for k in ("registers", "static_smem", "stack", "spill_stores",
                                                     "spill_loads")}}
        if "tier" in info:
            rung = plan.rung(Tier[info["tier"]])
            size = 4 if info["T"] == "float" else 8
            entry.update(rung=rung.level, dynamic_smem=plan.smem_elements(rung) * size,
                         workspace_per_block=plan.workspace_elements(rung) * size)
        kernels.append(entry)
    kernels.sort(key=lambda e: (e["name"], e.get("T", ""), e.get("tier", ""), e.get("variant", "")))
    return {"robot": robot_name, "digest": robot.digest[:16], "arch": arch, "nvcc": nvcc_version(nvcc),
            "ptxas_flags": " ".join(flags), "kernels": kernels}


def record_path(algorithm_module: str) -> Path:
    pkg, _, mod = algorithm_module.rpartition(".")
    return Path(str(importlib.resources.files(pkg))) / f"{mod}.resources.json"


def load_record(alg) -> dict:
    path = record_path(type(alg).__module__)
    return json.loads(path.read_text()) if path.is_file() else {}


def render_record(record: dict) -> str:
    if not record:
        return "resources: not yet measured (python -m grid_core.resources ALGO --write)"
    flags = f" {record['ptxas_flags']}" if record.get("ptxas_flags") else ""
    lines = [f"resources per tier (nvcc {record.get('nvcc', '?')}{flags} -Xptxas -v, {record.get('arch', '?')}; "
             "regs / spill stores+loads B / stack B / dynamic smem B / workspace per block B):"]
    for rob in record.get("robots", []):
        lines.append(f"  {rob['robot']}:")
        for k in rob["kernels"]:
            where = k.get("tier") or k.get("variant", "")
            extra = ""
            if "dynamic_smem" in k:
                extra = f"  smem {k['dynamic_smem']}  ws {k['workspace_per_block']}  (rung {k['rung']})"
            lines.append(f"    {k['name']:<36} {k['T']:<6} {where:<12} regs {k['registers']:>3}  spill "
                         f"{k['spill_stores']}+{k['spill_loads']}  stack {k['stack']}{extra}")
    return "\n".join(lines)


def load_tuning(alg) -> dict:
    """The plugin's ``<module>.tuning.json`` (measured on the GPU), or {}: the one reader of
    tuning files (the composer bakes entries of it into headers)."""
    pkg, _, mod = type(alg).__module__.rpartition(".")
    try:
        res = importlib.resources.files(pkg or mod).joinpath(f"{mod}.tuning.json")
        return json.loads(res.read_text()) if res.is_file() else {}
    except (ModuleNotFoundError, FileNotFoundError, json.JSONDecodeError):
        return {}


def render_tuning(tuning: dict) -> str:
    robots = tuning.get("robots", {})
    if not robots:
        return ""
    lines = ["measured on the GPU (block layout A/B of the sweep form; crossover to the per-state layout):"]
    for name, v in robots.items():
        ab = v.get("ab_block_n256_us", {})
        lines.append(f"  {name:<8} N=256 levels {ab.get('levels')} us, bodies {ab.get('bodies')} us -> {v.get('p1')}; "
                     f"per-state from N >= {v.get('per_state_min_n')}  ({v.get('gpu', '')})")
        if "method" in v:  # an orchestrator with alternatives: both figures and the pick
            gm = v.get("method_ab_geomean_us", {})
            lines.append(f"  {'':<8} method {v['method']}: kernel geomean over N = {v.get('method_ab_sizes')}: "
                         + ", ".join(f"{m} {t} us" for m, t in gm.items()))
    return "\n".join(lines)


def render_measurements(alg) -> str:
    parts = [render_record(load_record(alg)), render_tuning(load_tuning(alg))]
    return "\n".join(p for p in parts if p)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grid_core.resources", description=__doc__.splitlines()[0])
    ap.add_argument("algorithm")
    ap.add_argument("robots", nargs="*", default=list(DEFAULT_ROBOTS))
    ap.add_argument("--write", action="store_true", help="write <module>.resources.json beside the algorithm")
    args = ap.parse_args(argv)
    from .hooks import registry

    alg = registry().algorithm(args.algorithm)
    record = {"algorithm": args.algorithm, "robots": []}
    for name in args.robots:
        print(f"measuring {args.algorithm}[{name}] ...", file=sys.stderr)
        m = measure(args.algorithm, name)
        record["robots"].append(m)
        record["nvcc"], record["arch"], record["ptxas_flags"] = m["nvcc"], m["arch"], m["ptxas_flags"]
    if args.write:
        path = record_path(type(alg).__module__)
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {path}", file=sys.stderr)
    print(render_record(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
