"""The hooks through which every algorithm and robot loader arrives.

Built-in and third-party plugins are equal: each is a module (or object) named
by an entry point of the group ``grid`` in its distribution's metadata, and it
implements some of the hooks below with ``@grid_core.hookimpl``.  A plugin can
be blocked by its entry-point name (``grid --disable-plugin NAME`` or
``GRID_DISABLE_PLUGINS=NAME[,NAME...]``).

The docstrings of this module are the plugin API reference.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("grid")


@hookspec
def grid_register_algorithms():
    """Return a list of :class:`grid_core.algorithm.Algorithm` subclasses.

    Each class is validated when registered (a name, a summary, a reference, a
    parallelism review covering P1-P4, declared dependencies that exist, arenas
    for whatever it emits); a malformed one is rejected with an error naming the
    plugin, its distribution and the class.  Names are unique across plugins.
    """


@hookspec
def grid_register_robot_loaders():
    """Return a list of :class:`grid_core.loader.RobotLoader` subclasses.

    A loader's ``name`` is the prefix users write (``NAME:source``); it is
    unique across plugins.
    """
