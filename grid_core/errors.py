"""The GridError hierarchy: one class per kind of user mistake.

Every failure a user can cause ends in a subclass of :class:`GridError` whose
message names the file, the element and, where there is one, the fix.  The CLI
prints that message as one line and exits 1.
"""

from __future__ import annotations


class GridError(Exception):
    """Base class of every error GRiD raises on purpose."""


class RobotModelError(GridError):
    """The robot description is malformed or physically invalid."""


class UnsupportedFeatureError(GridError):
    """The description is valid but uses something GRiD does not (yet) support."""


class RobotNotFoundError(GridError):
    """A robot source (bundled name, path or ``loader:name``) could not be resolved."""


class PluginError(GridError):
    """A plugin is malformed, conflicts with another, or failed to load."""


class InputError(GridError):
    """An array handed to an algorithm has the wrong shape, dtype or values."""


class CodegenError(GridError):
    """The code generator could not produce a header for this robot and options."""


class BuildError(GridError):
    """Compiling generated code failed; the compiler's log travels in the message."""


class RuntimeUnavailableError(GridError):
    """A piece the GPU runtime needs (nvcc, a CUDA device, a driver) is missing."""


class GridWarning(UserWarning):
    """Base class of GRiD's warnings (sloppy-but-loadable robot data, ...).

    ``subject`` names what it is about (a link or joint) and ``topic`` says what in a few
    words; several warnings about one robot are summarised by topic with their subjects."""

    def __init__(self, message="", subject: str = "", topic: str = ""):
        super().__init__(message)
        self.subject = subject
        self.topic = topic


class InertiaWarning(GridWarning):
    """A link's inertia is physically doubtful but accepted (as Pinocchio does)."""


class UrdfWarning(GridWarning):
    """A URDF holds something GRiD ignores (an unknown element, a misspelt tag)."""
