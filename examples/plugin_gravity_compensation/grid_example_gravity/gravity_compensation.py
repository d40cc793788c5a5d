"""Gravity compensation: the joint forces that hold a configuration still against gravity.

``tau_g = gravity_compensation(q, gravity)`` equals inverse dynamics at rest,
``ID(q, 0, 0)``.  Everything about the algorithm lives here, as for a built-in
(DESIGN §2): the declaration and its float64 reference, the arenas and spill
rungs, the parallelism review, and the GPU emitter.

The emitter composes ``inverse_dynamics`` by interface: the algorithm declares
``depends_on = ("inverse_dynamics",)``, the composer emits that algorithm first,
and the code below calls its ``inverse_dynamics_inner`` (block-cooperative
layout) and ``inverse_dynamics_state`` (per-state layout) by name, handing them
named buffers.  It never reaches into their scratch offsets.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY
from grid_core.arena import ArenaRegion, SpillRung, Tier
from grid_core.emit import arena_emit
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit.emitter import EmitContext, Emitter, GridDataField
from grid_core.model import Robot
from grid_core.review import ParallelismReview, done, todo

PFX = "GRAVITY_COMPENSATION"  # prefix of the size constants (grid_core.emit.arena_emit)


class GravityCompensationEmitter(Emitter):
    """The layers of ``gravity_compensation`` (seeds 001/002, ``grid_core.emit.emitter``)."""

    PER_STATE_THREADS = 128
    DEFAULT_PER_STATE_MIN_N = 1

    def grid_data_fields(self, robot: Robot):
        return (GridDataField("tau_g", robot.nv, "gravity_compensation: joint forces holding q"),)

    # -- block-cooperative layout -------------------------------------------------------

    def inner(self, ctx: EmitContext) -> list:
        return [n.Function(
            "__device__ void gravity_compensation_inner(T *s_tau, const T *s_q, const T *s_zero, const T *s_XI, "
            "T *s_vaf, T *d_vaf, const Gravity<T> gravity)",
            [n.Stmt("inverse_dynamics_inner<T, VAF_IN_SMEM>(s_tau, s_q, s_zero, s_zero, nullptr, s_XI, s_vaf, "
                    "d_vaf, gravity)")],
            template="template <typename T, bool VAF_IN_SMEM = true>",
            doc=("Gravity compensation of one state, block-cooperative: inverse_dynamics_inner with\n"
                 "qd = qdd = s_zero (NUM_VEL zeros).  Assumes s_XI loaded and s_zero zeroed; the v/a/f\n"
                 "band is placed by VAF_IN_SMEM (s_vaf shared, d_vaf global).  Writes s_tau; the caller syncs."),
        )]

    def device(self, ctx: EmitContext) -> list:
        plan = ctx.plan
        flags = ", ".join(arena_emit.flag(r.name) for r in arena_emit.spillable(plan))
        return [n.Function(
            "__device__ void gravity_compensation_device(T *s_tau, const T *s_q, const robotModel<T> *d_robotModel, "
            "const Gravity<T> gravity, T *s_temp = nullptr, T *d_workspace = nullptr)",
            [
                n.Stmt("(void)d_robotModel"),
                n.If("s_temp == nullptr", [
                    n.Comment("simple wrapper: the scratch is the dynamic shared-memory arena"),
                    n.Stmt("GRID_DYNAMIC_SMEM(grid_smem)"),
                    n.Stmt("s_temp = reinterpret_cast<T *>(grid_smem)"),
                    n.Stmt(f"GRID_ARENA_ASSERT(({PFX}_DEVICE_SMEM_BYTES<T, {flags}>()))"),
                ]),
                n.Comment("placement, chosen here at the top (seed 001): then the body is unchanged"),
                *arena_emit.carve(plan, "s_temp", "d_workspace"),
                n.BlockStrideLoop("i", "NUM_VEL", [n.Stmt("s_zero[i] = T(0)")]),
                n.Stmt("load_update_XImats<T>(s_XI, s_q)"),
                n.Sync(),
                n.Stmt("gravity_compensation_inner<T, VAF_IN_SMEM>(s_tau, s_q, s_zero, s_XI, s_vaf, s_vaf, gravity)"),
            ],
            template=f"template <typename T, {arena_emit.flag_params(plan)}>",
            doc=("Gravity compensation of one state inside your own kernel (the inline rung).  s_q in\n"
                 f"shared memory; s_tau written (sync before reading).  Scratch: s_temp / d_workspace sized\n"
                 f"by {PFX}_DEVICE_{{SMEM,WORKSPACE}}_BYTES for the flags; with s_temp == nullptr it\n"
                 f"takes the dynamic shared-memory arena, which must hold {PFX}_DEVICE_DYNAMIC_SHARED_MEM_BYTES<T>()."),
        )]

    def kernel(self, ctx: EmitContext) -> list:
        plan = ctx.plan
        offs, off = {}, 0
        for r in arena_emit.fixed(plan):  # kernel inputs and outputs, at the front of the arena
            offs[r.name] = off
            off += -(-r.elements // 4) * 4
        dispatch = [n.If(f"RESOURCE_TIER == {tier.cpp}", [n.Stmt(
            f"gravity_compensation_device<T, {arena_emit.flag_args(plan, tier)}>(s_tau_g, s_q, d_robotModel, "
            "gravity, s_temp, d_ws)")], constexpr=True) for tier in Tier]
        return [n.Function(
            "__global__ void __launch_bounds__(tier_max_threads<RESOURCE_TIER>()) gravity_compensation_kernel("
            "T *d_tau, const T *d_q, const int stride_q, const robotModel<T> *d_robotModel, "
            "const Gravity<T> gravity, const int num_timesteps, T *d_workspace)",
            [
                n.Stmt("GRID_DYNAMIC_SMEM(grid_smem)"),
                n.Stmt("T *s_arena = reinterpret_cast<T *>(grid_smem)"),
                n.Stmt(f"GRID_ARENA_ASSERT(({PFX}_SMEM_BYTES<T, RESOURCE_TIER>()))"),
                *[n.Stmt(f"T *s_{name} = s_arena + {o}") for name, o in offs.items()],
                n.Stmt(f"T *s_temp = s_arena + {arena_emit.fixed_elements(plan)}"),
                n.Stmt(f"T *d_ws = d_workspace == nullptr ? nullptr : d_workspace + blockIdx.x * "
                       f"({PFX}_WORKSPACE_BYTES<T, RESOURCE_TIER>() / sizeof(T))"),
                n.For("int k = blockIdx.x", "k < num_timesteps", "k += gridDim.x", [
                    n.BlockStrideLoop("i", "NUM_POS", [n.Stmt("s_q[i] = d_q[k * stride_q + i]")]),
                    n.Sync(),
                    *dispatch,
                    n.Sync(),
                    n.BlockStrideLoop("i", "NUM_VEL", [n.Stmt("d_tau[k * NUM_VEL + i] = s_tau_g[i]")]),
                ]),
            ],
            template="template <typename T, int RESOURCE_TIER = TIER_SHARED>",
            doc=("Block-cooperative layout: one block per state, grid-stride over the batch.  The tier\n"
                 "picks launch bounds and the rung (placement flags) planned for this robot."),
        )]

    # -- per-state layout ------------------------------------------------------------------

    def per_state(self, ctx: EmitContext) -> list:
        state = n.Function(
            "__device__ __forceinline__ void gravity_compensation_state(T *tau, const T *q, const Gravity<T> gravity)",
            [
                n.Stmt("const T zero[NUM_VEL] = {}"),
                n.Stmt("inverse_dynamics_state<T, false, false>(tau, q, zero, nullptr, nullptr, gravity)"),
            ],
            template="template <typename T>",
            doc="Gravity compensation of one state in one thread: inverse_dynamics_state at qd = qdd = 0.",
        )
        kernel = n.Function(
            f"__global__ void __launch_bounds__({PFX}_PER_STATE_THREADS) gravity_compensation_per_state_kernel("
            "T *d_tau, const T *d_q, const int stride_q, const Gravity<T> gravity, const int num_timesteps)",
            [n.For("int k = blockIdx.x * blockDim.x + threadIdx.x", "k < num_timesteps",
                   "k += gridDim.x * blockDim.x",
                   [n.Stmt("gravity_compensation_state<T>(&d_tau[k * NUM_VEL], &d_q[k * stride_q], gravity)")])],
            template="template <typename T>",
            doc="Per-state layout: one thread per state, grid-stride over the batch.",
        )
        return [state, kernel]

    # -- host layer ----------------------------------------------------------------------

    def launcher(self, ctx: EmitContext) -> list:
        def ws_bytes(tier: str) -> str:
            return f"{PFX}_WORKSPACE_BYTES<T, {tier}>()"

        tiers = [n.If(f"cfg.tier == {t.cpp}", [
            n.If(f"threads > tier_max_threads<{t.cpp}>()", [n.Stmt("return cudaErrorInvalidValue")]),
            n.If(f"{ws_bytes(t.cpp)} > 0", [
                n.Stmt("blocks = blocks < MAX_WORKSPACE_BLOCKS ? blocks : MAX_WORKSPACE_BLOCKS"),
                n.If(f"d_workspace == nullptr || workspace_bytes < size_t(blocks) * {ws_bytes(t.cpp)}",
                     [n.Stmt("return cudaErrorInvalidValue")]),
            ]),
            n.Stmt(f"GRID_LAUNCH((gravity_compensation_kernel<T, {t.cpp}>), blocks, threads, "
                   f"({PFX}_SMEM_BYTES<T, {t.cpp}>()), stream, d_tau, d_q, NUM_POS, "
                   "(const robotModel<T> *)nullptr, g, num_timesteps, d_workspace)"),
            n.Stmt("return cudaPeekAtLastError()"),
        ]) for t in Tier]
        attr_blocks = [n.Block("", [
            n.Stmt(f"const size_t bytes = {PFX}_SMEM_BYTES<T, {t.cpp}>()"),
            n.If("bytes > size_t(cap)", [n.Stmt("return cudaErrorInvalidValue")]),
            n.Stmt(f"cudaError_t err = cudaFuncSetAttribute(gravity_compensation_kernel<T, {t.cpp}>, "
                   "cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes))"),
            n.If("err != cudaSuccess", [n.Stmt("return err")]),
        ]) for t in Tier]
        return [
            n.Function(
                "__host__ int gravity_compensation_resolve_layout(int num_timesteps, int layout)",
                [n.Stmt("if (layout != LAYOUT_AUTO) return layout"),
                 n.Stmt(f"return num_timesteps >= {PFX}_PER_STATE_MIN_N ? LAYOUT_PER_STATE : LAYOUT_BLOCK")],
                doc="The layout for a batch: the measured crossover decides LAYOUT_AUTO.",
            ),
            n.Function(
                "__host__ cudaError_t init_grid_kernel_attr_gravity_compensation_checked()",
                [n.Stmt("const int cap = grid_get_max_dynamic_shared_memory_bytes()"), *attr_blocks,
                 n.Stmt("return cudaSuccess")],
                template="template <typename T>",
                doc="Opts every tier's kernel into the shared memory it needs, checked against the queried cap.",
            ),
            n.Function(
                "__host__ size_t gravity_compensation_workspace_bytes(int num_timesteps, "
                "LaunchConfig cfg = LaunchConfig())",
                [
                    n.If("gravity_compensation_resolve_layout(num_timesteps, cfg.layout) == LAYOUT_PER_STATE",
                         [n.Stmt("return 0")]),
                    n.Stmt("int blocks = cfg.blocks > 0 ? cfg.blocks : num_timesteps"),
                    n.Stmt("blocks = blocks < MAX_WORKSPACE_BLOCKS ? blocks : MAX_WORKSPACE_BLOCKS"),
                    n.Stmt(f"const size_t per_block = cfg.tier == TIER_SHARED ? {ws_bytes('TIER_SHARED')} : "
                           f"(cfg.tier == TIER_LITE ? {ws_bytes('TIER_LITE')} : {ws_bytes('TIER_MINIMAL')})"),
                    n.Stmt("return per_block * size_t(blocks)"),
                ],
                template="template <typename T>",
                doc="Global workspace a launch of this batch and config needs.",
            ),
            n.Function(
                "__host__ cudaError_t gravity_compensation_launch(T *d_tau, const T *d_q, const T *h_gravity, "
                "const int num_timesteps, LaunchConfig cfg, T *d_workspace, size_t workspace_bytes, "
                "cudaStream_t stream)",
                [
                    n.If("num_timesteps <= 0", [n.Stmt("return cudaSuccess")]),
                    n.Stmt("const Gravity<T> g = h_gravity == nullptr ? Gravity<T>() : "
                           "Gravity<T>(h_gravity[0], h_gravity[1], h_gravity[2])"),
                    n.If("gravity_compensation_resolve_layout(num_timesteps, cfg.layout) == LAYOUT_PER_STATE", [
                        n.Stmt(f"const int threads = cfg.threads > 0 ? cfg.threads : {PFX}_PER_STATE_THREADS"),
                        n.If(f"threads > {PFX}_PER_STATE_THREADS", [n.Stmt("return cudaErrorInvalidValue")]),
                        n.Stmt("const int blocks = cfg.blocks > 0 ? cfg.blocks : (num_timesteps + threads - 1) / threads"),
                        n.Stmt("GRID_LAUNCH((gravity_compensation_per_state_kernel<T>), blocks, threads, 0, stream, "
                               "d_tau, d_q, NUM_POS, g, num_timesteps)"),
                        n.Stmt("return cudaPeekAtLastError()"),
                    ]),
                    n.Stmt("static const cudaError_t attr = init_grid_kernel_attr_gravity_compensation_checked<T>()"),
                    n.If("attr != cudaSuccess", [n.Stmt("return attr")]),
                    n.Stmt("const int threads = cfg.threads > 0 ? cfg.threads : MAX_PERF_LEVEL_THREADS"),
                    n.Stmt("int blocks = cfg.blocks > 0 ? cfg.blocks : num_timesteps"),
                    *tiers,
                    n.Stmt("return cudaErrorInvalidValue"),
                ],
                template="template <typename T>",
                doc=("The launch convention (grid_core.emit.emitter): outputs, inputs, params, then the batch,\n"
                     "the config and the workspace.  Device pointers, contiguous (N, NUM_POS) / (N, NUM_VEL);\n"
                     "h_gravity: 3 host values or nullptr for (0, 0, -9.81).  Asynchronous on stream."),
            ),
        ]

    def host_wrapper(self, ctx: EmitContext) -> list:
        return [n.Function(
            "__host__ void gravity_compensation(gridData<T> *hd_data, const robotModel<T> *d_robotModel, "
            "const Gravity<T> gravity, const int num_timesteps, const dim3 block_dimms, const dim3 thread_dimms, "
            "cudaStream_t *streams)",
            [
                n.Stmt("constexpr int stride = NUM_POS + NUM_VEL"),
                n.Stmt("gpuErrchk(cudaMemcpyAsync(hd_data->d_q_qd, hd_data->h_q_qd, size_t(stride) * num_timesteps "
                       "* sizeof(T), cudaMemcpyHostToDevice, streams[0]))"),
                n.If("gravity_compensation_resolve_layout(num_timesteps, LAYOUT_AUTO) == LAYOUT_PER_STATE", [
                    n.Stmt(f"const int threads = {PFX}_PER_STATE_THREADS"),
                    n.Stmt("const int blocks = (num_timesteps + threads - 1) / threads"),
                    n.Stmt("GRID_LAUNCH((gravity_compensation_per_state_kernel<T>), blocks, threads, 0, streams[0], "
                           "hd_data->d_tau_g, hd_data->d_q_qd, stride, gravity, num_timesteps)"),
                ], [
                    n.Stmt("static const cudaError_t attr = init_grid_kernel_attr_gravity_compensation_checked<T>()"),
                    n.Stmt("gpuErrchk(attr)"),
                    n.Stmt(f"gpuErrchk(grid_ensure_workspace(hd_data, {PFX}_WORKSPACE_BYTES<T, TIER_SHARED>() * "
                           "block_dimms.x))"),
                    n.Stmt(f"GRID_LAUNCH((gravity_compensation_kernel<T, TIER_SHARED>), block_dimms, thread_dimms, "
                           f"({PFX}_SMEM_BYTES<T, TIER_SHARED>()), streams[0], hd_data->d_tau_g, hd_data->d_q_qd, "
                           "stride, d_robotModel, gravity, num_timesteps, hd_data->d_workspace)"),
                ]),
                n.Stmt("gpuErrchk(cudaPeekAtLastError())"),
                n.Stmt("gpuErrchk(cudaDeviceSynchronize())"),
                n.Stmt("gpuErrchk(cudaMemcpy(hd_data->h_tau_g, hd_data->d_tau_g, size_t(NUM_VEL) * num_timesteps * "
                       "sizeof(T), cudaMemcpyDeviceToHost))"),
            ],
            template="template <typename T>",
            doc=("Host layer: copies the configurations of hd_data->h_q_qd ([q | qd] per state; qd is not\n"
                 "read) to the device, launches, copies the joint forces back into hd_data->h_tau_g."),
        )]

    def emit(self, ctx: EmitContext) -> list:
        min_n = int(ctx.tuning.get("per_state_min_n", self.DEFAULT_PER_STATE_MIN_N))
        source = "measured on the GPU" if "per_state_min_n" in ctx.tuning else "default, not yet measured"
        return [
            *arena_emit.size_constants(ctx.plan, PFX),
            n.Comment(f"Batches of at least this many states use the per-state layout ({source})."),
            n.Stmt(f"static constexpr int {PFX}_PER_STATE_MIN_N = {min_n}"),
            n.Stmt(f"static constexpr int {PFX}_PER_STATE_THREADS = {self.PER_STATE_THREADS}"),
            n.Blank(), *self.inner(ctx),
            n.Blank(), *self.device(ctx),
            n.Blank(), *self.kernel(ctx),
            n.Blank(), *self.per_state(ctx),
            n.Blank(), *self.launcher(ctx),
            n.Blank(), *self.host_wrapper(ctx),
        ]


class GravityCompensation(Algorithm):
    name = "gravity_compensation"
    summary = "joint forces tau_g = ID(q, 0, 0) that hold the configuration q against gravity"
    math = r"""
