"""``erd:NAME``: the URDFs of the ``example-robot-data`` package (BSD, cmeel wheel).

The package installs its robots under ``site-packages/cmeel.prefix/share/
example-robot-data/robots``.  ``NAME`` is a URDF file stem (``erd:panda``,
``erd:solo12``, ``erd:talos_reduced``) or, where a stem is ambiguous,
``DESCRIPTION/STEM`` (``erd:anymal_c_simple/anymal``) with the ``_description``
suffix dropped.  Nothing is downloaded: without the package installed, the
error says what to install.
"""

from __future__ import annotations

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


def resolve(name: str) -> Path:
    idx = index()
    if name in idx:
        return idx[name]
    matches = [k for k in idx if "/" in k and k.split("/", 1)[1] == name]
    if matches:
        raise RobotNotFoundError(f"erd:{name} is ambiguous: use one of {', '.join('erd:' + m for m in matches)}")
    stems = sorted(k for k in idx if "/" not in k)
    raise RobotNotFoundError(f"erd:{name} not found; available: {', '.join(stems)}")


class ErdLoader(RobotLoader):
    name = "erd"
    summary = f"URDFs of the '{DIST}' package: erd:NAME (a file stem, or PACKAGE/STEM)"

    def load(self, source: str, *, floating_base: bool, strict_inertia: bool) -> Robot:
        robot = load_urdf_file(resolve(source), floating_base=floating_base, strict_inertia=strict_inertia)
        return attrs.evolve(robot, name=source.replace("/", "_"), source=f"erd:{source}")


@hookimpl
def grid_register_robot_loaders():
    return [ErdLoader]
