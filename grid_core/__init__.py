"""GRiD: robot description in, robot-specialised CUDA rigid-body dynamics out.

The public API (DESIGN §3); everything else is private to its module.
"""

from __future__ import annotations

import pluggy

hookimpl = pluggy.HookimplMarker("grid")
"""Marker for plugin hook implementations (``@grid_core.hookimpl``)."""

from . import errors  # noqa: E402
from .algorithm import Algorithm, Port  # noqa: E402
from .hooks import algorithms, registry  # noqa: E402
from .loader import RobotLoader, load_robot  # noqa: E402
from .model import Robot  # noqa: E402
from .reference import Reference  # noqa: E402

# The generator and the runtime load on first use: a plugin importing what it needs
# (Algorithm, Port, hookimpl) pulls in neither the composer, the C ABI nor the runtime.
_LAZY = {"RobotHandle": ("grid_core.runtime", "RobotHandle"), "generate": ("grid_core.composer", "generate"),
         "CpuHandle": ("grid_core.runtime.cpu", "CpuHandle")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grid_core' has no attribute '{name}'")


__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "CpuHandle",
    "Port",
    "Reference",
    "Robot",
    "RobotHandle",
    "RobotLoader",
    "algorithms",
    "errors",
    "generate",
    "hookimpl",
    "load_robot",
    "registry",
]