Inverse dynamics at rest: with :math:`\dot q = \ddot q = 0` every velocity vanishes and

.. math::

   a_i = X_i a_{\lambda(i)}, \quad a_0 = -a_g, \quad f_i = I_i a_i, \qquad
   \tau_{g,i} = S_i^T f_i, \quad f_{\lambda(i)} \mathrel{+}= X_i^T f_i,

so :math:`\tau_g(q) = \mathrm{ID}(q, 0, 0)`, the gravity term :math:`g(q)` of
:math:`M(q)\ddot q + C(q, \dot q)\dot q + g(q) = \tau`.
"""
    depends_on = ("inverse_dynamics",)
    review = ParallelismReview(
        P1=done("inherited from the composed inverse_dynamics_inner: level-batched sweeps, the bodies of a "
                "level in parallel (or one body per step where the GPU A/B measured that faster)"),
        P2=done("the joint forces are a fan-out over velocity indices inside the composed inner; the "
                "zero band is filled by a fan-out over velocity indices"),
        P3=done("the configuration-dependent transform data is hoisted out of the sweep into one "
                "parallel pass over bodies (load_update_XImats) before the composed inner"),
        P4=todo("qd = qdd = 0 are known zeros that the composed RNEA still reads and multiplies "
                "(IEEE rules keep the compiler from folding x * 0); a specialised sweep with v = 0 "
                "(a_i = X_i a_parent, f_i = I_i a_i) would drop the velocity products; the example keeps "
                "the composition, the simpler code"),
        notes="composes inverse_dynamics by interface (inverse_dynamics_inner, inverse_dynamics_state); "
              "two layouts, the launcher picks by GRAVITY_COMPENSATION_PER_STATE_MIN_N",
    )
    emitter = GravityCompensationEmitter
    tolerances = (
        ("reference vs grid_core.Reference(robot).inverse_dynamics(q, 0, 0)", "float64", 1e-12),
        ("generated code vs reference (host-emulated, both layouts, every tier, deepest spill)", "float64", 1e-9),
        ("generated code vs reference (host-emulated, both layouts, every tier, deepest spill)", "float32", 1e-4),
    )
    """Read by the documentation (grid_core.sphinxext); the plugin's tests hold these."""

    def inputs(self, robot: Robot):
        return (
            Port("q", (robot.nq,), "joint configuration"),
            Port("gravity", (3,), "gravity vector in the world frame", kind="param", default=DEFAULT_GRAVITY),
        )

    def outputs(self, robot: Robot, **options):
        return (Port("tau_g", (robot.nv,), "joint forces that hold q against gravity"),)

    def reference(self, ctx, q, gravity=DEFAULT_GRAVITY):
        zero = np.zeros(ctx.robot.nv)
        return ctx.inverse_dynamics(q, zero, zero, None, gravity)

    def arenas(self, robot: Robot, options=None):
        return (
            ArenaRegion("q", robot.nq, "joint configuration (kernel input)", spillable=False),
            ArenaRegion("tau_g", robot.nv, "joint forces (kernel output)", spillable=False),
            ArenaRegion("zero", robot.nv, "zeros read as qd and qdd by the composed inverse dynamics"),
            ArenaRegion("XI", ss.xi_size(robot), "configuration-dependent transform data"),
            ArenaRegion("vaf", 18 * robot.num_bodies, "spatial velocity, acceleration and force of every body"),
        )

    def spill_rungs(self, robot: Robot, options=None):
        return (
            SpillRung(0, "all in shared memory"),
            SpillRung(1, "sweep state in global", {"vaf"}, "the v/a/f band goes to d_workspace"),
            SpillRung(2, "all scratch in global", {"vaf", "XI", "zero"}, "every scratch region in d_workspace"),
        )


@hookimpl
def grid_register_algorithms():
    return [GravityCompensation]
