"""The contract between the composer and an algorithm's code generator.

An algorithm with a GPU implementation sets ``Algorithm.emitter`` to a subclass
of :class:`Emitter`.  The composer builds one :class:`EmitContext` per algorithm
(robot, options, the algorithm's arena plan, measured tuning) and asks the
emitter for its nodes.  Emitters are pure functions of the context.

Naming and calling conventions every emitter follows (DESIGN §4, seeds 001/002):

* ``X_inner`` (placement flags as template parameters), ``X_device``,
  ``X_kernel<T, RESOURCE_TIER>``, host ``X<T, ...>``;
* ``X_launch<T>(outputs..., inputs..., params..., int num_timesteps,
  LaunchConfig cfg, T *d_workspace, size_t workspace_bytes, cudaStream_t)``
  with the algorithm's ports in declaration order: outputs as ``T*``, inputs as
  ``const T*`` (an optional input may be ``nullptr``), params as host ``const T*``;
  and ``X_workspace_bytes<T>(num_timesteps, cfg)``.  The C ABI of the runtime and
  of the host-emulated backend is generated from these alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ..errors import PluginError

if TYPE_CHECKING:  # pragma: no cover
    from ..algorithm import Algorithm
    from ..arena import ArenaPlan
    from ..model import Robot


@attrs.frozen
class GridDataField:
    """A per-state buffer of ``gridData<T>`` (host ``h_NAME`` and device ``d_NAME``)."""

    name: str
    elements: int
    doc: str = ""


@attrs.frozen
class EmitContext:
    robot: "Robot"
    algorithm: "Algorithm"
    plan: "ArenaPlan"
    options: Any
    tuning: dict
    max_perf_threads: int


class Emitter:
    """Base class of an algorithm's code generator."""

    def __init__(self, algorithm: "Algorithm"):
        self.algorithm = algorithm

    def block_threads_hint(self, robot: "Robot") -> int:
        """The widest useful parallel region of the block-cooperative layout."""
        return robot.num_bodies

    def grid_data_fields(self, robot: "Robot") -> tuple[GridDataField, ...]:
        """Outputs this algorithm adds to ``gridData<T>``."""
        return ()

    def emit(self, ctx: EmitContext) -> list:
        raise NotImplementedError

    @classmethod
    def validate(cls, algorithm_cls, where: str) -> None:
        if not (isinstance(cls, type) and issubclass(cls, Emitter)):
            raise PluginError(f"{where}: 'emitter' must be a subclass of grid_core.emit.emitter.Emitter")
        if cls.emit is Emitter.emit:
            raise PluginError(f"{where}: emitter {cls.__qualname__} does not implement emit()")
        if algorithm_cls.arenas is _base_arenas():
            raise PluginError(f"{where}: an algorithm that emits must declare its arenas()")
        if algorithm_cls.spill_rungs is _base_rungs():
            raise PluginError(f"{where}: an algorithm that emits must declare its spill_rungs()")


def _base_arenas():
    from ..algorithm import Algorithm

    return Algorithm.arenas


def _base_rungs():
    from ..algorithm import Algorithm

    return Algorithm.spill_rungs
