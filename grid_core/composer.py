"""Assembles the header: banner, prelude, robot constants and tables, the shared
transform helper, gridData, then each selected algorithm in dependency order.

The composer knows no particular algorithm: it reaches each plugin through the
registry by name, plans its arena (:mod:`grid_core.arena`) and asks its emitter
for nodes (:mod:`grid_core.emit.emitter`).
"""

from __future__ import annotations

import importlib.resources

import attrs

from .arena import ArenaPlan, Tier, expand_rungs, select_rungs, target_from_env
from .emit import nodes as n
from .emit import spatial_steps as ss
from .emit.emitter import EmitContext, GridDataField
from .emit.layers import Layers, mapped_rule_function
from .emit.expr import Scope
from .emit.printer import render
from .algorithm import generation_values, option_ports
from .errors import CodegenError, UnsupportedFeatureError
from .hooks import registry as default_registry
from .loader import load_robot
from .model import JointType, Robot
from .model.frames import resolve_frames
from .model.spatial import pose_of

GENERATOR_VERSION = "0.1.0"

def _freeze_options(value) -> tuple:
    """``{algorithm: {option: value}}`` as a sorted tuple (hashable, deterministic)."""
    if not value:
        return ()
    if isinstance(value, tuple):
        return value
    return tuple(sorted((str(k), tuple(sorted(dict(v).items()))) for k, v in dict(value).items()))


def _freeze_frames(value) -> tuple[str, ...] | None:
    """Frame names as a tuple (a single name is one frame; a :class:`~grid_core.model.Frame` is
    taken by its name); None stays None (the default choice)."""
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else tuple(value)
    return tuple(getattr(x, "name", x) for x in names)


@attrs.frozen
class GenerateOptions:
    """Everything besides robot and algorithms that changes the header's bytes."""

    namespace: str = "grid"
    target_shared_mem_bytes: int | None = attrs.field(factory=target_from_env)
    """Shared-memory budget of the rung selection (None: the sm_90 opt-in cap);
    ``GRID_CUDA_TARGET_SHARED_MEM_BYTES`` sets it, a small value forces the deepest rung."""
    tuning: bool = True
    """Use the measured per-robot tuning (crossovers, sweep-form winners) baked into plugins."""
    algorithm_options: tuple = attrs.field(default=(), converter=_freeze_options)
    """Per-algorithm knobs, ``{name: {option: value}}``: each emitter's ``Options`` (e.g.
    ``{"inverse_dynamics": {"p1": "bodies"}}``), and the values of its option ports other than
    ``frames``, fixed at generation time (``{"operational_space_inertia": {"rows": "linear"}}``)."""
    frames: tuple[str, ...] | None = attrs.field(default=None, converter=_freeze_frames)
    """The frames of the end-effector family (the algorithms with a ``frames`` option port), fixed
    at generation time: their outputs are sized for them and their tables baked (None: the
    default choice of :func:`grid_core.model.frames.resolve_frames`)."""

    def __attrs_post_init__(self):
        if not self.namespace.isidentifier():
            raise CodegenError(f"namespace '{self.namespace}' is not a C++ identifier")

    def options_of(self, algorithm: str) -> dict:
        return dict(dict(self.algorithm_options).get(algorithm, ()))

    def key(self) -> dict:
        return attrs.asdict(self)


_JOINT_CODES = {JointType.REVOLUTE: 0, JointType.CONTINUOUS: 0, JointType.PRISMATIC: 1, JointType.FLOATING: 2}


def prelude_text() -> str:
    return importlib.resources.files("grid_core.emit").joinpath("prelude.cuh").read_text()


def resolve_algorithms(names, reg=None) -> list:
    """The selected algorithms plus everything they depend on, dependencies first (``names``
    None: every emitted algorithm of the default set, ``Emitter.in_default_set``)."""
    reg = reg or default_registry()
    if names is None:
        names = [a for a, alg in reg.algorithms.items() if alg.has_emitter() and alg.emitter.in_default_set]
    order: list = []
    seen: set[str] = set()

    def visit(name, stack=()):
        if name in stack:
            raise CodegenError(f"dependency cycle: {' -> '.join(stack + (name,))}")
        if name in seen:
            return
        alg = reg.algorithm(name)
        for dep in alg.depends_on:
            visit(dep, stack + (name,))
        seen.add(name)
        order.append(alg)

    for name in names:
        visit(name)
    return order


