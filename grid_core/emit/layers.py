"""The layer generator: every layer of an algorithm, written from its declarations.

An algorithm's emitter (:class:`~grid_core.emit.emitter.Emitter`) declares its ports
(the :class:`~grid_core.algorithm.Algorithm`'s), its scratch arenas and spill rungs, which
inputs it reads in place, which may be null, its per-algorithm options, and supplies the
math: ``inner_body`` (block-cooperative, one state per block) and, where it has one,
``state_body`` (one state per thread, straight-line code).  :class:`Layers` writes the rest,
the same way for every algorithm:

* ``X_inner<T, R_IN_SMEM...>``: the math, placement of each scratch region chosen at its top;
* ``X_device<T, R_IN_SMEM...>``: the inline rung: carves ``s_temp`` / ``d_workspace`` by the
  arena plan, loads XImats once (when the inner needs it), calls the inner;
* ``X_kernel<T, RESOURCE_TIER>``: loads, per-tier dispatch with each rung's own flags,
  grid-stride loop over the batch;
* ``X_state`` / ``X_per_state_kernel`` (and ``X_per_state_staged_kernel`` on request, with
  ``X_state_ring`` / ``X_per_state_ring_kernel`` where the outputs are too large to stage whole:
  :mod:`.ring`);
* ``X_resolve_layout``, the attribute opt-in, ``X_workspace_bytes``, ``X_launch_strided``,
  ``X_launch`` (the C ABI's convention) and the host ``X(hd_data, ...)`` wrapper.

Every offset comes from the :class:`~grid_core.arena.ArenaPlan`; every signature is a
:class:`~grid_core.emit.signature.Signature`, and every call of one is checked against it.
An orchestrator reaches another algorithm's inner through :meth:`Layers.compose` (the
composer's handle): signature, plan, placement flags and preconditions, never a copy.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import TYPE_CHECKING

import attrs

from ..arena import ArenaPlan, ArenaRegion, Tier, padded
from ..errors import CodegenError
from . import arena_emit
from . import nodes as n
from . import ring, sweeps
from .storage import Array, Vector, local_declaration
from .signature import Call, Launch, Param, Signature, TemplateParam

if TYPE_CHECKING:  # pragma: no cover
    from .emitter import EmitContext


@attrs.frozen
class ParamSpec:
    """How a ``param`` port (one value for the whole batch) crosses the layers: ``ctype`` in
    the kernels, built from the launcher's host pointer by ``from_host`` (``{h}`` is that
    pointer, which may be null: the port's default)."""

    port: str
    ctype: str
    from_host: str
    to_lanes: str
    """The value for a per-state function on vector lanes ``V`` (every lane the same): ``{p}``
    is the kernel's value, ``{V}`` the lanes type."""

    def convert(self, host_pointer: str) -> str:
        return self.from_host.format(h=host_pointer)

    def lanes(self, value: str, lanes_type: str) -> str:
        return self.to_lanes.format(p=value, V=lanes_type)


GRAVITY = ParamSpec("gravity", "const Gravity<T>",
                    "{h} == nullptr ? Gravity<T>() : Gravity<T>({h}[0], {h}[1], {h}[2])",
                    "Gravity<{V}>({p}.x, {p}.y, {p}.z)")
"""Gravity in the world frame: 3 host values, or null for (0, 0, -9.81)."""

DT = ParamSpec("dt", "const T", "T({h}[0])", "{V}({p})")
"""A time step: 1 host value."""

PARAMS = {"gravity": GRAVITY, "dt": DT}
"""The param ports the generator knows, by name."""

NULLABLE_NOTES = {"f_ext": "this state's external forces"}
"""What the inner's comment calls the framework's state inputs (:func:`~grid_core.algorithm.f_ext_port`)
an algorithm reads in place and takes as nullptr where absent."""

XI_REGION = "XI"

# The host forms (the gridData wrappers here, the C ABI's host form) move a batch through mapped
# memory while (states) x (input values per state)^2 stays under this, and through the copy
# engine above it.  What mapped memory adds to the kernel grew as that product on the H200
# (about 4.8 ps per unit for iiwa14, go2 and g1 alike: experiments of 2026-11-30, per state the
# loads are serial round trips over the bus), while the copy engine costs a fixed ~15-25 µs for
# its two transfers: so mapped memory for iiwa14 to ~9000 states, go2 to ~1300, g1 to ~350.
MAPPED_MAX_WORK = 4_000_000

# ... and while the kernel's stores reach the bus merged into lines or are few.  Through mapped memory
# every store crosses the bus as the kernel makes it; the copy engine moves the outputs at ~53 GB/s
# after a fixed ~15 us.  Measured (H200 b3cf4ce / 7819aa9 / fda5422, H100 b10591c / c2c26cd, the
# results files; float32, with copies, mapped / copy engine, us), with the rule each set:
# - the block layout, a state's outputs stored by its block: mapped won at up to 9.6 KiB a state
#   (g1's inverse-dynamics gradient at N = 256 202 / 210), lost at 91 KiB (go2's idsva_so at N = 16
#   339 / 218; g1's, 670 KiB, 1999 / 828);
MAPPED_BLOCK_STATE_BYTES = 32 << 10
# - the per-state layout staged through shared memory (coalesced): mapped won at up to 1.3 KiB a
#   state (go2's Minv, to N = 1048576: 26506 / 28878), lost at 3.5 KiB (atlas's Minv at N = 4096,
#   fda5422: 382 / 336) and 4.8 KiB (g1's Minv at 1024, H100 b10591c: 215 / 167);
MAPPED_STAGED_STATE_BYTES = 2 << 10
# - the per-state layout unstaged, each thread storing its own state's row: rows of up to 140 bytes
#   stored well (inverse dynamics: the input bound decides), from 196 bytes mapped memory lost at
#   100 KiB a batch and more (iiwa14's plain Minv at N = 1024, 196-byte rows, H200 d2de5cd: 62 / 27; its
#   inverse-dynamics gradient at N = 256, 392-byte rows: 51 / 35; go2's at 1024, 2.6 KiB rows:
#   327 / 135; end-effector poses at 1024, 256-byte rows: 113 / 32 on go2).
MAPPED_ROW_BYTES = 160
MAPPED_SCATTERED_BATCH_BYTES = 64 << 10

# Mapped memory picked by size takes the staged per-state kernel (Layers.stages_mapped) from this
# batch on.  H200, b3cf4ce, iiwa14 CRBA's host path plain / staged: B = 16 14.0 / 17.9 us (a block of
# 16 states: staging adds its barrier-bound passes and saves little bus traffic), B = 256 27.7 /
# 17.1, B = 1024 74.1 / 19.4 (Minv: 14.4 / 15.0, 28.9 / 15.4, 63.3 / 18.8); 64 lies between.
MAPPED_STAGE_MIN_N = 64
# Shared memory a block gets without opting in: what the staged kernel's block is sized within.
STAGE_KB = 48
# Batches from which a robot too large to stage whole takes the ring kernel (grid_core.emit.ring)
# unless its tuning says otherwise.  H200, float32, atlas Minv, plain / ring: N = 1024 32.6 / 55.9 us,
# 4096 73.7 / 57.4, 16384 326 / 137.
RING_MIN_N = 4096


def xi_region(robot) -> ArenaRegion:
    from .spatial_steps import xi_size

    return ArenaRegion(XI_REGION, xi_size(robot), "configuration-dependent transform data (loaded once per state)")


def mapped_by_size(num_timesteps: int, in_values: int, out_bytes: int, block: bool = False,
                   staged: bool = False) -> bool:
    """The host forms' choice by size (``grid_mapped_by_size`` in the header): mapped memory for a
    batch of ``num_timesteps`` states, each of ``in_values`` input values and ``out_bytes`` bytes of
    outputs, launched in the block layout (``block``) or per state, staged or not (``staged``); else
    the copy engine.  The bounds above say what each was set from."""
    if num_timesteps * in_values * in_values > MAPPED_MAX_WORK:
        return False
    if block:
        return out_bytes <= MAPPED_BLOCK_STATE_BYTES
    if staged:
        return out_bytes <= MAPPED_STAGED_STATE_BYTES
    return out_bytes <= MAPPED_ROW_BYTES or num_timesteps * out_bytes <= MAPPED_SCATTERED_BATCH_BYTES


def mapped_rule_function():
    """``grid_mapped_by_size``: :func:`mapped_by_size` in C++, which the gridData wrappers and the C
    ABI's host form call (:meth:`Layers.mapped_rule`)."""
    return [
        n.Comment("The host forms' transfer by size (grid_core.emit.layers.mapped_by_size): mapped memory while\n"
                  "states x (input values a state)^2 stays within the bound (the kernel's loads over the bus are\n"
                  "serial round trips) and the kernel's stores reach the bus merged into lines or are few (each\n"
                  "crosses the bus as it is made; the copy engine moves the outputs at ~53 GB/s after ~15 us);\n"
                  "else the copy engine, one transfer each way.  out_bytes: a state's outputs."),
        n.Function("inline bool grid_mapped_by_size(size_t n, size_t in_values, size_t out_bytes, bool block, "
                   "bool staged)", [
            n.If(f"n * in_values * in_values > {MAPPED_MAX_WORK}ull", [n.Stmt("return false")]),
            n.If("block", [n.Stmt(f"return out_bytes <= {MAPPED_BLOCK_STATE_BYTES}ull",
                                  comment="a state's outputs stored by its block")]),
            n.If("staged", [n.Stmt(f"return out_bytes <= {MAPPED_STAGED_STATE_BYTES}ull",
                                   comment="coalesced through shared memory")]),
            n.Stmt(f"return out_bytes <= {MAPPED_ROW_BYTES}ull || n * out_bytes <= {MAPPED_SCATTERED_BATCH_BYTES}ull",
                   comment="a thread's row: short, or few"),
        ]),
    ]


def _size(port) -> int:
    return math.prod(port.shape)


def _flag(region: str) -> str:
    return arena_emit.flag(region)


