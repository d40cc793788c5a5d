"""Robot loaders: the base class plugins subclass, and :func:`load_robot`.

A source is resolved in this order:

1. ``loader:rest`` where ``loader`` is a registered loader's name (``erd:panda``,
   ``urdf:path/to/robot.urdf``, ``bundled:iiwa14``);
2. otherwise each loader is asked, in registration order, whether it claims the
   source (the URDF loader claims existing files and ``*.urdf``; the bundled
   loader claims its names).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import ClassVar

from .errors import GridWarning, RobotModelError, RobotNotFoundError
from .model import Robot


class RobotLoader:
    """Base class of robot loaders.  Subclasses set :attr:`name` and :attr:`summary`
    and implement :meth:`load`; they may implement :meth:`claims` and :meth:`names`."""

    name: ClassVar[str] = ""
    """Prefix that selects this loader: ``NAME:source``."""
    summary: ClassVar[str] = ""
    """One line for ``grid list``."""
    file_format: ClassVar[str] = ""
    """The file format it reads, for the error on a file no loader claims: ``"URDF (root <robot>)"``."""

    def claims(self, source: str) -> bool:
        """Whether an unprefixed ``source`` is for this loader."""
        return False

    def names(self) -> tuple[str, ...]:
        """The robot names this loader knows (empty when it takes arbitrary sources)."""
        return ()

    def default_floating_base(self, source: str) -> bool:
        """The base a robot gets when ``floating_base=None`` (fixed unless the loader knows better)."""
        return False

    def load(self, source: str, *, floating_base: bool, strict_inertia: bool) -> Robot:
        raise NotImplementedError


def load_robot(
    source, floating_base: bool | None = None, strict_inertia: bool = False, strict: bool = False
) -> Robot:
    """Load a robot from a bundled name, a URDF path, or ``loader:name``.

    ``floating_base=None`` takes the source's natural base (a bundled robot's
    own, otherwise fixed); ``True`` adds a free-flyer root; ``False`` fixes it.
    ``strict_inertia`` turns doubtful-inertia warnings into errors, ``strict`` every
    warning about the robot (unknown URDF elements included).
    """
    if isinstance(source, Robot):
        return source
    from .hooks import registry

    source = str(source)
    loaders = registry().loaders
    loader, rest = None, source
    prefix, sep, tail = source.partition(":")
    if sep and prefix in loaders:
        loader, rest = loaders[prefix], tail
    else:
        for candidate in loaders.values():
            if candidate.claims(source):
                loader = candidate
                break
    if loader is None:
        raise unresolved(source, loaders)
    fb = loader.default_floating_base(rest) if floating_base is None else bool(floating_base)
    if not strict:
        return loader.load(rest, floating_base=fb, strict_inertia=strict_inertia)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GridWarning)
        try:
            return loader.load(rest, floating_base=fb, strict_inertia=strict_inertia)
        except GridWarning as exc:
            raise RobotModelError(f"{exc} (strict)") from None


def unresolved(source: str, loaders: dict[str, RobotLoader]) -> RobotNotFoundError:
    """The error for a source no loader takes: a directory, an unknown ``loader:`` prefix,
    or a name nobody knows, each said as such."""
    prefixes = ", ".join(f"{n}:" for n in loaders)
    path = Path(source)
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.urdf"))[:5]
        hint = f" (it holds {', '.join(inside)})" if inside else ""
        return RobotNotFoundError(f"'{source}' is a directory, not a robot description: give the file{hint}")
    if path.is_file():
        formats = [ld.file_format for ld in loaders.values() if ld.file_format]
        return RobotNotFoundError(
            f"'{source}' is a file no robot loader recognises: not a {', nor a '.join(formats)} "
            "(check the file, or name its loader: LOADER:PATH)"
        )
    prefix, sep, _ = source.partition(":")
    if sep and prefix.isidentifier() and len(prefix) > 1:  # not a drive letter (C:...)
        return RobotNotFoundError(f"unknown loader '{prefix}' in '{source}' (loaders: {prefixes})")
    known = sorted(n for ld in loaders.values() for n in ld.names() if ld.claims(n))  # the unprefixed ones
    return RobotNotFoundError(
        f"unknown robot '{source}': not a file, not a bundled name ({', '.join(known)}), "
        f"and no loader prefix ({prefixes}) given (`grid robots` lists the names)"
    )