def tuning_for(alg, robot: Robot) -> dict:
    """Measured numbers for (algorithm, robot), from the plugin's ``<module>.tuning.json``.

    Entries are keyed by robot name and checked against the robot digest, so a
    robot that changed falls back to the defaults instead of a stale measurement.
    """
    from .resources import load_tuning

    data = load_tuning(alg)
    entry = data.get("robots", {}).get(robot.name, {})
    if entry and entry.get("digest", "")[:16] != robot.digest[:16]:
        return {}
    return entry


# -- robot sections ------------------------------------------------------------------


def robot_constants(robot: Robot) -> list:
    topo = robot.topology
    return [
        n.Comment(
            f"Robot '{robot.name}': {robot.num_bodies} bodies, nq = {robot.nq}, nv = {robot.nv}, "
            f"{'floating' if robot.floating_base else 'fixed'} base."
        ),
        n.Stmt(f"static constexpr int NUM_BODIES = {robot.num_bodies}"),
        n.Stmt(f"static constexpr int NUM_JOINTS = {robot.num_bodies}"),
        n.Stmt(f"static constexpr int NUM_POS = {robot.nq}"),
        n.Stmt(f"static constexpr int NUM_VEL = {robot.nv}"),
        n.Stmt(f"static constexpr bool FLOATING_BASE = {'true' if robot.floating_base else 'false'}"),
        n.Stmt(f"static constexpr int NUM_LEVELS = {topo.num_levels}"),
        n.Stmt(f"static constexpr int MAX_LEVEL_WIDTH = {topo.max_level_width}"),
        n.Stmt(f"static constexpr int NUM_BRANCHES = {len(topo.branches)}"),
        n.Stmt(f"static constexpr int XI_SIZE = {ss.xi_size(robot)}"),
    ]


def topology_tables(robot: Robot) -> list:
    topo = robot.topology
    b = robot.bodies
    return [
        n.Comment("Topology tables (P1 level batching and P4 topology helpers bake these in)."),
        n.ConstArray("int", "PARENT", topo.parent, comment="parent body of each body (-1: world)"),
        n.ConstArray("int", "DEPTH", topo.depth, comment="BFS level of each body"),
        n.ConstArray("int", "LEVEL_OFFSETS", topo.level_offsets, comment="start of each level in BFS_ORDER"),
        n.ConstArray("int", "LEVEL_WIDTHS", topo.level_widths, comment="bodies per level"),
        n.ConstArray("int", "BFS_ORDER", topo.bfs_order, comment="bodies sorted by level"),
        n.ConstArray("int", "BRANCH_OF", topo.branch_of, comment="branch group (unbranched chain) of each body"),
        n.ConstArray("int", "Q_INDEX", [x.q_index for x in b], comment="first q coordinate of each body"),
        n.ConstArray("int", "V_INDEX", [x.v_index for x in b], comment="first v coordinate of each body"),
        n.ConstArray(
            "int", "JOINT_TYPE", [_JOINT_CODES[x.jtype] for x in b],
            comment="0 revolute/continuous, 1 prismatic, 2 free-flyer",
        ),
        n.ConstArray("int", "XI_OFFSET", [s.offset for s in ss.xi_layout(robot)],
                     comment="start of each body's slot in the compact transform data (XI)"),
    ]


def model_tables(robot: Robot) -> list:
    xtree, inertia, axis = [], [], []
    for body in robot.bodies:
        xtree.extend(body.Xtree.ravel())
        inertia.extend(body.inertia.ravel())
        axis.extend(body.axis)
    return [
        n.Comment("Model tables, row-major 6x6 per body (Featherstone: motion = [angular; linear]).\n"
                  "The kernels fold these constants into their code; robotModel<T> carries them\n"
                  "to the device for code of your own."),
        n.ConstArray("double", "XTREE", xtree, per_line=6, comment="parent frame -> joint frame at q = 0"),
        n.ConstArray("double", "INERTIA", inertia, per_line=6, comment="spatial inertia in the body frame"),
        n.ConstArray("double", "AXIS", axis, per_line=3, comment="joint axis in the joint frame"),
    ]


