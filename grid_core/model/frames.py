"""Frames chosen by name: the end-effector family's ``frames`` argument, resolved against a
robot's frames (links, joints, fixed joints), and the default choice."""

from __future__ import annotations

from ..errors import InputError
from .robot import Frame, Robot


def default_frames(robot: Robot) -> tuple[str, ...]:
    """The frames chosen when ``frames`` is None: each leaf body's own link frame."""
    return tuple(robot.bodies[i].name for i in robot.leaf_bodies())


def resolve_frames(robot: Robot, frames, algorithm: str) -> tuple[Frame, ...]:
    """The :class:`Frame` objects named by ``frames`` (an :class:`InputError` names a bad one)."""
    if frames is None:
        return tuple(
            next(f for f in robot.frames if f.kind == "link" and f.name == name)
            for name in default_frames(robot)
        )
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
                f"(its frames are its links and joints, e.g. {', '.join(f.name for f in robot.frames[:4])})"
            ) from None
    return tuple(out)
