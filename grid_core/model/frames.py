"""Frames chosen by name: the end-effector family's ``frames`` argument, resolved against a
robot's frames (links, joints, fixed joints), and the default choice."""

from __future__ import annotations

import difflib

from ..errors import InputError
from .robot import Frame, Robot

SUGGESTIONS = 4
"""How many frame names an unknown name's error suggests."""


def default_frames(robot: Robot) -> tuple[str, ...]:
    """The frames chosen when ``frames`` is None: the leaf links of the description's tree (no
    child joint, movable or fixed: a quadruped's feet, an arm's tool frame) on the leaf bodies,
    in ``robot.frames`` order (:meth:`Robot.leaf_frames`)."""
    return tuple(f.name for f in robot.leaf_frames())


def supporting_bodies(robot: Robot, frames) -> tuple[int, ...]:
    """The bodies supporting any of ``frames`` (each frame's body and its ancestors; none for a
    frame fixed in the world), in body order (parents first)."""
    return tuple(sorted({j for f in frames if f.body >= 0 for j in robot.topology.support[f.body]}))


def suggest_frames(robot: Robot, name: str) -> str:
    """What an unknown frame ``name``'s error suggests: the closest frame names (difflib), or when
    none is close a few names, the default frames first."""
    names = list(dict.fromkeys(f.name for f in robot.frames))
    close = difflib.get_close_matches(name, names, n=SUGGESTIONS)
    if close:
        return f"nearest: {', '.join(close)}"
    return f"e.g. {', '.join(list(dict.fromkeys(default_frames(robot) + tuple(names)))[:SUGGESTIONS])}"


def resolve_frames(robot: Robot, frames, algorithm: str) -> tuple[Frame, ...]:
    """The :class:`Frame` objects named by ``frames`` (an :class:`InputError` names a bad one)."""
    if frames is None:
        return robot.leaf_frames()
    names = (frames,) if isinstance(frames, str) else frames
    try:
        names = tuple(names)
    except TypeError:
        raise InputError(f"{algorithm}: argument 'frames' must be frame names, got {frames!r}") from None
    out = []
    for name in names:
        if isinstance(name, Frame) and name in robot.frames:
            out.append(name)
            continue
        if not isinstance(name, str):
            raise InputError(f"{algorithm}: argument 'frames' must be frame names, got {name!r}")
        try:
            out.append(robot.frame(name))
        except KeyError:
            raise InputError(
                f"{algorithm}: argument 'frames': robot '{robot.name}' has no frame '{name}' "
                f"({suggest_frames(robot, name)}; `grid info` lists a robot's frames)"
            ) from None
    return tuple(out)