def frame_tables(frames) -> list:
    """The frames chosen at generation time (the end-effector family's outputs are in this order):
    each one's body and its constant placement in that body (the kernels fold these; the tables
    are for code of your own)."""
    lines = "\n".join(f"  {k}: {f.name} ({f.kind.replace('_', ' ')}, body {f.body})" for k, f in enumerate(frames))
    placement = [x for f in frames for x in pose_of(f.X)[:3].ravel()]
    return [
        n.Comment(f"Frames chosen at generation time (`grid build --frame NAME`), the order of the end-effector\n"
                  f"outputs:\n{lines}"),
        n.Stmt(f"static constexpr int NUM_FRAMES = {len(frames)}"),
        n.ConstArray("int", "FRAME_BODY", [f.body for f in frames], comment="body each frame is fixed to (-1: the world)"),
        n.ConstArray("double", "FRAME_PLACEMENT", placement, per_line=4,
                     comment="the frame's pose in its body, [R | p] row-major 3x4 (R: frame -> body coordinates)"),
    ]


def runtime_support(max_perf_threads: int) -> list:
    lite = min(2 * max_perf_threads, 768)
    return [
        n.Comment("Resource tiers (seed 004): launch bounds and shared-memory profile of a kernel."),
        n.Raw("enum : int { TIER_SHARED = 0, TIER_LITE = 1, TIER_MINIMAL = 2 };"),
        n.Comment("Block size the block-cooperative layout is tuned for (a hint: any block size is correct)."),
        n.Stmt(f"static constexpr int MAX_PERF_LEVEL_THREADS = {max_perf_threads}"),
        n.Function(
            "__host__ __device__ constexpr int tier_max_threads()",
            [n.Stmt(f"return TIER == TIER_SHARED ? MAX_PERF_LEVEL_THREADS : (TIER == TIER_LITE ? {lite} : 1024)")],
            template="template <int TIER>",
        ),
        n.Blank(),
        n.Comment("Work layouts: one block per state (block-cooperative), or one thread per state."),
        n.Raw("enum : int { LAYOUT_AUTO = 0, LAYOUT_BLOCK = 1, LAYOUT_PER_STATE = 2 };"),
        n.Struct("LaunchConfig", [
            n.Stmt("int layout = LAYOUT_AUTO"),
            n.Stmt("int tier = TIER_SHARED"),
            n.Raw("int threads = 0;  // 0: the layout's default"),
            n.Raw("int blocks = 0;   // 0: enough for the batch"),
            n.Raw("// hint: coalesce global loads and stores through shared memory, for arrays in mapped"),
            n.Raw("// host memory, where every uncoalesced access is a bus transaction (the C ABI's host path)"),
            n.Raw("bool stage_io = false;"),
        ]),
        *mapped_rule_function(),
        n.Comment("Workspace slices are per block; spilled launches use at most this many blocks."),
        n.Stmt("static constexpr int MAX_WORKSPACE_BLOCKS = 2048"),
        n.Blank(),
        n.Comment("Gravity in the world frame; a scalar g means (0, 0, -g) as upstream's API does."),
        n.Struct("Gravity", [
            n.Stmt("T x, y, z"),
            n.Raw("__host__ __device__ Gravity(T g = T(9.81)) : x(0), y(0), z(-g) {}"),
            n.Raw("__host__ __device__ Gravity(T gx, T gy, T gz) : x(gx), y(gy), z(gz) {}"),
        ], template="template <typename T>"),
        n.Blank(),
        n.Comment("The device's opt-in shared memory per block, queried once (never assumed)."),
        n.Function("inline int grid_get_max_dynamic_shared_memory_bytes()", [
            n.Stmt("static int cap = -1"),
            n.If("cap < 0", [
                n.Stmt("int device = 0"),
                n.Stmt("cudaGetDevice(&device)"),
                n.If("cudaDeviceGetAttribute(&cap, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess",
                     [n.Stmt("cap = 48 * 1024")]),
            ]),
            n.Stmt("return cap"),
        ]),
        n.Comment("The device's SM count, queried once (at least 1)."),
        n.Function("inline int grid_get_multiprocessor_count()", [
            n.Raw("static const int sms = [] {\n"
                  "    int device = 0, count = 0;\n"
                  "    cudaGetDevice(&device);\n"
                  "    return cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) == cudaSuccess "
                  "&& count > 0 ? count : 1;\n"
                  "}();"),
            n.Stmt("return sms"),
        ]),
        n.Comment("Threads per block of a per-state launch of n states (a state a thread), at most max_threads:\n"
                  "ceil(n / SMs), a multiple of 32 from 32 on.  A batch too small to fill a block on every SM is\n"
                  "spread over all of them, so each SM issues and stores for ceil(n / SMs) states instead of a few\n"
                  "SMs for max_threads states each (the scattered stores of a state's outputs queue per SM).  The\n"
                  "host builds have no SMs: max_threads."),
        n.Function("inline int grid_spread_threads(int n, int max_threads)", [
            n.Raw("#ifdef GRID_HOST_EMULATION"),
            n.Stmt("return max_threads"),
            n.Raw("#else"),
            n.Stmt("const int sms = grid_get_multiprocessor_count()"),
            n.Stmt("int t = (n + sms - 1) / sms"),
            n.If("t > 32", [n.Stmt("t = (t + 31) / 32 * 32")]),
            n.Stmt("return t < 1 ? 1 : (t < max_threads ? t : max_threads)"),
            n.Raw("#endif"),
        ]),
        n.Comment("Threads per block (whole warps, at most max_threads) of a kernel whose every warp takes\n"
                  "warp_bytes of dynamic shared memory, chosen to keep the most warps resident on an SM (the\n"
                  "larger block at a tie): blocks of four 30 KB warps leave one block an SM where blocks of one\n"
                  "leave seven.  The occupancy query counts registers and each block's reserved shared memory.\n"
                  "The host builds have no SMs: max_threads."),
        n.Function("inline int grid_resident_block_threads(const void *kernel, int max_threads, size_t warp_bytes)", [
            n.Raw("#ifdef GRID_HOST_EMULATION"),
            n.Stmt("(void)kernel"),
            n.Stmt("(void)warp_bytes"),
            n.Stmt("return max_threads"),
            n.Raw("#else"),
            n.Stmt("int best = max_threads, most_warps = 0"),
            n.For("int t = 32", "t <= max_threads", "t += 32", [
                n.Stmt("int blocks = 0"),
                n.If("cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, t, size_t(t / 32) * warp_bytes) "
                     "!= cudaSuccess", [
                         n.Stmt("(void)cudaGetLastError()",
                                comment="a size the query refuses is skipped, its error not left for the launch's check"),
                         n.Stmt("continue")]),
                n.If("blocks * (t / 32) >= most_warps", [n.Stmt("most_warps = blocks * (t / 32)"), n.Stmt("best = t")]),
            ]),
            n.Stmt("return best"),
            n.Raw("#endif"),
        ]),
    ]


