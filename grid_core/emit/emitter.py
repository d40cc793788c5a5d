"""The contract between the composer and an algorithm's code generator.

An algorithm with a GPU implementation sets ``Algorithm.emitter`` to a subclass of
:class:`Emitter`: declarations (which inputs it reads in place, which may be null, the
inners it composes, its options) and the math (:meth:`Emitter.inner_body`,
:meth:`Emitter.state_body`).  The composer builds one :class:`EmitContext` per algorithm
(robot, options, the algorithm's arena plan, measured tuning) and the layer generator
(:mod:`grid_core.emit.layers`) writes every layer from it.

Naming and calling conventions every algorithm's layers follow:

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

import math
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
class LayerOptions:
    """Knobs every emitted algorithm has; an emitter's ``Options`` subclasses this with its own
    (RNEA's sweep form, ...).  Set per algorithm through ``generate(..., algorithm_options=
    {"inverse_dynamics": {"p1": "bodies"}})``; part of the header's content, so of its cache key."""

    per_state_min_blocks: int = 0
    """Minimum resident blocks per SM asked of the per-state kernel (its launch bounds): trades
    registers for occupancy.  0: the measured choice for the robot, else 1."""

    block_min_blocks: int = 0
    """Minimum resident blocks per SM asked of the block-layout kernel at ``TIER_SHARED`` (its
    launch bounds): registers for occupancy, where shared memory leaves room for more than one
    block and ptxas would otherwise take more registers than that allows.  0: the measured choice
    for the robot, else 1 (no bound)."""

    per_state_stage_min_n: int = 0
    """Batches from which the per-state layout of an algorithm that stages by default goes
    through shared memory (below, the plain kernel: its loads and stores overlap the compute,
    where staging serializes load, compute and store).  0: the measured choice, else 1."""

    per_state_ring_min_n: int = 0
    """Batches from which the per-state outputs too large to stage whole go through each warp's
    ring of shared memory (grid_core.emit.ring).  0: the measured choice (or the default), else
    from that batch on."""

    per_state_ring_flush: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", "groups", "whole")))
    """How the ring's flush stores where one flush, at the end, holds every output (the ring holds
    the state's distinct values): ``groups`` (the table's groups of each state's runs, a store
    instruction a group and state), ``whole`` (the warp's states' outputs as the one contiguous
    block they are, in order: whole lines, four values a lane where T is float), or ``auto`` (the
    measured choice for the robot, else groups).  A ring that flushes more often takes groups."""

    per_state_spread: bool = True
    """Whether a per-state launch spreads a batch too small to fill a block on every SM over all
    of them (blocks of ``ceil(N / SMs)`` states, down to one: each SM then issues and stores for
    that many states) or packs it into full blocks on a few SMs (kept for the A/B)."""


@attrs.frozen
class EmitContext:
    robot: "Robot"
    algorithm: "Algorithm"
    plan: "ArenaPlan"
    options: Any
    """The header's :class:`~grid_core.composer.GenerateOptions`."""
    tuning: dict
    """Measured numbers for (algorithm, robot), read by the composer (``<module>.tuning.json``)."""
    max_perf_threads: int
    algorithm_options: Any = None
    """This algorithm's ``Emitter.Options`` instance."""
    values: dict = attrs.field(factory=dict)
    """The algorithm's option ports fixed at generation time
    (:func:`~grid_core.algorithm.generation_values`): ``frames``, the resolved frames."""

    @property
    def frames(self) -> tuple:
        """The chosen :class:`~grid_core.model.Frame` s (name, kind, body index (-1: the world),
        ``X``: Plücker transform body -> frame), in output order; empty for an algorithm without
        a ``frames`` option port."""
        return tuple(self.values.get("frames", ()))

    def knob(self, key: str, unset, default) -> tuple:
        """Algorithm knob ``key`` and where it comes from: the algorithm option where set (not
        ``unset``: "option"), else the tuning file's measured value ("measured"), else ``default``
        ("default")."""
        given = getattr(self.algorithm_options, key, unset)
        if given != unset:
            return given, "option"
        return (self.tuning[key], "measured") if key in self.tuning else (default, "default")