class Layers:
    """The layers of one algorithm for one robot (see the module docstring)."""

    def __init__(self, ctx: "EmitContext", emitter, compose=None, fixed: dict | None = None):
        self.ctx = ctx
        self.emitter = emitter
        self.alg = ctx.algorithm
        self.robot = ctx.robot
        self.fixed_options: dict = dict(fixed or {})
        """The options callers fixed on this algorithm (Emitter.compose_options), where they differ
        from the header's: a variant, named ``<algorithm>_<values>``; else empty."""
        self.name = "_".join([self.alg.name, *(str(v) for v in self.fixed_options.values())])
        """The C++ name of its functions: the algorithm's, or the variant's."""
        if not self.name.isidentifier():
            raise CodegenError(f"{self.alg.name}: options {self.fixed_options} fixed by a caller do not make a "
                               "C++ name")
        self.callers: list[str] = []
        """The algorithms composing this variant (the composer's record, for the header's comment)."""
        self.pfx = self.name.upper()
        self._compose = compose
        # 'option' ports are fixed at generation time (ctx.values: the frames), never kernel arguments
        ins, outs = tuple(self.alg.inputs(self.robot)), tuple(self.alg.outputs(self.robot, **ctx.values))
        self.outputs = outs
        self.states = tuple(p for p in ins if p.kind == "state")
        self.params = tuple(p for p in ins if p.kind == "param")
        for p in ins:
            if p.kind == "option" and p.name not in ctx.values:
                raise CodegenError(f"{self.name}: option port '{p.name}' has no generation-time value")
        for p in self.params:
            if p.name not in PARAMS:
                raise CodegenError(f"{self.name}: param port '{p.name}' has no ParamSpec (known: {', '.join(PARAMS)})")
        state_names = {p.name for p in self.states}
        self.global_inputs = tuple(emitter.global_inputs)
        nullable = emitter.nullable_inputs
        self.nullable = tuple(p.name for p in self.states if p.optional) if nullable is None else tuple(nullable)
        for name in self.global_inputs + self.nullable:
            if name not in state_names:
                raise CodegenError(f"{self.name}: '{name}' is not a state input")
        self.smem_inputs = tuple(p for p in self.states if p.name not in self.global_inputs)
        self.global_outputs = tuple(emitter.global_outputs)
        if not set(self.global_outputs) <= {p.name for p in outs}:
            raise CodegenError(f"{self.name}: global_outputs {self.global_outputs} are not all outputs")
        self.smem_outputs = tuple(p for p in outs if p.name not in self.global_outputs)
        composed = self.composed_names(emitter, ctx.algorithm_options, ctx.tuning)
        self.callees = {name: compose(name) for name in composed}
        self.reused = self.reused_fields(emitter, compose, composed)
        """This algorithm's fields a composed inner leaves computed (:attr:`Emitter.reuses`): field
        -> (callee, its field); :meth:`arrays` binds them to the callee's, and the code skips them."""
        for h in self.callees.values():
            if h.needs_ximats and not emitter.needs_ximats:
                raise CodegenError(f"{self.name}: composes {h.name}, whose inner needs XImats loaded: "
                                   "set needs_ximats = True")
        self.plan: ArenaPlan = ctx.plan
        self.has_state = type(emitter).state_body is not _base_state_body()
        self.direct_outputs = frozenset(emitter.direct_outputs(self)) if self.has_state else frozenset()
        if not set(self.direct_outputs) <= {p.name for p in outs}:
            raise CodegenError(f"{self.name}: direct_outputs {sorted(self.direct_outputs)} are not all outputs")
        self._sigs()

    # -- declarations -------------------------------------------------------------

    @staticmethod
    def composed_names(emitter, options, tuning) -> tuple[str, ...]:
        """The inners ``emitter`` composes for these options and this tuning (checked against
        its declaration)."""
        names = tuple(emitter.composed(options, tuning))
        extra = [x for x in names if x not in emitter.composes]
        if extra:
            raise CodegenError(f"{emitter.algorithm.name}: composes {extra}, not declared in Emitter.composes")
        return names

    @staticmethod
    def reused_fields(emitter, compose, composed) -> dict[str, tuple[str, str]]:
        """The entries of ``emitter``'s :attr:`~grid_core.emit.emitter.Emitter.reuses` whose callee
        is ``composed`` for this robot and leaves that field (its
        :meth:`~grid_core.emit.emitter.Emitter.leaves`)."""
        out = {}
        for field, (callee, theirs) in emitter.reuses.items():
            if callee not in emitter.composes:
                raise CodegenError(f"{emitter.algorithm.name}: reuses '{field}' from '{callee}', "
                                   "not declared in Emitter.composes")
            if callee in composed:
                h = compose(callee)
                if theirs in h.emitter.leaves(h):
                    out[field] = (callee, theirs)
        return out

    @staticmethod
    def regions(alg, robot, options, emitter, compose, composed=None, values=None) -> tuple[ArenaRegion, ...]:
        """The whole arena of ``alg``: its ports' I/O regions (fixed; ``values``: its generation-time
        option values, the outputs' sizes), XI (when its inner needs it), its own scratch regions
        but those of the fields a composed inner leaves (:meth:`reused_fields`), then those of the
        inners it composes."""
        ins = alg.inputs(robot)
        fixed = [ArenaRegion(p.name, _size(p), f"{p.doc} (kernel output)", spillable=False)
                 for p in alg.outputs(robot, **(values or {})) if p.name not in emitter.global_outputs]
        fixed += [ArenaRegion(p.name, _size(p), f"{p.doc} (kernel input)", spillable=False)
                  for p in ins if p.kind == "state" and p.name not in emitter.global_inputs]
        scratch = [xi_region(robot)] if emitter.needs_ximats else []
        reused = Layers.reused_fields(emitter, compose, emitter.composes if composed is None else composed)
        own = list(alg.arenas(robot, options, **(values or {})))  # frames too, where it takes them
        for name in reused:
            if not any(r.name == name and not r.parts for r in own):
                raise CodegenError(f"{alg.name}: reused field '{name}' is not an arena region of its own")
        scratch += [r for r in own if r.name not in reused]
        own = {r.name for r in fixed + scratch}
        if len(own) != len(fixed + scratch):
            raise CodegenError(f"{alg.name}: an arena region is declared twice ({[r.name for r in fixed + scratch]})")
        seen: dict = {}
        for name in emitter.composes if composed is None else composed:
            for r in compose(name).scratch_regions:
                if r.name not in own and r.name not in seen:
                    seen[r.name] = r
                    scratch.append(r)
                elif r.name in own or seen[r.name] != r:
                    raise CodegenError(f"{alg.name}: arena region '{r.name}' declared twice (a composed inner's "
                                       "scratch shares its name with one of this algorithm's)")
                # else: the same region of the same composed algorithm, reached through two callees
                # (an orchestrator composing minv and an algorithm that composes minv too): one
                # region both use, the orchestrator's calls in turn, a barrier between
        return tuple(fixed + scratch)

    @property
    def helper_groups(self) -> tuple[str, ...]:
        """The framework's helper groups this algorithm's code calls beyond its emitter's
        :attr:`~grid_core.emit.emitter.Emitter.shared_helpers`: ``"lane_cells"`` where it assigns
        outputs cell by cell (:meth:`~grid_core.emit.emitter.Emitter.direct_outputs`)."""
        return ("lane_cells",) if self.direct_outputs else ()

    @property
    def scratch_regions(self) -> tuple[ArenaRegion, ...]:
        """The regions this algorithm's inner takes (placement flags), composed ones included."""
        return tuple(r for r in self.plan.regions if r.spillable and r.name != XI_REGION)

    @property
    def needs_ximats(self) -> bool:
        return bool(self.emitter.needs_ximats)

    @property
    def flags(self) -> tuple[str, ...]:
        """The inner's placement flags, in template order."""
        return tuple(_flag(r.name) for r in self.scratch_regions)

    def _param_params(self) -> list[Param]:
        return [Param(PARAMS[p.name].ctype, p.name) for p in self.params]

    def _sigs(self) -> None:
        T = TemplateParam("typename", "T")
        out_s = [Param("T *", f"s_{p.name}") if p.name not in self.global_outputs else Param("T *", p.name)
                 for p in self.outputs]
        in_s = [Param("const T *", f"s_{p.name}") if p.name not in self.global_inputs
                else Param("const T *", p.name) for p in self.states]
        inner_params = [*out_s, *in_s]
        if self.needs_ximats:
            inner_params.append(Param("T *" if self.emitter.reloads_ximats else "const T *", "s_XI"))
        for r in self.scratch_regions:
            inner_params += [Param("T *", f"s_{r.name}"), Param("T *", f"d_{r.name}")]
        inner_params += self._param_params()
        self.inner = Signature(f"{self.name}_inner", inner_params, "__device__",
                               template=[T, *[TemplateParam("bool", f, "true") for f in self.flags]])
        # the inline rung: shared-memory data, the model, this state's global inputs, params, scratch
        dev_smem = [Param("const T *", f"s_{p.name}") for p in self.states if p.name not in self.global_inputs]
        dev_global = [Param("const T *", f"d_{p.name}") for p in self.states if p.name in self.global_inputs]
        dev_out = [Param("T *", f"s_{p.name}") if p.name not in self.global_outputs else Param("T *", f"d_{p.name}")
                   for p in self.outputs]
        self.device = Signature(
            f"{self.name}_device",
            [*dev_out, *dev_smem, Param("const robotModel<T> *", "d_robotModel"), *dev_global, *self._param_params(),
             Param("T *", "s_temp", "nullptr"), Param("T *", "d_workspace", "nullptr")],
            "__device__",
            template=[T, *[TemplateParam("bool", _flag(r.name), "true") for r in arena_emit.spillable(self.plan)]])
        k_in = []
        for p in self.states:
            k_in.append(Param("const T *", f"d_{p.name}"))
            if p.name not in self.global_inputs:
                k_in.append(Param("const int", f"stride_{p.name}"))
        k_out = [Param("T *", f"d_{p.name}") for p in self.outputs]
        self.kernel = Signature(
            f"{self.name}_kernel",
            [*k_out, *k_in, Param("const robotModel<T> *", "d_robotModel"), *self._param_params(),
             Param("const int", "num_timesteps"), Param("T *", "d_workspace")],
            "__global__", template=[T, TemplateParam("int", "RESOURCE_TIER", "TIER_SHARED")],
            # an occupancy bound only where one was asked or measured better (as the staged kernel's)
            attributes=(f"__launch_bounds__(tier_max_threads<RESOURCE_TIER>(), "
                        f"RESOURCE_TIER == TIER_SHARED ? {self.pfx}_BLOCK_MIN_BLOCKS : 1)"
                        if self.emitter.block_min_blocks(self.ctx) > 1 else
                        "__launch_bounds__(tier_max_threads<RESOURCE_TIER>())"))
        use = [TemplateParam("bool", f"USE_{x.upper()}") for x in self.nullable]
        self.use_defaults = [TemplateParam("bool", f"USE_{x.upper()}",
                                           "false" if self._port(x).optional else "true") for x in self.nullable]
        if self.has_state:
            # outputs assigned cell by cell (direct_outputs): any type with out[i] = value (grid_lane_image on the CPU)
            direct = [TemplateParam("typename", "OUT", "T *")] if self.direct_outputs else []
            self.state = Signature(
                f"{self.name}_state",
                [*[Param("OUT" if p.name in self.direct_outputs else "T *", p.name) for p in self.outputs],
                 *[Param("const T *", p.name) for p in self.states], *self._param_params()],
                "__device__ __forceinline__", template=[T, *self.use_defaults, *direct])
            self.per_state_kernel = Signature(
                f"{self.name}_per_state_kernel", [*k_out, *k_in, *self._param_params(), Param("const int", "num_timesteps")],
                "__global__", template=[T, *use],
                attributes=f"__launch_bounds__({self.pfx}_PER_STATE_THREADS, {self.pfx}_PER_STATE_MIN_BLOCKS)")
            if self.emitter.staged:
                self.staged_kernel = Signature(
                    f"{self.name}_per_state_staged_kernel",
                    [*k_out, *k_in, *self._param_params(), Param("const int", "num_timesteps")],
                    "__global__", template=[T, *use, TemplateParam("bool", "PACKED")],
                    # the occupancy bound only where one was measured better: an explicit minimum of 1
                    # block changes ptxas's register heuristics (iiwa14's staged RNEA: 80 -> 112 registers)
                    attributes=(f"__launch_bounds__({self.pfx}_PER_STATE_THREADS, {self.pfx}_PER_STATE_MIN_BLOCKS)"
                                if self.emitter.min_blocks(self.ctx) > 1 else
                                f"__launch_bounds__({self.pfx}_PER_STATE_THREADS)"))
                if self.ring_plan is not None:
                    self.ring_state = Signature(
                        f"{self.name}_state_ring",
                        [Param("T *", "tile"), *[Param("T *", p.name) for p in self.outputs],
                         *[Param("const T *", p.name) for p in self.states], *self._param_params(),
                         Param("const int", "lane"), Param("const int", "width"), Param("const unsigned", "mask"),
                         Param("const int", "count")],
                        "__device__ __forceinline__", template=[T, *self.use_defaults])
                    self.ring_kernel = Signature(
                        f"{self.name}_per_state_ring_kernel",
                        [*k_out, *k_in, *self._param_params(), Param("const int", "num_timesteps")],
                        "__global__", template=[T, *use],
                        attributes=f"__launch_bounds__({self.pfx}_PER_STATE_THREADS, {self.pfx}_PER_STATE_MIN_BLOCKS)")
        cfg = [Param("const int", "num_timesteps"), Param("LaunchConfig", "cfg"), Param("T *", "d_workspace"),
               Param("size_t", "workspace_bytes"), Param("cudaStream_t", "stream")]
        self.launch_strided = Signature(f"{self.name}_launch_strided", [*k_out, *k_in, *self._param_params(), *cfg],
                                        "__host__", "cudaError_t", template=[T])
        self.launch = Signature(
            f"{self.name}_launch",
            [*k_out, *[Param("const T *", f"d_{p.name}") for p in self.states],
             *[Param("const T *", f"h_{p.name}") for p in self.params], *cfg],
            "__host__", "cudaError_t", template=[T])
        self.workspace_bytes = Signature(
            f"{self.name}_workspace_bytes", [Param("int", "num_timesteps"), Param("LaunchConfig", "cfg", "LaunchConfig()")],
            "__host__", "size_t", template=[T])
        self.host = self._host_signature()

    @property
    def state_nodes(self) -> list:
        """The emitter's per-state body (built once: the plain and the ring state functions share it)."""
        if not hasattr(self, "_state_nodes"):
            self._state_nodes = list(self.emitter.state_body(self))
        return self._state_nodes

    @property
    def ring_plan(self) -> "ring.RingPlan | None":
        """The ring schedule of the per-state outputs (:mod:`.ring`), for a staged algorithm with one
        output too large for a warp's 32 states to stage whole in 48 KB, in float32; else None."""
        if not hasattr(self, "_ring_plan"):
            self._ring_plan = None
            if self.has_state and self.emitter.staged and len(self.outputs) == 1:
                p = self.outputs[0]
                if STAGE_KB * 1024 // (sum(self._staged_row()) * 4) < 32:  # STAGED_THREADS<float>() == 0
                    self._ring_plan = ring.plan(
                        self.state_nodes, p.name, _size(p),
                        lambda g0, g1: n.Stmt(f"grid_ring_flush<T, {_size(p)}>({p.name}, tile, "
                                              f"{self.pfx}_RING_TABLE, {g0}, {g1}, lane, width, mask, count)"),
                        whole_call=(lambda: n.Stmt(f"grid_ring_flush_whole<T, {_size(p)}>({p.name}, tile, "
                                                   f"{self.pfx}_RING_SLOT_OF, lane, width, mask, count)"))
                        if self.ctx.knob("per_state_ring_flush", "auto", "groups")[0] == "whole" else None)
        return self._ring_plan

    def _staged_row(self) -> list[int]:
        """Values per state of the staged kernel's shared memory: each staged input's, then each
        output's row (``X_STAGED_ROW`` is their sum)."""
        return [_staged_stride(p) for p in (*self.smem_inputs, *self.outputs)]

    def _port(self, name: str):
        for p in self.states:
            if p.name == name:
                return p
        raise CodegenError(f"{self.name}: no state input '{name}'")

    # -- composition ---------------------------------------------------------------

    def compose(self, name: str) -> "Layers":
        """The handle of a composed algorithm's layers (declared in ``Emitter.composes``)."""
        if name not in self.callees:
            raise CodegenError(f"{self.name}: '{name}' is not among the inners it composes "
                               f"(Emitter.composes = {tuple(self.emitter.composes)})")
        return self.callees[name]

    def vectors(self, local: bool = False) -> dict:
        """This algorithm's port vectors and the transform data, index -> C++ expression, as its
        code finds them: ``s_<port>`` and ``s_XI`` in the inner (block layout), the per-state
        function's ``<port>`` and its local ``XI`` (``local``).  Inputs read in place stay pointers."""
        pre = "" if local else "s_"
        cols = {p.name: p.shape[-1] if len(p.shape) > 1 else 0 for p in (*self.outputs, *self.states)}
        out = {p.name: Vector(f"{pre}{p.name}", cols[p.name]) for p in (*self.smem_outputs, *self.smem_inputs)}
        out.update({nm: Vector(nm, cols[nm]) for nm in self.global_outputs})
        out["xi"] = Vector(f"{pre}{XI_REGION}")
        return out

    def locals(self, arrays=(), comment: str = "registers: every index is a constant") -> n.Stmt:
        """The per-state function's declaration of its local arrays (bound by :meth:`arrays`), the
        transform data's first."""
        return local_declaration(arrays, [f"{XI_REGION}[XI_SIZE]"], comment)

    def part_pointer(self, region: str, part: str) -> str:
        """The inner's pointer to ``part`` of arena region ``region``: ``s_<part>``, or
        ``s_<region>_<part>`` where another region or part of the plan has that name too (an
        orchestrator's arena holds every composed algorithm's regions: ABA's and RNEA's ``v``)."""
        names = [nm for r in self.plan.regions for nm in (r.name, *(p for p, _ in r.parts))]
        return f"s_{part}" if names.count(part) == 1 else f"s_{region}_{part}"

    def arrays(self, fields, local: bool = False, owner: "Layers | None" = None) -> dict[str, Array]:
        """``fields`` (:class:`~grid_core.emit.storage.Field`) bound where this algorithm's code finds
        them: in the inner, the parts of its arena's regions (:meth:`part_pointer`; among ``owner``'s
        own regions where given, a composed algorithm's; a field the plan does not hold, or holds at
        another size, is an error), in the per-state function local arrays (``local``: declared
        with :func:`~grid_core.emit.storage.local_declaration`)."""
        whose = self if owner is None else owner
        if local:  # a reused field: the callee's local, which its steps declare in this function
            return {f.name: Array(f, whose.reused.get(f.name, (None, f.name))[1]) for f in fields}
        sizes = {p.name: _size(p) for p in self.outputs if p.name in self.global_outputs}
        if any(sizes.get(f.name) == f.size for f in fields):  # written in place: the inner's pointer
            return {**self.arrays([f for f in fields if sizes.get(f.name) != f.size], owner=owner),
                    **{f.name: Array(f, f.name) for f in fields if sizes.get(f.name) == f.size}}
        out = {}
        for f in fields:  # a field its owner reuses: bound where the callee's is
            if f.name in whose.reused:
                callee, theirs = whose.compose(whose.reused[f.name][0]), whose.reused[f.name][1]
                given = [g for g in callee.emitter.fields(callee) if g.name == theirs and g.size == f.size]
                if len(given) != 1:
                    raise CodegenError(f"{whose.name}: reused field '{f.name}' has no field '{theirs}' of "
                                       f"{f.size} scalars in {callee.name}")
                out[f.name] = Array(f, self.arrays(given, owner=callee)[theirs].base)
        fields = [f for f in fields if f.name not in out]
        mine = None if owner is None else {r.name for r in owner.plan.regions}
        for f in fields:
            found = [(r.name, p) for r in self.plan.regions if mine is None or r.name in mine
                     for p, size in (r.parts or ((r.name, r.elements),)) if p == f.name and size == f.size]
            if len(found) != 1:
                raise CodegenError(f"{self.name}: {'no' if not found else 'more than one'} arena region or part "
                                   f"'{f.name}' of {f.size} scalars")
            region, part = found[0]
            out[f.name] = Array(f, f"s_{part}" if region == part else self.part_pointer(region, part))
        return out

    def own_steps(self, local: bool = False):
        """This algorithm's own steps (:meth:`~grid_core.emit.emitter.Emitter.steps`) on its fields,
        bound by :meth:`arrays`, and its port vectors: what the bodies of its two layouts run."""
        return self.emitter.steps(self, self.arrays(self.emitter.fields(self), local), self.vectors(local), local=local)

    def steps(self, name: str, local: bool = False, **how):
        """The steps of composed algorithm ``name`` on its fields, bound where this algorithm's code
        finds them (:meth:`arrays`), reading this algorithm's port vectors (:meth:`vectors`):
        what a derivative runs its base algorithm's passes through, instead of a copy.  ``how``:
        the callee's own step options (:meth:`~grid_core.emit.emitter.Emitter.steps`)."""
        callee = self.compose(name)
        arrays = self.arrays(callee.emitter.fields(callee), local, owner=callee)
        return callee.emitter.steps(callee, arrays, self.vectors(local), local=local, **how)

    def call_inner(self, callee: "Layers", **args) -> Call:
        """A call of ``callee``'s inner from this algorithm's inner: ``args`` name its data
        (``s_tau="s_tau"``); XImats, the callee's scratch regions (with their placement flags
        forwarded) and the params of the same name are handed over by the generator."""
        full = dict(args)
        if callee.needs_ximats:
            full.setdefault("s_XI", "s_XI")
        for r in callee.scratch_regions:
            full.setdefault(f"s_{r.name}", f"s_{r.name}")
            full.setdefault(f"d_{r.name}", f"d_{r.name}")
        for p in callee.params:
            full.setdefault(p.name, p.name)
        template = {"T": "T", **{f: f for f in callee.flags}}
        return callee.inner.call(full, template)

    def call_state(self, callee: "Layers", template=None, **args) -> Call:
        """A call of ``callee``'s per-state function (params of the same name handed over)."""
        full = dict(args)
        for p in callee.params:
            full.setdefault(p.name, p.name)
        return callee.state.call(full, {"T": "T", **(template or {})})

    # -- the layers ----------------------------------------------------------------

    def emit(self) -> list:
        em = self.emitter
        out = [*arena_emit.size_constants(self.plan, self.pfx)]
        hint = max([em.block_threads_hint(self.robot)]
                   + [h.emitter.block_threads_hint(self.robot) for h in self.callees.values()])
        threads = max(32, min(512, -(-hint // 32) * 32))
        out += [n.Comment("Default block size of this algorithm's block-cooperative layout: its widest parallel\n"
                          "region, a warp multiple (a hint: any block size is correct; MAX_PERF_LEVEL_THREADS,\n"
                          "the header's widest, bounds TIER_SHARED)."),
                n.Stmt(f"static constexpr int {self.pfx}_BLOCK_THREADS = {threads}")]
        if em.block_min_blocks(self.ctx) > 1:
            source = self.ctx.knob("block_min_blocks", 0, 1)[1]
            out += [n.Comment(f"Blocks per SM the TIER_SHARED block kernel's registers must allow ({source}): "
                              "occupancy for registers."),
                    n.Stmt(f"static constexpr int {self.pfx}_BLOCK_MIN_BLOCKS = {em.block_min_blocks(self.ctx)}")]
        if self.has_state:
            min_n = self.per_state_min_n()
            source = "measured on the GPU" if "per_state_min_n" in self.ctx.tuning else "default, not yet measured"
            out += [
                n.Comment(f"Batches of at least this many states use the per-state layout ({source})."),
                n.Stmt(f"static constexpr int {self.pfx}_PER_STATE_MIN_N = {min_n}"),
                n.Stmt(f"static constexpr int {self.pfx}_PER_STATE_THREADS = {em.PER_STATE_THREADS}"),
                n.Comment("Whether a small batch's per-state launch spreads over every SM (grid_spread_threads) "
                          "or fills\nfull blocks of the kernel's block size on a few."),
                n.Stmt(f"static constexpr bool {self.pfx}_PER_STATE_SPREAD = "
                       f"{'true' if getattr(self.ctx.algorithm_options, 'per_state_spread', True) else 'false'}"),
                n.Comment("Blocks per SM the per-state kernel's registers must allow (occupancy vs registers)."),
                n.Stmt(f"static constexpr int {self.pfx}_PER_STATE_MIN_BLOCKS = {em.min_blocks(self.ctx)}"),
            ]
            if em.staged:
                row = " + ".join(str(x) for x in self._staged_row())
                out += [
                    n.Comment("Staged per-state kernel: values per state in shared memory (inputs and outputs,"),
                    n.Comment("each array's row made odd against bank conflicts),"),
                    n.Comment("and its block size: the largest multiple of 32 up to the per-state one within the"),
                    n.Comment("48 KB a block gets without opting in (0: too big to stage; the plain kernel runs)."),
                    n.Stmt(f"static constexpr int {self.pfx}_STAGED_ROW = {row}"),
                    *([n.Comment("The per-state layout stages through shared memory unless told otherwise (its "
                                 "outputs are\nlarge: staged, the stores coalesce; the CPU build never stages, "
                                 "there is nothing to coalesce)."),
                       n.Stmt(f"static constexpr bool {self.pfx}_STAGE_BY_DEFAULT = true"),
                       n.Comment("... for batches of at least this many states (below, the plain kernel overlaps its\n"
                                 "loads and stores with the compute; "
                                 + ("measured on the GPU)." if "per_state_stage_min_n" in self.ctx.tuning
                                    else "default, not yet measured).")),
                       n.Stmt(f"static constexpr int {self.pfx}_STAGE_MIN_N = {em.stage_min_n(self.ctx)}")]
                     if em.stage_by_default else []),
                    n.Function(
                        f"__host__ __device__ constexpr int {self.pfx}_STAGED_THREADS()",
                        [n.Stmt(f"constexpr int fit = int({STAGE_KB} * 1024 / ({self.pfx}_STAGED_ROW * sizeof(T))) / 32 * 32"),
                         n.Stmt(f"return fit < {self.pfx}_PER_STATE_THREADS ? fit : {self.pfx}_PER_STATE_THREADS")],
                        template="template <typename T>"),
                ]
                if self.ring_plan is not None:
                    out += self._ring_constants()
        for helper in self.helpers:
            out += [n.Blank(), helper]
        out += [n.Blank(), self._inner_fn(), n.Blank(), self._device_fn(), n.Blank(), self._kernel_fn()]
        if self.has_state:
            out += [n.Blank(), self._state_fn(), n.Blank(), self._per_state_kernel_fn()]
            if em.staged:
                out += [n.Blank(), self._staged_kernel_fn()]
            if self.ring_plan is not None:
                out += [n.Blank(), self._ring_state_fn(), n.Blank(), self._ring_kernel_fn()]
        out += [n.Blank(), *self._launcher_fns()]
        host = self._host_fn()
        if host is not None:
            out += [n.Blank(), host]
        return out

    def emit_composed(self) -> list:
        """What a variant emits (:attr:`fixed_options`): its sizing constants, helpers, inner and
        per-state function, the functions its callers reach; no kernels, launchers or host wrapper
        (the header's own algorithm of that name has them)."""
        if not self.fixed_options:
            raise CodegenError(f"{self.name}: only a variant is emitted for its callers alone")
        out = [*arena_emit.size_constants(self.plan, self.pfx)]
        for helper in self.helpers:
            out += [n.Blank(), helper]
        out += [n.Blank(), self._inner_fn()]
        if self.has_state:
            out += [n.Blank(), self._state_fn()]
        return out

    @property
    def helpers(self) -> list:
        """The emitter's helper nodes (:meth:`~grid_core.emit.emitter.Emitter.helpers`), built once:
        both layouts' code reads them."""
        if not hasattr(self, "_helpers"):
            self._helpers = list(self.emitter.helpers(self))
        return self._helpers

    def declarations(self) -> list[tuple[Signature, str]]:
        """``(signature, doc)`` of every layer, in header order (what the docs print; not the
        emitter's helpers, which the layers call)."""
        helpers = {id(h) for h in self.helpers}
        return [(x.signature, x.doc) for x in self.emit()
                if isinstance(x, n.Function) and isinstance(x.signature, Signature) and id(x) not in helpers]

    def constants(self) -> list[str]:
        """Declarations of the sizing constants (``X_*``), in header order."""
        from .printer import render

        out = []
        for x in self.emit():
            if isinstance(x, n.Function) and isinstance(x.signature, str) and f" {self.pfx}_" in x.signature:
                out.append((x.template + " " if x.template else "") + x.signature + ";")
            elif isinstance(x, n.Stmt) and x.text.startswith(f"static constexpr int {self.pfx}_"):
                out.append(render(x).strip())
        return out

    def _inner_fn(self) -> n.Function:
        body: list = []
        if self.scratch_regions:
            body.append(n.Comment("placement, chosen here at the top: then the body is the same wherever the scratch lives"))
        for r in self.scratch_regions:
            f = _flag(r.name)
            body.append(n.Raw(f"if constexpr (!{f}) {{ s_{r.name} = d_{r.name}; }} else {{ (void)d_{r.name}; }}"))
        if self.needs_ximats:
            body.append(n.Stmt("GRID_ASSERT(s_XI != nullptr)"))
        for r in self.scratch_regions:  # grouped regions: their parts, at the plan's offsets
            for part, off in r.part_offsets():
                body.append(n.Stmt(f"T *{self.part_pointer(r.name, part)} = s_{r.name} + {off}"))
        body += self.emitter.inner_body(self)
        own = ", ".join(f"{r.name} ({r.elements})" for r in self.scratch_regions) or "none"
        doc = (f"{self.alg.summary}: one state, block-cooperative (any block size).\n"
               + ("Assumes s_XI loaded (load_update_XImats) and the inputs visible to the block.\n"
                  if self.needs_ximats else "Assumes the inputs visible to the block.\n")
               + f"Owns the placement of its scratch: {own} scalars, each in s_ (shared) or d_ (global)\n"
               "as its flag says.  Writes the s_ outputs"
               + (f" ({', '.join(self.global_outputs)}: in place, in global memory)" if self.global_outputs else "")
               + "; the caller syncs.")
        if self.ctx.frames:  # the end-effector family's, fixed at generation time
            doc += f"\nFrames (chosen at generation time): {', '.join(f.name for f in self.ctx.frames)}."
        extra = [f"{p}: {NULLABLE_NOTES[p]} or nullptr." for p in self.global_inputs
                 if p in self.nullable and p in NULLABLE_NOTES]
        extra.append(self.emitter.inner_doc(self))
        if hasattr(self.ctx.algorithm_options, "p1"):
            extra.append(f"{self.emitter.sweep_doc}: {sweeps.form_of(self.ctx)}.")
        extra = "  ".join(x for x in extra if x)
        return n.Function(self.inner, body, doc=doc + (f"\n{extra}" if extra else ""))

    def _device_fn(self) -> n.Function:
        plan = self.plan
        flags = [_flag(r.name) for r in arena_emit.spillable(plan)]
        body: list = [
            n.Stmt("(void)d_robotModel"),
            n.If("s_temp == nullptr", [
                n.Comment("simple wrapper: the scratch is the dynamic shared-memory arena"),
                n.Stmt("GRID_DYNAMIC_SMEM(grid_smem)"),
                n.Stmt("s_temp = reinterpret_cast<T *>(grid_smem)"),
                n.Stmt(f"GRID_ARENA_ASSERT(({self.pfx}_DEVICE_SMEM_BYTES<T{''.join(', ' + f for f in flags)}>()))"),
            ]),
            n.Comment("every scratch region's slot, by the arena plan and the placement flags"),
            *arena_emit.carve_pairs(plan, "s_temp", "d_workspace"),
        ]
        if self.needs_ximats:
            body += [
                n.Comment("XImats: loaded once here, handed to the inner (and to every inner it composes)"),
                n.Raw(f"if constexpr (!{_flag(XI_REGION)}) {{ s_XI = d_XI; }}"),
                n.Stmt("load_update_XImats<T>(s_XI, s_q)"),
                n.Sync(),
            ]
        args = {p.name: p.name for p in self.inner.params}
        for p in (*self.states, *self.outputs):
            if p.name in self.global_inputs + self.global_outputs:
                args[p.name] = f"d_{p.name}"
        body.append(self.inner.call(args, {"T": "T", **{f: f for f in self.flags}}))
        pfx = self.pfx
        doc = (f"{self.alg.summary}: one state inside your own kernel (the inline rung).\n"
               "Inputs s_ in shared memory (global inputs d_: this state's slice, or nullptr where\n"
               "allowed); s_ outputs written (sync before reading).  Scratch: s_temp / d_workspace\n"
               f"sized by {pfx}_DEVICE_{{SMEM,WORKSPACE}}_BYTES for the flags; with s_temp == nullptr it\n"
               f"takes the dynamic shared-memory arena, which must hold {pfx}_DEVICE_DYNAMIC_SHARED_MEM_BYTES<T>().")
        return n.Function(self.device, body, doc=doc)

    def _fixed_pointers(self, base: str) -> list:
        """``T *s_R = base + offset`` of the fixed (input and output) regions, from the plan."""
        rung0 = self.plan.rungs[0]
        placed = self.plan.placements(rung0)
        return [n.Stmt(f"T *s_{r.name} = {base} + {placed[r.name].offset}") for r in arena_emit.fixed(self.plan)]

    def _kernel_fn(self) -> n.Function:
        plan = self.plan
        loads = []
        for p in self.smem_inputs:
            src = f"d_{p.name}[k * stride_{p.name} + i]"
            if p.name in self.nullable:
                src = f"d_{p.name} == nullptr ? T(0) : {src}"
            loads.append(n.BlockStrideLoop("i", str(_size(p)), [n.Stmt(f"s_{p.name}[i] = {src}")]))
        dispatch = []
        args = {p.name: p.name for p in self.device.params}
        for p in self.states:
            if p.name in self.global_inputs:
                slot = f"&d_{p.name}[size_t(k) * {_size(p)}]"
                args[f"d_{p.name}"] = f"d_{p.name} == nullptr ? nullptr : {slot}" if p.name in self.nullable else slot
        for p in self.outputs:
            if p.name in self.global_outputs:  # written in place: this state's slice
                args[f"d_{p.name}"] = f"&d_{p.name}[size_t(k) * {_size(p)}]"
        args["s_temp"], args["d_workspace"] = "s_temp", "d_ws"
        for tier in Tier:
            rung = plan.rung(tier)
            flags = {_flag(r.name): "true" if plan.in_smem(rung, r.name) else "false"
                     for r in arena_emit.spillable(plan)}
            dispatch.append(n.If(f"RESOURCE_TIER == {tier.cpp}", [self.device.call(args, {"T": "T", **flags})],
                                 constexpr=True))
        stores = [n.BlockStrideLoop("i", str(_size(p)), [n.Stmt(f"d_{p.name}[size_t(k) * {_size(p)} + i] = s_{p.name}[i]")])
                  for p in self.smem_outputs]
        body = [
            n.Stmt("GRID_DYNAMIC_SMEM(grid_smem)"),
            n.Stmt("T *s_arena = reinterpret_cast<T *>(grid_smem)"),
            n.Stmt(f"GRID_ARENA_ASSERT(({self.pfx}_SMEM_BYTES<T, RESOURCE_TIER>()))"),
            *self._fixed_pointers("s_arena"),
            n.Stmt(f"T *s_temp = s_arena + {arena_emit.fixed_elements(plan)}"),
            n.Stmt(f"T *d_ws = d_workspace == nullptr ? nullptr : d_workspace + blockIdx.x * "
                   f"({self.pfx}_WORKSPACE_BYTES<T, RESOURCE_TIER>() / sizeof(T))"),
            n.For("int k = blockIdx.x", "k < num_timesteps", "k += gridDim.x",
                  [*loads, n.Sync(), *dispatch, n.Sync(), *stores]),
        ]
        return n.Function(self.kernel, body, doc=(
            "Block-cooperative layout: one block per state, grid-stride over the batch.  The tier\n"
            "picks launch bounds and the rung (placement flags) planned for this robot."))

    # -- per-state layout --------------------------------------------------------------

    def _state_fn(self) -> n.Function:
        doc = (f"{self.alg.summary}: one state in one thread, straight-line code, robot constants\n"
               "folded (the per-state layout).  Pointers may point anywhere; no shared memory.")
        return n.Function(self.state, self.state_nodes, doc=doc)

    def _state_args(self, index: str, staged: bool = False) -> dict:
        args = {}
        for p in self.outputs:
            args[p.name] = (f"&s_{p.name}[t * {_staged_stride(p)}]" if staged
                            else f"&d_{p.name}[size_t({index}) * {_size(p)}]")
        for p in self.states:
            if staged and p.name not in self.global_inputs:
                ptr = f"&s_{p.name}[t * {_staged_stride(p)}]"
            elif p.name in self.global_inputs or staged:
                ptr = f"&d_{p.name}[size_t({index}) * {_size(p)}]"
            else:
                ptr = f"&d_{p.name}[size_t({index}) * stride_{p.name}]"
            args[p.name] = f"USE_{p.name.upper()} ? {ptr} : nullptr" if p.name in self.nullable else ptr
        for p in self.params:
            args[p.name] = p.name
        return args

    def _use_template(self) -> dict:
        return {"T": "T", **{f"USE_{x.upper()}": f"USE_{x.upper()}" for x in self.nullable}}

    def _per_state_kernel_fn(self) -> n.Function:
        call = self.state.call(self._state_args("k"), self._use_template())
        return n.Function(self.per_state_kernel, [
            n.Raw("#ifdef GRID_HOST_CPU"), *self._lanes_loop(),
            n.Raw("#else"),
            n.For("int k = blockIdx.x * blockDim.x + threadIdx.x", "k < num_timesteps",
                  "k += gridDim.x * blockDim.x", [call]),
            n.Raw("#endif")],
            doc="Per-state layout: one thread per state, grid-stride over the batch (in the CPU build,\n"
                "one group of grid_state_lanes<T>() states per block, the states in vector lanes).")

    def _lanes_loop(self) -> list:
        """The CPU build's per-state loop: the per-state function on ``grid_lanes_of<T>``, a group
        of states at once (one in each lane), gathered from and scattered to their rows."""
        def rows(p) -> tuple[str, str]:  # (first row of the group, values between rows)
            stride = str(_size(p)) if p.name in self.global_inputs else f"stride_{p.name}"
            return f"&d_{p.name}[size_t(k) * {stride}]", stride

        staged = [p for p in self.outputs if p.name not in self.direct_outputs]
        direct = [p for p in self.outputs if p.name in self.direct_outputs]
        local = ", ".join(f"l_{p.name}[{_size(p)}]" for p in (*staged, *self.states))
        loads = []
        for p in self.states:
            first, stride = rows(p)
            load = n.Stmt(f"grid_lanes_load(l_{p.name}, {first}, {stride}, {_size(p)}, count)")
            loads.append(n.If(f"USE_{p.name.upper()}", [load], constexpr=True) if p.name in self.nullable else load)
        args = {p.name: f"l_{p.name}" if p in staged else
                f"l_{p.name}_image.image()" for p in self.outputs}
        for p in self.states:
            args[p.name] = f"USE_{p.name.upper()} ? l_{p.name} : nullptr" if p.name in self.nullable else f"l_{p.name}"
        for p in self.params:
            args[p.name] = PARAMS[p.name].lanes(p.name, "V")
        stores = [n.Stmt(f"grid_lanes_store(&d_{p.name}[size_t(k) * {_size(p)}], {_size(p)}, l_{p.name}, "
                         f"{_size(p)}, count)") for p in staged]
        stores += [n.Stmt(f"grid_lane_image_store(&d_{p.name}[size_t(k) * {_size(p)}], {_size(p)}, count, "
                          f"l_{p.name}_image.image())") for p in direct]
        images = ([n.Comment(f"{', '.join(p.name for p in direct)}: assigned cell by cell into this thread's image "
                             "of each (grid_lane_image), then each lane's row written from it"),
                   *(n.Stmt(f"thread_local grid_lane_image_buffer<V> l_{p.name}_image({_size(p)})") for p in direct)]
                  if direct else [])
        return [
            n.Comment("the CPU build: each instruction of the per-state code does the work of every lane's state\n"
                      "(lane j: state k + j; a partial last group repeats state k in its spare lanes)"),
            n.Stmt("using V = grid_lanes_of<T>"),
            *images,
            n.For("int k = blockIdx.x * V::LANES", "k < num_timesteps", "k += gridDim.x * V::LANES", [
                n.Stmt("const int count = num_timesteps - k < V::LANES ? num_timesteps - k : V::LANES"),
                *([n.Stmt(f"V {local}")] if local else []),
                *loads,
                self.state.call(args, {**self._use_template(), "T": "V"}),
                *stores])]

    def _share_of(self, stmt: str, size: int, name: str, full: bool) -> list:
        """``stmt`` for this lane's share of its warp's ``count * size`` values: value
        ``i = lane + j * W`` for every ``j`` below ``size``, unrolled.  ``full``: a whole warp of
        states, W = 32 (every value there: no predicate, the offsets constants); else W = ``width``,
        the warp's threads, each value checked against ``count``."""
        # a full warp's shared stores index by j alone: no i to declare (nvcc warning 177)
        uses_i = not full or re.search(r"\bi\b", stmt) is not None
        body = [n.Stmt(f"const int i = lane + j * {32 if full else 'width'}")] if uses_i else []
        body += [n.Stmt(stmt)] if full else [n.If(f"i < count * {size}", [n.Stmt(stmt)])]
        loop = [n.Raw("#pragma unroll"), n.For("int j = 0", f"j < {size}", "++j", body)]
        return [n.If(f"USE_{name.upper()}", loop, constexpr=True)] if name in self.nullable else loop

    def _loads_of(self, full: bool) -> list:
        """The warp's staged inputs, global to registers (all of a lane's loads before any of its
        shared stores: one memory round trip), then registers to shared memory."""
        return [*[x for p in self.smem_inputs
                  for x in self._share_of(f"r_{p.name}[j] = d_{p.name}[PACKED ? size_t(base) * {_size(p)} + i : "
                                          f"size_t(base + i / {_size(p)}) * stride_{p.name} + i % {_size(p)}]",
                                          _size(p), p.name, full)],
                *[x for p in self.smem_inputs
                  for x in self._share_of(f"s_{p.name}[{_warp_index(p, 'j') if full else _staged_index(p, 'i')}] = "
                                          f"r_{p.name}[j]", _size(p), p.name, full)]]

    def _store_share(self, p, full: bool) -> list:
        """This lane's share of its warp's ``count * size`` values of output ``p``, from shared
        memory to global: value ``i = lane + j * W`` (W as in :meth:`_share_of`), in chunks
        (``grid_store_chunk``, prelude.cuh: 64 bytes a lane) whose shared loads are all issued
        before any of their stores (the compiler does not move a shared load above a global
        store), so a chunk costs one shared-memory latency, not one per value.  Each store
        instruction of a full warp is 32 consecutive values of the warp's contiguous outputs, whole
        aligned lines.  (A warp per state's row, with cheaper addresses, measured slower: iiwa14's
        Minv at 1M states 101 -> 131 us, CRBA at 4096 1.8 -> 3.5 us over the empty kernel; its
        stores cover part lines at every row's ends.)"""
        size = _size(p)
        chunk = "grid_store_chunk<T>()"

        def chunk_of(first: str, values: str) -> list:
            def each(stmt: str) -> list:
                body = [n.Stmt(f"const int i = lane + ({first} + u) * {32 if full else 'width'}")]
                body += [n.Stmt(stmt)] if full else [n.If(f"i < count * {size}", [n.Stmt(stmt)])]
                return [n.Raw("#pragma unroll"), n.For("int u = 0", f"u < {values}", "++u", body)]
            return [n.Stmt(f"T r_out[{chunk}]"),
                    *each(f"r_out[u] = s_{p.name}[{_warp_index(p, f'({first} + u)') if full else _staged_index(p, 'i')}]"),
                    *each(f"d_{p.name}[size_t(base) * {size} + i] = r_out[u]")]
        if not full:
            return [n.Raw("#pragma unroll 1"),
                    n.For("int j0 = 0", f"j0 < {size}", f"j0 += {chunk}", chunk_of("j0", chunk))]
        # unrolled where the lane's offset table gives every shared index as a register plus a constant
        return [n.Raw("#pragma unroll" if _period(p) else "#pragma unroll 1"),
                n.For("int j0 = 0", f"j0 + {chunk} <= {size}", f"j0 += {chunk}", chunk_of("j0", chunk)),
                n.Block("", [n.Comment(f"the last {size} % chunk values"),
                         n.Stmt(f"constexpr int j1 = {size} / {chunk} * {chunk}"),
                         *chunk_of("j1", f"{size} - j1")])]

    def _staged_kernel_fn(self) -> n.Function:
        staged = [*self.smem_inputs, *self.outputs]
        carve, prev = [], f"reinterpret_cast<T *>(smem) + 32 * warp * {self.pfx}_STAGED_ROW"
        for k, p in enumerate(staged):
            carve.append(n.Stmt(f"T *s_{p.name} = {prev}"))
            prev = f"s_{p.name} + width * {_staged_stride(p)}"
        regs = ", ".join(f"r_{p.name}[{_size(p)}]" for p in self.smem_inputs)
        stage = [
            n.Stmt("const int count = num_timesteps - base < width ? num_timesteps - base : width"),
            *([n.Stmt(f"T {regs}")] if regs else []),
            n.Comment("value i of the warp's share: state base + i / size, entry i % size (PACKED: rows of"),
            n.Comment("exactly size values, so the address is base * size + i)"),
            n.If("count == 32", self._loads_of(True), self._loads_of(False)),
            n.Stmt("__syncwarp(mask)"),
            n.If("lane < count", [
                n.Stmt("const int t = lane"),
                self.state.call(self._state_args("base + t", staged=True), self._use_template())]),
            n.Stmt("__syncwarp(mask)"),
            n.Comment("no sync after the stores: the next round's compute (which writes the outputs) waits at"),
            n.Comment("the sync after its loads, which every lane reaches only after this round's stores"),
            n.If("count == 32", [x for p in self.outputs for x in self._store_share(p, True)],
                 [x for p in self.outputs for x in self._store_share(p, False)]),
        ]
        return n.Function(self.staged_kernel, [
            *_warp_prologue(),
            n.Comment("this warp's rows of the block's shared memory"),
            *carve,
            *[x for p in staged if _period(p) for x in _offset_table(p)],
            n.Comment("the loop bound is uniform over the warp: every lane reaches every sync"),
            n.For("int base = blockIdx.x * blockDim.x + 32 * warp", "base < num_timesteps",
                  "base += gridDim.x * blockDim.x", stage)], doc=(
            "Per-state layout with each warp's states staged through shared memory (its own rows: the\n"
            "warps sync each on its own, never the block): the global stores of the outputs are\n"
            "coalesced, and the loads of the staged inputs as far as their rows' stride allows\n"
            "(contiguous when packed).  A whole warp of states (count 32) takes constant strides and no\n"
            "bounds checks; a partial one (the batch's end, a block under 32 threads, host emulation's\n"
            "one thread) checks each value.  Inputs read in place stay in place."))

    def _ring_constants(self) -> list:
        plan, pfx = self.ring_plan, self.pfx
        min_n, where = self.ctx.knob("per_state_ring_min_n", 0, RING_MIN_N)
        source = {"option": "set by the algorithm option", "measured": "measured on the GPU",
                  "default": "default, not yet measured"}[where]
        return [
            n.Comment(f"Too large to stage whole: the per-state outputs go through each warp's ring of {plan.slots} slots\n"
                      f"(grid_core.emit.ring), for batches of at least {pfx}_RING_MIN_N states ({source})."),
            n.Stmt(f"static constexpr int {pfx}_RING_SLOTS = {plan.slots}"),
            n.Stmt(f"static constexpr int {pfx}_RING_MIN_N = {int(min_n)}"),
            *self._ring_table(plan)]

    def _ring_table(self, plan) -> list:
        """What the ring's flushes read: the slot of each output (one flush of the whole block,
        ``per_state_ring_flush`` whole), else the table of flush groups."""
        pfx = self.pfx
        if plan.slot_of is not None:
            origin = {"option": "the algorithm option", "measured": "measured",
                      "default": "the default"}[self.ctx.knob("per_state_ring_flush", "auto", "groups")[1]]
            slots = [", ".join(str(x) for x in plan.slot_of[k:k + 16]) for k in range(0, len(plan.slot_of), 16)]
            return [n.Comment(f"One flush, at the end, of the warp's whole block of outputs ({origin}): the slot of each\n"
                              "output (8-byte aligned: four slots a load)."),
                    n.Raw(f"alignas(8) static __device__ const unsigned short {pfx}_RING_SLOT_OF[{len(plan.slot_of)}] = {{\n"
                          + ",\n".join(f"    {r}" for r in slots) + "};")]
        rows = [", ".join(str(x) for x in plan.table[k:k + 8]) for k in range(0, len(plan.table), 8)]
        groups = len(plan.table) // ring.GROUP
        return [n.Comment(f"The ring's {groups} flush groups ({plan.flushes} flushes), 32 entries each: "
                          "output index | slot << 16\n(0xffff: none)."),
                n.Raw(f"static __device__ const unsigned int {pfx}_RING_TABLE[{len(plan.table)}] = {{\n"
                      + ",\n".join(f"    {r}" for r in rows) + "};")]

    def _ring_state_fn(self) -> n.Function:
        doc = (f"{self.alg.summary}: one state in one thread, as {self.state.name}, its outputs through\n"
               "the warp's ring (tile: slot s of lane t at s * 33 + t) and flushed by the warp together, for the\n"
               "count states from the output pointer on.  Every lane of the warp calls it (a spare lane on a\n"
               "repeated state): the flushes sync the warp.")
        return n.Function(self.ring_state, list(self.ring_plan.body), doc=doc)

    def _ring_kernel_fn(self) -> n.Function:
        args = self._state_args("k")
        for p in self.outputs:
            args[p.name] = f"&d_{p.name}[size_t(base) * {_size(p)}]"
        args.update(tile="tile", lane="lane", width="width", mask="mask", count="count")
        call = self.ring_state.call(args, self._use_template())
        return n.Function(self.ring_kernel, [
            *_warp_prologue(),
            n.Stmt(f"T *tile = reinterpret_cast<T *>(smem) + warp * {self.pfx}_RING_SLOTS * {ring.RING_PAD}",
                   comment="this warp's ring"),
            n.Comment("the loop bound is uniform over the warp: every lane reaches every flush"),
            n.For("int base = blockIdx.x * blockDim.x + 32 * warp", "base < num_timesteps",
                  "base += gridDim.x * blockDim.x", [
                      n.Stmt("const int count = num_timesteps - base < width ? num_timesteps - base : width"),
                      n.Stmt("const int k = base + (lane < count ? lane : count - 1)",
                             comment="a spare lane repeats the last state (its values never stored)"),
                      call])],
            doc=("Per-state layout with the outputs through each warp's ring of shared memory (a robot whose\n"
                 "outputs are too large to stage whole): one thread per state, the warp's states a round."))

    # -- host layer ------------------------------------------------------------------

    def _ws(self, tier: str) -> str:
        return f"{self.pfx}_WORKSPACE_BYTES<T, {tier}>()"

    def _combos(self):
        """Every (condition, template arguments) of the nullable inputs' compile-time flags."""
        out = []
        for bits in itertools.product((True, False), repeat=len(self.nullable)):
            cond = " && ".join(("" if b else "!") + f"use_{x}" for x, b in zip(self.nullable, bits))
            out.append((cond, {f"USE_{x.upper()}": "true" if b else "false" for x, b in zip(self.nullable, bits)}))
        return out

    def _launcher_fns(self) -> list:
        name, pfx = self.name, self.pfx
        resolve = n.Function(
            f"__host__ inline int {name}_resolve_layout(int num_timesteps, int layout)",
            [n.Stmt("if (layout != LAYOUT_AUTO) return layout"),
             n.Stmt(f"return num_timesteps >= {pfx}_PER_STATE_MIN_N ? LAYOUT_PER_STATE : LAYOUT_BLOCK"
                    if self.has_state else "return LAYOUT_BLOCK")],
            doc="The layout for a batch: the crossover measured on the GPU decides LAYOUT_AUTO.")
        attr = n.Function(
            f"__host__ cudaError_t init_grid_kernel_attr_{name}_checked()",
            [n.Stmt("const int cap = grid_get_max_dynamic_shared_memory_bytes()"),
             *[n.Block("", [
                 n.Stmt(f"const size_t bytes = {pfx}_SMEM_BYTES<T, {t.cpp}>()"),
                 n.If("bytes > size_t(cap)", [n.Stmt("return cudaErrorInvalidValue")]),
                 n.Stmt(f"cudaError_t err = cudaFuncSetAttribute({name}_kernel<T, {t.cpp}>, "
                        "cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes))"),
                 n.If("err != cudaSuccess", [n.Stmt("return err")])]) for t in Tier],
             n.Stmt("return cudaSuccess")],
            template="template <typename T>",
            doc="Opts every tier's kernel into the shared memory it needs, checked against the queried\n"
                "cap (cudaErrorInvalidValue when a rung does not fit this device).")
        per_tier = "0"
        for t in reversed(list(Tier)):
            per_tier = self._ws(t.cpp) if per_tier == "0" else f"(cfg.tier == {t.cpp} ? {self._ws(t.cpp)} : {per_tier})"
        ws = n.Function(self.workspace_bytes, [
            n.If(f"{name}_resolve_layout(num_timesteps, cfg.layout) == LAYOUT_PER_STATE", [n.Stmt("return 0")]),
            n.Stmt("int blocks = cfg.blocks > 0 ? cfg.blocks : num_timesteps"),
            n.Stmt("blocks = blocks < MAX_WORKSPACE_BLOCKS ? blocks : MAX_WORKSPACE_BLOCKS"),
            n.Stmt(f"const size_t per_block = {per_tier}"),
            n.Stmt("return per_block * size_t(blocks)")],
            doc="Global workspace a launch of this batch and config needs (0 for most tiers).")
        kargs = {p.name: p.name for p in self.kernel.params}
        kargs["d_robotModel"] = "(const robotModel<T> *)nullptr"
        tiers = []
        for t in Tier:
            tiers.append(n.If(f"cfg.tier == {t.cpp}", [
                n.Stmt(f"constexpr size_t smem = {pfx}_SMEM_BYTES<T, {t.cpp}>()"),
                n.If(f"threads > tier_max_threads<{t.cpp}>()", [n.Stmt("return cudaErrorInvalidValue")]),
                n.If(f"{self._ws(t.cpp)} > 0", [
                    n.Stmt("blocks = blocks < MAX_WORKSPACE_BLOCKS ? blocks : MAX_WORKSPACE_BLOCKS"),
                    n.If(f"d_workspace == nullptr || workspace_bytes < size_t(blocks) * {self._ws(t.cpp)}",
                         [n.Stmt("return cudaErrorInvalidValue")])]),
                Launch(self.kernel.call(kargs, ["T", t.cpp]), "blocks", "threads", "smem"),
                n.Stmt("return cudaPeekAtLastError()")]))
        body: list = [n.If("num_timesteps <= 0", [n.Stmt("return cudaSuccess")])]
        if self.nullable:
            body += [n.Stmt(f"const bool use_{x} = d_{x} != nullptr") for x in self.nullable]
        if self.has_state:
            pargs = {p.name: p.name for p in self.per_state_kernel.params}
            per_state = [n.If(cond or "true", [Launch(self.per_state_kernel.call(pargs, {"T": "T", **t}),
                                                      "blocks", "threads")]) for cond, t in self._combos()]
            branch: list = []
            if self.emitter.staged:
                sargs = {p.name: p.name for p in self.staged_kernel.params}
                packed = " && ".join(f"(!use_{p.name} || stride_{p.name} == {_size(p)})" if p.name in self.nullable
                                     else f"stride_{p.name} == {_size(p)}" for p in self.smem_inputs) or "true"

                def staged_launch(t: dict, is_packed: str) -> Launch:
                    return Launch(self.staged_kernel.call(sargs, {"T": "T", **t, "PACKED": is_packed}),
                                  "blocks", "threads", "smem")

                staged = [n.Comment("packed rows: the loads' addresses are affine in the unrolled index (fewer "
                                    "registers than strided rows need)"),
                          n.Stmt(f"const bool packed = {packed}"),
                          *[n.If(cond or "true", [n.If("packed", [staged_launch(t, "true")], [staged_launch(t, "false")])])
                            for cond, t in self._combos()]]
                stage = "cfg.stage_io" if not self.emitter.stage_by_default else \
                    f"(cfg.stage_io || ({pfx}_STAGE_BY_DEFAULT && num_timesteps >= {pfx}_STAGE_MIN_N))"
                branch.append(n.Raw("#ifndef GRID_HOST_CPU"))  # the CPU build: nothing to coalesce
                branch.append(n.If(
                    f"{stage} && {pfx}_STAGED_THREADS<T>() > 0 && "
                    f"cfg.threads <= {pfx}_STAGED_THREADS<T>()", [
                        n.Comment("a hint: a robot too big to stage, or a block size over the staged one, runs "
                                  "the plain kernel"),
                        n.Comment("spread over the SMs unless the arrays are in mapped host memory (stage_io): "
                                  "there a warp's\nwhole lines, one bus transaction each, matter more than the SMs "
                                  "(spread, a block of\n8 states at B = 1024 took Minv's host path on iiwa14 from "
                                  "20.7 to 62 us)"),
                        n.Stmt(f"const int threads = cfg.threads > 0 ? cfg.threads : {pfx}_PER_STATE_SPREAD && "
                               f"!cfg.stage_io ? grid_spread_threads(num_timesteps, {pfx}_STAGED_THREADS<T>()) : "
                               f"{pfx}_STAGED_THREADS<T>()"),
                        n.Stmt("const int blocks = cfg.blocks > 0 ? cfg.blocks : (num_timesteps + threads - 1) / threads"),
                        n.Stmt(f"const size_t smem = size_t(threads) * {pfx}_STAGED_ROW * sizeof(T)"),
                        *staged, n.Stmt("return cudaPeekAtLastError()")]))
                if self.ring_plan is not None:
                    branch.append(self._ring_launch())
                branch.append(n.Raw("#endif"))
            body.append(n.If(f"{name}_resolve_layout(num_timesteps, cfg.layout) == LAYOUT_PER_STATE", [
                *branch,
                n.Stmt(f"const int threads = cfg.threads > 0 ? cfg.threads : {pfx}_PER_STATE_SPREAD ? "
                       f"grid_spread_threads(num_timesteps, {pfx}_PER_STATE_THREADS) : {pfx}_PER_STATE_THREADS"),
                n.If(f"threads > {pfx}_PER_STATE_THREADS", [n.Stmt("return cudaErrorInvalidValue")]),
                n.Stmt("const int per_block = threads * grid_state_lanes<T>()",
                       comment="states: one per thread, in its lanes on the CPU"),
                n.Stmt("const int blocks = cfg.blocks > 0 ? cfg.blocks : (num_timesteps + per_block - 1) / per_block"),
                *per_state,
                n.Stmt("return cudaPeekAtLastError()")]))
        else:
            body.append(n.If("cfg.layout == LAYOUT_PER_STATE", [n.Stmt("return cudaErrorInvalidValue")]))
        block = [
            n.Stmt(f"static const cudaError_t attr = init_grid_kernel_attr_{name}_checked<T>()"),
            n.If("attr != cudaSuccess", [n.Stmt("return attr")]),
            n.Stmt(f"const int threads = cfg.threads > 0 ? cfg.threads : {pfx}_BLOCK_THREADS"),
            n.Stmt("int blocks = cfg.blocks > 0 ? cfg.blocks : num_timesteps"),
            *tiers,
            n.Stmt("return cudaErrorInvalidValue"),
        ]
        if self.has_state:  # the CPU build runs the per-state layout alone
            block = [n.Raw("#ifdef GRID_HOST_CPU"),
                     n.Comment("the CPU build (CpuHandle) runs the per-state layout only: its block kernels, never\n"
                               "run there, are not compiled (atlas's CPU build: 101 -> 72 s of g++)"),
                     n.Stmt("return cudaErrorInvalidValue"),
                     n.Raw("#else"), *block, n.Raw("#endif")]
        body += block
        strided = n.Function(self.launch_strided, body, doc=(
            "Device pointers in and out, each state input with its stride (values between states);\n"
            "outputs contiguous.  A null input where allowed is zero (or absent).  Asynchronous on stream."))
        largs = {p.name: p.name for p in self.launch_strided.params}
        for p in self.smem_inputs:
            largs[f"stride_{p.name}"] = str(_size(p))
        for p in self.params:
            largs[p.name] = PARAMS[p.name].convert(f"h_{p.name}")
        plain = n.Function(self.launch, [n.Stmt(f"return {self.launch_strided.call(largs, ['T']).expr()}")], doc=(
            "The launch convention of the C ABI (grid_core.emit.emitter): outputs, inputs, params (host\n"
            "values or nullptr for the default), then the batch, the config and the workspace.  Device\n"
            "pointers, contiguous (N, ...) arrays; a null input where allowed is zero or absent."))
        return [resolve, attr, ws, strided, plain]

    def _ring_launch(self) -> n.If:
        pfx = self.pfx
        rargs = {p.name: p.name for p in self.ring_kernel.params}
        ring_bytes = f"{pfx}_RING_SLOTS * {ring.RING_PAD} * sizeof(T)"
        launches = []
        for cond, t in self._combos():
            kernel = f"{self.ring_kernel.name}<{', '.join(['T', *t.values()])}>"
            launches.append(n.If(cond or "true", [
                n.Stmt(f"static const cudaError_t attr = cudaFuncSetAttribute({kernel}, "
                       "cudaFuncAttributeMaxDynamicSharedMemorySize, grid_get_max_dynamic_shared_memory_bytes())",
                       comment="once: the whole opt-in"),
                n.If("attr != cudaSuccess", [n.Stmt("return attr")]),
                n.Stmt(f"static const int best = grid_resident_block_threads(reinterpret_cast<const void *>({kernel}), "
                       f"most, {ring_bytes})", comment="once: the block that keeps the most warps on an SM"),
                n.Comment("spread in whole warps: a warp's spare lanes repeat its last state for free, while a "
                          "warp of\nfewer lanes walks the flush table alone (one lane: 32 entries a group; atlas "
                          "CRBA at N = 1\ntook 132 us against 15 in a whole warp on the H200)"),
                n.Stmt(f"const int threads = cfg.threads > 0 ? cfg.threads : {pfx}_PER_STATE_SPREAD && !cfg.stage_io ? "
                       "(grid_spread_threads(num_timesteps, best) + 31) / 32 * 32 : best"),
                n.If("threads > 0 && (threads + 31) / 32 * 32 <= fit", [
                    n.Stmt("const int blocks = cfg.blocks > 0 ? cfg.blocks : (num_timesteps + threads - 1) / threads"),
                    n.Stmt(f"const size_t smem = size_t((threads + 31) / 32) * {ring_bytes}"),
                    Launch(self.ring_kernel.call(rargs, {"T": "T", **t}), "blocks", "threads", "smem"),
                    n.Stmt("return cudaPeekAtLastError()")])]))
        return n.If(
            f"(cfg.stage_io || num_timesteps >= {pfx}_RING_MIN_N) && {pfx}_STAGED_THREADS<T>() == 0 && "
            f"cfg.threads <= {pfx}_PER_STATE_THREADS", [
                n.Comment("too large to stage whole: through each warp's ring, in blocks of the warps that keep "
                          "the most\nresident (at most the per-state block), spread over the SMs as the plain "
                          "kernel is (the flushes\nof a few SMs' full warps queue on their stores) unless the "
                          "arrays are mapped (stage_io)"),
                n.Stmt(f"const int fit = int(grid_get_max_dynamic_shared_memory_bytes() / ({ring_bytes})) * 32"),
                n.Stmt(f"const int most = fit < {pfx}_PER_STATE_THREADS ? fit : {pfx}_PER_STATE_THREADS"),
                n.If("most > 0", launches)])

    def _host_parts(self):
        """``(third input, its flag)`` of the gridData wrapper, or None when the algorithm's state
        inputs are not among q, qd, a third nv-vector (qdd or tau) and f_ext (gridData's buffers)."""
        names = [p.name for p in self.states]
        third = names[2] if len(names) > 2 and names[2] != "f_ext" else None
        known = {"q", "qd", "f_ext"} | ({third} if third else set())
        if not names or names[0] != "q" or any(x not in known for x in names) or \
                (len(names) > 1 and names[1] not in ("qd", "f_ext")):
            return None
        return third, (f"USE_{third.upper()}_FLAG" if third is not None and third in self.nullable else None)

    def _host_signature(self) -> Signature | None:
        parts = self._host_parts()
        if parts is None:
            return None
        template = [TemplateParam("typename", "T")]
        if parts[1]:
            template.append(TemplateParam("bool", parts[1], "false"))
        template.append(TemplateParam("bool", "USE_COMPRESSED_MEM", "false"))
        return Signature(self.name, [
            Param("gridData<T> *", "hd_data"), Param("const robotModel<T> *", "d_robotModel"),
            *[Param(PARAMS[p.name].ctype, p.name) for p in self.params], Param("const int", "num_timesteps"),
            Param("const dim3", "block_dimms"), Param("const dim3", "thread_dimms"), Param("cudaStream_t *", "streams")],
            "__host__", template=template)

    def host_values_per_state(self) -> int:
        """The state input values per state the gridData wrapper's mapped-memory rule counts."""
        return sum(_size(p) for p in self.states if p.name != "f_ext")

    def host_output_values_per_state(self) -> int:
        """The output values per state the gridData wrapper's mapped-memory rule counts."""
        return sum(_size(p) for p in self.outputs)

    def per_state_min_n(self) -> int | None:
        """The batch from which ``LAYOUT_AUTO`` takes the per-state layout (None: never)."""
        if not self.has_state:
            return None
        return int(self.ctx.tuning.get("per_state_min_n", self.emitter.DEFAULT_PER_STATE_MIN_N))

    def mapped_by_size(self, num_timesteps: int, value_bytes: int = 8) -> bool:
        """Whether the gridData wrapper moves this batch through mapped memory (the auto layout, values
        of ``value_bytes``: :meth:`mapped_rule` in Python)."""
        min_n = self.per_state_min_n()
        return mapped_by_size(num_timesteps, self.host_values_per_state(),
                              self.host_output_values_per_state() * value_bytes,
                              block=min_n is None or num_timesteps < min_n,
                              staged=self.stages_mapped() and num_timesteps >= MAPPED_STAGE_MIN_N)

    def first_copied_batch(self, value_bytes: int = 8) -> int:
        """The smallest batch the gridData wrapper moves through the copy engine (below it, mapped
        memory) for values of ``value_bytes`` (8: double).  A larger batch can take mapped memory
        again where the staged kernel starts (:data:`MAPPED_STAGE_MIN_N`)."""
        return next(m for m in range(1, MAPPED_MAX_WORK + 2) if not self.mapped_by_size(m, value_bytes))

    def mapped_rule(self, batch: str, layout: str, value_type: str, in_values: str | None = None,
                    ns: str = "") -> str:
        """The host forms' choice of mapped memory by size, as a C++ call of ``grid_mapped_by_size``
        on their names for the batch, the requested layout and the value type (``in_values``: the
        input values a state, if not every input's; ``ns``: the header's namespace, qualified)."""
        ins = in_values or f"{self.host_values_per_state()}u"
        staged = f"{batch} >= {MAPPED_STAGE_MIN_N}" if self.stages_mapped() else "false"
        return (f"{ns}grid_mapped_by_size(size_t({batch}), {ins}, {self.host_output_values_per_state()}u * "
                f"sizeof({value_type}), {ns}{self.name}_resolve_layout(int({batch}), {layout}) == {ns}LAYOUT_BLOCK, "
                f"{staged})")

    def stages_mapped(self) -> bool:
        """Whether the host forms' mapped memory takes the staged per-state kernel when the
        transfer is picked by size: the algorithms that stage by default (large outputs).  The
        plain kernel's stores of one state's row each reach the bus as partial lines (H200,
        d2de5cd: iiwa14 Minv's host path at B = 1024 61.7 us mapped against 26.5 through the copy
        engine); small outputs (inverse dynamics) stay plain, where staging measured slower.  From
        :data:`MAPPED_STAGE_MIN_N` states on."""
        return self.emitter.staged and self.emitter.stage_by_default

    def stage_io_rule(self, transfer: str, mapped: str, batch: str) -> str:
        """The host forms' ``cfg.stage_io``, as a C++ expression of their names for the transfer
        mode, whether memory is mapped, and the batch size: on request (transfer 3), and for
        :meth:`stages_mapped` algorithms when mapped memory is picked by size (transfer 0) from
        :data:`MAPPED_STAGE_MIN_N` states.  The gridData wrapper and the C ABI both render it."""
        if not self.stages_mapped():
            return f"{transfer} == 3"
        return f"{transfer} == 3 || ({transfer} == 0 && {mapped} && {batch} >= {MAPPED_STAGE_MIN_N})"

    def _host_fn(self) -> n.Function | None:
        """``X(hd_data, ...)``: the gridData wrapper (see :meth:`_host_parts`)."""
        if self.host is None:
            return None
        names = [p.name for p in self.states]
        third, third_flag = self._host_parts()
        fields = self.emitter.grid_data_names()
        sig = self.host
        use_third = third_flag or "true"
        per_state = self.host_values_per_state()
        body: list = [
            n.Comment("inputs: [q | qd] (+ the third apart) when compressed, else [q | qd | third]"),
            n.Stmt("constexpr int stride = USE_COMPRESSED_MEM ? NUM_POS + NUM_VEL : NUM_POS + 2 * NUM_VEL"),
            n.Stmt("T *h_in = USE_COMPRESSED_MEM ? hd_data->h_q_qd : hd_data->h_q_qd_u"),
            n.Stmt("T *d_in = USE_COMPRESSED_MEM ? hd_data->d_q_qd : hd_data->d_q_qd_u"),
            n.Comment("small batches through mapped memory: gridData's host buffers are pinned, so under"),
            n.Comment("unified addressing the kernel reads the inputs and writes the results in place over"),
            n.Comment("the bus (no copy-engine transfer to set up, most of a small call's cost); larger ones"),
            n.Comment("through the copy engine.  Either way one stream, one synchronisation."),
            n.Stmt(f"const bool mapped = hd_data->transfer >= 2 || (hd_data->transfer == 0 && "
                   f"{self.mapped_rule('num_timesteps', 'LAYOUT_AUTO', 'T')})",
                   comment=f"by size: {per_state} input values, {self.host_output_values_per_state()} outputs a state"),
            n.Stmt("LaunchConfig cfg"),
            *([n.Comment("mapped by size: the staged kernel's coalesced accesses (its outputs are large: a state's row"),
               n.Comment("a store at a time reaches the bus as partial lines)")] if self.stages_mapped() else []),
            n.Stmt(f"cfg.stage_io = {self.stage_io_rule('hd_data->transfer', 'mapped', 'num_timesteps')}",
                   comment="" if self.stages_mapped() else "mapped memory, staged: on request"),
            n.If(f"{self.name}_resolve_layout(num_timesteps, LAYOUT_AUTO) == LAYOUT_BLOCK",
                 [n.Stmt("cfg.layout = LAYOUT_BLOCK"), n.Stmt("cfg.blocks = int(block_dimms.x)"),
                  n.Stmt("cfg.threads = int(thread_dimms.x * thread_dimms.y)")], [n.Stmt("cfg.layout = LAYOUT_PER_STATE")]),
            n.Stmt(f"gpuErrchk(grid_ensure_workspace(hd_data, {self.workspace_bytes.name}<T>(num_timesteps, cfg)))"),
        ]

        def launch(side: str) -> n.Stmt:
            """The launch on the ``h`` (mapped) or ``d`` (device) buffers."""
            args = {p.name: p.name for p in self.launch_strided.params}
            for p in self.outputs:
                args[f"d_{p.name}"] = f"hd_data->{side}_{fields.get(p.name, p.name)}"
            args["d_q"], args["stride_q"] = f"{side}_in", "stride"
            if "qd" in names:
                args["d_qd"], args["stride_qd"] = f"{side}_in + NUM_POS", "stride"
            if third:
                args[f"d_{third}"] = (f"!{use_third} ? nullptr : (USE_COMPRESSED_MEM ? hd_data->{side}_u : "
                                      f"{side}_in + NUM_POS + NUM_VEL)")
                args[f"stride_{third}"] = "USE_COMPRESSED_MEM ? NUM_VEL : stride"
            if "f_ext" in names:
                args["d_f_ext"] = f"hd_data->use_f_ext ? hd_data->{side}_f_ext : nullptr"
            args.update({"d_workspace": "hd_data->d_workspace", "workspace_bytes": "hd_data->workspace_bytes",
                         "stream": "streams[0]"})
            return n.Stmt(f"gpuErrchk({self.launch_strided.call(args, ['T']).expr()})")

        copies_in = [n.Stmt("gpuErrchk(cudaMemcpyAsync(d_in, h_in, size_t(stride) * num_timesteps * sizeof(T), "
                            "cudaMemcpyHostToDevice, streams[0]))")]
        if third:
            copies_in.append(n.If(f"{use_third} && USE_COMPRESSED_MEM", [
                n.Stmt("gpuErrchk(cudaMemcpyAsync(hd_data->d_u, hd_data->h_u, size_t(NUM_VEL) * num_timesteps "
                       "* sizeof(T), cudaMemcpyHostToDevice, streams[0]))")], constexpr=True))
        if "f_ext" in names:
            copies_in.append(n.If("hd_data->use_f_ext", [
                n.Stmt("gpuErrchk(cudaMemcpyAsync(hd_data->d_f_ext, hd_data->h_f_ext, size_t(6 * NUM_BODIES) * "
                       "num_timesteps * sizeof(T), cudaMemcpyHostToDevice, streams[0]))")]))
        copies_out = []
        for p in self.outputs:
            f = fields.get(p.name, p.name)
            copies_out.append(n.Stmt(f"gpuErrchk(cudaMemcpyAsync(hd_data->h_{f}, hd_data->d_{f}, size_t({_size(p)}) * "
                                     "num_timesteps * sizeof(T), cudaMemcpyDeviceToHost, streams[0]))"))
        body += [
            n.If("mapped", [launch("h")], [*copies_in, launch("d"), *copies_out]),
            n.Stmt("gpuErrchk(cudaStreamSynchronize(streams[0]))"),
        ]
        outs = ", ".join(f"hd_data->h_{fields.get(p.name, p.name)}" for p in self.outputs)
        doc = (f"Host layer: the inputs of hd_data in, the results into {outs} (small batches through\n"
               f"mapped memory, where the d_ buffers are not touched; larger ones copied through the d_\n"
               f"buffers).  USE_COMPRESSED_MEM: inputs in h_q_qd (and h_u), else h_q_qd_u."
               + (f"\n{third_flag}: read the {third} input (else zero)." if third_flag else "")
               + "\nBlock-layout batches run with the given block and thread dims.")
        return n.Function(sig, body, doc=doc)


def _warp_prologue() -> list:
    """The dynamic shared memory and the warp's place of a kernel whose warps each work on their own
    32 states (the staged and ring kernels): lane, warp, the warp's threads and their sync mask."""
    return [n.Stmt("GRID_DYNAMIC_SMEM(smem)"),
            n.Stmt("const int lane = threadIdx.x % 32, warp = threadIdx.x / 32"),
            n.Stmt("const int width = int(blockDim.x) - 32 * warp < 32 ? int(blockDim.x) - 32 * warp : 32",
                   comment="this warp's threads: its states a round"),
            n.Stmt("const unsigned mask = width == 32 ? 0xffffffffu : (1u << width) - 1u")]


def _staged_stride(p) -> int:
    """A staged array's values per state in shared memory: its size, made odd, so that a warp's
    threads (one state each, row ``t`` at ``t * stride``) fall in distinct banks (an even stride
    such as 144 = 16 * 9 puts 16 of 32 threads in one bank on every access)."""
    size = _size(p)
    return size if size % 2 else size + 1


def _period(p) -> int | None:
    """Of a staged array whose rows are padded: the values r < P of a whole warp's share (value
    ``lane + 32 r``) after which the shared indices repeat, shifted (32 P values are whole states);
    None where the rows are not padded (the index is the value's) or P is over 16 (the table's
    registers would cost more than the division they save)."""
    size = _size(p)
    if size == _staged_stride(p):
        return None
    period = size // math.gcd(size, 32)
    return period if period <= 16 else None


def _offset_table(p) -> list:
    period, size = _period(p), _size(p)
    return [n.Comment(f"shared index of value lane + 32 r of {p.name}'s share of a whole warp, r < {period} (the one "
                      f"{period} values further\nis {32 * period + 32 * period // size} further: "
                      f"{32 * period // size} whole states, a pad each)"),
            n.Stmt(f"int o_{p.name}[{period}]"),
            n.Raw("#pragma unroll"),
            n.For("int r = 0", f"r < {period}", "++r", [
                n.Stmt(f"o_{p.name}[r] = {_staged_index(p, f'(lane + 32 * r)')}")])]


def _warp_index(p, m: str) -> str:
    """Shared index of value ``lane + 32 * m`` of a whole warp's share of ``p`` (``m`` a constant
    once unrolled): by the lane's offset table where there is one."""
    period = _period(p)
    if period is None:
        return _staged_index(p, "i")
    return f"o_{p.name}[{m} % {period}] + {m} / {period} * {32 * period + 32 * period // _size(p)}"


def _staged_index(p, i: str) -> str:
    """Shared-memory index of value ``i`` of a block's packed ``count * size`` values."""
    size, stride = _size(p), _staged_stride(p)
    return i if size == stride else f"{i} + {i} / {size}"  # the stride is size + 1: one pad per state before i


def _base_state_body():
    from .emitter import Emitter

    return Emitter.state_body


__all__ = ["GRAVITY", "MAPPED_MAX_WORK", "PARAMS", "XI_REGION", "Layers", "ParamSpec", "mapped_by_size",
           "mapped_rule_function", "padded", "xi_region"]