def robot_model_struct() -> list:
    return [
        n.Comment("The robot's constant tables in device memory, in precision T."),
        n.Struct("robotModel", [
            n.Stmt("T *d_XTREE"),
            n.Stmt("T *d_INERTIA"),
            n.Stmt("T *d_AXIS"),
            n.Stmt("int *d_PARENT"),
        ], template="template <typename T>"),
        n.Function("__host__ robotModel<T> *init_robotModel()", [
            n.Stmt("robotModel<T> h_model"),
            n.Stmt("T h_buf[36 * NUM_BODIES]"),
            n.Raw(
                "auto upload = [&h_buf](T **dst, const double *src, int count) {\n"
                "    for (int i = 0; i < count; ++i) h_buf[i] = static_cast<T>(src[i]);\n"
                "    gpuErrchk(cudaMalloc(dst, count * sizeof(T)));\n"
                "    gpuErrchk(cudaMemcpy(*dst, h_buf, count * sizeof(T), cudaMemcpyHostToDevice));\n"
                "};"
            ),
            n.Stmt("upload(&h_model.d_XTREE, XTREE, 36 * NUM_BODIES)"),
            n.Stmt("upload(&h_model.d_INERTIA, INERTIA, 36 * NUM_BODIES)"),
            n.Stmt("upload(&h_model.d_AXIS, AXIS, 3 * NUM_BODIES)"),
            n.Stmt("gpuErrchk(cudaMalloc(&h_model.d_PARENT, NUM_BODIES * sizeof(int)))"),
            n.Stmt("gpuErrchk(cudaMemcpy(h_model.d_PARENT, PARENT, NUM_BODIES * sizeof(int), cudaMemcpyHostToDevice))"),
            n.Stmt("robotModel<T> *d_model = nullptr"),
            n.Stmt("gpuErrchk(cudaMalloc(&d_model, sizeof(robotModel<T>)))"),
            n.Stmt("gpuErrchk(cudaMemcpy(d_model, &h_model, sizeof(robotModel<T>), cudaMemcpyHostToDevice))"),
            n.Stmt("return d_model"),
        ], template="template <typename T>"),
        n.Function("__host__ void close_robotModel(robotModel<T> *d_model)", [
            n.Stmt("robotModel<T> h_model"),
            n.Stmt("gpuErrchk(cudaMemcpy(&h_model, d_model, sizeof(robotModel<T>), cudaMemcpyDeviceToHost))"),
            n.Stmt("cudaFree(h_model.d_XTREE)"),
            n.Stmt("cudaFree(h_model.d_INERTIA)"),
            n.Stmt("cudaFree(h_model.d_AXIS)"),
            n.Stmt("cudaFree(h_model.d_PARENT)"),
            n.Stmt("cudaFree(d_model)"),
        ], template="template <typename T>"),
    ]


