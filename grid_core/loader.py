"""Robot loaders: the base class plugins subclass, and :func:`load_robot`.

A source is resolved in this order:

1. ``loader:rest`` where ``loader`` is a registered loader's name (``erd:panda``,
   ``urdf:path/to/robot.urdf``, ``bundled:iiwa14``);
2. otherwise each loader is asked, in registration order, whether it claims the
   source (the URDF loader claims existing files and ``*.urdf``; the bundled
   loader claims its names).
"""

from __future__ import annotations

from typing import ClassVar

from .errors import RobotNotFoundError
from .model import Robot


class RobotLoader:
    """Base class of robot loaders.  Subclasses set :attr:`name` and :attr:`summary`
    and implement :meth:`load`; they may implement :meth:`claims` and :meth:`names`."""

    name: ClassVar[str] = ""
    """Prefix that selects this loader: ``NAME:source``."""
    summary: ClassVar[str] = ""
    """One line for ``grid list``."""

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
    source, floating_base: bool | None = None, strict_inertia: bool = False
) -> Robot:
    """Load a robot from a bundled name, a URDF path, or ``loader:name``.

    ``floating_base=None`` takes the source's natural base (a bundled robot's
    own, otherwise fixed); ``True`` adds a free-flyer root; ``False`` fixes it.
    ``strict_inertia`` turns doubtful-inertia warnings into errors.
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
        known = sorted(n for ld in loaders.values() for n in ld.names())
        prefixes = ", ".join(f"{n}:" for n in loaders)
        raise RobotNotFoundError(
            f"unknown robot '{source}': not a file, not a bundled name ({', '.join(known)}), "
            f"and no loader prefix ({prefixes}) given"
        )
    fb = loader.default_floating_base(rest) if floating_base is None else bool(floating_base)
    return loader.load(rest, floating_base=fb, strict_inertia=strict_inertia)
