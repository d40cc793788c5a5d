"""``erd:NAME``: the URDFs of the ``example-robot-data`` package (BSD, cmeel wheel).

The package installs its robots under ``site-packages/cmeel.prefix/share/
example-robot-data/robots``.  ``NAME`` is a URDF file stem (``erd:panda``,
``erd:solo12``, ``erd:talos_reduced``) or, where a stem is ambiguous,
``DESCRIPTION/STEM`` (``erd:anymal_c_simple/anymal``) with the ``_description``
suffix dropped, or a short name as ``example_robot_data.load`` takes it (``erd:ur5``
is ur5_robot, ``erd:talos`` talos_reduced, ``erd:hyq`` hyq_no_sensors), or the beginning
of exactly one stem.  Nothing is downloaded: without the package installed, the
error says what to install.
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import sysconfig
from pathlib import Path

import attrs

from grid_core import hookimpl
from grid_core.errors import RobotNotFoundError
from grid_core.loader import RobotLoader
from grid_core.model import Robot

from .urdf import load_urdf_file

DIST = "example-robot-data"
_SUBDIR = Path("cmeel.prefix", "share", "example-robot-data", "robots")


@functools.cache
def robots_dir() -> Path:
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        raise RobotNotFoundError(
            f"erd: robots need the package '{DIST}' (pip install {DIST}, or "
            "pip install 'grid-rbd[test]')"
        ) from None
    candidates = [Path(str(dist.locate_file(""))) / _SUBDIR]
    candidates += [Path(sysconfig.get_paths()[k]) / _SUBDIR for k in ("purelib", "platlib")]
    for c in candidates:
        if c.is_dir():
            return c
    raise RobotNotFoundError(
        f"erd: '{DIST}' {dist.version} is installed but its robots directory was not found "
        f"(looked in {', '.join(str(c) for c in candidates)})"
    )


def _package_name(urdf: Path, root: Path) -> str:
    top = urdf.relative_to(root).parts[0]
    for suffix in ("_description", "_data"):
        if top.endswith(suffix):
            return top[: -len(suffix)]
    return top


@functools.cache
def index() -> dict[str, Path]:
    """Every accepted NAME -> URDF path (unique stems, and every PACKAGE/STEM)."""
    root = robots_dir()
    by_stem: dict[str, list[Path]] = {}
    out: dict[str, Path] = {}
    for urdf in sorted(root.rglob("*.urdf")):
        by_stem.setdefault(urdf.stem, []).append(urdf)
        out[f"{_package_name(urdf, root)}/{urdf.stem}"] = urdf
    for stem, paths in by_stem.items():
        if len(paths) == 1:
            out[stem] = paths[0]
    return dict(sorted(out.items()))


# The names example_robot_data.load() knows its robots by, where they are no file stem
# (or name a stem that is no robot: ur3.urdf is a xacro leftover without links).
ALIASES = {
    "ur3": "ur3_robot", "ur5": "ur5_robot", "ur10": "ur10_robot", "ur3_limited": "ur3_joint_limited_robot",
    "ur5_limited": "ur5_joint_limited_robot", "ur10_limited": "ur10_joint_limited_robot",
    "talos": "talos_reduced", "talos_box": "talos_reduced_box", "talos_arm": "talos_left_arm",
    "talos_full": "talos_full_v2", "talos_full_box": "talos_full_v2_box", "hyq": "hyq_no_sensors",
    "anymal_kinova": "anymal-kinova", "asr_twodof": "TwoDofs", "quadrotor": "quadrotor_base", "xarm": "xarm7",
    "g1": "g1_29dof_rev_1_0",
}


def aliases() -> dict[str, str]:
    """The short names whose target this installed version has."""
    idx = index()
    return {k: v for k, v in ALIASES.items() if v in idx}


def names() -> tuple[str, ...]:
    """What ``grid robots`` lists: every unique stem, and PACKAGE/STEM where a stem is shared."""
    idx = index()
    shared = {k.split("/", 1)[1] for k in idx if "/" in k} - set(idx)
    return tuple(k for k in idx if "/" not in k or k.split("/", 1)[1] in shared)


def resolve(name: str) -> Path:
    """A stem, PACKAGE/STEM, a short name (``ur5``: ur5_robot, ``talos``, ``hyq``), or the one
    stem the name begins (``solo1`` is not one: it begins none; ``romeo_`` begins several)."""
    idx = index()
    short = aliases()
    if name in short:
        return idx[short[name]]
    if name in idx:
        return idx[name]
    matches = [k for k in idx if "/" in k and k.split("/", 1)[1] == name]
    if matches:
        raise RobotNotFoundError(f"erd:{name} is ambiguous: use one of {', '.join('erd:' + m for m in matches)}")
    stems = sorted(k for k in idx if "/" not in k)
    begun = [s for s in stems if s.startswith(name) and s[len(name):len(name) + 1] in ("_", "-")]
    if len(begun) == 1:
        return idx[begun[0]]
    if begun:
        raise RobotNotFoundError(f"erd:{name} is ambiguous: use one of {', '.join('erd:' + m for m in begun)}")
    close = difflib.get_close_matches(name, stems + list(short), n=5, cutoff=0.6)
    hint = f"did you mean {', '.join('erd:' + c for c in close)}? " if close else ""
    raise RobotNotFoundError(f"erd:{name} not found ({hint}`grid robots` lists every name)")


class ErdLoader(RobotLoader):
    name = "erd"
    summary = f"URDFs of the '{DIST}' package: erd:NAME (a file stem, a short name such as ur5, or PACKAGE/STEM)"

    def names(self) -> tuple[str, ...]:
        try:
            return names()
        except RobotNotFoundError:  # the package is not installed
            return ()

    def aliases(self) -> dict[str, str]:
        """Short name -> file stem (``grid robots`` lists them)."""
        try:
            return aliases()
        except RobotNotFoundError:
            return {}

    def load(self, source: str, *, floating_base: bool, strict_inertia: bool) -> Robot:
        robot = load_urdf_file(resolve(source), floating_base=floating_base, strict_inertia=strict_inertia)
        return attrs.evolve(robot, name=source.replace("/", "_"), source=f"erd:{source}")


@hookimpl
def grid_register_robot_loaders():
    return [ErdLoader]