def ximats_helpers(robot: Robot) -> list:
    """The transform helper shared by every algorithm (placement-free: it writes where
    it is told; the inner that calls it has already chosen the placement)."""
    cases = []
    per_state = Scope("x")
    for body in robot.bodies:
        scope = Scope("x")
        ss.xi_update(scope, robot, body, lambda i: f"s_q[{i}]", lambda i: f"s_XI[{i}]")
        cases.append(n.Block(f"case {body.index}:", [*scope.stmts, n.Stmt("break")]))
        ss.xi_update(per_state, robot, body, lambda i: f"q[{i}]", lambda i: f"XI[{i}]")
    return [
        n.Comment(
            "XImats: the configuration-dependent part of every body transform, in the compact\n"
            "layout of XI_OFFSET (P4: sin/cos of a revolute joint, the displacement of a\n"
            "prismatic one, E and position of a free-flyer; the constant parts are folded into\n"
            "the algorithms).  Block-cooperative: one body per thread (P3: hoisted out of the\n"
            "sweeps).  The caller passes the s_XI its placement chose (never null) and syncs after."
        ),
        n.Function(
            "__device__ void load_update_XImats(T *s_XI, const T *s_q)",
            [
                n.Stmt("GRID_ASSERT(s_XI != nullptr)"),
                n.BlockStrideLoop("body", "NUM_BODIES", [n.Block("switch (body)", cases)]),
            ],
            template="template <typename T>",
        ),
        n.Comment("The same for one state in registers (per-state layout)."),
        n.Function(
            "__device__ __forceinline__ void compute_XImats_state(T *XI, const T *q)",
            per_state.stmts,
            template="template <typename T>",
        ),
    ]


INPUT_FIELDS = (
    ("q_qd", lambda r: r.nq + r.nv, "[q | qd] per state (USE_COMPRESSED_MEM)"),
    ("q_qd_u", lambda r: r.nq + 2 * r.nv, "[q | qd | u] per state (u: qdd or tau, by algorithm)"),
    ("u", lambda r: r.nv, "the third input, qdd or tau by algorithm (USE_COMPRESSED_MEM)"),
    ("f_ext", lambda r: 6 * r.num_bodies, "external force per body, body frame, [force; moment]"),
)