class Emitter:
    """Base class of an algorithm's code generator: declarations and the math.

    The layers (device, kernels, launchers, host wrapper) are written by
    :class:`grid_core.emit.layers.Layers` from these declarations; an emitter supplies
    :meth:`inner_body` (and :meth:`state_body` for a per-state layout) and nothing else.
    """

    Options = LayerOptions
    global_inputs: tuple[str, ...] = ()
    """State inputs the kernels read in place from global memory (not staged into the arena)."""
    global_outputs: tuple[str, ...] = ()
    """Outputs the inner writes in place in global memory (this state's slice), not staged through
    the arena: outputs too large for shared memory (the inline rung then takes them as ``d_``)."""
    nullable_inputs: tuple[str, ...] | None = None
    """State inputs whose null pointer the kernels accept (zero, or absent); None: the optional ports."""
    needs_ximats: bool = True
    """Whether the inner reads the transform data (s_XI), loaded once by whoever calls it."""
    refusals_as_nan: bool = False
    """Whether the generated code marks a state it refuses (where the reference raises an
    :class:`~grid_core.errors.InputError`: an input it has no answer for) by NaN in that state's
    outputs; the backends' numpy calls then raise the reference's own error for the first such
    state (:meth:`~grid_core.runtime.backend.AbiBackend._refused`).  NaN inputs never get this far:
    they are refused while staged."""
    in_default_set: bool = True
    """Whether a header (or a backend's library) built without a list of algorithms includes this
    one; False for code too large to compile by default on large robots (its users name it)."""
    reloads_ximats: bool = False
    """Whether the inner loads the transform data again itself (at another configuration, before
    handing it to a composed inner): its ``s_XI`` is then writable."""
    reuses: dict[str, tuple[str, str]] = {}
    """This algorithm's fields that a composed inner may already have computed: ``field ->
    (composed algorithm, its field)``.  Where that inner :meth:`leaves` the field for this robot
    (a method the tuning picked), this algorithm's own arena region for it is dropped and the field
    is bound to the callee's (:attr:`~grid_core.emit.layers.Layers.reused`, which its code checks
    before computing it).  In the per-state layout the field is the callee's local, so the
    orchestrator runs the callee's steps inline there (:meth:`steps`), not its per-state function."""
    composes: tuple[str, ...] = ()
    """Algorithms whose inners this one calls (through :meth:`Layers.compose`); each must be in
    the algorithm's ``depends_on``."""
    compose_options: dict[str, dict] = {}
    """Options this algorithm fixes on an inner it composes, ``name -> {option: value}``, whatever
    the header's own options or the tuning choose for that algorithm: forward dynamics by its Minv
    method inside an algorithm that needs Minv anyway.  Where they resolve to other options than
    the header's, the composer builds a variant of that algorithm for this caller (its inner and
    per-state function under the name ``<algorithm>_<values>``, emitted after the algorithm's
    own layers); else the caller shares the algorithm's layers."""
    shared_helpers: tuple[str, ...] = ()
    """Groups of device functions of the framework this algorithm's code calls, emitted once per
    header (:data:`grid_core.emit.lie_steps.SHARED_HELPERS`: ``"lie"``, the free-flyer's exponential
    map and its derivatives)."""
    def resolve_options(self, options, tuning: dict):
        """``options`` with the knobs left to measurement (``auto``) replaced by the measured
        choice of ``tuning`` (this algorithm on this robot); what the arenas, the rungs and the
        code then see.  Default: unchanged."""
        return options

    def composed(self, options, tuning: dict) -> tuple[str, ...]:
        """The inners this robot's code composes, among :attr:`composes` (an orchestrator with
        alternatives picks by its options or the measured tuning); default: all of them."""
        return tuple(self.composes)

    staged: bool = False
    """Whether the per-state layout also gets the variant staged through shared memory."""
    stage_by_default: bool = False
    """Whether the per-state layout takes the staged variant whenever it fits, from
    ``per_state_stage_min_n`` states on (large outputs, whose scattered stores would not
    coalesce); else only on the ``stage_io`` hint."""
    PER_STATE_THREADS = 128
    DEFAULT_PER_STATE_MIN_N = 1

    def __init__(self, algorithm: "Algorithm"):
        self.algorithm = algorithm

    def direct_outputs(self, layers) -> frozenset[str]:
        """Outputs the per-state code only assigns, never reads back (``out[i] = value``, runs of
        structural zeros through ``grid_zero_run``): the CPU build has it assign them into a
        thread's image of each (``grid_lane_image``), from which each state's row is then written
        line by line, instead of running the code on a local copy of the whole output that is
        transposed out after.  For large, mostly zero outputs (idsva_so's loop form: atlas's four
        nv^3 tensors, 864 KB a state, 91% structural zeros).  Default: none."""
        return frozenset()

    def block_threads_hint(self, robot: "Robot") -> int:
        """The widest useful parallel region of the block-cooperative layout."""
        return robot.num_bodies

    def grid_data_names(self) -> dict[str, str]:
        """gridData field of each output port, where it differs from the port's name."""
        return {}

    def grid_data_fields(self, robot: "Robot", values: dict | None = None) -> tuple[GridDataField, ...]:
        """Outputs this algorithm adds to ``gridData<T>`` (``values``: its generation-time option
        values, :attr:`EmitContext.values`)."""
        names = self.grid_data_names()
        return tuple(GridDataField(names.get(p.name, p.name), math.prod(p.shape), f"{self.algorithm.name}: {p.doc}")
                     for p in self.algorithm.outputs(robot, **(values or {})))

    def make_options(self, given: dict | None):
        try:
            return self.Options(**(given or {}))
        except TypeError as exc:
            fields = ", ".join(f.name for f in attrs.fields(self.Options))
            raise PluginError(f"{self.algorithm.name}: bad algorithm option ({exc}); options: {fields}") from None

    def stage_min_n(self, ctx: EmitContext) -> int:
        return int(ctx.knob("per_state_stage_min_n", 0, 1)[0])

    def min_blocks(self, ctx: EmitContext) -> int:
        return int(ctx.knob("per_state_min_blocks", 0, 1)[0])

    def block_min_blocks(self, ctx: EmitContext) -> int:
        return int(ctx.knob("block_min_blocks", 0, 1)[0])

    def inner_body(self, layers) -> list:
        """The statements of ``X_inner`` after its placement: the block-cooperative math of
        one state, on the arrays its signature names (``s_<port>``, ``s_XI``, ``s_<region>``
        and the parts of grouped regions)."""
        raise NotImplementedError

    def state_body(self, layers) -> list:
        """The statements of ``X_state``: one state in one thread (not overridden: no
        per-state layout)."""
        raise NotImplementedError

    def leaves(self, layers) -> tuple[str, ...]:
        """The fields of this algorithm's own arena whose values its inner leaves in place when it
        returns (nothing after it writes them again): what a composing algorithm may read instead
        of computing them a second time (its :attr:`reuses`).  Default: none."""
        return ()

    def fields(self, layers) -> tuple:
        """The arrays (:class:`~grid_core.emit.storage.Field`) the steps of :meth:`steps` read and
        write, each a part of one of this algorithm's arena regions; default: none."""
        return ()

    def steps(self, layers, arrays: dict, io: dict, *, local: bool, **how):
        """This algorithm's steps, handed to an algorithm that composes it
        (:meth:`~grid_core.emit.layers.Layers.steps`): ``arrays`` its :meth:`fields` bound where the
        caller's code finds them, ``io`` the caller's port vectors (index -> expression), ``local``
        whether that code is a per-state function.  Default: none to hand out."""
        raise NotImplementedError(f"{self.algorithm.name} hands out no steps")

    def helpers(self, layers) -> list:
        """Nodes emitted before the inner, for both layouts' code: a function both call, a table
        (``static __device__ const``) both read.  Default: none."""
        return []

    def inner_doc(self, layers) -> str:
        """Extra lines for the inner's comment (its variant, say), after what the layer generator
        writes of the in-place inputs that may be null (``f_ext``) and before the sweep form (named
        by :attr:`sweep_doc`)."""
        return ""

    sweep_doc: str = "Sweep form"
    """How the inner's comment names the block layout's sweep form (options with ``p1``)."""

    @classmethod
    def layouts(cls, name: str) -> str:
        """The parallelism review's line on the layouts the layer generator writes for algorithm
        ``name`` from these declarations (a per-state layout, its staging), so that no algorithm's
        notes repeat it."""
        block = "block-cooperative (one block per state, the inline rung)"
        if cls.state_body is Emitter.state_body:
            return f"{block} only"
        pfx = name.upper()
        out = (f"{block} and per-state (one thread per state, straight-line code on registers); "
               f"the launcher picks by {pfx}_PER_STATE_MIN_N")
        if cls.stage_by_default:  # large outputs
            return (out + f"; staged through shared memory from {pfx}_STAGE_MIN_N states (coalesced stores), and "
                    f"where the outputs are too large to stage whole, through each warp's ring of shared memory "
                    f"from {pfx}_RING_MIN_N states (grid_core.emit.ring: flushed as runs of consecutive entries, a "
                    "value stored to several held once)")
        if cls.staged:
            return (out + "; a staged per-state variant (LaunchConfig::stage_io) moves each block's states through "
                    "shared memory so global accesses coalesce, for inputs in mapped host memory (the C ABI's "
                    "mapped_staged transfer)")
        return out

    @classmethod
    def validate(cls, algorithm_cls, where: str) -> None:
        if not (isinstance(cls, type) and issubclass(cls, Emitter)):
            raise PluginError(f"{where}: 'emitter' must be a subclass of grid_core.emit.emitter.Emitter")
        if cls.inner_body is Emitter.inner_body:
            raise PluginError(f"{where}: emitter {cls.__qualname__} does not implement inner_body()")
        if algorithm_cls.arenas is _base_arenas():
            raise PluginError(f"{where}: an algorithm that emits must declare its arenas()")
        if algorithm_cls.spill_rungs is _base_rungs():
            raise PluginError(f"{where}: an algorithm that emits must declare its spill_rungs()")
        missing = [c for c in cls.composes if c not in algorithm_cls.depends_on]
        if missing:
            raise PluginError(f"{where}: emitter composes {missing}, not in the algorithm's depends_on")
        stray = [c for c in cls.compose_options if c not in cls.composes]
        if stray:
            raise PluginError(f"{where}: emitter fixes the options of {stray}, which it does not compose")
        if not (isinstance(cls.Options, type) and issubclass(cls.Options, LayerOptions) and attrs.has(cls.Options)):
            raise PluginError(f"{where}: emitter Options must be an attrs class subclassing LayerOptions")


def _base_arenas():
    from ..algorithm import Algorithm

    return Algorithm.arenas


def _base_rungs():
    from ..algorithm import Algorithm

    return Algorithm.spill_rungs
