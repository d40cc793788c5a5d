"""Bundled robot names (``iiwa14``, ``hyq``, ``atlas``, ``go2``, ``g1``).

The robots live in the data package ``grid_robots`` (the repository's ``robots/``),
listed in its ``robots.toml`` with their natural base and licence note.
"""

from __future__ import annotations

import functools
import importlib.resources
import tomllib

import attrs

from grid_core import hookimpl
from grid_core.errors import RobotNotFoundError
from grid_core.loader import RobotLoader
from grid_core.model import Robot

from .urdf import parse_urdf


@functools.cache
def manifest() -> dict[str, dict]:
    text = importlib.resources.files("grid_robots").joinpath("robots.toml").read_text()
    return tomllib.loads(text)


class BundledLoader(RobotLoader):
    name = "bundled"
    summary = "robots shipped with GRiD: " + ", ".join(manifest())

    def names(self) -> tuple[str, ...]:
        return tuple(manifest())

    def claims(self, source: str) -> bool:
        return source in manifest()

    def default_floating_base(self, source: str) -> bool:
        entry = manifest().get(source)
        return bool(entry and entry.get("floating_base", False))

    def load(self, source: str, *, floating_base: bool, strict_inertia: bool) -> Robot:
        entry = manifest().get(source)
        if entry is None:
            raise RobotNotFoundError(
                f"no bundled robot '{source}' (bundled: {', '.join(manifest())})"
            )
        res = importlib.resources.files("grid_robots").joinpath(entry["file"])
        robot = parse_urdf(
            res.read_bytes(),
            source=f"bundled:{source}",
            floating_base=floating_base,
            strict_inertia=strict_inertia,
            known_inertia_defects=frozenset(entry.get("known_inertia_defects", ())),
        )
        # the bundled name is the robot's name (upstream files carry other names)
        return attrs.evolve(robot, name=source)


@hookimpl
def grid_register_robot_loaders():
    return [BundledLoader]