def grid_data(robot: Robot, fields: list[GridDataField]) -> list:
    all_fields = [GridDataField(nm, size(robot), doc) for nm, size, doc in INPUT_FIELDS]
    for f in fields:  # algorithms with the same output (forward dynamics and ABA: qdd) share its buffer
        same = next((g for g in all_fields if g.name == f.name), None)
        if same is None:
            all_fields.append(f)
        elif same.elements != f.elements:
            raise CodegenError(f"gridData field '{f.name}': {same.elements} and {f.elements} values per state")
        else:
            all_fields[all_fields.index(same)] = GridDataField(f.name, f.elements, f"{same.doc}; {f.doc}")
    members = []
    for f in all_fields:
        members.append(n.Stmt(f"T *h_{f.name} = nullptr", comment=f"{f.elements} per state: {f.doc}"))
        members.append(n.Stmt(f"T *d_{f.name} = nullptr"))
    members += [
        n.Stmt("bool use_f_ext = false", comment="read h_f_ext (and d_f_ext) when set"),
        n.Stmt("int transfer = 0", comment="host layer: 0 by batch size, 1 copy engine, 2 mapped memory, 3 mapped, staged"),
        n.Stmt("T *d_workspace = nullptr"),
        n.Stmt("size_t workspace_bytes = 0"),
        n.Stmt("int capacity = 0", comment="states the buffers hold"),
    ]
    alloc = []
    for f in all_fields:
        alloc.append(n.Stmt(f"gpuErrchk(cudaMallocHost(&hd->h_{f.name}, size_t({f.elements}) * N * sizeof(T)))"))
        alloc.append(n.Stmt(f"gpuErrchk(cudaMalloc(&hd->d_{f.name}, size_t({f.elements}) * N * sizeof(T)))"))
    free = []
    for f in all_fields:
        free.append(n.Stmt(f"cudaFreeHost(hd->h_{f.name})"))
        free.append(n.Stmt(f"cudaFree(hd->d_{f.name})"))
    return [
        n.Comment("Host and device buffers for the host (layer 3) wrappers, for N states."),
        n.Struct("gridData", members, template="template <typename T>"),
        n.Function(
            "__host__ gridData<T> *init_gridData(int N)",
            [n.Stmt("gridData<T> *hd = new gridData<T>()"), n.Stmt("hd->capacity = N"), *alloc,
             n.Stmt("return hd")],
            template="template <typename T>",
        ),
        n.Function(
            "__host__ void close_grid(gridData<T> *hd)",
            [*free, n.Stmt("cudaFree(hd->d_workspace)"), n.Stmt("delete hd")],
            template="template <typename T>",
        ),
        n.Stmt("static constexpr int NUM_STREAMS = 3"),
        n.Function(
            "__host__ cudaStream_t *init_grid_streams()",
            [
                n.Stmt("cudaStream_t *streams = new cudaStream_t[NUM_STREAMS]"),
                n.For("int i = 0", "i < NUM_STREAMS", "++i", [n.Stmt("gpuErrchk(cudaStreamCreate(&streams[i]))")]),
                n.Stmt("return streams"),
            ],
            template="template <typename T>",
        ),
        n.Function(
            "__host__ inline void close_grid_streams(cudaStream_t *streams)",
            [n.For("int i = 0", "i < NUM_STREAMS", "++i", [n.Stmt("cudaStreamDestroy(streams[i])")]),
             n.Stmt("delete[] streams")],
        ),
        n.Function(
            "__host__ cudaError_t grid_ensure_workspace(gridData<T> *hd, size_t bytes)",
            [
                n.If("bytes <= hd->workspace_bytes", [n.Stmt("return cudaSuccess")]),
                n.Stmt("cudaFree(hd->d_workspace)"),
                n.Stmt("hd->workspace_bytes = 0"),
                n.Stmt("cudaError_t err = cudaMalloc(&hd->d_workspace, bytes)"),
                n.If("err == cudaSuccess", [n.Stmt("hd->workspace_bytes = bytes")]),
                n.Stmt("return err"),
            ],
            template="template <typename T>",
        ),
    ]


# -- assembly ------------------------------------------------------------------------


class Composer:
    """The layers of every selected algorithm for one robot, built on demand and shared:
    the handle an orchestrator gets for another algorithm's inner (:meth:`layers`) is the
    same object that emits that algorithm, unless the orchestrator fixes that algorithm's options
    (:attr:`~grid_core.emit.emitter.Emitter.compose_options`) to others than the header's: then it
    gets a variant, built once per set of options and emitted after the algorithm's own layers
    (:meth:`variants`)."""

    def __init__(self, robot: Robot, opts: GenerateOptions, reg=None, max_threads: int = 32):
        self.robot, self.opts, self.reg = robot, opts, reg or default_registry()
        self.max_threads = max_threads
        self._layers: dict = {}
        self._variants: dict[str, list] = {}
        self._stack: list[str] = []

    def emitter(self, name: str):
        alg = self.reg.algorithm(name)
        if not alg.has_emitter():
            raise CodegenError(f"algorithm '{name}' has no GPU emitter yet (reference only)")
        return alg, alg.emitter(alg)

    def plan(self, name: str) -> ArenaPlan:
        return self.layers(name).plan

    def variants(self, name: str) -> list[Layers]:
        """The variants of algorithm ``name`` built so far (orchestrators fixed other options on it),
        in the order they were built."""
        return list(self._variants.get(name, ()))

    def _options(self, name: str, alg, em, fixed: dict, tuning: dict):
        ports = option_ports(alg, self.robot)  # values of the option ports, not emitter knobs
        given = {k: v for k, v in self.opts.options_of(name).items() if k not in ports}
        return em.resolve_options(em.make_options({**given, **fixed}), tuning)

    def layers(self, name: str, fixed: dict | None = None) -> Layers:
        """The layers of algorithm ``name``: the header's, or (``fixed``: options a caller fixes on
        it) a variant where those options resolve to others than the header's."""
        key = (name, tuple(sorted((fixed or {}).items())))
        if key in self._layers:
            return self._layers[key]
        if name in self._stack:
            raise CodegenError(f"composition cycle: {' -> '.join(self._stack + [name])}")
        alg, em = self.emitter(name)
        tuning = tuning_for(alg, self.robot) if self.opts.tuning else {}
        options = self._options(name, alg, em, fixed or {}, tuning)
        if fixed and options == self._options(name, alg, em, {}, tuning):
            self._layers[key] = self.layers(name)
            return self._layers[key]
        self._stack.append(name)
        try:
            def callee(c: str) -> Layers:  # the inners it composes, with the options it fixes on them
                got = self.layers(c, em.compose_options.get(c))
                if got.fixed_options and name not in got.callers:
                    got.callers.append(name)
                return got

            composed = Layers.composed_names(em, options, tuning)
            values = generation_values(alg, self.robot, self.opts)
            regions = Layers.regions(alg, self.robot, options, em, callee, composed, values)
            rungs = expand_rungs(alg.name, alg.spill_rungs(self.robot, options), regions,
                                 {c: callee(c).plan for c in composed}, declared=em.composes)
            plan = select_rungs(alg.name, regions, rungs, self.opts.target_shared_mem_bytes)
            ctx = EmitContext(robot=self.robot, algorithm=alg, plan=plan, options=self.opts, tuning=tuning,
                              max_perf_threads=self.max_threads, algorithm_options=options, values=values)
            layers = self._layers[key] = Layers(ctx, em, callee, fixed=dict(key[1]))
            if fixed:
                self._variants.setdefault(name, []).append(layers)
        finally:
            self._stack.pop()
        return layers


def shared_helpers(emitters, groups=()) -> list:
    """The framework's helper groups the selected emitters declare
    (:attr:`~grid_core.emit.emitter.Emitter.shared_helpers`) and ``groups`` (their layers' for
    this robot, :attr:`~grid_core.emit.layers.Layers.helper_groups`), each once, in a fixed order."""
    from .emit.lie_steps import SHARED_HELPERS

    wanted = {g for e in emitters for g in e.shared_helpers} | set(groups)
    unknown = wanted - set(SHARED_HELPERS)
    if unknown:
        raise CodegenError(f"unknown shared helper group(s) {sorted(unknown)} (known: {', '.join(SHARED_HELPERS)})")
    return [node for g in SHARED_HELPERS if g in wanted for node in (*SHARED_HELPERS[g](), n.Blank())]


def plan_arena(alg, robot: Robot, options: GenerateOptions) -> ArenaPlan:
    """The arena plan of ``alg`` for ``robot`` (its I/O, XImats, own and composed scratch)."""
    return Composer(robot, options).plan(alg.name)


def _round_warp(x: int) -> int:
    return max(32, min(512, -(-x // 32) * 32))


def generate(robot, algorithms=None, *, registry=None, **options) -> str:
    """The header for ``robot`` and the selected algorithms (default: every one that emits, but those
    left out of the default set, such as ``idsva_so``: name them to build them).

    ``options`` are :class:`GenerateOptions`; ``registry`` another plugin registry than
    the installed one (tests).  Same inputs -> byte-identical output.
    """
    robot = load_robot(robot)
    opts = GenerateOptions(**options)
    reg = registry or default_registry()
    selected = resolve_algorithms(algorithms, reg)
    for alg in selected:
        if not alg.has_emitter():
            raise CodegenError(f"algorithm '{alg.name}' has no GPU emitter yet (reference only)")
        alg.check_robot(robot)
    emitters = [alg.emitter(alg) for alg in selected]
    max_threads = _round_warp(max([e.block_threads_hint(robot) for e in emitters], default=32))
    if opts.frames is not None:  # an unknown name fails here, whatever the algorithms
        resolve_frames(robot, opts.frames, "generate")
    fields: list[GridDataField] = []
    chosen = []  # the frames of the algorithms that take them (the same for each)
    for alg, e in zip(selected, emitters):
        values = generation_values(alg, robot, opts)
        fields.extend(e.grid_data_fields(robot, values))
        chosen += [values["frames"]] if "frames" in values else []
    composer = Composer(robot, opts, reg, max_threads)
    built = [composer.layers(alg.name) for alg in selected]  # and the variants their callers fix
    algo_nodes = []
    for alg, layers in zip(selected, built):
        bar = "-" * max(4, 86 - len(alg.name))
        algo_nodes += [n.Blank(), n.Comment(f"---- {alg.name} {bar}"), n.Blank(), *layers.emit()]
        for v in composer.variants(alg.name):  # after the algorithm: its callees are emitted by then
            fixed = ", ".join(f"{k} = {x}" for k, x in v.fixed_options.items())
            algo_nodes += [n.Blank(), n.Comment(f"---- {v.name}: {alg.name} with {fixed}, as {', '.join(v.callers)} "
                                                f"composes it (its inner and per-state function only)"),
                           n.Blank(), *v.emit_composed()]
    body = [
        *robot_constants(robot),
        n.Blank(),
        *topology_tables(robot),
        n.Blank(),
        *model_tables(robot),
        n.Blank(),
        *([*frame_tables(chosen[0]), n.Blank()] if chosen else []),
        *runtime_support(max_threads),
        n.Blank(),
        *robot_model_struct(),
        n.Blank(),
        *ximats_helpers(robot),
        n.Blank(),
        *shared_helpers(emitters, [g for x in built for v in (x, *composer.variants(x.alg.name))
                                   for g in v.helper_groups]),
        *grid_data(robot, fields),
        *algo_nodes,
    ]
    names = ", ".join(a.name for a in selected) or "none"
    header = [
        n.Comment(
            f"grid.cuh: rigid-body dynamics for robot '{robot.name}' ({robot.nv} dof), generated by "
            f"GRiD {GENERATOR_VERSION}.\n"
            f"Algorithms: {names}.\n"
            "Do not edit: regenerate with `grid build`.  Compile with nvcc -std=c++17, or as host\n"
            "C++17 with GRID_HOST_EMULATION defined.\n"
            f"robot digest: {robot.digest[:16]}"
        ),
        n.Raw("#pragma once"),
        n.Blank(),
        n.Raw(prelude_text()),
        n.Blank(),
        n.Namespace(opts.namespace, body),
    ]
    return render(header)


__all__ = ["GENERATOR_VERSION", "Composer", "GenerateOptions", "generate", "resolve_algorithms", "plan_arena", "Tier",
           "UnsupportedFeatureError"]
